# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: roce_qos
short_description: Derive every RoCE QoS setting from one policy (PFC priority, DSCP) and check them
version_added: 0.1.0
description:
  - The input is the policy, a dict with C(pfc_priority) (default 4), C(dscp) (default 33), optionally
    C(traffic_class) (the NPU NIC TC the DSCP maps to) and C(prio_tc); Ascend's defaults
    C(HCCL_RDMA_TC=132) and C(HCCL_RDMA_SL=4) correspond to DSCP 33 and priority 4.
  - Without C(traffic_class) or C(prio_tc) the NPU NIC's DSCP to TC map is left alone (not set, not checked);
    no Huawei source gives the 910B NIC's factory maps or a TC for DSCP 33.
  - V(hccl_env) gives C(HCCL_RDMA_TC) (DSCP x 4) and C(HCCL_RDMA_SL) (the priority) for the service environment.
  - V(hccn) gives options for P(ascendai.vllm.hccn#module); V(host_nic) options for P(ascendai.vllm.host_pfc#module).
  - V(switch) gives a Huawei CloudEngine configuration snippet for O(interfaces).
  - V(check) compares O(observed) settings with the policy and returns a list of mismatches, each with the fix.
  - V(policy) returns the normalised policy.
positional: what
options:
  _input:
    description: The policy; null or {} means Ascend's defaults.
    type: dict
    required: true
  what:
    description: What to derive.
    type: str
    choices: [policy, hccl_env, hccn, host_nic, switch, check]
    required: true
  interfaces:
    description: Switch ports facing the NPU NICs (for V(switch)).
    type: list
    elements: str
  domain:
    description: DiffServ domain name used in the V(switch) snippet.
    type: str
    default: ascend_roce
  dscp_mapping_slot:
    description: Adds C(dcb pfc dscp-mapping enable slot N), needed on some CloudEngine models (CE6885, CE8855...).
    type: int
  headroom_pool:
    description:
      - For V(switch) - adds C(qos buffer headroom-pool size <size_mbytes> mbytes slot <slot>) before C(dcb pfc),
        which Huawei's AI ECN example requires on the CE6855-48XS8CQ, CE6863E-48S8CQ, CE6885, CE6885-LL,
        CE6885-SAN, CE6885-T, CE8851-32CQ4BQ and CE8855 (example values 4 and 1). Null leaves it out.
    type: dict
  observed:
    description:
      - For V(check) - dict with any of C(hccl_env) (env dict), C(hccn), C(host_nic), C(switch) (each a dict
        label -> settings with C(pfc), C(dscp_to_tc), C(prio_tc), C(trust), C(dscp_prio)).
    type: dict
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: Service environment for HCCL
  ansible.builtin.set_fact:
    hccl_qos_env: "{{ {} | ascendai.vllm.roce_qos('hccl_env') }}"   # {'HCCL_RDMA_TC': '132', 'HCCL_RDMA_SL': '4'}

- name: Switch snippet
  ansible.builtin.copy:
    dest: /tmp/ce-roce.cfg
    content: "{{ roce_policy | ascendai.vllm.roce_qos('switch', interfaces=['400GE1/1/5:1', '400GE1/1/5:2']) }}"

- name: Fail on any mismatch, saying what to change
  ansible.builtin.assert:
    that: issues | length == 0
    fail_msg: "{{ issues | map(attribute='fix') | join('; ') }}"
  vars:
    issues: "{{ roce_policy | ascendai.vllm.roce_qos('check', observed=observed_qos) }}"
"""

RETURN = r"""
_value:
  description: Depends on O(what) - a dict (policy, hccl_env, hccn, host_nic), a string (switch) or a list of
    mismatches (check), each with C(where), C(setting), C(expected), C(observed), C(fix).
  type: raw
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._roce_qos import (
    RoceQosError,
    check_consistency,
    cloudengine_config,
    hccl_env,
    hccn_settings,
    host_nic_settings,
    normalize_policy,
)


def roce_qos(policy, what, interfaces=None, domain="ascend_roce", dscp_mapping_slot=None, observed=None,
             headroom_pool=None):
    try:
        if what == "policy":
            return normalize_policy(policy)
        if what == "hccl_env":
            return hccl_env(policy)
        if what == "hccn":
            return hccn_settings(policy)
        if what == "host_nic":
            return host_nic_settings(policy)
        if what == "switch":
            return cloudengine_config(policy, interfaces or [], domain=domain, dscp_mapping_slot=dscp_mapping_slot,
                                      headroom_pool=headroom_pool)
        if what == "check":
            if observed is None:
                raise RoceQosError("check needs observed=... (what was read from HCCL env, NPU NICs, host NICs)")
            return check_consistency(observed, policy)
    except RoceQosError as exc:
        raise AnsibleFilterError(f"roce_qos({what!r}) on policy {policy!r}: {exc}") from None
    raise AnsibleFilterError(f"roce_qos: unknown what={what!r}; use one of policy, hccl_env, hccn, host_nic, "
                             "switch, check")


class FilterModule:
    def filters(self):
        return {"roce_qos": roce_qos}
