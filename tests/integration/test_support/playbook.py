"""Running ansible-playbook on this machine for the integration tests (import through the collection:
``ansible_collections.ascendai.vllm.tests.integration.test_support.playbook``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def run_playbook(tmp_path, play, extra_vars=None, timeout=600):
    """ansible-playbook on this machine (local connection): ``play`` (a list of plays, or YAML text) written to
    tmp_path/play.yml, ``extra_vars`` passed as ``-e @vars.json``, the checkout's collection, modules under this
    Python. The interpreter comes through the environment, not ``-e``: an extra var would outrank the
    ``ansible_python_interpreter`` a task sets (the roles run ``venv_info`` under a venv's Python that way).
    Returns the CompletedProcess."""
    text = play if isinstance(play, str) else json.dumps(play)
    (tmp_path / "play.yml").write_text(text)
    argv = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,", "-c", "local",
            str(tmp_path / "play.yml")]
    if extra_vars:
        (tmp_path / "vars.json").write_text(json.dumps(extra_vars))
        argv += ["-e", f"@{tmp_path / 'vars.json'}"]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(_ROOT, ".cache", "collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    return subprocess.run(argv, capture_output=True, text=True, check=False, env=env, timeout=timeout,
                          cwd=str(tmp_path))


def changed_count(proc):
    """changed= of localhost in an ansible-playbook recap."""
    match = re.search(r"localhost\s+:\s+ok=\d+\s+changed=(\d+)", proc.stdout)
    assert match, proc.stdout[-3000:] + proc.stderr[-2000:]
    return int(match.group(1))
