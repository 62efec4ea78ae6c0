"""The ascend_version_compare and ascend_version_in_ranges filters."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.ascendai.vllm.plugins.filter import ascend_version_compare as cmp_mod
from ansible_collections.ascendai.vllm.plugins.filter import ascend_version_in_ranges as rng_mod
from ansible_collections.ascendai.vllm.plugins.filter.ascend_version_compare import ascend_version_compare
from ansible_collections.ascendai.vllm.plugins.filter.ascend_version_in_ranges import ascend_version_in_ranges


def test_registered():
    assert cmp_mod.FilterModule().filters() == {"ascend_version_compare": ascend_version_compare}
    assert rng_mod.FilterModule().filters() == {"ascend_version_in_ranges": ascend_version_in_ranges}


def test_compare_values_and_operators():
    assert ascend_version_compare("24.1.rc3", "24.1.0") == -1
    assert ascend_version_compare("25.2.0", "24.1.0") == 1
    assert ascend_version_compare("8.2.RC1", "8.2.rc1") == 0
    assert ascend_version_compare("7.5.0.1.129", "7.7.0.1.231", "<") is True
    assert ascend_version_compare("8.3.RC2", "8.2.0", "<=") is False


def test_compare_errors_name_the_input():
    with pytest.raises(AnsibleFilterError, match=r"ascend_version_compare\('latest', '25.2.0'\): not an Ascend"):
        ascend_version_compare("latest", "25.2.0")
    with pytest.raises(AnsibleFilterError, match="quote it in YAML"):
        ascend_version_compare(8.2, "8.2.0")
    with pytest.raises(AnsibleFilterError, match="operator '=<' is not one of"):
        ascend_version_compare("8.2.0", "8.2.0", "=<")


def test_in_ranges_versions_and_families():
    assert ascend_version_in_ranges("7.7.0.1.231", "[7.0.0,7.7.99]") is True
    assert ascend_version_in_ranges("7.1.0.11.220", "[7.0.0,7.0.99]") is False
    assert ascend_version_in_ranges("23.0.rc3.2", "[23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.]") is True
    assert ascend_version_in_ranges("V100R001C23SPC001B211", "[V100R001C21],[V100R001C23]") is True
    assert ascend_version_in_ranges("V100R001C25SPC001B211", "[V100R001C21],[V100R001C23]") is False


def test_in_ranges_errors():
    with pytest.raises(AnsibleFilterError, match=r"ranges='' holds no \[low,high\]"):
        ascend_version_in_ranges("7.7.0.1.231", "")
    with pytest.raises(AnsibleFilterError, match="not an Ascend version"):
        ascend_version_in_ranges("seven", "[7.0.0,7.7.99]")
