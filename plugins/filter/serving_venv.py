# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: serving_venv
short_description: The venv that serves on a node - the current generation's, or site.yml's
version_added: 0.5.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Returns C(<root>/current/venv) when the host's local fact C(ascendai_generation) (written by the
    ascendai.vllm.generation role) names a current generation, else O(fallback) (site.yml's venv).
  - The path goes through the C(current) link, so a process started after a switch runs the new generation.
options:
  _input:
    description: The host's C(ansible_local) (C(ansible_local | default({})) where facts may be missing).
    type: dict
    required: true
  fallback:
    description: The venv of a node without generations.
    type: str
    default: /opt/ascendai/venvs/vllm
"""

EXAMPLES = r"""
- name: Run the serving stack's Python
  ansible.builtin.command:
    argv: ["{{ ansible_local | default({}) | ascendai.vllm.serving_venv }}/bin/python", -c, "import vllm"]
  changed_when: false
"""

RETURN = r"""
_value:
  description: The venv's path.
  type: str
  sample: /opt/ascendai/generations/current/venv
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._generation import SITE_VENV, GenerationError
from ansible_collections.ascendai.vllm.plugins.module_utils._generation import serving_venv as _serving_venv


def serving_venv(local_facts, fallback=SITE_VENV):
    """The serving venv of the host whose ansible_local this is."""
    try:
        return _serving_venv(local_facts, fallback)
    except GenerationError as exc:
        raise AnsibleFilterError(f"serving_venv: {exc}") from None


class FilterModule:
    """ascendai.vllm.serving_venv"""

    def filters(self):
        return {"serving_venv": serving_venv}
