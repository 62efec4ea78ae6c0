#!/usr/bin/env python3
# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Is an `ansible-builder create` context complete and offline?

The execution environment must build where nothing but the site's own registry (the base image) and dnf
mirror are reachable: every file a step needs is in the context, and no step reaches an index, Galaxy or git.

- every ``COPY`` source of the Containerfile exists in the context;
- every ``type: file`` collection of the galaxy requirements (``_build/requirements.yml``) lies in the context
  at the path the Containerfile copies it to;
- pip is told ``PIP_NO_INDEX=1`` and a find-links folder of the context before its first ``pip install``,
  and that folder holds wheels;
- ``ansible-galaxy collection install`` runs ``--offline``, and no ``type: git``/``url`` collection is asked for;
- no ``RUN`` step names a URL or a git repository.

Usage: ee_context.py CONTEXT_DIR   (exit 1 and the problems printed when there are any)
"""

from __future__ import annotations

import os
import re
import sys

import yaml


def _copies(lines):
    """(source, destination) of every COPY from the context (not from another stage)."""
    for line in lines:
        parts = line.split()
        if parts and parts[0] == "COPY" and not any(p.startswith("--from") for p in parts):
            args = [p for p in parts[1:] if not p.startswith("--")]
            for src in args[:-1]:
                yield src, args[-1]


def _in_context(context, image_path, copies):
    """The context path that a path inside the image comes from, through the COPY steps; None if none."""
    for src, dest in copies:
        dest = dest.rstrip("/") + "/"
        if image_path.startswith(dest):
            return os.path.join(context, src.rstrip("/"), image_path[len(dest):])
    return None


def check_context(context):
    problems = []
    with open(os.path.join(context, "Containerfile"), encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle]
    copies = list(_copies(lines))
    for src, _dest in copies:
        if not os.path.exists(os.path.join(context, src)):
            problems.append(f"COPY {src}: not in the context")

    args = dict(re.findall(r'^ARG (\w+)="?([^"]*)"?$', "\n".join(lines), re.M))
    if "--offline" not in args.get("ANSIBLE_GALAXY_CLI_COLLECTION_OPTS", ""):
        problems.append("ansible-galaxy collection install is not --offline (ANSIBLE_GALAXY_CLI_COLLECTION_OPTS)")

    requirements = os.path.join(context, "_build", "requirements.yml")
    if os.path.exists(requirements):
        with open(requirements, encoding="utf-8") as handle:
            galaxy = yaml.safe_load(handle) or {}
        for item in galaxy.get("collections") or []:
            item = item if isinstance(item, dict) else {"name": item}
            kind = item.get("type", "galaxy")
            if kind != "file":
                problems.append(f"collection {item['name']}: type {kind} reaches out of the context")
                continue
            source = _in_context(context, item["name"], copies)
            if source is None or not os.path.isfile(source):
                problems.append(f"collection {item['name']}: no such file in the context ({source})")

    pip_steps = [i for i, line in enumerate(lines) if "pip install" in line or "/output/scripts/assemble" in line]
    no_index = [i for i, line in enumerate(lines) if line.startswith("ENV ") and "PIP_NO_INDEX=1" in line]
    if pip_steps and (not no_index or no_index[0] > pip_steps[0]):
        problems.append("pip runs before PIP_NO_INDEX=1 is set: it would reach an index")
    links = re.search(r"PIP_FIND_LINKS=(\S+)", "\n".join(lines))
    if not links:
        problems.append("no PIP_FIND_LINKS: pip has no wheels to install from")
    else:
        folder = _in_context(context, links.group(1), copies)
        if folder is None or not os.path.isdir(folder) or not any(n.endswith(".whl") for n in os.listdir(folder)):
            problems.append(f"PIP_FIND_LINKS={links.group(1)}: no wheels in the context there ({folder})")

    for line in lines:
        if line.startswith("RUN") and re.search(r"https?://|git\+|\bgit clone\b|--index-url", line):
            problems.append(f"a step reaches out: {line}")
    return problems


def main(argv):
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    problems = check_context(argv[0])
    for problem in problems:
        print(f"ee context: {problem}")
    if not problems:
        print(f"ee context {argv[0]}: complete, offline")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
