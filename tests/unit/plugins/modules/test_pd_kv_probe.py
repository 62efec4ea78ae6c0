# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""ascendai.vllm.pd_kv_probe on this machine's loopback: a listener that ends once its dialers came, a dialer that
reaches it, one that gives up on a closed port within its timeout, and a port already held by another process."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.ascendai.vllm.plugins.modules import pd_kv_probe

from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.module_harness import (
    AnsibleExitJson, AnsibleFailJson, patch_exits)


@pytest.fixture(autouse=True)
def exits(monkeypatch):
    patch_exits(monkeypatch)


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _plan(port):
    rank = {"host": "p1", "address": "127.0.0.1", "dp_rank": 0, "instance": 0,
            "kv_ports": {"first": port, "last": port}, "kv_transfer_config": {"kv_buffer_device": "cpu"}}
    return {"connector": "NixlConnector",
            "ranks": [dict(rank, role="prefill"), dict(rank, role="decode", host="d1", dp_rank=0,
                                                       kv_ports={"first": port + 1, "last": port + 1})]}


def run(args):
    with patch_module_args(args), pytest.raises((AnsibleExitJson, AnsibleFailJson)) as exc:
        pd_kv_probe.main()
    return exc.type, exc.value.args[0]


def test_the_listener_ends_as_soon_as_its_dialer_came_and_the_dialer_reaches_it():
    port = _free_port()
    plan = _plan(port)
    out = {}
    listener = threading.Thread(target=lambda: out.update(
        listen=run({"plan": plan, "host": "p1", "mode": "listen", "bind_address": "127.0.0.1", "timeout": 20})))
    started = time.monotonic()
    listener.start()
    kind, dialed = run({"plan": plan, "host": "d1", "mode": "dial", "timeout": 10})
    listener.join(30)
    assert kind is AnsibleExitJson and dialed["problems"] == [] and dialed["reached"] == [f"127.0.0.1:{port}"]
    kind, listened = out["listen"]
    assert kind is AnsibleExitJson and listened["accepted"] == {str(port): 1} and listened["in_use"] == []
    assert time.monotonic() - started < 15, "the listener waited for its timeout although its dialer came"
    assert listened["changed"] is False and dialed["changed"] is False and dialed["npu_roce"] is False
    with socket.socket() as sock:  # gone: the port listens again (the closed connection may sit in TIME_WAIT)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(1)


def test_a_closed_port_is_unreachable_within_the_timeout_naming_it():
    port = _free_port()
    started = time.monotonic()
    kind, dialed = run({"plan": _plan(port), "host": "d1", "mode": "dial", "timeout": 2})
    assert kind is AnsibleExitJson
    assert time.monotonic() - started < 10
    assert dialed["reached"] == [] and dialed["unreachable"][0]["port"] == port
    assert dialed["problems"][0].startswith(f"d1 cannot reach p1 (127.0.0.1) on TCP port {port}")


def test_a_port_held_by_another_process_is_left_to_it():
    port = _free_port()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen(1)
        kind, listened = run({"plan": _plan(port), "host": "p1", "mode": "listen", "bind_address": "127.0.0.1",
                              "timeout": 1})
    assert kind is AnsibleExitJson and listened["in_use"] == [port] and listened["accepted"] == {}
    assert f"TCP port {port} is already listened on" in listened["notes"][0]


def test_a_plan_that_is_no_plan_fails_the_module():
    kind, res = run({"plan": {"connector": "Nope", "ranks": []}, "host": "p1", "mode": "dial"})
    assert kind is AnsibleFailJson and "plan.connector='Nope'" in res["msg"]
