# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: compat_check
short_description: Reject a vllm-ascend / vLLM / Python / CANN / torch / torch_npu combination that no release supports
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Checks a software stack against the collection's one compatibility table (vllm-ascend's versioning policy,
    one complete row per release) and returns the matching row.
  - Fails with a message that names every mismatch, the row the vllm-ascend release needs, and the row that
    would work with the rest of the stack (for example vllm-ascend 0.23 with CANN 8.1 names row v0.9.2rc1).
  - A partial version matches by prefix (C(0.23) matches C(0.23.0), CANN C(8.1) matches C(8.1.RC1)); otherwise
    versions must be equal, ignoring a leading C(v), letter case and a local label such as C(+cpu).
  - Quote versions in YAML; an unquoted C(3.10) is the number 3.1 and is refused.
options:
  _input:
    description:
      - The vllm-ascend release (for example C(0.23.0)), or a mapping with any of the keys C(vllm_ascend),
        C(vllm), C(python), C(cann), C(torch), C(torch_npu), C(glibc); keyword arguments override the mapping.
    type: raw
    required: true
  vllm:
    description: The vLLM version (must come from the same row as vllm-ascend).
    type: str
  python:
    description: The Python version (major.minor is compared with the row's range).
    type: str
  cann:
    description: The CANN toolkit version, for example C(9.1.0) or C(8.2.RC1).
    type: str
  torch:
    description: The torch version.
    type: str
  torch_npu:
    description: The torch_npu version; any build of the row's release fits (C(2.7.1) and C(2.7.1.post1)).
    type: str
  glibc:
    description:
      - The C library of an aarch64 node (C(getconf GNU_LIBC_VERSION), for example C(2.28) on Kylin V10); it must be
        at least the glibc the row's aarch64 wheels are built for (manylinux tags; v0.20 and later need 2.34; a
        release PyPI has as an sdist only fits no glibc).
    type: str
"""

EXAMPLES = r"""
- name: Fail early on an impossible stack
  ansible.builtin.set_fact:
    vllm_row: "{{ '0.23.0' | ascendai.vllm.compat_check(cann=cann_version, python=ansible_facts.python_version) }}"

- name: Check a whole mapping
  ansible.builtin.debug:
    msg: "{{ stack | ascendai.vllm.compat_check }}"
  vars:
    stack: {vllm_ascend: '0.23.0', vllm: '0.23.0', cann: '9.1.0', python: '3.11'}
"""

RETURN = r"""
_value:
  description:
    - The compatibility row of the vllm-ascend release (when no release is given, the newest row that accepts
      the other components).
    - Keys C(label), C(vllm_ascend_min), C(vllm_ascend_max), C(vllm), C(vllm_min), C(vllm_max), C(python),
      C(python_min), C(python_max), C(cann) (list), C(torch), C(torch_npu), C(torch_npu_pin) (the pip prefix pin of
      torch_npu's release, for example C(2.7.1.*)), C(triton_ascend), C(glibc) (the oldest glibc its aarch64
      wheels install on), C(source).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._compat_matrix import check_combination, combination_error

_KEYS = ("vllm_ascend", "vllm", "python", "cann", "torch", "torch_npu", "glibc")


def _version_text(name, value):
    if value is None:
        return None
    if isinstance(value, (bool, float)):
        raise AnsibleFilterError(f"compat_check: {name}={value!r} is not a version string; quote it in YAML "
                                 f"(an unquoted 3.10 is the number 3.1), for example {name}: '3.10'")
    if not isinstance(value, (str, int)):
        raise AnsibleFilterError(f"compat_check: {name} must be a version string, got {type(value).__name__}")
    return str(value).strip() or None


def compat_check(data, vllm=None, python=None, cann=None, torch=None, torch_npu=None, glibc=None):
    """Return the compatibility row for the stack or raise AnsibleFilterError naming the row that would work."""
    if isinstance(data, dict):
        unknown = sorted(set(data) - set(_KEYS))
        if unknown:
            raise AnsibleFilterError(f"compat_check: unknown keys {unknown}; use {list(_KEYS)}")
        components = {key: data.get(key) for key in _KEYS}
    else:
        components = dict.fromkeys(_KEYS)
        components["vllm_ascend"] = data
    overrides = {"vllm": vllm, "python": python, "cann": cann, "torch": torch, "torch_npu": torch_npu, "glibc": glibc}
    components.update({key: value for key, value in overrides.items() if value is not None})
    components = {key: _version_text(key, value) for key, value in components.items()}
    try:
        result = check_combination(**components)
    except ValueError as exc:
        raise AnsibleFilterError(f"compat_check: {exc}") from exc
    if not result["ok"]:
        raise AnsibleFilterError(combination_error(result, **components))
    return result["row"] if result["row"] is not None else result["working_rows"][0]


class FilterModule:
    """ascendai.vllm.compat_check"""

    def filters(self):
        return {"compat_check": compat_check}
