# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: ascend_install_outlook
short_description: The installed driver, the driver and firmware after the install, and the installers to run
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Reads the two registered results of M(ascendai.vllm.ascend_package_info) in the ascend_driver role (the packages
    of C(ascend_driver_order), and the installed packages the order leaves alone, skipped when there are none).
  - C(installed_driver) is the driver's installed version before this run, from either read (empty when none).
  - C(after) maps each kind to its C(version.info) after the install, the staged package's where there is one, else
    the installed one.
  - C(todo) lists the kinds whose package would install something (action C(full), C(upgrade) or C(downgrade)) in
    Huawei's order (see P(ascendai.vllm.ascend_install_sequence#filter)), given whether a driver is installed.
options:
  _input:
    description: C(ascend_driver_order), the packages managed in the order of a first installation.
    type: list
    elements: str
    required: true
  read:
    description: The registered result of the read of the packages in the order.
    type: dict
    required: true
  kept:
    description: The registered result of the read of the installed packages the order leaves alone (may be skipped).
    type: dict
    default: {}
  packages:
    description: What each package would do, C(ascend_driver_packages) (kind to the read's result with its C(action)).
    type: dict
    default: {}
seealso:
  - module: ascendai.vllm.ascend_package_info
  - plugin: ascendai.vllm.ascend_install_sequence
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Note what will be done
  ansible.builtin.set_fact:
    outlook: >-
      {{ ['driver', 'firmware'] | ascendai.vllm.ascend_install_outlook(read=read, kept=kept,
         packages={'driver': {'action': 'upgrade'}, 'firmware': {'action': 'upgrade'}}) }}
    # with a driver installed: outlook.todo == ['firmware', 'driver']
"""

RETURN = r"""
_value:
  description: C(installed_driver) (str), C(after) (kind to version info), C(todo) (kinds, in the order to install).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._ascend_driver_plan import PlanError, install_outlook


def ascend_install_outlook(order, read, kept=None, packages=None):
    try:
        return install_outlook(order, read, kept=kept, packages=packages)
    except PlanError as exc:
        raise AnsibleFilterError(f"ascend_install_outlook: {exc}; pass ascend_driver_order and the registered "
                                 f"results of the role's ascend_package_info reads unchanged") from exc


class FilterModule:
    """ascendai.vllm.ascend_install_outlook"""

    def filters(self):
        return {"ascend_install_outlook": ascend_install_outlook}
