# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_config_file
short_description: Write a vllm serve --config file after the installed vLLM's own parser accepts it
version_added: 0.1.0
description:
  - Writes O(content) to O(dest) only when the vLLM that the module's Python imports reads it as the service
    will; a bad option never reaches a running service.
  - B(Run it under the service venv's interpreter) (C(ansible_python_interpreter) set to C(<venv>/bin/python) on the
    task), so that it imports the vLLM the service runs.
  - The check builds vLLM's own CLI parser (C(vllm serve), as C(vllm.entrypoints.cli.main) does; the API server's
    parser for a vLLM without the CLI's serve module) and parses C(serve MODEL --config FILE) with it, so the file
    goes through that vLLM's C(--config) loader, then runs vLLM's own check of the parsed arguments.
  - Before that it insists that every key is an exact option name (argparse would take C(enforce) as an
    abbreviation of C(--enforce-eager)), with what to use instead for options vLLM removed, and that the loader
    passes every key on (it drops C(false) under C(vllm serve); up to vLLM 0.14 it passes a mapping as a Python
    repr).
  - The check runs when the content changes; an unchanged file is left alone.
  - The logic is C(check_config_file) of the collection's C(vllm_options) module utils, which the controller-side
    C(ascendai.vllm.vllm_config) filter shares.
options:
  content:
    description: The YAML text of the file (the C(ascendai.vllm.vllm_config) filter's rendering).
    type: str
    required: true
  dest:
    description: Path of the config file; its name must end in C(.yaml) or C(.yml) (vLLM reads no other).
    type: path
    required: true
extends_documentation_fragment:
  - ascendai.vllm.attributes
  - ascendai.vllm.attributes.idempotent
  - ansible.builtin.files
attributes:
  check_mode:
    support: full
    details:
      - Reports whether O(dest) would change, and checks the new content when this Python imports vLLM.
      - Before the venv exists (a first run in check mode) the task may run under the host's Python; without vLLM
        the content is then not checked (RV(checked=false), with a warning).
  diff_mode:
    support: full
  idempotent:
    support: full
notes:
  - Without vLLM importable outside check mode the module fails, saying what the import raised.
requirements:
  - vLLM and PyYAML (a dependency of vLLM) importable by the module's Python.
seealso:
  - name: vLLM's --config loader (FlexibleArgumentParser)
    description: How vLLM turns the YAML keys into command-line options.
    link: https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/utils/__init__.py#L2073
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: Write the vLLM configuration, checked by the installed vLLM's own parser
  ascendai.vllm.vllm_config_file:
    content: "{{ lookup('ansible.builtin.template', 'vllm.yaml.j2') }}"
    dest: /etc/ascendai/vllm/vllm.yaml
    owner: root
    group: vllm
    mode: "0640"
  vars:
    ansible_python_interpreter: /opt/ascendai/venvs/vllm/bin/python
  notify: Restart vllm service
"""

RETURN = r"""
dest:
  description: The config file.
  returned: always
  type: str
  sample: /etc/ascendai/vllm/vllm.yaml
checked:
  description: Whether the new content went through vLLM's parser (false when unchanged, or in check mode without
    vLLM).
  returned: always
  type: bool
  sample: true
problems:
  description: What vLLM rejects in the content (empty when it accepts it); the module fails when there are any.
  returned: always
  type: list
  elements: str
  sample: ["swap-space: not an option of this vLLM (--swap-space); swap_space (--swap-space) is removed in vLLM 0.18.0"]
vllm_version:
  description: Version of the vLLM that checked the content (null when none did).
  returned: always
  type: str
  sample: 0.11.0
"""

import os
import sys
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible_collections.ascendai.vllm.plugins.module_utils._vllm_options import (
    check_config_file,
    installed_vllm_version,
    vllm_serve_parser,
)

# vLLM logs to stdout on import; the module's stdout is its JSON result.
os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def _check(module, data, dest):
    """``(checked, problems, vllm_version)`` for ``data`` written to a temporary file next to ``dest``."""
    # ansible.module_utils.basic replaces sys.intern by a patch object; torch._dynamo, which vLLM imports, refuses
    # it ("substitute_in_graph expects a function"): vLLM gets the real one.
    sys.intern = getattr(type(sys.intern), "unpatched_implementation", sys.intern)
    try:
        parser, top, validate = vllm_serve_parser()
    except Exception as exc:  # noqa: BLE001  # pylint: disable=broad-except  # any import failure of vLLM
        reason = f"cannot import vLLM with {sys.executable} ({type(exc).__name__}: {exc})"
        message = (f"{reason}; run this task under the service venv's Python "
                   "(ansible_python_interpreter: <venv>/bin/python)")
        if module.check_mode:
            # a first check-mode run, before the venv exists: the real run checks with the venv's vLLM
            module.warn(f"{dest} not checked in check mode: {reason}")
            return False, [], None
        module.fail_json(msg=message, dest=dest, checked=False, problems=[message], vllm_version=None)
    version = installed_vllm_version()
    directory = os.path.dirname(dest) or "."
    scratch = directory if os.path.isdir(directory) else None
    suffix = os.path.splitext(dest)[1] or ".yaml"
    fd, path = tempfile.mkstemp(prefix=f".{os.path.basename(dest)}.", suffix=suffix, dir=scratch)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        problems = check_config_file(path, parser, validate, top, vllm_version=version)
    except (OSError, ImportError) as exc:
        module.fail_json(msg=f"could not check {dest}: {to_native(exc)}", dest=dest, checked=False,
                         problems=[to_native(exc)], vllm_version=version)
    finally:
        if os.path.exists(path):
            os.unlink(path)
    # the temporary name in vLLM's messages is the file's
    return True, [problem.replace(path, dest) for problem in problems], version


def main():
    module = AnsibleModule(
        argument_spec={
            "content": {"type": "str", "required": True},
            "dest": {"type": "path", "required": True},
        },
        add_file_common_args=True,
        supports_check_mode=True,
    )
    dest = module.params["dest"]
    if not dest.endswith((".yaml", ".yml")):
        module.fail_json(msg=f"dest={dest}: vLLM only reads --config files ending in .yaml or .yml")
    data = to_bytes(module.params["content"], errors="surrogate_or_strict")
    old = _read(dest)
    result = {"dest": dest, "checked": False, "problems": [], "vllm_version": None, "changed": old != data}
    if module._diff:  # pylint: disable=protected-access
        result["diff"] = {"before": "" if old is None else to_native(old), "after": to_native(data),
                          "before_header": dest, "after_header": dest}
    if result["changed"]:
        result["checked"], result["problems"], result["vllm_version"] = _check(module, data, dest)
        if result["problems"]:
            module.fail_json(msg=f"vLLM {result['vllm_version']} rejects the configuration for {dest}: "
                                 + "; ".join(result["problems"]), **result)
        if not module.check_mode:
            fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(dest)}.", dir=os.path.dirname(dest) or ".")
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            module.atomic_move(tmp, dest)
    file_args = module.load_file_common_arguments(module.params, path=dest)
    if not module.check_mode or old is not None:
        result["changed"] = module.set_fs_attributes_if_different(file_args, result["changed"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
