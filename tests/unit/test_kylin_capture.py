"""The committed capture of the old site.yml on the Kylin V10 node: it failed at its first task (fact gathering under
python3 3.7), which the bootstrap play now comes before."""

from __future__ import annotations

import os

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CAPTURE = os.path.join(ROOT, "tests", "unit", "fixtures", "kylin-v10-node", "old-site-yml-first-task.log")


def test_old_site_yml_failed_at_its_first_task_under_python_3_7():
    text = open(CAPTURE, encoding="utf-8").read()
    tasks = [line for line in text.splitlines() if line.startswith("TASK [")]
    assert tasks == ["TASK [Gathering Facts] *********************************************************"]
    assert "discovered_interpreter_python: /usr/bin/python3" in text
    assert "SyntaxError: invalid syntax" in text
    assert "failed=1" in text.splitlines()[-2] or "failed=1" in text


def test_site_yml_now_starts_with_the_bootstrap_before_any_fact_gathering():
    site = yaml.safe_load(open(os.path.join(ROOT, "playbooks", "site.yml"), encoding="utf-8"))
    assert site[0]["ansible.builtin.import_playbook"] == "bootstrap.yml"
    boot = yaml.safe_load(open(os.path.join(ROOT, "playbooks", "bootstrap.yml"), encoding="utf-8"))
    assert [play["gather_facts"] for play in boot] == [False]
    tasks = yaml.safe_load(open(os.path.join(ROOT, "roles", "python_runtime", "tasks", "bootstrap.yml"),
                                encoding="utf-8"))
    # the first task that touches the node is raw: no Python needed there
    assert "ansible.builtin.raw" in tasks[0]
