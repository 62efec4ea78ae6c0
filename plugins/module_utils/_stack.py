# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The one stack decision: a vllm-ascend release and the components its row of the compatibility matrix pins.

The vllm-ascend release is the one input (``vllm_ascend_version``); when it is empty the collection's default
release for the node is taken (compat_matrix.default_release: the newest final release whose aarch64 wheels
install on the node's glibc, among the bundled releases). Every role that installs or renders part of the stack
reads the result, the ``ascendai_stack`` fact, and nothing else decides a release.
"""

from __future__ import annotations

from ansible_collections.ascendai.vllm.plugins.module_utils._compat_matrix import (
    default_release, find_row, known_releases)


class StackError(ValueError):
    """A stack that cannot be decided; the message names the setting and the fix."""


def _default_text(glibc, available):
    parts = ["the newest final release with aarch64 wheels"]
    if glibc:
        parts.append(f"that install on glibc {glibc}")
    if available is not None:
        parts.append(f"among the bundled releases ({', '.join(available) or 'none'})")
    return " ".join(parts)


def decide_stack(version, glibc=None, available=None):
    """Return the stack of ``version`` (a vllm-ascend release; empty: the default release for the node).

    ``glibc`` is the node's C library (``None``: unknown, any), ``available`` the vllm-ascend releases of the
    bundle (``None``: unknown, any). Both only narrow the default choice; a release asked for is taken as it is
    and checked later against the node (compat_check), so that the error names the node's glibc.
    """
    asked = "" if version is None else str(version).strip()
    if asked.startswith("v"):
        asked = asked[1:]
    if asked.lower() == "latest":
        asked = ""
    if asked:
        try:
            row = find_row(asked)
        except ValueError as exc:
            raise StackError(f"vllm_ascend_version={asked}: {exc}") from exc
        if row is None:
            raise StackError(f"vllm_ascend_version={asked} is not in the compatibility table; set it to a known "
                             f"release or leave it empty for the default release. Known releases: "
                             f"{', '.join(known_releases())}")
        release_source = "vllm_ascend_version"
    else:
        row = default_release(glibc=glibc or None, available=None if available is None else list(available))
        if row is None:
            where = f" that installs on glibc {glibc}" if glibc else ""
            bundled = (f" among the bundled releases ({', '.join(available) or 'none'})"
                       if available is not None else "")
            raise StackError(f"vllm_ascend_version is empty and no final vllm-ascend release{where} is in the "
                             f"bundle{bundled}: bundle one (offline_bundle) or set vllm_ascend_version")
        release_source = "default: " + _default_text(glibc, available)
    row_source = f"row {row['label']} of the compatibility matrix"
    single_vllm = row["vllm_min"] == row["vllm_max"]
    return {
        "asked": asked,
        "vllm_ascend": row["vllm_ascend"],
        "vllm": row["vllm_min"] if single_vllm else "",
        "vllm_versions": list(row["vllm_versions"]),
        "cann": row["cann"][-1] if row["cann"] else "",
        "cann_versions": list(row["cann"]),
        "torch": row["torch"],
        "torch_npu": row["torch_npu"],
        "torch_npu_pin": row["torch_npu_pin"],
        "triton_ascend": row["triton_ascend"],
        "python_min": row["python_min"],
        "python_max": row["python_max"],
        "glibc": glibc or "",
        "glibc_min": row["glibc"],
        "label": row["label"],
        "source": {
            "vllm_ascend": release_source,
            "vllm": row_source if single_vllm else f"{row_source} names several ({row['vllm']}): set vllm_version",
            "cann": row_source,
            "torch": row_source,
            "torch_npu": row_source,
            "triton_ascend": row_source,
        },
    }
