"""Role generation: side-by-side generations, the current link, rollback, prune and adopt, on this machine.

ansible-playbook runs the role's entry points on localhost (as root: the local facts go to /etc/ansible/facts.d,
which tests/integration/conftest.py restores after each test) under a temporary generation_root, with venvs that
are directories holding bin/python. Each step runs twice (the second changes nothing) and once in check mode
first (it changes nothing on disk)."""

from __future__ import annotations

import json
import os

import pytest
from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import changed_count, run_playbook

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the role writes /etc/ansible/facts.d (root)")

FACTS = "/etc/ansible/facts.d/ascendai_generation.fact"


@pytest.fixture(autouse=True)
def _no_record():
    """Each test starts without a record (conftest puts back whatever was there before)."""
    if os.path.exists(FACTS):
        os.unlink(FACTS)


def _venv(root, name):
    python = root / name / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    return python


def _run(tmp_path, root, entry, check=False, **variables):
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Entry point",
         "ansible.builtin.include_role": {"name": "ascendai.vllm.generation", "tasks_from": entry}},
        {"name": "Show", "ansible.builtin.debug": {"var": "generation_state"}}]}]
    extra = dict(variables, generation_root=str(root))
    return run_playbook(tmp_path, play, extra, args=["--check"] if check else [])


def _ok(proc):
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return changed_count(proc)


def _record():
    with open(FACTS, encoding="utf-8") as handle:
        return json.load(handle)


def _current(root):
    return os.readlink(root / "current")


def test_switch_rollback_prune(tmp_path):
    root = tmp_path / "gens"
    _venv(root, "a")
    _venv(root, "b")

    assert _ok(_run(tmp_path, root, "switch", check=True, generation_name="a")) > 0
    assert not (root / "current").exists() and not os.path.exists(FACTS)  # check mode changed nothing
    assert _ok(_run(tmp_path, root, "switch", generation_name="a")) > 0
    assert _current(root) == "a"
    assert _ok(_run(tmp_path, root, "switch", generation_name="a")) == 0

    assert _ok(_run(tmp_path, root, "switch", generation_name="b")) > 0
    assert _current(root) == "b"
    assert _record()["history"] == ["b", "a"]

    # the upgrade's automatic rollback: b failed, a serves again, and a later rollback does not offer b
    assert _ok(_run(tmp_path, root, "rollback", generation_rollback_failed=True)) > 0
    assert _current(root) == "a"
    assert _record()["failed"] == ["b"]
    proc = _run(tmp_path, root, "rollback")
    assert proc.returncode != 0
    assert "No earlier generation to go back to" in proc.stdout and "failed before: b" in proc.stdout

    # a new upgrade to c succeeds: b (failed) goes first when pruning, a stays as the one to roll back to
    _venv(root, "c")
    assert _ok(_run(tmp_path, root, "switch", generation_name="c")) > 0
    assert _ok(_run(tmp_path, root, "prune", check=True, generation_keep=2)) > 0
    assert (root / "b").exists()
    assert _ok(_run(tmp_path, root, "prune", generation_keep=2)) > 0
    assert sorted(p.name for p in root.iterdir()) == ["a", "c", "current"]
    assert _ok(_run(tmp_path, root, "prune", generation_keep=2)) == 0
    assert _record() == {"root": str(root), "current": "c", "history": ["c", "a"], "failed": [], "cann": {}}

    # a manual rollback goes back to a; then keep 1 leaves nothing to roll back to
    assert _ok(_run(tmp_path, root, "rollback")) > 0
    assert _current(root) == "a"
    assert _ok(_run(tmp_path, root, "prune", generation_keep=1)) > 0
    assert sorted(p.name for p in root.iterdir()) == ["a", "current"]
    proc = _run(tmp_path, root, "rollback")
    assert proc.returncode != 0 and "generation_keep of 1" in proc.stdout


def test_switch_refuses_what_is_not_installed_and_bad_names(tmp_path):
    root = tmp_path / "gens"
    _venv(root, "a")
    proc = _run(tmp_path, root, "switch", generation_name="zz")
    assert proc.returncode != 0
    assert "generation_name=zz" in proc.stdout and "Installed generations: a" in proc.stdout
    for bad in ("current", "../a", "-x", ""):
        proc = _run(tmp_path, root, "switch", generation_name=bad)
        assert proc.returncode != 0 and "is not a generation name" in proc.stdout, bad
    proc = _run(tmp_path, "/opt", "prune")
    assert proc.returncode != 0 and "must be an absolute directory of its own" in proc.stdout
    proc = _run(tmp_path, root, "prune", generation_keep=0)
    assert proc.returncode != 0 and "generation_keep=0" in proc.stdout


def test_adopt_takes_in_the_venv_of_an_older_site_once(tmp_path):
    root = tmp_path / "gens"
    legacy = tmp_path / "venvs" / "vllm"
    (legacy / "bin").mkdir(parents=True)
    (legacy / "bin" / "python").write_text("#!/bin/sh\n")

    assert _ok(_run(tmp_path, root, "adopt", check=True, generation_adopt_venv=str(legacy))) > 0
    assert not root.exists()
    assert _ok(_run(tmp_path, root, "adopt", generation_adopt_venv=str(legacy))) > 0
    assert _current(root) == "initial"
    assert os.path.realpath(root / "current" / "venv") == str(legacy)
    assert _ok(_run(tmp_path, root, "adopt", generation_adopt_venv=str(legacy))) == 0

    # pruning the adopted generation removes its link, never the venv it points at
    _venv(root, "b")
    _ok(_run(tmp_path, root, "switch", generation_name="b"))
    _ok(_run(tmp_path, root, "prune", generation_keep=1))
    assert not (root / "initial").exists() and (legacy / "bin" / "python").exists()


def test_adopt_leaves_a_fresh_node_alone(tmp_path):
    root = tmp_path / "gens"
    assert _ok(_run(tmp_path, root, "adopt", generation_adopt_venv=str(tmp_path / "none"))) == 0
    assert not root.exists()


def test_cann_records_each_generations_cann_and_the_services_follow_current(tmp_path):
    """Entry point cann: the record's cann maps a generation to the CANN its env.sh names; serving_env_script then
    gives <root>/current/env.sh while that generation is current, site.yml's script otherwise; prune forgets it."""
    from ansible_collections.ascendai.vllm.plugins.filter.serving_env_script import serving_env_script

    root = tmp_path / "gens"
    for name in ("a", "b"):
        _venv(root, name)
    _ok(_run(tmp_path, root, "switch", generation_name="a"))
    assert serving_env_script({"ascendai_generation": _record()}) == "/usr/local/Ascend/ascendai-env.sh"

    assert _ok(_run(tmp_path, root, "cann", check=True, generation_name="b", generation_cann_version="9.1.0")) > 0
    assert _record()["cann"] == {}
    assert _ok(_run(tmp_path, root, "cann", generation_name="b", generation_cann_version="9.1.0")) > 0
    assert _ok(_run(tmp_path, root, "cann", generation_name="b", generation_cann_version="9.1.0")) == 0
    assert _record()["cann"] == {"b": "9.1.0"} and _current(root) == "a"
    # a is current and has no CANN of its own: site.yml's script
    assert serving_env_script({"ascendai_generation": _record()}) == "/usr/local/Ascend/ascendai-env.sh"
    _ok(_run(tmp_path, root, "cann", generation_name="a", generation_cann_version="8.5.1"))
    assert serving_env_script({"ascendai_generation": _record()}) == f"{root}/current/env.sh"
    # switches and rollbacks keep the map
    _ok(_run(tmp_path, root, "switch", generation_name="b"))
    _ok(_run(tmp_path, root, "rollback"))
    assert _record()["cann"] == {"a": "8.5.1", "b": "9.1.0"} and _current(root) == "a"
    _ok(_run(tmp_path, root, "switch", generation_name="b"))
    _ok(_run(tmp_path, root, "prune", generation_keep=1))
    assert _record()["cann"] == {"b": "9.1.0"}

    for bad in ("", "9.1.0; rm -rf /", "latest"):
        proc = _run(tmp_path, root, "cann", generation_name="b", generation_cann_version=bad)
        assert proc.returncode != 0 and "is not a CANN release" in proc.stdout, bad
    proc = _run(tmp_path, root, "cann", generation_name="zz", generation_cann_version="9.1.0")
    assert proc.returncode != 0 and "Generation zz is not under" in proc.stdout
