"""compat_stack: the one stack decision, against the same compatibility rows compat_row returns."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.compat_row import FilterModule as RowFilters
from ansible_collections.ascendai.vllm.plugins.filter.compat_stack import FilterModule

compat_stack = FilterModule().filters()["compat_stack"]
compat_row = RowFilters().filters()["compat_row"]


@pytest.mark.parametrize("release", ["0.9.1", "0.11.0", "0.18.0", "0.23.0"])
def test_a_pinned_release_takes_its_row(release):
    row = compat_row(release)
    stack = compat_stack(release)
    assert stack["vllm_ascend"] == row["vllm_ascend"]
    assert stack["cann"] == row["cann"][-1] and stack["cann_versions"] == row["cann"]
    assert (stack["torch"], stack["torch_npu"], stack["torch_npu_pin"]) == \
        (row["torch"], row["torch_npu"], row["torch_npu_pin"])
    assert stack["triton_ascend"] == row["triton_ascend"]
    assert stack["source"]["vllm_ascend"] == "vllm_ascend_version"
    assert stack["source"]["cann"] == f"row {row['label']} of the compatibility matrix"
    assert stack["asked"] == release


def test_v_prefix_and_latest():
    assert compat_stack("v0.11.0")["vllm_ascend"] == "0.11.0"
    assert compat_stack("latest")["vllm_ascend"] == compat_row("latest")["vllm_ascend"]


@pytest.mark.parametrize(("glibc", "available"), [
    (None, None), ("2.28", None), ("2.34", None), ("2.28", ["0.11.0", "0.18.0"]), ("2.36", ["0.11.0"]),
    ("", ["0.9.1", "0.11.0"]),
])
def test_the_default_is_compat_rows_choice(glibc, available):
    """The default release is the one compat_row('latest') gives for the same node: one choice, not two."""
    stack = compat_stack("", glibc=glibc, available=available)
    assert stack["vllm_ascend"] == compat_row("latest", glibc=glibc, available=available)["vllm_ascend"]
    assert stack["source"]["vllm_ascend"].startswith("default: the newest final release")
    if glibc:
        assert f"glibc {glibc}" in stack["source"]["vllm_ascend"]
        assert stack["glibc"] == glibc
    if available is not None:
        assert stack["vllm_ascend"] in available


def test_kylin_v10_gets_v0_18_0():
    # compat_matrix.default_release's docstring and the README: glibc 2.28 takes v0.18.0 (CANN 8.5.1)
    stack = compat_stack("", glibc="2.28")
    assert (stack["vllm_ascend"], stack["cann"]) == ("0.18.0", "8.5.1")


def test_a_pinned_release_is_not_narrowed_by_the_node():
    # the node's glibc is checked later (compat_check names it); the decision keeps what was asked for
    assert compat_stack("0.23.0", glibc="2.28")["vllm_ascend"] == "0.23.0"


@pytest.mark.parametrize(("args", "kwargs", "words"), [
    (("0.99.0",), {}, ["vllm_ascend_version=0.99.0", "not in the compatibility table"]),
    (("",), {"glibc": "2.28", "available": ["0.23.0"]}, ["glibc 2.28", "0.23.0", "set vllm_ascend_version"]),
    (("",), {"available": []}, ["(none)", "bundle one"]),
    ((0.1,), {}, ["quoted version string"]),
    (("",), {"glibc": 2.3}, ["glibc=2.3", "quote it"]),
    (("",), {"available": "0.11.0"}, ["available must be a list"]),
    (("",), {"available": [0.11]}, ["available must be a list"]),
])
def test_refusals_name_the_setting_and_the_fix(args, kwargs, words):
    with pytest.raises(AnsibleFilterError) as err:
        compat_stack(*args, **kwargs)
    for word in words:
        assert word in str(err.value)
