"""Tests for plugins/module_utils/_npu_metrics.py: npu-smi/hccn_tool captures -> Prometheus text.

Expected values are read off the captures in tests/unit/fixtures/ by eye (vllm-ascend issue #843: 4x 910B4 with
NPU ids 4-7, HBM 29096/32768 MB; FaultDiag: 'Health Status : Alarm' with A4025021...). promtool, when installed,
checks the exposition format.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest
from ansible_collections.ascendai.vllm.plugins.module_utils import _hccn as hccn, _npu_smi as npu_smi
from ansible_collections.ascendai.vllm.plugins.module_utils._npu_metrics import collect, model_name, render
from hypothesis import given, settings
from hypothesis import strategies as st

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")


def _fixture(*parts):
    with open(os.path.join(FIXTURES, *parts)) as handle:
        return handle.read().split("\n", 1)[1]


def _table_843():
    text = _fixture("npu-smi", "npu-smi-info-910b4-4card-busy-with-procs-vllm-ascend-issue843.txt")
    return text[text.index("+---"):]


OK_HEALTH = "\tHealth Status                  : OK\n\tError Code                     : NA\n" \
            "\tError Information              : NA\n"
ALARM_HEALTH = "\tHealth Status                  : Alarm\n\tError Code                     : A4025021 8C03A000 " \
               "8C084E00\n\tError Information              : ascend_monitor adda heart beat lost error\n"


# 'npu-smi info -t health -i N' without -c on a 910B/A3 build (npu_card_info.c show_ascend_card_health): the
# health only, whatever the chip's error codes
CARD_HEALTH = "\tNPU ID                         : %d\n\tChip Count                     : 1\n\n" \
              "\tHealth                         : %s\n\tChip ID                        : 0\n\n" \
              "\tHealth                         : OK\n\tChip Name                      : MCU\n\n"
# 'npu-smi info -t board -i N -c C' (npu_info_print.c print_ascend_chip_info; the FaultDiag doc's capture with
# the chip name of vllm-ascend issue #843)
CHIP_BOARD = """\tNPU ID                         : %d
\tChip ID                        : %d
\tChip Type                      : Ascend
\tChip Name                      : 910B4
\tChip Version                   : V1
\tBoard ID                       : 0x02
\tPCB ID                         : NA
\tBOM ID                         : 1
\tVDie ID                        : 42C711D4 20B03704 4A10C8D4 14CC040A D2102003
\tNDie ID                        : 27216594 20401010 4E10C8D4 14CC040A A4102003
\tChip Position ID               : 0
\tPCIe Bus Info                  : 0000:81:00.0
\tFirmware Version               : 7.1.0.7.220
"""


class FakeNode(object):
    """Answers argv like the real tools would; records what was asked.

    ``health``: ``{npu: text}`` for ``-t health -i npu -c 0`` (the card query without -c gets CARD_HEALTH).
    """

    def __init__(self, table, health=None, links=None, net=None, mapping=None, fail=None, board=CHIP_BOARD):
        self.table, self.health, self.links, self.net = table, health or {}, links or {}, net or {}
        self.mapping = mapping
        self.fail = fail or {}
        self.board = board
        self.calls = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        key = " ".join(argv[1:])
        if key in self.fail:
            return self.fail[key]
        if argv[0] == "npu-smi":
            if argv[1:] == ["info"]:
                return 0, self.table, ""
            if argv[1:] == ["info", "-m"]:
                return (0, self.mapping, "") if self.mapping is not None else (1, "", "Usage: npu-smi")
            if argv[1:4] == ["info", "-t", "health"] and argv[6:7] == ["-c"]:
                return 0, self.health.get(int(argv[5]), OK_HEALTH), ""
            if argv[1:4] == ["info", "-t", "health"]:
                state = "Alarm" if int(argv[5]) in self.health else "OK"
                return 0, CARD_HEALTH % (int(argv[5]), state), ""
            if argv[1:4] == ["info", "-t", "board"] and argv[6:7] == ["-c"]:
                return 0, self.board % (int(argv[5]), int(argv[7])), ""
        if argv[3:] == ["-link", "-g"]:
            return 0, "link status: %s\n" % self.links.get(int(argv[2]), "UP"), ""
        if argv[3:] == ["-net_health", "-g"]:
            return 0, "net health status: %s\n" % self.net.get(int(argv[2]), "Success"), ""
        return 1, "", "unexpected " + key


def samples(text):
    """{(name, frozenset(labels)): value} from exposition text."""
    out = {}
    for line in text.split("\n"):
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line)
        assert m, line
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def value(parsed, name, **labels):
    hits = [v for (n, ls), v in parsed.items() if n == name and all((k, str(x)) in ls for k, x in labels.items())]
    assert len(hits) == 1, (name, labels, hits)
    return hits[0]


def test_busy_910b4_node_in_npu_exporter_names():
    node = FakeNode(_table_843(), health={6: ALARM_HEALTH}, links={1: "DOWN"}, net={3: "Init"})
    snap = collect(node, npu_smi, hccn, npu_smi_bin="npu-smi", hccn_tool_bin="hccn_tool")
    assert snap["up"] is True and snap["cards"] == 4
    # no '-m' mapping answered: one chip per NPU, logic ids counted from 0 in table order
    assert [c["id"] for c in snap["chips"]] == [0, 1, 2, 3]
    text = render(snap, now=1700000000)
    parsed = samples(text)
    assert value(parsed, "machine_npu_nums") == 4
    assert value(parsed, "npu_chip_info_hbm_used_memory", id=0, pcie_bus_info="0000:81:00.0") == 29096
    assert value(parsed, "npu_chip_info_hbm_total_memory", id=3, model_name="910B4-Ascend-V1",
                 vdie_id="42C711D4-20B03704-4A10C8D4-14CC040A-D2102003") == 32768
    assert value(parsed, "npu_chip_info_hbm_utilization", id=0) == pytest.approx(88.79, abs=0.01)
    assert value(parsed, "npu_chip_info_power", id=1) == 87.7
    assert value(parsed, "npu_chip_info_temperature", id=2) == 38
    assert value(parsed, "npu_chip_info_health_status", id=0) == 1
    assert value(parsed, "npu_chip_info_health_status", id=2) == 0  # NPU 6: Alarm in '-t health'
    assert value(parsed, "npu_chip_info_health_state", id=2, state="Alarm") == 1
    # npu-exporter: the first code, then _1, _2 ...; no series for a chip without error codes
    assert value(parsed, "npu_chip_info_error_code", id=2) == 0xA4025021
    assert value(parsed, "npu_chip_info_error_code_1", id=2) == 0x8C03A000
    assert value(parsed, "npu_chip_info_error_code_2", id=2) == 0x8C084E00
    assert [dict(ls)["id"] for (n, ls) in parsed if n.startswith("npu_chip_info_error_code")] == ["2", "2", "2"]
    assert value(parsed, "npu_chip_info_link_status", id=1) == 0
    assert value(parsed, "npu_chip_info_link_status", id=0) == 1
    assert value(parsed, "npu_chip_info_network_status", id=3) == 1  # Init counts as healthy (NetworkInit)
    assert value(parsed, "ascendai_npu_net_health_info", id=3, status="Init") == 1
    assert value(parsed, "ascendai_npu_metrics_up") == 1
    assert value(parsed, "ascendai_npu_metrics_errors") == 1  # the missing '-m'
    assert value(parsed, "ascendai_npu_metrics_timestamp_seconds") == 1700000000
    # health detail asked per chip (-c) with the NPU ids of the table, NICs with the logic ids
    assert ["npu-smi", "info", "-t", "health", "-i", "6", "-c", "0"] in node.calls
    assert ["npu-smi", "info", "-t", "board", "-i", "6", "-c", "0"] in node.calls
    assert ["hccn_tool", "-i", "3", "-link", "-g"] in node.calls


def test_logic_ids_from_mapping():
    mapping = ("\tNPU ID                         Chip ID                        Chip Logic ID                  "
               "Chip Name\n")
    for npu, logic in ((4, 0), (5, 1), (6, 2), (7, 3)):
        mapping += "\t%-31d%-31d%-31dAscend 910B4\n\t%-31d%-31d%-31sMcu\n" % (npu, 0, logic, npu, 1, "-")
    snap = collect(FakeNode(_table_843(), mapping=mapping), npu_smi, hccn, npu_smi_bin="npu-smi",
                   hccn_tool_bin="hccn_tool")
    assert [(c["npu_id"], c["id"]) for c in snap["chips"]] == [(4, 0), (5, 1), (6, 2), (7, 3)]
    assert snap["errors"] == []


def test_dcmi_failure_reports_down_and_no_chip_series():
    node = FakeNode("", fail={"info": (1, "dcmi module initialize failed. ret is -8005\n", "")})
    snap = collect(node, npu_smi, hccn, npu_smi_bin="npu-smi", hccn_tool_bin="hccn_tool")
    assert snap["up"] is False and "ret -8005" in snap["error"] and "reboot" in snap["error"]
    parsed = samples(render(snap))
    assert value(parsed, "ascendai_npu_metrics_up") == 0
    assert not [k for k in parsed if k[0].startswith(("npu_chip_info", "machine_"))]


def test_hccn_failure_gives_minus_one():
    node = FakeNode(_table_843(), fail={"-i 0 -link -g": (1, "dcmi module initialize failed. ret is -8005", "")})
    snap = collect(node, npu_smi, hccn, npu_smi_bin="npu-smi", hccn_tool_bin="hccn_tool")
    parsed = samples(render(snap))
    assert value(parsed, "npu_chip_info_link_status", id=0) == -1
    assert any("-link -g failed with rc=1" in e for e in snap["errors"])


def test_nics_off_and_missing_tool():
    snap = collect(FakeNode(_table_843()), npu_smi, hccn, npu_smi_bin="npu-smi", nics=False)
    assert not [k for k in samples(render(snap)) if k[0] == "npu_chip_info_link_status"]

    def missing(argv):
        raise FileNotFoundError(2, "No such file or directory", argv[0])

    snap = collect(missing, npu_smi, hccn)
    assert snap["up"] is False and "npu-smi was not found" in snap["error"]


def test_a3_two_dies_per_npu():
    text = _fixture("npu-smi", "npu-smi-info-a3-ascend910-8npu-16die-busy-with-procs-vllm-ascend-issue3002.txt")
    snap = collect(FakeNode(text[text.index("+---"):]), npu_smi, hccn, npu_smi_bin="npu-smi",
                   hccn_tool_bin="hccn_tool")
    assert snap["cards"] == 8 and len(snap["chips"]) == 16
    assert sorted(c["id"] for c in snap["chips"]) == list(range(16))
    parsed = samples(render(snap))
    assert value(parsed, "machine_npu_nums") == 16 and value(parsed, "machine_card_nums") == 8


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) not installed")
def test_promtool_accepts_the_exposition(tmp_path):
    snap = collect(FakeNode(_table_843(), health={6: ALARM_HEALTH}), npu_smi, hccn, npu_smi_bin="npu-smi",
                   hccn_tool_bin="hccn_tool")
    proc = subprocess.run(["promtool", "check", "metrics"], input=render(snap, now=1.5), universal_newlines=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    assert proc.returncode == 0, proc.stdout


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=30))
def test_label_values_are_escaped(name):
    snap = {"up": True, "error": None, "cards": 1, "errors": [], "chips": [{
        "id": 0, "npu_id": 0, "chip_id": 0, "model_name": name, "pcie_bus_info": "", "health_state": "OK",
        "health": 1, "error_codes": [], "aicore_util_pct": None, "temp_c": None, "power_w": None,
        "hbm_total_mb": None, "hbm_used_mb": None, "hbm_util_pct": None, "link": None, "link_state": None,
        "network": None, "net_health": None}]}
    parsed = samples(render(snap))
    label = next(dict(ls)["model_name"] for (n, ls) in parsed if n == "npu_chip_info_health_status")
    unescaped = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), label)
    assert unescaped == name


def test_phy_ids_from_the_a3_mapping_and_cached_identity():
    # npu-exporter labels id with the physical id (collectCardLabelValue: chip.PhyId); an A3 '-m' prints it
    # (npu_info_print.c print_mapping_info_910_93: NPU ID, Chip ID, Chip Logic ID, Chip Phy-ID, Chip Name)
    text = _fixture("npu-smi", "npu-smi-info-a3-ascend910-8npu-16die-busy-with-procs-vllm-ascend-issue3002.txt")
    mapping = "\t%-30s %-30s %-30s %-30s %-30s\n" % ("NPU ID", "Chip ID", "Chip Logic ID", "Chip Phy-ID", "Chip Name")
    for npu in range(8):
        for chip in range(2):
            # logic ids counted as the driver does; physical ids deliberately different here
            logic = npu * 2 + chip
            mapping += "\t%-30d %-30d %-30d %-30d %s\n" % (npu, chip, logic, 15 - logic, "Ascend910")
        mapping += "\t%-30d %-30d %-30s %-30s %-30s\n" % (npu, 2, "-", "-", "Mcu")
    a3_board = CHIP_BOARD.replace("\tChip Type                      : Ascend\n", "").replace("910B4", "Ascend910")
    node = FakeNode(text[text.index("+---"):], mapping=mapping, board=a3_board)
    snap = collect(node, npu_smi, hccn, npu_smi_bin="npu-smi", hccn_tool_bin="hccn_tool")
    assert [(c["npu_id"], c["chip_id"], c["logic_id"], c["id"]) for c in snap["chips"]][:3] == [
        (0, 0, 0, 15), (0, 1, 1, 14), (1, 0, 2, 13)]
    assert {c["model_name"] for c in snap["chips"]} == {"Ascend910-Ascend-V1"}
    assert ["hccn_tool", "-i", "1", "-link", "-g"] in node.calls  # hccn_tool takes the logic id
    boards = [c for c in node.calls if c[1:4] == ["info", "-t", "board"]]
    assert len(boards) == 16 and len(snap["identity"]) == 16
    # a second run with the identity of the first asks no board query
    again = FakeNode(text[text.index("+---"):], mapping=mapping, board=a3_board)
    collect(again, npu_smi, hccn, npu_smi_bin="npu-smi", hccn_tool_bin="hccn_tool", identity=snap["identity"])
    assert not [c for c in again.calls if c[1:4] == ["info", "-t", "board"]]


def test_model_name_from_the_chip_board():
    board = npu_smi.parse_board(CHIP_BOARD % (0, 0))
    assert model_name(board) == "910B4-Ascend-V1"
    assert model_name({}) is None


def test_board_query_failure_keeps_the_table_name():
    node = FakeNode(_table_843(), fail={"info -t board -i 4 -c 0": (1, "Invalid chip id.\n", "")})
    snap = collect(node, npu_smi, hccn, npu_smi_bin="npu-smi", hccn_tool_bin="hccn_tool")
    assert [c["model_name"] for c in snap["chips"]] == ["910B4", "910B4-Ascend-V1", "910B4-Ascend-V1",
                                                        "910B4-Ascend-V1"]
    assert any("-t board -i 4 -c 0 failed" in e for e in snap["errors"])
