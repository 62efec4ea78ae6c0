# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""One RoCE QoS policy (PFC priority + DSCP) and everything derived from it.

The same two numbers must agree in four places, or RDMA traffic lands in a lossy queue:

* HCCL (in the vLLM service environment): ``HCCL_RDMA_TC`` = DSCP x 4 (the ToS byte; must be a multiple of 4)
  and ``HCCL_RDMA_SL`` = the PFC priority. Ascend's defaults are 132 and 4, i.e. DSCP 33 / priority 4
  (hiascend CANN env reference envref_07_0089/0090: "HCCL_RDMA_SL must equal the NIC's PFC priority").
* the NPU NICs (hccn_tool): PFC enabled on the priority (``-pfc -s bitmap``); the DSCP -> traffic class map
  (``-dscp_to_tc``) and priority -> TC map (``-prio_tc``) only when the policy names them (``traffic_class`` /
  ``prio_tc``): neither the driver source nor Huawei's documentation gives the NIC's factory maps or a TC for
  Ascend's DSCP 33, so by default they are left as the NIC has them;
* host NICs (``ascendai.vllm.host_pfc``): PFC on the priority, DSCP trust, DSCP -> priority;
* switches: PFC on the priority, DSCP trust, DSCP -> the priority's queue (Huawei CloudEngine snippet below;
  syntax from the CloudEngine 6800 V300R023C00 configuration guide "Example for Configuring AI ECN":
  ``qos buffer headroom-pool size 4 mbytes slot 1`` (CE6855-48XS8CQ, CE6863E-48S8CQ, CE6885, CE6885-LL,
  CE6885-SAN, CE6885-T, CE8851-32CQ4BQ, CE8855 only), ``dcb pfc`` / `` priority 4``, ``diffserv domain`` /
  ``ip-dscp-inbound 24 phb af4 green``, interface ``trust dscp`` / ``trust upstream <domain>`` /
  ``dcb pfc enable mode manual``; see docs/sources.md).

Pure stdlib functions; ``check_consistency`` returns the mismatches with what to change.
"""

from __future__ import annotations

DEFAULT_PFC_PRIORITY = 4
DEFAULT_DSCP = 33
# The NPU NIC traffic class the DSCP is mapped to (hccn_tool accepts TC 0..3). No source gives the factory
# dscp_to_tc / prio_tc of a 910B NIC or a TC for DSCP 33, so by default the maps are not managed (None); a policy
# that names traffic_class (or prio_tc) gets them set and checked.
DEFAULT_TRAFFIC_CLASS = None

# Huawei CloudEngine PHB (per-hop behaviour) names by local priority / queue: be=0, af1..af4=1..4, ef=5,
# cs6=6, cs7=7 (the CE guide's example maps its RoCE DSCP to af4 for queue 4 and CNPs to cs6 for queue 6).
CLOUDENGINE_PHB = ("be", "af1", "af2", "af3", "af4", "ef", "cs6", "cs7")


class RoceQosError(Exception):
    """Raised for a policy or observation that cannot be used."""


def _int(value, what, low, high):
    try:
        number = int(value)
        if number != float(value):          # 33.9 is not DSCP 33
            raise ValueError(value)
    except (TypeError, ValueError, OverflowError):
        raise RoceQosError(f"{what} {value!r} is not an integer") from None
    if isinstance(value, bool) or not low <= number <= high:
        raise RoceQosError(f"{what} {value!r} must be an integer {low}..{high}")
    return number


def normalize_policy(policy=None):
    """{'pfc_priority': 0..7, 'dscp': 0..63, 'traffic_class': 0..3 | None, 'prio_tc': [8 TCs] | None}.

    traffic_class None (the default) leaves the NIC's DSCP map alone; with prio_tc given it is prio_tc[priority].
    """
    if policy is not None and not isinstance(policy, dict):
        raise RoceQosError(f"the RoCE QoS policy must be a mapping (pfc_priority, dscp, traffic_class, prio_tc), got "
                           f"{type(policy).__name__} {str(policy)[:60]!r}")
    p = dict(policy or {})
    unknown = set(p) - {"pfc_priority", "dscp", "traffic_class", "prio_tc"}
    if unknown:
        raise RoceQosError(f"unknown policy keys {sorted(unknown)}; allowed: pfc_priority, dscp, traffic_class, "
                           "prio_tc")
    out = {
        "pfc_priority": _int(p.get("pfc_priority", DEFAULT_PFC_PRIORITY), "pfc_priority", 0, 7),
        "dscp": _int(p.get("dscp", DEFAULT_DSCP), "dscp", 0, 63),
        "traffic_class": (None if p.get("traffic_class", DEFAULT_TRAFFIC_CLASS) is None else
                          _int(p["traffic_class"], "traffic_class", 0, 3)),
        "prio_tc": None,
    }
    if p.get("prio_tc") is not None:
        tcs = p["prio_tc"]
        if isinstance(tcs, str):
            tcs = [t for t in tcs.split(",") if t.strip()]
        tcs = [_int(t, "prio_tc entry", 0, 3) for t in tcs]
        if len(tcs) != 8:
            raise RoceQosError(f"prio_tc must list 8 traffic classes, got {len(tcs)}")
        if out["traffic_class"] is None:
            out["traffic_class"] = tcs[out["pfc_priority"]]
        if tcs[out["pfc_priority"]] != out["traffic_class"]:
            raise RoceQosError(f"prio_tc maps priority {out['pfc_priority']} to TC {tcs[out['pfc_priority']]} but "
                               f"traffic_class is {out['traffic_class']}: make them equal")
        out["prio_tc"] = tcs
    return out


def hccl_env(policy=None):
    """HCCL environment for the service: HCCL_RDMA_TC = DSCP*4, HCCL_RDMA_SL = PFC priority (strings)."""
    p = normalize_policy(policy)
    return {"HCCL_RDMA_TC": str(p["dscp"] * 4), "HCCL_RDMA_SL": str(p["pfc_priority"])}


def pfc_bitmap(priority):
    return [1 if i == priority else 0 for i in range(8)]


def hccn_settings(policy=None):
    """Settings for ``ascendai.vllm.hccn`` (its options pfc_priorities, dscp_to_tc, prio_tc)."""
    p = normalize_policy(policy)
    out = {"pfc_priorities": [p["pfc_priority"]]}
    if p["traffic_class"] is not None:
        out["dscp_to_tc"] = {p["dscp"]: p["traffic_class"]}
    if p["prio_tc"] is not None:
        out["prio_tc"] = list(p["prio_tc"])
    return out


def host_nic_settings(policy=None):
    """Settings for ``ascendai.vllm.host_pfc`` (pfc_priorities, trust, dscp_prio)."""
    p = normalize_policy(policy)
    return {"pfc_priorities": [p["pfc_priority"]], "trust": "dscp", "dscp_prio": {p["dscp"]: p["pfc_priority"]}}


def cloudengine_config(policy=None, interfaces=(), domain="ascend_roce", dscp_mapping_slot=None, headroom_pool=None):
    """Huawei CloudEngine configuration snippet (VRP syntax) for the NPU-facing ports.

    headroom_pool: None, or {'size_mbytes': 4, 'slot': 1} for ``qos buffer headroom-pool size 4 mbytes slot 1``,
    which the AI ECN example requires before ``dcb pfc`` on the CE6855-48XS8CQ, CE6863E-48S8CQ, CE6885(-LL/-SAN/-T),
    CE8851-32CQ4BQ and CE8855.
    """
    p = normalize_policy(policy)
    if isinstance(interfaces, str):
        interfaces = [interfaces]
    if not isinstance(interfaces, (list, tuple)) or not interfaces:
        raise RoceQosError("interfaces must list the switch ports facing the NPU NICs, e.g. ['400GE1/1/5:1']")
    # one word each: a newline or a space would add a command to the snippet pasted into the switch
    bad = [port for port in interfaces if not isinstance(port, str) or not port or any(
        c.isspace() or not c.isprintable() for c in port)]
    if bad:
        raise RoceQosError(f"interfaces {bad!r}: a switch port name is one word without spaces or control "
                           "characters, e.g. '400GE1/1/5:1'")
    if not domain or any(c.isspace() or not c.isprintable() for c in str(domain)):
        raise RoceQosError(f"diffserv domain name {domain!r} must be one word")
    phb = CLOUDENGINE_PHB[p["pfc_priority"]]
    title = (f"# RoCE QoS policy: PFC priority {p['pfc_priority']}, DSCP {p['dscp']} "
             f"(HCCL_RDMA_TC={p['dscp'] * 4}, HCCL_RDMA_SL={p['pfc_priority']})")
    lines = [title]
    if headroom_pool is not None:
        if not isinstance(headroom_pool, dict) or set(headroom_pool) - {"size_mbytes", "slot"}:
            raise RoceQosError(f"headroom_pool {headroom_pool!r} must be a dict with size_mbytes and slot, e.g. "
                               "{'size_mbytes': 4, 'slot': 1}")
        size = _int(headroom_pool.get("size_mbytes", 4), "headroom_pool size_mbytes", 1, 1024)
        slot = _int(headroom_pool.get("slot", 1), "headroom_pool slot", 1, 64)
        lines += [f"qos buffer headroom-pool size {size} mbytes slot {slot}", "#"]
    lines += [
        "dcb pfc",
        f" priority {p['pfc_priority']}",
        "#",
    ]
    if dscp_mapping_slot is not None:
        lines += [f"dcb pfc dscp-mapping enable slot {dscp_mapping_slot}", "#"]
    lines += [
        f"diffserv domain {domain}",
        f" ip-dscp-inbound {p['dscp']} phb {phb} green",
        "#",
    ]
    for port in interfaces:
        lines += [
            f"interface {port}",
            " trust dscp",
            f" trust upstream {domain}",
            " dcb pfc enable mode manual",
            "#",
        ]
    lines.append("return")
    return "\n".join(lines) + "\n"


def _as_bits(value):
    """Observed PFC as a bitmap: accepts a bitmap list/str of 8, or a list of enabled priorities."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
    value = [int(v) for v in value]
    if len(value) == 8 and all(v in (0, 1) for v in value):
        return value
    return [1 if i in value else 0 for i in range(8)]


def _int_or_none(value):
    # 'before' of the modules holds None for a DSCP with no entry yet
    return None if value is None else int(value)


def _prios(bits):
    return [i for i, b in enumerate(bits) if b]


def check_consistency(observed, policy=None):
    """Compare what was observed everywhere with the policy.

    observed = {
      'hccl_env': {'HCCL_RDMA_TC': '132', 'HCCL_RDMA_SL': '4'}   (absent keys = HCCL defaults 132 / 4),
      'hccn': {label: {'pfc': bitmap|priorities, 'dscp_to_tc': {dscp: tc}, 'prio_tc': [8]}},
      'host_nic': {label: {'pfc': bitmap|priorities, 'trust': 'dscp'|'pcp', 'dscp_prio': {dscp: prio}}}
                  (host_pfc's 'before' works as it is: 'pfc_priorities' stands for 'pfc'),
      'switch': {label: {'pfc': bitmap|priorities, 'trust': 'dscp', 'dscp_prio': {dscp: prio}}},
    }
    Returns a list of {'where', 'setting', 'expected', 'observed', 'fix'}; empty means consistent.
    """
    p = normalize_policy(policy)
    prio, dscp, tc = p["pfc_priority"], p["dscp"], p["traffic_class"]
    want_bits = pfc_bitmap(prio)
    issues = []

    def add(where, setting, expected, seen, fix):
        issues.append({"where": where, "setting": setting, "expected": expected, "observed": seen, "fix": fix})

    if observed is not None and not isinstance(observed, dict):
        raise RoceQosError("observed must be a mapping of hccl_env, hccn, host_nic, switch, got "
                           f"{type(observed).__name__}")
    obs = dict(observed or {})
    unknown = set(obs) - {"hccl_env", "hccn", "host_nic", "switch"}
    if unknown:
        raise RoceQosError(f"unknown observation groups {sorted(unknown)}; allowed: hccl_env, hccn, host_nic, switch")

    if "hccl_env" in obs:
        env = dict(obs["hccl_env"] or {})
        rdma_tc = env.get("HCCL_RDMA_TC", 132)
        rdma_sl = env.get("HCCL_RDMA_SL", 4)
        try:
            rdma_tc_i = int(rdma_tc)
        except (TypeError, ValueError):
            rdma_tc_i = None
        if rdma_tc_i is None or rdma_tc_i % 4 != 0 or rdma_tc_i // 4 != dscp:
            add("hccl_env", "HCCL_RDMA_TC", dscp * 4, rdma_tc,
                f"set HCCL_RDMA_TC={dscp * 4} (DSCP {dscp} x 4) in the vLLM service environment")
        if str(rdma_sl) != str(prio):
            add("hccl_env", "HCCL_RDMA_SL", prio, rdma_sl,
                f"set HCCL_RDMA_SL={prio} (the PFC priority) in the vLLM service environment")

    for label, state in sorted((obs.get("hccn") or {}).items(), key=lambda kv: str(kv[0])):
        state = dict(state or {})
        where = f"hccn {label}"
        if "pfc" in state:
            bits = _as_bits(state["pfc"])
            if bits != want_bits:
                add(where, "pfc", _prios(want_bits), _prios(bits),
                    f"hccn_tool -i <dev> -pfc -s bitmap {','.join(map(str, want_bits))}")
        if "dscp_to_tc" in state and tc is not None:
            seen = {int(k): _int_or_none(v) for k, v in dict(state["dscp_to_tc"] or {}).items()}.get(dscp)
            if seen != tc:
                add(where, f"dscp_to_tc[{dscp}]", tc, seen, f"hccn_tool -i <dev> -dscp_to_tc -s dscp {dscp} tc {tc}")
        if state.get("prio_tc") is not None:
            prio_tc = [int(t) for t in state["prio_tc"]]
            if p["prio_tc"] is not None and prio_tc != p["prio_tc"]:
                add(where, "prio_tc", p["prio_tc"], prio_tc,
                    f"hccn_tool -i <dev> -prio_tc -s map {','.join(map(str, p['prio_tc']))}")
            elif len(prio_tc) == 8 and tc is not None and prio_tc[prio] != tc:
                add(where, f"prio_tc[{prio}]", tc, prio_tc[prio],
                    f"priority {prio} must use TC {tc} (the TC DSCP {dscp} maps to): set prio_tc so that entry "
                    f"{prio} is {tc}, or set the policy traffic_class to {prio_tc[prio]}")

    for group in ("host_nic", "switch"):
        for label, state in sorted((obs.get(group) or {}).items(), key=lambda kv: str(kv[0])):
            state = dict(state or {})
            if "pfc" not in state and "pfc_priorities" in state:
                # ascendai.vllm.host_pfc reports the enabled priorities under this name ('before')
                state["pfc"] = state["pfc_priorities"]
            where = f"{group} {label}"
            tool = "ascendai.vllm.host_pfc" if group == "host_nic" else "the switch configuration (roce_qos switch)"
            if "pfc" in state:
                bits = _as_bits(state["pfc"])
                if bits != want_bits:
                    add(where, "pfc", _prios(want_bits), _prios(bits),
                        f"enable PFC on priority {prio} only, with {tool}")
            if "trust" in state and str(state["trust"]).lower() != "dscp":
                add(where, "trust", "dscp", state["trust"], f"set DSCP trust with {tool}")
            if "dscp_prio" in state:
                seen = {int(k): _int_or_none(v) for k, v in dict(state["dscp_prio"] or {}).items()}.get(dscp)
                if seen != prio:
                    add(where, f"dscp_prio[{dscp}]", prio, seen, f"map DSCP {dscp} to priority {prio} with {tool}")
    return issues


def format_issues(issues):
    return "; ".join(f"{i['where']}: {i['setting']} is {i['observed']!r}, expected {i['expected']!r} -> {i['fix']}"
                     for i in issues)
