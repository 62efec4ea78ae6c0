"""inventories/example-deepseek-r1-pd-4node: the P/D plan it renders is vllm-ascend's multi-node P/D tutorial.

The tutorial's "Prefiller node 1" and "Decoder node 1" scripts at v0.23.0 are in tests/unit/fixtures/
vllm-ascend-tutorials/ (their README names the lines). The plan is rendered by ansible-playbook from the inventory
(filter ascendai.vllm.pd_plan); each rank's options and env are compared with the tutorial's, less the values the
tutorial passes as run_dp_template.sh's positional arguments and the site's own (nic, address).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import textwrap

import pytest
import yaml

from ansible_collections.ascendai.vllm.plugins.module_utils import _vllm_options as vo
from ansible_collections.ascendai.vllm.plugins.module_utils._compat_matrix import find_row
from ansible_collections.ascendai.vllm.plugins.module_utils._vllm_options import release_for, release_options
from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import BIN, ROOT, run_playbook

INVENTORY = os.path.join(ROOT, "inventories", "example-deepseek-r1-pd-4node")
TUTORIAL = os.path.join(ROOT, "tests", "unit", "fixtures", "vllm-ascend-tutorials",
                        "pd-mooncake-multi-node-v0.23.0-{}.sh")
# The positional arguments of run_dp_template.sh ($1-$7) and the site's variables: the layout's, per rank.
PER_RANK_OPTIONS = {"port", "data_parallel_size", "data_parallel_rank", "data_parallel_address",
                    "data_parallel_rpc_port", "tensor_parallel_size", "kv_transfer_config"}
SITE_ENV = {"HCCL_IF_IP", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME", "ASCEND_RT_VISIBLE_DEVICES"}
# What the inventory changes on purpose (group_vars/pd.yml says why): A2 holds less than T's A3 layout.
CHANGED = {"prefill": {"max_model_len": 16384}, "decode": {"max_model_len": 16384}}

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-playbook")),
                                reason="ansible-playbook is not next to this Python")

_PLAY = textwrap.dedent("""\
    - name: Render the P/D plan of the example inventory
      hosts: pd-prefill0
      gather_facts: false
      tasks:
        - name: Keep the plan
          ansible.builtin.copy:
            content: "{{ pd_layout | ascendai.vllm.pd_plan | to_json }}"
            dest: "{{ out_dir }}/plan.json"
            mode: "0644"
          delegate_to: localhost
    """)


def _render(tmp_path, extra_vars=None):
    return run_playbook(tmp_path, _PLAY, {"out_dir": str(tmp_path), **(extra_vars or {})}, timeout=300,
                        inventory=INVENTORY, cwd=ROOT)


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("pd")
    proc = _render(tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads((tmp_path / "plan.json").read_text())


def _tutorial(role):
    """The tutorial's exports and ``vllm serve`` options of ``role`` (snake_case names, JSON values parsed)."""
    with open(TUTORIAL.format(role), encoding="utf-8") as handle:
        text = handle.read()
    env = {name: value.strip('"') for name, value in re.findall(r"^export ([A-Z_0-9]+)=(\S+)$", text, re.M)}
    argv = shlex.split(text[text.index("vllm serve "):].replace("\\\n", " "))
    options, index = {}, 3
    while index < len(argv):
        name = argv[index][2:].replace("-", "_")
        if index + 1 < len(argv) and not argv[index + 1].startswith("--"):
            value = argv[index + 1]
            if value.startswith("{"):
                value = json.loads(value)
            elif re.fullmatch(r"\d+", value):
                value = int(value)
            elif re.fullmatch(r"\d+\.\d+", value):
                value = float(value)
            index += 2
        elif name.startswith("no_"):
            name, value = name[3:], False
            index += 1
        else:
            value = True
            index += 1
        options[name] = value
    return env, options


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_each_rank_runs_the_tutorials_options_and_env(plan, role):
    want_env, want = _tutorial(role)
    ranks = [r for r in plan["ranks"] if r["role"] == role]
    assert ranks
    for rank in ranks:
        got = rank["serve_options"]
        # host and served-model-name are the service's; the model is the positional argument
        expected = {k: v for k, v in want.items() if k not in PER_RANK_OPTIONS | {"host", "served_model_name"}}
        expected.update(CHANGED[role])
        assert {k: v for k, v in got.items() if k not in PER_RANK_OPTIONS} == expected
        assert {k: v for k, v in rank["env"].items() if k not in SITE_ENV} == {
            k: v for k, v in want_env.items() if k not in SITE_ENV}
        # the connector settings: the tutorial's, with the kv port the plan gives this rank's block
        config = dict(rank["kv_transfer_config"])
        want_config = dict(want["kv_transfer_config"])
        assert config.pop("kv_port") >= 28000 and want_config.pop("kv_port")
        # v0.23.0's tutorial passes no engine_id (the connector generates one from v0.21.0rc1)
        assert "engine_id" not in config and "engine_id" not in want_config
        want_config["kv_connector_extra_config"] = {"prefill": {"dp_size": 2, "tp_size": 8},
                                                    "decode": {"dp_size": 16, "tp_size": 1}}
        assert config == want_config


def test_the_tutorial_differs_per_role_as_read(plan):
    prefill, decode = plan["roles"]["prefill"], plan["roles"]["decode"]
    assert (prefill["env"]["HCCL_BUFFSIZE"], decode["env"]["HCCL_BUFFSIZE"]) == ("256", "600")
    assert prefill["options"]["enforce_eager"] is True and "enforce_eager" not in decode["options"]
    assert decode["options"]["compilation_config"] == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    assert "compilation_config" not in prefill["options"]
    assert prefill["options"]["max_num_batched_tokens"] > decode["options"]["max_num_batched_tokens"]


def test_every_option_is_in_the_releases_vllm_parser(plan):
    vllm = find_row(plan["vllm_ascend_version"])["vllm"]
    known = release_options(release_for(vllm))
    assert vllm == "0.23.0"
    for rank in plan["ranks"]:
        assert set(rank["serve_options"]) <= set(known), set(rank["serve_options"]) - set(known)
        for name, value in rank["serve_options"].items():
            if isinstance(value, dict):
                assert known[name] == "j", name
            if isinstance(value, bool):
                assert known[name] in ("b", "f", "s"), name


def test_the_layout_fits_the_a2_memory_and_the_ports(plan):
    assert [len([r for r in plan["ranks"] if r["role"] == role]) for role in ("prefill", "decode")] == [2, 16]
    prefill, decode = plan["roles"]["prefill"]["memory"], plan["roles"]["decode"]["memory"]
    assert prefill["hbm_gib_per_npu"] == decode["hbm_gib_per_npu"] == 64
    assert prefill["kv_cache_tokens_per_npu"] >= 8 * 16384
    assert 16384 <= decode["kv_cache_tokens_per_npu"] < 40 * 16384
    # the only warning: the decode's concurrency beyond its KV cache (the inventory keeps the tutorial's 40)
    assert len(plan["warnings"]) == 1 and plan["warnings"][0].startswith("decode memory: PagedAttention")
    assert plan["proxy"]["prefill"][0] == "http://192.0.0.1:7100"


def test_the_tutorials_own_decode_concurrency_is_refused_on_a2(tmp_path):
    """T's decode max_num_seqs 40 x max_model_len 40000 does not fit an A2 NPU at TP 1 and EP 16."""
    extra = {"pd_layout": yaml.safe_load(open(os.path.join(INVENTORY, "group_vars", "pd.yml"),
                                              encoding="utf-8"))["pd_layout"]}
    extra["pd_layout"]["decode"]["options"] = {}
    proc = _render(tmp_path, extra)
    assert proc.returncode != 0
    assert "decode.options.max_model_len=40000" in proc.stdout + proc.stderr


def test_the_inventory_pins_the_tutorials_release():
    with open(os.path.join(INVENTORY, "group_vars", "pd.yml"), encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    assert data["vllm_ascend_version"] == "0.23.0"
    with open(TUTORIAL.format("prefill"), encoding="utf-8") as handle:
        assert "/blob/v0.23.0/" in handle.readline()


def test_ansible_inventory_lists_the_four_nodes():
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"))
    proc = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i", INVENTORY, "--list"], capture_output=True,
                          text=True, env=env, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert sorted(data["pd"]["children"]) == ["pd_decode", "pd_prefill"]
    assert len(data["_meta"]["hostvars"]) == 4


def _facts_tool():
    spec = importlib.util.spec_from_file_location(
        "vllm_release_facts", os.path.join(ROOT, "tools", "generate", "vllm_release_facts.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_the_releases_own_parser_accepts_each_ranks_config_file(plan, role, tmp_path):
    """As the vllm_config_file module checks it: the rank's options rendered to the ``--config`` YAML, read by
    vLLM 0.23.0's own config loader and parser (built from its sdist, tests/unit/fixtures/vllm-releases)."""
    facts = _facts_tool()
    files = facts.read_release(os.path.join(ROOT, "tests", "unit", "fixtures", "vllm-releases", "vllm-0.23.0.tar.xz"))
    top, serve = facts.cli_parser(files, vo.release_options("0.23.0"))
    rank = next(r for r in plan["ranks"] if r["role"] == role)
    config = vo.render_config(rank["serve_options"], model="/opt/ascendai/models/DeepSeek-R1-W8A8",
                              served_model_name="ds_r1", vllm_version="0.23.0", vllm_ascend_version="0.23.0")
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    assert vo.check_config_file(str(path), serve, top=top, vllm_version="0.23.0") == []
    # and the check can fail: an option the release does not have
    path.write_text(yaml.safe_dump({**config, "enable-frobnication": True}, sort_keys=False))
    assert vo.check_config_file(str(path), serve, top=top, vllm_version="0.23.0") != []
