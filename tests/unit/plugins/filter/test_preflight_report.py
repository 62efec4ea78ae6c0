# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""ascendai.vllm.preflight_report / preflight_table (module_utils/_preflight.py): the preflight role's verdict per host.

The verdict is Python, not Jinja in playbooks/preflight.yml, so that it is tested here. The inputs have the shapes
the role registers: Ansible facts, a ``df -P -B1`` line, ``npu_info``'s result as registered with
``failed_when: false``, and the plans of the ascend_driver and ascend_cann roles (roles/*/tasks/plan.yml).
"""

from __future__ import annotations

import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from hypothesis import given, settings
from hypothesis import strategies as st
from ansible_collections.ascendai.vllm.plugins.filter.preflight_report import preflight_report
from ansible_collections.ascendai.vllm.plugins.filter.preflight_table import preflight_table

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
SETTINGS = {"architectures": ["aarch64", "x86_64"], "min_memory_mb": 32768, "model_dir": "/opt/ascendai/models",
            "model_free_gb": 150}
# `df -P -B1 /opt | tail -n 1`: filesystem, 1-byte blocks, used, available, capacity, mount point
DF = "/dev/nvme0n1p2 3936818073600 1010853629952 2725906391040  28% /"
DRIVER = {"driver": {"installed": None, "wanted": "25.2.0", "action": "full"},
          "firmware": {"installed": None, "wanted": "7.7.0.6.236", "action": "full"}}
CANN = {"toolkit": {"installed": None, "wanted": "8.3.RC2", "action": "full"},
        "kernels": {"installed": None, "wanted": "8.3.RC2", "action": "full"},
        "nnal": {"installed": None, "wanted": "8.3.RC2", "action": "full"}}
HEALTHY = {"changed": False, "count": 8, "chip_name": "910B3", "healthy": True, "unhealthy": []}
# npu_info failing with -8005 while nothing holds the devices, registered with failed_when: false (failed is false)
DCMI = {"changed": False, "failed": False, "failed_when_result": False, "kind": "dcmi_init", "rc": 255,
        "msg": "npu-smi info: DCMI module initialize failed. ret is -8005", "cmd": ["/usr/local/sbin/npu-smi", "info"]}


def host(**changes):
    base = {"name": "node1", "architecture": "aarch64", "memtotal_mb": 1546272, "df": DF, "npu": HEALTHY,
            "npu_smi": True, "expected_npus": 8, "driver_plan": DRIVER, "cann_plan": CANN}
    base.update(changes)
    return base


def test_a_deployable_host_has_its_line_and_no_problem():
    out = preflight_report(host(), **SETTINGS)
    assert out["problems"] == []
    assert out["free_gb"] == 2725.9
    assert out["npus"] == "8 910B3 healthy"
    # the line the old Jinja of playbooks/preflight.yml printed for the same host (compared when it moved)
    assert out["row"] == ("node1                    aarch64  1510.0   2725.9  8 910B3 healthy            "
                          "full ->25.2.0 / full ->7.7.0.6.236         full/full/full ->8.3.RC2         none")


def test_table_has_the_header_first():
    rows = [preflight_report(host(name=name), **SETTINGS)["row"] for name in ("node1", "node2")]
    lines = preflight_table(rows)
    assert lines[0].split()[:4] == ["host", "arch", "mem", "GiB"]
    assert "CANN toolkit / kernels / nnal" in lines[0]
    assert lines[1:] == rows


@pytest.mark.parametrize(("changes", "problem"), [
    ({"architecture": "ppc64le"}, "CPU ppc64le is not one of aarch64, x86_64"),
    ({"memtotal_mb": 15885}, "memory 15885 MB < 32768 MB (preflight_min_memory_mb)"),
    ({"df": "overlay 107374182400 96636764160 10737418240 90% /"},
     "/opt/ascendai/models: 10.7 GB free < 150 GB (preflight_model_free_gb)"),
    ({"npu": dict(HEALTHY, count=7)}, "7 NPUs, expected 8 (ascend_driver_expected_npus)"),
    ({"npu": dict(HEALTHY, healthy=False, unhealthy=[{"npu_id": 3, "health": "Alarm"}, {"npu_id": 5}])},
     "unhealthy NPUs: 3, 5"),
    ({"driver_plan": dict(DRIVER, driver={"installed": "25.3.rc1", "wanted": "25.2.0", "action": "refuse"})},
     "driver: installed is newer than wanted (downgrade refused)"),
    ({"cann_plan": dict(CANN, nnal={"installed": "8.5.0", "wanted": "8.3.RC2", "action": "refuse"})},
     "nnal: installed is newer than wanted (downgrade refused)"),
])
def test_each_problem_names_its_setting(changes, problem):
    out = preflight_report(host(**changes), **SETTINGS)
    assert out["problems"] == [problem]
    assert out["row"].endswith("  " + problem) or out["row"].endswith(" " + problem)


def test_any_npu_count_when_none_is_expected():
    assert preflight_report(host(npu=dict(HEALTHY, count=16), expected_npus=0), **SETTINGS)["problems"] == []


def test_a_failing_npu_smi_is_shown_not_a_crash():
    """Registered with failed_when: false, a failed npu_info has failed=false and no count: the old Jinja took it
    for a result and failed on the missing ``healthy`` (the table never came)."""
    out = preflight_report(host(npu=DCMI), **SETTINGS)
    assert out["npus"] == "npu-smi: DCMI init failed (-8005: driver not loaded, reboot pending or devices held)"
    assert out["problems"] == []
    unknown = preflight_report(host(npu={"failed": False, "kind": "unknown", "msg": "npu-smi failed"}), **SETTINGS)
    assert unknown["npus"] == "npu-smi: unknown"


def test_before_npu_smi_is_installed():
    out = preflight_report(host(npu={}, npu_smi=False), **SETTINGS)
    assert out["npus"] == "no npu-smi yet"
    assert out["problems"] == []


def test_installed_versions_in_the_columns():
    driver = {"driver": {"installed": "24.1.rc2", "wanted": "25.2.0", "action": "upgrade"},
              "firmware": {"installed": "7.5.0.1.129", "wanted": "7.7.0.6.236", "action": "upgrade"}}
    cann = {kind: {"installed": "8.0.RC3", "wanted": "8.3.RC2", "action": "upgrade"} for kind in CANN}
    row = preflight_report(host(driver_plan=driver, cann_plan=cann), **SETTINGS)["row"]
    assert "upgrade 24.1.rc2>25.2.0 / upgrade 7.5.0.1.129>7.7.0.6.236" in row
    assert "upgrade/upgrade/upgrade 8.0.RC3>8.3.RC2" in row


def test_an_empty_df_line_is_no_free_space():
    out = preflight_report(host(df=""), **SETTINGS)
    assert out["problems"] == ["/opt/ascendai/models: 0.0 GB free < 150 GB (preflight_model_free_gb)"]


@pytest.mark.parametrize(("data", "kwargs", "message"), [
    (["node1"], SETTINGS, "the input must be the host's mapping"),
    (host(), dict(SETTINGS, min_memory_mb=None), "give min_memory_mb"),
    (host(), dict(SETTINGS, architectures="aarch64"), "architectures must be a list"),
    (host(memtotal_mb="lots"), SETTINGS, "memtotal_mb must be a number"),
    (host(expected_npus=float("inf")), SETTINGS, "ascend_driver_expected_npus must be a finite number"),
    (host(free_bytes=float("nan")), SETTINGS, "free_bytes must be a finite number"),
    (host(npu="8 NPUs"), SETTINGS, "npu must be npu_info's result"),
    (host(cann_plan={"toolkit": "full"}), SETTINGS, "cann_plan must map each component"),
    ({"name": "node1"}, SETTINGS, "the host's architecture is missing"),
    # no value is turned into text or a number it is not
    (host(), dict(SETTINGS, architectures=["aarch64", 8]),
     r"^preflight_report: architectures must be a list of CPU architectures \(strings, e\.g\. \['aarch64'\]\), "
     r"got \['aarch64', 8\]"),
    (host(), dict(SETTINGS, model_dir=["/opt"]),
     r"^preflight_report: model_dir must be the model directory \(preflight_model_dir, a path\), got \['/opt'\]"),
    (host(), dict(SETTINGS, model_dir=""),
     r"^preflight_report: model_dir must be the model directory \(preflight_model_dir, a path\), got ''"),
    (host(), dict(SETTINGS, min_memory_mb=True),
     r"^preflight_report: preflight_min_memory_mb must be a number, got True"),
    (host(name=None), SETTINGS, r"^preflight_report: name must be the host's name \(a string\), got None"),
    (host(df=DF.split()), SETTINGS, r"^preflight_report: df must be the line of 'df -P -B1 DIR \| tail -n 1' \(its "
                                    r"stdout, a string\), got \['/dev/nvme0n1p2', "),
])
def test_bad_input_says_what_to_give(data, kwargs, message):
    with pytest.raises(AnsibleFilterError, match=message):
        preflight_report(data, **kwargs)


def test_preflight_playbook_is_a_thin_wrapper():
    with open(os.path.join(ROOT, "playbooks", "preflight.yml"), encoding="utf-8") as handle:
        plays = yaml.safe_load(handle)
    # first the bootstrap's probe (which Python the modules run with; it installs nothing), then the role alone
    assert len(plays) == 2 and plays[0]["gather_facts"] is False
    probe = plays[0]["tasks"][0]
    assert probe["ansible.builtin.include_role"] == {
        "name": "ascendai.vllm.python_runtime", "tasks_from": "bootstrap.yml"}
    assert probe["vars"] == {"python_runtime_bootstrap_install": False}
    assert "vars" not in plays[1] and "tasks" not in plays[1]
    assert [r if isinstance(r, str) else r["role"] for r in plays[1]["roles"]] == ["ascendai.vllm.preflight"]


_values = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=8),
                    st.lists(st.integers(), max_size=2),
                    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))


@settings(max_examples=300, deadline=None)
@given(st.fixed_dictionaries({}, optional={key: _values for key in (
    "name", "architecture", "memtotal_mb", "df", "free_bytes", "npu", "npu_smi", "expected_npus", "driver_plan",
    "cann_plan")}))
def test_hostile_host_gives_a_result_or_a_filter_error(data):
    try:
        out = preflight_report(data, **SETTINGS)
    except AnsibleFilterError as exc:
        assert str(exc).startswith("preflight_report: ")
    else:
        assert isinstance(out["row"], str) and isinstance(out["problems"], list)
