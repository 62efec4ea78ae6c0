"""The hccn_plan filter: the address plan DOCUMENTATION describes (device i on plane i mod len(planes), host index k
at network + offset + k, consecutive addresses per host when there are more devices than planes), recomputed here
with ipaddress, and the errors that name the input."""

from __future__ import annotations

import ipaddress

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.hccn_plan import FilterModule

hccn_plan = FilterModule().filters()["hccn_plan"]

PLANES = [f"10.10.{i}.0/24" for i in range(8)]


def expected_address(plane, host_index, device, planes_count, devices_per_host, offset):
    per_plane = devices_per_host // planes_count
    net = ipaddress.IPv4Network(plane)
    return str(net.network_address + offset + host_index * per_plane + device // planes_count)


def test_documented_example():
    plan = hccn_plan(["node1", "node2"], PLANES, gateway="first")
    # EXAMPLES: npu_plan['node1'][0]
    assert plan["node1"][0] == {"device": 0, "address": "10.10.0.2", "netmask": "255.255.255.0",
                                "gateway": "10.10.0.1", "netdetect": "10.10.0.1", "plane": "10.10.0.0/24"}
    assert [d["device"] for d in plan["node2"]] == list(range(8))
    assert [d["address"] for d in plan["node2"]] == [f"10.10.{i}.3" for i in range(8)]


@pytest.mark.parametrize("hosts,devices,planes", [
    (["a", "b", "c"], 8, PLANES),                              # Atlas A2: one NIC per plane
    ({"a": 0, "b": 5, "c": 2}, 16, PLANES),                    # A3: two NICs per plane, explicit host indexes
    (["a", "b"], 8, ["192.168.0.0/26", "192.168.0.64/26"]),    # 4 devices per plane on 2 planes
])
def test_every_address_is_where_the_rule_puts_it(hosts, devices, planes):
    plan = hccn_plan(hosts, planes, devices_per_host=devices)
    index = hosts if isinstance(hosts, dict) else {h: i for i, h in enumerate(hosts)}
    seen = set()
    for host, k in index.items():
        assert len(plan[host]) == devices
        for entry in plan[host]:
            dev = entry["device"]
            plane = planes[dev % len(planes)]
            net = ipaddress.IPv4Network(plane)
            assert entry["plane"] == plane and entry["netmask"] == str(net.netmask)
            assert entry["address"] == expected_address(plane, k, dev, len(planes), devices, offset=1)
            address = ipaddress.IPv4Address(entry["address"])
            assert address in net and address not in (net.network_address, net.broadcast_address)
            assert entry["gateway"] is None and entry["netdetect"] is None     # no gateway rule given
            seen.add(address)
    assert len(seen) == len(index) * devices


def test_gateway_rules_and_offset():
    plan = hccn_plan(["n1"], ["10.30.0.0/24", "10.30.1.0/24"], devices_per_host=2, gateway="last",
                     netdetect=["10.30.0.9", "10.30.1.9"], offset=10)
    assert [d["gateway"] for d in plan["n1"]] == ["10.30.0.254", "10.30.1.254"]
    assert [d["netdetect"] for d in plan["n1"]] == ["10.30.0.9", "10.30.1.9"]
    assert [d["address"] for d in plan["n1"]] == ["10.30.0.10", "10.30.1.10"]
    # one netdetect address for every plane must lie in each plane
    with pytest.raises(AnsibleFilterError, match="10.30.0.9 is outside plane 10.30.1.0/24"):
        hccn_plan(["n1"], ["10.30.0.0/24", "10.30.1.0/24"], devices_per_host=2, netdetect="10.30.0.9")
    per_plane = hccn_plan(["n1"], ["10.30.0.0/24", "10.30.1.0/24"], devices_per_host=2,
                          gateway=["first", "10.30.1.100"])
    assert [d["gateway"] for d in per_plane["n1"]] == ["10.30.0.1", "10.30.1.100"]


@pytest.mark.parametrize("hosts,planes,kwargs,needle", [
    ("node1", PLANES, {}, "hosts must be a list of hostnames or a dict hostname -> index, got 'node1'"),
    ([], PLANES, {}, "hosts is empty"),
    (["n1", "n1"], PLANES, {}, "host 'n1' is listed twice in hosts"),
    (["n1", 7], PLANES, {}, "hosts: 7 is not a hostname"),
    ({"n1": -1}, PLANES, {}, "host 'n1' has negative index -1"),
    (["n1"], "10.10.0.0/24", {}, "planes must be a non-empty list of CIDRs"),
    (["n1"], PLANES[:7] + ["10.10.7.1/24"], {}, "plane '10.10.7.1/24' is not an IPv4 network in CIDR form"),
    (["n1"], PLANES[:3], {}, "devices_per_host 8 is not a multiple of the 3 planes given"),
    (["n1"], PLANES, {"gateway": ["first"]}, "gateway lists 1 entries but there are 8 planes"),
    (["n1"], PLANES, {"offset": 0}, "offset must be at least 1"),
    (["n1"], ["10.10.0.0/30"], {"devices_per_host": 1, "offset": 3}, "plane 10.10.0.0/30 is too small"),
])
def test_bad_input_is_named(hosts, planes, kwargs, needle):
    with pytest.raises(AnsibleFilterError) as info:
        hccn_plan(hosts, planes, **kwargs)
    assert str(info.value).startswith("hccn_plan: ")
    assert needle in str(info.value)
