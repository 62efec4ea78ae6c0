"""The service_env filter: the vLLM service environment DOCUMENTATION describes, the same for systemd and
Kubernetes except the device mask, and the errors that name the input and the fix."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.service_env import FilterModule

service_env = FilterModule().filters()["service_env"]


def test_documented_example():
    env = service_env({"TASK_QUEUE_ENABLE": 2}, visible_devices=[0, 1, 2, 3], roce_qos={},
                      hccl={"HCCL_BUFFSIZE": 200})
    # EXAMPLES: keys sorted, every value a string; roce_qos {} = DSCP 33 x 4 = 132, priority 4
    assert env == {"ASCEND_RT_VISIBLE_DEVICES": "0,1,2,3", "HCCL_BUFFSIZE": "200", "HCCL_RDMA_SL": "4",
                   "HCCL_RDMA_TC": "132", "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
                   "TASK_QUEUE_ENABLE": "2"}
    assert list(env) == sorted(env)


def test_kubernetes_gets_the_same_environment_without_the_device_mask():
    inputs = {"visible_devices": "4,5,6,7", "roce_qos": {"pfc_priority": 3, "dscp": 26},
              "hccl": {"HCCL_OP_EXPANSION_MODE": "AIV"}}
    systemd = service_env({"OMP_NUM_THREADS": 8}, **inputs)
    kubernetes = service_env({"OMP_NUM_THREADS": 8}, target="kubernetes", **inputs)
    assert systemd.pop("ASCEND_RT_VISIBLE_DEVICES") == "4,5,6,7"
    assert kubernetes == systemd
    assert kubernetes["HCCL_RDMA_TC"] == "104" and kubernetes["HCCL_RDMA_SL"] == "3"


def test_single_node_flags_nulls_and_allocator():
    env = service_env({"VLLM_ASCEND_ENABLE_FLASHCOMM": True, "UNSET_ME": None}, npu_alloc_conf="")
    assert env == {"VLLM_ASCEND_ENABLE_FLASHCOMM": "1"}          # no HCCL_RDMA_* without roce_qos, no allocator
    assert service_env({}, npu_alloc_conf="max_split_size_mb:512, garbage_collection_threshold:0.6") == {
        "PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:512,garbage_collection_threshold:0.6"}


@pytest.mark.parametrize("extra,kwargs,needle", [
    ({"VLLM_API_KEY": "x"}, {}, "extra: VLLM_API_KEY must not be set here; the API key is a secret"),
    ({"ASCEND_GLOBAL_MEM_SIZE": "1"}, {}, "extra: ASCEND_GLOBAL_MEM_SIZE is "),
    ({"ASCEND_RT_VISIBLE_DEVICES": "0"}, {}, "extra: set ASCEND_RT_VISIBLE_DEVICES through visible_devices"),
    ({"HCCL_BUFFSIZE": 200}, {}, "extra: HCCL_BUFFSIZE is an HCCL setting; put it in hccl"),
    ({}, {"hccl": {"HCCL_RDMA_TC": 132}}, "hccl: set HCCL_RDMA_TC through roce_qos"),
    ({}, {"hccl": {"OMP_NUM_THREADS": 8}}, r"hccl: OMP_NUM_THREADS is not an HCCL_\* variable; put it in extra"),
    ({"1BAD": "x"}, {}, "extra: '1BAD' is not an environment variable name"),
    ({"A": "x\nLD_PRELOAD=/tmp/x.so"}, {}, r"A='x\\nLD_PRELOAD=/tmp/x.so': the value holds the control character"),
    ({"A": [1]}, {}, r"A=\[1\]: an environment value must be a string or a number, not list"),
    ("A=1", {}, "extra='A=1': give a mapping of variable name to value"),
    ({}, {"visible_devices": [0, 0]}, r"visible_devices=\[0, 0\]: an NPU id is listed twice"),
    ({}, {"visible_devices": "0,x"}, "visible_devices='0,x': 'x' is not an NPU id"),
    ({}, {"visible_devices": {"0": 1}}, r"visible_devices=\{'0': 1\}: give a list of NPU ids"),
    ({}, {"npu_alloc_conf": "expandable_segments:yes"}, "npu_alloc_conf='expandable_segments:yes': "
                                                        "'expandable_segments:yes' not understood"),
    ({}, {"roce_qos": {"dscp": 64}}, r"roce_qos=\{'dscp': 64\}: dscp 64 must be an integer 0..63"),
    ({}, {"target": "docker"}, "target='docker': use one of systemd, kubernetes"),
])
def test_bad_input_is_named(extra, kwargs, needle):
    with pytest.raises(AnsibleFilterError, match=rf"^service_env: {needle}"):
        service_env(extra, **kwargs)


def test_vllm_ascend_release_is_passed_through():
    with pytest.raises(AnsibleFilterError, match=r"^service_env: VLLM_ASCEND_BALANCE_SCHEDULING=1 .* ignores it"):
        service_env({"VLLM_ASCEND_BALANCE_SCHEDULING": "1"}, vllm_ascend_version="0.27.1rc1")
    assert service_env({"VLLM_ASCEND_BALANCE_SCHEDULING": "1"}, npu_alloc_conf="",
                       vllm_ascend_version="0.26.0rc1") == {"VLLM_ASCEND_BALANCE_SCHEDULING": "1"}
