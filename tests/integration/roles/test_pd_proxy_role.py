"""The ascendai.vllm.pd_proxy role through ansible-playbook: a real run into a temporary root (no systemd start),
whose installed program and rendered configuration then serve a completion against stand-in ranks; check mode with
the default paths and the pd_plan filter's own output; the role's refusals."""

from __future__ import annotations

import http.client
import json
import os
import socket
import stat
import subprocess
import sys
import time

import pytest

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import (
    PLAYBOOK,
    changed_count,
    run_playbook,
)
from ansible_collections.ascendai.vllm.tests.unit.test_pd_proxy import StandIn

pytestmark = pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")

KEY = "sk-role-test-7f3a"
NIXL_LAYOUT = {
    "connector": "NixlConnector",
    "prefill": {"dp": 1, "tp": 1, "hosts": [{"host": "n1", "address": "10.0.0.1", "dp_ranks": [0], "npus": 1}]},
    "decode": {"dp": 2, "tp": 1, "hosts": [{"host": "n2", "address": "10.0.0.2", "dp_ranks": [0, 1], "npus": 2}]},
    "api_port": 7100, "kv_port": 36000, "proxy": {"host": "10.0.0.1", "port": 1999},
}


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _role_play(extra=None, plan_expr=None):
    role_vars = {"pd_proxy_api_keys": [KEY, "sk-second"]}
    if plan_expr:
        role_vars["pd_proxy_plan"] = plan_expr
    role_vars.update(extra or {})
    return [{"hosts": "localhost", "gather_facts": False,
             "tasks": [{"name": "The proxy", "ansible.builtin.include_role": {"name": "ascendai.vllm.pd_proxy"},
                        "vars": role_vars}]}]


def _local_root(tmp_path, prefill_url, decode_url, port):
    """Variables that put everything under tmp_path, run as root (no user made), start nothing."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    os.symlink(sys.executable, venv / "bin" / "python")
    (tmp_path / "units").mkdir()
    plan = {"host": "127.0.0.1", "node": "n1", "port": port, "order": "prefill_first", "first": "prefill",
            "prefill": [prefill_url], "decode": [decode_url], "decoder_hosts": ["127.0.0.1"], "metaserver": ""}
    return venv, {"pd_proxy_plan": plan, "pd_proxy_connector": "NixlConnector", "pd_proxy_venv": str(venv),
                  "pd_proxy_config_dir": str(tmp_path / "etc"), "pd_proxy_unit_dir": str(tmp_path / "units"),
                  "pd_proxy_user": "root", "pd_proxy_group": "root", "pd_proxy_create_user": False,
                  "pd_proxy_start": False}


def test_real_run_refuses_a_configuration_the_program_refuses(tmp_path):
    venv, extra = _local_root(tmp_path, "http://127.0.0.1:1", "http://127.0.0.1:2", _free_port())
    proc = run_playbook(tmp_path, _role_play(dict(extra, pd_proxy_prefill_retries=11)))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "prefill_retries=11: give an integer from 0 to 10" in out, out[-3000:]
    assert not (tmp_path / "etc" / "ascendai-pd-proxy.json").exists()


def test_real_run_installs_a_proxy_that_serves(tmp_path):
    prefill, decode = StandIn("prefill", "p0"), StandIn("decode", "d0")
    port = _free_port()
    venv, extra = _local_root(tmp_path, prefill.url, decode.url, port)
    proc = run_playbook(tmp_path, _role_play(extra))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert KEY not in proc.stdout + proc.stderr
    program = venv / "share" / "ascendai" / "ascendai_pd_proxy.py"
    config_path = tmp_path / "etc" / "ascendai-pd-proxy.json"
    keys_path = tmp_path / "etc" / "api-keys"
    config = json.loads(config_path.read_text())
    assert config["prefill"] == [prefill.url] and config["decode"] == [decode.url]
    assert config["connector"] == "NixlConnector" and config["order"] == "prefill_first"
    assert config["listen_host"] == "127.0.0.1" and config["listen_port"] == port
    assert config["api_keys_file"] == str(keys_path) and KEY not in config_path.read_text()
    assert keys_path.read_text() == f"{KEY}\nsk-second\n"
    assert stat.S_IMODE(keys_path.stat().st_mode) == 0o640
    unit = (tmp_path / "units" / "ascendai-pd-proxy.service").read_text()
    assert f"ExecStart={venv}/bin/python {program} --config {config_path}" in unit
    for line in ("NoNewPrivileges=true", "ProtectSystem=strict", "CapabilityBoundingSet=", "User=root"):
        assert line in unit.splitlines(), line
    # A second run changes nothing.
    assert changed_count(run_playbook(tmp_path, _role_play(extra))) == 0

    server = subprocess.Popen([sys.executable, str(program), "--config", str(config_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        for _attempt in range(100):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/health")
                health = conn.getresponse()
                health.read()
                break
            except OSError:
                time.sleep(0.1)
        assert health.status == 200
        body = json.dumps({"model": "m", "prompt": "hi", "max_tokens": 4})
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
        assert conn.getresponse().status == 401
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/v1/completions", body=body,
                     headers={"Content-Type": "application/json", "Authorization": "Bearer sk-second"})
        answer = conn.getresponse()
        assert answer.status == 200, answer.read()
        assert json.loads(answer.read())["choices"][0]["text"] == "hello"
        assert prefill.requests[0]["body"]["max_tokens"] == 1
        assert decode.requests[0]["body"]["kv_transfer_params"]["remote_engine_id"] == "p0"
        assert decode.requests[0]["headers"]["Authorization"] == f"Bearer {KEY}"
    finally:
        server.terminate()
        output = server.communicate(timeout=10)[0].decode()
        prefill.close()
        decode.close()
    assert KEY not in output and "sk-second" not in output


@pytest.mark.parametrize("connector,extra_layout,order", [
    ("NixlConnector", {}, "prefill_first"),
    ("MooncakeLayerwiseConnector", {"vllm_ascend_version": "0.11.0"}, "decode_first"),
])
def test_check_mode_with_the_pd_plan_output(tmp_path, connector, extra_layout, order):
    layout = dict(NIXL_LAYOUT, connector=connector, **extra_layout)
    # pd_proxy_start false: this machine's container has no systemd to ask about the unit.
    play = _role_play({"pd_proxy_connector": connector, "layout": layout, "pd_proxy_start": False},
                      plan_expr="{{ (layout | ascendai.vllm.pd_plan).proxy }}")
    # --diff shows the configuration check mode would write (the keys file's task is no_log).
    proc = run_playbook(tmp_path, play, args=("--check", "--diff"))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert not os.path.exists("/etc/ascendai-pd-proxy"), "check mode wrote the configuration directory"
    assert KEY not in out
    assert f'"order": "{order}"' in out
    if order == "decode_first":
        assert '"metaserver_url": "http://10.0.0.1:1999/v1/metaserver"' in out
        assert '"metaserver_host": "10.0.0.1"' in out and '"metaserver_port": 1999' in out
    else:
        assert '"metaserver_port": 0' in out


@pytest.mark.parametrize("change,message", [
    ({"pd_proxy_api_keys": []}, "pd_proxy_api_keys holds 0 keys"),
    ({"pd_proxy_api_keys": ["a key"]}, "with spaces"),
    ({"pd_proxy_connector": "P2pNcclConnector"}, "value of pd_proxy_connector must be one of"),
    ({"pd_proxy_connector": ""}, 'pd_proxy_connector="": give the plan\'s connector'),
    ({"pd_proxy_plan": {"prefill": [], "decode": ["http://10.0.0.2:7100"], "order": "prefill_first", "port": 1}},
     "is not a pd_plan proxy output"),
])
def test_role_refuses(tmp_path, change, message):
    plan = {"prefill": ["http://10.0.0.1:7100"], "decode": ["http://10.0.0.2:7100"], "order": "prefill_first",
            "port": 1999, "host": "10.0.0.1"}
    extra = dict({"pd_proxy_plan": plan, "pd_proxy_connector": "NixlConnector"}, **change)
    play = _role_play()
    play[0]["tasks"][0]["vars"].update(extra)
    proc = run_playbook(tmp_path, play, args=("--check",))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert message in out, out[-3000:]
