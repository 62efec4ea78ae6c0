"""Tests for the one compatibility table (module_utils/_compat_matrix.py)."""

from __future__ import annotations

import pytest
from packaging.specifiers import SpecifierSet
from ansible_collections.ascendai.vllm.plugins.module_utils import _compat_matrix as cm
from hypothesis import given
from hypothesis import strategies as st


def test_table_rows_as_documented():
    # Spot-check rows against vllm-ascend versioning_policy.md (docs/sources.md).
    row = cm.find_row("0.23.0")
    assert (row["vllm"], row["python"], row["cann"], row["torch"], row["torch_npu"], row["triton_ascend"]) == (
        "0.23.0", "3.10-3.12", ["9.1.0"], "2.10.0", "2.10.0.post4", "3.2.2")
    row = cm.find_row("0.9.1")
    assert (row["cann"], row["torch_npu"], row["python"]) == (["8.2.RC1"], "2.5.1.post1", "3.9-3.11")
    # v0.16.0rc1's own doc says CANN 8.5.0; newer docs and its Dockerfile (cann:8.5.1) say 8.5.1
    row = cm.find_row("v0.16.0rc1")
    assert row["label"] == "v0.16.0rc1"
    assert row["cann"] == ["8.5.1"]
    assert row["vllm"] == "0.16.0"
    assert "versioning_policy.md" in row["source"]


@pytest.mark.parametrize(("version", "label"), [
    ("0.23", "v0.23.0"),  # newest final with aarch64 wheels (0.23.0.post1 is an sdist only)
    ("v0.23.0", "v0.23.0"),
    ("0.23.0.post1", "v0.23.0.post1"),
    ("0.7.3.post1", "v0.7.3.post1"),
    ("0.9.0rc2", "v0.9.0rc2"),
    ("0.10.1rc1", "v0.10.1rc1"),
    ("0.21.0rc1", "v0.21.0rc1"),
    ("0.18", "v0.18.0"),
    ("0.9", "v0.9.1"),
    ("0.13.0.post1", "v0.13.0"),  # a post release PyPI does not list: its base release
])
def test_find_row(version, label):
    assert cm.find_row(version)["label"] == label


@pytest.mark.parametrize("version", ["0.19.0", "0.24.0", "0.6.0", "0.10.2", "0.9.0", "0.31.0rc1"])
def test_find_row_outside_table(version):
    # 0.10.2 final is after 0.10.2rc1; 0.9.0 final after rc2: PyPI has neither.
    assert cm.find_row(version) is None


def test_find_row_ambiguous_partial():
    # only release candidates start with 0.10: no final to prefer
    with pytest.raises(ValueError, match=r"matches 3 rows .*0\.10\.2rc1"):
        cm.find_row("0.10")


def test_every_release_on_pypi_has_its_own_row():
    # https://pypi.org/simple/vllm-ascend/ (2026-12-03): 49 releases, 0.7.1rc1 ... 0.30.0rc2
    labels = cm.known_releases()
    assert len(labels) == 49
    assert labels[0] == "v0.7.1rc1" and labels[-1] == "v0.30.0rc2"
    for release in ("0.9.1rc1", "0.9.1rc2", "0.9.1rc3", "0.11.0rc0", "0.11.0rc3", "0.13.0rc1", "0.13.0rc3",
                    "0.18.0rc1", "0.19.1rc1", "0.23.0rc1", "0.24.0rc1", "0.25.1rc1", "0.26.0rc1", "0.27.1rc1",
                    "0.28.0rc1", "0.29.0rc1", "0.30.0rc1"):
        assert cm.find_row(release)["label"] == "v" + release
    row = cm.find_row("0.30.0rc2")  # no doc lists it: its Dockerfile (CANN 9.2.0) and PKG-INFO pins
    assert (row["cann"], row["vllm"], row["torch_npu"], row["triton_ascend"]) == (
        ["9.2.0"], "0.30.0", "2.10.0.post4", "3.2.2")
    assert row["documented"] is None


@pytest.mark.parametrize("vllm_ascend", ["0.14.0rc1", "0.15.0rc1"])
def test_014_and_015_accept_only_cann_850(vllm_ascend):
    # their doc rows say 8.5.0 (the merged old row accepted 8.5.1 too)
    assert cm.check_combination(vllm_ascend=vllm_ascend, cann="8.5.0")["ok"]
    result = cm.check_combination(vllm_ascend=vllm_ascend, cann="8.5.1")
    assert not result["ok"]
    assert "CANN 8.5.1 is not the CANN of that row (8.5.0)" in result["problems"][0]


@pytest.mark.parametrize(("vllm_ascend", "vllm"), [("0.17.0rc1", "0.17.1"), ("0.22.1rc1", "0.22.0"),
                                                   ("0.14.0rc1", "0.14.0"), ("0.15.0rc1", "0.15.1")])
def test_row_names_the_exact_vllm(vllm_ascend, vllm):
    result = cm.check_combination(vllm_ascend=vllm_ascend, vllm=vllm)
    assert not result["ok"]
    assert f"vLLM {vllm} is not that row's vLLM" in result["problems"][0]


def test_0202rc1_has_no_python_312():
    # doc: >= 3.10, < 3.12; PyPI: cp310 / cp311 aarch64 wheels only
    row = cm.find_row("0.20.2rc1")
    assert row["python_max"] == "3.11"
    assert row["aarch64_wheels"] == ["cp310", "cp311"]
    assert not cm.check_combination(vllm_ascend="0.20.2rc1", python="3.12")["ok"]
    assert cm.check_combination(vllm_ascend="0.21.0rc1", python="3.12")["ok"]


@pytest.mark.parametrize(("vllm_ascend", "package", "version"), [
    ("0.20.2rc1", "triton-ascend", "3.2.1"), ("0.23.0", "triton-ascend", "3.2.2"),
    ("0.30.0rc2", "triton-ascend", "3.2.2"), ("0.10.0rc1", "torch-npu", "2.7.1.dev20250724"),
])
def test_pins_missing_from_pypi_are_named_with_the_index(vllm_ascend, package, version):
    row = cm.find_row(vllm_ascend)
    assert row["not_on_pypi"] == {package: version}
    message = cm.pypi_gap_message(row)
    assert f"pins {package}=={version}, which PyPI does not have" in message
    assert "https://mirrors.huaweicloud.com/ascend/repos/pypi" in message
    assert f"https://github.com/vllm-project/vllm-ascend/blob/v{vllm_ascend}/docs/source/" in message
    assert row["pypi_gaps"] == message


@pytest.mark.parametrize("vllm_ascend", ["0.18.0", "0.13.0", "0.11.0", "0.19.1rc1"])
def test_pins_on_pypi_give_no_message(vllm_ascend):
    # v0.18.0's doc says Triton-Ascend 3.2.0.dev20260322, but its wheels require triton-ascend==3.2.0 (on PyPI)
    row = cm.find_row(vllm_ascend)
    assert row["not_on_pypi"] == {}
    assert cm.pypi_gap_message(row) == ""


def test_bad_combination_names_the_working_row():
    # vllm-ascend 0.23 with CANN 8.1: the answer names the rows that do run on CANN 8.1.
    result = cm.check_combination(vllm_ascend="0.23", cann="8.1")
    assert not result["ok"]
    assert result["row"]["label"] == "v0.23.0"
    assert result["problems"] == ["vllm-ascend 0.23 needs row v0.23.0: CANN 8.1 is not the CANN of that row (9.1.0)"]
    assert [r["label"] for r in result["working_rows"]] == [
        "v0.9.2rc1", "v0.9.1rc1", "v0.9.0rc2", "v0.9.0rc1", "v0.8.5rc1", "v0.7.3.post1", "v0.7.3"]
    message = cm.combination_error(result, vllm_ascend="0.23", cann="8.1")
    assert "Either install the whole row: vllm-ascend v0.23.0: vLLM 0.23.0, Python 3.10-3.12, CANN 9.1.0" in message
    # suggestions prefer a final release (v0.9.2rc1 is newer, but a release candidate)
    assert "Or keep CANN 8.1 and use the row that works with it: vllm-ascend v0.7.3.post1: vLLM 0.7.3" in message
    assert "(other rows that also fit: v0.9.2rc1, v0.9.1rc1," in message


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


def test_row_with_two_vllm_releases():
    # v0.10.1rc1's row: "v0.10.1/v0.10.1.1"
    assert cm.check_combination(vllm_ascend="0.10.1rc1", vllm="0.10.1")["ok"]
    assert cm.check_combination(vllm_ascend="0.10.1rc1", vllm="0.10.1.1")["ok"]
    assert not cm.check_combination(vllm_ascend="0.10.1rc1", vllm="0.10.2")["ok"]


def test_no_row_for_stack_without_vllm_ascend():
    result = cm.check_combination(python="3.12", cann="8.5.1")
    assert not result["ok"]
    assert result["working_rows"] == []
    assert result["problems"] == ["no row of the compatibility table accepts Python 3.12, CANN 8.5.1"]
    result = cm.check_combination(cann="9.0.0")
    assert result["ok"]
    assert [row["label"] for row in result["working_rows"]] == ["v0.22.1rc1", "v0.21.0rc1", "v0.20.2rc1"]


def test_unknown_release_lists_known_ones():
    result = cm.check_combination(vllm_ascend="0.19.1", cann="8.5.1")
    assert not result["ok"]
    assert "0.19.1 is not in the compatibility table" in result["problems"][0]
    assert "v0.19.1rc1" in result["problems"][0]
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


def test_one_row_per_release_in_order():
    rows = cm.all_rows()
    for row in rows:
        assert row["vllm_ascend_min"] == row["vllm_ascend_max"] == row["vllm_ascend"]
        assert row["vllm_min"] in row["vllm_versions"] and row["vllm_max"] in row["vllm_versions"]
    releases = [row["vllm_ascend"] for row in rows]
    assert len(set(releases)) == len(releases)
    keys = [cm.parse_version(r).order_key() + (cm.parse_version(r).post or 0,) for r in releases]
    assert keys == sorted(keys)


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
    assert "On glibc 2.28 the newest release whose aarch64 wheels install is vllm-ascend v0.18.0" in message


@pytest.mark.parametrize(("glibc", "available", "release"), [
    ("2.28", None, "0.18.0"),     # Kylin V10: v0.20 and later ship manylinux_2_34 aarch64 wheels only
    ("2.34", None, "0.23.0"),     # openEuler 22.03 / 24.03 (2.38): the newest final with aarch64 wheels
    ("2.35", None, "0.23.0"),     # Ubuntu 22.04
    (None, None, "0.23.0"),
    ("2.38", ["0.11.0", "0.18.0"], "0.18.0"),  # only these bundles are present
    ("2.28", ["0.23.0"], None),   # the only bundle does not install there
    ("2.17", None, "0.9.1"),
])
def test_default_release_follows_the_node(glibc, available, release):
    row = cm.default_release(glibc=glibc, available=available)
    assert (row["vllm_ascend"] if row else None) == release


@pytest.mark.parametrize(("cann", "release"), [("8.3.RC2", "0.11.0"), ("8.5.1", "0.18.0"), ("8.5.0", "0.13.0"),
                                               ("9.1.0", "0.23.0"), ("9.2.0", None)])
def test_default_release_holds_the_cann_of_the_node(cann, release):
    row = cm.default_release(glibc="2.35", cann=cann)
    assert (row["vllm_ascend"] if row else None) == release
