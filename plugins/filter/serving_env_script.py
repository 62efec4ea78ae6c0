# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: serving_env_script
short_description: The CANN environment script the serving stack sources - the current generation's, or site.yml's
version_added: 0.5.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Returns C(<root>/current/env.sh) when the host's local fact C(ascendai_generation) (written by the
    ascendai.vllm.generation role) names a current generation with its own CANN release (C(cann); the upgrade
    playbook writes that generation's C(env.sh)), else O(fallback) (site.yml's script, ascend_cann_env_script).
  - The path goes through the C(current) link, as M(ascendai.vllm.serving_venv)'s does, so a generation's venv and
    its CANN are switched together.
options:
  _input:
    description: The host's C(ansible_local) (C(ansible_local | default({})) where facts may be missing).
    type: dict
    required: true
  fallback:
    description: The script of a node without generations, or whose current generation has no CANN of its own.
    type: str
    default: /usr/local/Ascend/ascendai-env.sh
"""

EXAMPLES = r"""
- name: Run the serving stack's Python with its CANN
  ansible.builtin.command:
    argv:
      - bash
      - -c
      - '. "$0" && exec "$1" -c "import torch_npu"'
      - "{{ ansible_local | default({}) | ascendai.vllm.serving_env_script }}"
      - "{{ ansible_local | default({}) | ascendai.vllm.serving_venv }}/bin/python"
  changed_when: false
"""

RETURN = r"""
_value:
  description: The script's path.
  type: str
  sample: /opt/ascendai/generations/current/env.sh
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._generation import SITE_ENV_SCRIPT, GenerationError
from ansible_collections.ascendai.vllm.plugins.module_utils._generation import serving_env_script as _serving_env_script


def serving_env_script(local_facts, fallback=SITE_ENV_SCRIPT):
    """The serving CANN environment script of the host whose ansible_local this is."""
    try:
        return _serving_env_script(local_facts, fallback)
    except GenerationError as exc:
        raise AnsibleFilterError(f"serving_env_script: {exc}") from None


class FilterModule:
    """ascendai.vllm.serving_env_script"""

    def filters(self):
        return {"serving_env_script": serving_env_script}
