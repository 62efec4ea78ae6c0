"""Numbers longer than any npu-smi or hccn_tool prints give the parser's own error, never a traceback.

Python refuses to turn more than 4300 decimal digits into an int (ValueError, sys.int_info.str_digits_check_threshold);
the parsers bound every number before converting it. Each real capture is mangled: one run of digits becomes a
number of thousands of digits, and every parser must answer with its own error or a result.
"""

from __future__ import annotations

import glob
import os
import re

import pytest
from ansible_collections.ascendai.vllm.plugins.module_utils import _hccn as hccn, _npu_smi as npu_smi
from hypothesis import given, settings
from hypothesis import strategies as st

HERE = os.path.dirname(__file__)
NPU_FIXTURES = sorted(glob.glob(os.path.join(HERE, "..", "..", "fixtures", "npu-smi", "*.txt")))
HCCN_FIXTURES = sorted(glob.glob(os.path.join(HERE, "..", "..", "fixtures", "hccn_tool", "*.txt")))
HUGE = "9" * 4301
DIGITS = re.compile(r"[0-9]+")


def _read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


NPU_TEXTS = [_read(p) for p in NPU_FIXTURES]
HCCN_TEXTS = [_read(p) for p in HCCN_FIXTURES]
NPU_PARSERS = [npu_smi.parse_info, npu_smi.parse_info_m, npu_smi.parse_board, npu_smi.parse_health,
               npu_smi.parse_common, npu_smi.parse_memory, npu_smi.parse_usages]
HCCN_PARSERS = [getattr(hccn, name) for name in sorted(dir(hccn)) if name.startswith("parse_")]


def _mangle(text, index, digits):
    runs = list(DIGITS.finditer(text))
    if not runs:
        return text + digits
    run = runs[index % len(runs)]
    return text[:run.start()] + digits + text[run.end():]


def _npu(parser, text):
    try:
        parser(text)
    except npu_smi.NpuSmiParseError:
        pass


def _hccn(parser, text):
    try:
        parser(text)
    except hccn.HccnError:
        pass


# ------------------------------------------------------------------ the cases found


@pytest.mark.parametrize("parser,text", [
    (hccn.parse_mtu, f"mtu:{HUGE}"),
    (hccn.parse_ping, f"device 0 PING 10.0.0.2\nrecv seq=0, time=0.1ms\n{HUGE} packets transmitted, 1 received, "
                      "0% packet loss"),
    (hccn.parse_tls, f"dev_id:{HUGE}, tls switch[1], tls preconfigured[1], tls alarm time threshold[60]days"),
    (hccn.parse_tls, f"dev_id:0, tls switch[1], tls preconfigured[1], tls alarm time threshold[{HUGE}]days"),
    (hccn.parse_hccn_conf, f"address_{HUGE}=10.0.0.2\n"),
    (hccn.parse_dscp_to_tc, f"dscp tc\n{HUGE} 1\n"),
    (hccn.parse_pfc, f"priority 0 1 2 3 4 5 6 7\nenabled {HUGE} 0 0 0 0 0 0 0\n"),
])
def test_hccn_number_too_long_is_a_clear_error(parser, text):
    with pytest.raises(hccn.HccnError, match=r"4301 digits"):
        parser(text)


def _c(key, value):
    return "\t%-30s : %s" % (key, value)


def test_npu_smi_table_number_too_long_is_a_clear_error():
    text = _read(NPU_FIXTURES[0])
    b2 = next(_read(p) for p in NPU_FIXTURES if "910b2-8card" in p)
    mangled = b2.replace("65536", HUGE, 1)
    with pytest.raises(npu_smi.NpuSmiParseError, match=r"4301 digits.*npu-smi prints at most 20"):
        npu_smi.parse_info(mangled)
    assert text  # the fixtures are there


def test_npu_smi_key_value_number_too_long_is_kept_as_text():
    board = npu_smi.parse_board("\n".join([_c("NPU ID", 0), _c("Chip Count", HUGE)]))
    assert board["chip_count"] == HUGE


def test_npu_smi_version_and_no_process_line_with_long_numbers():
    b2 = next(_read(p) for p in NPU_FIXTURES if "910b2-8card" in p)
    for mangled in (re.sub(r"npu-smi (\S+)", "npu-smi " + HUGE, b2, count=1),
                    re.sub(r"No running processes found in NPU (\d+)", "No running processes found in NPU " + HUGE,
                           b2, count=1)):
        _npu(npu_smi.parse_info, mangled)


def test_error_code_too_long_is_unknown_not_a_traceback():
    health = npu_smi.parse_health("\n".join([_c("Health Status", "OK"), _c("Error Code", HUGE),
                                             _c("Error Information", "x")]))
    assert npu_smi.health_verdict([health["health"]], health["error_codes"])[0] == "unknown"


# ------------------------------------------------------------------ every parser on every real capture


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(range(len(NPU_TEXTS))), st.integers(0, 10_000), st.integers(21, 6000),
       st.sampled_from(NPU_PARSERS))
def test_npu_smi_parsers_on_captures_with_a_long_number(which, index, length, parser):
    _npu(parser, _mangle(NPU_TEXTS[which], index, "7" * length))


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(range(len(HCCN_TEXTS))), st.integers(0, 10_000), st.integers(21, 6000),
       st.sampled_from(HCCN_PARSERS))
def test_hccn_parsers_on_captures_with_a_long_number(which, index, length, parser):
    _hccn(parser, _mangle(HCCN_TEXTS[which], index, "7" * length))


@pytest.mark.parametrize("parser", HCCN_PARSERS, ids=lambda p: p.__name__)
def test_every_hccn_parser_on_every_digit_run_of_every_capture(parser):
    for text in HCCN_TEXTS:
        for index in range(len(DIGITS.findall(text))):
            _hccn(parser, _mangle(text, index, HUGE))


@pytest.mark.parametrize("parser", NPU_PARSERS, ids=lambda p: p.__name__)
def test_every_npu_smi_parser_on_every_digit_run_of_every_capture(parser):
    for text in NPU_TEXTS:
        for index in range(0, len(DIGITS.findall(text)), 7):
            _npu(parser, _mangle(text, index, HUGE))
