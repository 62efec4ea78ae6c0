#!/usr/bin/python
# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: rpm_packages
short_description: Make sure RPM packages are installed, with rpm -q and the dnf command line
version_added: 0.5.0
description:
  - Asks C(rpm -q) (then C(rpm -q --whatprovides)) which of O(name) are missing, and installs only those with
    C(dnf install -y). What is installed is known before anything changes, so a re-run changes nothing, and check mode
    reports the packages it would install.
  - For nodes whose system Python ansible-core refuses. M(ansible.builtin.dnf) needs the dnf Python bindings and
    re-spawns itself under the system Python that has them (ansible-core C(modules/dnf.py),
    C(module_utils/common/respawn.py)); on Kylin V10 that is Python 3.7, which ansible-core 2.18 and later refuse.
    The dnf command line runs with its own Python, this module with any Python that ansible-core accepts.
options:
  name:
    description: Package names, NVRs (C(kernel-devel-4.19.90-52.22.v2207.ky10.aarch64)) or capabilities.
    type: list
    elements: str
    required: true
  enablerepo:
    description: Repositories to enable for this install only (C(dnf --enablerepo)).
    type: list
    elements: str
    default: []
  install_weak_deps:
    description: Install weak dependencies (C(Recommends)) too.
    type: bool
    default: false
extends_documentation_fragment:
  - ascendai.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Runs C(rpm -q) only and returns the packages that would be installed.
  diff_mode:
    support: full
    details: Each package, absent or present, before and after.
author:
  - ascendai.vllm contributors (@ascendai)
seealso:
  - module: ansible.builtin.dnf
"""

EXAMPLES = r"""
- name: Install the build packages
  ascendai.vllm.rpm_packages:
    name: [gcc, gcc-c++, make, dkms]

- name: Install the kernel headers of the running kernel
  ascendai.vllm.rpm_packages:
    name: ["kernel-devel-{{ ansible_facts['kernel'] }}"]
"""

RETURN = r"""
installed:
  description: The packages that were installed (in check mode, that would be).
  type: list
  elements: str
  returned: always
  sample: [dkms]
missing:
  description: The packages rpm did not find before the run.
  type: list
  elements: str
  returned: always
cmd:
  description: The dnf command that ran (or would run); empty when nothing was missing.
  type: list
  elements: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ascendai.vllm.plugins.module_utils._rpm_packages import (
    RpmSpecError,
    check_specs,
    diff,
    install_argv,
    not_installed,
    query_argv,
)

_LOCALE = {"LANG": "C", "LC_ALL": "C", "LC_MESSAGES": "C"}


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "list", "elements": "str", "required": True},
            "enablerepo": {"type": "list", "elements": "str", "default": []},
            "install_weak_deps": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    try:
        names = check_specs(module.params["name"])
        repos = check_specs(module.params["enablerepo"])
    except RpmSpecError as err:
        module.fail_json(msg=str(err))
    rpm = module.get_bin_path("rpm", required=True)
    result = {"changed": False, "installed": [], "missing": [], "cmd": []}
    if not names:
        module.exit_json(**result)
    rc, out, err = module.run_command(query_argv(rpm, names), environ_update=_LOCALE)
    missing = not_installed(out, names)
    if rc != 0 and not missing:
        module.fail_json(msg="rpm -q failed (exit %d): %s" % (rc, (err or out).strip()[:500]), **result)
    if missing:
        rc, out, err = module.run_command(query_argv(rpm, missing, whatprovides=True), environ_update=_LOCALE)
        missing = not_installed(out, missing, whatprovides=True)
    result["missing"] = missing
    if not missing:
        module.exit_json(**result)
    dnf = module.get_bin_path("dnf") or module.get_bin_path("yum")
    if not dnf:
        module.fail_json(msg="%s must be installed, and neither dnf nor yum is on this host" % ", ".join(missing),
                         **result)
    argv = install_argv(dnf, missing, repos, disable_weak_deps=not module.params["install_weak_deps"])
    result.update(changed=True, installed=missing, cmd=argv)
    if module._diff:
        result["diff"] = diff(missing, names)
    if module.check_mode:
        module.exit_json(**result)
    rc, out, err = module.run_command(argv, environ_update=_LOCALE)
    if rc != 0:
        module.fail_json(
            msg="dnf could not install %s (exit %d): %s. Check that the node's repositories (or the offline "
                "bundle's repository) carry them: dnf list --available %s"
                % (", ".join(missing), rc, (err or out).strip()[-800:], " ".join(missing)),
            stdout=out, stderr=err, **result)
    rc, out, err = module.run_command(query_argv(rpm, missing, whatprovides=True), environ_update=_LOCALE)
    still = not_installed(out, missing, whatprovides=True)
    if still:
        module.fail_json(msg="dnf said it installed %s, but rpm -q does not find %s" % (
            ", ".join(missing), ", ".join(still)), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
