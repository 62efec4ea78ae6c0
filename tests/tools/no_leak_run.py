#!/usr/bin/env python3
# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Run site.yml and diagnose.yml at -vvv the way AWX runs them, and fail if the API key shows up anywhere.

AWX runs playbooks through ansible-runner and stores every job event (the ``awx_display`` callback's
``job_events/*.json``: task arguments, results, stdout) in its database, where anyone who can read the job can
see them. This script does the same with ansible-runner's Python API:

1. a fresh random API key goes into ansible-runner's ``env/extravars`` (as AWX passes survey answers and
   credentials: a file, not the command line), together with a diagnostics destination of our own;
2. ``site.yml`` runs at verbosity 3 (the key changes, so every task that handles it really runs: the env file,
   the restart, the health gate with the key), then ``diagnose.yml`` at verbosity 3;
3. the key is searched, as text and in the three base64 alignments (``slurp`` and ``b64encode`` output), in the
   runner's stdout, every job event and every file diagnostics gathered (the ``.tar.gz`` included).

Usage (from the Molecule scenario's verify, or against any inventory of a deployed node)::

    python tests/tools/no_leak_run.py --inventory INVENTORY [--playbook-dir playbooks] [--limit HOST]
        [--extra-vars-file VARS.json]

``--extra-vars-file``: more extra variables for both runs (a JSON object), merged under the key and the
diagnostics destination, which it cannot replace; the Molecule scenario changes a vLLM option with it, so that the
run's one restart also shows that an option change restarts the service.

Exit 0: both playbooks passed and the key is nowhere. Exit 1: a playbook failed, or the key was found (the
places are printed, never the key's context).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import sys
import tarfile
import tempfile


def key_forms(key):
    """The key as text and in every base64 alignment it can take inside a longer base64 string."""
    raw = key.encode()
    forms = {raw}
    for pad in range(3):
        enc = base64.b64encode(b"\0" * pad + raw)
        # drop the characters that depend on the padding bytes or on what follows the key
        start = 4 if pad else 0
        forms.add(enc[start:len(enc) - 4])
    return [form for form in forms if len(form) >= 12]


def find_key(root, forms):
    """Paths under ``root`` (files, and members of .tar.gz files) whose bytes hold one of ``forms``."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            with open(path, "rb") as handle:
                data = handle.read()
            if any(form in data for form in forms):
                found.append(path)
            if name.endswith((".tar.gz", ".tgz")):
                with tarfile.open(path) as archive:
                    for member in archive.getmembers():
                        if not member.isfile():
                            continue
                        content = archive.extractfile(member).read()
                        if any(form in content for form in forms):
                            found.append("%s:%s" % (path, member.name))
    return found


def runner_extravars(more, key, diag_dir):
    """The runner's extra variables: ``more`` (from --extra-vars-file) with the key and the diagnostics
    destination, which it must not name (a key of its own would be a key this script does not search for)."""
    if not isinstance(more, dict):
        raise SystemExit("--extra-vars-file must hold a JSON object, not %s" % type(more).__name__)
    clash = sorted({"vllm_service_api_key", "diagnostics_dest_dir"} & set(more))
    if clash:
        raise SystemExit("--extra-vars-file must not set %s: this script sets it" % ", ".join(clash))
    return dict(more, vllm_service_api_key=key, diagnostics_dest_dir=diag_dir)


def run_playbook(private_dir, playbook, inventory, limit):
    import ansible_runner  # pylint: disable=import-outside-toplevel

    kwargs = {"private_data_dir": private_dir, "playbook": playbook, "inventory": inventory, "verbosity": 3,
              "quiet": True}
    if limit:
        kwargs["limit"] = limit
    result = ansible_runner.run(**kwargs)
    return result.rc, result.status, result.config.artifact_dir


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--inventory", required=True)
    parser.add_argument("--playbook-dir", default=os.path.join(os.path.dirname(__file__), "..", "..", "playbooks"))
    parser.add_argument("--limit")
    parser.add_argument("--keep", action="store_true", help="keep the runner's directory (its path is printed)")
    parser.add_argument("--extra-vars-file", help="a JSON object of more extra variables for both runs")
    args = parser.parse_args(argv)
    more = {}
    if args.extra_vars_file:
        with open(args.extra_vars_file, encoding="utf-8") as handle:
            more = json.load(handle)

    key = "sk-noleak-" + secrets.token_hex(16)
    forms = key_forms(key)
    work = tempfile.mkdtemp(prefix="ascendai-noleak-")
    private_dir = os.path.join(work, "runner")
    diag_dir = os.path.join(work, "diagnostics")
    os.makedirs(os.path.join(private_dir, "env"))
    extravars = os.path.join(private_dir, "env", "extravars")
    with open(extravars, "w", encoding="utf-8") as handle:
        json.dump(runner_extravars(more, key, diag_dir), handle)
    os.chmod(extravars, 0o600)

    failures = []
    for name in ("site.yml", "diagnose.yml"):
        playbook = os.path.abspath(os.path.join(args.playbook_dir, name))
        rc, status, artifacts = run_playbook(private_dir, playbook, os.path.abspath(args.inventory), args.limit)
        events = len(os.listdir(os.path.join(artifacts, "job_events")))
        print("%s -vvv: rc=%s status=%s, %d job events in %s" % (name, rc, status, events, artifacts))
        if rc != 0:
            failures.append("%s failed (rc %s): read %s/stdout" % (name, rc, artifacts))
    leaks = find_key(os.path.join(private_dir, "artifacts"), forms) + find_key(diag_dir, forms)
    gathered = sum(len(files) for _d, _s, files in os.walk(diag_dir))
    print("searched the runner's stdout and job events and %d gathered files for the key: %d places"
          % (gathered, len(leaks)))
    for path in leaks:
        failures.append("the API key is in %s" % path)
    if gathered == 0:
        failures.append("diagnose.yml gathered no files into %s: nothing was checked there" % diag_dir)
    if failures:
        print("\n".join(failures), file=sys.stderr)
        print("runner directory kept: %s" % work, file=sys.stderr)
        return 1
    if args.keep:
        print("runner directory kept: %s" % work)
    else:
        import shutil  # pylint: disable=import-outside-toplevel

        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
