# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Who listens and who dials on the kv ports of a P/D plan (plugins/module_utils/_pd_kv_reach.py), on plans made by
the pd_plan filter's own module."""

from __future__ import annotations

import pytest
from ansible_collections.ascendai.vllm.plugins.module_utils._pd_kv_reach import (
    PdReachError,
    listener_notes,
    needs_npu_roce,
    probe_plan,
    refusal,
)
from ansible_collections.ascendai.vllm.plugins.module_utils._pd_layout import plan_pd


def _plan(connector, **more):
    layout = {
        "connector": connector,
        "prefill": {"dp": 2, "tp": 2, "hosts": [{"host": "p1", "address": "10.0.0.1", "dp_ranks": [0, 1],
                                                 "npus": 8}]},
        "decode": {"dp": 2, "tp": 1, "hosts": [{"host": "d1", "address": "10.0.0.2", "dp_ranks": [0], "npus": 8},
                                               {"host": "d2", "address": "10.0.0.3", "dp_ranks": [1], "npus": 8}]},
        "api_port": 7100, "kv_port": 36000, "proxy": {"host": "10.0.0.1", "port": 1999},
    }
    if connector != "NixlConnector":
        layout["vllm_ascend_version"] = "0.11.0"
    layout.update(more)
    return plan_pd(layout)


def test_mooncake_decode_dials_every_prefill_handshake_port():
    plan = _plan("MooncakeConnectorV1")
    prefill_ports = sorted({p for r in plan["ranks"] if r["role"] == "prefill"
                            for p in range(r["kv_ports"]["first"], r["kv_ports"]["last"] + 1)})
    assert len(prefill_ports) == 4  # DP2 x TP2: one handshake port per TP rank
    p1 = probe_plan(plan, "p1")
    assert [e["port"] for e in p1["listen"]] == prefill_ports and p1["dial"] == []
    assert all(e["dialers"] == ["d1", "d2"] for e in p1["listen"])
    d1 = probe_plan(plan, "d1")
    assert d1["listen"] == []
    assert [(e["peer"], e["address"], e["port"]) for e in d1["dial"]] == [("p1", "10.0.0.1", p) for p in prefill_ports]
    assert "Mooncake's handshake (decode dials prefill)" in d1["dial"][0]["what"]
    assert d1["npu_roce"] is True and d1["listener"] == "prefill"


def test_layerwise_prefill_dials_the_decode_ports():
    plan = _plan("MooncakeLayerwiseConnector")
    p1, d2 = probe_plan(plan, "p1"), probe_plan(plan, "d2")
    assert p1["listen"] == [] and {e["peer"] for e in p1["dial"]} == {"d1", "d2"}
    assert [e["dialers"] for e in d2["listen"]] == [["p1"]] and d2["dial"] == []


def test_both_directions_add_the_reverse():
    plan = _plan("NixlConnector")
    d1 = probe_plan(plan, "d1", "both")
    assert [e["port"] for e in d1["listen"]] == [r["kv_ports"]["first"] for r in plan["ranks"] if r["host"] == "d1"]
    assert {e["peer"] for e in d1["dial"]} == {"p1"}


def test_only_nixl_on_the_cpu_keeps_the_kv_off_the_npu_nics():
    assert needs_npu_roce(_plan("NixlConnector")) is False
    assert needs_npu_roce(_plan("MooncakeConnectorV1")) is True
    assert needs_npu_roce(_plan("LLMDataDistCMgrConnector")) is True
    plan = _plan("NixlConnector")
    plan["ranks"][0]["kv_transfer_config"]["kv_buffer_device"] = "npu"
    assert needs_npu_roce(plan) is True


@pytest.mark.parametrize("plan, directions, message", [
    ({"ranks": []}, "connector", "plan.connector=None"),
    ({"connector": "NixlConnector"}, "connector", "output of ascendai.vllm.pd_plan"),
    ({"connector": "NixlConnector", "ranks": []}, "sideways", "directions='sideways'"),
    ({"connector": "NixlConnector", "ranks": [{"role": "prefill", "host": "p", "dp_rank": 0, "address": "a",
                                               "kv_ports": {"first": 9, "last": 8}}]}, "connector", "no port range"),
])
def test_a_plan_it_cannot_read_is_refused_naming_what(plan, directions, message):
    with pytest.raises(PdReachError, match=message.replace("(", r"\(").replace(")", r"\)")):
        probe_plan(plan, "p", directions)


def test_the_refusal_names_hosts_port_and_what_to_check():
    line, = refusal("d1", [{"peer": "p1", "address": "10.0.0.1", "port": 36000, "what": "the kv port of prefill rank 0",
                            "error": "Connection refused"}])
    assert line.startswith("d1 cannot reach p1 (10.0.0.1) on TCP port 36000 (the kv port of prefill rank 0): "
                           "Connection refused.")
    for hint in ("firewall on p1", "ip -br addr", "ip route get 10.0.0.1"):
        assert hint in line
    assert listener_notes("p1", {"in_use": [36000]}) == [
        "p1: TCP port 36000 is already listened on (the rank's service after an earlier run, or another process: "
        "ss -ltnp 'sport = :36000'); only that it is reachable was checked"]
