"""Ascend version ordering, compatibility ranges and the install plan (module_utils._ascend_packages)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.ascendai.vllm.plugins.module_utils import _ascend_packages as ap

# Releases in the order Huawei published them (docs/sources.md: driver, firmware and CANN sources).
DRIVERS = ["23.0.rc1", "23.0.rc3", "23.0.0", "23.0.6", "23.0.7", "24.1.rc1", "24.1.rc3", "24.1.0", "25.0.rc1",
           "25.0.rc1.1", "25.2.0"]
FIRMWARES = ["6.3.0.1.241", "7.1.0.7.220", "7.1.0.11.220", "7.5.0.1.129", "7.7.0.1.231"]
CANNS = ["8.0.0", "8.1.RC1", "8.2.RC1", "8.2.0", "8.3.RC2", "8.5.0", "8.5.1", "9.0.0", "9.1.0"]


@pytest.mark.parametrize("series", [DRIVERS, FIRMWARES, CANNS])
def test_published_order(series):
    assert sorted(reversed(series), key=ap.version_key) == series
    for older, newer in zip(series, series[1:]):
        assert ap.compare_versions(older, newer) == -1
        assert ap.compare_versions(newer, older) == 1


@pytest.mark.parametrize("a,b,expected", [
    ("24.1.rc3", "24.1.0", -1), ("24.1.0", "25.2.0", -1), ("8.2.RC1", "8.2.0", -1), ("8.2.rc1", "8.2.RC1", 0),
    ("7.5.0.1.129", "7.7.0.1.231", -1), ("25.2.0", "25.2", 0), ("v25.2.0", "25.2.0", 0), ("8.3.RC2", "8.3.RC10", -1),
])
def test_compare(a, b, expected):
    assert ap.compare_versions(a, b) == expected


@pytest.mark.parametrize("bad", ["", "latest", "25.2.x", "V100R001C23", None, "8..2-beta"])
def test_not_a_version(bad):
    with pytest.raises(ap.AscendVersionError) as info:
        ap.compare_versions(bad, "25.2.0")
    assert "not an Ascend version" in str(info.value)


_part = st.one_of(st.integers(0, 300).map(str), st.integers(0, 9).map(lambda n: f"rc{n}"),
                  st.integers(0, 9).map(lambda n: f"RC{n}"))
_version = st.builds(lambda first, rest: ".".join([first] + rest), st.integers(0, 30).map(str),
                     st.lists(_part, max_size=4))


@given(_version, _version, _version)
def test_compare_is_a_total_order(x, y, z):
    assert ap.compare_versions(x, y) == -ap.compare_versions(y, x)
    assert ap.compare_versions(x, x) == 0
    if ap.compare_versions(x, y) <= 0 and ap.compare_versions(y, z) <= 0:
        assert ap.compare_versions(x, z) <= 0


@given(_version)
def test_rc_sorts_before_the_release(base):
    assert ap.compare_versions(base + ".rc1", base + ".0") == -1
    assert ap.compare_versions(base + ".0", base) == 0


# The ranges as printed by real packages (driver-firmware-cann-version-info-mindcluster-doc.txt).
FW_OF_DRIVER = "[7.0.0,7.2.99]"
DRV_OF_FW = "[23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.]"


@pytest.mark.parametrize("version,ranges,inside", [
    ("7.1.0.11.220", FW_OF_DRIVER, True), ("7.2.99.5", FW_OF_DRIVER, True), ("7.5.0.1.129", FW_OF_DRIVER, False),
    ("6.9.9", FW_OF_DRIVER, False), ("23.0.rc3", DRV_OF_FW, True), ("23.0.rc3.1", DRV_OF_FW, True),
    ("23.0.0", DRV_OF_FW, True), ("23.0.7", DRV_OF_FW, False), ("23.0.6", DRV_OF_FW, False),
    ("24.1.rc1", DRV_OF_FW, False), ("25.2.0", "[24.1.rc1,24.1.rc3.],[24.1.0,24.1.0.],[25.0.rc1,25.2.0.]", True),
    ("25.0.rc1.1", "[25.0.rc1,25.2.0.]", True), ("25.3.0", "[25.0.rc1,25.2.0.]", False),
])
def test_ranges(version, ranges, inside):
    assert ap.version_in_ranges(version, ranges) is inside


def test_families():
    assert ap.family("V100R001C23SPC002B210") == "V100R001C23"
    listed = "[V100R001C30],[V100R001C13],[V100R001C15],[V100R001C17]"
    assert ap.family_listed("V100R001C15SPC006B220", listed)
    assert not ap.family_listed("V100R001C23SPC001B211", listed)
    assert not ap.family_listed("", listed)


def test_parse_real_version_info():
    text = ("Version=24.1.rc1\nascendhal_version=7.35.19\nInnerversion=V100R001C15SPC006B220\n"
            "compatible_version=[V100R001C30],[V100R001C13],[V100R001C15],[V100R001C17]\n"
            "compatible_version_fw=[7.0.0,7.2.99]\n")
    info = ap.parse_kv(text)
    assert ap.info_version(info) == "24.1.rc1"
    assert ap.kv_get(info, "innerversion") == "V100R001C15SPC006B220"
    toolkit = ap.parse_kv("package_name=Ascend-cann-toolkit\nversion=8.5.0\narch=x86_64\n")
    assert ap.info_version(toolkit) == "8.5.0"


@pytest.mark.parametrize("installed,wanted,allow,action", [
    (None, "25.2.0", False, "full"), ("24.1.rc3", "25.2.0", False, "upgrade"), ("25.2.0", "25.2.0", False, "none"),
    ("25.2.0", "24.1.rc3", False, "refuse"), ("25.2.0", "24.1.rc3", True, "downgrade"),
    ("8.2.RC1", "8.3.RC2", False, "upgrade"), ("7.7.0.1.231", "7.5.0.1.129", False, "refuse"),
])
def test_plan(installed, wanted, allow, action):
    assert ap.plan_action(installed, wanted, allow) == action


def test_driver_firmware_problems_name_both_sides():
    driver = {"version": "24.1.rc1", "compatible_version_fw": FW_OF_DRIVER}
    firmware = {"version": "7.7.0.1.231", "compatible_version_drv": DRV_OF_FW}
    problems = ap.driver_firmware_problems(driver, firmware)
    assert problems == [
        "driver 24.1.rc1 accepts firmware [7.0.0,7.2.99] (compatible_version_fw), not firmware 7.7.0.1.231",
        "firmware 7.7.0.1.231 accepts driver [23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.] (compatible_version_drv), "
        "not driver 24.1.rc1"]
    assert ap.driver_firmware_problems({"version": "23.0.rc3", "compatible_version_fw": FW_OF_DRIVER},
                                       {"version": "7.1.0.11.220", "compatible_version_drv": DRV_OF_FW}) == []


# CANN 8.5.0's ascend_toolkit_install.info (https://github.com/vllm-project/vllm-ascend/issues/6271, CANN section).
CANN_850_INFO = ("package_name=Ascend-cann-toolkit\nversion=8.5.0\ninnerversion=V100R001C25SPC001B232\n"
                 "compatible_version=[V100R001C15],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21],"
                 "[V100R001C23]\narch=aarch64\nos=linux\npath=/usr/local/Ascend/cann-8.5.0\n")
# The driver 24.1.rc3 of https://github.com/vllm-project/vllm-ascend/issues/451, which runs CANN 8.0.0 there.
DRIVER_241RC3_INFO = ("Version=24.1.rc3\nascendhal_version=7.35.23\nInnerversion=V100R001C19SPC001B124\n"
                      "compatible_version=[V100R001C13],[V100R001C15],[V100R001C17],[V100R001C18],[V100R001C19]\n"
                      "compatible_version_fw=[7.0.0,7.5.99]\npackage_version=24.1.rc3\n")


def test_cann_driver_problems():
    cann = dict(ap.parse_kv(CANN_850_INFO))
    old = {"version": "24.1.rc1", "Innerversion": "V100R001C13SPC006B220", "compatible_version": "[V100R001C13]"}
    problems = ap.cann_driver_problems(cann, old)
    assert len(problems) == 1
    assert "not with driver 24.1.rc1 (V100R001C13SPC006B220, family V100R001C13)" in problems[0]


def test_cann_driver_problems_ignore_the_drivers_own_list():
    """The driver's compatible_version names no CANN family (24.1.rc3 lists C13..C19 and runs CANN 8.0.0, #451):
    CANN 8.5.0 lists the driver's family C19, so they go together."""
    assert ap.cann_driver_problems(ap.parse_kv(CANN_850_INFO), ap.parse_kv(DRIVER_241RC3_INFO)) == []


def test_installed_files_layouts():
    assert ap.installed_files("toolkit", "/usr/local/Ascend/", "aarch64") == [
        "/usr/local/Ascend/cann/aarch64-linux/ascend_toolkit_install.info",
        "/usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info"]
    # CANN 8.5+ ops: <root>/cann/<arch>-linux/ascend_ops_install.info (hicann/ops-math quick_install.md)
    assert ap.installed_files("kernels", "/usr/local/Ascend", "aarch64") == [
        "/usr/local/Ascend/cann/aarch64-linux/ascend_ops_install.info",
        "/usr/local/Ascend/ascend-toolkit/latest/opp_kernel/version.info"]
    assert ap.cann_layout("9.1.0", "aarch64")["info"]["kernels"] == (
        "/usr/local/Ascend/cann/aarch64-linux/ascend_ops_install.info")
    assert ap.installed_files("driver", "/opt/Ascend", "x86_64") == ["/opt/Ascend/driver/version.info"]
    assert ap.installed_files("nnal", "/usr/local/Ascend", "x86_64") == [
        "/usr/local/Ascend/nnal/atb/latest/version.info"]


# nnal/atb/latest/version.info as NNAL writes it: https://github.com/vllm-project/vllm-ascend/issues/451
NNAL_INFO = ("    Ascend-cann-atb : 8.0.0\n    Ascend-cann-atb Version : 8.0.0.B100\n    Platform : aarch64\n"
             "    branch : br_release_cann_8.0.0_20250521\n    commit id : af0ec2e868267322b4fb7949da3ae7af769d9644\n")


def test_nnal_version_info_is_colon_separated():
    info = ap.parse_kv(NNAL_INFO)
    assert ap.info_version(info) == "8.0.0"
    assert info["Ascend-cann-atb Version"] == "8.0.0.B100"
    assert info["commit id"] == "af0ec2e868267322b4fb7949da3ae7af769d9644"
    # '=' still wins where a line holds both (a toolkit version.info line, vllm-ascend issue #451)
    assert ap.parse_kv("runtime_running_version=[7.6.0.1.220:8.0.0]\n") == {
        "runtime_running_version": "[7.6.0.1.220:8.0.0]"}


def test_kernels_version_info_release_over_inner_build():
    # a kernels opp_kernel/version.info with the inner build in Version: the release is compared, else every run
    # would plan an upgrade of the installed 8.3.RC2
    info = ap.parse_kv("Version=8.3.T5.0.B028\nversion_dir=8.3.RC2\nsoc_version=ascend910b\n")
    assert ap.info_version(info) == "8.3.RC2"
    assert ap.plan_action(ap.info_version(info), "8.3.RC2") == "none"


@pytest.mark.parametrize("version,generation,kernels,home,toolkit_info", [
    # Huawei's images: ASCEND_TOOLKIT_HOME=/usr/local/Ascend/ascend-toolkit/latest for 8.3.rc2,
    # /usr/local/Ascend/cann-<version> for 8.5.1 and 9.0.0 (Ascend/cann-container-image, cann/*/Dockerfile)
    ("8.3.RC2", "ascend-toolkit", "Ascend-cann-kernels-910b_8.3.RC2_linux-aarch64.run",
     "/usr/local/Ascend/ascend-toolkit/latest",
     "/usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info"),
    ("8.5.0", "cann", "Ascend-cann-910b-ops_8.5.0_linux-aarch64.run", "/usr/local/Ascend/cann-8.5.0",
     "/usr/local/Ascend/cann/aarch64-linux/ascend_toolkit_install.info"),
    ("8.5.1", "cann", "Ascend-cann-910b-ops_8.5.1_linux-aarch64.run", "/usr/local/Ascend/cann-8.5.1",
     "/usr/local/Ascend/cann/aarch64-linux/ascend_toolkit_install.info"),
    ("9.0.0", "cann", "Ascend-cann-910b-ops_9.0.0_linux-aarch64.run", "/usr/local/Ascend/cann-9.0.0",
     "/usr/local/Ascend/cann/aarch64-linux/ascend_toolkit_install.info"),
])
def test_cann_layout(version, generation, kernels, home, toolkit_info):
    layout = ap.cann_layout(version, "aarch64")
    assert layout["generation"] == generation
    assert layout["files"]["kernels"] == kernels
    assert layout["home"] == home
    assert layout["info"]["toolkit"] == toolkit_info
    # every generation keeps these (Huawei's images source them for 8.3.rc2, 8.5.1, 9.0.0, 9.1.0-beta.3)
    assert layout["toolkit_set_env"] == "/usr/local/Ascend/ascend-toolkit/set_env.sh"
    assert layout["nnal_set_env"] == "/usr/local/Ascend/nnal/atb/set_env.sh"
    assert layout["atb_home"] == "/usr/local/Ascend/nnal/atb/latest/atb"


def test_cann_layout_refuses_a_non_version():
    with pytest.raises(ap.AscendVersionError):
        ap.cann_layout("latest", "aarch64")


@pytest.mark.parametrize("version, home, kernels", [
    # up to 8.3: ascend-toolkit/<version>, the directory ascend-toolkit/latest names
    ("8.3.RC2", "/usr/local/Ascend/ascend-toolkit/8.3.RC2",
     "/usr/local/Ascend/ascend-toolkit/8.3.RC2/opp_kernel/version.info"),
    # from 8.5: cann-<version>, the directory cann names
    ("8.5.1", "/usr/local/Ascend/cann-8.5.1", "/usr/local/Ascend/cann-8.5.1/aarch64-linux/ascend_ops_install.info"),
    ("9.1.0", "/usr/local/Ascend/cann-9.1.0", "/usr/local/Ascend/cann-9.1.0/aarch64-linux/ascend_ops_install.info"),
])
def test_pinned_layout_is_the_shared_records_with_the_link_resolved(version, home, kernels):
    pinned = ap.pinned_layout(version, "aarch64")
    shared = ap.cann_layout(version, "aarch64")
    assert pinned == shared["pinned"]
    assert pinned["home"] == home and pinned["info"]["kernels"] == kernels
    assert pinned["info"]["toolkit"] == f"{home}/aarch64-linux/ascend_toolkit_install.info"
    assert pinned["info"]["nnal"] == f"/usr/local/Ascend/nnal/atb/{version}/version.info"
    assert pinned["atb_home"] == f"/usr/local/Ascend/nnal/atb/{version}/atb"
    # the shared record with its link replaced by the version's directory is the pinned one
    link, target = (("ascend-toolkit/latest", f"ascend-toolkit/{version}") if version.startswith("8.3")
                    else ("Ascend/cann/", f"Ascend/cann-{version}/"))
    for kind in ("toolkit", "kernels"):
        assert shared["info"][kind].replace(link, target) == pinned["info"][kind]
    assert "latest" not in " ".join([pinned["home"], pinned["atb_home"], *pinned["info"].values()])
