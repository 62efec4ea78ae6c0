"""The default driver and firmware are one Huawei HDK release, and that release runs the default CANNs.

Huawei's release notes (hicann/release-management): CANN 8.5.0 pairs with Ascend HDK 25.5.1
(8.5.0/release-notes.md, "版本配套"); CANN 9.0.0 and 8.5.2 with HDK 26.0.RC1, 25.5.2 or 25.5.1
(9.0.0/release-notes.md); CANN 8.5.2, 9.0.x and 9.1.x run on HDK 25.5.X, 26.0.RC1/25.7.RC1 and 26.1.0
(9.1.0/release-notes.md, "版本兼容性说明"). HDK 25.5.1 is driver 25.5.1 with firmware 7.8.0.6.201 (docs/sources.md).
The defaults were driver 25.2.0 with firmware 7.7.0.1.231, HDK 25.0.RC1's firmware, a pair Huawei never shipped.
"""

from __future__ import annotations

import os
import sys

import yaml

from ansible_collections.ascendai.vllm.plugins.module_utils import _ascend_packages as ap
from ansible_collections.ascendai.vllm.plugins.module_utils import _compat_matrix as compat_matrix

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "simulator"))
import build_installers  # noqa: E402

HDK = {"driver": "25.5.1", "firmware": "7.8.0.6.201"}
# the CANN lines HDK 25.5.1 runs, per the release notes above
HDK_CANNS = ("8.5", "9.0", "9.1")


def defaults(role):
    with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml")) as handle:
        return yaml.safe_load(handle)


def test_role_defaults_are_one_hdk_release():
    driver = defaults("ascend_driver")
    bundle = defaults("offline_bundle")
    assert {"driver": driver["ascend_driver_version"], "firmware": driver["ascend_driver_firmware_version"]} == HDK
    assert {"driver": bundle["offline_bundle_driver_version"],
            "firmware": bundle["offline_bundle_firmware_version"]} == HDK


def test_the_sandbox_default_set_is_that_release():
    default = build_installers.SETS["default"]
    assert {"driver": default["driver"], "firmware": default["firmware"]} == HDK
    drv = build_installers.DRIVERS[HDK["driver"]]
    fw = build_installers.FIRMWARES[HDK["firmware"]]
    assert ap.version_in_ranges(HDK["firmware"], drv["compatible_version_fw"])
    assert ap.version_in_ranges(HDK["driver"], fw["compatible_version_drv"])
    assert fw["package_version"] == HDK["driver"]


def test_default_canns_run_on_that_release():
    for glibc in ("2.28", "2.34", None):
        row = compat_matrix.default_release(glibc=glibc)
        for cann in row["cann"]:
            assert cann.startswith(HDK_CANNS), (glibc, row["vllm_ascend"], cann)
        # and the simulated CANN of that release installs on the default driver (its compatible_version lists the
        # driver's family)
        for cann in row["cann"]:
            listed = build_installers.CANNS[cann]["compatible_version"]
            assert ap.family_listed(build_installers.DRIVERS[HDK["driver"]]["innerversion"], listed), cann
