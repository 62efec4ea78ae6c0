# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: kv_cache_plan
short_description: Estimate weights per NPU, KV cache tokens and concurrency from a model's config.json
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Counts the model's parameters from its Hugging Face C(config.json) (dense Llama / DeepSeek-LLM / Qwen style,
    DeepSeek-V2/V3 MLA with MoE, Mixtral and Qwen MoE), splits them over tensor-parallel ranks as vLLM does,
    and computes how many tokens the KV cache of one NPU holds and how many full-length sequences fit at once.
  - KV bytes per token per NPU are C(2 x layers x max(1, kv_heads/tp) x head_dim x bytes); for MLA
    C(layers x (kv_lora_rank + qk_rope_head_dim) x bytes), not split by tensor parallelism.
  - The KV budget is C(hbm_gib_per_npu x gpu_memory_utilization - weights - reserved_gib), or O(kv_cache_bytes)
    when given (the CPU sandbox sets it with C(VLLM_CPU_KVCACHE_SPACE)), counted in whole blocks of
    O(block_size) tokens like vLLM's start-up line C(KV cache size N tokens).
  - Warns about the guide's "PagedAttention KV cache overflow" (C(max_num_seqs x max_model_len) beyond the cache),
    a cache smaller than one sequence, weights that do not fit, and a TP size that does not divide the heads.
options:
  _input:
    description: The model's C(config.json), as a mapping or a JSON string.
    type: raw
    required: true
  dtype:
    description: vLLM C(--dtype) (C(auto) reads the checkpoint's dtype).
    type: str
    default: auto
  tensor_parallel_size:
    description: NPUs one model instance is split over.
    type: int
    default: 1
  hbm_gib_per_npu:
    description: Memory of one NPU in GiB (64 on 910B1/B2/B3, 32 on 910B4). Needed unless O(kv_cache_bytes) is given.
    type: float
  gpu_memory_utilization:
    description: vLLM C(--gpu-memory-utilization).
    type: float
    default: 0.9
  max_model_len:
    description: vLLM C(--max-model-len); defaults to the config's C(max_position_embeddings).
    type: int
  max_num_seqs:
    description: vLLM C(--max-num-seqs); without it the overflow check is skipped.
    type: int
  kv_cache_dtype:
    description: vLLM C(--kv-cache-dtype); defaults to O(dtype).
    type: str
  block_size:
    description: Tokens per KV cache block (128 on Ascend and on the CPU backend).
    type: int
    default: 128
  reserved_gib:
    description: Memory per NPU that is neither weights nor KV cache (activation peak, graphs, HCCL buffers).
    type: float
    default: 2.0
  kv_cache_bytes:
    description: Explicit KV cache bytes per NPU (instead of the HBM budget).
    type: int
  weight_bytes_per_param:
    description: Bytes per weight for quantized checkpoints (about 1 for W8A8); overrides O(quantization).
    type: float
  quantization:
    description:
      - vLLM C(--quantization). C(ascend) (vllm-ascend's W8A8 checkpoints made by msModelSlim) counts projection and
        expert matrices at 1 byte per weight, embeddings, C(lm_head), norms and routers at O(dtype)'s size.
    type: str
    choices: ['', ascend]
  expert_parallel_size:
    description:
      - Ranks the routed experts are spread over, tensor-parallel size x data-parallel size (vLLM flattens TP across
        DP for the MoE layers; with C(--enable-expert-parallel) each rank holds whole experts). Attention, shared
        experts and dense layers stay split by O(tensor_parallel_size). Omitted, the experts are split by
        O(tensor_parallel_size).
    type: int
"""

EXAMPLES = r"""
- name: Plan DeepSeek-LLM-67B on four 64 GiB 910B NPUs
  ansible.builtin.set_fact:
    vllm_plan: "{{ lookup('ansible.builtin.file', model_dir ~ '/config.json') | from_json
                   | ascendai.vllm.kv_cache_plan(dtype='float16', tensor_parallel_size=4, hbm_gib_per_npu=64,
                                                 gpu_memory_utilization=0.9, max_model_len=4096, max_num_seqs=128) }}"

- name: Stop when the model does not fit
  ansible.builtin.assert:
    that: vllm_plan.fits
    fail_msg: "{{ vllm_plan.warnings }}"
"""

RETURN = r"""
_value:
  description: The plan.
  type: dict
  contains:
    params_total: {description: Parameters of the model., type: int}
    weight_bytes_per_npu: {description: Weight bytes one NPU holds., type: int}
    kv_bytes_per_token_per_npu: {description: KV cache bytes of one token on one NPU., type: int}
    kv_cache_bytes_per_npu: {description: Bytes left for the KV cache on one NPU., type: int}
    kv_cache_tokens_per_npu: {description: Tokens the KV cache holds (whole blocks)., type: int}
    max_concurrent_full_seqs: {description: Sequences of max_model_len tokens that fit at once., type: int}
    max_concurrency: {description: Same as vLLM's "Maximum concurrency" (tokens / max_model_len)., type: float}
    expert_parallel_size: {description: The expert-parallel size planned with (none without)., type: int}
    quantization: {description: The quantization planned with (none without)., type: str}
    fits: {description: The weights fit and one max_model_len sequence fits., type: bool}
    warnings: {description: Human-readable problems., type: list, elements: str}
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._kv_cache import PlanError, plan


def kv_cache_plan(config_json, **kwargs):
    """Return the capacity plan for ``config_json`` (see DOCUMENTATION)."""
    allowed = ("dtype", "tensor_parallel_size", "hbm_gib_per_npu", "gpu_memory_utilization", "max_model_len",
               "max_num_seqs", "kv_cache_dtype", "block_size", "reserved_gib", "kv_cache_bytes",
               "weight_bytes_per_param", "expert_parallel_size", "quantization")
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise AnsibleFilterError(f"kv_cache_plan: unknown arguments {unknown}; use {list(allowed)}")
    try:
        return plan(config_json, **kwargs)
    except PlanError as exc:
        raise AnsibleFilterError(f"kv_cache_plan: {exc}") from exc


class FilterModule:
    """ascendai.vllm.kv_cache_plan"""

    def filters(self):
        return {"kv_cache_plan": kv_cache_plan}
