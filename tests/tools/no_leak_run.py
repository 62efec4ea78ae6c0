#!/usr/bin/env python3
# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Run every playbook and AWX job template at -vvv the way AWX runs them, and fail if a planted secret shows up.

AWX runs playbooks through ansible-runner and stores every job event (the ``awx_display`` callback's
``job_events/*.json``: task arguments, results, stdout) in its database, where anyone who can read the job can
see them. This script does the same with ansible-runner's Python API:

1. three fresh random secrets are planted in ansible-runner's ``env/extravars`` (as AWX passes survey answers and
   credentials: a file, not the command line): the API key (``vllm_service_api_key``), a bundle password (the
   userinfo of ``ascendai_bundle_url``, when ``--bundle-url`` names the bundle) and a Hugging Face token
   (``hf_token``), together with a diagnostics destination of our own;
2. a control playbook prints each secret (as text and base64) on purpose, and the search must find every one of
   them: a search that cannot see a leak proves nothing;
3. every playbook runs at verbosity 3: ``site.yml`` first (the key changes, so every task that handles it really
   runs: the env file, the restart, the health gate with the key), then ``diagnose.yml``, ``bench.yml``,
   ``preflight.yml``, ``bootstrap.yml``, ``multinode.yml`` and each AWX job template's playbook
   (``playbooks/awx/job_templates.yml``, with the template's extra variables; the Kubernetes stage renders only).
   ``download.yml`` needs the internet and runs only when named with ``--playbook``; ``pd.yml`` is not run (it
   serves the prefill/decode groups a single-node inventory has not; the Molecule ``pd`` scenario checks its key);
4. each secret is searched, as text and in the three base64 alignments (``slurp`` and ``b64encode`` output), in the
   runner's stdout, every job event and every file diagnostics gathered (the ``.tar.gz`` included).

Usage (from the Molecule scenario's verify, or against any inventory of a deployed node)::

    python tests/tools/no_leak_run.py --inventory INVENTORY [--playbook-dir playbooks] [--limit HOST]
        [--extra-vars-file VARS.json] [--bundle-url URL] [--playbook NAME ...] [--check NAME ...]
        [--may-fail NAME ...]

``--extra-vars-file``: more extra variables for every run (a JSON object), merged under the planted secrets and
the diagnostics destination, which it cannot replace; the Molecule scenario changes a vLLM option with it, so that
the run's one restart also shows that an option change restarts the service. ``--playbook``: run only these
(paths under the playbook directory, e.g. ``bench.yml``, ``awx/preflight.yml``; repeatable). ``--check``: run
these in check mode.

Exit 0: every playbook passed, the control run's secrets were all found and no secret is anywhere else. Exit 1:
a playbook failed, the control was missed, or a secret was found (the places are printed, never the context).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import shutil
import sys
import tarfile
import tempfile
from urllib.parse import urlsplit, urlunsplit


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


SECRET_VARS = ("vllm_service_api_key", "diagnostics_dest_dir", "hf_token", "ascendai_bundle_url", "k8s_manifests_dest")
# Run in this order: site.yml first, so the later playbooks find a deployed node.
DEFAULT_PLAYBOOKS = ("site.yml", "diagnose.yml", "bench.yml", "preflight.yml", "bootstrap.yml", "multinode.yml")
# Extra variables that would reach outside the node under test: the Kubernetes stage renders its manifests only.
TEMPLATE_OVERRIDES = {"k8s_manifests_apply": False}


def planted_secrets():
    """Fresh secrets, one per kind; long enough that every base64 form is searched."""
    return {"API key": "sk-noleak-" + secrets.token_hex(16),
            "bundle password": "bundlepw-noleak-" + secrets.token_hex(16),
            "HF token": "hf_noleak" + secrets.token_hex(16)}


def plant_bundle_password(url, password):
    """``url`` with ``noleak:password@`` as its userinfo (the form ascendai_bundle_url takes credentials in)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SystemExit("--bundle-url must be an http(s) URL, not %r" % url)
    if "@" in parts.netloc:
        raise SystemExit("--bundle-url must carry no credentials: this script plants its own")
    return urlunsplit(parts._replace(netloc="noleak:%s@%s" % (password, parts.netloc)))


def runner_extravars(more, planted, diag_dir, bundle_url=None):
    """The runner's extra variables: ``more`` (from --extra-vars-file) with the planted secrets and the diagnostics
    destination, which it must not name (a secret of its own would be one this script does not search for)."""
    if not isinstance(more, dict):
        raise SystemExit("--extra-vars-file must hold a JSON object, not %s" % type(more).__name__)
    clash = sorted(set(SECRET_VARS) & set(more))
    if clash:
        raise SystemExit("--extra-vars-file must not set %s: this script sets it" % ", ".join(clash))
    out = dict(more, vllm_service_api_key=planted["API key"], diagnostics_dest_dir=diag_dir,
               hf_token=planted["HF token"])
    if bundle_url:
        out["ascendai_bundle_url"] = plant_bundle_password(bundle_url, planted["bundle password"])
    return out


def job_template_runs(playbook_dir):
    """(label, playbook path under playbook_dir, extra variables) of each AWX job template."""
    import yaml  # pylint: disable=import-outside-toplevel

    with open(os.path.join(playbook_dir, "awx", "job_templates.yml"), encoding="utf-8") as handle:
        templates = yaml.safe_load(handle)["awx_job_templates"]
    runs = []
    for template in templates:
        path = template["playbook"]
        if not path.startswith("playbooks/"):
            raise SystemExit("job template %r: playbook %r is not under playbooks/" % (template["name"], path))
        extra = dict(template.get("extra_vars") or {})
        extra.update({k: v for k, v in TEMPLATE_OVERRIDES.items() if k in extra})
        runs.append(("AWX %s" % template["name"], path[len("playbooks/"):], extra))
    return runs


def plan_runs(playbook_dir, only=()):
    """Every run: the playbooks, then each job template whose playbook and extra variables differ from a run
    already planned (the install template is site.yml as is: it joins that run's label)."""
    runs = [[name, name, {}] for name in DEFAULT_PLAYBOOKS]
    for label, path, extra in job_template_runs(playbook_dir):
        same = next((run for run in runs if run[1] == path and run[2] == extra), None)
        if same:
            same[0] += " + " + label
        else:
            runs.append([label + " (" + path + ")", path, extra])
    if only:
        unknown = sorted(set(only) - {run[1] for run in runs} - {"download.yml"})
        if unknown:
            raise SystemExit("--playbook %s: not a playbook of this run" % ", ".join(unknown))
        runs = [run for run in runs if run[1] in only]
        if "download.yml" in only:
            runs.append(["download.yml", "download.yml", {}])
    return [tuple(run) for run in runs]


CONTROL_PLAY = [{
    "name": "Control: print every planted secret on purpose (the search must find each one)",
    "hosts": "localhost", "connection": "local", "gather_facts": False,
    "tasks": [
        {"name": "Print the API key and the HF token", "ansible.builtin.debug": {
            "msg": "{{ [vllm_service_api_key, hf_token | b64encode] }}"}},
        {"name": "Print the bundle URL", "ansible.builtin.debug": {
            "msg": "{{ ascendai_bundle_url | default('') | b64encode }} {{ ascendai_bundle_url | default('') }}"}},
    ],
}]


def run_playbook(private_dir, playbook, inventory, limit, check=False):
    import ansible_runner  # pylint: disable=import-outside-toplevel

    kwargs = {"private_data_dir": private_dir, "playbook": playbook, "inventory": inventory, "verbosity": 3,
              "quiet": True}
    if limit:
        kwargs["limit"] = limit
    if check:
        kwargs["cmdline"] = "--check"
    result = ansible_runner.run(**kwargs)
    return result.rc, result.status, result.config.artifact_dir


def write_extravars(private_dir, extravars):
    path = os.path.join(private_dir, "env", "extravars")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(extravars, handle)
    os.chmod(path, 0o600)


def control_check(work, private_dir, extravars, inventory, planted):
    """Run the control playbook and return the planted secrets its artifacts do not show (should be none)."""
    control = os.path.join(work, "control.yml")
    with open(control, "w", encoding="utf-8") as handle:
        json.dump(CONTROL_PLAY, handle)
    write_extravars(private_dir, extravars)
    rc, _status, artifacts = run_playbook(private_dir, control, inventory, None)
    missed = [kind for kind, value in planted.items()
              if (kind != "bundle password" or "ascendai_bundle_url" in extravars)
              and not find_key(artifacts, key_forms(value))]
    if rc != 0:
        missed.append("the control playbook failed, rc %s: read %s/stdout" % (rc, artifacts))
    shutil.rmtree(artifacts)
    return missed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--inventory", required=True)
    parser.add_argument("--playbook-dir", default=os.path.join(os.path.dirname(__file__), "..", "..", "playbooks"))
    parser.add_argument("--limit")
    parser.add_argument("--keep", action="store_true", help="keep the runner's directory (its path is printed)")
    parser.add_argument("--extra-vars-file", help="a JSON object of more extra variables for every run")
    parser.add_argument("--bundle-url", help="the bundle's URL (no credentials): a password is planted in it")
    parser.add_argument("--playbook", action="append", default=[], help="run only this playbook (repeatable)")
    parser.add_argument("--check", action="append", default=[], help="run this playbook in check mode")
    parser.add_argument("--may-fail", action="append", default=[],
                        help="this playbook may fail on this inventory (a test host that is no Ascend node): its "
                             "output is searched all the same")
    args = parser.parse_args(argv)
    more = {}
    if args.extra_vars_file:
        with open(args.extra_vars_file, encoding="utf-8") as handle:
            more = json.load(handle)

    planted = planted_secrets()
    work = tempfile.mkdtemp(prefix="ascendai-noleak-")
    private_dir = os.path.join(work, "runner")
    diag_dir = os.path.join(work, "diagnostics")
    os.makedirs(os.path.join(private_dir, "env"))
    extravars = runner_extravars(more, planted, diag_dir, args.bundle_url)
    playbook_dir = os.path.abspath(args.playbook_dir)
    inventory = os.path.abspath(args.inventory)
    runs = plan_runs(playbook_dir, args.playbook)

    missed = control_check(work, private_dir, extravars, inventory, planted)
    failures = [kind if kind.startswith("the control playbook")
                else "the control run printed the %s and the search missed it" % kind for kind in missed]
    if "ascendai_bundle_url" not in extravars:
        print("no --bundle-url: the bundle password is not planted")
    ran = set()
    manifests = os.path.join(work, "k8s-manifests")
    # --extra-vars-file may name its own report directory (a test reads the reports there): searched all the same
    bench_reports = extravars.get("bench_report_dir") or os.path.join(work, "bench-reports")
    for label, name, extra in runs:
        # rendered manifests and bench reports go where they are searched too, not into the checkout (the roles'
        # defaults: the working directory)
        write_extravars(private_dir, dict(dict(extra, k8s_manifests_dest=manifests, bench_report_dir=bench_reports),
                                          **extravars))
        playbook = os.path.join(playbook_dir, name)
        rc, status, artifacts = run_playbook(private_dir, playbook, inventory, args.limit, name in args.check)
        events = len(os.listdir(os.path.join(artifacts, "job_events")))
        print("%s%s -vvv: rc=%s status=%s, %d job events in %s"
              % (label, " (check mode)" if name in args.check else "", rc, status, events, artifacts))
        ran.add(name)
        if rc != 0 and name not in args.may_fail:
            failures.append("%s failed (rc %s): read %s/stdout" % (label, rc, artifacts))
    leaks = []
    for kind, value in planted.items():
        forms = key_forms(value)
        leaks += [(kind, path) for path in find_key(os.path.join(private_dir, "artifacts"), forms)
                  + find_key(diag_dir, forms) + find_key(manifests, forms) + find_key(bench_reports, forms)]
    gathered = sum(len(files) for _d, _s, files in os.walk(diag_dir))
    print("searched the runner's stdout and job events of %d runs and %d gathered files for %s: %d places"
          % (len(runs), gathered, ", ".join(planted), len(leaks)))
    for kind, path in leaks:
        failures.append("the %s is in %s" % (kind, path))
    if "diagnose.yml" in ran and gathered == 0:
        failures.append("diagnose.yml gathered no files into %s: nothing was checked there" % diag_dir)
    if failures:
        print("\n".join(failures), file=sys.stderr)
        print("runner directory kept: %s" % work, file=sys.stderr)
        return 1
    if args.keep:
        print("runner directory kept: %s" % work)
    else:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
