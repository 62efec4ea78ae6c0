# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: hccn
short_description: Configure an Ascend NPU RoCE NIC with hccn_tool
version_added: 0.1.0
description:
  - Reads the current settings of one NPU NIC with C(hccn_tool -i DEVICE -<setting> -g), then sets only what
    differs (address and netmask, gateway, net-detect address, MTU, PFC priorities, DSCP to traffic class map,
    priority to traffic class map, TLS switch).
  - Afterwards checks that the link is C(UP) and that the net health is C(Success), failing with a message
    that names the device.
  - Can ping peer addresses from the NIC (C(hccn_tool -ping -g address A)) and report the results.
  - hccn_tool persists the settings in C(/etc/hccn.conf) itself.
options:
  device:
    description: NPU device id as hccn_tool's C(-i) takes it (0..7 on Atlas A2, 0..15 on A3).
    type: int
    required: true
  ip:
    description: IPv4 address of the NIC. Set together with O(netmask) (the current netmask is kept when omitted).
    type: str
  netmask:
    description: Netmask, dotted (V(255.255.255.0)) or as a prefix length (V(24)).
    type: str
  gateway:
    description: Default gateway; must lie in the NIC's subnet.
    type: str
  netdetect:
    description: Net-detect address that hccn_tool probes for the net health status (often the gateway).
    type: str
  mtu:
    description: MTU, 68..9702.
    type: int
  pfc_priorities:
    description:
      - Priorities with PFC enabled, as a list (V([4])), or hccn_tool's bitmap string V(0,0,0,0,1,0,0,0).
      - Ascend's default RoCE policy uses priority 4 (see the P(ascendai.vllm.roce_qos#filter) filter).
    type: raw
  dscp_to_tc:
    description: >-
      DSCP to traffic class entries to enforce (other DSCPs are left alone), for example V({33: 3}).
    type: dict
  prio_tc:
    description: Traffic class (0..3) of each priority 0..7, as a list or comma-separated string.
    type: raw
  tls:
    description: Whether hccn_tool's TLS switch is on. Huawei's multi-node guides recommend it off on all nodes.
    type: bool
  hccn_tool_path:
    description: Path of hccn_tool. Default is C(hccn_tool) on PATH or in C(/usr/local/Ascend/driver/tools).
    type: path
  check_link:
    description: Fail unless C(-link -g) reports C(UP) after the changes.
    type: bool
    default: true
  check_health:
    description: Fail unless C(-net_health -g) reports C(Success) after the changes.
    type: bool
    default: true
  health_timeout:
    description: Seconds to wait for the net health to become C(Success) after a change (it reads C(Init) first).
    type: int
    default: 30
  ping:
    description: >-
      Addresses to ping from this NIC after configuring it; the module fails when one gets no reply.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - ascendai.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Computes and reports the commands without running them; link and health are not checked when
      changes are pending.
  diff_mode:
    support: full
    details: Shows the managed settings before and after.
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: Configure NPU NIC 0 with Ascend's RoCE policy
  ascendai.vllm.hccn:
    device: 0
    ip: 29.1.137.205
    netmask: 255.255.0.0
    gateway: 29.1.0.1
    netdetect: 29.1.0.1
    pfc_priorities: [4]
    dscp_to_tc: {33: 3}
    tls: false

- name: Configure every NIC from an address plan
  ascendai.vllm.hccn:
    device: "{{ item.device }}"
    ip: "{{ item.address }}"
    netmask: "{{ item.netmask }}"
    gateway: "{{ item.gateway }}"
    netdetect: "{{ item.netdetect }}"
  loop: "{{ npu_plan[inventory_hostname] }}"

- name: Ping a peer NIC on the other node
  ascendai.vllm.hccn:
    device: 0
    ping: [29.1.170.143]
"""

RETURN = r"""
commands:
  description: hccn_tool commands run (or, in check mode, that would run), in order.
  returned: always
  type: list
  elements: list
  sample: [["/usr/local/Ascend/driver/tools/hccn_tool", "-i", "0", "-pfc", "-s", "bitmap", "0,0,0,0,1,0,0,0"]]
before:
  description: Managed settings as read before the change.
  returned: always
  type: dict
  sample: {"pfc": [0, 0, 0, 0, 0, 0, 0, 0]}
after:
  description: Managed settings after the change.
  returned: always
  type: dict
  sample: {"pfc": [0, 0, 0, 0, 1, 0, 0, 0]}
link:
  description: Link status after the change (C(UP) or C(DOWN)); null when not checked.
  returned: always
  type: str
  sample: UP
net_health:
  description: Net health status after the change; null when not checked.
  returned: always
  type: str
  sample: Success
ping:
  description: One entry per O(ping) address.
  returned: always
  type: list
  elements: dict
  sample: [{"address": "29.1.137.205", "device": 3, "transmitted": 3, "received": 3, "loss_percent": 0.0,
            "times_ms": [1.418, 0.034, 0.04]}]
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ascendai.vllm.plugins.module_utils._hccn import (
    HccnError,
    check_link_and_health,
    health_ok,
    parse_dscp_to_tc,
    parse_gateway,
    parse_ip,
    parse_link,
    parse_mtu,
    parse_net_health,
    parse_netdetect,
    parse_pfc,
    parse_ping,
    parse_prio_tc,
    parse_tls,
    plan_changes,
    read_commands,
    read_not_preset,
)

_PARSERS = {
    "ip": parse_ip,
    "gateway": parse_gateway,
    "netdetect": parse_netdetect,
    "mtu": parse_mtu,
    "pfc": parse_pfc,
    "prio_tc": parse_prio_tc,
    "dscp_to_tc": parse_dscp_to_tc,
    "tls": parse_tls,
}
# -ip -g / -gateway -g fail with "... no ip (gateway) was preset there!" (exit 13 / 2) on an unconfigured NIC:
# that read means "not set"; any other failure (driver not loaded, device busy) fails the module.
_UNSET_ON_ERROR = {"ip": {"address": None, "netmask": None}, "gateway": {"gateway": None}}


def read_state(run, device, keys, tool):
    """Run the -g commands for ``keys`` through ``run(argv) -> (rc, out, err)``; return the current state."""
    state = {}
    for name, argv in read_commands(device, keys, tool).items():
        rc, out, err = run(argv)
        if rc != 0:
            if name in _UNSET_ON_ERROR and read_not_preset(name, rc, f"{err or ''}{out or ''}"):
                value = _UNSET_ON_ERROR[name]
            else:
                raise HccnError(f"NPU device {device}: {' '.join(argv)} failed (rc={rc}): {(err or out).strip()}")
        else:
            value = _PARSERS[name](out)
        if name == "ip":
            state.update(value)
        elif name == "gateway":
            state["gateway"] = value["gateway"]
        elif name == "tls":
            state["tls"] = value["enabled"]
        else:
            state[name] = value
    return state


def main():
    module = AnsibleModule(
        argument_spec={
            "device": {"type": "int", "required": True},
            "ip": {"type": "str"},
            "netmask": {"type": "str"},
            "gateway": {"type": "str"},
            "netdetect": {"type": "str"},
            "mtu": {"type": "int"},
            "pfc_priorities": {"type": "raw"},
            "dscp_to_tc": {"type": "dict"},
            "prio_tc": {"type": "raw"},
            "tls": {"type": "bool"},
            "hccn_tool_path": {"type": "path"},
            "check_link": {"type": "bool", "default": True},
            "check_health": {"type": "bool", "default": True},
            "health_timeout": {"type": "int", "default": 30},
            "ping": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    device = p["device"]
    tool = p["hccn_tool_path"] or module.get_bin_path(
        "hccn_tool", required=True, opt_dirs=["/usr/local/Ascend/driver/tools"])

    def run(argv):
        return module.run_command(argv)

    wanted = {
        "address": p["ip"], "netmask": p["netmask"], "gateway": p["gateway"], "netdetect": p["netdetect"],
        "mtu": p["mtu"], "pfc": p["pfc_priorities"], "prio_tc": p["prio_tc"], "dscp_to_tc": p["dscp_to_tc"],
        "tls": p["tls"],
    }
    keys = [k for k, v in wanted.items() if v is not None]
    result = {"changed": False, "commands": [], "before": {}, "after": {}, "link": None, "net_health": None, "ping": []}
    try:
        current = read_state(run, device, keys, tool) if keys else {}
        commands, before, after = plan_changes(device, current, wanted, tool=tool)
    except HccnError as exc:
        module.fail_json(msg=str(exc), **result)
    result.update(changed=bool(commands), commands=commands, before=before, after=after)
    if module._diff:
        result["diff"] = {"before": before, "after": after,
                          "before_header": f"hccn device {device}", "after_header": f"hccn device {device}"}

    if not module.check_mode:
        for argv in commands:
            rc, out, err = run(argv)
            if rc != 0:
                module.fail_json(msg=f"NPU device {device}: {' '.join(argv)} failed (rc={rc}): {(err or out).strip()}",
                                 rc=rc, stdout=out, stderr=err, **result)

    verify = not (module.check_mode and commands)
    problems = []
    try:
        if verify and p["check_link"]:
            rc, out, err = run([tool, "-i", str(device), "-link", "-g"])
            if rc != 0:
                raise HccnError(f"NPU device {device}: hccn_tool -link -g failed (rc={rc}): {(err or out).strip()}")
            result["link"] = parse_link(out)
        if verify and p["check_health"]:
            deadline = time.time() + (max(p["health_timeout"], 0) if commands else 0)
            while True:
                rc, out, err = run([tool, "-i", str(device), "-net_health", "-g"])
                if rc != 0:
                    raise HccnError(
                        f"NPU device {device}: hccn_tool -net_health -g failed (rc={rc}): {(err or out).strip()}")
                result["net_health"] = parse_net_health(out)
                if health_ok(result["net_health"]) or time.time() >= deadline:
                    break
                time.sleep(2)
        problems = check_link_and_health(device, result["link"], result["net_health"])
        for address in p["ping"]:
            rc, out, err = run([tool, "-i", str(device), "-ping", "-g", "address", address])
            try:
                entry = parse_ping(out)
            except HccnError:
                entry = {"device": device, "address": address, "transmitted": None, "received": 0,
                         "loss_percent": 100.0, "times_ms": []}
            entry["address"] = address
            entry["rc"] = rc
            result["ping"].append(entry)
            if not entry.get("received"):
                problems.append(f"NPU device {device}: no reply from {address} (hccn_tool -i {device} -ping -g "
                                f"address {address}, rc={rc})")
    except HccnError as exc:
        module.fail_json(msg=str(exc), **result)
    if problems:
        module.fail_json(msg="; ".join(problems), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
