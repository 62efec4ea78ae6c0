# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""vllm_service: a variable cannot add a line to the environment file, the unit or the start script, nor run a
command from the start script."""

from __future__ import annotations

import os
import subprocess

import pytest

from ansible_collections.ascendai.vllm.plugins.module_utils._service_env import ServiceEnvError, service_env
from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import (
    ROOT, render_templates, run_playbook,
)


@pytest.mark.parametrize("extra, hccl", [
    ({"OMP_NUM_THREADS": "1\nLD_PRELOAD=/tmp/evil.so"}, None),
    (None, {"HCCL_BUFFSIZE": "200\nVLLM_API_KEY=x"}),
    ({"OMP_NUM_THREADS\n": "1"}, None),
    ({"TASK_QUEUE_ENABLE": "2\r"}, None),
])
def test_env_refuses_control_characters(extra, hccl):
    with pytest.raises(ServiceEnvError) as exc:
        service_env(extra=extra, hccl=hccl)
    assert "control character" in str(exc.value) or "not an environment variable name" in str(exc.value)


def test_env_keeps_ordinary_values():
    env = service_env(extra={"OMP_NUM_THREADS": 1, "LD_PRELOAD": "/usr/lib/libjemalloc.so.2"})
    assert env["OMP_NUM_THREADS"] == "1"


def test_start_script_quotes_a_hostile_script_path(tmp_path):
    marker = tmp_path / "ran"
    script = render_templates(tmp_path, {"vllm-serve": (
        os.path.join(ROOT, "roles", "vllm_service", "templates", "vllm-serve.sh.j2"),
        {"vllm_service_name": "vllm", "vllm_service_env_scripts": [f"/x$(touch {marker})"],
         "_vllm_service_cli_argv": ["/bin/true"], "vllm_service_model_path": "/m",
         "_vllm_service_config": "/c.yaml"})})["vllm-serve"]
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert proc.returncode == 78
    assert not marker.exists(), "the start script ran a command from vllm_service_env_scripts"
    assert "$(touch" in proc.stderr


@pytest.mark.parametrize("name, value", [
    ("vllm_service_served_model_name", "deepseek\nExecStartPre=/bin/sh -c id"),
    ("vllm_service_model_path", "/m\r"),
])
def test_preflight_refuses_control_characters(tmp_path, name, value):
    play = [{"name": "Preflight of the vLLM service", "hosts": "localhost", "gather_facts": False,
             "tasks": [{"name": "Run the role's checks", "ansible.builtin.include_role": {
                 "name": "ascendai.vllm.vllm_service", "tasks_from": "preflight.yml"}}]}]
    proc = run_playbook(tmp_path, play, {name: value}, timeout=300, cwd=ROOT)
    assert proc.returncode != 0
    assert f"{name}=" in proc.stdout and "control character" in proc.stdout
    assert "Look for the vLLM venv" not in proc.stdout
