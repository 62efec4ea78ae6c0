"""The health gate's failure message (roles/vllm_service/tasks/health.yml) shows the root cause: vLLM prints a
traceback, then its shutdown and exit noise (nanobind's "leaked" lines: 60 and more), so the last lines alone end
up without the error (Molecule day_two's first run: an EngineDeadError whose cause was 80 lines above the tail).
The message template is rendered by Ansible's engine with a journal made of such lines."""

from __future__ import annotations

import os

import yaml

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import template_text

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def _fail_task():
    with open(os.path.join(ROOT, "roles", "vllm_service", "tasks", "health.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    for task in tasks:
        for inner in task.get("rescue", []) + task.get("block", []):
            if inner.get("name") == "Fail with the service's log":
                return inner
    raise AssertionError("no task 'Fail with the service's log' in health.yml")


def test_the_first_error_lines_come_before_the_tail_of_noise():
    task = _fail_task()
    journal = (["INFO starting"] * 300
               + ["(Worker pid=9) ERROR 12-07 [multiproc_executor.py:1055] WorkerProc hit an exception.",
                  "(Worker pid=9) ERROR 12-07 [multiproc_executor.py:1055] Traceback (most recent call last):"]
               + ["(Worker pid=9) ERROR 12-07 [multiproc_executor.py:1055]   File \"x.py\", line 1, in f"] * 40
               + ["(Worker pid=9) ERROR 12-07 [multiproc_executor.py:1055] RuntimeError: the root cause"]
               + ["(APIServer pid=1) ERROR [serving.py:498]   File x"] * 40
               + ["(APIServer pid=1) ERROR [serving.py:498] vllm.v1.engine.exceptions.EngineDeadError: EngineCore "
                  "encountered an issue. See stack trace (above) for the root cause."]
               + ["nanobind: leaked 4 instances!"] + [" - leaked function \"create_exp2\""] * 70)
    variables = {"vllm_service_name": "vllm", "_vllm_service_front_on": True, "_vllm_service_front_name": "vllm-front",
                 "_vllm_service_front_url": "http://127.0.0.1:8000", "ansible_failed_result": {"msg": "gate failed"},
                 "_vllm_service_journal": {"stdout_lines": journal}}
    variables["_vllm_service_lines"] = template_text(task["vars"]["_vllm_service_lines"], variables)
    variables["_vllm_service_newline"] = task["vars"]["_vllm_service_newline"]
    assert variables["_vllm_service_newline"] == "\n"
    msg = template_text(task["ansible.builtin.fail"]["msg"], variables)
    first, last = msg.split("Its last log lines:")
    raised = first.split("the ones after repeat it):")[1].strip().splitlines()
    assert raised[0].endswith("RuntimeError: the root cause"), raised
    assert raised[1].endswith("EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the "
                              "root cause."), raised
    assert len(raised) == 2 and "leaked" not in first and "nanobind" not in first
    assert "RuntimeError: the root cause" not in last
    assert last.strip().splitlines()[-1] == ' - leaked function "create_exp2"'
    assert msg.startswith("vllm.service is not healthy behind vllm-front.service (http://127.0.0.1:8000): gate failed")
