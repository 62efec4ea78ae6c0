"""The LLMDataDist ranktable (plugins/module_utils/_pd_ranktable.py, filter ascendai.vllm.pd_ranktable).

The golden file is what vllm-ascend v0.11.0's gen_ranktable.py itself wrote for two A2 nodes, with stand-ins for
npu-smi, hccn_tool and torch.distributed (tests/unit/fixtures/pd_ranktable/README.md says which).
"""

from __future__ import annotations

import copy
import json
import os

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.pd_ranktable import FilterModule
from ansible_collections.ascendai.vllm.plugins.module_utils import _pd_ranktable as ranktable

GOLDEN = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "pd_ranktable",
                      "ranktable-v0.11.0-a2-2node.json")


def nodes():
    """The two nodes of the golden file, as hccn_plan returns their NPU addresses (node 1 as raw -ip -g text)."""
    return [
        {"server_id": "192.0.0.1", "devices": [
            {"device": d, "address": f"29.1.1.{d + 11}", "netmask": "255.255.255.0", "plane": 0} for d in range(8)]},
        {"server_id": "192.0.0.3", "devices": [
            {"device": d, "ip_g": f"ipaddr:29.1.2.{d + 11}\nnetmask:255.255.255.0\n"} for d in reversed(range(8))]},
    ]


def test_the_text_is_the_scripts_byte_for_byte():
    with open(GOLDEN, encoding="utf-8") as handle:
        golden = handle.read()
    built = ranktable.build_ranktable(nodes(), 8, 8)
    assert ranktable.ranktable_text(built) == golden
    # key order and types: every value a string, as the script writes them
    assert list(built) == ["version", "server_count", "prefill_device_list", "decode_device_list", "status"]
    assert list(built["decode_device_list"][0]) == ["server_id", "device_id", "device_ip", "cluster_id"]
    assert built["decode_device_list"][0]["cluster_id"] == "9"


def test_the_filter_returns_the_mapping_and_the_text():
    filters = FilterModule().filters()
    result = filters["pd_ranktable"](nodes(), prefill_device_cnt=8, decode_device_cnt=8)
    with open(GOLDEN, encoding="utf-8") as handle:
        assert result["text"] == handle.read()
    assert json.loads(result["text"]) == result["ranktable"]


def test_fewer_devices_than_asked_are_refused_as_the_script_asserts():
    with pytest.raises(ranktable.RanktableError, match=r"8 \+ 9 is more than the 16 devices"):
        ranktable.build_ranktable(nodes(), 8, 9)
    with pytest.raises(AnsibleFilterError, match=r"pd_ranktable: prefill_device_cnt \+ decode_device_cnt"):
        FilterModule().filters()["pd_ranktable"](nodes(), prefill_device_cnt=17, decode_device_cnt=0)


def test_a3_adds_the_super_pod_ids_after_the_address():
    a3 = nodes()
    for node in a3:
        for entry in node["devices"]:
            entry.update(super_pod_id=0, super_device_id=entry["device"] + 100)
    built = ranktable.build_ranktable(a3, 1, 1, soc="A3")
    assert built["prefill_device_list"] == [{"server_id": "192.0.0.1", "device_id": "0", "device_ip": "29.1.1.11",
                                             "super_pod_id": "0", "super_device_id": "100", "cluster_id": "1"}]
    del a3[0]["devices"][0]["super_device_id"]
    with pytest.raises(ranktable.RanktableError, match=r"A3 needs super_device_id"):
        ranktable.build_ranktable(a3, 1, 1, soc="A3")


@pytest.mark.parametrize("change, message", [
    (lambda n: n[0]["devices"].pop(3), r"ids \[0, 1, 2, 4, 5, 6, 7\] are not 0 to 6"),
    (lambda n: n[0]["devices"][0].update(address="29.1.1"), r"is not an IPv4 address"),
    (lambda n: n[0]["devices"][0].pop("address"), r"no device address"),
    (lambda n: n[1]["devices"][0].update(ip_g="ipaddr:29.1.2.1\n"), r"only one of ipaddr/netmask"),
    (lambda n: n[0]["devices"].append(dict(n[0]["devices"][0])), r"device 0 is listed twice"),
    (lambda n: n[1].pop("server_id"), r"nodes\[1\]: give a mapping with server_id"),
])
def test_bad_facts_are_refused_naming_the_input(change, message):
    broken = copy.deepcopy(nodes())
    change(broken)
    with pytest.raises(ranktable.RanktableError, match=message):
        ranktable.build_ranktable(broken, 8, 8)
