# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: compat_row
short_description: The compatibility row (vLLM, Python, CANN, torch, torch_npu) of a vllm-ascend release
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Looks a vllm-ascend release up in the collection's one compatibility table (vllm-ascend's versioning
    policy) and returns its row, for pinning the other components.
  - C(latest) returns the newest final release with aarch64 wheels on PyPI. A partial version (C(0.23)) means
    the newest final release starting with it (with release candidates only, it must name a single row).
options:
  _input:
    description: The vllm-ascend release, for example C(0.23.0), C(v0.18.0), C(0.23.0.post1) or C(latest).
    type: str
    required: true
  glibc:
    description:
      - With C(latest) only. The node's glibc (C(2.28) on Kylin V10); the newest final release whose aarch64
        wheels install on it. Empty or omitted means any.
    type: str
  cann:
    description:
      - With C(latest) only. The CANN release the node gets; the choice is a release whose row holds it.
        Empty or omitted means any.
    type: str
  available:
    description:
      - With C(latest) only. The vllm-ascend releases whose offline bundle is present; the choice is one of them.
        Omitted means any.
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Pin torch_npu from the vllm-ascend release
  ansible.builtin.set_fact:
    vllm_torch_npu_version: "{{ ('0.23.0' | ascendai.vllm.compat_row).torch_npu }}"

- name: The release to install on this node when none is pinned (Kylin V10 gets v0.18.0)
  ansible.builtin.set_fact:
    vllm_ascend_version: "{{ ('latest' | ascendai.vllm.compat_row(glibc='2.28')).vllm_ascend }}"
"""

RETURN = r"""
_value:
  description:
    - Keys C(label), C(vllm_ascend_min), C(vllm_ascend_max), C(vllm), C(vllm_min), C(vllm_max), C(python),
      C(python_min), C(python_max), C(cann) (list), C(torch), C(torch_npu), C(torch_npu_pin) (the pip prefix pin of
      torch_npu's release, for example C(2.7.1.*)), C(triton_ascend), C(glibc) (the oldest glibc its aarch64
      wheels install on; null when PyPI has no aarch64 wheel of the release), C(source).
    - Also C(vllm_ascend) (the release; one row per release on PyPI), C(vllm_versions) (the exact vLLM releases),
      C(final), C(documented) (the vllm-ascend doc whose row was used, null when none lists it),
      C(torch_npu_required) (the wheel's pin), C(not_on_pypi) (package to version PyPI lacks), C(extra_index)
      (the index vllm-ascend's installation guide names for them), C(pypi_gaps) (the message saying so),
      C(aarch64_wheels) (cp tags) and C(notes) (where the doc, the Dockerfile and the wheels differ).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._compat_matrix import (
    default_release, find_row, known_releases)


def compat_row(version, glibc=None, available=None, cann=None):
    """Return the row of a vllm-ascend release or raise AnsibleFilterError listing the known releases."""
    if isinstance(version, (bool, float)) or not isinstance(version, (str, int)):
        raise AnsibleFilterError(f"compat_row: the vllm-ascend release must be a quoted version string, got "
                                 f"{version!r}")
    text = str(version).strip()
    if text.lower() == "latest":
        for name, value, example in (("glibc", glibc, "2.28"), ("cann", cann, "8.5.1")):
            # a YAML float loses digits (glibc 2.30 is 2.3): no float is read as a version
            if isinstance(value, (bool, float)) or not isinstance(value, (str, int, type(None))):
                raise AnsibleFilterError(f"compat_row: {name}={value!r:.200} is not a version string; quote it in "
                                         f"YAML, e.g. '{example}' (an unquoted 2.30 is the number 2.3)")
        glibc = str(glibc).strip() if glibc not in (None, "") else None
        cann = str(cann).strip() if cann not in (None, "") else None
        if available is not None and (isinstance(available, str) or not isinstance(available, (list, tuple))):
            raise AnsibleFilterError(f"compat_row: available must be a list of vllm-ascend releases, got "
                                     f"{available!r}")
        if available is not None and not all(isinstance(v, str) for v in available):
            raise AnsibleFilterError(f"compat_row: available must be a list of vllm-ascend releases (quoted version "
                                     f"strings), got {available!r:.200}")
        try:
            row = default_release(glibc=glibc, cann=cann,
                                  available=None if available is None else list(available))
        except ValueError as exc:
            raise AnsibleFilterError(f"compat_row: {exc}") from exc
        if row is None:
            where = (f" on glibc {glibc}" if glibc else "") + (f" with CANN {cann}" if cann else "")
            bundles = f" among the bundled releases {', '.join(map(str, available)) or '(none)'}" \
                if available is not None else ""
            hint = " (v0.18.0 is the newest for glibc 2.28)" if glibc else ""
            raise AnsibleFilterError(f"compat_row: no final vllm-ascend release installs{where}{bundles}; pin "
                                     f"vllm_ascend_version, or bundle a release that does{hint}")
        return row
    if glibc is not None or available is not None or cann is not None:
        raise AnsibleFilterError("compat_row: glibc, cann and available go with 'latest' only")
    try:
        row = find_row(text)
    except ValueError as exc:
        raise AnsibleFilterError(f"compat_row: {exc}") from exc
    if row is None:
        raise AnsibleFilterError(f"compat_row: vllm-ascend {text} is not in the compatibility table; known "
                                 f"releases: {', '.join(known_releases())}")
    return row


class FilterModule:
    """ascendai.vllm.compat_row"""

    def filters(self):
        return {"compat_row": compat_row}
