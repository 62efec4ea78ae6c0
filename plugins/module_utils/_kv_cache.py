# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Capacity plan for one vLLM deployment: weights per NPU, KV cache per token and how many tokens fit.

Pure stdlib arithmetic on a Hugging Face ``config.json`` mapping.

Parameter count (approximate, documented so a reader can check it):

* Dense Llama-style models (Llama, DeepSeek-LLM 7B/67B, Qwen2/3 dense, Mistral): embedding ``V*H``; per layer
  attention ``H*nh*hd`` (q) + ``2*H*nkv*hd`` (k, v; GQA through ``num_key_value_heads``, ``head_dim`` defaulting
  to ``H/nh``) + ``nh*hd*H`` (o), plus q/k/v biases when ``attention_bias`` (or model_type qwen2); MLP
  ``3*H*I`` (gate, up, down); two RMSNorms ``2*H``; final norm ``H``; ``lm_head`` ``V*H`` unless
  ``tie_word_embeddings``.
* DeepSeek-V2/V3 (MLA, ``kv_lora_rank`` set): q is ``H*nh*(nope+rope)`` or, with ``q_lora_rank``,
  ``H*q_lora + q_lora + q_lora*nh*(nope+rope)``; ``kv_a_proj_with_mqa`` ``H*(kv_lora+rope)``, ``kv_a_layernorm``
  ``kv_lora``, ``kv_b_proj`` ``kv_lora*nh*(nope+v)``, ``o_proj`` ``nh*v*H``. MLP: the first
  ``first_k_dense_replace`` layers (and layers off ``moe_layer_freq``) are dense ``3*H*I``; MoE layers have
  router ``H*E`` (+ ``E`` correction bias for V3's noaux_tc), ``E`` routed experts and ``n_shared_experts``
  shared experts of ``3*H*moe_intermediate_size`` each. MTP layers (``num_nextn_predict_layers``) are not
  counted: vLLM loads them only for speculative decoding. DeepSeek-V3's config gives 671e9 this way.
* Other MoE configs (``num_local_experts`` Mixtral-style, ``num_experts`` Qwen-MoE-style with
  ``moe_intermediate_size`` and ``shared_expert_intermediate_size``) are handled the same way.

Per NPU with tensor parallelism ``tp`` (as vLLM shards): q, o, MLP/expert and vocabulary matrices are split by
``tp``; k/v projections are split by ``tp`` down to one KV head per rank (replicated beyond that); norms and,
for MLA, ``q_a_proj``/``kv_a_proj_with_mqa`` and the router are replicated. With data parallelism the routed experts
are spread over ``expert_parallel_size`` = TP x DP ranks instead of ``tp``: vLLM flattens TP across DP for the MoE
layers, and with ``--enable-expert-parallel`` each of those ranks holds whole experts (the same bytes per rank);
attention, shared experts and dense layers stay split by ``tp``
(https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/model_executor/layers/fused_moe/config.py#L1189-L1221).

W8A8 (``quantization="ascend"``, vllm-ascend's msModelSlim checkpoints): the projection and expert matrices take
1 byte per weight; embeddings, ``lm_head``, norms and routers keep the dtype's size.

KV cache bytes per token on one NPU: ``2 * layers * max(1, nkv/tp) * hd * bytes`` (K and V);
MLA: ``layers * (kv_lora_rank + qk_rope_head_dim) * bytes``, the latent cache is replicated, not split by TP.
Sliding-window or hybrid (mamba) layers are not modelled: the estimate is the full-attention upper bound.

KV cache size per NPU: ``hbm * gpu_memory_utilization - weights - reserved`` (``reserved`` stands for the
activation peak, graph capture and runtime buffers; measure it once and pass it), rounded down to whole blocks
of ``block_size`` tokens, the way vLLM reports "KV cache size: N tokens". ``kv_cache_bytes`` replaces that
budget (the CPU sandbox sets it through ``VLLM_CPU_KVCACHE_SPACE`` GiB; ``--kv-cache-memory-bytes`` on devices).
"""

from __future__ import annotations

import json
import math

GIB = 1024 ** 3
# Bounds on config.json integers: far above any real model (DeepSeek-V3: 61 layers, 256 experts, hidden 7168),
# low enough that a hostile value cannot make the plan loop for hours.
_MAX_LAYERS = 100_000
_MAX_DIM = 10 ** 9

DTYPE_BYTES = {
    "float16": 2, "half": 2, "fp16": 2, "bfloat16": 2, "bf16": 2,
    "float32": 4, "float": 4, "fp32": 4,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1, "int8": 1,
}


# quantization= values: None (weights at dtype size) or "ascend" (vllm-ascend's W8A8: 1-byte matrices).
QUANTIZATIONS = (None, "", "ascend")


class PlanError(ValueError):
    """Bad input for the plan; the message names the input."""


def _get(config, *names, default=None):
    for name in names:
        value = config.get(name)
        if value is not None:
            return value
    return default


def _need(config, name):
    value = config.get(name)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise PlanError(f"config.json: {name} must be a positive integer, got {value!r}")
    limit = _MAX_LAYERS if name == "num_hidden_layers" else _MAX_DIM
    if value > limit:
        raise PlanError(f"config.json: {name}={value} is beyond any real model (at most {limit})")
    return value


def _cfg_int(config, *names, default=None, minimum=0):
    """The first of ``names`` that config.json sets, as an integer in [minimum, 10**9]; ``default`` when none."""
    name, value = names[0], None
    for candidate in names:
        if config.get(candidate) is not None:
            name, value = candidate, config[candidate]
            break
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= _MAX_DIM:
        raise PlanError(f"config.json: {name} must be an integer from {minimum} to {_MAX_DIM}, got {value!r}")
    return value


def _head_dim(config, hidden, heads):
    head_dim = _cfg_int(config, "head_dim", default=hidden // heads, minimum=1)
    if head_dim < 1:
        raise PlanError(f"config.json: hidden_size {hidden} is smaller than num_attention_heads {heads} and no "
                        "head_dim is given; the config is not a model's")
    return head_dim


def load_config(config_json):
    """Accept a mapping or a JSON string; unwrap ``text_config`` of multimodal wrappers."""
    if isinstance(config_json, (str, bytes)):
        try:
            config_json = json.loads(config_json)
        except (ValueError, RecursionError) as exc:  # RecursionError: '[[[[...' nested past Python's limit
            raise PlanError(f"config.json is not valid JSON: {exc}") from None
    if not isinstance(config_json, dict):
        raise PlanError(f"config.json must be a mapping, got {type(config_json).__name__}")
    if "hidden_size" not in config_json and isinstance(config_json.get("text_config"), dict):
        return config_json["text_config"]
    return config_json


def is_mla(config):
    return bool(config.get("kv_lora_rank"))


def _is_moe_layer(config, index):
    experts = _cfg_int(config, "n_routed_experts", "num_local_experts", "num_experts", default=0)
    if not experts:
        return False
    if index < _cfg_int(config, "first_k_dense_replace", default=0):
        return False
    freq = _cfg_int(config, "moe_layer_freq", "decoder_sparse_step", default=1) or 1
    return index % freq == 0 if "moe_layer_freq" in config else (index + 1) % freq == 0


def _attention_params(config, tp):
    """Projection parameters of one layer's attention on one rank, and its norm parameters (MLA's latent norms)."""
    hidden = _need(config, "hidden_size")
    heads = _need(config, "num_attention_heads")
    if is_mla(config):
        nope = _cfg_int(config, "qk_nope_head_dim", default=0)
        rope = _cfg_int(config, "qk_rope_head_dim", default=0)
        v_dim = _cfg_int(config, "v_head_dim", default=0) or nope
        kv_lora = _cfg_int(config, "kv_lora_rank", minimum=1)
        q_lora = _cfg_int(config, "q_lora_rank", default=0)
        if q_lora:
            replicated = hidden * q_lora
            split = q_lora * heads * (nope + rope)
        else:
            replicated = 0
            split = hidden * heads * (nope + rope)
        replicated += hidden * (kv_lora + rope)
        split += kv_lora * heads * (nope + v_dim) + heads * v_dim * hidden
        return replicated + split / tp, kv_lora + (q_lora or 0)
    head_dim = _head_dim(config, hidden, heads)
    kv_heads = _cfg_int(config, "num_key_value_heads", default=heads, minimum=1)
    kv_per_rank = max(1.0, kv_heads / tp)
    q_o = 2 * hidden * heads * head_dim / tp
    k_v = 2 * hidden * kv_per_rank * head_dim
    bias = 0
    if config.get("attention_bias") or config.get("model_type") == "qwen2":
        bias = heads * head_dim / tp + 2 * kv_per_rank * head_dim
    return q_o + k_v, bias


def _mlp_params(config, index, tp, ep=None):
    """Projection/expert parameters of one layer's MLP on one rank, and its router parameters."""
    hidden = config["hidden_size"]
    if not _is_moe_layer(config, index):
        return 3 * hidden * _need(config, "intermediate_size") / tp, 0
    experts = _cfg_int(config, "n_routed_experts", "num_local_experts", "num_experts", minimum=1)
    expert_inter = _cfg_int(config, "moe_intermediate_size", "intermediate_size", minimum=1)
    if expert_inter is None:
        raise PlanError("config.json: a MoE config needs moe_intermediate_size (or intermediate_size)")
    shared = _cfg_int(config, "n_shared_experts", default=0) * 3 * hidden * expert_inter
    shared += 3 * hidden * _cfg_int(config, "shared_expert_intermediate_size", default=0)
    router = hidden * experts
    if config.get("topk_method") == "noaux_tc":
        router += experts
    routed = experts * 3 * hidden * expert_inter
    return routed / (ep or tp) + shared / tp, router


def parameter_split(config, tp=1, ep=None):
    """``(matrices, other)``: parameters one rank holds, split into projection/expert matrices (what W8A8
    quantizes) and the rest (embeddings, ``lm_head``, norms, routers, biases). ``ep``: expert-parallel size."""
    config = load_config(config)
    hidden = _need(config, "hidden_size")
    layers = _need(config, "num_hidden_layers")
    vocab = _need(config, "vocab_size")
    embed = vocab * hidden / tp
    lm_head = 0 if config.get("tie_word_embeddings") else vocab * hidden / tp
    attn_matrices, attn_other = _attention_params(config, tp)
    mlp = [_mlp_params(config, index, tp, ep) for index in range(layers)]
    norms = layers * 2 * hidden + hidden
    matrices = layers * attn_matrices + sum(m for m, _r in mlp)
    other = embed + lm_head + layers * attn_other + sum(r for _m, r in mlp) + norms
    return matrices, other


def count_parameters(config, tp=1, ep=None):
    """Parameters of the model (``tp=1``) or held by one of ``tp`` tensor-parallel ranks (``ep``: the routed experts
    spread over that many expert-parallel ranks)."""
    matrices, other = parameter_split(config, tp, ep)
    return round(matrices + other)


def kv_bytes_per_token(config, tp=1, kv_bytes=2):
    """KV cache bytes one token takes on one NPU (see the module doc)."""
    config = load_config(config)
    layers = _need(config, "num_hidden_layers")
    if is_mla(config):
        return layers * (_cfg_int(config, "kv_lora_rank", minimum=1)
                         + _cfg_int(config, "qk_rope_head_dim", default=0)) * kv_bytes
    hidden = _need(config, "hidden_size")
    heads = _need(config, "num_attention_heads")
    head_dim = _head_dim(config, hidden, heads)
    kv_heads = _cfg_int(config, "num_key_value_heads", default=heads, minimum=1)
    per_rank = max(1, kv_heads // tp) if kv_heads >= tp else 1
    return 2 * layers * per_rank * head_dim * kv_bytes


def _dtype_bytes(name, config, what):
    key = str(name).lower()
    if key == "auto":
        key = str(_get(config, "torch_dtype", "dtype", default="bfloat16")).lower()
        if key == "float32":  # vLLM's "auto" serves float32 checkpoints in 16-bit
            key = "float16"
    if key not in DTYPE_BYTES:
        raise PlanError(f"{what}={name!r} is not a known dtype ({', '.join(sorted(DTYPE_BYTES))}, auto)")
    return DTYPE_BYTES[key]


def _positive(name, value, kind=float, allow_none=False):
    if value is None and allow_none:
        return None
    try:
        number = kind(value)
        exact = kind is not int or number == float(value)
    except (TypeError, ValueError, OverflowError):
        raise PlanError(f"{name} must be a positive number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(float(number)) or number <= 0 or not exact:
        raise PlanError(f"{name} must be a positive {'integer' if kind is int else 'number'}, got {value!r}")
    return number


def plan(config_json, dtype="auto", tensor_parallel_size=1, hbm_gib_per_npu=None, gpu_memory_utilization=0.9,
         max_model_len=None, max_num_seqs=None, kv_cache_dtype=None, block_size=128, reserved_gib=2.0,
         kv_cache_bytes=None, weight_bytes_per_param=None, expert_parallel_size=None, quantization=None):
    """The capacity plan (see the module doc for every formula). Raises PlanError on bad input."""
    config = load_config(config_json)
    tp = _positive("tensor_parallel_size", tensor_parallel_size, int)
    ep = _positive("expert_parallel_size", expert_parallel_size, int, allow_none=True)
    if quantization not in QUANTIZATIONS:
        raise PlanError(f"quantization={quantization!r}: use one of {', '.join(repr(q) for q in QUANTIZATIONS)} "
                        "(ascend: vllm-ascend's W8A8 checkpoints, --quantization ascend)")
    block = _positive("block_size", block_size, int)
    max_num_seqs = _positive("max_num_seqs", max_num_seqs, int, allow_none=True)
    util = _positive("gpu_memory_utilization", gpu_memory_utilization)
    if util > 1:
        raise PlanError(f"gpu_memory_utilization is a fraction of NPU memory (0-1], got {gpu_memory_utilization!r}")
    reserved = (_positive("reserved_gib", reserved_gib) if reserved_gib else 0.0) * GIB
    if kv_cache_bytes is None and hbm_gib_per_npu is None:
        raise PlanError("give hbm_gib_per_npu (64 on 910B1/B2/B3, 32 on 910B4) or an explicit kv_cache_bytes")

    warnings = []
    # Every number read from config.json goes through _need or _cfg_int: a value of the wrong type becomes a
    # PlanError naming the field, never a TypeError in a comparison (hypothesis found '0' here).
    max_positions = _cfg_int(config, "max_position_embeddings")
    if max_model_len is None:
        if not max_positions:
            raise PlanError("max_model_len is not given and config.json has no max_position_embeddings")
        max_model_len = max_positions
    max_model_len = _positive("max_model_len", max_model_len, int)
    if max_positions and max_model_len > max_positions:
        warnings.append(f"max_model_len {max_model_len} exceeds the model's max_position_embeddings "
                        f"{max_positions}; vLLM refuses it unless told to override")

    heads = _need(config, "num_attention_heads")
    if heads % tp:
        warnings.append(f"tensor_parallel_size {tp} does not divide num_attention_heads {heads}; vLLM refuses "
                        "such a split")
    dtype_bytes = _dtype_bytes(dtype, config, "dtype")
    if weight_bytes_per_param is not None:
        matrix_bytes = other_bytes = _positive("weight_bytes_per_param", weight_bytes_per_param)
    elif quantization == "ascend":
        matrix_bytes, other_bytes = 1, dtype_bytes
    else:
        matrix_bytes = other_bytes = dtype_bytes
        if config.get("quantization_config"):
            warnings.append("config.json has a quantization_config: weights were counted at dtype size; pass "
                            "weight_bytes_per_param (about 1 for W8A8) for a closer estimate")
    kv_dtype_bytes = _dtype_bytes(kv_cache_dtype or dtype, config, "kv_cache_dtype")

    params_total = count_parameters(config, 1)
    matrices, other = parameter_split(config, tp, ep)
    params_per_npu = round(matrices + other)
    weight_bytes_per_npu = int(matrices * matrix_bytes + other * other_bytes)
    kv_per_token = kv_bytes_per_token(config, tp, kv_dtype_bytes)

    budget = None
    if kv_cache_bytes is not None:
        kv_budget = int(_positive("kv_cache_bytes", kv_cache_bytes))
        weights_fit = True
        if hbm_gib_per_npu is not None:
            budget = _positive("hbm_gib_per_npu", hbm_gib_per_npu) * GIB * util
            weights_fit = weight_bytes_per_npu + reserved <= budget
    else:
        budget = _positive("hbm_gib_per_npu", hbm_gib_per_npu) * GIB * util
        kv_budget = int(max(0, budget - weight_bytes_per_npu - reserved))
        weights_fit = weight_bytes_per_npu + reserved < budget
    if not weights_fit:
        warnings.append(f"weights need {weight_bytes_per_npu / GIB:.1f} GiB per NPU plus {reserved / GIB:.1f} GiB "
                        f"reserved, but only {budget / GIB:.1f} GiB ({hbm_gib_per_npu} GiB x "
                        f"{util}) is usable: raise tensor_parallel_size or use a quantized model")

    blocks = kv_budget // (block * kv_per_token)
    tokens = blocks * block
    full_seqs = tokens // max_model_len
    one_fits = tokens >= max_model_len
    if weights_fit and not one_fits:
        warnings.append(f"the KV cache holds {tokens} tokens per NPU, fewer than one max_model_len sequence "
                        f"({max_model_len}): vLLM stops at start-up; lower max_model_len to {tokens} or less, or "
                        "raise gpu_memory_utilization / tensor_parallel_size")
    wanted = max_num_seqs * max_model_len if max_num_seqs else None
    if wanted and one_fits and wanted > tokens:
        warnings.append(f"PagedAttention KV cache overflow: max_num_seqs x max_model_len = {max_num_seqs} x "
                        f"{max_model_len} = {wanted} tokens, but the KV cache holds {tokens}; only {full_seqs} "
                        "full-length sequences fit at once and vLLM preempts (recomputes) the rest under load; "
                        f"lower max_num_seqs to {full_seqs} or max_model_len to {tokens // max_num_seqs}, or add "
                        "NPUs")

    return {
        "params_total": params_total,
        "params_per_npu": params_per_npu,
        "weight_bytes_per_npu": weight_bytes_per_npu,
        "weight_gib_per_npu": round(weight_bytes_per_npu / GIB, 2),
        "usable_bytes_per_npu": int(budget) if budget is not None else None,
        "kv_cache_bytes_per_npu": int(kv_budget),
        "kv_bytes_per_token_per_npu": kv_per_token,
        "kv_cache_blocks_per_npu": int(blocks),
        "kv_cache_tokens_per_npu": int(tokens),
        "max_model_len": max_model_len,
        "max_concurrent_full_seqs": int(full_seqs),
        "max_concurrency": round(tokens / max_model_len, 2),
        "requested_tokens": wanted,
        "mla": is_mla(config),
        "expert_parallel_size": ep,
        "quantization": quantization or None,
        "fits": bool(weights_fit and one_fits),
        "warnings": warnings,
    }
