# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""playbooks/pd.yml's preflight play (--tags pd_preflight) on this machine: a prefill node and a decode node that are
both localhost. The kv ports must be reachable from the other role before any rank listens (ascendai.vllm.preflight,
entry point pd); with a connector that moves the KV over the NPU RoCE NICs the NICs are checked too
(ascendai.vllm.roce, entry point verify), here through a stand-in hccn_tool."""

from __future__ import annotations

import os
import pathlib
import socket
import sys

import pytest
import yaml

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import (
    PLAYBOOK,
    ROOT,
    changed_count,
    run_playbook,
)

pytestmark = pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")

HOST = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        # as root without sudo on the test machine; a real node uses the inventory's become method
        "ansible_become_method": "ansible.builtin.su"}


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _layout(connector="NixlConnector", prefill_address="127.0.0.1", kv_port=None, **more):
    base = _free_port()
    layout = {
        "connector": connector,
        "prefill": {"dp": 1, "tp": 1, "hosts": [{"host": "pd-p1", "address": prefill_address, "dp_ranks": [0]}]},
        "decode": {"dp": 1, "tp": 1, "hosts": [{"host": "pd-d1", "address": "127.0.0.1", "dp_ranks": [0]}]},
        "api_port": {"prefill": 18100, "decode": 18200},
        "kv_port": kv_port or {"prefill": base, "decode": base + 1 if base < 65535 else base - 1},
        "proxy": {"host": "127.0.0.1", "port": 18000},
    }
    layout.update(more)
    return layout


def _run(tmp_path, layout, *, host_vars=None, args=(), extra=None, env=None):
    hosts = {name: dict(HOST, **(host_vars or {}).get(name, {})) for name in ("pd-p1", "pd-d1")}
    inventory = {"pd_prefill": {"hosts": {"pd-p1": hosts["pd-p1"]}},
                 "pd_decode": {"hosts": {"pd-d1": hosts["pd-d1"]}},
                 "pd_proxy": {"hosts": {}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    proc = run_playbook(tmp_path, pathlib.Path(ROOT, "playbooks", "pd.yml"), inventory=tmp_path / "hosts.yml",
                        connection=None, args=["--skip-tags", "pd_stack,pd_serve,pd_proxy", *args],
                        extra_vars=dict({"pd_layout": layout, "preflight_pd_kv_timeout": 3}, **(extra or {})),
                        timeout=300, env=env)
    return proc, proc.stdout + proc.stderr


def test_decode_reaches_the_prefill_kv_port_and_the_gate_passes_without_npu_checks(tmp_path):
    proc, out = _run(tmp_path, _layout())
    assert proc.returncode == 0, out[-5000:]
    assert "pd-d1 reaches 1 kv port(s) of the other role" in out, out[-5000:]
    # NixlConnector with kv_buffer_device cpu: the KV never touches an NPU NIC
    assert "Check the NPU RoCE NICs the ranks use" in out and "Look for hccn_tool" not in out, out[-5000:]
    assert changed_count(proc, "pd-p1") == 0 and changed_count(proc, "pd-d1") == 0


def test_check_mode_runs_the_same_gate_and_changes_nothing(tmp_path):
    proc, out = _run(tmp_path, _layout(), args=["--check"])
    assert proc.returncode == 0, out[-5000:]
    assert "pd-d1 reaches 1 kv port(s) of the other role" in out, out[-5000:]
    assert changed_count(proc, "pd-p1") == 0 and changed_count(proc, "pd-d1") == 0


def test_an_unreachable_kv_port_stops_every_node_naming_hosts_port_and_what_to_check(tmp_path):
    # 192.0.2.1 (TEST-NET-1) routes nowhere: the address the layout gives the prefill node is not the node's
    layout = _layout(prefill_address="192.0.2.1")
    port = layout["kv_port"]["prefill"]
    proc, out = _run(tmp_path, layout)
    assert proc.returncode != 0, out[-5000:]
    assert f"pd-d1 cannot reach pd-p1 (192.0.2.1) on TCP port {port} (the kv port of prefill rank 0" in out, \
        out[-5000:]
    for hint in ("Check the firewall on pd-p1", "ip -br addr", "ip route get 192.0.2.1"):
        assert hint in out, out[-5000:]


def test_the_layerwise_direction_and_both_directions(tmp_path):
    # Mooncake layerwise: prefill dials decode. Both: each side dials the other. The NPU checks are switched off
    # here (they have their own test below).
    layout = _layout()
    proc, out = _run(tmp_path, layout, extra={"preflight_pd_kv_directions": "both"},
                     host_vars={"pd-p1": {"roce_check_link": False}})
    assert proc.returncode == 0, out[-5000:]
    assert "pd-d1 reaches 1 kv port(s) of the other role" in out, out[-5000:]
    assert "pd-p1 reaches 1 kv port(s) of the other role" in out, out[-5000:]


def test_a_port_held_by_the_rank_on_a_rerun_is_only_dialed(tmp_path):
    layout = _layout()
    port = layout["kv_port"]["prefill"]
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind(("0.0.0.0", port))
        holder.listen(8)
        proc, out = _run(tmp_path, layout)
    assert proc.returncode == 0, out[-5000:]
    assert f"TCP port {port} is already listened on" in out, out[-5000:]
    assert "pd-d1 reaches 1 kv port(s) of the other role" in out, out[-5000:]


# A stand-in for the driver's hccn_tool, one per node: the output lines the collection's parsers read
# (plugins/module_utils/_hccn.py, after the captures in tests/unit/fixtures), NIC N of node K at 10.20.N.K.
FAKE_HCCN_TOOL = """#!%(python)s
import sys
NODE, DOWN, SILENT = %(node)r, %(down)r, %(silent)r
args = sys.argv[1:]
dev = int(args[1])
if args[2:] == ["-link", "-g"]:
    print("link status: " + ("DOWN" if dev in DOWN else "UP"))
elif args[2:] == ["-net_health", "-g"]:
    print("net health status: " + ("Init" if dev in DOWN else "Success"))
elif args[2:] == ["-ip", "-g"]:
    print("ipaddr:10.20.%%d.%%d" %% (dev, NODE))
    print("netmask:255.255.255.0")
elif args[2:4] == ["-ping", "-g"]:
    address = args[5]
    got = 0 if address in SILENT else 3
    print("device %%d PING %%s" %% (dev, address))
    for seq in range(got):
        print("recv seq=%%d,time=0.05ms" %% seq)
    print("3 packets transmitted, %%d received, %%d%%%% packets loss" %% (got, 100 - 100 * got // 3))
else:
    sys.exit("unexpected: %%r" %% args)
"""


def _fake_tools(tmp_path, down=(), silent=()):
    paths = {}
    for index, name in enumerate(("pd-p1", "pd-d1"), start=1):
        path = tmp_path / f"hccn_tool-{name}"
        path.write_text(FAKE_HCCN_TOOL % {"python": sys.executable, "node": index,
                                          "down": list(down) if name == "pd-d1" else [], "silent": list(silent)})
        path.chmod(0o755)
        paths[name] = {"roce_hccn_tool": str(path)}
    # the ping of ascendai.vllm.hccn finds the tool on PATH (one per machine: both nodes are this one)
    (tmp_path / "bin").mkdir(exist_ok=True)
    (tmp_path / "bin" / "hccn_tool").symlink_to(tmp_path / "hccn_tool-pd-p1")
    return paths


def _path(tmp_path):
    return {"PATH": str(tmp_path / "bin") + os.pathsep + os.environ.get("PATH", "")}


def _mooncake():
    return _layout(connector="MooncakeConnectorV1", vllm_ascend_version="0.11.0",
                   prefill={"dp": 1, "tp": 1, "hosts": [{"host": "pd-p1", "address": "127.0.0.1", "dp_ranks": [0],
                                                         "npus": 8}]},
                   decode={"dp": 1, "tp": 1, "hosts": [{"host": "pd-d1", "address": "127.0.0.1", "dp_ranks": [0],
                                                        "npus": 8}]},
                   kv_port={"prefill": 40000 + os.getpid() % 5000 * 2, "decode": 40001 + os.getpid() % 5000 * 2})


def test_mooncake_checks_the_npu_nics_the_ranks_use_and_pings_across_the_roles(tmp_path):
    proc, out = _run(tmp_path, _mooncake(), host_vars=_fake_tools(tmp_path), env=_path(tmp_path))
    assert proc.returncode == 0, out[-5000:]
    assert "pd-p1: NPU NICs 0 are UP and healthy" in out, out[-5000:]
    # the ping table of the main entry point: device 0 of each node pings device 0 of the other role's node
    assert "10.20.0.2" in out and "10.20.0.1" in out, out[-5000:]
    assert changed_count(proc, "pd-p1") == 0 and changed_count(proc, "pd-d1") == 0


def test_a_down_npu_nic_stops_the_gate_naming_host_and_device(tmp_path):
    proc, out = _run(tmp_path, _mooncake(), host_vars=_fake_tools(tmp_path, down=[0]), env=_path(tmp_path))
    assert proc.returncode != 0, out[-5000:]
    assert "NPU device 0: link status is DOWN, expected UP" in out, out[-5000:]


def test_a_silent_peer_nic_stops_the_gate_naming_both_ends(tmp_path):
    proc, out = _run(tmp_path, _mooncake(), host_vars=_fake_tools(tmp_path, silent=["10.20.0.2"]),
                     env=_path(tmp_path))
    assert proc.returncode != 0, out[-5000:]
    assert "pd-p1 device 0 -> 10.20.0.2: no reply" in out, out[-5000:]
