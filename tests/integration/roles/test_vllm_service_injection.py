# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""vllm_service: a variable cannot add a line to the environment file, the unit or the start script, nor run a
command from the start script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from jinja2 import Environment

from ansible_collections.ascendai.vllm.plugins.module_utils.service_env import ServiceEnvError, service_env

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


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
    with open(os.path.join(ROOT, "roles", "vllm_service", "templates", "vllm-serve.sh.j2")) as handle:
        template = handle.read()
    jinja = Environment()
    jinja.filters["quote"] = __import__("shlex").quote
    jinja.filters["comment"] = lambda text: "# " + text
    marker = tmp_path / "ran"
    script = jinja.from_string(template).render(
        ansible_managed="managed", vllm_service_name="vllm", vllm_service_env_scripts=[f"/x$(touch {marker})"],
        _vllm_service_cli_argv=["/bin/true"], vllm_service_model_path="/m", _vllm_service_config="/c.yaml")
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert proc.returncode == 78
    assert not marker.exists(), "the start script ran a command from vllm_service_env_scripts"
    assert "$(touch" in proc.stderr


@pytest.mark.parametrize("name, value", [
    ("vllm_service_served_model_name", "deepseek\nExecStartPre=/bin/sh -c id"),
    ("vllm_service_model_path", "/m\r"),
])
def test_preflight_refuses_control_characters(tmp_path, name, value):
    play = tmp_path / "play.yml"
    play.write_text(textwrap.dedent("""\
        - name: Preflight of the vLLM service
          hosts: localhost
          connection: local
          gather_facts: false
          tasks:
            - name: Run the role's checks
              ansible.builtin.include_role:
                name: ascendai.vllm.vllm_service
                tasks_from: preflight.yml
        """))
    varfile = tmp_path / "vars.json"
    varfile.write_text(json.dumps({name: value, "ansible_python_interpreter": sys.executable}))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    proc = subprocess.run([PLAYBOOK, "-i", "localhost,", str(play), "-e", f"@{varfile}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0
    assert f"{name}=" in proc.stdout and "control character" in proc.stdout
    assert "Look for the vLLM venv" not in proc.stdout
