# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Prefill/decode (P/D) reachability on the kv ports, before the ranks listen: who listens, who dials, and the words
of a refusal. Pure stdlib; the probe itself (sockets) is the module ``pd_kv_probe``.

Which side of a connector listens on the planned kv ports and which side dials them (read at vllm-ascend's and
vLLM's tags; ``_pd_layout.py`` has the port arithmetic):

* ``MooncakeConnectorV1``: the producer (prefill) binds a ZMQ ROUTER on its handshake ports
  (``KVCacheSendingThread``, started when ``kv_role == 'kv_producer'``); the consumer (decode) dials
  ``remote_host:remote_port`` for the metadata and the "done" messages (``KVCacheRecvingThread``), vllm-ascend
  ``vllm_ascend/distributed/mooncake_connector.py``, v0.11.0 on. The KV itself moves over Mooncake's
  AscendDirectTransport on the NPU RoCE NICs.
* ``MooncakeLayerwiseConnector``: the consumer (decode) binds (``KVCacheRecvingLayerThread``, started when
  ``is_kv_consumer``); the producer (prefill) dials it to read the metadata and to say a layer is sent
  (``update_decoder_info``, ``send_done_send_signal``), ``mooncake_layerwise_connector.py``. KV over the NPU RoCE NICs.
* ``LLMDataDistCMgrConnector``: every worker binds its RPC port (``listen_for_agent_metadata_req``); the decode side
  dials the prefill side's to read its metadata and to link (``start_load_kv`` -> ``_read_blocks`` with
  ``remote_ip``/``remote_port``), ``llmdatadist_c_mgr_connector.py`` v0.11.0. KV over the NPU RoCE NICs (LLMDataDist
  links through HCCL; ``kv_buffer_device: npu``).
* ``NixlConnector``: every worker runs the side-channel listener; the decode side dials the prefill side's
  ``VLLM_NIXL_SIDE_CHANNEL_PORT`` for the handshake (vLLM 0.32.0 ``nixl`` connector, ``_nixl_handshake``). With
  ``kv_buffer_device: cpu`` (the CPU sandbox) the KV stays in host memory and never touches an NPU NIC.

So the NPU RoCE checks (link, net health, cross-node ping) matter for every connector but ``NixlConnector``.
"""

from __future__ import annotations

CONNECTORS = {
    "MooncakeConnectorV1": {"listener": "prefill", "npu_roce": True,
                            "what": "Mooncake's handshake (decode dials prefill)"},
    "MooncakeLayerwiseConnector": {"listener": "decode", "npu_roce": True,
                                   "what": "Mooncake layerwise's handshake (prefill dials decode)"},
    "LLMDataDistCMgrConnector": {"listener": "prefill", "npu_roce": True,
                                 "what": "LLMDataDist's metadata RPC (decode dials prefill)"},
    "NixlConnector": {"listener": "prefill", "npu_roce": False,
                      "what": "NIXL's side channel (decode dials prefill)"},
}
OTHER = {"prefill": "decode", "decode": "prefill"}
DIRECTIONS = ("connector", "both")


class PdReachError(ValueError):
    """A plan this check cannot read; the message names what is wrong."""


def connector_spec(plan):
    """The CONNECTORS entry of the plan's connector, or PdReachError."""
    if not isinstance(plan, dict) or not isinstance(plan.get("ranks"), list):
        raise PdReachError("plan must be the output of ascendai.vllm.pd_plan (a mapping with connector and ranks)")
    connector = plan.get("connector")
    if connector not in CONNECTORS:
        raise PdReachError(f"plan.connector={connector!r}: use one of {', '.join(CONNECTORS)}")
    return CONNECTORS[connector]


def needs_npu_roce(plan):
    """Whether the plan's connector moves the KV over the NPU RoCE NICs (see the module docstring)."""
    spec = connector_spec(plan)
    if not spec["npu_roce"]:
        devices = {str((r.get("kv_transfer_config") or {}).get("kv_buffer_device", "cpu")) for r in plan["ranks"]}
        return devices != {"cpu"}
    return True


def _rank_ports(rank):
    ports = rank.get("kv_ports") or {}
    first, last = ports.get("first"), ports.get("last")
    if not isinstance(first, int) or not isinstance(last, int) or not 0 < first <= last <= 65535:
        raise PdReachError(f"{rank.get('role')} rank {rank.get('dp_rank')} on {rank.get('host')}: kv_ports "
                           f"{ports!r} is no port range")
    return range(first, last + 1)


def _label(rank):
    return f"{rank['role']} rank {rank['dp_rank']}" + (f" of instance {rank['instance']}" if rank.get("instance")
                                                       else "")


def probe_plan(plan, host, directions="connector"):
    """What ``host`` (an inventory name of the plan's ranks) checks: ``listen`` (ports to hold open, each with the
    hosts expected to dial it) and ``dial`` (peer host, address, port, what it is), both sorted.

    ``directions``: ``connector`` checks the way the connector connects (CONNECTORS); ``both`` also the reverse
    (every rank's kv ports from the other role's hosts)."""
    spec = connector_spec(plan)
    if directions not in DIRECTIONS:
        raise PdReachError(f"directions={directions!r}: use one of {', '.join(DIRECTIONS)}")
    listeners = [spec["listener"]] + ([OTHER[spec["listener"]]] if directions == "both" else [])
    ranks = plan["ranks"]
    listen, dial = {}, {}
    for role in listeners:
        dialer_hosts = sorted({r["host"] for r in ranks if r["role"] == OTHER[role]})
        for rank in (r for r in ranks if r["role"] == role):
            for port in _rank_ports(rank):
                if rank["host"] == host:
                    entry = listen.setdefault(port, {"port": port, "what": f"the kv port of {_label(rank)}",
                                                     "dialers": []})
                    entry["dialers"] = sorted(set(entry["dialers"]) | set(dialer_hosts))
                if host in dialer_hosts:
                    key = (rank["address"], port)
                    dial.setdefault(key, {"peer": rank["host"], "address": rank["address"], "port": port,
                                          "what": f"the kv port of {_label(rank)}, {spec['what']}"})
    return {"listen": [listen[p] for p in sorted(listen)],
            "dial": [dial[k] for k in sorted(dial, key=lambda k: (k[0], k[1]))],
            "npu_roce": needs_npu_roce(plan), "listener": spec["listener"]}


def refusal(host, failures):
    """One line per unreachable port, each naming both hosts, the port, the error and what to check."""
    lines = []
    for f in failures:
        lines.append(
            f"{host} cannot reach {f['peer']} ({f['address']}) on TCP port {f['port']} ({f['what']}): "
            f"{f.get('error') or 'no connection'}. Check the firewall on {f['peer']} (the port must be open to "
            f"{host}: firewall-cmd --list-all, nft list ruleset, iptables -S), that {f['address']} is an address of "
            f"{f['peer']} on the NIC the ranks use (ip -br addr there), and the route from {host} "
            f"(ip route get {f['address']}).")
    return lines


def listener_notes(host, result):
    """Notes about the listener: ports already held by another process (the rank's own service after an earlier
    run, or something else), which it could not hold open itself."""
    return [f"{host}: TCP port {port} is already listened on (the rank's service after an earlier run, or another "
            f"process: ss -ltnp 'sport = :{port}'); only that it is reachable was checked"
            for port in result.get("in_use", [])]
