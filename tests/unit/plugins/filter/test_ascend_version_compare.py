"""The ascend_version_compare filter: the order DOCUMENTATION states for Ascend driver, firmware and CANN
versions, pre-releases and dated builds, and the errors that name the input."""

from __future__ import annotations

import itertools

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.ascend_version_compare import FilterModule

ascend_version_compare = FilterModule().filters()["ascend_version_compare"]

# Each chain is in ascending order, as DOCUMENTATION gives it.
CHAINS = [
    ["24.1.rc3", "24.1.0", "25.2.0"],
    ["8.2.RC1", "8.2.0"],
    ["7.5.0.1.129", "7.7.0.1.231"],
    ["9.1.0-beta.3", "9.1.0-rc.1", "9.1.0_20260930220649", "9.1.0", "9.1.1"],
    ["9.2.0_20260101000000", "9.2.0_20260930220649"],
]


@pytest.mark.parametrize("chain", CHAINS)
def test_documented_order_both_ways(chain):
    for (i, low), (j, high) in itertools.combinations(enumerate(chain), 2):
        assert i < j
        assert ascend_version_compare(low, high) == -1
        assert ascend_version_compare(high, low) == 1
        assert ascend_version_compare(low, high, "<") is True
        assert ascend_version_compare(low, high, ">=") is False
        assert ascend_version_compare(high, low, "!=") is True


@pytest.mark.parametrize("left,right", [
    ("9.1.0-beta.3", "9.1.0.beta3"),     # Huawei's image name and the dotted form
    ("8.2.RC1", "8.2.rc1"),              # letter case
    ("8.2", "8.2.0.0"),                  # trailing zeros
    ("9.1.0-BETA.3", "9.1.0-beta.3"),
])
def test_documented_equal_forms(left, right):
    assert ascend_version_compare(left, right) == 0
    assert ascend_version_compare(left, right, "==") is True
    assert ascend_version_compare(left, right, "<=") is True
    assert ascend_version_compare(left, right, ">=") is True
    assert ascend_version_compare(left, right, "<") is False


@pytest.mark.parametrize("left,right,needle", [
    ("latest", "8.2.0", r"ascend_version_compare\('latest', '8.2.0'\): not an Ascend version: 'latest'"),
    ("9.1.0-gamma", "9.1.0", r"ascend_version_compare\('9.1.0-gamma', '9.1.0'\): not an Ascend version"),
    ("9.1.0", "9.1.0_abc", r"ascend_version_compare\('9.1.0', '9.1.0_abc'\): not an Ascend version: '9.1.0_abc'"),
    (8.2, "8.2.0", r"input=8.2 is not a version string; quote it in YAML"),
    ("8.2.0", True, r"other=True is not a version string"),
])
def test_bad_versions_are_named(left, right, needle):
    with pytest.raises(AnsibleFilterError, match=needle):
        ascend_version_compare(left, right)


@pytest.mark.parametrize("operator", ["lt", "=<", "", 1])
def test_unknown_operator_is_named(operator):
    with pytest.raises(AnsibleFilterError, match=rf"^ascend_version_compare: operator {operator!r} is not one of "
                                                 r"<, <=, ==, !=, >=, >$"):
        ascend_version_compare("8.2.0", "8.2.0", operator)


@pytest.mark.parametrize("left,right,needle", [
    (824, "8.2.0", "input=824"),
    ("8.2.0", 8, "other=8"),
    (None, "8.2.0", "input=None"),
    ("8.2.0", ["8.2.0"], r"other=\['8.2.0'\]"),
    ({"version": "8.2.0"}, "8.2.0", r"input=\{'version': '8.2.0'\}"),
    (b"8.2.0", "8.2.0", "input=b'8.2.0'"),
])
def test_a_version_that_is_not_a_string_is_refused(left, right, needle):
    # an int is refused like a float: no number is read as a version (824 is not 8.2.4)
    with pytest.raises(AnsibleFilterError, match=rf"^ascend_version_compare: {needle} is not a version string; quote "
                                                 r"it in YAML, e.g\. '8\.2\.0' \(an unquoted 8\.20 is the number "
                                                 r"8\.2\)$"):
        ascend_version_compare(left, right)
