# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_pfc
short_description: Set PFC priorities and DSCP trust on a host NIC (iproute2 dcb or mlnx_qos)
version_added: 0.1.0
description:
  - Reads the NIC's current PFC and DSCP settings, then changes only what differs.
  - Backend C(dcb) (iproute2) uses C(dcb pfc show/set dev X) and C(dcb -N app show dev X dscp-prio) /
    C(dcb app replace dev X dscp-prio D:P); a DSCP APP entry is what switches the NIC to DSCP trust there.
  - Backend C(mlnx_qos) (NVIDIA MLNX_OFED / mlnx-tools) uses C(mlnx_qos -i X --pfc ... --trust dscp) and
    C(--dscp2prio set,D,P).
  - Use the same PFC priority and DSCP as the NPU NICs and the switches (see the P(ascendai.vllm.roce_qos#filter)
    filter, V(host_nic) output).
options:
  interface:
    description: Network interface name.
    type: str
    required: true
  backend:
    description: Tool to use. V(auto) picks C(dcb) when found, else C(mlnx_qos).
    type: str
    choices: [auto, dcb, mlnx_qos]
    default: auto
  pfc_priorities:
    description: Priorities with PFC enabled (all others are disabled). Omit to leave PFC alone.
    type: list
    elements: int
  trust:
    description:
      - Priority trust state. V(pcp) is only possible with the V(mlnx_qos) backend; with V(dcb), V(dscp) requires
        O(dscp_prio).
    type: str
    choices: [dscp, pcp]
  dscp_prio:
    description: >-
      DSCP to priority entries to enforce, for example V({33: 4}).
    type: dict
  dcb_path:
    description: Path of C(dcb).
    type: path
  mlnx_qos_path:
    description: Path of C(mlnx_qos).
    type: path
extends_documentation_fragment:
  - ascendai.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Reports the commands that would run without running them.
  diff_mode:
    support: full
    details: Shows the PFC priorities, trust and DSCP entries before and after.
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: Lossless RoCE on the host NIC with Ascend's policy (priority 4, DSCP 33)
  ascendai.vllm.host_pfc:
    interface: ens1f0np0
    pfc_priorities: [4]
    trust: dscp
    dscp_prio: {33: 4}

- name: Same, from the one policy
  vars:
    nic: "{{ roce_policy | ascendai.vllm.roce_qos('host_nic') }}"
  ascendai.vllm.host_pfc:
    interface: ens1f0np0
    pfc_priorities: "{{ nic.pfc_priorities }}"
    trust: "{{ nic.trust }}"
    dscp_prio: "{{ nic.dscp_prio }}"
"""

RETURN = r"""
backend:
  description: Backend used.
  returned: always
  type: str
  sample: dcb
commands:
  description: Commands run (or that would run in check mode).
  returned: always
  type: list
  elements: list
  sample: [["dcb", "pfc", "set", "dev", "ens1f0np0", "prio-pfc", "0:off", "1:off", "2:off", "3:off", "4:on",
            "5:off", "6:off", "7:off"]]
before:
  description: Managed settings before.
  returned: always
  type: dict
  sample: {"pfc_priorities": []}
after:
  description: Managed settings after.
  returned: always
  type: dict
  sample: {"pfc_priorities": [4]}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ascendai.vllm.plugins.module_utils._host_pfc import (
    HostPfcError,
    parse_dcb_app_dscp,
    parse_dcb_pfc,
    parse_mlnx_qos,
    plan_dcb,
    plan_mlnx_qos,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "interface": {"type": "str", "required": True},
            "backend": {"type": "str", "default": "auto", "choices": ["auto", "dcb", "mlnx_qos"]},
            "pfc_priorities": {"type": "list", "elements": "int"},
            "trust": {"type": "str", "choices": ["dscp", "pcp"]},
            "dscp_prio": {"type": "dict"},
            "dcb_path": {"type": "path"},
            "mlnx_qos_path": {"type": "path"},
        },
        supports_check_mode=True,
    )
    p = module.params
    iface = p["interface"]
    backend = p["backend"]
    if backend == "auto":
        dcb = p["dcb_path"] or module.get_bin_path("dcb")
        backend = "dcb" if dcb else "mlnx_qos"
    wanted = {"pfc_priorities": p["pfc_priorities"], "trust": p["trust"], "dscp_prio": p["dscp_prio"]}
    result = {"changed": False, "backend": backend, "commands": [], "before": {}, "after": {}}

    def run(argv, what):
        rc, out, err = module.run_command(argv)
        if rc != 0:
            hint = " (the driver may not support DCB netlink; try backend=mlnx_qos)" if backend == "dcb" else ""
            module.fail_json(msg=f"{iface}: {' '.join(argv)} failed (rc={rc}) while {what}: "
                                 f"{(err or out).strip()}{hint}", rc=rc, stdout=out, stderr=err, **result)
        return out

    try:
        if backend == "dcb":
            tool = p["dcb_path"] or module.get_bin_path("dcb", required=True)
            pfc = parse_dcb_pfc(run([tool, "pfc", "show", "dev", iface], "reading PFC"))
            app = {}
            if p["dscp_prio"] or p["trust"]:
                app = parse_dcb_app_dscp(run([tool, "-N", "app", "show", "dev", iface, "dscp-prio"], "reading APP"))
            commands, before, after = plan_dcb(iface, pfc, app, wanted, dcb=tool)
        else:
            tool = p["mlnx_qos_path"] or module.get_bin_path("mlnx_qos", required=True)
            current = parse_mlnx_qos(run([tool, "-i", iface], "reading QoS state"))
            commands, before, after = plan_mlnx_qos(iface, current, wanted, mlnx_qos=tool)
    except HostPfcError as exc:
        module.fail_json(msg=f"{iface}: {exc}", **result)

    result.update(changed=bool(commands), commands=commands, before=before, after=after)
    if module._diff:
        result["diff"] = {"before": before, "after": after, "before_header": iface, "after_header": iface}
    if not module.check_mode:
        for argv in commands:
            run(argv, "applying")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
