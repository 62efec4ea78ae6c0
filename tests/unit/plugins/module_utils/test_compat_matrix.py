"""Tests for the one compatibility table (module_utils/compat_matrix.py)."""

from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet
from ansible_collections.ascendai.vllm.plugins.module_utils import compat_matrix as cm
from hypothesis import given
from hypothesis import strategies as st


def test_table_rows_as_documented():
    # Spot-check rows against vllm-ascend versioning_policy.md (docs/sources.md).
    row = cm.find_row("0.23.0")
    assert (row["vllm"], row["python"], row["cann"], row["torch"], row["torch_npu"], row["triton_ascend"]) == (
        "0.23.0", "3.10-3.12", ["9.1.0"], "2.10.0", "2.10.0.post4", "3.2.2")
    row = cm.find_row("0.9.1")
    assert (row["cann"], row["torch_npu"], row["python"]) == (["8.2.RC1"], "2.5.1.post1", "3.9-3.11")
    row = cm.find_row("v0.16.0rc1")
    assert row["label"] == "v0.14.0rc1 ... v0.17.0rc1"
    assert row["cann"] == ["8.5.0", "8.5.1"]
    assert "versioning_policy.md" in row["source"]


@pytest.mark.parametrize(("version", "label"), [
    ("0.23", "v0.23.0"),
    ("v0.23.0", "v0.23.0"),
    ("0.23.0.post1", "v0.23.0"),
    ("0.7.3.post1", "v0.7.3 / v0.7.3.post1"),
    ("0.9.0rc2", "v0.9.0rc1 / v0.9.0rc2"),
    ("0.10.1", "v0.10.0rc1 ... v0.10.2rc1"),
    ("0.21.0rc1", "v0.20.2rc1 ... v0.22.1rc1"),
    ("0.18", "v0.18.0"),
])
def test_find_row(version, label):
    assert cm.find_row(version)["label"] == label


@pytest.mark.parametrize("version", ["0.19.0", "0.24.0", "0.6.0", "0.10.2", "0.9.0"])
def test_find_row_outside_table(version):
    # 0.10.2 final is after 0.10.2rc1; 0.9.0 final after rc2: the doc lists neither.
    assert cm.find_row(version) is None


def test_find_row_ambiguous_partial():
    with pytest.raises(ValueError, match=r"matches 3 rows .*0\.9\.2rc1"):
        cm.find_row("0.9")


def test_bad_combination_names_the_working_row():
    # Issue 6's example: vllm-ascend 0.23 with CANN 8.1.
    result = cm.check_combination(vllm_ascend="0.23", cann="8.1")
    assert not result["ok"]
    assert result["row"]["label"] == "v0.23.0"
    assert result["problems"] == ["vllm-ascend 0.23 needs row v0.23.0: CANN 8.1 is not the CANN of that row (9.1.0)"]
    assert [r["label"] for r in result["working_rows"]] == [
        "v0.9.2rc1", "v0.9.0rc1 / v0.9.0rc2", "v0.8.5rc1", "v0.7.3 / v0.7.3.post1"]
    message = cm.combination_error(result, vllm_ascend="0.23", cann="8.1")
    assert "Either install the whole row: vllm-ascend v0.23.0: vLLM 0.23.0, Python 3.10-3.12, CANN 9.1.0" in message
    assert "Or keep CANN 8.1 and use the row that works with it: vllm-ascend v0.9.2rc1: vLLM 0.9.2" in message


def test_good_combination():
    result = cm.check_combination(vllm_ascend="0.18.0", vllm="0.18.0", python="3.11.7", cann="8.5.1",
                                  torch="2.9.0+cpu", torch_npu="2.9.0.post1")
    assert result["ok"], result["problems"]
    assert result["problems"] == []
    assert cm.combination_error(result) == ""


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"python": "3.12"}, "Python 3.12 is outside that row's Python 3.10-3.11"),
    ({"torch": "2.10.0"}, "torch 2.10.0 is not that row's torch 2.9.0"),
    ({"torch_npu": "2.10.0"}, "torch_npu 2.10.0 is not a build of that row's torch_npu 2.9.0.post1+git4c901a4 "
                              "(2.9.0.*)"),
    ({"vllm": "0.17.0"}, "vLLM 0.17.0 is not that row's vLLM 0.18.0"),
    ({"cann": "8.5.0"}, "CANN 8.5.0 is not the CANN of that row (8.5.1)"),
])
def test_each_component_is_checked(kwargs, fragment):
    result = cm.check_combination(vllm_ascend="0.18.0", **kwargs)
    assert not result["ok"]
    assert len(result["problems"]) == 1
    assert fragment in result["problems"][0]


def test_ranged_row_requires_same_minor_vllm():
    assert cm.check_combination(vllm_ascend="0.15.0rc1", vllm="0.15.1")["ok"]
    result = cm.check_combination(vllm_ascend="0.15.0rc1", vllm="0.16.0")
    assert not result["ok"]
    assert "same major.minor" in result["problems"][0]


def test_no_row_for_stack_without_vllm_ascend():
    result = cm.check_combination(python="3.12", cann="8.5.1")
    assert not result["ok"]
    assert result["working_rows"] == []
    assert result["problems"] == ["no row of the compatibility table accepts Python 3.12, CANN 8.5.1"]
    result = cm.check_combination(cann="9.0.0")
    assert result["ok"]
    assert result["working_rows"][0]["label"] == "v0.20.2rc1 ... v0.22.1rc1"


def test_unknown_release_lists_known_ones():
    result = cm.check_combination(vllm_ascend="0.19.1", cann="8.5.1")
    assert not result["ok"]
    assert "0.19.1 is not in the compatibility table" in result["problems"][0]
    assert "v0.18.0" in result["problems"][0]
    message = cm.combination_error(result, vllm_ascend="0.19.1", cann="8.5.1")
    assert "use the row that works with it: vllm-ascend v0.18.0" in message


def test_not_a_version():
    with pytest.raises(ValueError, match="cann='eight' is not a version string"):
        cm.check_combination(vllm_ascend="0.23.0", cann="eight")


@pytest.mark.parametrize(("wanted", "actual", "expected"), [
    ("8.1", "8.1.RC1", True),
    ("8.2.rc1", "8.2.RC1", True),
    ("2.10.0", "2.10.0+cpu", True),
    ("2.10.0.post4", "2.10.0", False),
    ("2.9.0.post1+git4c901a4", "2.9.0.post1", True),
    ("8.5.0", "8.5.1", False),
    ("9", "9.1.0", True),
])
def test_version_matches(wanted, actual, expected):
    assert cm.version_matches(wanted, actual) is expected


def test_rows_are_copies():
    row = cm.find_row("0.23.0")
    row["cann"].append("8.1.RC1")
    assert cm.find_row("0.23.0")["cann"] == ["9.1.0"]


def test_rows_do_not_overlap():
    rows = cm.all_rows()
    for earlier, later in zip(rows, rows[1:]):
        assert cm.parse_version(earlier["vllm_ascend_max"]).order_key() < cm.parse_version(
            later["vllm_ascend_min"]).order_key()


_release = st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=4)
_pre = st.sampled_from(["", "rc1", "rc2", ".RC1", "a1", "b3"])
_post = st.sampled_from(["", ".post1", ".post4"])
_local = st.sampled_from(["", "+cpu", "+git4c901a4"])


@given(_release, _pre, _post, _local, st.booleans())
def test_any_pip_version_matches_itself(release, pre, post, local, v_prefix):
    text = ("v" if v_prefix else "") + ".".join(map(str, release)) + pre + post + local
    assert cm.version_matches(text, text)
    assert cm.version_matches(text.upper(), text)
    # A two-part prefix of the release matches the full version.
    if len(release) >= 2:
        assert cm.version_matches(".".join(map(str, release[:2])), text)


@given(st.text(max_size=12))
def test_garbage_is_rejected_or_parsed(text):
    try:
        version = cm.parse_version(text)
    except ValueError:
        return
    assert version.release


@pytest.mark.parametrize(("version", "pin"), [
    ("2.7.1.post1", "2.7.1.*"), ("2.9.0.post1+git4c901a4", "2.9.0.*"), ("2.5.1.post1.dev20250619", "2.5.1.*"),
    ("2.8", "2.8.0.*"), ("2.10.0", "2.10.0.*"),
])
def test_release_pin(version, pin):
    assert cm.release_pin(version) == pin


@pytest.mark.parametrize(("wanted", "actual", "same"), [
    ("2.7.1.post1", "2.7.1", True), ("2.7.1", "2.7.1.post2", True), ("2.9.0.post1+git4c901a4", "2.9.0", True),
    ("2.7.1.dev20250724", "2.7.1", True), ("2.8", "2.8.0.post2", True),
    ("2.7.1.post1", "2.7.2", False), ("2.10.0", "2.1.0", False), ("2.8.0", "2.9.0", False),
])
def test_same_release(wanted, actual, same):
    assert cm.same_release(wanted, actual) is same


@pytest.mark.parametrize(("vllm_ascend", "wheel_pin"), [
    # torch-npu as the published vllm-ascend wheels pin it (Requires-Dist of the PyPI aarch64 wheels): two
    # differ from the doc's row by their post label only, and must still pass.
    ("0.11.0", "2.7.1"), ("0.18.0", "2.9.0"), ("0.13.0", "2.8.0.post2"), ("0.9.1", "2.5.1.post1"),
    ("0.23.0", "2.10.0.post4"), ("0.10.0rc1", "2.7.1.dev20250724"),
])
def test_published_wheel_pins_fit_their_rows(vllm_ascend, wheel_pin):
    result = cm.check_combination(vllm_ascend=vllm_ascend, torch_npu=wheel_pin)
    assert result["ok"], result["problems"]
    # and pip's reading of the installers' pin takes the wheel's build
    pin = SpecifierSet("==" + cm.find_row(vllm_ascend)["torch_npu_pin"], prereleases=True)
    assert pin.contains(wheel_pin)
    assert not pin.contains("2.14.0")


@pytest.mark.parametrize(("vllm_ascend", "glibc", "ok"), [
    ("0.11.0", "2.28", True),     # Kylin V10
    ("0.18.0", "2.28", True),
    ("0.23.0", "2.28", False),    # vllm-ascend >= 0.20: manylinux_2_34 aarch64 wheels only
    ("0.23.0", "2.34", True),     # openEuler 22.03
    ("0.20.2rc1", "2.35", True),  # Ubuntu 22.04
    ("0.9.1", "2.17", True),
    ("0.11.0", "2.17", False),
])
def test_glibc_of_the_aarch64_wheels(vllm_ascend, glibc, ok):
    result = cm.check_combination(vllm_ascend=vllm_ascend, glibc=glibc)
    assert result["ok"] is ok, result["problems"]


def test_kylin_v10_with_vllm_ascend_023_names_the_rows_that_install():
    result = cm.check_combination(vllm_ascend="0.23.0", glibc="2.28")
    message = cm.combination_error(result, vllm_ascend="0.23.0", glibc="2.28")
    assert "glibc 2.28 is older than the glibc 2.34 that row's aarch64 wheels need (manylinux_2_34" in message
    assert "Or keep glibc 2.28 and use the row that works with it: vllm-ascend v0.18.0" in message
    assert "On glibc 2.28 the newest row whose aarch64 wheels install is vllm-ascend v0.18.0" in message
