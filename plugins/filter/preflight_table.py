# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: preflight_table
short_description: The preflight table, its header line followed by each host's line
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Puts the column header (host, arch, mem GiB, free GB, NPUs, driver / firmware, CANN toolkit / kernels / nnal,
    problems) above the hosts' lines that P(ascendai.vllm.preflight_report#filter) returns as C(row).
options:
  _input:
    description:
      - The hosts' lines, the C(row) strings of P(ascendai.vllm.preflight_report#filter). An item that is not a
        string (a number, V(None), the whole report) is an error naming it.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Print what will be done on each host
  ansible.builtin.debug:
    msg: >-
      {{ ansible_play_hosts | map('extract', hostvars, ['_preflight_report', 'row'])
         | ascendai.vllm.preflight_table }}
  run_once: true
"""

RETURN = r"""
_value:
  description: The header line, then the input lines.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._preflight import PreflightError, table


def preflight_table(rows):
    """``[header] + rows``."""
    if isinstance(rows, (str, bytes, dict)) or not hasattr(rows, "__iter__"):
        raise AnsibleFilterError(f"preflight_table: the input must be the list of host lines, got {rows!r}")
    try:
        return table(rows)
    except PreflightError as exc:
        raise AnsibleFilterError(f"preflight_table: {exc}") from None


class FilterModule:  # pylint: disable=too-few-public-methods
    """ascendai.vllm.preflight_table."""

    def filters(self):
        return {"preflight_table": preflight_table}
