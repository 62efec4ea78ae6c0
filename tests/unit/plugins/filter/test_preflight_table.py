"""The preflight_table filter: the header goes first and its columns line up with the lines preflight_report
makes."""

from __future__ import annotations

import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.preflight_report import FilterModule as ReportFilters
from ansible_collections.ascendai.vllm.plugins.filter.preflight_table import FilterModule

preflight_table = FilterModule().filters()["preflight_table"]
preflight_report = ReportFilters().filters()["preflight_report"]

SETTINGS = {"architectures": ["aarch64", "x86_64"], "min_memory_mb": 32768, "model_dir": "/opt/ascendai/models",
            "model_free_gb": 150}
# `df -P -B1 /opt | tail -n 1`: filesystem, 1-byte blocks, used, available, capacity, mount point
DF = "/dev/nvme0n1p2 3936818073600 1010853629952 2725906391040  28% /"
HOST = {"name": "node1", "architecture": "aarch64", "memtotal_mb": 1546272, "df": DF,
        "npu": {"changed": False, "count": 8, "chip_name": "910B3", "healthy": True, "unhealthy": []},
        "npu_smi": True, "expected_npus": 8,
        "driver_plan": {"driver": {"installed": None, "wanted": "25.2.0", "action": "full"},
                        "firmware": {"installed": None, "wanted": "7.7.0.6.236", "action": "full"}},
        "cann_plan": {kind: {"installed": None, "wanted": "8.3.RC2", "action": "full"}
                      for kind in ("toolkit", "kernels", "nnal")}}


def test_header_first_then_the_lines_as_given():
    rows = [preflight_report(dict(HOST, name=name), **SETTINGS)["row"] for name in ("node1", "node2")]
    lines = preflight_table(rows)
    assert len(lines) == 3 and lines[1:] == rows
    header = lines[0]
    assert header.split("  ")[0].strip() == "host"
    for label in ("arch", "mem GiB", "free GB", "NPUs", "driver / firmware", "CANN toolkit / kernels / nnal",
                  "problems"):
        assert label in header


def test_columns_line_up_with_a_report_line():
    header, row = preflight_table([preflight_report(HOST, **SETTINGS)["row"]])
    # text columns start where their label starts
    for label, value in (("host", "node1"), ("arch", "aarch64"), ("NPUs", "8 910B3 healthy"),
                         ("driver / firmware", "full ->25.2.0 / full ->7.7.0.6.236"),
                         ("CANN toolkit / kernels / nnal", "full/full/full ->8.3.RC2"), ("problems", "none")):
        assert row[header.index(label):].startswith(value), (label, value)
    # numbers are right-aligned: they end where their label ends (1546272 MB = 1510.0 GiB; 2725906391040 B = 2725.9 GB)
    for label, value in (("mem GiB", f"{1546272 / 1024:.1f}"), ("free GB", f"{2725906391040 / 1e9:.1f}")):
        end = header.index(label) + len(label)
        assert row[:end].endswith(value), (label, value)


def test_any_iterable_of_lines():
    assert preflight_table(("a", "b"))[1:] == ["a", "b"]
    assert preflight_table(line for line in ["g"])[1:] == ["g"]
    assert len(preflight_table([])) == 1


@pytest.mark.parametrize("rows", ["node1 row", {"node1": "row"}, None, 5, b"node1 row"])
def test_input_that_is_not_a_list_is_named(rows):
    with pytest.raises(AnsibleFilterError, match=rf"^preflight_table: the input must be the list of host lines, "
                                                 rf"got {re.escape(repr(rows))}$"):
        preflight_table(rows)


@pytest.mark.parametrize("rows,item", [
    ([1, 2], 1),
    (["node1 row", None], None),
    ([["node1 row"]], ["node1 row"]),
    ([{"problems": [], "row": "node1 row"}], {"problems": [], "row": "node1 row"}),
])
def test_an_item_that_is_not_a_line_is_named(rows, item):
    # DOCUMENTATION: the lines preflight_report returns as row (strings); nothing else is turned into text
    with pytest.raises(AnsibleFilterError, match=rf"^preflight_table: line {re.escape(repr(item))} is not a host "
                                                 r"line \(a string\); pass the row of each host's preflight_report, "
                                                 r"e\.g\. map\('extract', hostvars, \['_preflight_report', 'row'\]\)$"):
        preflight_table(rows)
