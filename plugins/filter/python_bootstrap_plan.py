# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: python_bootstrap_plan
short_description: Which Python a node's modules run with, from a raw probe, before any module runs there
version_added: 0.5.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - ansible-core refuses target Pythons older than its floor (C(_PY_MIN) in C(ansible/module_utils/basic.py),
    3.8 from ansible-core 2.18). Kylin V10's python3 is 3.7.
  - Reads the output of the bootstrap's C(raw) probe (one line per interpreter found, C(<path> <version>)) and says
    whether an accepted Python is there, or the bundle's relocatable CPython must be unpacked first.
  - The floor is the running ansible-core's own C(_PY_MIN) where it has one, else its release's documented floor.
options:
  _input:
    description: The probe's stdout.
    type: str
    required: true
  bundled:
    description: Where the bundle's CPython is, or will be, unpacked (its C(bin/pythonX.Y)).
    type: str
    required: true
  system:
    description: The OS's python3.
    type: str
    default: /usr/bin/python3
  prefer:
    description: An interpreter the inventory names; used when the core accepts it.
    type: str
    default: ""
  core_version:
    description: The controller's ansible-core version (C(ansible_version.full)).
    type: str
    required: true
seealso:
  - module: ansible.builtin.raw
"""

EXAMPLES = r"""
- name: Decide
  ansible.builtin.set_fact:
    _plan: "{{ probe.stdout | ascendai.vllm.python_bootstrap_plan(bundled='/opt/ascendai/python/3.11.15/bin/python3.11',
                                                                    core_version=ansible_version.full) }}"
"""

RETURN = r"""
_value:
  description:
    - C(action) (V(none) or V(install)), C(interpreter), C(version), C(system), C(system_version), C(accepted),
      C(floor) and C(message), one line such as
      C(python3 3.7.9 (/usr/bin/python3) refused by ansible-core 2.19 (needs 3.8 or later); installing ...).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._python_bootstrap import (
    BootstrapError,
    core_floor,
    installed_core_floor,
    plan,
)


def python_bootstrap_plan(stdout, bundled, core_version, system="/usr/bin/python3", prefer=""):
    for name, value in (("the probe's output", stdout), ("bundled", bundled), ("core_version", core_version),
                        ("system", system), ("prefer", prefer)):
        if value is not None and not isinstance(value, str):
            raise AnsibleFilterError("python_bootstrap_plan: %s must be a string, got %s" % (
                name, type(value).__name__))
    for name, value in (("bundled", bundled), ("system", system)):
        if not value or not value.startswith("/"):
            raise AnsibleFilterError("python_bootstrap_plan: %s=%r must be an absolute path" % (name, value))
    try:
        floor = core_floor(core_version, installed_core_floor())
        return plan(stdout or "", floor, bundled, core_version, system=system, prefer=prefer or "")
    except BootstrapError as err:
        raise AnsibleFilterError("python_bootstrap_plan: %s" % err) from None


class FilterModule:
    def filters(self):
        return {"python_bootstrap_plan": python_bootstrap_plan}
