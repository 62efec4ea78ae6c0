# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: ascend_package_info
short_description: Read an Ascend .run package and the installed version, and say what installing it would do
version_added: 0.1.0
description:
  - Reads the version of an installed Ascend driver, firmware, CANN toolkit, kernels (ops) or NNAL package from
    the file it leaves on the node (C(driver/version.info), C(firmware/version.info); CANN 8.5 and later
    C(cann/<arch>-linux/ascend_toolkit_install.info) and C(cann/<arch>-linux/ascend_ops_install.info), CANN 8.3
    and earlier C(ascend-toolkit/latest/<arch>-linux/ascend_toolkit_install.info) and
    C(ascend-toolkit/latest/opp_kernel/version.info); C(nnal/atb/latest/version.info)).
  - "Reads both forms of these files: C(key=value), and NNAL's indented C(key : value) (C(Ascend-cann-atb : 8.3.RC2))."
  - With O(package), runs the package's own integrity check (C(--check)) and takes only its version file out of
    the archive (makeself's C(--tar), into a small temporary directory that is removed; the package is never
    unpacked) - C(driver/version.info) or the C(version.info) at the top that the driver's own installer reads,
    C(firmware/version.info) or C(version.info), the CANN packages' C(version.info). It holds the version and the
    compatibility ranges (C(compatible_version_fw), C(compatible_version_drv), C(compatible_version)). A package
    without one gets the version in its file name (C(Ascend-hdk-910b-npu-driver_25.5.1_linux-aarch64.run) is
    25.5.1), and no ranges.
  - Compares the two versions (C(24.1.rc3) < C(24.1.0) < C(25.2.0); C(8.2.RC1) < C(8.2.0)) and returns the
    O(ignore:action) - V(full) when nothing is installed, V(upgrade) when the installed one is older, V(none) when
    equal, V(downgrade) when newer and O(allow_downgrade=true), V(refuse) when newer otherwise.
  - Changes nothing on the node; it runs in check mode too. In check mode a O(package) that is not on the node
    yet (it would have been copied there) is skipped and O(version) is used.
  - With O(kinds) it reads several packages in one run (one task per role, whatever the number of packages) and
    returns each one's result in RV(results), in the order of O(kinds).
options:
  kind:
    description: Which package. One of O(kind) and O(kinds) is required.
    type: str
    choices: [driver, firmware, toolkit, kernels, nnal]
  kinds:
    description:
      - Several packages read in one run; each one's package is O(package_dir)/O(package_files)[kind] when
        O(package_files) names it, and its wanted version O(versions)[kind], else O(version).
    type: list
    elements: str
    choices: [driver, firmware, toolkit, kernels, nnal]
  package_dir:
    description: With O(kinds), the directory on the node that holds the packages named in O(package_files).
    type: path
  package_files:
    description: With O(kinds), the package file name of each kind (kinds it does not name are read installed only).
    type: dict
    default: {}
  versions:
    description: With O(kinds), the wanted version of each kind (kinds it does not name take O(version)).
    type: dict
    default: {}
  package:
    description:
      - Path of the C(.run) package on the node. Without it only the installed version is read and
        O(version) is the wanted one.
    type: path
  version:
    description:
      - The wanted version. With O(package) the package must carry this version, else the module fails.
    type: str
  install_path:
    description: Install path of the Ascend packages.
    type: path
    default: /usr/local/Ascend
  arch:
    description:
      - CPU architecture in the CANN paths (C(aarch64-linux), C(x86_64-linux)); default the node's.
    type: str
  allow_downgrade:
    description: Return V(downgrade) instead of V(refuse) when the installed version is newer.
    type: bool
    default: false
  side_by_side:
    description:
      - CANN versions side by side (a node with generations, role M(ascendai.vllm.generation)) - for the toolkit,
        kernels (ops) and NNAL, read the record in the wanted version's own directory (C(cann-<version>/...),
        C(ascend-toolkit/<version>/...), C(nnal/atb/<version>/version.info)) instead of the shared one behind
        C(cann), C(ascend-toolkit/latest) and C(nnal/atb/latest), which names whichever version was installed last.
      - The O(ignore:action) is then V(none) when the wanted version is installed, V(full) (C(--install), beside the
        others) when it is not; never V(upgrade), which would remove the other versions.
      - Needs the wanted version (O(version), O(versions) or the package's). The driver and firmware are read as
        without it.
    type: bool
    default: false
  integrity_check:
    description: Run the package's C(--check) before extracting it.
    type: bool
    default: true
extends_documentation_fragment:
  - ascendai.vllm.attributes
  - ascendai.vllm.attributes.info_module
notes:
  - Runs the package with C(bash), so the file needs no execute bit.
seealso:
  - plugin: ascendai.vllm.ascend_version_compare
    plugin_type: filter
  - plugin: ascendai.vllm.ascend_version_in_ranges
    plugin_type: filter
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: Read the driver package and the installed driver
  ascendai.vllm.ascend_package_info:
    kind: driver
    package: /var/cache/ascendai/huawei/Ascend-hdk-910b-npu-driver_25.2.0_linux-aarch64.run
    version: 25.2.0
  register: driver

- name: Install or upgrade it
  ansible.builtin.command:
    argv: [bash, "{{ driver.package.file }}", --nox11, --quiet, "--{{ driver.action }}"]
  when: driver.action in ['full', 'upgrade']
  changed_when: true

- name: Only the installed CANN toolkit and what installing 8.3.RC2 would do
  ascendai.vllm.ascend_package_info:
    kind: toolkit
    version: 8.3.RC2

- name: Is CANN 9.1.0 installed beside the others (a node with generations)?
  ascendai.vllm.ascend_package_info:
    kinds: [toolkit, kernels, nnal]
    version: 9.1.0
    side_by_side: true

- name: Read the CANN packages in one run
  ascendai.vllm.ascend_package_info:
    kinds: [toolkit, kernels, nnal]
    package_dir: /var/cache/ascendai/huawei
    package_files:
      toolkit: Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run
      kernels: Ascend-cann-kernels-910b_8.3.RC2_linux-aarch64.run
      nnal: Ascend-cann-nnal_8.3.RC2_linux-aarch64.run
    version: 8.3.RC2
  register: cann

- name: Say what each would do
  ansible.builtin.debug:
    msg: "{{ cann.results | items2dict(key_name='kind', value_name='action') }}"
"""

RETURN = r"""
results:
  description: With O(kinds), one result per kind, in the order of O(kinds), each with the keys below.
  returned: with O(kinds)
  type: list
  elements: dict
kind:
  description: The O(kind) read.
  returned: with O(kind)
  type: str
installed:
  description: The installed package; C(version) null when none is installed.
  returned: with O(kind)
  type: dict
  contains:
    version:
      description: Installed version.
      type: str
      sample: 24.1.rc3
    file:
      description: The file the version was read from.
      type: str
      sample: /usr/local/Ascend/driver/version.info
    info:
      description: "All C(key=value) (or C(key : value)) pairs of that file."
      type: dict
package:
  description: The package read with O(package); null without O(package) (or in check mode before it is copied).
  returned: with O(kind)
  type: dict
  contains:
    file:
      description: The package path.
      type: str
    version:
      description: Version from the package's version file, else from its file name.
      type: str
      sample: 25.2.0
    info_file:
      description: The version file read inside the package; null when the version came from the file name.
      type: str
      sample: version.info
    info:
      description: All C(key=value) pairs of that version file (empty when the version came from the file name).
      type: dict
      sample: {Version: 25.2.0, compatible_version_fw: "[7.0.0,7.7.99]", Innerversion: V100R001C23SPC001B211}
    check:
      description: Last line printed by the package's C(--check).
      type: str
      sample: Verifying archive integrity...  100%   SHA256 checksums are OK. All good.
wanted:
  description: The wanted version (the package's, else O(version)); null when neither is known.
  returned: with O(kind)
  type: str
action:
  description: V(full), V(upgrade), V(none), V(downgrade) or V(refuse); null when the wanted version is unknown.
  returned: with O(kind)
  type: str
  sample: upgrade
"""

import os
import platform
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ascendai.vllm.plugins.module_utils._ascend_packages import (
    AscendVersionError,
    compare_versions,
    info_version,
    info_kind,
    installed_files,
    kv_get,
    name_version,
    package_info_file,
    parse_kv,
    pinned_layout,
    plan_action,
)

CANN_KINDS = ("toolkit", "kernels", "nnal")


def read_text(path):
    with open(path) as handle:
        return handle.read()


def read_installed(kind, install_path, arch, pinned_version=None):
    """The installed version of ``kind``: from the shared record, or with ``pinned_version`` from that version's own
    directory (side by side)."""
    if pinned_version:
        candidates = [pinned_layout(pinned_version, arch, install_path)["info"][kind]]
    else:
        candidates = installed_files(kind, install_path, arch)
    for candidate in candidates:
        if os.path.isfile(candidate):
            info = parse_kv(read_text(candidate))
            return {"version": info_version(info), "file": candidate, "info": info}
    return {"version": None, "file": None, "info": {}}


def read_package(module, kind, package):
    """The package's integrity check, then its version file, taken out alone.

    makeself's ``--tar ARG1 ARGS`` runs ``tar ARG1 - ARGS`` on the archive
    (https://github.com/megastep/makeself/blob/release-2.5.0/makeself-header.sh#L435-L445; Huawei's packages are
    makeself 2.5.0 archives, https://github.com/verylucky01/driver/blob/e29d066/cmake/third_party/makeself-fetch.cmake):
    only the version files are written, to a small temporary directory, never the multi-GB toolkit. Without one,
    the version in the file name is used.
    """
    bash = module.get_bin_path("bash", required=True)
    check_line = None
    if module.params["integrity_check"]:
        rc, out, err = module.run_command([bash, package, "--check"])
        lines = [line for line in (out + err).splitlines() if line.strip()]
        if rc != 0:
            module.fail_json(msg=f"{package} failed its own integrity check (--check, rc {rc}): "
                                 f"{' '.join(lines[-3:]) or 'no output'}. The file is damaged or incomplete: "
                                 f"fetch it again and compare its sha256 with the bundle's MANIFEST.sha256.",
                             rc=rc, stdout=out, stderr=err)
        check_line = lines[-1] if lines else ""
    wanted = package_info_file(kind)
    tmp = tempfile.mkdtemp(prefix="ascendai-info-")
    try:
        # members are "./name" in a makeself archive ("tar cf - ."); both spellings are asked, tar says
        # "Not found in archive" for the others and its status is not makeself's
        names = [spelling for rel in wanted for spelling in ("./" + rel, rel)]
        module.run_command([bash, package, "--tar", "xf", "-C", tmp] + names)
        for rel in wanted:
            candidate = os.path.join(tmp, rel)
            if os.path.isfile(candidate) and not os.path.islink(candidate):
                info = parse_kv(read_text(candidate))
                named = info_kind(info)
                if named and named != kind:
                    module.fail_json(msg=f"{package}: its {rel} names {kv_get(info, 'package_name')}; is it a "
                                         f"{kind} package?")
                return {"file": package, "version": info_version(info), "info": info, "check": check_line,
                        "info_file": rel}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    version = name_version(kind, package)
    if version is None:
        module.fail_json(msg=f"{package}: no {' or '.join(wanted)} in the package and no {kind} version in its "
                             f"file name; is it a {kind} package?")
    return {"file": package, "version": version, "info": {}, "check": check_line, "info_file": None}


def read_one(module, kind, package_path, version, arch):
    """One kind: the installed version, the package (when given) and the action."""
    params = module.params
    pinned = params["side_by_side"] and kind in CANN_KINDS
    if pinned and not version and not package_path:
        module.fail_json(msg=f"side_by_side reads the record of one {kind} version: give version (or versions.{kind}, "
                             "or the package)")
    installed = None if pinned else read_installed(kind, params["install_path"], arch)
    package = None
    if package_path:
        if os.path.isfile(package_path):
            package = read_package(module, kind, package_path)
        elif not module.check_mode:
            module.fail_json(msg=f"package {package_path} does not exist on the node")
        if package is not None and not package["version"]:
            module.fail_json(msg=f"{package_path}: the extracted {package['info_file']} names no version")
    wanted = package["version"] if package else version
    if pinned:
        if not wanted:
            module.fail_json(msg=f"side_by_side: no {kind} version to read the record of (the package "
                                 f"{package_path} is not on the node yet): give version")
        try:
            installed = read_installed(kind, params["install_path"], arch, pinned_version=wanted)
        except AscendVersionError as exc:
            module.fail_json(msg=f"{kind}: {exc}", package=package)
    try:
        if package and version and compare_versions(package["version"], version) != 0:
            module.fail_json(msg=f"{package_path} holds {kind} {package['version']}, not the wanted "
                                 f"{version}: the file is misnamed or the wrong one.",
                             package=package)
        action = plan_action(installed["version"], wanted, params["allow_downgrade"]) if wanted else None
    except AscendVersionError as exc:
        module.fail_json(msg=f"{kind}: {exc}", installed=installed, package=package)
    return {"kind": kind, "installed": installed, "package": package, "wanted": wanted, "action": action}


def main():
    kinds = ["driver", "firmware", "toolkit", "kernels", "nnal"]
    module = AnsibleModule(
        argument_spec={
            "kind": {"type": "str", "choices": kinds},
            "kinds": {"type": "list", "elements": "str", "choices": kinds},
            "package": {"type": "path"},
            "package_dir": {"type": "path"},
            "package_files": {"type": "dict", "default": {}},
            "version": {"type": "str"},
            "versions": {"type": "dict", "default": {}},
            "install_path": {"type": "path", "default": "/usr/local/Ascend"},
            "arch": {"type": "str"},
            "allow_downgrade": {"type": "bool", "default": False},
            "side_by_side": {"type": "bool", "default": False},
            "integrity_check": {"type": "bool", "default": True},
        },
        mutually_exclusive=[["kind", "kinds"], ["package", "kinds"]],
        required_one_of=[["kind", "kinds"]],
        supports_check_mode=True,
    )
    params = module.params
    arch = params["arch"] or platform.machine()
    if params["kind"]:
        module.exit_json(changed=False, **read_one(module, params["kind"], params["package"], params["version"], arch))
    files = params["package_files"]
    if any(files.get(kind) for kind in params["kinds"]) and not params["package_dir"]:
        module.fail_json(msg="package_files names packages of %s: package_dir is needed to find them"
                             % ", ".join(k for k in params["kinds"] if files.get(k)))
    results = []
    for kind in params["kinds"]:
        path = os.path.join(params["package_dir"], files[kind]) if files.get(kind) else None
        version = params["versions"].get(kind) or params["version"]
        results.append(read_one(module, kind, path, str(version) if version else None, arch))
    module.exit_json(changed=False, results=results)


if __name__ == "__main__":
    main()
