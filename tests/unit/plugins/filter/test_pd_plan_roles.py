"""Per-role settings and memory of the P/D plan (plugins/module_utils/_pd_roles.py, through the pd_plan filter).

The tutorial values are checked line by line against vllm-ascend's tutorial in
tests/integration/roles/test_example_deepseek_r1_pd_4node.py; these tests hold the rules around them.
"""

from __future__ import annotations

import ast
import copy
import json
import os
import re
import shlex
import tarfile

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.pd_plan import pd_plan
from ansible_collections.ascendai.vllm.plugins.module_utils import _compat_matrix as compat_matrix
from ansible_collections.ascendai.vllm.plugins.module_utils import _pd_layout as pd_layout
from ansible_collections.ascendai.vllm.plugins.module_utils import _pd_roles as pd_roles
from ansible_collections.ascendai.vllm.plugins.module_utils._vllm_options import release_for

# deepseek-ai/DeepSeek-R1 config.json, the keys the memory plan reads.
R1_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
    "tie_word_embeddings": False, "max_position_embeddings": 163840, "torch_dtype": "bfloat16",
}


def a3_2p1d(release="0.23.0", model=True, **changes):
    """The v0.23.0 tutorial's 2P1D on four A3 nodes of 16 NPUs (prefill DP2 TP8 x 2 instances, decode DP32 TP1)."""
    layout = {
        "connector": "MooncakeConnectorV1", "vllm_ascend_version": release,
        "prefill": {"dp": 2, "tp": 8, "hosts": [
            {"host": "p1", "dp_ranks": [0, 1], "npus": 16},
            {"host": "p2", "dp_ranks": [0, 1], "npus": 16, "instance": 1}]},
        "decode": {"dp": 32, "tp": 1, "hosts": [
            {"host": "d1", "dp_ranks": list(range(16)), "npus": 16},
            {"host": "d2", "dp_ranks": list(range(16, 32)), "npus": 16}]},
        "api_port": 7100, "kv_port": 36000, "proxy": {"host": "p1", "port": 1999},
    }
    if model:
        layout["model"] = {"config": copy.deepcopy(R1_CONFIG), "quantization": "ascend"}
    layout.update(changes)
    return layout


def test_the_v0230_tutorial_fits_its_a3_nodes_and_each_role_gets_its_settings():
    plan = pd_plan(a3_2p1d())
    # the tutorial's concurrency exceeds the KV cache of one NPU on both roles: warned about, not refused
    assert [w.split(":")[0] for w in plan["warnings"]] == ["prefill memory", "decode memory"]
    assert "max_num_seqs x max_model_len = 40 x 40000" in plan["warnings"][1]
    prefill, decode = plan["roles"]["prefill"], plan["roles"]["decode"]
    assert prefill["env"]["HCCL_BUFFSIZE"] == "256" and decode["env"]["HCCL_BUFFSIZE"] == "600"
    assert prefill["options"]["enforce_eager"] is True and "enforce_eager" not in decode["options"]
    assert decode["options"]["compilation_config"] == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    assert prefill["sources"]["env.HCCL_BUFFSIZE"].endswith("pd_disaggregation_mooncake_multi_node.md@v0.23.0#L531")
    assert prefill["memory"]["expert_parallel_size"] == 16 and decode["memory"]["expert_parallel_size"] == 32
    rank = next(r for r in plan["ranks"] if r["role"] == "decode")
    assert rank["serve_options"]["max_num_seqs"] == 40 and rank["env"]["ASCEND_RT_VISIBLE_DEVICES"] == "0"
    assert rank["env"]["HCCL_BUFFSIZE"] == "600"


def test_a_release_whose_tutorial_was_not_read_is_warned_about_not_refused():
    plan = pd_plan(a3_2p1d("0.11.0", model=False))
    assert plan["roles"]["prefill"]["options"] == {} and plan["roles"]["prefill"]["env"] == {}
    assert any(w.startswith("no P/D tutorial of MooncakeConnectorV1 in vllm-ascend v0.11.0") for w in plan["warnings"])
    assert any(w.startswith("model.config is not given") for w in plan["warnings"])
    # the layerwise connector has no row either, even in v0.23.0
    plan = pd_plan(a3_2p1d(model=False, connector="MooncakeLayerwiseConnector",
                           proxy={"host": "10.0.0.1", "port": 1999}))
    assert plan["roles"]["decode"]["options"] == {}


def test_the_decode_role_that_does_not_fit_a2_memory_is_refused_naming_the_setting():
    layout = a3_2p1d()
    layout["decode"] = {"dp": 16, "tp": 1, "hosts": [
        {"host": "d1", "dp_ranks": list(range(8)), "npus": 8},
        {"host": "d2", "dp_ranks": list(range(8, 16)), "npus": 8}]}
    with pytest.raises(AnsibleFilterError, match=r"decode \(TP 1, EP 16.*max_model_len=40000.*lower max_model_len"):
        pd_plan(layout)
    layout["decode"]["options"] = {"max_model_len": 35585}
    with pytest.raises(AnsibleFilterError, match=r"holds 35584 tokens per NPU"):
        pd_plan(layout)
    layout["decode"]["options"] = {"max_model_len": 35584}
    plan = pd_plan(layout)
    assert plan["roles"]["decode"]["memory"]["kv_cache_tokens_per_npu"] == 35584
    assert any(w.startswith("decode memory: PagedAttention KV cache overflow") for w in plan["warnings"])


def test_weights_beyond_the_npu_are_refused():
    layout = a3_2p1d()
    layout["model"]["quantization"] = None
    with pytest.raises(AnsibleFilterError, match=r"prefill \(TP 8, EP 16.*the weights take .* raise prefill.tp"):
        pd_plan(layout)


def test_an_option_the_releases_vllm_lacks_is_refused():
    layout = a3_2p1d()
    layout["prefill"]["options"] = {"max_num_seqz": 4}
    with pytest.raises(AnsibleFilterError, match=r"prefill.options.max_num_seqz: vLLM 0.23.0's serve parser"):
        pd_plan(layout)


@pytest.mark.parametrize("options, message", [
    ({"port": 9000}, r"the plan derives from the layout"),
    ({"max-num-seqs": 4}, r"snake_case"),
    ([1], r"give a mapping"),
])
def test_role_options_the_layout_owns_or_malformed_are_refused(options, message):
    layout = a3_2p1d()
    layout["decode"]["options"] = options
    with pytest.raises(AnsibleFilterError, match=message):
        pd_plan(layout)


def test_role_env_and_options_override_the_tutorial():
    layout = a3_2p1d()
    layout["prefill"]["env"] = {"HCCL_BUFFSIZE": 512}
    layout["prefill"]["options"] = {"max_num_seqs": 4}
    plan = pd_plan(layout)
    assert plan["roles"]["prefill"]["env"]["HCCL_BUFFSIZE"] == "512"
    assert plan["roles"]["prefill"]["sources"]["env.HCCL_BUFFSIZE"] == "prefill.env"
    assert plan["ranks"][0]["serve_options"]["max_num_seqs"] == 4


def test_the_model_mapping_is_checked():
    layout = a3_2p1d()
    layout["model"]["hbm"] = 64
    with pytest.raises(AnsibleFilterError, match=r"model: unknown keys \['hbm'\]"):
        pd_plan(layout)
    layout["model"] = "DeepSeek-R1"
    with pytest.raises(AnsibleFilterError, match=r"model=.*give a mapping"):
        pd_plan(layout)


def test_every_profile_value_names_its_source_at_a_tag():
    for profile in pd_roles.PROFILES:
        for part in ("common", "prefill", "decode"):
            for kind in ("env", "options"):
                for name, (_value, source) in profile[part][kind].items():
                    assert source.startswith(profile["source"] + "#L"), (name, source)


FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "vllm-releases")


def _kv_transfer_fields(vllm):
    """The fields of KVTransferConfig in vLLM ``vllm``'s sdist (tests/unit/fixtures/vllm-releases)."""
    with tarfile.open(os.path.join(FIXTURES, f"vllm-{vllm}.tar.xz")) as archive:
        names = archive.getnames()
        path = "vllm/config/kv_transfer.py" if "vllm/config/kv_transfer.py" in names else "vllm/config.py"
        tree = ast.parse(archive.extractfile(path).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "KVTransferConfig":
            return {item.target.id for item in node.body if isinstance(item, ast.AnnAssign)}
    raise AssertionError(f"no KVTransferConfig in vLLM {vllm}'s {path}")


def _planned_rows():
    rows = []
    for row in compat_matrix.ROWS:
        for connector, spec in pd_layout.CONNECTORS.items():
            if spec["registered"] is not None and pd_layout._in_releases(row["vllm_ascend"], spec["planned"]):
                rows.append((row["vllm_ascend"], row["vllm"], connector))
    return rows


@pytest.mark.parametrize("release, vllm, connector", _planned_rows())
def test_every_kv_transfer_config_key_is_a_field_of_the_releases_vllm(release, vllm, connector):
    """vLLM parses --kv-transfer-config into KVTransferConfig; a key it does not have would not reach the
    connector. Every release the plan takes a connector in, with the sdist of its vLLM's option table (the one
    the option check reads, generated from these sdists)."""
    sdist = release_for(vllm)
    layout = a3_2p1d(release, model=False, connector=connector, proxy={"host": "10.0.0.1", "port": 1999})
    if connector == "LLMDataDistCMgrConnector":
        layout["kv_port"] = 40000
    keys = set()
    for rank in pd_plan(layout)["ranks"]:
        keys |= set(rank["kv_transfer_config"])
    assert keys <= _kv_transfer_fields(sdist), (release, vllm, keys - _kv_transfer_fields(sdist))


def test_the_kv_transfer_field_check_can_fail():
    assert "kv_parallel_size" in _kv_transfer_fields("0.11.0")
    assert "kv_parallel_size" not in _kv_transfer_fields("0.32.0")


TUTORIALS = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "vllm-ascend-tutorials")
# The tutorial's site variables and run_dp_template.sh's positional arguments, which the layout owns.
SITE_ENV = {"HCCL_IF_IP", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "HCCL_SOCKET_IFNAME", "ASCEND_RT_VISIBLE_DEVICES"}
SITE_OPTIONS = {"host", "port", "data_parallel_size", "data_parallel_rank", "data_parallel_address",
                "data_parallel_rpc_port", "tensor_parallel_size", "kv_transfer_config", "served_model_name"}


def _fixture_settings(tag, role):
    """{env.NAME / options.NAME: (value, line in the tutorial)} of the unmodified tutorial script at ``tag``."""
    with open(os.path.join(TUTORIALS, f"pd-mooncake-multi-node-{tag}-{role}.sh"), encoding="utf-8") as handle:
        header, *lines = handle.read().split("\n")
    first = int(re.search(r"#L(\d+)-L\d+ ", header).group(1))
    found = {}
    for number, line in enumerate(lines, start=first):
        export = re.match(r"^\s*export ([A-Z_0-9]+)=(\S+)\s*$", line)
        if export and export.group(1) not in SITE_ENV:
            found[f"env.{export.group(1)}"] = (export.group(2).strip('"'), number)
        option = re.match(r"^\s*--([a-z0-9-]+)(?:\s+(.+?))?\s*\\?\s*$", line)
        if option:
            name, raw = option.group(1).replace("-", "_"), (option.group(2) or "").rstrip("\\").strip()
            if not raw:
                name, value = (name[3:], False) if name.startswith("no_") else (name, True)
            else:
                value = shlex.split(raw)[0]
                value = (json.loads(value) if value.startswith("{") else int(value) if value.isdigit()
                         else float(value) if re.fullmatch(r"\d+\.\d+", value) else value)
            if name not in SITE_OPTIONS:
                found[f"options.{name}"] = (value, number)
    return found


@pytest.mark.parametrize("profile", pd_roles.PROFILES, ids=lambda p: p["source"].split("@")[1])
@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_each_profile_row_is_its_tutorial_script_value_by_value_and_line_by_line(profile, role):
    tag = profile["source"].split("@")[1]
    want = _fixture_settings(tag, role)
    got = {}
    for part in ("common", role):
        for kind in ("env", "options"):
            for name, (value, source) in profile[part][kind].items():
                got[f"{kind}.{name}"] = (value, int(source.rsplit("#L", 1)[1]))
    assert got == want


def test_the_decode_role_enables_mlapo_in_v0130_only_on_decode():
    """The issue's example: MLAPO on decode only (v0.13.0's tutorial; later tags dropped it from the scripts)."""
    v0130 = next(p for p in pd_roles.PROFILES if p["source"].endswith("@v0.13.0"))
    assert "VLLM_ASCEND_ENABLE_MLAPO" in v0130["decode"]["env"]
    assert "VLLM_ASCEND_ENABLE_MLAPO" not in v0130["prefill"]["env"]
    plan = pd_plan(a3_2p1d("0.13.0"))
    assert plan["roles"]["decode"]["env"]["VLLM_ASCEND_ENABLE_MLAPO"] == "1"
    assert "VLLM_ASCEND_ENABLE_MLAPO" not in plan["roles"]["prefill"]["env"]
