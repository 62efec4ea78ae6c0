"""python_runtime hands its venvs to their owners, and a re-run that finds nothing to hand over changes nothing.

Runs the role's own tasks/venvs.yml with ansible-playbook on this machine (as root, which the role needs for chown):
a venv made by this Python under a temporary prefix, owned by nobody:nogroup. A file a later role installed as root
(ascendai.vllm.vllm runs pip as root) must be handed over on the next run, and only then is the run changed.
"""

from __future__ import annotations

import os
import pwd
import sys

import pytest
from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import changed_count, run_playbook

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
TASKS = os.path.join(ROOT, "roles", "python_runtime", "tasks", "venvs.yml")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")


def _run(tmp_path, prefix):
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "The role's venv tasks", "ansible.builtin.include_tasks": TASKS}]}]
    extra = {"python_runtime_venv_prefix": str(prefix), "python_runtime_interpreter": sys.executable,
             "python_runtime_version": "%d.%d" % sys.version_info[:2],
             "python_runtime_venvs": [{"name": "vllm", "owner": "nobody", "group": "nogroup"}]}
    proc = run_playbook(tmp_path, play, extra)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return changed_count(proc), proc.stdout


def _owners(tree):
    found = set()
    for top, dirs, files in os.walk(tree):
        for name in dirs + files:
            st = os.lstat(os.path.join(top, name))
            found.add((st.st_uid, st.st_gid))
    return found


def test_venv_handed_over_once_then_again_only_for_a_new_root_file(tmp_path):
    prefix = tmp_path / "venvs"
    nobody = pwd.getpwnam("nobody")
    wanted = {(nobody.pw_uid, nobody.pw_gid)}

    changed, out = _run(tmp_path, prefix)
    assert changed >= 2, out[-3000:]  # venv made, then handed over
    assert _owners(prefix / "vllm") == wanted

    changed, out = _run(tmp_path, prefix)
    assert changed == 0, out[-3000:]

    stray = prefix / "vllm" / "lib" / "installed-by-root.txt"
    stray.write_text("pip ran as root\n")
    os.chown(stray, 0, 0)
    changed, out = _run(tmp_path, prefix)
    assert changed == 1, out[-3000:]
    assert "installed-by-root.txt" in out  # the run names what it found
    assert _owners(prefix / "vllm") == wanted
