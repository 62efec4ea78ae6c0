# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: model_fetch
short_description: Fetch a model of the offline bundle onto the node, resumable, parallel and sha256-checked
version_added: 0.1.0
deprecated:
  removed_in: 1.0.0
  why: No role of the collection calls it; the model role fetches and verifies with ascendai.vllm.bundle_fetch.
  alternative: Use M(ascendai.vllm.bundle_fetch) with C(prefix) set to C(models/NAME).
description:
  - Brings O(dest) to the files that the bundle's C(MANIFEST.sha256) lists under C(models/<model>/).
  - O(src) is the bundle root, as an C(http://) or C(https://) URL (any static web server that serves the bundle
    directory) or as a directory on the node (an NFS mount, a disk). Without O(src) the module only verifies
    O(dest) against the manifest given in O(manifest_content), for files copied by other means
    (C(ansible.builtin.copy) from the controller).
  - Resumable. A file is written to C(<dest>/.ascendai_fetch/<file>.part) and continued where a previous run
    stopped, with an HTTP C(Range) request; a server that ignores C(Range) sends the file again from its start.
  - Several files are fetched at once (O(parallel)); network errors are retried with back-off, resuming.
  - Every file is checked against the manifest's sha256. A download that does not match is removed and the module
    fails naming the file; a present file that does not match is fetched again.
  - The free space of the filesystem of O(dest) is checked against the bytes still missing before anything is
    written.
  - Progress (bytes done and total, rate, ETA, files in flight) is written to O(status_file) every second, so
    a play that runs this module with C(async) can poll it.
  - A file's sha256 is cached in C(<dest>/.ascendai_fetch/<file>.sha256), keyed by its size and mtime, so a run
    on an unchanged model reads no model data.
options:
  src:
    description:
      - The bundle root, an C(http(s)://) URL or a directory on the node, holding C(MANIFEST.sha256) and
        C(models/<model>/).
      - Credentials in the URL (C(user:password@)) are sent as Basic authentication, only to the URL's own
        scheme, host and port (a redirect elsewhere gets none; https is never redirected to http), and never
        appear in messages, results or the invocation. Percent-encode C(/), C(?), C(#) and C(@) in them
        (C(%2F), C(%3F), C(%23), C(%40)).
      - Omit to verify O(dest) against O(manifest_content) without fetching.
    type: str
  dest:
    description: Directory on the node that receives the model's files (created when missing).
    type: path
    required: true
  model:
    description: Name of the model's directory under the bundle's C(models/).
    type: str
    required: true
  manifest_content:
    description:
      - Content of C(MANIFEST.sha256) (sha256sum format, paths relative to the bundle).
      - Default is to read C(<src>/MANIFEST.sha256).
    type: str
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
    details: Reports the files missing or different before, and the manifest's files after.
  idempotent:
    support: full
    details: Files present with the manifest's sha256 are left alone.
notes:
  - Serve the bundle over HTTP for real model sizes (a 67B model is 134 GB in FP16). Copying from the controller
    with C(ansible.builtin.copy) sends each file through the connection plugin and is far slower.
  - Python's C(http.server) ignores C(Range); it works, but an interrupted file then starts again. nginx, Apache
    and most object stores honour C(Range).
  - Proxies come from the usual C(http_proxy), C(https_proxy) and C(no_proxy) environment variables.
seealso:
  - module: ascendai.vllm.model_convert
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: Fetch DeepSeek-LLM 67B from the bundle's web server
  ascendai.vllm.model_fetch:
    src: http://bundle.example.internal/ascendai-bundle/
    model: deepseek-llm-67b-chat
    dest: /opt/ascendai/models/deepseek-llm-67b-chat
    parallel: 4
    owner: vllm
    group: vllm
    mode: "0640"
    directory_mode: "0750"

- name: Verify a model copied from the controller against the bundle's manifest
  ascendai.vllm.model_fetch:
    model: tiny-deepseek
    dest: /opt/ascendai/models/tiny-deepseek
    manifest_content: "{{ lookup('ansible.builtin.file', bundle_dir ~ '/MANIFEST.sha256') }}"
"""

RETURN = r"""
src:
  description: O(src) without the credentials a URL may carry.
  returned: always
  type: str
  sample: http://***@bundle.example.internal/ascendai-bundle/
dest:
  description: Absolute path of the model directory.
  returned: always
  type: str
  sample: /opt/ascendai/models/deepseek-llm-67b-chat
files:
  description: The model's files (relative to O(dest)) as the manifest lists them.
  returned: always
  type: list
  elements: str
  sample: [config.json, model-00001-of-00014.safetensors]
present:
  description: Files that were already there with the right sha256.
  returned: always
  type: list
  elements: str
  sample: [config.json]
fetched:
  description: Files fetched (or, in check mode, to fetch).
  returned: always
  type: list
  elements: str
  sample: [model-00001-of-00014.safetensors]
mismatched:
  description: Files that were present with another sha256 (fetched again).
  returned: always
  type: list
  elements: str
  sample: []
bytes_needed:
  description: Bytes still to transfer (partial files counted as far as they go).
  returned: when O(src) is given
  type: int
  sample: 134447001600
bytes_total:
  description: Bytes of the model's files.
  returned: always
  type: int
  sample: 134447034001
bytes_fetched:
  description: Bytes transferred by this run.
  returned: always
  type: int
  sample: 134447001600
resumed_bytes:
  description: Bytes of partial files from a previous run that this run continued.
  returned: always
  type: int
  sample: 0
free_bytes:
  description: Free bytes of the filesystem of O(dest) before the transfer.
  returned: when O(src) is given
  type: int
  sample: 1900000000000
seconds:
  description: Wall-clock seconds.
  returned: always
  type: float
  sample: 402.5
rate_bytes_per_s:
  description: Average transfer rate of this run.
  returned: when files were fetched
  type: float
  sample: 334000000.0
status_file:
  description: The progress file.
  returned: when files were fetched
  type: str
  sample: /opt/ascendai/models/deepseek-llm-67b-chat/.ascendai_fetch/status.json
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ascendai.vllm.plugins.module_utils._bundle import (
    FetchError,
    apply_file_attributes,
    fetch_diff,
    transfer_argument_spec,
    url_secrets,
)
from ansible_collections.ascendai.vllm.plugins.module_utils._model_fetch import fetch_model


def main():
    module = AnsibleModule(
        argument_spec={
            "src": {"type": "str"},
            "dest": {"type": "path", "required": True},
            "model": {"type": "str", "required": True},
            "manifest_content": {"type": "str"},
            **transfer_argument_spec(),
        },
        required_one_of=[["src", "manifest_content"]],
        supports_check_mode=True,
    )
    p = module.params
    # The URL's user:password must not reach the result, a message or the invocation that -vvv prints; src itself
    # is not no_log, or every path and URL in the output would be masked with it.
    module.no_log_values.update(url_secrets(p["src"] or ""))
    try:
        result = fetch_model(p["dest"], p["model"], src=p["src"], manifest_text=p["manifest_content"],
                             parallel=p["parallel"], retries=p["retries"], timeout=p["timeout"],
                             validate_certs=p["validate_certs"], ca_path=p["ca_path"], rehash=p["rehash"],
                             status_file=p["status_file"], check_mode=module.check_mode)
    except FetchError as exc:
        module.fail_json(msg=str(exc), dest=p["dest"], model=p["model"])
    except OSError as exc:
        module.fail_json(msg=f"model_fetch of {p['model']} into {p['dest']} failed: {exc}")

    try:
        result["changed"] = apply_file_attributes(module, result["dest"], result["files"], result["changed"],
                                                  owner=p["owner"], group=p["group"], mode=p["mode"],
                                                  directory_mode=p["directory_mode"])
    except FetchError as exc:
        module.fail_json(msg=str(exc), dest=p["dest"], model=p["model"])
    except OSError as exc:
        module.fail_json(msg=f"setting the owner and modes in {p['dest']} failed: {exc}")
    if module._diff:
        result["diff"] = fetch_diff(result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
