# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: service_env
short_description: The vLLM service environment, the same for the systemd unit and the Kubernetes container
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Returns the environment variables the vLLM service runs with, as a dict of strings with sorted keys. The
    systemd path (role C(vllm_service)) and the Kubernetes path (role C(ascendai.vllm.k8s_manifests)) both take
    it from here, so the same inputs give the same environment.
  - C(ASCEND_RT_VISIBLE_DEVICES) from O(visible_devices) on O(target=systemd) only. Under Kubernetes the Ascend
    device plugin chooses the NPUs and the container runtime injects just those, numbered from 0 inside the
    container, so host NPU ids would be wrong there; O(visible_devices) is ignored.
  - C(PYTORCH_NPU_ALLOC_CONF) from O(npu_alloc_conf), C(HCCL_RDMA_TC) and C(HCCL_RDMA_SL) from the RoCE QoS
    policy O(roce_qos) (as P(ascendai.vllm.roce_qos#filter) derives them), other C(HCCL_*) from O(hccl).
  - Fails on the guide's invented variables (C(ASCEND_GLOBAL_MEM_SIZE), C(ASCEND_OP_DEV_ALLOC_BUFF)), on
    C(VLLM_API_KEY) (a secret, handled by each path on its own), and on variables that have their own option.
  - With O(vllm_ascend_version), fails on a vllm-ascend switch that release ignores, naming the form it reads.
    C(VLLM_ASCEND_BALANCE_SCHEDULING=1) switches balance scheduling on in some releases only (none from
    v0.27.1rc1, which reads C(additional_config.scheduler_config.enable_balance_scheduling)).
  - The API key and the CANN C(set_env.sh) variables are not part of the result.
options:
  _input:
    description: Other environment variables, name to value (strings or numbers; C(null) leaves one out).
    type: dict
    required: true
  visible_devices:
    description: NPU ids for C(ASCEND_RT_VISIBLE_DEVICES), a list or a comma-separated string; empty for none.
    type: raw
  npu_alloc_conf:
    description: C(PYTORCH_NPU_ALLOC_CONF); empty leaves it out.
    type: str
    default: expandable_segments:True
  roce_qos:
    description:
      - The RoCE QoS policy (C(pfc_priority), C(dscp)...) when the model spans nodes; C({}) means Ascend's
        defaults (priority 4, DSCP 33). C(null) on a single node leaves C(HCCL_RDMA_*) out.
    type: dict
  hccl:
    description: C(HCCL_*) settings such as C(HCCL_BUFFSIZE), C(HCCL_OP_EXPANSION_MODE), C(HCCL_SOCKET_IFNAME).
    type: dict
  target:
    description: Where the environment goes.
    type: str
    choices: [systemd, kubernetes]
    default: systemd
  vllm_ascend_version:
    description:
      - The vllm-ascend release that runs with this environment (C(0.23.0)); empty or C(null) checks no
        release-dependent switch.
    type: str
"""

EXAMPLES = r"""
- name: Environment file of the systemd unit
  ansible.builtin.copy:
    dest: /etc/ascendai/vllm.env
    content: |
      {% for name, value in env.items() %}
      {{ name }}={{ value }}
      {% endfor %}
    mode: "0644"
  vars:
    env: "{{ {'TASK_QUEUE_ENABLE': 2} | ascendai.vllm.service_env(visible_devices=[0, 1, 2, 3],
             roce_qos={}, hccl={'HCCL_BUFFSIZE': 200}) }}"
    # {'HCCL_BUFFSIZE': '200', 'HCCL_RDMA_SL': '4', 'HCCL_RDMA_TC': '132', 'ASCEND_RT_VISIBLE_DEVICES': '0,1,2,3',
    #  'PYTORCH_NPU_ALLOC_CONF': 'expandable_segments:True', 'TASK_QUEUE_ENABLE': '2'}  (keys sorted)

- name: The same inputs for a Kubernetes container (no device mask)
  ansible.builtin.debug:
    msg: "{{ {'TASK_QUEUE_ENABLE': 2} | ascendai.vllm.service_env(visible_devices=[0, 1, 2, 3], target='kubernetes') }}"
"""

RETURN = r"""
_value:
  description: Variable name to value (strings), keys sorted.
  type: dict
  sample: {ASCEND_RT_VISIBLE_DEVICES: "0,1,2,3", HCCL_RDMA_SL: "4", HCCL_RDMA_TC: "132",
           PYTORCH_NPU_ALLOC_CONF: "expandable_segments:True"}
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._service_env import (
    DEFAULT_NPU_ALLOC_CONF,
    ServiceEnvError,
    service_env as _service_env,
)


def service_env(extra, visible_devices=None, npu_alloc_conf=DEFAULT_NPU_ALLOC_CONF, roce_qos=None, hccl=None,
                target="systemd", vllm_ascend_version=None):
    """Return the service environment or raise AnsibleFilterError naming the input and the fix."""
    try:
        return _service_env(extra, visible_devices=visible_devices, npu_alloc_conf=npu_alloc_conf,
                            roce_qos=roce_qos, hccl=hccl, target=target, vllm_ascend_version=vllm_ascend_version)
    except ServiceEnvError as exc:
        raise AnsibleFilterError(f"service_env: {exc}") from None


class FilterModule:
    """ascendai.vllm.service_env"""

    def filters(self):
        return {"service_env": service_env}
