# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: model_config_check
short_description: Check a model's config.json for vLLM (architecture, attention dimensions, tensor parallelism)
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Reads a Hugging Face C(config.json) and lists every inconsistency vLLM would trip over, each message naming
    the key, its value and the fix, before minutes are spent loading weights.
  - C(architectures) must be a non-empty list and, when O(supported_architectures) is given (ask the installed
    vLLM through C(ModelRegistry.get_supported_archs)), hold at least one of them.
  - Without C(head_dim), C(hidden_size) must be divisible by C(num_attention_heads); the head size must be one
    vLLM's attention supports (O(head_dims)).
  - C(num_attention_heads) must be divisible by C(num_key_value_heads) (grouped-query attention) and by
    O(tensor_parallel_size); the KV heads must split evenly over the ranks, or the ranks over the KV heads.
  - DeepSeek-V2/V3 multi-head latent attention (C(kv_lora_rank)) is recognised; its head size is
    C(qk_nope_head_dim + qk_rope_head_dim); its latent cache width C(kv_lora_rank + qk_rope_head_dim) must be one
    the MLA backend in use accepts (O(mla_cache_sizes)). Multimodal configs are read from C(text_config).
  - DeepSeek-V2/V3 mixture of experts (C(n_routed_experts)) - C(num_experts_per_tok) within the experts,
    C(first_k_dense_replace) within the layers, and for C(noaux_tc)/C(group_limited_greedy) routing C(n_group)
    dividing the experts and C(topk_group) within the groups.
  - Returns a summary with C(problems); it does not fail on them, so that a play can report all at once.
options:
  _input:
    description: The model's C(config.json), as a mapping or a JSON string.
    type: raw
    required: true
  tensor_parallel_size:
    description: NPUs one model instance is split over.
    type: int
    default: 1
  supported_architectures:
    description: Architecture class names the installed vLLM supports; omitted, the architecture is not checked.
    type: list
    elements: str
  head_dims:
    description: Head sizes the attention backend accepts.
    type: list
    elements: int
    default: [32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512]
  mla_cache_sizes:
    description:
      - Latent cache widths (C(kv_lora_rank + qk_rope_head_dim)) the MLA attention backend accepts; omitted, the
        width is not checked.
      - vLLM 0.32 on the CPU accepts only 576 (DeepSeek-V2/V3's 512 + 64); see docs/sources.md, "vLLM on the CPU".
    type: list
    elements: int
  data_parallel_size:
    description: Data-parallel ranks of the service (vLLM's C(data_parallel_size)).
    type: int
    default: 1
  moe_data_parallel:
    description:
      - Whether the platform runs a mixture-of-experts model over more than one data-parallel rank. False for vLLM
        on the CPU, whose communicator lacks the C(all_gatherv) the MoE dispatch needs (vLLM 0.32 starts such a
        service and fails on the first request); a MoE model with O(data_parallel_size) above 1 is then a problem.
      - See docs/sources.md, "vLLM on the CPU".
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Check the model against a TP=4 deployment
  ansible.builtin.assert:
    that: _check.ok
    fail_msg: "{{ _check.problems | join('; ') }}"
  vars:
    _check: "{{ _config_slurp.content | b64decode | ascendai.vllm.model_config_check(tensor_parallel_size=4) }}"
"""

RETURN = r"""
_value:
  description: The summary.
  type: dict
  contains:
    ok: {description: No problem found., type: bool}
    problems: {description: One message per problem (key, value, fix)., type: list, elements: str}
    architecture: {description: The first architecture (the first supported one when the list is given)., type: str}
    architectures: {description: C(architectures) of the config., type: list, elements: str}
    model_type: {description: C(model_type) of the config., type: str}
    head_dim: {description: Attention head size., type: int}
    attention: {description: C(mha), C(gqa), C(mqa) or C(mla)., type: str}
    mla_cache_size: {description: "MLA only: the latent cache width C(kv_lora_rank + qk_rope_head_dim).", type: int}
    experts:
      description: "MoE only: C(routed), C(shared), C(per_token) experts and C(topk_method)."
      type: dict
    num_attention_heads: {description: Query heads., type: int}
    num_key_value_heads: {description: Key/value heads (none for MLA)., type: int}
    hidden_size: {description: Hidden size., type: int}
    num_hidden_layers: {description: Layers., type: int}
    vocab_size: {description: Vocabulary size., type: int}
    torch_dtype: {description: The checkpoint's C(torch_dtype)., type: str}
    quantization: {description: C(quantization_config.quant_method), if any., type: str}
    tensor_parallel_size: {description: The tensor-parallel size checked against., type: int}
    data_parallel_size: {description: The data-parallel size checked against., type: int}
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._model_config import ConfigError, check_model_config


def model_config_check(config_json, tensor_parallel_size=1, supported_architectures=None, head_dims=None,
                       mla_cache_sizes=None, data_parallel_size=1, moe_data_parallel=True):
    """See DOCUMENTATION."""
    try:
        tp = int(tensor_parallel_size)
        if isinstance(tensor_parallel_size, bool) or tp != float(tensor_parallel_size):   # 2.9 is not 2
            raise ValueError(tensor_parallel_size)
    except (TypeError, ValueError, OverflowError):
        raise AnsibleFilterError(f"model_config_check: tensor_parallel_size={tensor_parallel_size!r} is not an "
                                 "integer; pass the number of NPUs one instance uses, e.g. 4") from None
    try:
        dp = int(data_parallel_size)
        if isinstance(data_parallel_size, bool) or dp != float(data_parallel_size):
            raise ValueError(data_parallel_size)
    except (TypeError, ValueError, OverflowError):
        raise AnsibleFilterError(f"model_config_check: data_parallel_size={data_parallel_size!r} is not an "
                                 "integer; pass the service's data-parallel ranks, e.g. 2") from None
    if not isinstance(moe_data_parallel, bool):
        raise AnsibleFilterError(f"model_config_check: moe_data_parallel={moe_data_parallel!r} must be true or "
                                 "false (false for vLLM on the CPU)")
    if supported_architectures is not None and (isinstance(supported_architectures, str)
                                                or not isinstance(supported_architectures, (list, tuple, set))):
        raise AnsibleFilterError(f"model_config_check: supported_architectures={supported_architectures!r} must be "
                                 "a list of class names (parse vLLM's output with from_json)")

    def _dim(d):
        if isinstance(d, str):
            return d.isdigit() and len(d) < 7
        return isinstance(d, int) and not isinstance(d, bool) and d > 0

    dims = None
    if head_dims is not None:
        if not isinstance(head_dims, (list, tuple)) or not all(_dim(d) for d in head_dims):
            raise AnsibleFilterError(f"model_config_check: head_dims={head_dims!r} must be a list of positive "
                                     "integers (the head sizes the attention backend supports)")
        dims = [int(d) for d in head_dims]
    widths = None
    if mla_cache_sizes is not None:
        if not isinstance(mla_cache_sizes, (list, tuple)) or not all(_dim(d) for d in mla_cache_sizes):
            raise AnsibleFilterError(f"model_config_check: mla_cache_sizes={mla_cache_sizes!r} must be a list of "
                                     "positive integers (the MLA latent cache widths the backend accepts, e.g. [576])")
        widths = [int(d) for d in mla_cache_sizes]
    try:
        return check_model_config(config_json, tensor_parallel_size=tp,
                                  supported_architectures=supported_architectures, head_dims=dims,
                                  mla_cache_sizes=widths, data_parallel_size=dp,
                                  moe_data_parallel=moe_data_parallel)
    except ConfigError as exc:
        raise AnsibleFilterError(f"model_config_check: {exc}") from exc


class FilterModule:
    """ascendai.vllm.model_config_check"""

    def filters(self):
        return {"model_config_check": model_config_check}
