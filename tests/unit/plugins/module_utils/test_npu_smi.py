"""Tests for plugins/module_utils/_npu_smi.py against real npu-smi captures.

Every expected value below was read off the capture in tests/unit/fixtures/npu-smi/ by eye.
"""

from __future__ import annotations

import os
import re

import pytest
from ansible_collections.ascendai.vllm.plugins.module_utils._npu_smi import (
    HEALTH_ORDER,
    NpuSmiParseError,
    chip_family,
    classify_error,
    find_device_holders,
    merge_health,
    parse_board,
    parse_common,
    parse_health,
    parse_info,
    parse_info_m,
    parse_memory,
    parse_usages,
    summarize,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "npu-smi")
WARNING_LINE = (
    "[WARNING]The driver package may not be completely installed, which may cause function abnormal. "
    "Please reinstall it."
)


def load(name):
    """The capture without its '# source' / '# NOTE' header lines (not part of the tool output)."""
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        lines = f.read().split("\n")
    while lines and lines[0].startswith("# "):
        lines.pop(0)
    return "\n".join(lines)


_CMD_RE = re.compile(r"^(?:\$ |/usr/local/bin/)(npu-smi\b.*)$")
_OTHER_CMD_RE = re.compile(r"^(?:/usr/local/Ascend/\S+|lspci|cat |pip |\$ (?!npu-smi))")


def sections(name):
    """Split a capture holding several commands into [(command, output)]."""
    out = []
    for line in load(name).split("\n"):
        m = _CMD_RE.match(line.strip()) if not line.startswith("\t") else None
        if m or _OTHER_CMD_RE.match(line):
            out.append([m.group(1) if m else line.strip(), []])
        elif out:
            out[-1][1].append(line)
    return [(cmd, "\n".join(body)) for cmd, body in out]


def section(name, command):
    found = [body for cmd, body in sections(name) if cmd == command]
    assert found, f"no section {command!r} in {name}"
    return found[0]


def chips(result):
    return [c for n in result["npus"] for c in n["chips"]]


# ------------------------------------------------------------------ npu-smi info, one test per capture


def test_classic_910b2_idle_8card_no_processes():
    r = parse_info(load("npu-smi-info-910b2-8card-idle-vllm-ascend-issue3906.txt"))
    assert (r["npu_smi_version"], r["driver_version"], r["layout"]) == ("25.2.0", "25.2.0", "classic")
    assert [n["npu_id"] for n in r["npus"]] == list(range(8))
    assert {n["name"] for n in r["npus"]} == {"910B2"}
    assert {n["health"] for n in r["npus"]} == {"OK"}
    assert [n["power_w"] for n in r["npus"]] == [94.2, 91.5, 96.6, 97.5, 96.9, 102.2, 95.0, 97.3]
    assert [n["temp_c"] for n in r["npus"]] == [49, 49, 48, 50, 48, 50, 48, 49]
    assert [c["hbm_used_mb"] for c in chips(r)] == [3418, 3400, 3399, 3399, 3387, 3387, 3387, 3388]
    assert {c["hbm_total_mb"] for c in chips(r)} == {65536}
    assert {(c["memory_used_mb"], c["memory_total_mb"]) for c in chips(r)} == {(0, 0)}
    assert [c["bus_id"] for c in chips(r)][:3] == ["0000:C1:00.0", "0000:01:00.0", "0000:C2:00.0"]
    assert {c["chip_id"] for c in chips(r)} == {0}
    assert {c["phy_id"] for c in chips(r)} == {None}
    assert r["processes"] == []
    assert r["process_table"] is True
    assert r["npus_without_processes"] == list(range(8))
    assert r["warnings"] == [] and r["elided"] is False


def test_classic_910b4_busy_pairs_without_space_and_processes():
    r = parse_info(load("npu-smi-info-910b4-4card-busy-with-procs-vllm-ascend-issue843.txt"))
    assert (r["npu_smi_version"], r["layout"]) == ("23.0.6", "classic")
    assert [n["npu_id"] for n in r["npus"]] == [4, 5, 6, 7]
    assert {n["name"] for n in r["npus"]} == {"910B4"}
    # '29096/ 32768': used >= 10000 prints without a space before the slash
    assert [(c["hbm_used_mb"], c["hbm_total_mb"]) for c in chips(r)] == [
        (29096, 32768), (29095, 32768), (29096, 32768), (29096, 32768)]
    assert [n["temp_c"] for n in r["npus"]] == [39, 40, 38, 40]
    assert [(p["npu_id"], p["chip_id"], p["pid"], p["name"], p["memory_mb"]) for p in r["processes"]] == [
        (4, 0, 498807, "python", 26323), (5, 0, 499212, "python", 26323),
        (6, 0, 499213, "python", 26323), (7, 0, 499214, "python", 26322)]
    assert r["npus_without_processes"] == []


def test_wide_26x_layout_single_910b4():
    r = parse_info(load("npu-smi-info-910b4-1card-wide-format-v26-triton-ascend-faq.txt"))
    assert (r["npu_smi_version"], r["driver_version"], r["layout"]) == ("26.0.rc1", "26.0.rc1", "wide")
    assert len(r["npus"]) == 1
    npu = r["npus"][0]
    assert (npu["npu_id"], npu["name"], npu["health"], npu["power_w"], npu["temp_c"]) == (0, "910B4", "OK", 82.6, 32)
    chip = npu["chips"][0]
    assert (chip["hbm_used_mb"], chip["hbm_total_mb"], chip["bus_id"], chip["aicore_util_pct"]) == (
        2871, 32768, "0000:C1:00.0", 0)
    assert (chip["hugepages_used"], chip["hugepages_total"]) == (0, 0)
    assert r["processes"] == [] and r["npus_without_processes"] == [0]


def test_a3_two_dies_per_npu_phy_id_and_blank_process_names():
    r = parse_info(load("npu-smi-info-a3-ascend910-8npu-16die-busy-with-procs-vllm-ascend-issue3002.txt"))
    assert (r["npu_smi_version"], r["layout"]) == ("25.2.0", "a3")
    assert [n["npu_id"] for n in r["npus"]] == list(range(8))
    assert all(len(n["chips"]) == 2 for n in r["npus"])
    assert [(c["chip_id"], c["phy_id"]) for c in chips(r)] == [(i % 2, i) for i in range(16)]
    assert {n["name"] for n in r["npus"]} == {"Ascend910"}
    # die 1 prints '-' for power: null on the die, the NPU keeps die 0's value
    assert [n["chips"][1]["power_w"] for n in r["npus"]] == [None] * 8
    assert [n["power_w"] for n in r["npus"]] == [211.3, 210.6, 205.7, 209.9, 219.9, 214.0, 201.9, 205.5]
    assert r["npus"][0]["chips"][1]["temp_c"] == 44
    assert [c["hbm_used_mb"] for c in r["npus"][0]["chips"]] == [61609, 61625]
    assert r["npus"][7]["chips"][1]["bus_id"] == "0000:83:00.0"
    assert [c["aicore_util_pct"] for c in chips(r)].count(7) == 14
    assert r["npus"][4]["chips"][0]["aicore_util_pct"] == 8
    assert r["npus"][6]["chips"][0]["aicore_util_pct"] == 6
    assert len(r["processes"]) == 23
    assert {p["name"] for p in r["processes"]} == {""}
    npu0 = [p for p in r["processes"] if p["npu_id"] == 0]
    assert len(npu0) == 9 and [p["memory_mb"] for p in npu0].count(141) == 8
    assert npu0[-1] == {"npu_id": 0, "chip_id": 1, "pid": 929405, "name": "", "memory_mb": 58780, "container_pid": None}
    assert r["processes"][-1]["pid"] == 944268 and r["processes"][-1]["chip_id"] == 1


def test_310p_duo_chip_device_layout_na_power_no_hbm():
    r = parse_info(load("npu-smi-info-310p3-300i-duo-1card-2chip-nvtop-issue421-partial.txt"))
    assert (r["npu_smi_version"], r["layout"]) == ("25.2.0", "310p")
    assert len(r["npus"]) == 1
    npu = r["npus"][0]
    assert (npu["npu_id"], npu["name"], npu["health"], npu["power_w"], npu["temp_c"]) == (2, "310P3", "OK", None, 45)
    assert [(c["chip_id"], c["device_id"]) for c in npu["chips"]] == [(0, 0), (1, 1)]
    assert [(c["memory_used_mb"], c["memory_total_mb"]) for c in npu["chips"]] == [(1529, 44280), (1412, 43693)]
    assert {c["bus_id"] for c in npu["chips"]} == {"0000:01:00.0"}
    assert {(c["hbm_used_mb"], c["hbm_total_mb"]) for c in npu["chips"]} == {(None, None)}
    assert [c["temp_c"] for c in npu["chips"]] == [45, 43]
    assert r["process_table"] is False


def test_old_310_layout_four_chips_on_npu_6():
    r = parse_info(load("npu-smi-info-310-4chip-gpustack-huawei-doc.txt"))
    assert (r["npu_smi_version"], r["driver_version"], r["layout"]) == ("21.0.4", "21.0.4.B030", "310")
    assert [n["npu_id"] for n in r["npus"]] == [6]
    c = r["npus"][0]["chips"]
    assert [(x["chip_id"], x["device_id"], x["bus_id"]) for x in c] == [
        (0, 3, "0000:89:00.0"), (1, 4, "0000:8A:00.0"), (2, 5, "0000:8B:00.0"), (3, 6, "0000:8C:00.0")]
    assert [(x["memory_used_mb"], x["memory_total_mb"]) for x in c] == [
        (2703, 8192), (2867, 8192), (2867, 8192), (2867, 8192)]
    assert {(x["hugepages_used"], x["hugepages_total"]) for x in c} == {(0, 970)}
    assert [x["temp_c"] for x in c] == [73, 74, 70, 65]
    assert r["npus"][0]["power_w"] == 12.8 and r["npus"][0]["name"] == "310"


def test_910a_idle_no_process_table():
    r = parse_info(load("npu-smi-info-910a-8card-idle-gpustack-huawei-doc.txt"))
    assert (r["npu_smi_version"], r["layout"]) == ("22.0.3.1", "classic")
    assert len(r["npus"]) == 8 and {n["name"] for n in r["npus"]} == {"910A"}
    assert r["npus"][3]["power_w"] == 191.7 and r["npus"][7]["power_w"] == 191.4
    assert {(c["hbm_used_mb"], c["hbm_total_mb"]) for c in chips(r)} == {(0, 32768)}
    assert [c["memory_used_mb"] for c in chips(r)] == [1867, 1867, 1868, 1866, 1867, 1865, 1865, 1866]
    assert {c["memory_total_mb"] for c in chips(r)} == {15077}
    assert {(c["hugepages_used"], c["hugepages_total"]) for c in chips(r)} == {(15, 15)}
    assert r["process_table"] is False and r["processes"] == []


def test_910a_busy_versions_differ_and_processes():
    r = parse_info(load("npu-smi-info-910a-8card-busy-with-procs-mindcluster-doc.txt"))
    assert (r["npu_smi_version"], r["driver_version"]) == ("23.0.rc3", "23.0.rc2.3")
    assert len(r["npus"]) == 8
    assert r["npus"][0]["chips"][0]["memory_used_mb"] == 4565
    assert r["npus"][3]["chips"][0]["memory_total_mb"] == 15039
    assert [c["hbm_used_mb"] for c in chips(r)] == [30710, 30710, 30710, 30709, 30709, 30709, 30710, 30710]
    assert {(c["hugepages_used"], c["hugepages_total"]) for c in chips(r)} == {(1123, 1123)}
    assert [p["pid"] for p in r["processes"]] == [139667, 139577, 139446, 139372, 139258, 139163, 139126, 139090]
    assert [p["memory_mb"] for p in r["processes"]] == [30780, 30782] + [30780] * 6
    assert [p["npu_id"] for p in r["processes"]] == list(range(8))


def test_elided_capture_keeps_the_rows_it_has():
    r = parse_info(load("npu-smi-info-910b1-8card-elided-arthurchiao-blog.txt"))
    assert [n["npu_id"] for n in r["npus"]] == [0, 1, 7]
    assert r["elided"] is True
    assert [c["hbm_used_mb"] for c in chips(r)] == [4175, 4175, 4174]
    assert [n["power_w"] for n in r["npus"]] == [88.4, 92.1, 92.7]


def test_warning_health_then_ok_after_reset():
    text = load("npu-smi-info-warning-before-after-offline-reset-mindcluster-doc.txt")
    before = parse_info(text)  # the first of the two captures; the second is reported in notes
    assert [(n["npu_id"], n["health"]) for n in before["npus"]] == [(0, "Warning"), (7, "OK")]
    assert any("second npu-smi output" in note for note in before["notes"])
    after = parse_info(text[text.index("\u79bb\u7ebf"):])  # the capture after the Chinese sentence
    assert [(n["npu_id"], n["health"]) for n in after["npus"]] == [(0, "OK"), (7, "OK")]
    assert after["npus"][1]["chips"][0]["memory_total_mb"] == 15567
    assert after["npus_without_processes"] == [0]


def test_mindcluster_bundle_info_health_board_usages():
    name = "npu-smi-info-and-t-health-ecc-board-usages-910a-8card-mindcluster-doc.txt"
    info = parse_info(section(name, "npu-smi info"))
    assert [n["npu_id"] for n in info["npus"]] == [0, 7]
    assert info["npus"][0]["chips"][0]["memory_used_mb"] == 920
    assert info["npus_without_processes"] == [0, 7]
    health = parse_health(section(name, "npu-smi info -i 0 -c 0 -t health"))
    assert (health["health"], health["error_codes"], health["error_information"]) == ("OK", [], None)
    board = parse_board(section(name, "npu-smi info -i 0 -t board"))
    assert board["software_version"] == "23.0.5" and board["firmware_version"] == "7.1.0.7.220"
    assert (board["pci_device_id"], board["pci_vendor_id"], board["chip_count"]) == ("0xD801", "0x19e5", 1)
    assert board["compatibility"] == "OK" and board["class_id"] is None and board["pcie_bus_info"] == "0000:61:00.0"
    chip_board = parse_board(section(name, "npu-smi info -i 0 -c 0 -t board"))
    assert (chip_board["chip_name"], chip_board["chip_type"], chip_board["chip_version"]) == ("xxx", "Ascend", "V1")
    assert chip_board["pcb_id"] is None and chip_board["chips"][0]["chip_id"] == 0
    usages = parse_usages(section(name, "npu-smi info -i 0 -t usages"))
    assert (usages["hbm_capacity_mb"], usages["ddr_capacity_mb"], usages["ddr_usage_rate_pct"]) == (32768, 13553, 6)
    assert usages["chip_id"] == 0 and usages["npu_id"] == 0


def test_faultdiag_after_alarm_error_codes_and_invalid_card():
    name = "npu_info_after-health-alarm-errorcodes-910a-faultdiag-fixture-mindcluster.txt"
    health = parse_health(section(name, "npu-smi info -i 0 -c 0 -t health"))
    assert health["health"] == "Alarm"
    assert health["error_codes"] == ["A4025021", "8C03A000", "8C084E00"]
    process_manager = (
        "node type=process-manager, sensor type=General Software, event state=The process start failed or exit "
        "abnormally"
    )
    assert health["error_information_lines"] == [
        "ascend_monitor adda heart beat lost error",
        process_manager,
        "node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost.",
    ]
    assert health["error_information"].startswith("ascend_monitor adda heart beat lost error; node type=")
    board_out = section(name, "npu-smi info -i 0 -t board")
    assert classify_error(board_out, "", 255)[0] == "invalid_card"
    with pytest.raises(NpuSmiParseError, match="Invalid card id"):
        parse_board(board_out)


def test_faultdiag_before_mapping_board_usages_and_empty_info():
    name = "npu_info_before-hccn_tool-npu-smi-910a-faultdiag-fixture-mindcluster.txt"
    mapping = parse_info_m(section(name, "npu-smi info -m"))
    assert [(m["npu_id"], m["chip_id"], m["chip_logic_id"], m["chip_name"]) for m in mapping] == [
        (i, 0, i, "Ascend 910A") for i in range(8)]
    with pytest.raises(NpuSmiParseError, match="no 'npu-smi info' device table"):
        parse_info(section(name, "npu-smi info"))
    chip_board = parse_board(section(name, "npu-smi info -i 0 -c 0 -t board"))
    assert chip_board["chip_name"] == "910A" and chip_board["vdie_id"].startswith("42C711D4 ")
    usages = parse_usages(section(name, "npu-smi info -i 0 -t usages"))
    assert usages["hbm_capacity_mb"] == 31129 and usages["ddr_capacity_mb"] == 13553
    board = parse_board(section(name, "npu-smi info -i 0 -t board"))
    assert (board["pci_vendor_id"], board["pci_device_id"], board["software_version"]) == ("0x19E5", "0xD801", "23.0.5")
    assert parse_health(section(name, "npu-smi info -i 0 -c 0 -t health"))["health"] == "OK"


def test_mapping_310_with_mcu():
    rows = parse_info_m(load("npu-smi-info-m-310-4chip-gpustack-huawei-doc.txt"))
    assert [(r["npu_id"], r["chip_id"], r["chip_logic_id"], r["chip_name"]) for r in rows] == [
        (6, 0, 0, "MiniD"), (6, 1, 1, "MiniD"), (6, 2, 2, "MiniD"), (6, 3, 3, "MiniD"), (6, 4, None, "Mcu")]


def test_mapping_910a():
    rows = parse_info_m(load("npu-smi-info-m-910a-8card-gpustack-huawei-doc.txt"))
    assert len(rows) == 8 and {r["chip_name"] for r in rows} == {"Ascend 910A"}
    assert [r["chip_logic_id"] for r in rows] == list(range(8))


def test_common_910b1_with_mcu_block():
    c = parse_common(section("npu-smi-info-t-common-910b1-arthurchiao-blog.txt", "npu-smi info -t common -i 1"))
    assert (c["npu_id"], c["chip_count"], c["chip_id"]) == (1, 1, 0)
    assert (c["aicore_count"], c["aicore_freq_mhz"], c["aicore_curfreq_mhz"]) == (24, 1800, 800)
    assert (c["hbm_usage_rate_pct"], c["temperature_c"], c["npu_real_time_power_w"]) == (4, 46, 93.4)
    assert c["mcu"] == {"chip_name": "mcu", "temperature_c": 38}
    assert len(c["chips"]) == 1 and c["chips"][0]["aicore_count"] == 24


def test_common_mindcluster():
    c = parse_common(load("npu-smi-info-t-common-mindcluster-doc.txt"))
    assert (c["aicore_count"], c["aicore_freq_mhz"], c["temperature_c"]) == (30, 900, 41)
    assert (c["memory_usage_rate_pct"], c["npu_real_time_power_w"]) == (6, 71.7)


def test_usages_910b1():
    u = parse_usages(section("npu-smi-info-t-usages-910b1-arthurchiao-blog.txt", "npu-smi info -t usages -i 0"))
    assert (u["hbm_capacity_mb"], u["hbm_usage_rate_pct"], u["ddr_capacity_mb"]) == (65536, 4, 0)
    assert u["aivector_usage_rate_pct"] == 0 and u["chips"][0]["hbm_capacity_mb"] == 65536


def test_memory_and_health_950_doc():
    name = "npu-smi-info-t-memory-and-t-health-950-driver-repo-doc.txt"
    m = parse_memory(section(name, "npu-smi info -t memory -i 0"))
    assert (m["hbm_capacity_mb"], m["hbm_clock_speed_mhz"], m["hbm_temperature_c"]) == (131072, 3200, 63)
    assert (m["hbm_manufacturer_id"], m["ddr_capacity_mb"]) == ("0x5A", 0)
    h = parse_health(section(name, "npu-smi info -t health -i 0"))
    assert (h["npu_id"], h["health"], h["error_codes"], h["error_information"]) == (0, "OK", [], None)


@pytest.mark.parametrize("name", [
    "npu-smi-info-help-910b1-arthurchiao-blog.txt",
    "npu-smi-info-t-topo-910b1-8card-arthurchiao-blog.txt",
    "npu-smi-info-m-910a-8card-gpustack-huawei-doc.txt",
])
def test_other_subcommands_are_not_an_info_table(name):
    with pytest.raises(NpuSmiParseError, match="device table"):
        parse_info(load(name))


def test_driver_warning_line_is_reported():
    text = load("npu-smi-info-910b2-8card-idle-vllm-ascend-issue3906.txt").replace("\nCANN:", WARNING_LINE + "\nCANN:")
    r = parse_info(text)
    assert r["warnings"] == [WARNING_LINE]
    assert r["driver_install_incomplete"] is True
    assert len(r["npus"]) == 8


def test_every_fixture_is_covered():
    """Each file in the fixture folder is read by a test above (by name)."""
    with open(__file__, encoding="utf-8") as f:
        source = f.read()
    for name in os.listdir(FIXTURES):
        assert name in source, f"fixture {name} is not used by any test"


# ------------------------------------------------------------------ errors, family, summary


@pytest.mark.parametrize("stdout,stderr,rc,kind,words", [
    ("dcmi module initialize failed. ret is -8005\n", "", 255, "dcmi_init",
     ["-8005", "reboot", "HwHiAiUser", "container"]),
    ("Invalid card id.\nError parameter of -i\n", "", 255, "invalid_card", ["npu-smi info -l"]),
    ("", "/bin/sh: npu-smi: command not found", 127, "not_found", ["driver"]),
    ("", "open /dev/davinci_manager: Permission denied", 1, "permission", ["root", "HwHiAiUser"]),
    ("There is no NPU card on this server.\n", "", 0, "no_device", ["lspci"]),
    ("", "something odd", 3, "unknown", ["rc=3", "something odd"]),
    ("+---+\n| npu-smi 23.0.6 Version: 23.0.6 |\n", "", 0, "ok", []),
])
def test_classify_error(stdout, stderr, rc, kind, words):
    got_kind, message = classify_error(stdout, stderr, rc)
    assert got_kind == kind
    for word in words:
        assert word in message


def test_parse_info_reports_dcmi_failure_as_parse_error():
    with pytest.raises(NpuSmiParseError, match="reboot"):
        parse_info("dcmi module initialize failed. ret is -8005\n")


@pytest.mark.parametrize("name,layout,pci,family", [
    ("910B3", "classic", None, "910B"), ("910B4-1", "wide", None, "910B"), ("Ascend910", "a3", None, "A3"),
    ("910A", "classic", None, "910A"), ("910ProB", "classic", None, "910A"), ("310P3", "310p", None, "310P"),
    ("310", "310", None, "310"), ("xxx", "classic", "0xD801", "910A"), ("xxx", "classic", "0xd802", "910B"),
    ("xxx", "classic", None, None),
    # d803 = Atlas A3 (910_93): driver source ascend_bug_report.sh PCIE_BDF_910_93="19e5:d803"; the name alone
    # ('Ascend910', as the A3 table prints it) reads as a 910A
    ("Ascend910", "wide", "0xD803", "A3"), ("xxx", "classic", "d803", "A3"),
])
def test_chip_family(name, layout, pci, family):
    assert chip_family(name, layout, pci) == family


# npu_smi.c handle_dcmi_initialization: the two texts; dcmi_interface_api.h: -8005 DCMI_ERR_CODE_INNER_ERR,
# -8020 DCMI_ERR_CODE_RESOURCE_OCCUPIED
DCMI_8005 = "dcmi module initialize failed. ret is -8005\n"
DCMI_8020 = "dcmi model initialized failed, because the device is used. ret is -8020\n"
HOLDER = {"pid": 977, "name": "vllm", "devices": ["/dev/davinci3"], "container": "f" * 64}


@pytest.mark.parametrize("stdout,holders,kind,words,absent", [
    (DCMI_8020, None, "device_in_use", ["ret -8020", "RESOURCE_OCCUPIED", "fuser -v /dev/davinci*", "stop it"],
     ["reboot the node"]),
    (DCMI_8020, [HOLDER], "device_in_use", ["vllm (pid 977) in container ffffffffffff holds /dev/davinci3"], []),
    (DCMI_8005, [HOLDER], "device_held", ["ret -8005", "INNER_ERR", "vllm (pid 977)", "do not reboot"], []),
    (DCMI_8005, [], "dcmi_init", ["ret -8005", "generic inner error", "not proof", "reboot the node",
                                  "fuser -v /dev/davinci*", "HwHiAiUser"], []),
])
def test_classify_dcmi_failures(stdout, holders, kind, words, absent):
    got_kind, message = classify_error(stdout, "", 172 if "8020" in stdout else 187, holders=holders)
    assert got_kind == kind
    for word in words:
        assert word in message
    for word in absent:
        assert word not in message


def test_classify_error_is_linear_on_hostile_output():
    import time

    for text in ("npu-smi" * 40000, "dcmi module initialize failed" * 8000, "ret is " * 40000 + "x",
                 "a" * 200000 + ": no such file or directory"):
        start = time.perf_counter()
        classify_error(text, text, 1)
        assert time.perf_counter() - start < 0.5, text[:40]


def test_find_device_holders(tmp_path):
    proc = tmp_path / "proc"

    def process(pid, name, targets, cgroup="0::/init.scope\n"):
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "comm").write_text(name + "\n")
        (proc / str(pid) / "cgroup").write_text(cgroup)
        for fd, target in enumerate(targets):
            os.symlink(target, str(proc / str(pid) / "fd" / str(fd)))

    cid = "3f" * 32
    process(10, "sshd", ["/dev/null", "socket:[123]"])
    process(4242, "python3", ["/dev/davinci0", "/dev/davinci_manager", "/dev/davinci0", "/dev/devmm_svm"],
            "0::/system.slice/docker-%s.scope\n" % cid)
    process(77, "npu-exporter", ["/dev/hisi_hdc", "/dev/davinci12"])
    (proc / "self").mkdir()
    (proc / "999").mkdir()  # gone or not ours: no fd directory
    assert find_device_holders(str(proc)) == [
        {"pid": 77, "name": "npu-exporter", "devices": ["/dev/davinci12", "/dev/hisi_hdc"], "container": None},
        {"pid": 4242, "name": "python3", "devices": ["/dev/davinci0", "/dev/davinci_manager", "/dev/devmm_svm"],
         "container": cid},
    ]
    assert [h["pid"] for h in find_device_holders(str(proc), exclude_pids=[77])] == [4242]
    assert find_device_holders(str(tmp_path / "nowhere")) == []


def _c(key, value):
    return "\t%-30s : %s" % (key, value)


def test_health_without_chip_has_no_error_codes_and_skips_the_mcu():
    # npu_card_info.c show_ascend_card_health on a 910B/A3 build (printf "\t%-30s : %s\n"), A3 card: two chips
    text = "\n".join([_c("NPU ID", 5), _c("Chip Count", 2), "", _c("Health", "OK"), _c("Chip ID", 0), "",
                      _c("Health", "Warning"), _c("Chip ID", 1), "", _c("Health", "OK"), _c("Chip Name", "MCU"),
                      "", ""])
    health = parse_health(text)
    assert (health["health"], health["error_codes"], health["error_codes_shown"]) == ("Warning", [], False)
    assert [(c["chip_id"], c["health"]) for c in health["chips"]] == [(0, "OK"), (1, "Warning")]


def test_merge_health_of_chip_queries():
    die0 = parse_health("\n".join([_c("Health Status", "OK"), _c("Error Code", "NA"), _c("Error Information", "NA")]))
    die1 = parse_health("\n".join([_c("Health Status", "Alarm"), _c("Error Code", "80E01801"),
                                   _c("Error Information", "node type=NPU, sensor type=General Fault")]))
    merged = merge_health([dict(die0, chip_id=0), dict(die1, chip_id=1)])
    assert (merged["health"], merged["error_codes"], merged["error_codes_shown"]) == ("Alarm", ["80E01801"], True)
    assert [c["chip_id"] for c in merged["chips"]] == [0, 1]
    assert merge_health([]) is None


def test_summarize_a3_totals():
    text = load("npu-smi-info-a3-ascend910-8npu-16die-busy-with-procs-vllm-ascend-issue3002.txt")
    facts = summarize(parse_info(text))
    assert (facts["count"], facts["chip_count"], facts["family"], facts["chip_name"]) == (8, 16, "A3", "Ascend910")
    assert facts["hbm_total_mb"] == 16 * 65536
    used = 61609 + 61625 + 61616 + 61619 + 61633 + 61623 + 61625 + 61628 + 61602 + 61618 + 61578 + 61603 \
        + 61614 + 61623 + 61627 + 61631
    assert facts["hbm_used_mb"] == used and facts["hbm_free_mb"] == 16 * 65536 - used
    assert facts["npus"][0]["hbm_free_mb"] == 2 * 65536 - 61609 - 61625
    assert facts["healthy"] is True and facts["unhealthy"] == []


def test_summarize_unhealthy_with_health_detail():
    info = parse_info(load("npu-smi-info-warning-before-after-offline-reset-mindcluster-doc.txt"))
    alarm = parse_health(section("npu_info_after-health-alarm-errorcodes-910a-faultdiag-fixture-mindcluster.txt",
                                 "npu-smi info -i 0 -c 0 -t health"))
    facts = summarize(info, healths={0: alarm}, detail_errors={7: "Invalid card id."})
    assert facts["healthy"] is False
    assert [(u["npu_id"], u["health"]) for u in facts["unhealthy"]] == [(0, "Alarm"), (7, "OK")]
    assert facts["unhealthy"][0]["error_codes"] == ["A4025021", "8C03A000", "8C084E00"]
    assert "heart beat lost" in facts["unhealthy"][0]["error_information"]
    assert "Invalid card id." in facts["unhealthy"][1]["reason"]
    assert facts["hbm_total_mb"] == 2 * 32768 and facts["hbm_free_mb"] == 2 * 32768


# ------------------------------------------------------------------ synthetic tables in npu-smi's printf formats
# (formats from npu_info_print.c of the open-sourced driver), random values: parse must give them back exactly.

_TOP = "+" + "-" * 96 + "+"
_MID = "+---------------------------+---------------+----------------------------------------------------+"
_EQ = "+===========================+===============+====================================================+"
_H1 = "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|"
_H2 = "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |"
_H2_A3 = "| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |"
_PH = "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |"

_chip = st.fixed_dictionaries({
    "health": st.sampled_from(HEALTH_ORDER),
    "power": st.integers(0, 4000),
    "temp": st.integers(0, 120),
    "huge": st.tuples(st.integers(0, 2000), st.integers(0, 2000)),
    "bus": st.tuples(st.integers(0, 255), st.integers(0, 31), st.integers(0, 7)),
    "aicore": st.integers(0, 100),
    "hbm": st.tuples(st.integers(0, 99999), st.sampled_from([32768, 65536])),
})
_proc = st.fixed_dictionaries({
    "pid": st.integers(1, 4194304),
    "name": st.text(st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters="|"), max_size=24),
    "mem": st.integers(0, 65536),
})
_npu = st.fixed_dictionaries({
    "name": st.sampled_from(["910B1", "910B2", "910B2C", "910B3", "910B4", "910B4-1", "910A", "Ascend910"]),
    "procs": st.lists(_proc, max_size=3),
})


def _render(npus, a3):
    out = [_TOP, "| npu-smi %-24s Version: %-52s |" % ("24.1.0", "24.1.0"), _MID, _H1, _H2_A3 if a3 else _H2, _EQ]
    for npu_id, (npu, dies) in enumerate(npus):
        for chip_id, c in enumerate(dies):
            power = "-" if a3 and chip_id == 1 else "%.1f" % (c["power"] / 10.0)
            out.append("| %-5d %-20s| %-13s | %-11s %-17d %-5d/ %-13d |" % (
                npu_id, npu["name"], c["health"], power, c["temp"], c["huge"][0], c["huge"][1]))
            first = "| %-5d %-20d| " % (chip_id, npu_id * 2 + chip_id) if a3 else "| %-26d| " % chip_id
            out.append(first + "%04X:%02X:%02X.%-2X | %-11d %-5d/ %-10d %-5d/ %-13d |" % (
                0, c["bus"][0], c["bus"][1], c["bus"][2], c["aicore"], 0, 0, c["hbm"][0], c["hbm"][1]))
            if chip_id != len(dies) - 1:
                out.append(_TOP)
        out.append(_EQ)
    out += [_MID, _PH, _EQ]
    for npu_id, (npu, _dies) in enumerate(npus):
        for p in npu["procs"]:
            out.append("| %-7d %-18d| %-13d | %-24s | %-23d |" % (npu_id, 0, p["pid"], p["name"], p["mem"]))
        if not npu["procs"]:
            out.append("| No running processes found in NPU %-7d" % npu_id + " " * 52 + "|")
        out.append(_EQ)
    return "\n".join(out) + "\n"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_npu, min_size=1, max_size=8), st.booleans(), st.data())
def test_printf_round_trip(npus, a3, data):
    with_dies = [(n, data.draw(st.lists(_chip, min_size=2 if a3 else 1, max_size=2 if a3 else 1))) for n in npus]
    r = parse_info(_render(with_dies, a3))
    assert r["layout"] == ("a3" if a3 else "classic")
    assert len(r["npus"]) == len(npus)
    for npu_id, (npu, dies) in enumerate(with_dies):
        got = r["npus"][npu_id]
        assert got["npu_id"] == npu_id and got["name"] == npu["name"]
        assert got["power_w"] == dies[0]["power"] / 10.0
        assert [c["health"] for c in got["chips"]] == [d["health"] for d in dies]
        for chip_id, (gc, d) in enumerate(zip(got["chips"], dies)):
            assert gc["chip_id"] == chip_id
            assert gc["phy_id"] == (npu_id * 2 + chip_id if a3 else None)
            assert (gc["hbm_used_mb"], gc["hbm_total_mb"]) == d["hbm"]
            assert (gc["hugepages_used"], gc["hugepages_total"]) == d["huge"]
            assert gc["temp_c"] == d["temp"] and gc["aicore_util_pct"] == d["aicore"]
            assert gc["bus_id"] == "0000:{:02X}:{:02X}.{:X}".format(*d["bus"])
    want = [(i, p["pid"], p["name"], p["mem"]) for i, (n, _dies) in enumerate(with_dies) for p in n["procs"]]
    assert [(p["npu_id"], p["pid"], p["name"], p["memory_mb"]) for p in r["processes"]] == want
    assert r["npus_without_processes"] == [i for i, (n, _dies) in enumerate(with_dies) if not n["procs"]]


# ------------------------------------------------------------------ property tests: mangled real outputs

INFO_FIXTURES = [
    "npu-smi-info-310-4chip-gpustack-huawei-doc.txt",
    "npu-smi-info-310p3-300i-duo-1card-2chip-nvtop-issue421-partial.txt",
    "npu-smi-info-910a-8card-busy-with-procs-mindcluster-doc.txt",
    "npu-smi-info-910b1-8card-elided-arthurchiao-blog.txt",
    "npu-smi-info-910b4-1card-wide-format-v26-triton-ascend-faq.txt",
    "npu-smi-info-a3-ascend910-8npu-16die-busy-with-procs-vllm-ascend-issue3002.txt",
]
INFO_TEXTS = [load(n) for n in INFO_FIXTURES]
KV_TEXTS = [
    (parse_health, section("npu_info_after-health-alarm-errorcodes-910a-faultdiag-fixture-mindcluster.txt",
                           "npu-smi info -i 0 -c 0 -t health")),
    (parse_board, section("npu_info_before-hccn_tool-npu-smi-910a-faultdiag-fixture-mindcluster.txt",
                          "npu-smi info -i 0 -t board")),
    (parse_usages, load("npu-smi-info-t-usages-910b1-arthurchiao-blog.txt")),
    (parse_common, load("npu-smi-info-t-common-910b1-arthurchiao-blog.txt")),
    (parse_memory, load("npu-smi-info-t-memory-and-t-health-950-driver-repo-doc.txt")),
    (parse_info_m, load("npu-smi-info-m-310-4chip-gpustack-huawei-doc.txt")),
]
_NOISE = st.text(st.sampled_from(list("| /-+=.:0123456789ABCDEFNA\n\tOKWarning ") + ["\u2026", "\u00e9", "\x00"]),
                 max_size=12)


@st.composite
def mangled(draw, texts):
    text = draw(st.sampled_from(texts))
    lines = text.split("\n")
    how = draw(st.sampled_from(["truncate", "shuffle", "drop", "dup", "noise", "insert"]))
    if how == "truncate":
        return text[: draw(st.integers(0, len(text)))]
    if how == "shuffle":
        return "\n".join(draw(st.permutations(lines)))
    if how == "drop":
        keep = draw(st.lists(st.booleans(), min_size=len(lines), max_size=len(lines)))
        return "\n".join(line for line, k in zip(lines, keep) if k)
    if how == "dup":
        i = draw(st.integers(0, len(lines) - 1))
        return "\n".join(lines[: i + 1] + lines[i:])
    if how == "noise":
        chars = list(text)
        for _step in range(draw(st.integers(1, 8))):
            i = draw(st.integers(0, max(len(chars) - 1, 0)))
            chars[i:i + 1] = list(draw(_NOISE))
        return "".join(chars)
    i = draw(st.integers(0, len(lines)))
    return "\n".join(lines[:i] + [draw(_NOISE)] + lines[i:])


_NUM = (int, float, type(None))


def _check_info_shape(r):
    assert set(r) >= {"npu_smi_version", "driver_version", "layout", "npus", "processes", "warnings"}
    assert r["layout"] in ("classic", "wide", "a3", "310p", "310", "950")
    for npu in r["npus"]:
        assert isinstance(npu["npu_id"], int)
        assert isinstance(npu["power_w"], _NUM) and isinstance(npu["temp_c"], _NUM)
        assert npu["health"] is None or isinstance(npu["health"], str)
        for chip in npu["chips"]:
            for key in ("chip_id", "phy_id", "aicore_util_pct", "memory_used_mb", "memory_total_mb", "hbm_used_mb",
                        "hbm_total_mb", "hugepages_used", "hugepages_total"):
                assert isinstance(chip[key], _NUM), key
    for proc in r["processes"]:
        assert isinstance(proc["pid"], int) and isinstance(proc["name"], str)
        assert isinstance(proc["memory_mb"], _NUM)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mangled(INFO_TEXTS))
def test_parse_info_on_mangled_output_only_raises_its_own_error(text):
    try:
        r = parse_info(text)
    except NpuSmiParseError as exc:
        assert str(exc).strip()
        return
    _check_info_shape(r)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(KV_TEXTS))), st.data())
def test_kv_parsers_on_mangled_output_only_raise_their_own_error(idx, data):
    parser, text = KV_TEXTS[idx]
    mangled_text = data.draw(mangled([text]))
    try:
        r = parser(mangled_text)
    except NpuSmiParseError as exc:
        assert str(exc).strip()
        return
    assert isinstance(r, (dict, list))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_only_raises_parse_error(text):
    for parser in (parse_info, parse_info_m, parse_health, parse_board, parse_usages, parse_common, parse_memory):
        try:
            parser(text)
        except NpuSmiParseError as exc:
            assert str(exc).strip()


def test_non_string_input():
    with pytest.raises(NpuSmiParseError, match="must be a string"):
        parse_info(None)


def test_950_layout_from_printf_formats():
    """print_total_info_header_950 + the NPU_SMI_V2 row formats: NPU ID and Name in their own cells, no chip id."""
    rows = [
        "+" + "-" * 97 + "+",
        "| npu-smi %-40s Version: %-37s |" % ("25.5.0", "25.5.0"),
        "+--------+------------------+---------------+-----------------------------------------------------+",
        "| NPU ID | Name             | Health        | Power(W)    Temp(C)           Hugepages-Usage(page) |",
        "|        |                  | Bus-Id        | NPU Util(%) Memory-Usage(MB)  HBM-Usage(MB)         |",
        "+========+==================+===============+=====================================================+",
        "| %-7d| %-17s| %-13s | %-11.1f %-17d %-6d/ %-13d |" % (0, "Ascend950DT", "OK", 100.5, 40, 0, 0),
        "|%-8s|%-18s| " % ("", "") + "%-11s   | %-11d %-5d/ %-10d %-6d/ %-13d |" % ("NA", 20, 0, 0, 101024, 131072),
        "+========+==================+===============+=====================================================+",
        "| %-7d| %-17s| %-13s | %-11.1f %-17d %-6d/ %-13d |" % (3, "Ascend950DT", "Critical", 120.0, 45, 0, 0),
        "|%-8s|%-18s| " % ("", "") + "%04X:%02X:%02X.%-2X | %-11d %-5d/ %-10d %-6d/ %-13d |" % (
            0, 0xC1, 0, 0, 0, 0, 0, 2048, 131072),
        "+========+==================+===============+=====================================================+",
        "+---------------------------+---------------+-----------------------------------------------------+",
        "| NPU ID                    | Process id    | Process name             | Process memory(MB)       |",
        "+===========================+===============+=====================================================+",
        "| %-26d | %-13d | %-24s | %-23d |" % (0, 1001, "python", 256),
        "+===========================+===============+=====================================================+",
        "| No running processes found in NPU %-7d" % 3 + " " * 53 + "|",
    ]
    r = parse_info("\n".join(rows))
    assert r["layout"] == "950"
    assert [(n["npu_id"], n["name"], n["health"], n["power_w"], n["temp_c"]) for n in r["npus"]] == [
        (0, "Ascend950DT", "OK", 100.5, 40), (3, "Ascend950DT", "Critical", 120.0, 45)]
    c0, c3 = r["npus"][0]["chips"][0], r["npus"][1]["chips"][0]
    assert (c0["bus_id"], c0["aicore_util_pct"], c0["hbm_used_mb"], c0["hbm_total_mb"], c0["chip_id"]) == (
        None, 20, 101024, 131072, None)
    assert (c3["bus_id"], c3["hbm_used_mb"]) == ("0000:C1:00.0", 2048)
    assert r["processes"] == [
        {"npu_id": 0, "chip_id": None, "pid": 1001, "name": "python", "memory_mb": 256, "container_pid": None}]
    assert r["npus_without_processes"] == [3]
    assert summarize(r)["family"] == "950"
