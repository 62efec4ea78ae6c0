# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: pd_ranktable
short_description: Build the LLMDataDist ranktable of vllm-ascend v0.11.0 from the nodes' NPU NIC addresses
version_added: 0.5.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Returns the JSON ranktable that vllm-ascend's C(examples/disaggregated_prefill_v1/gen_ranktable.sh) and
    C(gen_ranktable.py) write (v0.11.0rc1 to v0.11.0, the releases the P/D plan takes C(LLMDataDistCMgrConnector)
    in), for C(DISAGGREGATED_PREFILL_RANK_TABLE_PATH), with the same keys in the same order and every value a
    string, without running torchrun on the nodes.
  - Nodes in the script's C(--ips) order; each node's devices 0 to N-1 with their C(hccn_tool -i N -ip -g) address
    (A2) or C(-vnic -g) address and super pod ids (A3); C(cluster_id) counts all devices from 1; the first
    O(prefill_device_cnt) devices are the prefill list, the next O(decode_device_cnt) the decode list.
  - Refuses more prefill plus decode devices than the nodes have (the script asserts the same), device ids that
    are not 0 to N-1 (the script takes every device of the node), and addresses that are not IPv4.
  - The source lines are in C(plugins/module_utils/_pd_ranktable.py) and in docs/sources.md,
    "Prefill/decode disaggregation plan".
options:
  _input:
    description:
      - The nodes, each with C(server_id) (the node's address in the script's C(--ips)) and C(devices), a list of
        C(device) (the NPU id) with C(address) (as P(ascendai.vllm.hccn_plan#filter) gives it) or C(ip_g) (the
        raw output of C(hccn_tool -i N -ip -g)); on A3 also C(super_pod_id) and C(super_device_id).
    type: list
    elements: dict
    required: true
  prefill_device_cnt:
    description: The script's C(--prefill-device-cnt).
    type: int
    required: true
  decode_device_cnt:
    description: The script's C(--decode-device-cnt).
    type: int
    required: true
  soc:
    description: C(A2) or C(A3) (adds C(super_pod_id) and C(super_device_id) to each device).
    type: str
    default: A2
    choices: [A2, A3]
"""

EXAMPLES = r"""
- name: Write the ranktable of two A2 nodes, one prefill and one decode
  ansible.builtin.copy:
    content: "{{ (pd_nodes | ascendai.vllm.pd_ranktable(prefill_device_cnt=8, decode_device_cnt=8)).text }}"
    dest: /etc/ascendai/vllm/ranktable.json
    mode: "0644"
  vars:
    pd_nodes:
      - server_id: 192.0.0.1
        devices: "{{ hccn_addresses['p1'] }}"
      - server_id: 192.0.0.3
        devices: "{{ hccn_addresses['d1'] }}"
"""

RETURN = r"""
_value:
  description: C(ranktable) (the mapping) and C(text) (the file as the script writes it, C(json.dump) with indent 4).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._pd_ranktable import (
    RanktableError,
    build_ranktable,
    ranktable_text,
)


def pd_ranktable(nodes, prefill_device_cnt, decode_device_cnt, soc="A2"):
    """Return {"ranktable", "text"} (see DOCUMENTATION), or raise AnsibleFilterError naming the input."""
    try:
        table = build_ranktable(nodes, prefill_device_cnt, decode_device_cnt, soc=soc)
    except RanktableError as exc:
        raise AnsibleFilterError(f"pd_ranktable: {exc}") from exc
    return {"ranktable": table, "text": ranktable_text(table)}


class FilterModule:
    """ascendai.vllm.pd_ranktable"""

    def filters(self):
        return {"pd_ranktable": pd_ranktable}
