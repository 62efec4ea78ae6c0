"""benchmarks/site_scale.py's pure parts: recap and profile parsing, the floor playbook, the ratios."""

from __future__ import annotations

import importlib.util
import os

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_SPEC = importlib.util.spec_from_file_location("site_scale", os.path.join(ROOT, "benchmarks", "site_scale.py"))
scale = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(scale)

# The end of an ansible-core run with ansible.posix.profile_tasks and profile_roles enabled (the shape of
# their summaries: plugins/callback/profile_tasks.py and profile_roles.py of ansible.posix 2.1.0), two hosts.
OUTPUT = """\
TASK [ascendai.vllm.model : Verify the model] **********************************
Thursday 03 December 2026  14:02:11 +0000 (0:00:01.204)       0:01:40.330 *****
ok: [scale-1]
ok: [scale-2]

PLAY RECAP *********************************************************************
scale-1                    : ok=141  changed=0    unreachable=0    failed=0    skipped=57   rescued=0    ignored=0
scale-2                    : ok=141  changed=0    unreachable=0    failed=0    skipped=57   rescued=0    ignored=0

TASKS RECAP ********************************************************************
Thursday 03 December 2026  14:02:12 +0000 (0:00:00.873)       0:01:41.203 *****
===============================================================================
ascendai.vllm.python_runtime : Read the versions of the venvs' packages --- 6.12s
Gathering Facts --------------------------------------------------------- 3.80s
ascendai.vllm.ascend_cann : Check the wheelhouse's packages ------------- 2.50s

ROLES RECAP ********************************************************************
Thursday 03 December 2026  14:02:12 +0000 (0:00:00.874)       0:01:41.204 *****
===============================================================================
ascendai.vllm.ascend_cann ---------------------------------------------- 30.11s
ascendai.vllm.os_prep -------------------------------------------------- 12.00s
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
total ------------------------------------------------------------------ 42.11s
"""


def test_parse_recap_reads_every_host():
    recap = scale.parse_recap(OUTPUT)
    assert sorted(recap) == ["scale-1", "scale-2"]
    assert recap["scale-1"] == {"ok": 141, "changed": 0, "unreachable": 0, "failed": 0, "skipped": 57,
                                "rescued": 0, "ignored": 0}


def test_parse_recap_takes_the_last_recap_and_fails_without_one():
    two = OUTPUT.replace("ok=141", "ok=7", 2) + "\nPLAY RECAP ***\nscale-1 : ok=3 changed=1 unreachable=0 " \
        "failed=0 skipped=0 rescued=0 ignored=0\n"
    assert scale.parse_recap(two) == {"scale-1": {"ok": 3, "changed": 1, "unreachable": 0, "failed": 0,
                                                  "skipped": 0, "rescued": 0, "ignored": 0}}
    with pytest.raises(ValueError, match="no PLAY RECAP"):
        scale.parse_recap("PLAY [x] ***\nok: [scale-1]\n")


def test_tasks_per_host_and_changed_hosts():
    recap = scale.parse_recap(OUTPUT)
    count, per_host = scale.tasks_per_host(recap)
    assert count == 198 and per_host == {"scale-1": 198, "scale-2": 198}
    assert scale.changed_hosts(recap) == []
    recap["scale-2"]["changed"] = 2
    recap["scale-1"]["unreachable"] = 1
    assert scale.changed_hosts(recap) == ["scale-1", "scale-2"]


def test_parse_profile_reads_tasks_and_roles_after_the_recap():
    rows = scale.parse_profile(OUTPUT)
    assert rows == [
        ("ascendai.vllm.python_runtime : Read the versions of the venvs' packages", 6.12),
        ("Gathering Facts", 3.80),
        ("ascendai.vllm.ascend_cann : Check the wheelhouse's packages", 2.50),
        ("ascendai.vllm.ascend_cann", 30.11),
        ("ascendai.vllm.os_prep", 12.00),
        ("total", 42.11),
    ]


def test_floor_playbook_has_facts_in_each_play_and_the_pings():
    book = yaml.safe_load(scale.floor_playbook(7))
    assert [p["gather_facts"] for p in book] == [True, True]
    assert [len(p["tasks"]) for p in book] == [4, 3]
    assert all(list(t) == ["name", "ansible.builtin.ping"] for p in book for t in p["tasks"])
    assert [len(p["tasks"]) for p in yaml.safe_load(scale.floor_playbook(0))] == [0, 0]
    with pytest.raises(ValueError):
        scale.floor_playbook(-1)


def test_report_rows_ratios_and_targets():
    rows = scale.report_rows({
        1: {"noop": 100.0, "floor": 90.0, "rss": 200 * 2**20, "load": (2.0, 1.5, 1.0), "tasks": 198},
        2: {"noop": 110.0, "floor": 100.0, "rss": 300 * 2**20, "load": (2.5, 1.5, 1.0), "tasks": 198},
        8: {"noop": 140.0, "floor": 110.0, "rss": 600 * 2**20, "load": (4.0, 3.0, 2.0), "tasks": 198},
    })
    assert [r["n"] for r in rows] == [1, 2, 8]
    assert rows[0]["vs_floor"] == pytest.approx(100 / 90) and rows[0]["floor_ok"] is True
    assert rows[2]["vs_floor"] == pytest.approx(140 / 110) and rows[2]["floor_ok"] is False
    assert rows[1]["vs_one"] == pytest.approx(1.1) and rows[1]["scale_ok"] is None   # checked at the largest N
    assert rows[2]["vs_one"] == pytest.approx(1.4) and rows[2]["scale_ok"] is False
    assert rows[2]["rss_mib"] == pytest.approx(600)
    table = scale.format_table(rows)
    assert "1.27 MISS" in table and "1.40 MISS" in table and "1.11 ok" in table
    assert "no-op/floor <= 1.2" in table and "no-op(8)/no-op(1) <= 1.3" in table


def test_report_rows_without_one_node_has_no_scale_ratio():
    rows = scale.report_rows({2: {"noop": 10.0, "floor": None}})
    assert rows[0]["vs_one"] is None and rows[0]["vs_floor"] is None
    assert "-" in scale.format_table(rows)


def test_tree_rss_sums_a_process_tree(tmp_path):
    def proc(pid, ppid, rss_kb, comm="ansible-playbook"):
        d = tmp_path / str(pid)
        d.mkdir()
        (d / "stat").write_text("%d (%s) S %d 1 1 0 -1\n" % (pid, comm, ppid))
        (d / "status").write_text("Name:\t%s\nVmRSS:\t  %d kB\n" % (comm, rss_kb))

    proc(10, 1, 1000)
    proc(11, 10, 200, comm="docker exec")       # a command name with a space
    proc(12, 11, 30)
    proc(13, 1, 99999)                           # not in the tree
    (tmp_path / "self").mkdir()
    assert scale.tree_rss(10, proc=str(tmp_path)) == (1000 + 200 + 30) * 1024
    assert scale.tree_rss(11, proc=str(tmp_path)) == 230 * 1024


def test_machine_cpu_counts_idle_and_iowait_as_not_busy(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice: the "cpu" line of /proc/stat (proc_stat(5))
    stat.write_text("cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 50 2 25 400 20 1 1 0 0 0\n")
    assert scale.machine_cpu(str(stat)) == (160, 1000)


def test_container_cpu_ns_reads_cgroup_v1_and_v2(tmp_path):
    v1 = tmp_path / "v1" / "cpuacct" / "docker" / "abc"
    v1.mkdir(parents=True)
    (v1 / "cpuacct.usage").write_text("20256701869\n")
    assert scale.container_cpu_ns("abc", root=str(tmp_path / "v1")) == 20256701869
    v2 = tmp_path / "v2" / "system.slice" / "docker-abc.scope"
    v2.mkdir(parents=True)
    (v2 / "cpu.stat").write_text("usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n")
    assert scale.container_cpu_ns("abc", root=str(tmp_path / "v2")) == 1500000
    assert scale.container_cpu_ns("gone", root=str(tmp_path / "v2")) is None


def test_table_shows_cpu_split():
    rows = scale.report_rows({1: {"noop": 10.0, "floor": 9.0, "cpu": {"controller": 5.2, "nodes": 1.1, "busy": 0.93}}})
    assert "5/1/93" in scale.format_table(rows)
