# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: ascend_install_sequence
short_description: The order to run the Ascend driver and firmware installers in
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Huawei's install guides order the packages by scenario. A first installation (no driver on the node) runs the
    driver, then the firmware; an overwrite installation or an upgrade (a driver is installed) runs the firmware,
    then the driver.
  - Returns the kinds of the input in that order. Without an installed driver the input order is kept.
options:
  _input:
    description: The packages managed, in the order of a first installation (C([driver, firmware])).
    type: list
    elements: str
    required: true
  driver_installed:
    description: The installed driver's version (or a boolean); empty when no driver is installed.
    type: raw
    required: true
seealso:
  - name: Huawei, install the NPU driver and firmware (first install driver > firmware, overwrite firmware > driver)
    link: https://www.hiascend.com/document/detail/en/CANNCommunityEdition/900/softwareinst/instg/instg_0005.html
    description: CANN installation guide.
"""

EXAMPLES = r"""
- name: Upgrade order on a node with driver 24.1.rc3
  ansible.builtin.debug:
    msg: "{{ ['driver', 'firmware'] | ascendai.vllm.ascend_install_sequence('24.1.rc3') }}"  # [firmware, driver]
"""

RETURN = r"""
_value:
  description: The kinds in the order to run their installers.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._ascend_driver_plan import PlanError, install_sequence


def ascend_install_sequence(order, driver_installed):
    try:
        return install_sequence(order, driver_installed)
    except PlanError as exc:
        raise AnsibleFilterError(f"ascend_install_sequence: {exc}; set ascend_driver_order to [driver, firmware], "
                                 f"[driver] or [firmware]") from exc


class FilterModule:
    """ascendai.vllm.ascend_install_sequence"""

    def filters(self):
        return {"ascend_install_sequence": ascend_install_sequence}
