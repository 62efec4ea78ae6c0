# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: preflight_report
short_description: The preflight verdict of one host, and its line of the preflight table
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Judges what the ascendai.vllm.preflight role gathered on a host - CPU architecture, memory, free space where the
    model goes, the NPUs (count and health, from M(ascendai.vllm.npu_info)) and the plans of the ascend_driver and
    ascend_cann roles - and returns the problems that stop a deployment with that host's line of the table.
  - A plan step whose action is C(refuse) (installed newer than wanted) is a problem; a downgrade is never done.
options:
  _input:
    description:
      - The host, a mapping with C(name), C(architecture) and C(memtotal_mb) (Ansible facts), C(free_bytes) (or
        C(df), the C(df -P -B1 DIR | tail -n 1) line), C(npu) (the result of M(ascendai.vllm.npu_info), C({})
        without one), C(npu_smi) (whether npu-smi is installed), C(expected_npus) (0 for any count),
        C(driver_plan) and C(cann_plan).
    type: dict
    required: true
  architectures:
    description: CPU architectures a node may have.
    type: list
    elements: str
    required: true
  min_memory_mb:
    description: Least memory in MB.
    type: int
    required: true
  model_dir:
    description: Where the model goes (named in the problem).
    type: str
    required: true
  model_free_gb:
    description: Least free space for the model, in GB (10^9 bytes).
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Note this host's line and problems
  ansible.builtin.set_fact:
    _preflight_report: >-
      {{ {'name': inventory_hostname, 'architecture': ansible_facts['architecture'],
          'memtotal_mb': ansible_facts['memtotal_mb'], 'df': _preflight_df.stdout, 'npu': {}, 'npu_smi': false,
          'expected_npus': 8, 'driver_plan': ascend_driver_plan, 'cann_plan': ascend_cann_plan}
         | ascendai.vllm.preflight_report(architectures=['aarch64'], min_memory_mb=32768,
                                          model_dir='/opt/ascendai/models', model_free_gb=150) }}
"""

RETURN = r"""
_value:
  description:
    - C(problems) (list of strings, empty when the host can be deployed), C(row) (the host's line of the table),
      C(npus) (the NPUs column) and C(free_gb) (free GB where the model goes).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._preflight import PreflightError, free_bytes, report


def preflight_report(host, architectures=None, min_memory_mb=None, model_dir=None, model_free_gb=None):
    """The host's ``{problems, row, npus, free_gb}``; AnsibleFilterError naming what is missing or wrong."""
    if not isinstance(host, dict):
        raise AnsibleFilterError(f"preflight_report: the input must be the host's mapping, got {type(host).__name__}")
    settings = {"architectures": architectures, "min_memory_mb": min_memory_mb, "model_dir": model_dir,
                "model_free_gb": model_free_gb}
    missing = [name for name, value in settings.items() if value is None]
    if missing:
        raise AnsibleFilterError(f"preflight_report: give {', '.join(missing)} (the preflight role's "
                                 "preflight_* variables)")
    if isinstance(architectures, str) or not isinstance(architectures, (list, tuple)):
        raise AnsibleFilterError(f"preflight_report: architectures must be a list (preflight_architectures), got "
                                 f"{architectures!r}")
    if not all(isinstance(arch, str) for arch in architectures):
        raise AnsibleFilterError(f"preflight_report: architectures must be a list of CPU architectures (strings, "
                                 f"e.g. ['aarch64']), got {architectures!r:.200}")
    if not isinstance(model_dir, str) or not model_dir:
        raise AnsibleFilterError(f"preflight_report: model_dir must be the model directory (preflight_model_dir, a "
                                 f"path), got {model_dir!r:.200}")
    host = dict(host)
    try:
        if "free_bytes" not in host:
            host["free_bytes"] = free_bytes(host.get("df"))
        return report(host, settings)
    except PreflightError as exc:
        raise AnsibleFilterError(f"preflight_report: {exc}") from None


class FilterModule:  # pylint: disable=too-few-public-methods
    """ascendai.vllm.preflight_report."""

    def filters(self):
        return {"preflight_report": preflight_report}
