"""Broken captures of 'npu-smi info': a cut row, a lost row and a repeated row of a real capture are
refused or noted, never parsed into other plausible totals."""

from __future__ import annotations

import os

import pytest
from ansible_collections.ascendai.vllm.plugins.module_utils._npu_smi import NpuSmiParseError, parse_info, summarize

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "npu-smi")


def load(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return "\n".join(x for x in handle.read().split("\n") if not x.startswith("# "))


# https://github.com/vllm-project/vllm-ascend/issues/3906: 8 x 910B2, 65536 MB HBM each, process table names NPU 0-7
B2 = load("npu-smi-info-910b2-8card-idle-vllm-ascend-issue3906.txt")
A3 = load("npu-smi-info-a3-ascend910-8npu-16die-busy-with-procs-vllm-ascend-issue3002.txt")
LINES = B2.split("\n")
ROW1_NPU3 = next(i for i, x in enumerate(LINES) if x.startswith("| 3     910B2"))


def test_the_real_capture_is_consistent():
    facts = summarize(parse_info(B2))
    assert (facts["count"], facts["chip_count"], facts["hbm_total_mb"]) == (8, 8, 8 * 65536)
    assert facts["notes"] == [] and facts["inconsistent"] == []


def test_row_cut_before_its_closing_bar_is_refused():
    # the capture ends in the middle of NPU 7's HBM-Usage cell: '3388 / 655' was read as a total of 655 MB
    last = max(i for i, x in enumerate(LINES) if "0000:42:00.0" in x)
    cut = "\n".join(LINES[:last] + [LINES[last][:LINES[last].index("65536") + 3]])
    with pytest.raises(NpuSmiParseError, match=r"line \d+: table row without its closing '\|', the output was cut"):
        parse_info(cut)


def test_row_cut_in_the_middle_of_the_table_is_refused():
    lines = list(LINES)
    lines[ROW1_NPU3 + 1] = lines[ROW1_NPU3 + 1].rstrip("| ")
    with pytest.raises(NpuSmiParseError, match="cut mid-row"):
        parse_info("\n".join(lines))


def test_lost_npu_block_disagrees_with_the_process_table():
    # NPU 3's two rows and border gone: 7 NPUs were reported silently
    lines = LINES[:ROW1_NPU3] + LINES[ROW1_NPU3 + 3:]
    facts = summarize(parse_info("\n".join(lines)))
    assert facts["count"] == 7
    assert any("process table names NPU 3" in x for x in facts["inconsistent"])
    assert facts["inconsistent"][0] in facts["notes"]


def test_lost_first_row_is_inconsistent_not_a_silent_drop():
    lines = LINES[:ROW1_NPU3] + LINES[ROW1_NPU3 + 1:]
    facts = summarize(parse_info("\n".join(lines)))
    assert any("second row (Chip/Bus-Id) without its first row" in x for x in facts["inconsistent"])
    assert facts["notes"], "the parser's note reaches summarize"


def test_lost_second_row_is_inconsistent():
    lines = LINES[:ROW1_NPU3 + 1] + LINES[ROW1_NPU3 + 2:]
    facts = summarize(parse_info("\n".join(lines)))
    assert any("NPU 3 has no second row" in x for x in facts["inconsistent"])


@pytest.mark.parametrize("text,start", [(B2, "| 3     910B2"), (A3, "| 1     Ascend910")])
def test_repeated_rows_do_not_double_the_chips(text, start):
    lines = text.split("\n")
    at = next(i for i, x in enumerate(lines) if x.startswith(start))
    doubled = lines[:at + 2] + lines[at:at + 2] + lines[at + 2:]
    with pytest.raises(NpuSmiParseError, match=r"chip \d is listed a second time \(first at line \d+\)"):
        parse_info("\n".join(doubled))


def test_repeated_first_row_alone_is_inconsistent():
    doubled = LINES[:ROW1_NPU3 + 1] + [LINES[ROW1_NPU3]] + LINES[ROW1_NPU3 + 1:]
    facts = summarize(parse_info("\n".join(doubled)))
    assert facts["inconsistent"]


def test_capture_cut_between_rows_is_noted():
    # cut after NPU 3: the device facts look complete, so the missing process table says so
    end = ROW1_NPU3 + 3
    facts = summarize(parse_info("\n".join(LINES[:end])))
    assert facts["count"] == 4
    assert any("no process table" in x and "after NPU 3" in x for x in facts["notes"])


def test_capture_cut_after_the_header_is_noted():
    # found by the Hypothesis suite: a table with its header and no row parsed into 0 NPUs without a word
    header_end = next(i for i, x in enumerate(LINES) if x.startswith("+====="))
    facts = summarize(parse_info("\n".join(LINES[:header_end + 1])))
    assert facts["count"] == 0 and any("after the header (none was read)" in x for x in facts["notes"])
