"""The service environment both deployment paths share (module_utils._service_env and its filter)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.ascendai.vllm.plugins.filter.service_env import FilterModule
from ansible_collections.ascendai.vllm.plugins.module_utils._service_env import (
    ServiceEnvError,
    service_env,
    visible_devices_value,
)


def test_systemd_env_for_a_multi_node_model():
    env = service_env({"TASK_QUEUE_ENABLE": 2, "OMP_NUM_THREADS": 1}, visible_devices=[4, 5, 6, 7],
                      roce_qos={"pfc_priority": 3, "dscp": 26}, hccl={"HCCL_BUFFSIZE": 200})
    assert env == {
        "ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7",
        "HCCL_BUFFSIZE": "200",
        "HCCL_RDMA_SL": "3",
        "HCCL_RDMA_TC": "104",
        "OMP_NUM_THREADS": "1",
        "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
        "TASK_QUEUE_ENABLE": "2",
    }
    assert list(env) == sorted(env)


def test_single_node_defaults_have_no_hccl_qos():
    assert service_env({}) == {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
    assert service_env(None, npu_alloc_conf="") == {}
    # {} is Ascend's default policy: DSCP 33 x 4 = 132, priority 4
    assert service_env({}, roce_qos={}, npu_alloc_conf=None) == {"HCCL_RDMA_SL": "4", "HCCL_RDMA_TC": "132"}


def test_kubernetes_target_drops_only_the_device_mask():
    args = dict(visible_devices="0,1", roce_qos={}, hccl={"HCCL_OP_EXPANSION_MODE": "AIV"},
                npu_alloc_conf="max_split_size_mb:250")
    systemd = service_env({"VLLM_ASCEND_ENABLE_NZ": 0}, **args)
    k8s = service_env({"VLLM_ASCEND_ENABLE_NZ": 0}, target="kubernetes", **args)
    assert systemd.pop("ASCEND_RT_VISIBLE_DEVICES") == "0,1"
    assert k8s == systemd
    assert k8s["PYTORCH_NPU_ALLOC_CONF"] == "max_split_size_mb:250"
    assert k8s["VLLM_ASCEND_ENABLE_NZ"] == "0"


def test_booleans_and_nulls():
    assert service_env({"VLLM_USE_V1": True, "HF_HUB_OFFLINE": False, "OMP_NUM_THREADS": None},
                       npu_alloc_conf="") == {"HF_HUB_OFFLINE": "0", "VLLM_USE_V1": "1"}


@pytest.mark.parametrize("kwargs,message", [
    ({"extra": {"ASCEND_GLOBAL_MEM_SIZE": "90%"}}, "ASCEND_GLOBAL_MEM_SIZE is not a CANN/torch_npu variable"),
    ({"extra": {"ASCEND_OP_DEV_ALLOC_BUFF": 1}}, "PYTORCH_NPU_ALLOC_CONF"),
    ({"extra": {"VLLM_API_KEY": "x"}}, "VLLM_API_KEY must not be set here"),
    ({"extra": {"ASCEND_RT_VISIBLE_DEVICES": "0"}}, "set ASCEND_RT_VISIBLE_DEVICES through visible_devices"),
    ({"hccl": {"HCCL_RDMA_TC": 132}}, "set HCCL_RDMA_TC through roce_qos"),
    ({"hccl": {"OMP_NUM_THREADS": 1}}, "OMP_NUM_THREADS is not an HCCL_* variable; put it in extra"),
    ({"extra": {"HCCL_BUFFSIZE": 200}}, "HCCL_BUFFSIZE is an HCCL setting; put it in hccl"),
    ({"extra": {"1BAD": "x"}}, "'1BAD' is not an environment variable name"),
    ({"extra": {"X": [1]}}, "X=[1]: an environment value must be a string or a number"),
    ({"extra": "A=1"}, "extra='A=1': give a mapping"),
    ({"npu_alloc_conf": "expandable_segments:yes"}, "'expandable_segments:yes' not understood"),
    ({"roce_qos": {"dscp": 64}}, "roce_qos={'dscp': 64}: dscp 64 must be an integer 0..63"),
    ({"visible_devices": [0, 0]}, "an NPU id is listed twice"),
    ({"visible_devices": "0,a"}, "'a' is not an NPU id"),
    ({"target": "docker"}, "target='docker': use one of systemd, kubernetes"),
])
def test_rejections_name_the_input_and_the_fix(kwargs, message):
    extra = kwargs.pop("extra", {})
    with pytest.raises(ServiceEnvError) as err:
        service_env(extra, **kwargs)
    assert message in str(err.value)


def test_filter_wraps_errors_and_passes_values():
    flt = FilterModule().filters()["service_env"]
    assert flt({}, visible_devices=[0], target="systemd") == {
        "ASCEND_RT_VISIBLE_DEVICES": "0", "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
    with pytest.raises(AnsibleFilterError, match="service_env: extra: VLLM_API_KEY"):
        flt({"VLLM_API_KEY": "secret"})


@given(st.lists(st.integers(min_value=0, max_value=63), unique=True, min_size=1, max_size=16))
def test_visible_devices_list_and_string_agree(ids):
    text = ",".join(str(i) for i in ids)
    assert visible_devices_value(ids) == text
    assert visible_devices_value(text) == text
    assert visible_devices_value(" , ".join(str(i) for i in ids)) == text


def test_a_switch_the_node_release_ignores_is_refused_on_both_paths():
    # vllm-ascend 0.27.1rc1 no longer defines VLLM_ASCEND_BALANCE_SCHEDULING (vllm_ascend/envs.py); 0.23.0 reads it
    for target in ("systemd", "kubernetes"):
        with pytest.raises(ServiceEnvError, match=r"VLLM_ASCEND_BALANCE_SCHEDULING=1 in the service environment "
                                                  r"does not switch balance scheduling on in vllm-ascend 0\.27\.1rc1"):
            service_env({"VLLM_ASCEND_BALANCE_SCHEDULING": 1}, target=target, vllm_ascend_version="0.27.1rc1")
        env = service_env({"VLLM_ASCEND_BALANCE_SCHEDULING": 1}, target=target, vllm_ascend_version="0.23.0")
        assert env["VLLM_ASCEND_BALANCE_SCHEDULING"] == "1"
    # release not known: not checked
    assert service_env({"VLLM_ASCEND_BALANCE_SCHEDULING": 1})["VLLM_ASCEND_BALANCE_SCHEDULING"] == "1"
    with pytest.raises(ServiceEnvError, match="quote it in YAML"):
        service_env({}, vllm_ascend_version=0.23)
