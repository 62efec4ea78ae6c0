# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: vllm_config
short_description: Turn role variables into the YAML mapping that C(vllm serve --config FILE) reads
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Takes a mapping of vLLM option names (snake_case as in vLLM's EngineArgs, kebab-case also accepted) to values
    and returns the mapping to write, with C(to_nice_yaml), as the file given to C(vllm serve --config).
  - Keys are written kebab-case (C(max-model-len)). vLLM's config loader turns a C(false) value into
    C(--no-KEY) only when that exact option string exists, so C(enable_prefix_caching=false) would be dropped
    silently while C(enable-prefix-caching=false) works.
  - Options whose value is C(null) are left out (vLLM's default applies). Mappings (C(compilation_config),
    C(additional_config), C(speculative_config)...) stay mappings; vLLM turns them into JSON.
  - With O(vllm_version), names are checked against that release's option table (generated from each vLLM
    sdist by C(tools/generate/vllm_release_facts.py)) and values are written the way that release's C(--config) loader
    reads them. Before vLLM 0.32 the loader drops a C(false); a C(--X/--no-X) option set to C(false) is written
    C(no-X) set to C(true). Up to vLLM 0.14 the loader passes a mapping as C(str(dict)), so mappings are written as JSON
    strings. Up to 0.10.0 a list becomes C(str(list)), so one item is written as a scalar and more fail.
  - Fails, naming every bad key, on options that release removed or never had (C(swap_space), C(device),
    C(worker_use_ray), C(adapter), C(num_gpus_per_worker), C(executor)) with what to use instead, on C(api_key)
    (a secret belongs in the 0600 environment file as C(VLLM_API_KEY)), on names unknown to the release (vLLM
    0.32 without O(vllm_version)) unless O(allow_unknown=true), and on values the release cannot read.
  - With O(vllm_ascend_version), fails on an C(additional_config) switch that vllm-ascend release ignores, naming
    the form it reads (C(scheduler_config.enable_balance_scheduling) is read from v0.25.1rc1 only, the top-level
    C(enable_balance_scheduling) from v0.20.2rc1).
  - The rendered file must still be validated on the node against the installed vLLM
    (the M(ascendai.vllm.vllm_config_file) module), because options differ between vLLM releases.
options:
  _input:
    description: Mapping of vLLM option names to values.
    type: dict
    required: true
  model:
    description: The model path or name (written as C(model), first).
    type: str
  served_model_name:
    description: The name(s) clients use (written as C(served-model-name)).
    type: raw
  vllm_version:
    description:
      - The vLLM version on the node (a local label such as C(+cpu) is ignored). A release between two releases of
        the table is read with the older one. Empty or absent uses vLLM 0.32.0.
      - A string; a number is an error (an unquoted YAML C(0.10) is the number 0.1), so quote it.
    type: str
  allow_unknown:
    description:
      - Pass option names that the release does not know (the node-side check still applies).
      - A boolean; anything else (the text C(false) included) is an error.
    type: bool
    default: false
  vllm_ascend_version:
    description:
      - The vllm-ascend release on the node (C(0.23.0)); empty or absent checks no release-dependent
        C(additional_config) switch.
    type: str
"""

EXAMPLES = r"""
- name: Render the vLLM configuration
  ansible.builtin.copy:
    dest: /etc/vllm/config.yaml
    content: "{{ vllm_service_options | ascendai.vllm.vllm_config(model=vllm_service_model_path,
                 served_model_name=vllm_service_served_name) | to_nice_yaml(indent=2) }}"
    mode: "0644"
  vars:
    vllm_service_options:
      tensor_parallel_size: 4
      max_model_len: 4096
      max_num_seqs: 64
      gpu_memory_utilization: 0.9
      enable_prefix_caching: false
      compilation_config: {cudagraph_mode: FULL_DECODE_ONLY}
"""

RETURN = r"""
_value:
  description: The config file mapping, kebab-case keys, C(model) and C(served-model-name) first.
  type: dict
  sample: {model: /srv/models/deepseek-llm-67b-chat, served-model-name: deepseek-67b, tensor-parallel-size: 4,
           max-model-len: 4096, enable-prefix-caching: false}
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._vllm_options import OptionError, render_config


def vllm_config(options, model=None, served_model_name=None, vllm_version=None, allow_unknown=False,
                vllm_ascend_version=None):
    """Return the ``vllm serve --config`` mapping or raise AnsibleFilterError naming every bad option."""
    try:
        return render_config(options, model=model, served_model_name=served_model_name, vllm_version=vllm_version,
                             allow_unknown=allow_unknown, vllm_ascend_version=vllm_ascend_version)
    except OptionError as exc:
        raise AnsibleFilterError(f"vllm_config: {exc}") from exc


class FilterModule:
    """ascendai.vllm.vllm_config"""

    def filters(self):
        return {"vllm_config": vllm_config}
