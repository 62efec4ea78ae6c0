"""monitoring on openEuler and Kylin V10: the package names come from what the distributions publish.

openEuler: the CloudNative SIG's project list has src-openeuler/prometheus (2.20.0) and src-openeuler/node_exporter
(1.0.1) "已落版本" (in the release): packages ``prometheus`` and ``node_exporter``
(https://github.com/openeuler-mirror/cloudnative/blob/ecc73a05e61313d7e94afe05cf538dff055c4e87/Projects.md).
``prometheus2`` is in no list. Kylin V10: no published package list carries either, so the role stops before it
installs anything and says what to provide, unless a repository holding them is named.
"""

from __future__ import annotations

import os

import yaml

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import run_playbook

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
VARS = os.path.join(ROOT, "roles", "monitoring", "vars")


def load(name):
    with open(os.path.join(VARS, name)) as handle:
        return yaml.safe_load(handle)


def test_openeuler_names_from_the_published_list():
    data = load("openEuler.yml")
    assert data["_monitoring_prometheus_packages"] == ["prometheus"]
    assert data["_monitoring_node_exporter_packages"] == ["node_exporter"]
    assert data["_monitoring_not_in_distribution"] == []


def test_kylin_ships_neither():
    data = load("Kylin_Linux_Advanced_Server.yml")
    assert data["_monitoring_not_in_distribution"] == ["prometheus", "node_exporter"]
    assert "prometheus2" not in str(data)


def play(**variables):
    return [{"hosts": "localhost", "gather_facts": False,
             "vars_files": [os.path.join(VARS, "Kylin_Linux_Advanced_Server.yml")], "vars": variables,
             "tasks": [{"name": "Check", "ansible.builtin.include_role": {"name": "ascendai.vllm.monitoring",
                                                                          "tasks_from": "packages_check"}}]}]


def test_kylin_stops_with_what_to_provide(tmp_path):
    proc = run_playbook(tmp_path, play())
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert "Kylin" in out and "prometheus, node_exporter" in out and "monitoring_rpm_enablerepo" in out, out[-3000:]


def test_kylin_with_a_repository_that_has_them(tmp_path):
    proc = run_playbook(tmp_path, play(monitoring_rpm_enablerepo=["ascendai-monitoring"]))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_kylin_without_prometheus_needs_only_node_exporter(tmp_path):
    proc = run_playbook(tmp_path, play(monitoring_prometheus_install=False))
    assert proc.returncode != 0
    out = " ".join(proc.stdout.split())
    assert "node_exporter" in out and "prometheus, node_exporter" not in out, out[-3000:]
