"""The monitoring role's ports: Prometheus, node_exporter and the NPU Exporter listen where their scraper needs them
(the loopback when Prometheus runs on the node), never on every address by default, and Prometheus and node_exporter
take basic auth and TLS through the exporter-toolkit web config (--web.config.file).

The role's own task files run through ansible-playbook with the files redirected under tmp_path and no systemd
(_monitoring_services false); promtool (Debian's prometheus) checks the web config where it is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess

import pytest
import yaml

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import run_playbook

PROMTOOL = shutil.which("promtool")
# bcrypt of "scrape-secret" (cost 10), made with libxcrypt (Python's crypt.METHOD_BLOWFISH).
HASH = "$2b$10$tyt0GLA7zsOuf0JndLmYNeoMToNmkeSUucvVVW1Bi16wShU9u5FhC"
PASSWORD = "scrape-secret"


def _play(tmp_path, tasks_from, extra_tasks=()):
    tasks = [{"name": "Preflight", "ansible.builtin.include_role": {"name": "ascendai.vllm.monitoring",
                                                                    "tasks_from": "preflight.yml"}}]
    tasks += [{"name": f"Run {name}", "ansible.builtin.include_role": {"name": "ascendai.vllm.monitoring",
                                                                       "tasks_from": name}} for name in tasks_from]
    return [{"hosts": "localhost", "gather_facts": True, "tasks": tasks + list(extra_tasks)}]


def _vars(tmp_path, **override):
    values = {
        "_monitoring_services": False,
        "_monitoring_systemd_dir": str(tmp_path / "systemd"),
        "_monitoring_web_config_dir": str(tmp_path / "web"),
        "_monitoring_prometheus_config": str(tmp_path / "prometheus.yml"),
        "_monitoring_rules_file": str(tmp_path / "rules" / "ascendai-vllm.rules.yml"),
        "monitoring_npu_source": "textfile",
    }
    values.update(override)
    return values


def _run(tmp_path, tasks_from, **override):
    return run_playbook(tmp_path, _play(tmp_path, tasks_from), _vars(tmp_path, **override))


def _dropin(tmp_path, service):
    return (tmp_path / "systemd" / f"{service}.service.d" / "ascendai-listen.conf").read_text()


def _exec_start(text):
    lines = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    assert lines[0] == "ExecStart=", text
    return lines[1]


def _listen(exec_start):
    match = re.search(r"--web\.listen-address=(\S+)", exec_start)
    assert match, exec_start
    return match.group(1)


def test_single_node_listens_on_the_loopback_only(tmp_path):
    proc = _run(tmp_path, ["node_exporter_config.yml", "prometheus_config.yml"])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    node = _exec_start(_dropin(tmp_path, "prometheus-node-exporter"))
    prom = _exec_start(_dropin(tmp_path, "prometheus"))
    assert node.startswith("ExecStart=/usr/bin/prometheus-node-exporter $ARGS ")
    assert prom.startswith("ExecStart=/usr/bin/prometheus $ARGS ")
    assert _listen(node) == "127.0.0.1:9100"
    assert _listen(prom) == "127.0.0.1:9090"
    assert "web.config" not in node + prom
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["node"]["static_configs"][0]["targets"] == ["127.0.0.1:9100"]
    assert jobs["prometheus"]["static_configs"][0]["targets"] == ["127.0.0.1:9090"]
    assert "basic_auth" not in jobs["node"] and jobs["node"].get("scheme", "http") == "http"
    text = (tmp_path / "prometheus.yml").read_text()
    assert "0.0.0.0" not in text
    assert stat.S_IMODE(os.stat(tmp_path / "prometheus.yml").st_mode) == 0o640
    assert not (tmp_path / "web").exists()


def test_npu_exporter_unit_binds_the_scrape_address(tmp_path):
    play = _play(tmp_path, [], extra_tasks=[{
        "name": "Render the NPU Exporter unit",
        "ansible.builtin.include_role": {"name": "ascendai.vllm.monitoring", "tasks_from": "npu_exporter_unit.yml"},
    }])
    values = _vars(tmp_path, monitoring_npu_source="npu_exporter", monitoring_npu_exporter_package="/x.zip",
                   _monitoring_is_server=False, monitoring_scrape_address="10.0.0.7")
    (tmp_path / "systemd").mkdir()
    proc = run_playbook(tmp_path, play, values)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    unit = (tmp_path / "systemd" / "npu-exporter.service").read_text()
    assert "-ip=10.0.0.7 -port=8082" in unit
    assert "0.0.0.0" not in unit


def test_no_address_found_is_refused_not_a_wildcard(tmp_path):
    proc = _run(tmp_path, ["node_exporter_config.yml"], monitoring_exporter_listen_address="",
                _monitoring_is_server=False, monitoring_scrape_address="")
    assert proc.returncode != 0
    assert "monitoring_scrape_address" in proc.stdout
    assert not (tmp_path / "systemd").exists()


def test_remote_scrape_address_and_targets_follow(tmp_path):
    proc = _run(tmp_path, ["node_exporter_config.yml", "prometheus_config.yml"], _monitoring_is_server=False,
                monitoring_scrape_address="10.0.0.7")
    # not the server: prometheus_config would not run in the role, but the target it renders must follow
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert _listen(_exec_start(_dropin(tmp_path, "prometheus-node-exporter"))) == "10.0.0.7:9100"
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["node"]["static_configs"][0]["targets"] == ["10.0.0.7:9100"]


def test_an_explicit_wildcard_is_scraped_at_the_loopback(tmp_path):
    proc = _run(tmp_path, ["node_exporter_config.yml", "prometheus_config.yml"],
                monitoring_exporter_listen_address="0.0.0.0")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert _listen(_exec_start(_dropin(tmp_path, "prometheus-node-exporter"))) == "0.0.0.0:9100"
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["node"]["static_configs"][0]["targets"] == ["127.0.0.1:9100"]


@pytest.mark.parametrize("name, value", [
    ("monitoring_exporter_listen_address", "127.0.0.1\nExecStartPre=/bin/id"),
    ("monitoring_prometheus_listen_address", "127.0.0.1 --web.enable-admin-api"),
    ("monitoring_prometheus_listen_address", "%h"),
])
def test_addresses_that_would_change_the_command_line_are_refused(tmp_path, name, value):
    proc = _run(tmp_path, ["node_exporter_config.yml"], **{name: value})
    assert proc.returncode != 0
    assert name in proc.stdout
    assert not (tmp_path / "systemd").exists()


def _web(tmp_path, **override):
    values = dict(monitoring_web_basic_auth_users={"prom": HASH}, monitoring_web_basic_auth_scrape_password=PASSWORD)
    values.update(override)
    return _run(tmp_path, ["node_exporter_config.yml", "prometheus_config.yml"], **values)


def test_basic_auth_web_config_and_scrape(tmp_path):
    proc = _web(tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    for service, path in (("prometheus", "prometheus-web.yml"), ("prometheus-node-exporter", "node-exporter-web.yml")):
        exec_start = _exec_start(_dropin(tmp_path, service))
        assert f"--web.config.file={tmp_path / 'web' / path}" in exec_start
        web = tmp_path / "web" / path
        assert yaml.safe_load(web.read_text()) == {"basic_auth_users": {"prom": HASH}}
        assert stat.S_IMODE(os.stat(web).st_mode) == 0o640
        assert os.stat(web).st_uid == 0
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    for job in ("node", "prometheus"):
        assert jobs[job]["basic_auth"] == {"username": "prom", "password": PASSWORD}
        assert jobs[job]["scheme"] == "http"
    assert stat.S_IMODE(os.stat(tmp_path / "prometheus.yml").st_mode) == 0o640
    out = proc.stdout + proc.stderr
    assert PASSWORD not in out and HASH not in out


def test_tls_web_config_and_https_scrape(tmp_path):
    if not shutil.which("openssl"):
        pytest.skip("openssl not installed")
    cert, key = tmp_path / "node.crt", tmp_path / "node.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1"], check=True, capture_output=True)
    proc = _web(tmp_path, monitoring_web_tls_cert_file=str(cert), monitoring_web_tls_key_file=str(key),
                monitoring_web_tls_ca_file=str(cert))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    web = yaml.safe_load((tmp_path / "web" / "node-exporter-web.yml").read_text())
    assert web["tls_server_config"] == {"cert_file": str(cert), "key_file": str(key)}
    config = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["node"]["scheme"] == "https" and jobs["node"]["tls_config"] == {"ca_file": str(cert)}


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) not installed")
def test_promtool_checks_the_rendered_web_config(tmp_path):
    proc = _web(tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    check = subprocess.run([PROMTOOL, "check", "web-config", str(tmp_path / "web" / "node-exporter-web.yml")],
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.skipif(PROMTOOL is None, reason="promtool (Debian package prometheus) not installed")
def test_a_missing_certificate_is_refused_by_promtool(tmp_path):
    proc = _web(tmp_path, monitoring_web_tls_cert_file="/nonexistent/node.crt",
                monitoring_web_tls_key_file="/nonexistent/node.key")
    assert proc.returncode != 0
    assert not (tmp_path / "web" / "node-exporter-web.yml").exists()


@pytest.mark.parametrize("users, password, words", [
    ({"prom": "plain-password"}, PASSWORD, "not one for prom"),
    ({"prom": HASH}, "", "monitoring_web_basic_auth_scrape_password"),
])
def test_bad_basic_auth_input_is_refused_without_logging_it(tmp_path, users, password, words):
    proc = _run(tmp_path, ["node_exporter_config.yml"], monitoring_web_basic_auth_users=users,
                monitoring_web_basic_auth_scrape_password=password)
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert words in out, out[-3000:]
    assert "plain-password" not in out and HASH not in out
    assert not (tmp_path / "systemd").exists()


def test_old_prometheus_is_refused_before_anything_changes(tmp_path):
    fake = tmp_path / "bin" / "prometheus"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'prometheus, version 2.20.0 (branch: HEAD, revision: x)'\n")
    fake.chmod(0o755)
    proc = _web(tmp_path, _monitoring_prometheus_exec=f"{fake} --config.file=/etc/prometheus/prometheus.yml")
    out = " ".join(proc.stdout.split())
    assert proc.returncode != 0
    assert "Prometheus 2.20.0" in out and "2.24.0" in out and "monitoring_rpm_enablerepo" in out, out[-3000:]
    assert not (tmp_path / "systemd").exists() and not (tmp_path / "web").exists()


def test_openeulers_packaged_prometheus_is_refused_when_not_installed(tmp_path):
    proc = _web(tmp_path, _monitoring_prometheus_exec="/nonexistent/prometheus",
                _monitoring_prometheus_packaged_version="2.20.0")
    assert proc.returncode != 0
    assert "Prometheus 2.20.0" in " ".join(proc.stdout.split())


def test_node_exporter_before_1_5_gets_the_old_flag(tmp_path):
    fake = tmp_path / "bin" / "node_exporter"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'node_exporter, version 1.0.1 (branch: HEAD, revision: x)' >&2\n")
    fake.chmod(0o755)
    proc = _web(tmp_path, _monitoring_node_exporter_exec=f"{fake} $OPTIONS")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    exec_start = _exec_start(_dropin(tmp_path, "prometheus-node-exporter"))
    assert f"{fake} $OPTIONS --web.listen-address=127.0.0.1:9100 --web.config=" in exec_start
