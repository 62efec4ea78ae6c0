# Copyright (c) ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: parse_npu_smi
short_description: Parse the text output of C(npu-smi info)
version_added: 0.1.0
description:
  - Turns the table printed by Huawei Ascend C(npu-smi info) into a dictionary.
  - Reads the classic 910A/910B table (npu-smi 22.x-25.2), the wide 25.5+/26.x table, Atlas A3 (two dies per NPU),
    the 310P and old 310 tables and the 950 table, the process table, and the driver warning line.
  - Values printed as C(NA) or C(-) and values the layout does not print are null.
options:
  _input:
    description: The standard output of C(npu-smi info).
    type: string
    required: true
seealso:
  - module: ascendai.vllm.npu_info
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: Read npu-smi
  ansible.builtin.command: npu-smi info
  register: npu_smi
  changed_when: false

- name: Count the NPUs and the free HBM of NPU 0
  ansible.builtin.debug:
    msg: >-
      {{ (npu_smi.stdout | ascendai.vllm.parse_npu_smi).npus | length }} NPUs,
      {{ (npu_smi.stdout | ascendai.vllm.parse_npu_smi).npus[0].chips[0].hbm_total_mb
         - (npu_smi.stdout | ascendai.vllm.parse_npu_smi).npus[0].chips[0].hbm_used_mb }} MB free on NPU 0
"""

RETURN = r"""
_value:
  description: The parsed table.
  type: dict
  contains:
    npu_smi_version:
      description: Version of the npu-smi tool (first field of the header).
      type: str
    driver_version:
      description: Version after C(Version:) in the header.
      type: str
    layout:
      description: C(classic), C(wide), C(a3), C(310p), C(310) or C(950).
      type: str
    npus:
      description:
        - One entry per NPU with C(npu_id), C(name), C(health) (as printed; the worst of its chips),
          C(power_w), C(temp_c) and C(chips).
        - Each chip has C(chip_id), C(phy_id), C(bus_id), C(aicore_util_pct), C(memory_used_mb), C(memory_total_mb),
          C(hbm_used_mb), C(hbm_total_mb), C(hugepages_used), C(hugepages_total) (null when not printed),
          plus C(device_id), C(name), C(health), C(power_w) and C(temp_c) of its own row.
      type: list
      elements: dict
    processes:
      description: C(npu_id), C(chip_id), C(pid), C(name) (as printed, may be empty), C(memory_mb), C(container_pid).
      type: list
      elements: dict
    warnings:
      description: Lines starting with C([WARNING]) as printed.
      type: list
      elements: str
    npus_without_processes:
      description: NPU ids reported as 'No running processes found'.
      type: list
      elements: int
    elided:
      description: The capture has rows elided with C(...).
      type: bool
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._npu_smi import NpuSmiParseError, parse_info


def parse_npu_smi(text):
    """Parse the standard output of ``npu-smi info``."""
    if not isinstance(text, str):
        raise AnsibleFilterError(
            "parse_npu_smi: the input must be the text printed by 'npu-smi info' (a string, e.g. result.stdout), "
            "got {} {!r}".format(type(text).__name__, text if not isinstance(text, (dict, list)) else "...")
        )
    try:
        return parse_info(text)
    except NpuSmiParseError as exc:
        preview = text.strip()[:80]
        raise AnsibleFilterError(
            f"parse_npu_smi: cannot read the input {preview!r} as 'npu-smi info' output: {exc}. Pass the stdout of "
            "'npu-smi info' (not stdout_lines, not another subcommand)."
        ) from exc


class FilterModule:
    def filters(self):
        return {"parse_npu_smi": parse_npu_smi}
