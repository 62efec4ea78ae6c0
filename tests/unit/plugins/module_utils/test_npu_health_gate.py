"""The NPU health gate fails closed: only the word npu-smi prints for a healthy chip (``OK``) passes, and a present
non-zero error code fails even beside it.

npu-smi prints one of ``OK``, ``Warning``, ``Alarm``, ``Critical``, ``UNKNOWN`` (driver source, npu_common.c
npu_common_get_health_state_str); anything else in the health column is a capture this parser was not made for
(another case, a CJK word, colour codes, an empty cell) and is refused as "unknown", never read as healthy.
"""

from __future__ import annotations

import os

import pytest
from ansible_collections.ascendai.vllm.plugins.module_utils import _hccn as hccn
from ansible_collections.ascendai.vllm.plugins.module_utils import _npu_metrics as npu_metrics
from ansible_collections.ascendai.vllm.plugins.module_utils import _npu_smi as npu_smi
from ansible_collections.ascendai.vllm.plugins.module_utils._npu_smi import (
    HEALTH_WORDS,
    NpuSmiParseError,
    health_verdict,
    parse_board,
    parse_health,
    parse_info,
    parse_info_m,
    summarize,
)
from hypothesis import given, settings
from hypothesis import strategies as st

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "npu-smi")
SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", "shared", "fixtures", "npu-smi")


def load(name, base=FIXTURES):
    with open(os.path.join(base, name), encoding="utf-8") as handle:
        return "\n".join(x for x in handle.read().split("\n") if not x.startswith("# "))


# https://github.com/vllm-project/vllm-ascend/issues/3906: 8 x 910B2, every chip OK
B2 = load("npu-smi-info-910b2-8card-idle-vllm-ascend-issue3906.txt")
B2_LINES = B2.split("\n")
NPU3 = next(i for i, x in enumerate(B2_LINES) if x.startswith("| 3     910B2"))


def _with_npu3_health(word):
    """The real capture with NPU 3's health cell holding ``word`` (the cell keeps its printed width)."""
    lines = list(B2_LINES)
    row = lines[NPU3]
    start = row.index("| OK") + 2
    end = row.index("|", start)
    lines[NPU3] = row[:start] + word.ljust(end - start - 1) + " " + row[end:]
    return "\n".join(lines)


def _c(key, value):
    return "\t%-30s : %s" % (key, value)


def _detail(state, code="NA"):
    return parse_health("\n".join([_c("Health Status", state), _c("Error Code", code),
                                   _c("Error Information", "NA" if code == "NA" else "node type=NPU")]))


# ------------------------------------------------------------------ real captures


INFO_CAPTURES = {
    # capture -> the NPU ids npu-smi shows in a state other than OK (read off the capture by eye)
    "npu-smi-info-310-4chip-gpustack-huawei-doc.txt": [],
    "npu-smi-info-310p3-300i-duo-1card-2chip-nvtop-issue421-partial.txt": [],
    "npu-smi-info-910a-8card-busy-with-procs-mindcluster-doc.txt": [],
    "npu-smi-info-910a-8card-idle-gpustack-huawei-doc.txt": [],
    "npu-smi-info-910b1-8card-elided-arthurchiao-blog.txt": [],
    "npu-smi-info-910b2-8card-idle-vllm-ascend-issue3906.txt": [],
    "npu-smi-info-910b4-1card-wide-format-v26-triton-ascend-faq.txt": [],
    "npu-smi-info-910b4-4card-busy-with-procs-vllm-ascend-issue843.txt": [],
    "npu-smi-info-a3-ascend910-8npu-16die-busy-with-procs-vllm-ascend-issue3002.txt": [],
}


@pytest.mark.parametrize("base", [FIXTURES, SHARED], ids=["unit-fixtures", "shared-fixtures"])
@pytest.mark.parametrize("name", sorted(INFO_CAPTURES))
def test_real_captures_keep_their_verdict(name, base):
    if not os.path.isdir(base):
        pytest.skip(f"{base} is not on this machine (the shared fixtures sit beside the checkout)")
    facts = summarize(parse_info(load(name, base)))
    assert [u["npu_id"] for u in facts["unhealthy"]] == INFO_CAPTURES[name]
    assert facts["healthy"] is (not INFO_CAPTURES[name])


def test_real_warning_capture_is_unhealthy_and_after_the_reset_healthy():
    text = load("npu-smi-info-warning-before-after-offline-reset-mindcluster-doc.txt")
    facts = summarize(parse_info(text))
    assert [(u["npu_id"], u["health"], u["verdict"]) for u in facts["unhealthy"]] == [(0, "Warning", "unhealthy")]


def test_real_alarm_detail_with_error_codes():
    text = load("npu_info_after-health-alarm-errorcodes-910a-faultdiag-fixture-mindcluster.txt")
    body = text.split("npu-smi info -i 0 -c 0 -t health", 1)[1].split("/usr/local/", 1)[0]
    health = parse_health(body)
    assert health_verdict([health["health"]], health["error_codes"])[0] == "unhealthy"


# ------------------------------------------------------------------ words other than OK


@pytest.mark.parametrize("word", [
    "ok", "Ok", "oK", "OK.", "OKAY", "Abnormal", "Fault", "Offline", "NA", "-", "UNKNOWN", "critical", "WARNING",
    "\u6b63\u5e38",                  # CJK "normal"
    "\uff2f\uff2b",                  # full-width OK
    "\x1b[32mOK\x1b[0m",             # colour codes around OK
    "O\u200bK",                      # a zero-width space inside
])
def test_a_health_word_other_than_ok_is_not_healthy(word):
    facts = summarize(parse_info(_with_npu3_health(word)))
    assert facts["healthy"] is False
    (bad,) = facts["unhealthy"]
    assert bad["npu_id"] == 3 and bad["verdict"] in ("unhealthy", "unknown")
    assert ascii(word)[1:-1] in bad["reason"] or word in bad["reason"]


def test_an_empty_health_cell_is_unknown_not_healthy():
    facts = summarize(parse_info(_with_npu3_health("")))
    (bad,) = facts["unhealthy"]
    assert (bad["npu_id"], bad["verdict"]) == (3, "unknown")
    assert "no health" in bad["reason"]


def test_unknown_word_is_refused_with_a_message_naming_the_words_that_pass():
    facts = summarize(parse_info(_with_npu3_health("Abnormal")))
    reason = facts["unhealthy"][0]["reason"]
    assert "'Abnormal'" in reason and "OK" in reason and "unknown" in reason and "refused" in reason


def test_unknown_beside_critical_still_reports_both():
    info = parse_info(_with_npu3_health("Fault"))
    facts = summarize(info, healths={3: _detail("Critical", "80E01801")})
    (bad,) = facts["unhealthy"]
    assert bad["verdict"] == "unhealthy"
    assert "Critical" in bad["reason"] and "'Fault'" in bad["reason"] and "80E01801" in bad["reason"]


@pytest.mark.parametrize("word", ["Fault", "Abnormal", "ok"])
def test_the_detail_query_alone_can_fail_the_gate(word):
    facts = summarize(parse_info(B2), healths={5: _detail(word)})
    assert [u["npu_id"] for u in facts["unhealthy"]] == [5]


# ------------------------------------------------------------------ error codes


def test_error_code_beside_ok_is_unhealthy():
    facts = summarize(parse_info(B2), healths={2: _detail("OK", "80E01801")})
    (bad,) = facts["unhealthy"]
    assert (bad["npu_id"], bad["verdict"], bad["error_codes"]) == (2, "unhealthy", ["80E01801"])
    assert "error code 80E01801" in bad["reason"]


def test_several_codes_on_a_second_chip():
    a3 = parse_info(load("npu-smi-info-a3-ascend910-8npu-16die-busy-with-procs-vllm-ascend-issue3002.txt"))
    merged = npu_smi.merge_health([dict(_detail("OK"), chip_id=0), dict(_detail("OK", "8C03A000 A4025021"),
                                                                        chip_id=1)])
    facts = summarize(a3, healths={4: merged})
    assert [(u["npu_id"], u["error_codes"]) for u in facts["unhealthy"]] == [(4, ["8C03A000", "A4025021"])]


def test_a_zero_code_is_no_error():
    assert health_verdict(["OK"], ["0000"])[0] == "healthy"


@pytest.mark.parametrize("code", ["ZZZZ", "80E0180G", "0x", "\u0661\u0662", "1" * 40])
def test_a_code_that_is_not_hexadecimal_is_unknown(code):
    verdict, reason = health_verdict(["OK"], [code])
    assert verdict == "unknown" and "error code" in reason


def test_no_health_at_all_is_unknown():
    assert health_verdict([], [])[0] == "unknown"
    assert health_verdict([None], [])[0] == "unknown"


# ------------------------------------------------------------------ Hypothesis: any word, any codes


_HEX = st.text("0123456789ABCDEFabcdef", min_size=1, max_size=8)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=12), st.sampled_from(HEALTH_WORDS)), max_size=4),
       st.lists(st.one_of(_HEX, st.text(max_size=10)), max_size=4))
def test_healthy_only_when_every_word_is_ok_and_no_code_is_set(states, codes):
    verdict, reason = health_verdict(states, codes)
    codes_clear = all(c and all(x in "0123456789ABCDEFabcdef" for x in c) and int(c, 16) == 0 for c in codes)
    expected_healthy = bool(states) and all(s == "OK" for s in states) and codes_clear
    assert (verdict == "healthy") is expected_healthy
    assert verdict in ("healthy", "unhealthy", "unknown")
    assert isinstance(reason, str) and (verdict == "healthy") is (reason == "")
    if any(s in ("Warning", "Alarm", "Critical") for s in states):
        assert verdict == "unhealthy"


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(blacklist_characters="|\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), max_size=10))
def test_any_word_in_the_real_table_passes_only_when_it_is_ok(word):
    try:
        facts = summarize(parse_info(_with_npu3_health(word)))
    except NpuSmiParseError:
        return  # a word that breaks the table is refused by the parser: also closed
    assert facts["healthy"] is (word.strip() == "OK")


# ------------------------------------------------------------------ metrics and the NIC's net health


def _runner(info_text, health_text):
    b2_board = "\n".join([_c("NPU ID", 0), _c("Chip ID", 0), _c("Chip Type", "Ascend"), _c("Chip Name", "910B2"),
                          _c("Chip Version", "V1")])

    def run(argv):
        if argv[1:] == ["info"]:
            return 0, info_text, ""
        if argv[1:] == ["info", "-m"]:
            return 1, "", "not here"
        if "health" in argv:
            return 0, health_text, ""
        if "board" in argv:
            return 0, b2_board, ""
        raise AssertionError(argv)
    return run


@pytest.mark.parametrize("word,code,expected", [
    ("OK", "NA", 1), ("OK", "80E01801", 0), ("ok", "NA", 0), ("Fault", "NA", 0), ("\u6b63\u5e38", "NA", 0),
])
def test_metrics_health_status_fails_closed(word, code, expected):
    health = "\n".join([_c("Health Status", word), _c("Error Code", code), _c("Error Information", "NA")])
    snap = npu_metrics.collect(_runner(B2, health), npu_smi, hccn, nics=False)
    assert {c["health"] for c in snap["chips"]} == {expected}


@pytest.mark.parametrize("status,ok", [("Success", True), ("SUCCESS", False), ("success", False),
                                       ("Success\x1b[0m", False), ("Fault", False), ("Init", False)])
def test_hccn_net_health_word_must_be_exact(status, ok):
    assert hccn.health_ok(status) is ok


def test_board_and_mapping_parsers_untouched_by_the_gate():
    # the other parsers still read their real captures
    text = load("npu-smi-info-m-910a-8card-gpustack-huawei-doc.txt")
    assert len(parse_info_m(text)) >= 8
    assert parse_board(_c("NPU ID", 0))["npu_id"] == 0


# ------------------------------------------------------------------ the module


def test_npu_info_module_refuses_an_unknown_word(monkeypatch):
    from ansible.module_utils import basic
    from ansible.module_utils.testing import patch_module_args
    from ansible_collections.ascendai.vllm.plugins.modules import npu_info
    from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.module_harness import (
        AnsibleExitJson, patch_exits)

    def run_command(self, args, **kwargs):
        if args[1:] == ["info"]:
            return 0, _with_npu3_health("Abnormal"), ""
        return 0, "\n".join([_c("Health Status", "OK"), _c("Error Code", "NA"), _c("Error Information", "NA")]), ""

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, *a, **k: "/usr/local/sbin/npu-smi")
    patch_exits(monkeypatch)
    with patch_module_args({"detail": False}), pytest.raises(AnsibleExitJson) as exc:
        npu_info.main()
    res = exc.value.args[0]
    assert res["healthy"] is False
    assert [(u["npu_id"], u["verdict"], u["health"]) for u in res["unhealthy"]] == [(3, "unknown", "Abnormal")]
