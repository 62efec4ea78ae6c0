# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: ascend_reboot_plan
short_description: Whether a node must reboot after the Ascend driver and firmware installers, and why
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Reboot only on the installers' own word or on evidence that the loaded driver is not the one on disk.
  - The driver installer says C(Reboot needed for installation/upgrade to take effect!) or C(The new version takes
    effect immediately.); the firmware installer C(Reboot now or after driver installation ...). Colours are ignored.
  - A reboot still owed by an earlier run (lines the role keeps under C(/run)) is a reason.
  - C(npu-smi info) reporting a driver version (the loaded one) other than C(driver/version.info) on disk is a reason.
  - A failing npu-smi (for example C(dcmi module initialize failed. ret is -8005)) is NOT a reason; it is returned as
    C(probe_error).
options:
  _input:
    description: The stdout of each installer run in this play, by kind (C(driver), C(firmware)).
    type: dict
    required: true
  owed:
    description:
      - Lines recorded by an earlier run whose reboot has not happened, or the registered result of
        M(ansible.builtin.slurp) of that file (base64; a skipped result when there is no file).
    type: raw
    default: []
  probe:
    description:
      - The result of M(ascendai.vllm.npu_info) (C(failed), C(kind), C(msg), C(driver_version)); a skipped result is
        no probe.
    type: dict
    default: {}
  disk_driver:
    description: The C(Version) of the driver's C(version.info) on disk.
    type: str
    default: ""
seealso:
  - module: ascendai.vllm.npu_info
"""

EXAMPLES = r"""
- name: Decide
  ansible.builtin.set_fact:
    plan: "{{ {'firmware': fw_run.stdout} | ascendai.vllm.ascend_reboot_plan(probe=probe, disk_driver='25.2.0') }}"
"""

RETURN = r"""
_value:
  description: C(reboot) (bool), C(reasons) (list), C(said) (each installer's line about the reboot), C(probe_error).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._ascend_driver_plan import PlanError, reboot_plan


def ascend_reboot_plan(outputs, owed=None, probe=None, disk_driver=None):
    try:
        return reboot_plan(outputs, owed=owed, probe=probe, disk_driver=disk_driver)
    except PlanError as exc:
        raise AnsibleFilterError(f"ascend_reboot_plan: {exc}") from exc


class FilterModule:
    """ascendai.vllm.ascend_reboot_plan"""

    def filters(self):
        return {"ascend_reboot_plan": ascend_reboot_plan}
