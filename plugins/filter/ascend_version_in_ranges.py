# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: ascend_version_in_ranges
short_description: Test an Ascend version against the compatibility ranges of a package's version.info
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Returns true when the input version lies in one of the C([low,high]) ranges of O(ranges), as printed in the
    C(compatible_version_fw) of a driver C(version.info) (C([7.0.0,7.2.99])) or the C(compatible_version_drv) of a
    firmware C(version.info) (C([23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.])).
  - Bounds are inclusive. A trailing dot on the upper bound takes every version that extends it (C(23.0.rc3.) holds
    C(23.0.rc3.1)); a shorter upper bound compares only that many parts (C(7.2.99) holds C(7.2.99.5)).
  - Release-family lists (C([V100R001C15],[V100R001C17]), the C(compatible_version) of CANN and driver packages)
    are matched against the family of an C(Innerversion) such as C(V100R001C23SPC002B210) instead.
options:
  _input:
    description:
      - The version (or, for family lists, the Innerversion) to test.
      - A string; a number is an error (an unquoted YAML C(7.10) is the number 7.1), so quote it.
    type: str
    required: true
  ranges:
    description: The range text from version.info.
    type: str
    required: true
seealso:
  - module: ascendai.vllm.ascend_package_info
  - plugin: ascendai.vllm.ascend_version_compare
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Does the firmware fit the driver?
  ansible.builtin.assert:
    that: "'7.7.0.1.231' | ascendai.vllm.ascend_version_in_ranges('[7.0.0,7.7.99]')"

- name: Does CANN list the driver's release family?
  ansible.builtin.debug:
    msg: "{{ 'V100R001C23SPC001B211' | ascendai.vllm.ascend_version_in_ranges('[V100R001C21],[V100R001C23]') }}"
"""

RETURN = r"""
_value:
  description: True when the version (or family) is in the ranges.
  type: bool
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._ascend_packages import (
    AscendVersionError,
    family,
    family_listed,
    parse_ranges,
    version_in_ranges,
)


def ascend_version_in_ranges(version, ranges):
    if not isinstance(ranges, str) or not parse_ranges(ranges):
        raise AnsibleFilterError(f"ascend_version_in_ranges: ranges={ranges!r} holds no [low,high] or [family] "
                                 f"entry; pass the compatible_version* text of a version.info, e.g. "
                                 f"'[7.0.0,7.2.99]'")
    if not isinstance(version, str):
        # a YAML float loses digits (7.10 is 7.1) and an int is no release: no number is read as a version
        raise AnsibleFilterError(f"ascend_version_in_ranges: version={version!r} is not a version string; quote it "
                                 f"in YAML, e.g. '7.7.0.1.231', or pass the Version or Innerversion of a "
                                 f"version.info")
    text = version.strip()
    if family(text):
        return family_listed(text, ranges)
    try:
        return version_in_ranges(text, ranges)
    except AscendVersionError as exc:
        raise AnsibleFilterError(f"ascend_version_in_ranges({version!r}, {ranges!r}): {exc}") from exc


class FilterModule:
    """ascendai.vllm.ascend_version_in_ranges"""

    def filters(self):
        return {"ascend_version_in_ranges": ascend_version_in_ranges}
