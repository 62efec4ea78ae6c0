"""The simulated npu-smi prints the real formats and parses back (with the collection's parser) to its state."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from ansible_collections.ascendai.vllm.plugins.module_utils import _npu_smi as parser
from atlas_sim import npu_smi, state as st

# The real captures (tests/unit/fixtures/npu-smi; each file's first line names its public source).
FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "npu-smi")


def _fixture_table(name):
    """The npu-smi table of a capture: from the first border line to the last table line."""
    with open(os.path.join(FIXTURES, name)) as handle:
        lines = handle.read().splitlines()[1:]
    start = next(i for i, line in enumerate(lines) if line.startswith("+---"))
    end = max(i for i, line in enumerate(lines) if line.startswith("+") or line.startswith("| "))
    return lines[start:end + 1]


def _state_from_parsed(info, layout):
    """Build a simulator state holding exactly what a capture shows."""
    npus = info["npus"]
    state = st.default_state(npus=len(npus), chip_name=npus[0]["name"], layout=layout)
    state["running"]["driver"] = info["driver_version"]
    for card, parsed in zip(state["npus"], npus):
        card["id"] = parsed["npu_id"]
        for chip, pchip in zip(card["chips"], parsed["chips"]):
            chip.update(name=pchip["name"], health=pchip["health"], power=pchip["power_w"], temp=pchip["temp_c"],
                        bus_id=pchip["bus_id"], aicore_usage=pchip["aicore_util_pct"],
                        ddr_used=pchip["memory_used_mb"], ddr_total=pchip["memory_total_mb"],
                        hbm_used=pchip["hbm_used_mb"], hbm_total=pchip["hbm_total_mb"],
                        hugepages_used=pchip["hugepages_used"], hugepages_total=pchip["hugepages_total"],
                        chip_id=pchip["chip_id"], phy_id=pchip["phy_id"] if pchip["phy_id"] is not None else 0,
                        processes=[])
    by_id = {card["id"]: card for card in state["npus"]}
    for proc in info["processes"]:
        chip = by_id[proc["npu_id"]]["chips"][proc["chip_id"]]
        chip["processes"].append({"pid": proc["pid"], "name": proc["name"] or "", "memory": proc["memory_mb"]})
    return state


@pytest.mark.parametrize("name, layout", [
    ("npu-smi-info-910b2-8card-idle-vllm-ascend-issue3906.txt", "classic"),
    ("npu-smi-info-910b4-4card-busy-with-procs-vllm-ascend-issue843.txt", "classic"),
    ("npu-smi-info-a3-ascend910-8npu-16die-busy-with-procs-vllm-ascend-issue3002.txt", "a3"),
    ("npu-smi-info-910b4-1card-wide-format-v26-triton-ascend-faq.txt", "wide"),
])
def test_rerenders_real_capture_byte_for_byte(name, layout):
    expected = _fixture_table(name)
    info = parser.parse_info("\n".join(expected))
    assert info["layout"] == layout
    rendered = npu_smi.render_info(_state_from_parsed(info, layout)).splitlines()
    # the wide capture ends right after the last process row (no closing border) in the original
    assert rendered[:len(expected)] == expected
    assert len(rendered) - len(expected) == (1 if layout == "wide" else 0)


_health = hs.sampled_from(["OK", "Warning", "Alarm", "Critical", "UNKNOWN"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(npus=hs.sampled_from([1, 4, 8]), layout=hs.sampled_from(list(st.LAYOUTS)), data=hs.data())
def test_info_parses_back_to_state(npus, layout, data):
    state = st.default_state(npus=npus, layout=layout)
    state["running"]["driver"] = data.draw(hs.sampled_from(["24.1.rc3", "25.2.0", "26.0.rc1"]))
    for card in state["npus"]:
        for chip in card["chips"]:
            chip["health"] = data.draw(_health)
            chip["hbm_used"] = data.draw(hs.integers(0, chip["hbm_total"]))
            chip["aicore_usage"] = data.draw(hs.integers(0, 100))
            chip["temp"] = data.draw(hs.integers(20, 99))
            if chip["power"] is not None:
                chip["power"] = data.draw(hs.integers(300, 4000)) / 10.0
            chip["processes"] = [{"pid": data.draw(hs.integers(1, 4194304)),
                                  "name": data.draw(hs.sampled_from(["", "python", "VLLMWorker"])),
                                  "memory": data.draw(hs.integers(1, 60000))}
                                 for _unused in range(data.draw(hs.integers(0, 2)))]
    info = parser.parse_info(npu_smi.render_info(state))
    assert info["layout"] == layout
    assert info["driver_version"] == state["running"]["driver"]
    assert [n["npu_id"] for n in info["npus"]] == [c["id"] for c in state["npus"]]
    for card, pcard in zip(state["npus"], info["npus"]):
        assert len(pcard["chips"]) == len(card["chips"])
        for chip, pchip in zip(card["chips"], pcard["chips"]):
            assert (pchip["health"], pchip["hbm_used_mb"], pchip["hbm_total_mb"], pchip["bus_id"]) == (
                chip["health"], chip["hbm_used"], chip["hbm_total"], chip["bus_id"])
            assert (pchip["aicore_util_pct"], pchip["temp_c"], pchip["power_w"]) == (
                chip["aicore_usage"], chip["temp"], chip["power"])
    expected = [(c["id"], ch["chip_id"], p["pid"], p["memory"]) for c in state["npus"] for ch in c["chips"]
                for p in ch["processes"]]
    assert [(p["npu_id"], p["chip_id"], p["pid"], p["memory_mb"]) for p in info["processes"]] == expected


@pytest.mark.parametrize("layout", st.LAYOUTS)
def test_mapping_parses_back(layout):
    state = st.default_state(npus=8, layout=layout)
    rows = parser.parse_info_m(npu_smi.run(["info", "-m"], state).out)
    chips = [r for r in rows if r["chip_name"] != "Mcu"]
    mcus = [r for r in rows if r["chip_name"] == "Mcu"]
    dies = 2 if layout == "a3" else 1
    assert len(chips) == 8 * dies and len(mcus) == 8
    assert [r["chip_logic_id"] for r in chips] == list(range(8 * dies))
    assert all(r["chip_logic_id"] is None for r in mcus)
    if layout != "a3":
        assert chips[0]["chip_name"] == "Ascend 910B3"


def test_t_outputs_parse_back():
    state = st.default_state(npus=4)
    state["running"].update(driver="25.2.0", firmware="7.7.0.1.231")
    chip = state["npus"][2]["chips"][0]
    chip.update(hbm_used=32768, aicore_usage=57, temp=61, power=301.5, aicore_count=20)
    board = parser.parse_board(npu_smi.run(["info", "-t", "board", "-i", "2"], state).out)
    assert (board["npu_id"], board["software_version"], board["firmware_version"]) == (2, "25.2.0", "7.7.0.1.231")
    assert (board["pcie_bus_info"], board["pci_device_id"], board["chip_count"]) == ("0000:C2:00.0", "0xD802", 1)
    chip_board = parser.parse_board(npu_smi.run(["info", "-t", "board", "-i", "2", "-c", "0"], state).out)
    assert chip_board["chip_name"] == "910B3" and chip_board["chip_id"] == 0
    usages = parser.parse_usages(npu_smi.run(["info", "-t", "usages", "-i", "2"], state).out)
    assert (usages["hbm_capacity_mb"], usages["hbm_usage_rate_pct"], usages["aicore_usage_rate_pct"]) == (
        65536, 50, 57)
    memory = parser.parse_memory(npu_smi.run(["info", "-t", "memory", "-i", "2"], state).out)
    assert (memory["hbm_capacity_mb"], memory["ddr_capacity_mb"]) == (65536, 0)
    common = parser.parse_common(npu_smi.run(["info", "-t", "common", "-i", "2", "-c", "0"], state).out)
    assert (common["aicore_count"], common["temperature_c"], common["npu_real_time_power_w"]) == (20, 61, 301.5)
    health = parser.parse_health(npu_smi.run(["info", "-t", "health", "-i", "2"], state).out)
    assert (health["health"], health["error_codes"]) == ("OK", [])


def test_board_compatibility_nok_when_firmware_outside_driver_range(node, tmp_path):
    os.makedirs(node.path("/usr/local/Ascend/driver"))
    with open(node.path("/usr/local/Ascend/driver/version.info"), "w") as handle:
        handle.write("Version=25.2.0\ncompatible_version_fw=[7.0.0,7.2.99]\n")
    state = st.default_state()
    state["running"].update(driver="25.2.0", firmware="7.7.0.1.231")
    assert parser.parse_board(npu_smi.run(["info", "-t", "board", "-i", "0"], state).out)["compatibility"] == "NOK"
    state["running"]["firmware"] = "7.1.0.11.220"
    assert parser.parse_board(npu_smi.run(["info", "-t", "board", "-i", "0"], state).out)["compatibility"] == "OK"


def test_help_says_simulated_and_normal_output_does_not():
    state = st.default_state()
    state["running"]["driver"] = "25.2.0"
    assert "SIMULATED" in npu_smi.run(["info", "-h"], state).out
    assert "SIMULATED" in npu_smi.run(["-h"], state).out
    for argv in (["info"], ["info", "-m"], ["info", "-t", "board", "-i", "0"]):
        assert "simulat" not in npu_smi.run(argv, state).out.lower()


def test_invalid_card_id_as_real_tool():
    state = st.default_state(npus=4)
    result = npu_smi.run(["info", "-t", "board", "-i", "7"], state)
    assert result.rc != 0
    assert result.out.splitlines()[:2] == ["Invalid card id.", "Error parameter of -i"]
    assert parser.classify_error(result.out, "", result.rc)[0] == "invalid_card"


def _c(key, value):
    """One line as npu-smi's C source prints it: printf("\\t%-30s : %s\\n", key, value)."""
    return "\t%-30s : %s" % (key, value)


def _alarm_state(layout="classic"):
    state = st.default_state(npus=4, layout=layout)
    state["running"]["driver"] = "25.2.0"
    chip = state["npus"][2]["chips"][-1]
    chip.update(health="Alarm", error_codes=["A4025021", "8C03A000"],
                error_info=["ascend_monitor adda heart beat lost error",
                            "node type=process-manager, sensor type=General Software, event state=The process start "
                            "failed or exit abnormally"])
    return state


@pytest.mark.parametrize("layout", st.LAYOUTS)
def test_health_without_chip_prints_the_health_only(layout):
    # npu_card_info.c show_ascend_card_health -> show_ascend_card_info(show_ascend_chip_health_state): the card
    # header, per chip 'Health' then 'Chip ID', the MCU's 'Health' and 'Chip Name : MCU'; no error code
    result = npu_smi.run(["info", "-t", "health", "-i", "2"], _alarm_state(layout))
    chips = [[_c("Health", "OK"), _c("Chip ID", 0), ""]] if layout == "a3" else []
    chips.append([_c("Health", "Alarm"), _c("Chip ID", 1 if layout == "a3" else 0), ""])
    assert result.rc == 0
    assert result.out.split("\n") == ([_c("NPU ID", 2), _c("Chip Count", len(chips)), ""]
                                      + [line for chip in chips for line in chip]
                                      + [_c("Health", "OK"), _c("Chip Name", "MCU"), "", ""])
    assert "Error" not in result.out
    health = parser.parse_health(result.out)
    assert (health["health"], health["error_codes"], health["error_codes_shown"]) == ("Alarm", [], False)


@pytest.mark.parametrize("layout", st.LAYOUTS)
def test_health_with_chip_prints_codes_and_texts(layout):
    # npu_info_print.c print_diagnosis_info: 'Health Status', ' %04X' per code, one text per code, the next
    # ones after a blank line under a blank key
    state = _alarm_state(layout)
    chip = 1 if layout == "a3" else 0
    result = npu_smi.run(["info", "-t", "health", "-i", "2", "-c", str(chip)], state)
    assert result.rc == 0
    assert result.out.split("\n") == [
        _c("Health Status", "Alarm"), _c("Error Code", "A4025021 8C03A000"),
        _c("Error Information", "ascend_monitor adda heart beat lost error"), "",
        _c(" ", "node type=process-manager, sensor type=General Software, event state=The process start failed or "
                "exit abnormally"), ""]
    health = parser.parse_health(result.out)
    assert (health["health"], health["error_codes"], health["error_codes_shown"]) == (
        "Alarm", ["A4025021", "8C03A000"], True)
    ok = npu_smi.run(["info", "-t", "health", "-i", "1", "-c", "0"], state)
    assert ok.out.split("\n") == [_c("Health Status", "OK"), _c("Error Code", "NA"), _c("Error Information", "NA"), ""]


def test_health_with_chip_unhealthy_without_code_prints_ok():
    # npu_chip_info.c handle_health_state: Warning/Alarm/Critical with no error code is printed as OK with -c;
    # the table and the card query print the state itself
    state = st.default_state(npus=1)
    state["npus"][0]["chips"][0]["health"] = "Warning"
    assert npu_smi.run(["info", "-t", "health", "-i", "0", "-c", "0"], state).out.startswith(
        _c("Health Status", "OK") + "\n")
    assert _c("Health", "Warning") in npu_smi.run(["info", "-t", "health", "-i", "0"], state).out.split("\n")


@pytest.mark.parametrize("fault, text, rc", [
    ({"pending_reboot": True}, "dcmi module initialize failed. ret is -8005", 187),
    ({"faults": {"device_held": -8005}}, "dcmi module initialize failed. ret is -8005", 187),
    ({"faults": {"device_held": -8020}}, "dcmi model initialized failed, because the device is used. ret is -8020",
     172),
])
def test_dcmi_init_failures_as_npu_smi_c(fault, text, rc):
    # npu_smi.c handle_dcmi_initialization prints one of two texts; main() exits with the DCMI code (& 0xff)
    state = st.default_state()
    state.update(fault)
    for argv in (["info"], ["info", "-t", "health", "-i", "0", "-c", "0"], ["info", "-m"]):
        result = npu_smi.run(argv, state)
        assert (result.out, result.rc) == (text + "\n", rc)
    assert parser.classify_error(text + "\n", "", rc)[0] == ("device_in_use" if rc == 172 else "dcmi_init")


def test_a3_chip_board_has_npu_name_and_no_chip_type():
    # npu_info_print.c print_ascend_chip_info: 'NPU Name' on 910_93, 'Chip Type' on every other chip but 950
    a3 = npu_smi.run(["info", "-t", "board", "-i", "1", "-c", "1"], st.default_state(npus=2, layout="a3")).out
    keys = [line.split(":")[0].strip() for line in a3.splitlines()]
    assert keys[:4] == ["NPU ID", "NPU Name", "Chip ID", "Chip Name"] and "Chip Type" not in keys
    b = npu_smi.run(["info", "-t", "board", "-i", "1", "-c", "0"], st.default_state(npus=2)).out
    assert [line.split(":")[0].strip() for line in b.splitlines()][:3] == ["NPU ID", "Chip ID", "Chip Type"]


def test_parameter_errors_exit_as_npu_smi_c():
    # npu_smi.h NPU_ERR_CODE_INVALID_PARAMETER (-9001) / NPU_ERR_CODE_INNER_ERR (-9005), exit(ret) -> & 0xff
    state = st.default_state(npus=4)
    assert npu_smi.run(["info", "-t", "board", "-i", "9"], state).rc == 215
    assert npu_smi.run(["info", "-t", "health", "-i", "0", "-c", "1"], state).out.startswith("Invalid chip id.\n")
    missing = npu_smi.run(["info", "-t", "health"], state)
    assert (missing.out.split("\n")[:3], missing.rc) == (["", "This command must input card id.", ""], 215)
    other = npu_smi.run(["bogus"], state)
    assert (other.out.splitlines()[0], other.rc) == ("Command or option is not found.", 211)


def test_card_list_ends_with_a_blank_line():
    # npu_info_print.c print_all_info: "Total Count" then per card "NPU ID" and "Chip Count", each count + "\n\n"
    out = npu_smi.run(["info", "-l"], st.default_state(npus=2, layout="a3")).out
    assert out.split("\n") == ["\t%-30s : %d" % ("Total Count", 2), "", "\t%-30s : %d" % ("NPU ID", 0),
                               "\t%-30s : %d" % ("Chip Count", 2), "", "\t%-30s : %d" % ("NPU ID", 1),
                               "\t%-30s : %d" % ("Chip Count", 2), "", ""]


def test_no_arguments_prints_help_and_exits_215():
    # npu_smi.c validate_arguments: argc < LEAST_PARAMETER_NUM -> npu_help_main, NPU_ERR_CODE_INVALID_PARAMETER
    # (-9001), exit(ret) -> 215
    result = npu_smi.run([], st.default_state(npus=4))
    assert result.rc == 215
    assert "info" in result.out
