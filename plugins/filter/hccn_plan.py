# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: hccn_plan
short_description: Plan NPU NIC addresses per host and device from one CIDR per NIC plane
version_added: 0.1.0
description:
  - Gives every NPU NIC of every host an address in its plane (device V(i) on plane V(i mod len(planes)),
    the usual 8-plane layout of Atlas A2 servers), with netmask, gateway and net-detect address.
  - Host index V(k) gets address V(network + offset + k) in each plane (with more devices than planes,
    consecutive addresses per host).
  - Rejects overlapping planes, duplicate addresses (also with the gateway/net-detect address), gateways and
    detect addresses outside their plane, and planes too small for the hosts, naming them.
  - Rejects planes that overlap 0.0.0.0/8 (0.0.0.0 is unspecified), loopback 127.0.0.0/8, multicast 224.0.0.0/4
    or the reserved 240.0.0.0/4 (with 255.255.255.255); no planned address is a plane's network or broadcast
    address.
  - Numbers must be whole (V(2.9), V(inf) and booleans are refused, not truncated) and hostnames strings; every
    error names the variable.
  - The result feeds the P(ascendai.vllm.hccn#module) module, one loop item per device.
positional: planes
options:
  _input:
    description: Inventory hostnames (list; index = position) or a dict hostname -> host index.
    type: raw
    required: true
  planes:
    description: One IPv4 CIDR per NIC plane.
    type: list
    elements: str
    required: true
  devices_per_host:
    description: NPU NICs per host (8 on Atlas A2, 16 on A3); a multiple of the number of planes.
    type: int
    default: 8
  gateway:
    description:
      - >-
        Gateway rule per plane - V(first) or V(last) usable address, an integer offset, an address, or null for
        none. A list gives one rule per plane.
    type: raw
  netdetect:
    description: Net-detect rule, like O(gateway); V(gateway) (default) uses the gateway address.
    type: raw
    default: gateway
  offset:
    description: Offset of host index 0 inside each plane. Default 1, or 2 when a rule is V(first).
    type: int
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: Plan the NPU NIC addresses of the NPU hosts
  ansible.builtin.set_fact:
    npu_plan: >-
      {{ groups['npu_nodes'] | ascendai.vllm.hccn_plan(
           ['10.10.0.0/24', '10.10.1.0/24', '10.10.2.0/24', '10.10.3.0/24',
            '10.10.4.0/24', '10.10.5.0/24', '10.10.6.0/24', '10.10.7.0/24'],
           gateway='first') }}
  # npu_plan['node1'][0] == {'device': 0, 'address': '10.10.0.2', 'netmask': '255.255.255.0',
  #                          'gateway': '10.10.0.1', 'netdetect': '10.10.0.1', 'plane': '10.10.0.0/24'}
"""

RETURN = r"""
_value:
  description: Hostname -> list (ordered by device) of dicts with C(device), C(address), C(netmask),
    C(gateway), C(netdetect), C(plane).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._hccn import (
    HccnError,
    plan_addresses,
)


def hccn_plan(hosts, planes, devices_per_host=8, gateway=None, netdetect="gateway", offset=None):
    try:
        return plan_addresses(hosts, planes, devices_per_host=devices_per_host, gateway=gateway,
                              netdetect=netdetect, offset=offset)
    except HccnError as exc:
        raise AnsibleFilterError(f"hccn_plan: {exc}") from None


class FilterModule:
    def filters(self):
        return {"hccn_plan": hccn_plan}
