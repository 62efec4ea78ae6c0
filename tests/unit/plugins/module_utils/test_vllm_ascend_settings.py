"""vllm-ascend switches per release (module_utils._vllm_ascend_settings): which form of balance scheduling each
vllm-ascend release reads, and the refusal of a form the node's release ignores.

The expected table is vllm-ascend's own code at each tag
(docs/sources.md, "Balance scheduling per vllm-ascend release"): ``vllm_ascend/envs.py``,
``vllm_ascend/ascend_config.py``, ``vllm_ascend/patch/platform/__init__.py`` and ``patch_balance_schedule.py``
of the git tags up to v0.25.1rc1, the PyPI sdists of 0.26.0rc1, 0.27.1rc1 and 0.30.0rc2.
"""

from __future__ import annotations

import json

import pytest

from ansible_collections.ascendai.vllm.plugins.module_utils import _compat_matrix as compat_matrix
from ansible_collections.ascendai.vllm.plugins.module_utils._vllm_ascend_settings import (
    SETTINGS,
    SettingError,
    ascend_setting_problems,
    reads,
)

ENV = "VLLM_ASCEND_BALANCE_SCHEDULING"
TOP = "enable_balance_scheduling"
NESTED = "scheduler_config.enable_balance_scheduling"


def _forms(release):
    return {form.get("env") or ".".join(form["additional_config"])
            for form in SETTINGS[0]["forms"] if reads(form, release)}


@pytest.mark.parametrize(("release", "forms"), [
    ("0.12.0rc1", set()),                 # envs.py has no such variable yet
    ("0.13.0rc1", {ENV}),                 # patch imported when set, on vLLM 0.13.0 (the release's vLLM)
    ("0.13.0", {ENV}),
    ("0.14.0rc1", set()),                 # patch gated on vLLM 0.14.0; the release runs vLLM 0.14.1
    ("0.15.0rc1", {ENV}),                 # gated on vLLM 0.15.0, its vLLM
    ("0.16.0rc1", set()),                 # patch/platform/__init__.py does not import the patch
    ("0.17.0rc1", set()),
    ("0.18.0rc1", {ENV}), ("0.18.0", {ENV}), ("0.19.1rc1", {ENV}),
    ("0.20.2rc1", {TOP}),                 # the patch reads additional_config only (vllm-ascend #10786)
    ("0.22.1rc1", {TOP}),
    ("0.23.0rc1", {ENV, TOP}),            # #10786: AscendConfig, then additional_config, then the variable
    ("0.23.0", {ENV, TOP}), ("0.23.0.post1", {ENV, TOP}), ("0.24.0rc1", {ENV, TOP}),
    ("0.25.1rc1", {ENV, TOP, NESTED}),    # SchedulerConfig: scheduler_config, then the top-level key, then the variable
    ("0.26.0rc1", {ENV, TOP, NESTED}),
    ("0.27.1rc1", {TOP, NESTED}),         # envs.py no longer defines the variable
    ("0.30.0rc2", {TOP, NESTED}),
])
def test_forms_each_release_reads(release, forms):
    assert _forms(release) == forms


def test_range_bounds_are_releases_of_the_matrix():
    # a bound that is no release would put releases on the wrong side of it without anyone noticing
    known = {row["vllm_ascend"] for row in compat_matrix.all_rows()}
    for form in SETTINGS[0]["forms"]:
        for first, until in form["releases"]:
            assert first in known and (until is None or until in known), (first, until)


def test_the_variable_on_a_release_that_removed_it_names_scheduler_config():
    found = ascend_setting_problems("0.27.1rc1", env={ENV: "1"})
    assert len(found) == 1
    assert found[0].startswith(f"{ENV}=1 in the service environment does not switch balance scheduling on in "
                               "vllm-ascend 0.27.1rc1: that release ignores it (read by vllm-ascend "
                               "0.13.0rc1-0.13.0, 0.15.0rc1, 0.18.0rc1-0.19.1rc1, 0.23.0rc1-0.26.0rc1)")
    # the newest form first: the top-level key is deprecated there
    assert found[0].endswith("vllm-ascend 0.27.1rc1 reads balance scheduling from additional_config: "
                             "{scheduler_config: {enable_balance_scheduling: true}} in the vLLM options or "
                             "additional_config: {enable_balance_scheduling: true} in the vLLM options")


def test_the_tutorials_export_on_its_own_release_passes():
    # vllm-ascend v0.23.0 docs/source/tutorials/models/DeepSeek-R1.md L265 and L314: export ..._SCHEDULING=1
    assert ascend_setting_problems("0.23.0", env={ENV: "1"}) == []
    assert ascend_setting_problems("v0.23.0", env={ENV: 1}) == []


def test_newer_tutorials_form_on_an_older_release_is_refused():
    # v0.23.0's AscendConfig reads additional_config["enable_balance_scheduling"] only: the nested key is ignored
    nested = {"scheduler_config": {"enable_balance_scheduling": True}}
    found = ascend_setting_problems("0.23.0", additional_config=nested)
    assert len(found) == 1 and "(read by vllm-ascend 0.25.1rc1 and later)" in found[0]
    assert found[0].endswith("vllm-ascend 0.23.0 reads balance scheduling from additional_config: "
                             "{enable_balance_scheduling: true} in the vLLM options or "
                             f"{ENV}=1 in the service environment")
    # the same as the JSON text of --additional-config
    assert ascend_setting_problems("0.23.0", additional_config=json.dumps(nested)) == found
    assert ascend_setting_problems("0.25.1rc1", additional_config=nested) == []


def test_a_release_without_a_working_switch_says_so():
    found = ascend_setting_problems("0.16.0rc1", env={ENV: "1"})
    assert found and found[0].endswith("vllm-ascend 0.16.0rc1 has no balance scheduling to switch on")
    assert "reads" in ascend_setting_problems("0.19.1rc1", additional_config={TOP: True})[0]


@pytest.mark.parametrize("value", ["0", 0, "", None, False, "00"])
def test_a_switch_left_off_is_not_refused(value):
    assert ascend_setting_problems("0.27.1rc1", env={ENV: value}) == []
    assert ascend_setting_problems("0.23.0", additional_config={"scheduler_config": {TOP: False}}) == []


def test_without_a_release_nothing_is_checked():
    assert ascend_setting_problems(None, env={ENV: "1"}) == []
    assert ascend_setting_problems("", additional_config={"scheduler_config": {TOP: True}}) == []


@pytest.mark.parametrize(("version", "needle"), [(0.23, "not a version string; quote it"),
                                                 ("latest", "'latest' is not a version")])
def test_bad_release_is_named(version, needle):
    with pytest.raises(SettingError, match=needle):
        ascend_setting_problems(version, env={ENV: "1"})
