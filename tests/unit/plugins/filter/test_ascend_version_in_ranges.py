"""The ascend_version_in_ranges filter against the compatibility ranges of real version.info files (MindCluster's
examples, tests/unit/fixtures/ascend-install and tests/unit/fixtures/npu-smi)."""

from __future__ import annotations

import os
import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.ascend_version_in_ranges import FilterModule

ascend_version_in_ranges = FilterModule().filters()["ascend_version_in_ranges"]

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")


def version_infos(path):
    """Each ``cat .../version.info`` (or .info) block of a capture as a dict of its key=value lines."""
    with open(os.path.join(FIXTURES, path), encoding="utf-8") as handle:
        text = handle.read()
    out = {}
    # the key=value lines follow the command, after a blank line and code fences at most (no '=' in between)
    for match in re.finditer(r"^cat (\S+\.info)\n[^=]*?((?:^\w+=.*\n)+)", text, re.M):
        out[match.group(1)] = dict(line.split("=", 1) for line in match.group(2).splitlines())
    return out


DOC = version_infos(os.path.join("ascend-install", "driver-firmware-cann-version-info-mindcluster-doc.txt"))
AFTER = version_infos(os.path.join("npu-smi", "npu_info_after-health-alarm-errorcodes-910a-faultdiag-fixture-"
                                              "mindcluster.txt"))


def test_firmware_and_driver_of_one_node_fit_each_other():
    # the fault-diagnosis capture: driver 23.0.7 with firmware 7.1.0.11.220, both from package 23.0.7
    driver = AFTER["/usr/local/Ascend/driver/version.info"]
    firmware = AFTER["/usr/local/Ascend/firmware/version.info"]
    assert driver["compatible_version_fw"] == "[7.0.0,7.1.99]"
    assert ascend_version_in_ranges(firmware["Version"], driver["compatible_version_fw"]) is True
    # compatible_version_drv=[23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.]: 23.0.7 is neither 23.0.rc3* nor 23.0.0*
    assert ascend_version_in_ranges(driver["Version"], firmware["compatible_version_drv"]) is False
    assert ascend_version_in_ranges("23.0.0", firmware["compatible_version_drv"]) is True
    assert ascend_version_in_ranges("23.0.rc3.2", firmware["compatible_version_drv"]) is True
    assert ascend_version_in_ranges("23.0.rc2", firmware["compatible_version_drv"]) is False


def test_bounds_are_inclusive_and_a_short_upper_bound_holds_longer_versions():
    ranges = DOC["/usr/local/Ascend/driver/version.info"]["compatible_version_fw"]
    assert ranges == "[7.0.0,7.2.99]"
    assert ascend_version_in_ranges("7.0.0", ranges) is True
    assert ascend_version_in_ranges("7.2.99", ranges) is True
    assert ascend_version_in_ranges("7.2.99.5", ranges) is True     # DOCUMENTATION's example
    assert ascend_version_in_ranges("7.3.0", ranges) is False
    assert ascend_version_in_ranges("6.4.12.1.241", ranges) is False


def test_cann_release_families_against_a_driver_innerversion():
    toolkit = DOC["/usr/local/Ascend/cann/aarch64-linux/ascend_toolkit_install.info"]
    families = toolkit["compatible_version"]   # [V100R001C15],[V100R001C18],...,[V100R001C23]
    driver = DOC["/usr/local/Ascend/driver/version.info"]
    assert driver["Innerversion"] == "V100R001C15SPC006B220"
    assert ascend_version_in_ranges(driver["Innerversion"], families) is True
    assert ascend_version_in_ranges("V100R001C23SPC002B210", families) is True
    assert ascend_version_in_ranges("V100R001C17SPC001B100", families) is False   # C17 is not listed
    # the fault-diagnosis node's driver C15 is listed by its own driver's compatible_version
    node = AFTER["/usr/local/Ascend/driver/version.info"]
    assert ascend_version_in_ranges(node["Innerversion"], node["compatible_version"]) is True


@pytest.mark.parametrize("ranges", ["", "7.0.0-7.2.99", None, ["[7.0.0,7.2.99]"], 7])
def test_ranges_without_an_entry_are_named(ranges):
    with pytest.raises(AnsibleFilterError, match=rf"^ascend_version_in_ranges: ranges={re.escape(repr(ranges))} "
                                                 r"holds no \[low,high\] or \[family\] entry"):
        ascend_version_in_ranges("7.1.0", ranges)


@pytest.mark.parametrize("version", ["seven", "latest", "7.1.x"])
def test_a_version_that_is_not_ascend_is_named(version):
    with pytest.raises(AnsibleFilterError, match=rf"^ascend_version_in_ranges\('{re.escape(version)}', "
                                                 r"'\[7.0.0,7.2.99\]'\): not an Ascend version"):
        ascend_version_in_ranges(version, "[7.0.0,7.2.99]")


@pytest.mark.parametrize("version", [7.7, 7, True, None, ["7.7.0"], {"Version": "7.7.0"}])
def test_a_version_that_is_not_a_string_is_refused(version):
    # str() of a float loses digits (7.10 is 7.1): the version must come quoted, as version.info gives it
    with pytest.raises(AnsibleFilterError, match=rf"^ascend_version_in_ranges: version={re.escape(repr(version))} "
                                                 r"is not a version string; quote it in YAML, e\.g\. "
                                                 r"'7\.7\.0\.1\.231', or pass the Version or Innerversion of a "
                                                 r"version\.info$"):
        ascend_version_in_ranges(version, "[7.0.0,7.7.99]")
