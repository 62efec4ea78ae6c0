# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: from_guide
short_description: Translate the deployment guide's settings into real vLLM options and environment variables
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Takes the guide's settings as a mapping with C(config) (its C(config.py) block, including the
    C(distributed) mapping) and C(env) (its environment variables) and returns real vLLM options, real environment
    variables and a note for every key that was changed, renamed, dropped or rejected, saying why.
  - C(dtype half) becomes C(float16); C(max_seq_len) becomes C(max_model_len); C(batch_size) becomes
    C(max_num_seqs) (dropped when C(max_num_seqs) is set); C(executor ascend), C(distributed.backend hccl),
    C(swap_space) (removed in vLLM 0.18) and C(gradient_accumulation_steps) (training only) are dropped;
    C(ASCEND_GLOBAL_MEM_SIZE=90%) (not a real variable) becomes C(gpu_memory_utilization 0.9) and
    C(ASCEND_OP_DEV_ALLOC_BUFF) (not a real variable) becomes C(PYTORCH_NPU_ALLOC_CONF=expandable_segments:True).
  - Any other key that is not a vLLM option, or variable not known to CANN, torch_npu, HCCL, vLLM or vllm-ascend,
    is rejected with a note instead of passing through.
  - The result's C(settings) feed M(ansible.builtin.copy) through P(ascendai.vllm.vllm_config#filter).
options:
  _input:
    description: The guide's settings, a mapping with keys C(config) and C(env).
    type: dict
    required: true
  vllm_version:
    description:
      - The vLLM version the node will run (keeps an option removed only in a later release); empty or absent for none.
      - A version string; a number (an unquoted YAML C(0.10) is the number 0.1) or a text that is no version is an
        error.
    type: str
"""

EXAMPLES = r"""
- name: Show what the guide's settings become
  ansible.builtin.debug:
    msg: "{{ guide | ascendai.vllm.from_guide }}"
  vars:
    guide:
      config:
        tensor_parallel_size: 4
        dtype: half
        executor: ascend
        max_seq_len: 4096
        swap_space: 16
        max_num_seqs: 128
        distributed: {backend: hccl}
        gradient_accumulation_steps: 8
      env:
        ASCEND_GLOBAL_MEM_SIZE: "90%"
        ASCEND_OP_DEV_ALLOC_BUFF: "1"
"""

RETURN = r"""
_value:
  description: The translation.
  type: dict
  contains:
    settings:
      description: Real vLLM options, snake_case.
      type: dict
      sample: {tensor_parallel_size: 4, dtype: float16, max_model_len: 4096, max_num_seqs: 128,
               gpu_memory_utilization: 0.9}
    env:
      description: Real environment variables for the service.
      type: dict
      sample: {PYTORCH_NPU_ALLOC_CONF: "expandable_segments:True"}
    notes:
      description: One entry per key changed, renamed, dropped or rejected.
      type: list
      elements: dict
      sample: [{key: dtype, action: changed, why: "dtype 'half' is vLLM's 'float16' (canonical spelling)"}]
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._guide_settings import translate_guide


def from_guide(guide, vllm_version=None):
    """Return ``{settings, env, notes}`` for the guide's settings."""
    try:
        return translate_guide(guide, vllm_version=vllm_version)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"from_guide: {exc}") from exc


class FilterModule:
    """ascendai.vllm.from_guide"""

    def filters(self):
        return {"from_guide": from_guide}
