# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Per-role engine settings of a prefill/decode plan: the tutorial's environment and vLLM options, the memory check.

Pure stdlib plus the collection's KV-cache and option tables; used by ``_pd_layout.plan_pd``.

``PROFILES`` holds what vllm-ascend's multi-node P/D tutorial runs on each role, per release range, with the file
at the tag and the line of every value (github.com/vllm-project/vllm-ascend). Only tutorials that were read are in
it: for another release or connector the plan emits no tutorial settings and says so in its warnings, rather than
refusing, because the ports, NPUs and kv-transfer-config it plans do not depend on them (the operator sets the
engine options through each role's ``options`` and ``env``).

The nic- and address-dependent variables of the tutorial (``HCCL_IF_IP``, ``GLOO_SOCKET_IFNAME``,
``TP_SOCKET_IFNAME``, ``HCCL_SOCKET_IFNAME``) are the site's, and ``ASCEND_RT_VISIBLE_DEVICES`` is planned per rank;
the positional arguments of ``run_dp_template.sh`` (port, DP size/rank/address/RPC port, TP) are the layout's.

Memory (``memory_plan``): the role's weights per NPU at its TP, with the routed experts spread over DP x TP ranks
when ``enable_expert_parallel`` is set (the tutorial's ``--enable-expert-parallel``), and the KV cache left at
``gpu_memory_utilization`` of the node's NPU memory, through ``_kv_cache.plan`` (its module doc has every formula).
Refused: weights that do not fit, and a KV cache smaller than one ``max_model_len`` sequence (vLLM stops at
start-up). ``max_num_seqs`` x ``max_model_len`` beyond the KV cache is a warning, not a refusal: vLLM then preempts
under load rather than failing, and the tutorial's own A3 layout is such a case (v0.23.0 decode: 40 x 40000 tokens
against about 326k per NPU by this estimate), so refusing it would refuse the source.
64 GiB per NPU is the default: vllm-ascend's DeepSeek-R1 tutorial at v0.23.0
(``docs/source/tutorials/models/DeepSeek-R1.md`` line 22) names "2 Atlas 800 A2 (64G x 8) nodes".
"""

from __future__ import annotations

import copy

from ansible_collections.ascendai.vllm.plugins.module_utils import _kv_cache as kv_cache
from ansible_collections.ascendai.vllm.plugins.module_utils._vllm_options import release_for, release_options

DEFAULT_HBM_GIB_PER_NPU = 64

_T_V0230 = "docs/source/tutorials/features/pd_disaggregation_mooncake_multi_node.md@v0.23.0"
_T_V0180 = "docs/source/tutorials/features/pd_disaggregation_mooncake_multi_node.md@v0.18.0"
_T_V0130 = "docs/source/tutorials/pd_disaggregation_mooncake_multi_node.md@v0.13.0"

# Each value is (value, "file@tag#Lline"). Options use vLLM's snake_case dest names (--enforce-eager is
# enforce_eager, --no-enable-prefix-caching is enable_prefix_caching false). One row per run of tags whose two
# scripts give the same values (each tag of the mirror from v0.12.0rc1 to v0.25.1rc1 was parsed and compared); the
# lines are those of the tag named in "source". 0.23.0.post1 has no tag of its own and falls in the first row
# (assumption: its tutorial is v0.23.0's). v0.12.0rc1 is left out: its scripts export
# LD_LIBRARY_PATH=<a path inside its container image>:$LD_LIBRARY_PATH, which a service environment cannot expand.
# The releases after v0.25.1rc1 (the sdists 0.26.0rc1 and later) were not read into this table.
PROFILES = (
    {
        # The "Non-layerwise" tabs "Prefiller node 1" (lines 522-571) and "Decoder node 1" (lines 638-687) at v0.23.0;
        # the same values at v0.23.0rc1, v0.23.0, v0.24.0rc1, v0.25.1rc1.
        "releases": (("0.23.0rc1", "0.25.1"),),
        "releases_text": "v0.23.0rc1 to v0.25.1rc1",
        "connectors": ("MooncakeConnectorV1",),
        "source": _T_V0230,
        "common": {"env": {}, "options": {}},
        "prefill": {
            "env": {
                "OMP_PROC_BIND": ("false", f"{_T_V0230}#L528"),
                "OMP_NUM_THREADS": ("10", f"{_T_V0230}#L529"),
                "PYTORCH_NPU_ALLOC_CONF": ("expandable_segments:True", f"{_T_V0230}#L530"),
                "HCCL_BUFFSIZE": ("256", f"{_T_V0230}#L531"),
                "TASK_QUEUE_ENABLE": ("1", f"{_T_V0230}#L532"),
                "HCCL_OP_EXPANSION_MODE": ("AIV", f"{_T_V0230}#L533"),
                "VLLM_USE_V1": ("1", f"{_T_V0230}#L534"),
            },
            "options": {
                "enable_expert_parallel": (True, f"{_T_V0230}#L544"),
                "seed": (1024, f"{_T_V0230}#L545"),
                "max_model_len": (40000, f"{_T_V0230}#L547"),
                "max_num_batched_tokens": (16384, f"{_T_V0230}#L548"),
                "max_num_seqs": (8, f"{_T_V0230}#L549"),
                "enforce_eager": (True, f"{_T_V0230}#L550"),
                "trust_remote_code": (True, f"{_T_V0230}#L551"),
                "gpu_memory_utilization": (0.9, f"{_T_V0230}#L552"),
                "quantization": ("ascend", f"{_T_V0230}#L553"),
                "enable_prefix_caching": (False, f"{_T_V0230}#L554"),
                "speculative_config": ({"num_speculative_tokens": 1, "method": "deepseek_mtp"}, f"{_T_V0230}#L555"),
                "additional_config": ({"enable_shared_expert_dp": True}, f"{_T_V0230}#L556"),
            },
        },
        "decode": {
            "env": {
                "OMP_PROC_BIND": ("false", f"{_T_V0230}#L644"),
                "OMP_NUM_THREADS": ("10", f"{_T_V0230}#L645"),
                "PYTORCH_NPU_ALLOC_CONF": ("expandable_segments:True", f"{_T_V0230}#L646"),
                "HCCL_BUFFSIZE": ("600", f"{_T_V0230}#L647"),
                "TASK_QUEUE_ENABLE": ("1", f"{_T_V0230}#L648"),
                "HCCL_OP_EXPANSION_MODE": ("AIV", f"{_T_V0230}#L649"),
                "VLLM_USE_V1": ("1", f"{_T_V0230}#L650"),
            },
            "options": {
                "enable_expert_parallel": (True, f"{_T_V0230}#L660"),
                "seed": (1024, f"{_T_V0230}#L661"),
                "max_model_len": (40000, f"{_T_V0230}#L663"),
                "max_num_batched_tokens": (256, f"{_T_V0230}#L664"),
                "max_num_seqs": (40, f"{_T_V0230}#L665"),
                "trust_remote_code": (True, f"{_T_V0230}#L666"),
                "gpu_memory_utilization": (0.94, f"{_T_V0230}#L667"),
                "quantization": ("ascend", f"{_T_V0230}#L668"),
                "enable_prefix_caching": (False, f"{_T_V0230}#L669"),
                "speculative_config": ({"num_speculative_tokens": 1, "method": "deepseek_mtp"}, f"{_T_V0230}#L670"),
                "additional_config": ({
                    "recompute_scheduler_enable": True,
                    "multistream_overlap_shared_expert": True,
                    "finegrained_tp_config": {"lmhead_tensor_parallel_size": 16},
                }, f"{_T_V0230}#L671"),
                "compilation_config": ({"cudagraph_mode": "FULL_DECODE_ONLY"}, f"{_T_V0230}#L672"),
            },
        },
    },
    {
        # The "Non-layerwise" tabs "Prefiller node 1" (lines 502-552) and "Decoder node 1" (lines 620-670) at v0.18.0;
        # the same values at v0.14.0rc1, v0.15.0rc1, v0.16.0rc1, v0.17.0rc1, v0.18.0rc1, v0.18.0, v0.19.1rc1,
        # v0.20.2rc1, v0.21.0rc1, v0.22.1rc1.
        "releases": (("0.14.0rc1", "0.23.0rc1"),),
        "releases_text": "v0.14.0rc1 to v0.22.1rc1",
        "connectors": ("MooncakeConnectorV1",),
        "source": _T_V0180,
        "common": {"env": {}, "options": {}},
        "prefill": {
            "env": {
                "OMP_PROC_BIND": ("false", f"{_T_V0180}#L508"),
                "OMP_NUM_THREADS": ("10", f"{_T_V0180}#L509"),
                "PYTORCH_NPU_ALLOC_CONF": ("expandable_segments:True", f"{_T_V0180}#L510"),
                "HCCL_BUFFSIZE": ("256", f"{_T_V0180}#L511"),
                "TASK_QUEUE_ENABLE": ("1", f"{_T_V0180}#L512"),
                "HCCL_OP_EXPANSION_MODE": ("AIV", f"{_T_V0180}#L513"),
                "VLLM_USE_V1": ("1", f"{_T_V0180}#L514"),
            },
            "options": {
                "enable_expert_parallel": (True, f"{_T_V0180}#L524"),
                "seed": (1024, f"{_T_V0180}#L525"),
                "max_model_len": (40000, f"{_T_V0180}#L527"),
                "max_num_batched_tokens": (16384, f"{_T_V0180}#L528"),
                "max_num_seqs": (8, f"{_T_V0180}#L529"),
                "enforce_eager": (True, f"{_T_V0180}#L530"),
                "trust_remote_code": (True, f"{_T_V0180}#L531"),
                "gpu_memory_utilization": (0.9, f"{_T_V0180}#L532"),
                "quantization": ("ascend", f"{_T_V0180}#L533"),
                "enable_prefix_caching": (False, f"{_T_V0180}#L534"),
                "speculative_config": ({"num_speculative_tokens": 1, "method": "deepseek_mtp"}, f"{_T_V0180}#L535"),
                "additional_config": ({
                    "recompute_scheduler_enable": True,
                    "enable_shared_expert_dp": True,
                }, f"{_T_V0180}#L536"),
            },
        },
        "decode": {
            "env": {
                "OMP_PROC_BIND": ("false", f"{_T_V0180}#L626"),
                "OMP_NUM_THREADS": ("10", f"{_T_V0180}#L627"),
                "PYTORCH_NPU_ALLOC_CONF": ("expandable_segments:True", f"{_T_V0180}#L628"),
                "HCCL_BUFFSIZE": ("600", f"{_T_V0180}#L629"),
                "TASK_QUEUE_ENABLE": ("1", f"{_T_V0180}#L630"),
                "HCCL_OP_EXPANSION_MODE": ("AIV", f"{_T_V0180}#L631"),
                "VLLM_USE_V1": ("1", f"{_T_V0180}#L632"),
            },
            "options": {
                "enable_expert_parallel": (True, f"{_T_V0180}#L642"),
                "seed": (1024, f"{_T_V0180}#L643"),
                "max_model_len": (40000, f"{_T_V0180}#L645"),
                "max_num_batched_tokens": (256, f"{_T_V0180}#L646"),
                "max_num_seqs": (40, f"{_T_V0180}#L647"),
                "trust_remote_code": (True, f"{_T_V0180}#L648"),
                "gpu_memory_utilization": (0.94, f"{_T_V0180}#L649"),
                "quantization": ("ascend", f"{_T_V0180}#L650"),
                "enable_prefix_caching": (False, f"{_T_V0180}#L651"),
                "speculative_config": ({"num_speculative_tokens": 1, "method": "deepseek_mtp"}, f"{_T_V0180}#L652"),
                "additional_config": ({
                    "recompute_scheduler_enable": True,
                    "multistream_overlap_shared_expert": True,
                    "finegrained_tp_config": {"lmhead_tensor_parallel_size": 16},
                }, f"{_T_V0180}#L653"),
                "compilation_config": ({"cudagraph_mode": "FULL_DECODE_ONLY"}, f"{_T_V0180}#L654"),
            },
        },
    },
    {
        # The "Non-layerwise" tabs "Prefiller node 1" (lines 492-543) and "Decoder node 1" (lines 612-664) at v0.13.0;
        # the same values at v0.13.0rc1, v0.13.0rc2, v0.13.0rc3, v0.13.0.
        "releases": (("0.13.0rc1", "0.14.0rc1"),),
        "releases_text": "v0.13.0rc1 to v0.13.0",
        "connectors": ("MooncakeConnectorV1",),
        "source": _T_V0130,
        "common": {"env": {}, "options": {}},
        "prefill": {
            "env": {
                "OMP_PROC_BIND": ("false", f"{_T_V0130}#L498"),
                "OMP_NUM_THREADS": ("10", f"{_T_V0130}#L499"),
                "PYTORCH_NPU_ALLOC_CONF": ("expandable_segments:True", f"{_T_V0130}#L500"),
                "HCCL_BUFFSIZE": ("256", f"{_T_V0130}#L501"),
                "TASK_QUEUE_ENABLE": ("1", f"{_T_V0130}#L502"),
                "HCCL_OP_EXPANSION_MODE": ("AIV", f"{_T_V0130}#L503"),
                "VLLM_USE_V1": ("1", f"{_T_V0130}#L504"),
            },
            "options": {
                "enable_expert_parallel": (True, f"{_T_V0130}#L514"),
                "seed": (1024, f"{_T_V0130}#L515"),
                "max_model_len": (40000, f"{_T_V0130}#L517"),
                "max_num_batched_tokens": (16384, f"{_T_V0130}#L518"),
                "max_num_seqs": (8, f"{_T_V0130}#L519"),
                "enforce_eager": (True, f"{_T_V0130}#L520"),
                "trust_remote_code": (True, f"{_T_V0130}#L521"),
                "gpu_memory_utilization": (0.9, f"{_T_V0130}#L522"),
                "quantization": ("ascend", f"{_T_V0130}#L523"),
                "enable_prefix_caching": (False, f"{_T_V0130}#L524"),
                "speculative_config": ({"num_speculative_tokens": 1, "method": "deepseek_mtp"}, f"{_T_V0130}#L525"),
                "additional_config": ({
                    "recompute_scheduler_enable": True,
                    "enable_shared_expert_dp": True,
                }, f"{_T_V0130}#L526"),
            },
        },
        "decode": {
            "env": {
                "OMP_PROC_BIND": ("false", f"{_T_V0130}#L618"),
                "OMP_NUM_THREADS": ("10", f"{_T_V0130}#L619"),
                "PYTORCH_NPU_ALLOC_CONF": ("expandable_segments:True", f"{_T_V0130}#L620"),
                "VLLM_ASCEND_ENABLE_MLAPO": ("1", f"{_T_V0130}#L621"),
                "HCCL_BUFFSIZE": ("600", f"{_T_V0130}#L622"),
                "TASK_QUEUE_ENABLE": ("1", f"{_T_V0130}#L623"),
                "HCCL_OP_EXPANSION_MODE": ("AIV", f"{_T_V0130}#L624"),
                "VLLM_USE_V1": ("1", f"{_T_V0130}#L625"),
            },
            "options": {
                "enable_expert_parallel": (True, f"{_T_V0130}#L635"),
                "seed": (1024, f"{_T_V0130}#L636"),
                "max_model_len": (40000, f"{_T_V0130}#L638"),
                "max_num_batched_tokens": (256, f"{_T_V0130}#L639"),
                "max_num_seqs": (40, f"{_T_V0130}#L640"),
                "trust_remote_code": (True, f"{_T_V0130}#L641"),
                "gpu_memory_utilization": (0.94, f"{_T_V0130}#L642"),
                "quantization": ("ascend", f"{_T_V0130}#L643"),
                "enable_prefix_caching": (False, f"{_T_V0130}#L644"),
                "speculative_config": ({"num_speculative_tokens": 1, "method": "deepseek_mtp"}, f"{_T_V0130}#L645"),
                "additional_config": ({
                    "recompute_scheduler_enable": True,
                    "multistream_overlap_shared_expert": True,
                    "finegrained_tp_config": {"lmhead_tensor_parallel_size": 16},
                }, f"{_T_V0130}#L646"),
                "compilation_config": ({"cudagraph_mode": "FULL_DECODE_ONLY"}, f"{_T_V0130}#L647"),
            },
        },
    },
)

# vLLM's defaults where the tutorial and the role leave an option out (vLLM's EngineArgs).
_VLLM_DEFAULTS = {"gpu_memory_utilization": 0.9}

# Options the layout itself sets per rank; a role's ``options`` may not set them.
LAYOUT_OPTIONS = ("port", "data_parallel_size", "data_parallel_rank", "data_parallel_address",
                  "data_parallel_rpc_port", "tensor_parallel_size", "kv_transfer_config")
MODEL_KEYS = ("config", "dtype", "quantization", "reserved_gib", "hbm_gib_per_npu", "kv_cache_dtype", "block_size")


class PdRoleError(ValueError):
    """Role settings that cannot be planned; the message names the setting and the fix."""


def find_profile(release, connector, in_releases):
    """The PROFILES row of ``release`` and ``connector``, or None."""
    if release is None:
        return None
    for row in PROFILES:
        if connector in row["connectors"] and in_releases(release, row["releases"]):
            return row
    return None


def role_settings(profile, role, overrides_env, overrides_options):
    """``(env, options, sources)`` of ``role``: the profile's values, then the role's own on top."""
    env, options, sources = {}, {}, {}
    if profile is not None:
        for part in ("common", role):
            for name, (value, source) in profile[part]["env"].items():
                env[name] = value
                sources[f"env.{name}"] = source
            for name, (value, source) in profile[part]["options"].items():
                options[name] = copy.deepcopy(value)
                sources[f"options.{name}"] = source
    for name, value in (overrides_env or {}).items():
        env[name] = "" if value is None else str(value)
        sources[f"env.{name}"] = f"{role}.env"
    for name, value in (overrides_options or {}).items():
        options[name] = copy.deepcopy(value)
        sources[f"options.{name}"] = f"{role}.options"
    return env, options, sources


def check_options(role, options, vllm_version):
    """Refuse an option name the release's vLLM parser does not have (``_generated/vllm_release_options.py``)."""
    release = release_for(vllm_version or None)
    known = release_options(release)
    for name in list(options) + list(LAYOUT_OPTIONS):
        if name not in known:
            raise PdRoleError(f"{role}.options.{name}: vLLM {release}'s serve parser has no --{name.replace('_', '-')}"
                              f" (vllm_release_options); remove it or set vllm_ascend_version to a release whose "
                              "vLLM has it")
    return release


def check_overrides(role, value, what):
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and k for k in value):
        raise PdRoleError(f"{role}.{what}={str(value)[:120]!r}: give a mapping of {what} names to values")
    if what == "options":
        taken = sorted(set(value) & set(LAYOUT_OPTIONS))
        if taken:
            raise PdRoleError(f"{role}.options sets {taken}, which the plan derives from the layout per rank; set "
                              "api_port, dp/tp, dp_rpc_port or connector instead")
        dashed = sorted(k for k in value if "-" in k)
        if dashed:
            raise PdRoleError(f"{role}.options has {dashed}: write option names in snake_case (max_num_seqs, not "
                              "max-num-seqs)")
    return value


def model_facts(value):
    """The layout's ``model`` mapping, checked; None when absent (no memory check)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise PdRoleError(f"model={str(value)[:120]!r}: give a mapping with config (the model's config.json "
                          "mapping) and optionally dtype, quantization, reserved_gib, hbm_gib_per_npu")
    unknown = sorted(str(k) for k in value if k not in MODEL_KEYS)
    if unknown:
        raise PdRoleError(f"model: unknown keys {unknown}; use {list(MODEL_KEYS)}")
    if value.get("config") in (None, "", {}):
        return None
    return value


def memory_plan(role, model, options, dp, tp):
    """The KV-cache plan of one rank of ``role``; raises PdRoleError when it does not fit."""
    quantization = model.get("quantization", options.get("quantization"))
    quantization = "ascend" if quantization == "ascend" else None
    ep = dp * tp if options.get("enable_expert_parallel") else None
    max_model_len = options.get("max_model_len")
    max_num_seqs = options.get("max_num_seqs")
    util = options.get("gpu_memory_utilization", _VLLM_DEFAULTS["gpu_memory_utilization"])
    hbm = model.get("hbm_gib_per_npu", DEFAULT_HBM_GIB_PER_NPU)
    try:
        result = kv_cache.plan(
            model["config"], dtype=model.get("dtype", "auto"), tensor_parallel_size=tp, hbm_gib_per_npu=hbm,
            gpu_memory_utilization=util, max_model_len=max_model_len, max_num_seqs=max_num_seqs,
            kv_cache_dtype=model.get("kv_cache_dtype"), block_size=model.get("block_size", 128),
            reserved_gib=model.get("reserved_gib", 2.0), expert_parallel_size=ep, quantization=quantization)
    except kv_cache.PlanError as exc:
        raise PdRoleError(f"{role}: memory plan: {exc}") from None
    where = (f"{role} (TP {tp}{f', EP {ep}' if ep else ''}, {hbm} GiB per NPU x gpu_memory_utilization "
             f"{util})")
    usable = result["usable_bytes_per_npu"] / kv_cache.GIB
    reserved = model.get("reserved_gib", 2.0)
    if result["weight_bytes_per_npu"] + reserved * kv_cache.GIB >= result["usable_bytes_per_npu"]:
        raise PdRoleError(f"{where}: the weights take {result['weight_gib_per_npu']} GiB per NPU plus {reserved} GiB "
                          f"reserved, but {usable:.1f} GiB is usable; raise {role}.tp (or {role}.dp with "
                          f"enable_expert_parallel), use a quantized model (model.quantization ascend), or raise "
                          f"{role}.options.gpu_memory_utilization")
    tokens = result["kv_cache_tokens_per_npu"]
    length = result["max_model_len"]
    if tokens < length:
        raise PdRoleError(f"{where}: the KV cache holds {tokens} tokens per NPU, less than one "
                          f"{role}.options.max_model_len={length} sequence; lower max_model_len to {tokens} or less, "
                          f"or raise {role}.tp / {role}.options.gpu_memory_utilization")
    kept = ("weight_gib_per_npu", "kv_cache_tokens_per_npu", "kv_bytes_per_token_per_npu", "usable_bytes_per_npu",
            "max_model_len", "max_concurrent_full_seqs", "expert_parallel_size", "quantization")
    return {**{key: result[key] for key in kept}, "hbm_gib_per_npu": hbm, "gpu_memory_utilization": util,
            "max_num_seqs": max_num_seqs, "warnings": result["warnings"]}
