"""hccn_plan and the hccn module's planning on hostile input: no plan of a network, broadcast,
multicast, 'this network' (0.0.0.0) or loopback address, no gateway equal to the address, and wrong shapes are an
AnsibleFilterError / HccnError naming the variable, never a raw TypeError, ValueError, OverflowError or
AddressValueError."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.hccn_plan import hccn_plan
from ansible_collections.ascendai.vllm.plugins.module_utils._hccn import HccnError, plan_changes

HOSTS = ["node1", "node2"]


@pytest.mark.parametrize("plane,words", [
    ("0.0.0.0/24", "'this network'"),
    ("0.0.0.0/1", "'this network'"),
    ("127.0.0.0/24", "loopback"),
    ("224.0.0.0/24", "multicast"),
    ("239.1.0.0/16", "multicast"),
    ("128.0.0.0/1", "multicast"),
    ("240.0.0.0/24", "reserved or broadcast"),
    ("255.255.255.0/24", "reserved or broadcast"),
])
def test_special_planes_are_refused(plane, words):
    with pytest.raises(AnsibleFilterError, match=f"hccn_plan: plane {plane.split('/')[0]}.* overlaps the {words}"):
        hccn_plan(HOSTS, [plane], devices_per_host=1)


def test_a_normal_plan_still_works():
    plan = hccn_plan(HOSTS, ["10.10.0.0/24", "10.10.1.0/24"], devices_per_host=2, gateway="first")
    assert plan["node1"][0]["address"] == "10.10.0.2" and plan["node2"][1]["address"] == "10.10.1.3"
    assert plan["node1"][0]["gateway"] == "10.10.0.1"


@pytest.mark.parametrize("kwargs,words", [
    ({"devices_per_host": float("inf")}, "devices_per_host inf is not an integer"),
    ({"devices_per_host": float("nan")}, "devices_per_host nan is not an integer"),
    ({"devices_per_host": 2.9}, "devices_per_host 2.9 is not an integer"),
    ({"devices_per_host": [8]}, r"devices_per_host \[8\] is not an integer"),
    ({"devices_per_host": True}, "devices_per_host True is a boolean"),
    ({"devices_per_host": 10**12}, "more NPUs than a server holds"),
    ({"offset": float("inf")}, "offset inf is not an integer"),
    ({"offset": 1.5}, "offset 1.5 is not an integer"),
    ({"offset": 10**30}, "offset 10{30} is outside"),
    ({"offset": {"a": 1}}, "offset .* is not an integer"),
])
def test_wrong_numbers_name_the_variable(kwargs, words):
    with pytest.raises(AnsibleFilterError, match=words):
        hccn_plan(HOSTS, ["10.10.0.0/24"], **dict({"devices_per_host": 1}, **kwargs))


@pytest.mark.parametrize("hosts,planes,words", [
    ([["node1"]], ["10.0.0.0/24"], r"hosts: \['node1'\] is not a hostname"),
    ([{"a": 1}], ["10.0.0.0/24"], "is not a hostname"),
    ([None], ["10.0.0.0/24"], "hosts: None is not a hostname"),
    ({"node1": float("inf")}, ["10.0.0.0/24"], "host 'node1' has index inf, which is not an integer"),
    ({"node1": 1.5}, ["10.0.0.0/24"], "host 'node1' has index 1.5"),
    ({"node1": 10**30}, ["10.0.0.0/24"], "host .node1. index 10{30} is outside"),
    ({("a", "b"): 1}, ["10.0.0.0/24"], "is not a hostname"),
    (HOSTS, [["10.0.0.0/24"]], r"plane \['10.0.0.0/24'\] is not a string"),
    (HOSTS, [10], "plane 10 is not a string"),
    (HOSTS, [None], "plane None is not a string"),
])
def test_wrong_shapes_name_the_variable(hosts, planes, words):
    with pytest.raises(AnsibleFilterError, match=words):
        hccn_plan(hosts, planes, devices_per_host=1)


# --------------------------------------------------------------------------- the hccn module's plan


@pytest.mark.parametrize("wanted,words", [
    ({"address": "10.0.0.0", "netmask": "255.255.255.0"}, "is the network address of its subnet"),
    ({"address": "10.0.0.255", "netmask": "24"}, "is the broadcast address of its subnet"),
    ({"address": "224.0.0.5", "netmask": "255.255.255.0"}, "multicast"),
    ({"address": "127.0.0.1", "netmask": "255.0.0.0"}, "loopback"),
    ({"address": "0.0.0.0", "netmask": "255.255.255.0"}, "'this network'"),
    ({"address": "255.255.255.255", "netmask": "255.255.255.0"}, "reserved or broadcast"),
    ({"address": "10.0.0.5", "netmask": "255.255.255.0", "gateway": "10.0.0.5"}, "the device's own address"),
    ({"gateway": "224.0.0.1"}, "gateway 224.0.0.1 is a multicast"),
    ({"mtu": float("inf")}, "mtu inf is not an integer"),
    ({"mtu": 1500.5}, "mtu 1500.5 is not an integer"),
    ({"mtu": "big"}, "mtu 'big' is not an integer"),
])
def test_module_plan_refuses_addresses_no_nic_can_have(wanted, words):
    with pytest.raises(HccnError, match=words):
        plan_changes(0, {}, wanted)


def test_gateway_equal_to_the_current_address_is_refused():
    with pytest.raises(HccnError, match="own address"):
        plan_changes(0, {"address": "10.0.0.5", "netmask": "255.255.255.0"}, {"gateway": "10.0.0.5"})


@pytest.mark.parametrize("device", [float("inf"), 1.5, "x", None, -1, True])
def test_module_plan_device_id_is_checked(device):
    with pytest.raises(HccnError, match="must be a non-negative NPU device id"):
        plan_changes(device, {}, {"mtu": 9000})


def test_module_plan_wanted_must_be_a_mapping():
    with pytest.raises(HccnError, match="must be a mapping"):
        plan_changes(0, {}, ["mtu", 9000])
