# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: compat_stack
short_description: The one stack decision - a vllm-ascend release and what its compatibility row pins
version_added: 0.5.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Decides the serving stack from one input, the vllm-ascend release. Empty takes the collection's default
    release for the node (the newest final release whose aarch64 wheels install on O(glibc), among O(available)),
    the same choice as C('latest' | ascendai.vllm.compat_row).
  - The collection's roles read its result as the fact C(ascendai_stack), set once per host by the internal role
    C(ascendai.vllm._common) (entry point C(stack)); the offline bundle makes its controller-side choice with the
    same filter.
options:
  _input:
    description: The vllm-ascend release (C(vllm_ascend_version)), for example C(0.23.0); empty for the default.
    type: str
    required: true
  glibc:
    description: The node's glibc (C(2.28) on Kylin V10); empty or omitted means any. Narrows the default only.
    type: str
  available:
    description:
      - The vllm-ascend releases in the offline bundle's wheelhouse; omitted means any. Narrows the default only.
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: The stack of the default release on a Kylin V10 node
  ansible.builtin.set_fact:
    ascendai_stack: "{{ '' | ascendai.vllm.compat_stack(glibc='2.28') }}"

- name: The stack of a pinned release
  ansible.builtin.debug:
    msg: "{{ ('0.11.0' | ascendai.vllm.compat_stack).cann }}"
"""

RETURN = r"""
_value:
  description:
    - C(vllm_ascend), C(vllm) (empty when the row names several vLLM releases; C(vllm_versions) lists them),
      C(cann) (the newest CANN of the row; C(cann_versions) lists them), C(torch), C(torch_npu),
      C(torch_npu_pin), C(triton_ascend), C(python_min), C(python_max), C(glibc) (the node's, as given),
      C(glibc_min) (the oldest glibc the row's aarch64 wheels install on), C(label) (the row), C(asked) (the input).
    - C(source) maps each component to where it came from (C(vllm_ascend_version), the default choice, or the row).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._stack import StackError, decide_stack


def compat_stack(version, glibc=None, available=None):
    """Return the stack of a vllm-ascend release, or raise AnsibleFilterError naming the setting and the fix."""
    if version is None:
        version = ""
    if isinstance(version, (bool, float)) or not isinstance(version, (str, int)):
        raise AnsibleFilterError(f"compat_stack: vllm_ascend_version must be a quoted version string, got "
                                 f"{version!r:.200} (an unquoted 0.10 in YAML is the number 0.1)")
    if isinstance(glibc, (bool, float)) or not isinstance(glibc, (str, int, type(None))):
        raise AnsibleFilterError(f"compat_stack: glibc={glibc!r:.200} is not a version string; quote it, "
                                 f"e.g. '2.28' (an unquoted 2.30 is the number 2.3)")
    if available is not None and (isinstance(available, str) or not isinstance(available, (list, tuple))
                                  or not all(isinstance(v, str) for v in available)):
        raise AnsibleFilterError(f"compat_stack: available must be a list of vllm-ascend releases (quoted version "
                                 f"strings), got {available!r:.200}")
    try:
        return decide_stack(str(version), glibc=None if glibc in (None, "") else str(glibc).strip(),
                            available=available)
    except StackError as exc:
        raise AnsibleFilterError(f"compat_stack: {exc}") from exc


class FilterModule:
    """ascendai.vllm.compat_stack"""

    def filters(self):
        return {"compat_stack": compat_stack}
