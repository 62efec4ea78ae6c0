"""Filters hccn_plan and roce_qos: AnsibleFilterError messages name the input and the fix."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.ascendai.vllm.plugins.filter.hccn_plan import FilterModule as PlanFilters
from ansible_collections.ascendai.vllm.plugins.filter.roce_qos import FilterModule as QosFilters

hccn_plan = PlanFilters().filters()["hccn_plan"]
roce_qos = QosFilters().filters()["roce_qos"]
PLANES = [f"10.20.{i}.0/24" for i in range(8)]


def test_hccn_plan_result():
    plan = hccn_plan(["node1", "node2"], PLANES, gateway="first")
    assert plan["node2"][7] == {"device": 7, "address": "10.20.7.3", "netmask": "255.255.255.0",
                                "gateway": "10.20.7.1", "netdetect": "10.20.7.1", "plane": "10.20.7.0/24"}


@pytest.mark.parametrize("hosts,planes,kwargs,needle", [
    (["n1"], PLANES[:7] + ["10.20.6.128/25"], {}, "planes 10.20.6.0/24 and 10.20.6.128/25 overlap"),
    ({"n1": 1, "n2": 1}, PLANES, {}, "share index 1"),
    (["n1"], PLANES, {"gateway": "10.21.0.1"}, "10.21.0.1 is outside plane 10.20.0.0/24"),
    ([f"n{i}" for i in range(300)], PLANES, {}, "plane 10.20.0.0/24 is too small"),
])
def test_hccn_plan_rejections(hosts, planes, kwargs, needle):
    with pytest.raises(AnsibleFilterError, match="hccn_plan: ") as info:
        hccn_plan(hosts, planes, **kwargs)
    assert needle in str(info.value)


def test_roce_qos_outputs():
    assert roce_qos({}, "hccl_env") == {"HCCL_RDMA_TC": "132", "HCCL_RDMA_SL": "4"}
    assert roce_qos(None, "hccn") == {"pfc_priorities": [4]}
    assert roce_qos({"traffic_class": 3}, "hccn") == {"pfc_priorities": [4], "dscp_to_tc": {33: 3}}
    assert roce_qos({}, "switch", interfaces=["p"], headroom_pool={"size_mbytes": 4, "slot": 1}).splitlines()[1] == \
        "qos buffer headroom-pool size 4 mbytes slot 1"
    assert "ip-dscp-inbound 33 phb af4 green" in roce_qos({}, "switch", interfaces=["400GE1/1/5:1"])
    issues = roce_qos({}, "check", observed={"hccl_env": {"HCCL_RDMA_SL": "3"}})
    assert [i["setting"] for i in issues] == ["HCCL_RDMA_SL"]


def test_roce_qos_errors():
    with pytest.raises(AnsibleFilterError, match=r"roce_qos\('hccn'\) on policy \{'dscp': 99\}: dscp 99"):
        roce_qos({"dscp": 99}, "hccn")
    with pytest.raises(AnsibleFilterError, match="unknown what='nope'"):
        roce_qos({}, "nope")
    with pytest.raises(AnsibleFilterError, match="check needs observed"):
        roce_qos({}, "check")
