# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: ascend_version_compare
short_description: Compare two Ascend driver, firmware or CANN versions
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Returns V(-1), V(0) or V(1) as the input version is older than, equal to or newer than O(other).
  - Understands the Ascend version strings - a part C(rcN) (any case) sorts before a number at the same place, so
    C(24.1.rc3) < C(24.1.0) < C(25.2.0), C(8.2.RC1) < C(8.2.0), firmware C(7.5.0.1.129) < C(7.7.0.1.231); missing
    trailing parts count as C(0).
  - "Understands Huawei's pre-release and dated builds: a suffix C(-alpha.N), C(-beta.N) or C(-rc.N) (any case) is a
    pre-release of the version before it (C(9.1.0-beta.3), as Huawei's CANN images name it, equals C(9.1.0.beta3));
    a suffix C(_) and 8 to 14 digits is a dated build (C(9.2.0_20260930220649)). The order within one version is
    alpha < beta < rc < dated build < the release: C(9.1.0-beta.3) < C(9.1.0-rc.1) < C(9.1.0_20260930220649) <
    C(9.1.0) < C(9.1.1); dated builds of one version follow their timestamps."
  - It is a total order (antisymmetric and transitive); versions that differ only in trailing zeros or in letter
    case are equal. Anything else (C(latest), C(9.1.0-gamma), C(9.1.0_abc)) is an error.
  - With O(operator), returns a boolean instead (C(<), C(<=), C(==), C(!=), C(>=), C(>)).
  - Both versions must be strings. A number is an error, an int as well as a float (an unquoted YAML C(8.20) is the
    number 8.2), so quote versions in YAML.
options:
  _input:
    description: The version on the left, for example the installed one.
    type: str
    required: true
  other:
    description: The version on the right, for example the wanted one.
    type: str
    required: true
  operator:
    description: Return the truth of O(_input) OPERATOR O(other) instead of -1/0/1.
    type: str
    choices: ['<', '<=', '==', '!=', '>=', '>']
seealso:
  - module: ascendai.vllm.ascend_package_info
"""

EXAMPLES = r"""
- name: Is the installed driver older than the wanted one?
  ansible.builtin.debug:
    msg: "{{ '24.1.rc3' | ascendai.vllm.ascend_version_compare('25.2.0') }}"   # -1

- name: A beta of CANN is older than its release
  ansible.builtin.debug:
    msg: "{{ '9.1.0-beta.3' | ascendai.vllm.ascend_version_compare('9.1.0', '<') }}"   # true

- name: Refuse a downgrade
  ansible.builtin.assert:
    that: installed_cann | ascendai.vllm.ascend_version_compare('8.3.RC2', '<=')
"""

RETURN = r"""
_value:
  description: V(-1), V(0) or V(1); a boolean with O(operator).
  type: raw
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._ascend_packages import AscendVersionError, compare_versions

_OPERATORS = {"<": (-1,), "<=": (-1, 0), "==": (0,), "!=": (-1, 1), ">=": (0, 1), ">": (1,)}


def ascend_version_compare(version, other, operator=None):
    if operator is not None and (not isinstance(operator, str) or operator not in _OPERATORS):
        raise AnsibleFilterError(f"ascend_version_compare: operator {operator!r} is not one of "
                                 f"{', '.join(_OPERATORS)}")
    for name, value in (("input", version), ("other", other)):
        if not isinstance(value, str):
            # a YAML float loses digits (8.20 is 8.2) and an int is no release (824 is not 8.2.4)
            raise AnsibleFilterError(f"ascend_version_compare: {name}={value!r} is not a version string; quote "
                                     f"it in YAML, e.g. '8.2.0' (an unquoted 8.20 is the number 8.2)")
    try:
        order = compare_versions(version, other)
    except AscendVersionError as exc:
        raise AnsibleFilterError(f"ascend_version_compare({version!r}, {other!r}): {exc}") from exc
    return order if operator is None else order in _OPERATORS[operator]


class FilterModule:
    """ascendai.vllm.ascend_version_compare"""

    def filters(self):
        return {"ascend_version_compare": ascend_version_compare}
