"""The one RoCE QoS policy: derived settings, CloudEngine snippet, consistency check."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.ascendai.vllm.plugins.module_utils import _roce_qos as roce_qos
from ansible_collections.ascendai.vllm.plugins.module_utils._roce_qos import RoceQosError


def test_defaults_match_ascend_hccl_defaults():
    # hiascend env reference: HCCL_RDMA_TC default 132, HCCL_RDMA_SL default 4
    assert roce_qos.hccl_env() == {"HCCL_RDMA_TC": "132", "HCCL_RDMA_SL": "4"}
    assert roce_qos.normalize_policy() == {"pfc_priority": 4, "dscp": 33, "traffic_class": None, "prio_tc": None}


def test_default_policy_leaves_the_nic_dscp_map_alone():
    # no source gives the 910B NIC's factory dscp_to_tc / prio_tc or a TC for DSCP 33: not set, not checked
    assert roce_qos.hccn_settings() == {"pfc_priorities": [4]}
    assert roce_qos.check_consistency({"hccn": {"x": {"pfc": [4], "dscp_to_tc": {33: 0}, "prio_tc": [0] * 8}}}) == []
    # a policy that names the TC (or a prio_tc map, whose entry for the priority is the TC) manages it
    assert roce_qos.hccn_settings({"traffic_class": 3}) == {"pfc_priorities": [4], "dscp_to_tc": {33: 3}}
    assert roce_qos.normalize_policy({"prio_tc": [0, 0, 0, 0, 2, 0, 0, 0]})["traffic_class"] == 2


def test_cloudengine_snippet_headroom_pool_first():
    # CE 6800 V300R023C00 "Example for Configuring AI ECN": qos buffer headroom-pool before dcb pfc (CE6885, CE8855...)
    text = roce_qos.cloudengine_config(None, ["400GE1/1/5:1"], headroom_pool={"size_mbytes": 4, "slot": 1})
    assert text.splitlines()[1:5] == ["qos buffer headroom-pool size 4 mbytes slot 1", "#", "dcb pfc", " priority 4"]
    assert "headroom-pool" not in roce_qos.cloudengine_config(None, ["400GE1/1/5:1"])
    with pytest.raises(RoceQosError, match="headroom_pool"):
        roce_qos.cloudengine_config(None, ["400GE1/1/5:1"], headroom_pool={"size": 4})


def test_derived_settings_for_custom_policy():
    pol = {"pfc_priority": 3, "dscp": 26, "traffic_class": 2}
    assert roce_qos.hccl_env(pol) == {"HCCL_RDMA_TC": "104", "HCCL_RDMA_SL": "3"}
    assert roce_qos.hccn_settings(pol) == {"pfc_priorities": [3], "dscp_to_tc": {26: 2}}
    assert roce_qos.host_nic_settings(pol) == {"pfc_priorities": [3], "trust": "dscp", "dscp_prio": {26: 3}}


def test_cloudengine_snippet_default_policy():
    text = roce_qos.cloudengine_config(None, ["400GE1/1/5:1", "400GE1/1/5:2"])
    lines = text.splitlines()
    assert lines[1:3] == ["dcb pfc", " priority 4"]
    assert " ip-dscp-inbound 33 phb af4 green" in lines
    assert lines.count(" dcb pfc enable mode manual") == 2
    assert lines.count(" trust upstream ascend_roce") == 2
    assert "interface 400GE1/1/5:2" in lines and lines[-1] == "return"
    assert "dscp-mapping" not in text
    assert "dcb pfc dscp-mapping enable slot 1" in roce_qos.cloudengine_config(None, "100GE1/0/1", dscp_mapping_slot=1)


@pytest.mark.parametrize("policy,message", [
    ({"pfc_priority": 8}, "pfc_priority 8 must be an integer 0..7"),
    ({"dscp": -1}, "dscp -1 must be an integer 0..63"),
    ({"dscp": "af41"}, "is not an integer"),
    ({"priority": 4}, "unknown policy keys ['priority']"),
    ({"prio_tc": [0, 0, 0, 0, 1, 0, 0, 0], "traffic_class": 3},
     "prio_tc maps priority 4 to TC 1 but traffic_class is 3"),
])
def test_policy_rejections(policy, message):
    with pytest.raises(RoceQosError, match=__import__("re").escape(message)):
        roce_qos.normalize_policy(policy)


def test_snippet_needs_interfaces():
    with pytest.raises(RoceQosError, match="interfaces must list"):
        roce_qos.cloudengine_config(None, [])


def test_consistency_all_good():
    observed = {
        "hccl_env": {},  # HCCL defaults 132/4 apply
        "hccn": {"node1/0": {"pfc": "0,0,0,0,1,0,0,0", "dscp_to_tc": {33: 3}, "prio_tc": [0, 0, 0, 0, 3, 0, 0, 0]}},
        "host_nic": {"node1/ens1f0": {"pfc": [4], "trust": "dscp", "dscp_prio": {33: 4}}},
    }
    assert roce_qos.check_consistency(observed) == []


def test_consistency_reports_each_mismatch_with_fix():
    observed = {
        "hccl_env": {"HCCL_RDMA_TC": "106", "HCCL_RDMA_SL": "3"},
        "hccn": {"node2/5": {"pfc": [0, 0, 0, 1, 0, 0, 0, 0], "dscp_to_tc": {33: 0}, "prio_tc": [0] * 8}},
        # mlnx_qos default after --trust dscp: DSCP 33 -> priority 4 (dscp // 8); PFC on 3 (NVIDIA style)
        "host_nic": {"node2/ens1f0": {"pfc": [3], "trust": "pcp", "dscp_prio": {33: 4}}},
    }
    issues = roce_qos.check_consistency(observed, {"traffic_class": 3})
    by = {(i["where"], i["setting"]): i for i in issues}
    assert set(by) == {("hccl_env", "HCCL_RDMA_TC"), ("hccl_env", "HCCL_RDMA_SL"), ("hccn node2/5", "pfc"),
                       ("hccn node2/5", "dscp_to_tc[33]"), ("hccn node2/5", "prio_tc[4]"),
                       ("host_nic node2/ens1f0", "pfc"), ("host_nic node2/ens1f0", "trust")}
    assert by[("hccl_env", "HCCL_RDMA_TC")]["fix"].startswith("set HCCL_RDMA_TC=132")
    assert by[("hccn node2/5", "pfc")]["observed"] == [3]
    assert by[("hccn node2/5", "pfc")]["fix"] == "hccn_tool -i <dev> -pfc -s bitmap 0,0,0,0,1,0,0,0"
    assert by[("hccn node2/5", "dscp_to_tc[33]")]["fix"] == "hccn_tool -i <dev> -dscp_to_tc -s dscp 33 tc 3"
    assert "HCCL_RDMA_SL" in roce_qos.format_issues(issues)


@given(st.integers(0, 7), st.integers(0, 63), st.integers(0, 3))
def test_derived_settings_are_consistent_with_policy(prio, dscp, tc):
    pol = {"pfc_priority": prio, "dscp": dscp, "traffic_class": tc}
    hs = roce_qos.hccn_settings(pol)
    nic = roce_qos.host_nic_settings(pol)
    observed = {"hccl_env": roce_qos.hccl_env(pol),
                "hccn": {"x": {"pfc": hs["pfc_priorities"], "dscp_to_tc": hs["dscp_to_tc"]}},
                "host_nic": {"y": {"pfc": nic["pfc_priorities"], "trust": nic["trust"], "dscp_prio": nic["dscp_prio"]}}}
    assert roce_qos.check_consistency(observed, pol) == []
    assert int(roce_qos.hccl_env(pol)["HCCL_RDMA_TC"]) % 4 == 0


def test_consistency_takes_host_pfc_before_as_it_is():
    # ascendai.vllm.host_pfc's 'before' (dcb backend): enabled priorities under 'pfc_priorities'
    good = {"pfc_priorities": [4], "dscp_prio": {"33": 4}}
    bad = {"pfc_priorities": [3, 4], "dscp_prio": {"33": None}}
    issues = roce_qos.check_consistency({"host_nic": {"node1 ens1f0": good, "node2 ens1f0": bad}})
    assert [(i["where"], i["setting"], i["observed"]) for i in issues] == [
        ("host_nic node2 ens1f0", "pfc", [3, 4]), ("host_nic node2 ens1f0", "dscp_prio[33]", None)]
    assert issues[0]["fix"] == "enable PFC on priority 4 only, with ascendai.vllm.host_pfc"


@pytest.mark.parametrize("interfaces, domain", [
    (["400GE1/1/5:1\nundo dcb pfc"], "ascend_roce"),
    (["400GE1/1/5:1", "400GE1/1/6:1 "], "ascend_roce"),
    (["400GE1/1/5:1"], "ascend\rroce"),
    ([5], "ascend_roce"),
])
def test_cloudengine_snippet_refuses_names_that_add_commands(interfaces, domain):
    with pytest.raises(roce_qos.RoceQosError):
        roce_qos.cloudengine_config(None, interfaces, domain=domain)


@pytest.mark.parametrize("policy", [{"dscp": 33.9}, {"pfc_priority": 4.5}, {"dscp": float("inf")}, {"dscp": "33x"}])
def test_policy_numbers_are_not_truncated(policy):
    with pytest.raises(RoceQosError):
        roce_qos.normalize_policy(policy)
