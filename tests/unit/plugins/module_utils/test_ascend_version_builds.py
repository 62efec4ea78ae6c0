"""Huawei's pre-release and dated CANN builds: ``9.1.0-beta.3`` (Huawei's CANN images) and ``9.2.0_<timestamp>``
(dated builds): parsed, and ordered as the ascend_version_compare filter documents."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.ascendai.vllm.plugins.filter.ascend_version_compare import ascend_version_compare
from ansible_collections.ascendai.vllm.plugins.module_utils import _ascend_packages as ap

# The documented order: alpha < beta < rc < a dated build < the release; dated builds by their timestamp.
ORDER = ["9.0.0", "9.1.0-alpha.1", "9.1.0-beta.1", "9.1.0-beta.2", "9.1.0-beta.3", "9.1.0-beta.10", "9.1.0-rc.1",
         "9.1.0_20260101000000", "9.1.0_20260930220649", "9.1.0", "9.1.1", "9.2.0-beta.1", "9.2.0_20260930220649",
         "9.2.0"]


def test_huawei_builds_in_the_documented_order():
    assert sorted(reversed(ORDER), key=ap.sort_key) == ORDER
    for older, newer in zip(ORDER, ORDER[1:]):
        assert ap.compare_versions(older, newer) == -1, (older, newer)
        assert ap.compare_versions(newer, older) == 1, (older, newer)


@pytest.mark.parametrize("a,b,expected", [
    ("9.1.0-beta.3", "9.1.0", -1), ("9.1.0-beta.3", "9.1.0.beta3", 0), ("9.1.0-BETA.3", "9.1.0-beta.3", 0),
    ("9.2.0_20260930220649", "9.2.0", -1), ("9.2.0_20260930220649", "9.1.0", 1), ("8.3.RC2", "9.1.0-beta.3", -1),
    ("9.1.0-beta.3", "9.1.0-rc.1", -1),
])
def test_compare(a, b, expected):
    assert ap.compare_versions(a, b) == expected
    assert ascend_version_compare(a, b) == expected


@pytest.mark.parametrize("bad", ["9.1.0-", "9.1.0-gamma.1", "9.1.0_", "9.1.0_abc", "9.1.0__20260930", "9.1.0-beta.x"])
def test_still_not_a_version(bad):
    with pytest.raises(ap.AscendVersionError):
        ap.version_key(bad)


_num = st.integers(0, 30).map(str)
_part = st.one_of(st.integers(0, 300).map(str), st.integers(0, 9).map(lambda n: f"rc{n}"),
                  st.integers(0, 9).map(lambda n: f"RC{n}"))
_pre = st.one_of(st.just(""),
                 st.builds(lambda w, n: f"-{w}.{n}", st.sampled_from(["alpha", "beta", "rc", "Beta", "RC"]),
                           st.integers(0, 12)),
                 st.integers(20250101000000, 20271231235959).map(lambda n: f"_{n}"))
_version = st.builds(lambda first, rest, pre: ".".join([first] + rest) + pre, _num, st.lists(_part, max_size=3), _pre)


@given(_version, _version)
def test_total_and_antisymmetric(x, y):
    order = ap.compare_versions(x, y)
    assert order in (-1, 0, 1)
    assert ap.compare_versions(y, x) == -order
    assert ap.compare_versions(x, x) == 0


@given(_version, _version, _version)
def test_transitive(x, y, z):
    if ap.compare_versions(x, y) <= 0 and ap.compare_versions(y, z) <= 0:
        assert ap.compare_versions(x, z) <= 0
    if ap.compare_versions(x, y) == 0 and ap.compare_versions(y, z) == 0:
        assert ap.compare_versions(x, z) == 0


@given(st.sampled_from(["9.1.0", "8.5.1", "25.5.1", "7.8.0.6.201"]), _pre.filter(bool))
def test_a_build_sorts_before_its_release(base, pre):
    assert ap.compare_versions(base + pre, base) == -1
