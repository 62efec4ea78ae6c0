# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bundle_fetch
short_description: Fetch files of the offline bundle onto a host, checked against the bundle's MANIFEST.sha256
version_added: 0.1.0
description:
  - The one way the collection's roles take files from the offline bundle (C(playbooks/download.yml)), that is
    the Huawei driver, firmware and CANN packages (C(huawei/)), the CPython tarball (C(python/)) and the models
    (C(models/<name>/)). Every file is checked against the sha256 that the bundle's C(MANIFEST.sha256) lists.
  - O(src) is the bundle root as an C(http://) or C(https://) URL (any static web server) or as a directory on the
    host the module runs on (an NFS mount, a disk). Proxies come from C(http_proxy), C(https_proxy), C(no_proxy).
  - O(files) names bundle paths (or C(fnmatch) globs); each lands in O(dest) under its base name. O(prefix) names
    a directory of the bundle; every file below it lands in O(dest) under its path below the prefix. A name the
    manifest does not list fails before anything is written, with the manifest line to add and O(hint).
  - Without O(dest) the module checks the files of the directory O(src) in place and copies nothing. The roles do
    this on the controller (C(delegate_to=localhost)) when the bundle is a directory there, then copy the checked
    files with M(ansible.builtin.copy); a damaged package in the bundle never reaches the node.
  - Without O(src) the module verifies O(dest) against O(manifest_content) (files copied there by other means).
  - Transfers are resumable (a C(.part) file under C(<dest>/.ascendai_fetch/), continued with an HTTP C(Range)
    request), parallel (O(parallel)), retried with back-off, and preceded by a free-space check. A download whose
    sha256 differs is removed and fails naming the file; a present file with another sha256 is fetched again.
  - A file's sha256 is cached in C(<dest>/.ascendai_fetch/<file>.sha256) keyed by its size and mtime, so a run on
    unchanged files reads none of them.
options:
  src:
    description:
      - The bundle root, an C(http(s)://) URL or a directory on the host the module runs on, holding
        C(MANIFEST.sha256). Credentials in the URL (C(user:password@)) are sent as Basic authentication, only to
        the URL's own scheme, host and port (a redirect elsewhere gets none; https is never redirected to http),
        and never appear in messages, results or the invocation. Percent-encode C(/), C(?), C(#) and C(@) in
        them (C(%2F), C(%3F), C(%23), C(%40)).
      - Omit to verify O(dest) against O(manifest_content).
    type: str
  dest:
    description:
      - Directory that receives the files (created when missing).
      - Omit to check the files of the directory O(src) in place.
    type: path
  files:
    description: Paths of files in the bundle, or C(fnmatch) globs (C(huawei/*-toolkit_*.run)); each must match.
    type: list
    elements: str
  prefix:
    description: A directory of the bundle (C(models/deepseek-llm-67b-chat)) whose every file is fetched.
    type: str
  manifest_content:
    description: Content of C(MANIFEST.sha256); default is to read C(<src>/MANIFEST.sha256).
    type: str
  hint:
    description:
      - Appended to every failure message, for the caller's own fix (which package to download from where, which
        variable to set).
    type: str
    default: ""
extends_documentation_fragment:
  - ascendai.vllm.bundle_transfer
  - ascendai.vllm.attributes
  - ascendai.vllm.attributes.idempotent
attributes:
  check_mode:
    support: full
    details: Reads the manifest, the sizes on the server and the free space, and reports what would be fetched.
  diff_mode:
    support: partial
    details: Reports the files missing or different before, and the selected files after.
  idempotent:
    support: full
    details: Files present with the manifest's sha256 are left alone; C(changed) only when a file was written or
      its owner or mode set.
notes:
  - Serve the bundle over HTTP for real sizes (a CANN toolkit is several GB, a 67B model 134 GB in FP16).
  - Python's C(http.server) ignores C(Range); it works, but an interrupted file then starts again.
  - M(ascendai.vllm.model_fetch) is this module with O(prefix) set to C(models/<model>).
seealso:
  - module: ascendai.vllm.model_fetch
  - module: ansible.builtin.copy
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: Download the driver and firmware packages from the bundle's web server
  ascendai.vllm.bundle_fetch:
    src: http://bundle.example.internal/ascendai-bundle/
    files:
      - huawei/Ascend-hdk-910b-npu-driver_25.2.0_linux-x86-64.run
      - huawei/Ascend-hdk-910b-npu-firmware_7.7.0.6.236.run
    dest: /var/cache/ascendai/huawei
    owner: root
    group: root
    mode: "0600"
    hint: Download the packages from Huawei's support site into the bundle's huawei/ directory.

- name: Check the CANN toolkit in the controller's bundle before copying it
  ascendai.vllm.bundle_fetch:
    src: "{{ playbook_dir }}/../.cache/bundle"
    files: [huawei/Ascend-cann-toolkit_8.3.RC1_linux-x86_64.run]
  delegate_to: localhost
  become: false

- name: Fetch a model directory of the bundle
  ascendai.vllm.bundle_fetch:
    src: https://user:secret@bundle.example.internal/ascendai-bundle/
    prefix: models/deepseek-llm-67b-chat
    dest: /opt/ascendai/models/deepseek-llm-67b-chat
    mode: "0640"
    directory_mode: "0750"
"""

RETURN = r"""
dest:
  description: Absolute path of O(dest); O(src) when the files were checked in place.
  returned: always
  type: str
  sample: /var/cache/ascendai/huawei
src:
  description: O(src) without the credentials a URL may carry.
  returned: always
  type: str
  sample: http://***@bundle.example.internal/ascendai-bundle/
files:
  description: The selected files, relative to O(dest) (in place, relative to O(src)).
  returned: always
  type: list
  elements: str
  sample: [Ascend-hdk-910b-npu-driver_25.2.0_linux-x86-64.run]
bundle_paths:
  description: Path in the bundle of each selected file, keyed like RV(files).
  returned: always
  type: dict
  sample:
    Ascend-hdk-910b-npu-driver_25.2.0_linux-x86-64.run: huawei/Ascend-hdk-910b-npu-driver_25.2.0_linux-x86-64.run
sha256:
  description: The manifest's sha256 of each selected file, keyed like RV(files).
  returned: always
  type: dict
  sample:
    Ascend-hdk-910b-npu-driver_25.2.0_linux-x86-64.run: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
present:
  description: Files that were already there with the right sha256.
  returned: always
  type: list
  elements: str
  sample: []
fetched:
  description: Files fetched (or, in check mode, to fetch).
  returned: always
  type: list
  elements: str
  sample: [Ascend-hdk-910b-npu-driver_25.2.0_linux-x86-64.run]
mismatched:
  description: Files that were present with another sha256 (fetched again).
  returned: always
  type: list
  elements: str
  sample: []
bytes_needed:
  description: Bytes still to transfer (partial files counted as far as they go).
  returned: when O(src) and O(dest) are given
  type: int
  sample: 104857600
bytes_fetched:
  description: Bytes transferred by this run.
  returned: when O(dest) is given
  type: int
  sample: 104857600
free_bytes:
  description: Free bytes of the filesystem of O(dest) before the transfer.
  returned: when O(src) and O(dest) are given
  type: int
  sample: 1900000000000
status_file:
  description: The progress file.
  returned: when files were fetched
  type: str
  sample: /var/cache/ascendai/huawei/.ascendai_fetch/status.json
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ascendai.vllm.plugins.module_utils._bundle import (
    BundleError,
    DirSource,
    apply_file_attributes,
    fetch_diff,
    fetch_files,
    load_entries,
    make_source,
    redact_url,
    select,
    transfer_argument_spec,
    url_secrets,
    verify_in_place,
)


def run(p, check_mode):
    """The module's work on plain parameters; raises BundleError."""
    hint = (p["hint"] or "").strip()
    source = None
    if p["src"]:
        source = make_source(p["src"], timeout=p["timeout"], validate_certs=p["validate_certs"],
                             ca_path=p["ca_path"])
    where = redact_url(p["src"]) if p["src"] else "the given manifest"
    entries, _where = load_entries(source, p["manifest_content"])
    rows = select(entries, p["files"] or (), p["prefix"], where=where, hint=hint)
    common = {"src": redact_url(p["src"]) if p["src"] else None,
              "bundle_paths": {rel: path for rel, path, _d in rows}}
    if not p["dest"]:
        if not isinstance(source, DirSource):
            raise BundleError("dest is required unless src is a directory whose files are checked in place")
        verify_in_place(source.base, rows, where=where, hint=hint,
                        said_by="MANIFEST.sha256" if p["manifest_content"] is None else "the given manifest")
        return dict(common, changed=False, dest=os.path.abspath(source.base), files=[path for _r, path, _d in rows],
                    sha256={path: digest for _r, path, digest in rows}, present=[path for _r, path, _d in rows],
                    fetched=[], mismatched=[])
    try:
        result = fetch_files(p["dest"], rows, source=source, label=p["prefix"] or "bundle files",
                             parallel=p["parallel"], retries=p["retries"], rehash=p["rehash"],
                             status_file=p["status_file"], check_mode=check_mode,
                             manifest_label=(p["prefix"].strip("/") + "/") if p["prefix"] else "the selected files")
    except BundleError as exc:
        raise BundleError(with_hint(str(exc), hint)) from None
    result.update(common)
    return result


def with_hint(msg, hint):
    """``msg`` ended as a sentence, then ``hint``."""
    msg = msg.rstrip()
    if hint and msg.endswith(hint):
        return msg
    if hint and msg and msg[-1] not in ".!?":
        msg += "."
    return f"{msg} {hint}".strip()


def main():
    module = AnsibleModule(
        argument_spec={
            "src": {"type": "str"},
            "dest": {"type": "path"},
            "files": {"type": "list", "elements": "str"},
            "prefix": {"type": "str"},
            "manifest_content": {"type": "str"},
            "hint": {"type": "str", "default": ""},
            **transfer_argument_spec(),
        },
        required_one_of=[["src", "manifest_content"], ["files", "prefix"]],
        supports_check_mode=True,
    )
    p = module.params
    # The URL's user:password must not reach the result, a message or the invocation that -vvv prints; src itself
    # is not no_log, or every path and URL in the output would be masked with it.
    module.no_log_values.update(url_secrets(p["src"] or ""))
    if not p["src"] and not p["dest"]:
        module.fail_json(msg="give dest (where the files go) or src (a bundle directory whose files are checked in "
                             "place); with manifest_content alone there is nothing to check")
    try:
        result = run(p, module.check_mode)
    except BundleError as exc:
        # not dest=: fail_json would add that path's owner, mode and size to the result
        module.fail_json(msg=str(exc), files=p["files"], prefix=p["prefix"])
    except OSError as exc:
        module.fail_json(msg=f"bundle_fetch into {p['dest']} failed: {exc}. {p['hint'] or ''}".strip())

    if p["dest"]:
        try:
            result["changed"] = apply_file_attributes(module, result["dest"], result["files"], result["changed"],
                                                      owner=p["owner"], group=p["group"], mode=p["mode"],
                                                      directory_mode=p["directory_mode"])
        except BundleError as exc:
            module.fail_json(msg=with_hint(str(exc), (p["hint"] or "").strip()), files=p["files"], prefix=p["prefix"])
        except OSError as exc:
            module.fail_json(msg=f"setting the owner and modes in {p['dest']} failed: {exc}")
    if module._diff:
        result["diff"] = fetch_diff(result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
