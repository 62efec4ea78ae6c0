"""The roce_qos filter: every setting derived from one policy by the rules DOCUMENTATION states
(HCCL_RDMA_TC = DSCP x 4, HCCL_RDMA_SL = the PFC priority, Ascend's defaults 132/4 = DSCP 33/priority 4), the
CloudEngine snippet, the consistency check, and the errors that name the policy."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.roce_qos import FilterModule

roce_qos = FilterModule().filters()["roce_qos"]

# CloudEngine PHB of each local priority (queue): be, af1..af4, ef, cs6, cs7
PHB = {0: "be", 1: "af1", 2: "af2", 3: "af3", 4: "af4", 5: "ef", 6: "cs6", 7: "cs7"}


@pytest.mark.parametrize("policy", [None, {}])
def test_ascend_defaults(policy):
    assert roce_qos(policy, "policy") == {"pfc_priority": 4, "dscp": 33, "traffic_class": None, "prio_tc": None}
    assert roce_qos(policy, "hccl_env") == {"HCCL_RDMA_TC": "132", "HCCL_RDMA_SL": "4"}
    assert roce_qos(policy, "hccn") == {"pfc_priorities": [4]}       # DSCP map left alone without traffic_class
    assert roce_qos(policy, "host_nic") == {"pfc_priorities": [4], "trust": "dscp", "dscp_prio": {33: 4}}


@pytest.mark.parametrize("priority,dscp", [(3, 26), (0, 0), (7, 63), (5, 46)])
def test_every_place_follows_the_policy(priority, dscp):
    policy = {"pfc_priority": priority, "dscp": dscp}
    assert roce_qos(policy, "hccl_env") == {"HCCL_RDMA_TC": str(dscp * 4), "HCCL_RDMA_SL": str(priority)}
    assert roce_qos(policy, "hccn") == {"pfc_priorities": [priority]}
    assert roce_qos(policy, "host_nic") == {"pfc_priorities": [priority], "trust": "dscp",
                                            "dscp_prio": {dscp: priority}}
    lines = roce_qos(policy, "switch", interfaces=["400GE1/1/5:1", "400GE1/1/5:2"], domain="ai").splitlines()
    assert lines[0] == (f"# RoCE QoS policy: PFC priority {priority}, DSCP {dscp} "
                        f"(HCCL_RDMA_TC={dscp * 4}, HCCL_RDMA_SL={priority})")
    assert lines[1:4] == ["dcb pfc", f" priority {priority}", "#"]
    assert f" ip-dscp-inbound {dscp} phb {PHB[priority]} green" in lines
    for port in ("400GE1/1/5:1", "400GE1/1/5:2"):
        at = lines.index(f"interface {port}")
        assert lines[at + 1:at + 4] == [" trust dscp", " trust upstream ai", " dcb pfc enable mode manual"]
    assert lines[-1] == "return"
    # the consistent observation has no issue
    observed = {"hccl_env": roce_qos(policy, "hccl_env"), "hccn": {"dev0": {"pfc": [priority]}},
                "host_nic": {"eth0": roce_qos(policy, "host_nic")}}
    assert roce_qos(policy, "check", observed=observed) == []


def test_traffic_class_and_prio_tc():
    policy = {"traffic_class": 3, "prio_tc": "0,0,0,0,3,0,0,0"}
    assert roce_qos(policy, "hccn") == {"pfc_priorities": [4], "dscp_to_tc": {33: 3},
                                        "prio_tc": [0, 0, 0, 0, 3, 0, 0, 0]}
    # prio_tc alone gives the traffic class of the priority
    assert roce_qos({"prio_tc": [0, 1, 2, 3, 2, 1, 0, 0]}, "policy")["traffic_class"] == 2


def test_headroom_pool_and_dscp_mapping_slot():
    lines = roce_qos({}, "switch", interfaces=["p"], headroom_pool={"size_mbytes": 4, "slot": 1},
                     dscp_mapping_slot=1).splitlines()
    assert lines[1:3] == ["qos buffer headroom-pool size 4 mbytes slot 1", "#"]
    assert lines.index("qos buffer headroom-pool size 4 mbytes slot 1") < lines.index("dcb pfc")
    assert "dcb pfc dscp-mapping enable slot 1" in lines


def test_check_names_each_mismatch_and_its_fix():
    observed = {"hccl_env": {"HCCL_RDMA_TC": "104", "HCCL_RDMA_SL": "3"},
                "hccn": {"dev0": {"pfc": "0,0,0,1,0,0,0,0"}},
                "host_nic": {"eth0": {"pfc_priorities": [4], "trust": "pcp", "dscp_prio": {33: 3}}},
                "switch": {"leaf1": {"pfc": [4]}}}
    issues = roce_qos({}, "check", observed=observed)
    assert [(i["where"], i["setting"], i["expected"], i["observed"]) for i in issues] == [
        ("hccl_env", "HCCL_RDMA_TC", 132, "104"),
        ("hccl_env", "HCCL_RDMA_SL", 4, "3"),
        ("hccn dev0", "pfc", [4], [3]),
        ("host_nic eth0", "trust", "dscp", "pcp"),
        ("host_nic eth0", "dscp_prio[33]", 4, 3),
    ]
    assert issues[0]["fix"] == "set HCCL_RDMA_TC=132 (DSCP 33 x 4) in the vLLM service environment"
    assert issues[2]["fix"] == "hccn_tool -i <dev> -pfc -s bitmap 0,0,0,0,1,0,0,0"


@pytest.mark.parametrize("policy,what,kwargs,needle", [
    ({"dscp": 99}, "hccn", {}, r"roce_qos\('hccn'\) on policy \{'dscp': 99\}: dscp 99 must be an integer 0..63"),
    ({"pfc_priority": 8}, "hccl_env", {}, "pfc_priority 8 must be an integer 0..7"),
    ({"dscp": 33.5}, "policy", {}, "dscp 33.5 is not an integer"),
    ({"dscp": True}, "policy", {}, "dscp True must be an integer 0..63"),
    ({"priority": 4}, "policy", {}, r"unknown policy keys \['priority'\]"),
    ("dscp=33", "policy", {}, "the RoCE QoS policy must be a mapping"),
    ({"traffic_class": 2, "prio_tc": [0, 0, 0, 0, 3, 0, 0, 0]}, "hccn", {},
     "prio_tc maps priority 4 to TC 3 but traffic_class is 2"),
    ({"prio_tc": [0, 0, 0]}, "hccn", {}, "prio_tc must list 8 traffic classes, got 3"),
    ({}, "switch", {}, "interfaces must list the switch ports"),
    ({}, "switch", {"interfaces": ["400GE1/1/5:1\nreturn"]}, r"interfaces \['400GE1/1/5:1\\nreturn'\]: a switch "
                                                             r"port name is one word"),
    ({}, "switch", {"interfaces": ["p"], "domain": "a b"}, "diffserv domain name 'a b' must be one word"),
    ({}, "check", {}, "check needs observed="),
    ({}, "check", {"observed": {"nic": {}}}, r"unknown observation groups \['nic'\]"),
    ({}, "nope", {}, r"^roce_qos: unknown what='nope'; use one of policy, hccl_env, hccn, host_nic, switch, check$"),
])
def test_bad_input_is_named(policy, what, kwargs, needle):
    with pytest.raises(AnsibleFilterError, match=needle) as info:
        roce_qos(policy, what, **kwargs)
    assert str(info.value).startswith("roce_qos")
