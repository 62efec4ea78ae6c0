"""The monitoring role's alert rules and dashboard, checked by Prometheus' own promtool.

The rules template is rendered by Ansible's template module over the role's defaults (one ansible-playbook run for
the module), then
``promtool check rules`` validates it and ``promtool test rules`` feeds it series and reads which alerts fire.
Every dashboard query is checked as PromQL the same way. Skipped only where promtool is not installed
(Debian: apt-get install prometheus).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest
import yaml

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import ROOT, render_templates

ROLE = os.path.join(ROOT, "roles", "monitoring")
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) not installed")


RULES = os.path.join(ROLE, "templates", "ascendai-vllm.rules.yml.j2")
RENDERED = {
    "rules": (RULES, {}),
    "rules-ttft-1.5": (RULES, {"monitoring_alert_ttft_p99_seconds": 1.5}),
    "rules-ttft-10": (RULES, {"monitoring_alert_ttft_p99_seconds": 10}),
    "datasources": (os.path.join(ROLE, "templates", "grafana-datasources.yml.j2"), {
        "_monitoring_grafana_datasource_uid": "x", "monitoring_grafana_prometheus_url": "",
        "_monitoring_prometheus_url": "http://127.0.0.1:9090"}),
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    return render_templates(tmp_path_factory.mktemp("monitoring"), RENDERED,
                            vars_files=[os.path.join(ROLE, "defaults", "main.yml")])


def promtool(*args, cwd=None):
    return subprocess.run([PROMTOOL] + list(args), cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True, check=False)


def test_rules_render_with_the_thresholds(rendered):
    rules = yaml.safe_load(rendered["rules-ttft-1.5"])
    alerts = {r["alert"]: r for g in rules["groups"] for r in g["rules"]}
    assert {"AscendNpuUnhealthy", "AscendNpuHbmHigh", "AscendNpuLinkDown", "VllmTimeToFirstTokenP99High",
            "VllmRequestsWaiting", "VllmDown"} <= set(alerts)
    assert alerts["VllmTimeToFirstTokenP99High"]["expr"].rstrip().endswith("> 1.5")
    assert "vllm:time_to_first_token_seconds_bucket" in alerts["VllmTimeToFirstTokenP99High"]["expr"]
    assert alerts["AscendNpuHbmHigh"]["expr"].rstrip().endswith("> 95")
    assert alerts["AscendNpuUnhealthy"]["annotations"]["summary"] == \
        "NPU {{ $labels.id }} on {{ $labels.instance }} is not healthy"


@needs_promtool
def test_promtool_checks_the_rules(tmp_path, rendered):
    (tmp_path / "rules.yml").write_text(rendered["rules"])
    proc = promtool("check", "rules", str(tmp_path / "rules.yml"))
    assert proc.returncode == 0, proc.stdout
    assert "SUCCESS: 12 rules found" in proc.stdout


SERIES = [
    # NPU 2 goes from OK to unhealthy after 1 minute; NPU 0 stays healthy
    ('npu_chip_info_health_status{instance="n1:9100",job="node",id="2"}', "1 1 1 1 0+0x60"),
    ('npu_chip_info_health_status{instance="n1:9100",job="node",id="0"}', "1+0x60"),
    # NIC of device 1 DOWN from the start
    ('npu_chip_info_link_status{instance="n1:9100",job="node",id="1"}', "0+0x60"),
    # NIC 3 net health Init (not configured): 1 as NPU Exporter counts it, no alert; NIC 0 'Receive timeout': alert
    ('npu_chip_info_network_status{instance="n1:9100",job="node",id="3"}', "1+0x60"),
    ('ascendai_npu_net_health_info{instance="n1:9100",job="node",id="3",status="Init"}', "1+0x60"),
    ('npu_chip_info_network_status{instance="n1:9100",job="node",id="0"}', "0+0x60"),
    # HBM 62000 of 65536 MB = 94.6 % (below 95) on id 0, 64000 = 97.7 % on id 1
    ('npu_chip_info_hbm_used_memory{instance="n1:9100",job="node",id="0"}', "62000+0x60"),
    ('npu_chip_info_hbm_total_memory{instance="n1:9100",job="node",id="0"}', "65536+0x60"),
    ('npu_chip_info_hbm_used_memory{instance="n1:9100",job="node",id="1"}', "64000+0x60"),
    ('npu_chip_info_hbm_total_memory{instance="n1:9100",job="node",id="1"}', "65536+0x60"),
    # vLLM: first tokens all slower than 2.5 s (bucket le=2.5 stays 0) -> p99 ~ 5 s > 2 s
    ('vllm:time_to_first_token_seconds_bucket{instance="n1:8000",job="vllm",model_name="m",le="1"}', "0+0x60"),
    ('vllm:time_to_first_token_seconds_bucket{instance="n1:8000",job="vllm",model_name="m",le="2.5"}', "0+0x60"),
    ('vllm:time_to_first_token_seconds_bucket{instance="n1:8000",job="vllm",model_name="m",le="5"}', "0+10x60"),
    ('vllm:time_to_first_token_seconds_bucket{instance="n1:8000",job="vllm",model_name="m",le="+Inf"}', "0+10x60"),
    ('vllm:num_requests_waiting{instance="n1:8000",job="vllm",model_name="m"}', "25+0x60"),
    ('up{instance="n2:8000",job="vllm"}', "0+0x60"),
    ('up{instance="n1:8000",job="vllm"}', "1+0x60"),
]


def _firing(names_labels):
    return [{"labels": 'ALERTS{alertname="%s",alertstate="firing",%s}' % (name, labels), "value": 1}
            for name, labels in names_labels]


@needs_promtool
def test_promtool_fires_the_right_alerts(tmp_path, rendered):
    (tmp_path / "rules.yml").write_text(rendered["rules"])
    test = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            "input_series": [{"series": s, "values": v} for s, v in SERIES],
            "promql_expr_test": [
                {"expr": 'ALERTS{alertname=~"AscendNpu.*",alertstate="firing"}', "eval_time": "3m",
                 "exp_samples": _firing([
                     ("AscendNpuLinkDown", 'id="1",instance="n1:9100",job="node",severity="critical"'),
                     ("AscendNpuUnhealthy", 'id="2",instance="n1:9100",job="node",severity="critical"'),
                 ])},
                {"expr": 'ALERTS{alertname=~"AscendNpu.*",alertstate="firing"}', "eval_time": "11m",
                 "exp_samples": _firing([
                     ("AscendNpuHbmHigh", 'id="1",instance="n1:9100",job="node",severity="warning"'),
                     ("AscendNpuLinkDown", 'id="1",instance="n1:9100",job="node",severity="critical"'),
                     ("AscendNpuNetHealthFailed", 'id="0",instance="n1:9100",job="node",severity="warning"'),
                     ("AscendNpuUnhealthy", 'id="2",instance="n1:9100",job="node",severity="critical"'),
                 ])},
                {"expr": 'ALERTS{alertname=~"Vllm.*",alertstate="firing"}', "eval_time": "11m",
                 "exp_samples": _firing([
                     ("VllmDown", 'instance="n2:8000",job="vllm",severity="critical"'),
                     ("VllmRequestsWaiting", 'instance="n1:8000",job="vllm",model_name="m",severity="warning"'),
                     ("VllmTimeToFirstTokenP99High", 'instance="n1:8000",model_name="m",severity="warning"'),
                 ])},
            ],
        }],
    }
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    proc = promtool("test", "rules", "test.yml", cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout


@needs_promtool
def test_higher_slo_silences_the_ttft_alert(tmp_path, rendered):
    (tmp_path / "rules.yml").write_text(rendered["rules-ttft-10"])
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "15s", "tests": [{
        "interval": "15s",
        "input_series": [{"series": s, "values": v} for s, v in SERIES if "time_to_first" in s],
        "promql_expr_test": [{"expr": 'ALERTS{alertname="VllmTimeToFirstTokenP99High"}', "eval_time": "11m",
                              "exp_samples": []}]}]}
    (tmp_path / "test.yml").write_text(yaml.safe_dump(test))
    proc = promtool("test", "rules", "test.yml", cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout


def _dashboard():
    with open(os.path.join(ROLE, "files", "ascendai-vllm-dashboard.json")) as handle:
        return json.load(handle)


def test_dashboard_has_npu_and_vllm_panels_with_p99(rendered):
    dash = _dashboard()
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert any(e.startswith("histogram_quantile(0.99") and "time_to_first_token" in e for e in exprs)
    for metric in ("npu_chip_info_health_status", "npu_chip_info_hbm_used_memory", "npu_chip_info_link_status",
                   "vllm:num_requests_waiting", "vllm:generation_tokens_total"):
        assert any(metric in e for e in exprs), metric
    uids = {p["datasource"]["uid"] for p in dash["panels"] if "datasource" in p}
    assert uids == {"ascendai-prometheus"}
    datasource = yaml.safe_load(rendered["datasources"])
    assert datasource["datasources"][0]["url"] == "http://127.0.0.1:9090"


@needs_promtool
def test_dashboard_queries_are_valid_promql(tmp_path):
    exprs = [t["expr"] for p in _dashboard()["panels"] for t in p.get("targets", [])]
    grafana_vars = {"$__rate_interval": "1m", "$node": ".*"}
    rules = []
    for index, expr in enumerate(exprs):
        for var, value in grafana_vars.items():
            expr = expr.replace(var, value)
        rules.append({"record": "dashboard:query_%d" % index, "expr": expr})
    (tmp_path / "dash.yml").write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    proc = promtool("check", "rules", str(tmp_path / "dash.yml"))
    assert proc.returncode == 0, proc.stdout
