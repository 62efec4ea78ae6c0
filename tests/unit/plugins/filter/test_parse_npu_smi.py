"""Tests for the ascendai.vllm.parse_npu_smi filter."""

from __future__ import annotations

import os

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.parse_npu_smi import FilterModule, parse_npu_smi

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "npu-smi")


def load(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        lines = f.read().split("\n")
    while lines and lines[0].startswith("# "):
        lines.pop(0)
    return "\n".join(lines)


def test_registered_under_its_name():
    assert FilterModule().filters() == {"parse_npu_smi": parse_npu_smi}


def test_parses_910b2_capture():
    r = parse_npu_smi(load("npu-smi-info-910b2-8card-idle-vllm-ascend-issue3906.txt"))
    assert r["layout"] == "classic" and r["npu_smi_version"] == "25.2.0"
    assert len(r["npus"]) == 8 and r["npus"][5]["power_w"] == 102.2
    assert r["npus"][0]["chips"][0]["hbm_used_mb"] == 3418
    assert r["processes"] == [] and r["warnings"] == []


def test_parses_a3_processes():
    r = parse_npu_smi(load("npu-smi-info-a3-ascend910-8npu-16die-busy-with-procs-vllm-ascend-issue3002.txt"))
    assert r["layout"] == "a3" and len(r["processes"]) == 23
    assert r["processes"][9] == {"npu_id": 1, "chip_id": 0, "pid": 929673, "name": "", "memory_mb": 58540,
                                 "container_pid": None}


def test_shape_keys():
    r = parse_npu_smi(load("npu-smi-info-310p3-300i-duo-1card-2chip-nvtop-issue421-partial.txt"))
    assert set(r) >= {"npu_smi_version", "driver_version", "layout", "npus", "processes", "warnings"}
    assert set(r["npus"][0]) >= {"npu_id", "name", "health", "power_w", "temp_c", "chips"}
    assert set(r["npus"][0]["chips"][0]) >= {
        "chip_id", "phy_id", "bus_id", "aicore_util_pct", "memory_used_mb", "memory_total_mb", "hbm_used_mb",
        "hbm_total_mb", "hugepages_used", "hugepages_total"}
    assert r["npus"][0]["chips"][0]["hbm_total_mb"] is None


def test_wrong_subcommand_output_names_input_and_fix():
    with pytest.raises(AnsibleFilterError) as exc:
        parse_npu_smi(load("npu-smi-info-t-usages-910b1-arthurchiao-blog.txt"))
    msg = str(exc.value)
    assert "parse_npu_smi" in msg and "npu-smi info -t usages" in msg and "stdout of 'npu-smi info'" in msg


def test_dcmi_error_text_is_explained():
    with pytest.raises(AnsibleFilterError, match="reboot"):
        parse_npu_smi("dcmi module initialize failed. ret is -8005")


@pytest.mark.parametrize("value", [None, 42, ["| npu-smi 23.0.6 Version: 23.0.6 |"]])
def test_non_string_input(value):
    with pytest.raises(AnsibleFilterError, match="stdout"):
        parse_npu_smi(value)
