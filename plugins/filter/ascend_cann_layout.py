# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: ascend_cann_layout
short_description: The package names, paths and environment of a CANN release
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Returns what a CANN release is called and where it installs, from the row of its generation (CANN 8.3 and
    earlier under C(<root>/ascend-toolkit/<version>); CANN 8.5 and later, 9.x included, under
    C(<root>/cann-<version>)).
  - C(files) holds the C(.run) names of the toolkit, the kernels package
    (C(Ascend-cann-kernels-910b_8.3.RC2_linux-aarch64.run); from CANN 8.5 on
    C(Ascend-cann-910b-ops_8.5.1_linux-aarch64.run)) and NNAL; C(toolkit_set_env) and
    C(nnal_set_env) the scripts to source; C(home) the ASCEND_TOOLKIT_HOME the toolkit's set_env.sh sets;
    C(atb_home) ATB_HOME_PATH without its C(cxx_abi_N) directory; C(info) the installed version files.
options:
  _input:
    description:
      - The CANN version, e.g. C(8.3.RC2), C(8.5.1), C(9.1.0).
      - A string; a number is an error (an unquoted YAML C(8.10) is the number 8.1), so quote it.
    type: str
    required: true
  arch:
    description: CPU architecture in the package names (C(aarch64), C(x86_64)).
    type: str
    required: true
  npu_type:
    description: The NPU in the kernels/ops package name.
    type: str
    default: 910b
  install_path:
    description: The CANN install path.
    type: str
    default: /usr/local/Ascend
seealso:
  - module: ascendai.vllm.ascend_package_info
"""

EXAMPLES = r"""
- name: The ops package of CANN 8.5.1
  ansible.builtin.debug:
    msg: "{{ ('8.5.1' | ascendai.vllm.ascend_cann_layout('aarch64')).files.kernels }}"
  # Ascend-cann-910b-ops_8.5.1_linux-aarch64.run
"""

RETURN = r"""
_value:
  description: C(generation), C(files), C(toolkit_set_env), C(nnal_set_env), C(home), C(atb_home), C(info).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._ascend_packages import AscendVersionError, cann_layout


def ascend_cann_layout(version, arch, npu_type="910b", install_path="/usr/local/Ascend"):
    if not isinstance(version, str):
        # a YAML float loses digits (8.10 is 8.1) and an int is no release: no number is read as a version
        raise AnsibleFilterError(f"ascend_cann_layout: version={version!r} is not a version string; quote it in "
                                 f"YAML, e.g. ascend_cann_version: \"8.5.1\" (an unquoted 8.10 is the number 8.1)")
    if not arch or not isinstance(arch, str):
        raise AnsibleFilterError(f"ascend_cann_layout: arch={arch!r}; pass the CPU architecture, e.g. "
                                 f"ansible_facts['architecture'] (aarch64 or x86_64)")
    if npu_type not in (None, "") and not isinstance(npu_type, str):
        raise AnsibleFilterError(f"ascend_cann_layout: npu_type={npu_type!r}; pass the NPU of the package names as "
                                 f"a string, e.g. '910b' (empty: 910b)")
    if install_path not in (None, "") and (not isinstance(install_path, str) or not install_path.startswith("/")):
        raise AnsibleFilterError(f"ascend_cann_layout: install_path={install_path!r}; pass the CANN install path as "
                                 f"an absolute path, e.g. '/usr/local/Ascend' (empty: /usr/local/Ascend)")
    try:
        return cann_layout(version.strip(), arch, install_path or "/usr/local/Ascend", npu_type or "910b")
    except AscendVersionError as exc:
        raise AnsibleFilterError(f"ascend_cann_layout: {exc}. Set the CANN release as a quoted string, e.g. "
                                 f"ascend_cann_version: \"8.5.1\"") from None


class FilterModule:
    """ascendai.vllm.ascend_cann_layout"""

    def filters(self):
        return {"ascend_cann_layout": ascend_cann_layout}
