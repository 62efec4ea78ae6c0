#!/usr/bin/env python3
# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The quantization tool each vllm-ascend release's own guide prescribes, read at every release tag.

For each tag ``vX.Y.Z*`` of a vllm-ascend git repository it reads the quantization guide
(``docs/source/user_guide/feature_guide/quantization.md``, ``docs/source/user_guide/quantization.md`` in
v0.9.1rc1/v0.9.2rc1, else the tutorial ``docs/source/tutorials/multi_npu_quantization.md``) and keeps the lines
that matter: the ``git clone`` of the tool, a ``git checkout`` after it, ``pip install accelerate``, and the
msModelSlim quantization command (``python3 quant_*.py ...`` with its continuation lines) with the ``cd`` into its
example directory. Output: ``tests/unit/fixtures/quant-tools/guides.json`` (committed; the unit tests check
``plugins/module_utils/quant_tools.py`` against it, offline).

Usage::

    git clone --bare https://github.com/vllm-project/vllm-ascend /tmp/vllm-ascend.git
    python tools/quant_tool_facts.py --repo /tmp/vllm-ascend.git      # rewrites the fixture
    python tools/quant_tool_facts.py --repo /tmp/vllm-ascend.git --check

Rerun when vllm-ascend tags a release; when the fixture changes, extend ``ROWS`` in quant_tools.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
OUTPUT = os.path.join(ROOT, "tests", "unit", "fixtures", "quant-tools", "guides.json")
GUIDES = ("docs/source/user_guide/feature_guide/quantization.md", "docs/source/user_guide/quantization.md",
          "docs/source/tutorials/multi_npu_quantization.md")
_TAG = re.compile(r"^v\d+\.\d+\.\d+(?:rc\d+|\.post\d+)?$")


def _git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True, check=False)


def tags(repo):
    out = _git(repo, "tag", "--list", "v*").stdout.split()
    return sorted((t for t in out if _TAG.match(t)), key=_tag_key)


def _tag_key(tag):
    m = re.match(r"v(\d+)\.(\d+)\.(\d+)(?:rc(\d+)|\.post(\d+))?$", tag)
    major, minor, micro, rc, post = m.groups()
    return int(major), int(minor), int(micro), (0, int(rc)) if rc is not None else (1, int(post or 0))


def read_guide(text):
    """The install and command lines of one guide: {clone, checkout, accelerate, cd, command}, each {line, text}."""
    lines = text.splitlines()
    facts = {}
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.startswith("git clone") and ("msit" in stripped or "msmodelslim" in stripped.lower()):
            facts.setdefault("clone", {"line": number, "text": stripped})
        elif stripped.startswith("git checkout") and "clone" in facts:
            facts.setdefault("checkout", {"line": number, "text": stripped})
        elif stripped == "pip install accelerate":
            facts.setdefault("accelerate", {"line": number, "text": stripped})
        elif re.match(r"python3? quant_\w+\.py\b", stripped) and "command" not in facts:
            command, end = stripped, number
            while command.endswith("\\") and end < len(lines):
                command = command[:-1].rstrip() + " " + lines[end].strip()
                end += 1
            facts["command"] = {"line": number, "text": " ".join(command.split())}
            cds = [(n, x.strip()) for n, x in enumerate(lines[:number], 1) if x.strip().startswith("cd ")]
            example = [c for c in cds if "example" in c[1]]
            if example:
                facts["cd"] = {"line": example[-1][0], "text": example[-1][1]}
    return facts


def collect(repo):
    out = {}
    for tag in tags(repo):
        for path in GUIDES:
            shown = _git(repo, "show", f"{tag}:{path}")
            if shown.returncode == 0 and "git clone" in shown.stdout:
                out[tag] = dict(read_guide(shown.stdout), path=path)
                break
        else:
            out[tag] = {}
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repo", required=True, help="a clone (bare is fine) of vllm-project/vllm-ascend with tags")
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed fixture differs")
    args = parser.parse_args(argv)
    facts = collect(args.repo)
    if not facts:
        parser.error(f"no release tag in {args.repo}")
    text = json.dumps(facts, indent=1, sort_keys=False) + "\n"
    if args.check:
        with open(OUTPUT) as handle:
            same = handle.read() == text
        print("fixture up to date" if same else f"{OUTPUT} differs from the tags of {args.repo}: rerun without --check")
        return 0 if same else 1
    os.makedirs(os.path.dirname(OUTPUT), exist_ok=True)
    with open(OUTPUT, "w") as handle:
        handle.write(text)
    print(f"{len(facts)} tags -> {os.path.relpath(OUTPUT, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
