# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Host NIC PFC / DSCP state through iproute2 ``dcb`` or NVIDIA ``mlnx_qos``: parsers and change planning.

Formats (verbatim samples with sources in ``tests/unit/fixtures/host_pfc/``):

* ``dcb pfc show dev X``::

    pfc-cap 8 macsec-bypass off delay 4096
    prio-pfc 0:off 1:off 2:off 3:off 4:off 5:off 6:on 7:on

* ``dcb [-N] app show dev X dscp-prio``: ``dscp-prio 0:0 CS3:2 CS3:3 CS6:6`` (symbolic names unless ``-N``)
* ``mlnx_qos -i X``: ``Priority trust state: dscp``, ``dscp2prio mapping:`` rows ``prio:4 dscp:39,...,32,``,
  ``PFC configuration:`` / ``priority 0 1 ... 7`` / ``enabled 0 0 0 1 0 0 0 0``.
"""

from __future__ import annotations

import re


class HostPfcError(Exception):
    """Raised for tool output that cannot be read or settings that cannot be applied."""


# RFC 2474/2597/3246 names that dcb app prints (from /etc/iproute2/rt_dsfield, upper-cased by dcb)
_DSCP_NAMES = {"CS0": 0, "CS1": 8, "CS2": 16, "CS3": 24, "CS4": 32, "CS5": 40, "CS6": 48, "CS7": 56,
               "AF11": 10, "AF12": 12, "AF13": 14, "AF21": 18, "AF22": 20, "AF23": 22, "AF31": 26, "AF32": 28,
               "AF33": 30, "AF41": 34, "AF42": 36, "AF43": 38, "EF": 46, "BE": 0, "DEFAULT": 0}


def _lines(text):
    if not isinstance(text, str):
        raise HostPfcError(f"tool output must be text, got {type(text).__name__}")
    return text.splitlines()


def dscp_value(token):
    token = str(token).strip()
    if token.isdigit():
        value = int(token)
    elif token.upper() in _DSCP_NAMES:
        value = _DSCP_NAMES[token.upper()]
    else:
        try:
            value = int(token, 0)
        except ValueError:
            raise HostPfcError(f"unknown DSCP name {token!r}") from None
    if not 0 <= value <= 63:
        raise HostPfcError(f"DSCP {token!r} is outside 0..63")
    return value


def parse_dcb_pfc(text):
    """``dcb pfc show dev X`` -> {'pfc_cap', 'macsec_bypass', 'delay', 'pfc': bitmap of 8}."""
    result = {"pfc_cap": None, "macsec_bypass": None, "delay": None, "pfc": None}
    for line in _lines(text):
        words = line.split()
        i = 0
        while i < len(words):
            w = words[i]
            if w == "prio-pfc":
                bits = [None] * 8
                i += 1
                while i < len(words) and re.match(r"^\d+:(on|off)$", words[i]):
                    prio, state = words[i].split(":")
                    if int(prio) > 7:
                        raise HostPfcError(f"priority {prio} out of range in {line!r}")
                    bits[int(prio)] = 1 if state == "on" else 0
                    i += 1
                if None in bits:
                    raise HostPfcError(f"prio-pfc does not list all priorities 0..7: {line!r}")
                result["pfc"] = bits
                continue
            if w in ("pfc-cap", "delay") and i + 1 < len(words) and words[i + 1].isdigit():
                result[w.replace("-", "_")] = int(words[i + 1])
                i += 2
                continue
            if w == "macsec-bypass" and i + 1 < len(words):
                result["macsec_bypass"] = words[i + 1] == "on"
                i += 2
                continue
            i += 1
    if result["pfc"] is None:
        raise HostPfcError(f"no prio-pfc in dcb pfc show output: {text!r}")
    return result


def parse_dcb_app_dscp(text):
    """``dcb app show dev X dscp-prio`` -> {dscp: [prio, ...]} (a DSCP may carry several priorities)."""
    mapping = {}
    for line in _lines(text):
        words = line.split()
        if not words or words[0] != "dscp-prio":
            continue
        for token in words[1:]:
            m = re.match(r"^([A-Za-z0-9x]+):(\d)$", token)
            if not m:
                raise HostPfcError(f"unrecognised dscp-prio entry {token!r} in {line!r}")
            mapping.setdefault(dscp_value(m.group(1)), []).append(int(m.group(2)))
    return mapping


def parse_mlnx_qos(text):
    """``mlnx_qos -i X`` -> {'trust', 'pfc': bitmap, 'dscp2prio': {dscp: prio}, 'dcbx_mode'}."""
    result = {"trust": None, "pfc": None, "dscp2prio": {}, "dcbx_mode": None}
    prios = None
    for line in _lines(text):
        s = line.strip()
        m = re.match(r"^Priority trust state:\s*(\w+)", s)
        if m:
            result["trust"] = m.group(1).lower()
            continue
        m = re.match(r"^DCBX mode:\s*(.+)$", s)
        if m:
            result["dcbx_mode"] = m.group(1).strip()
            continue
        m = re.match(r"^prio:(\d)\s+dscp:([\d,]+)", s)
        if m:
            for d in m.group(2).split(","):
                if d:
                    result["dscp2prio"][int(d)] = int(m.group(1))
            continue
        words = s.split()
        if words and words[0] == "priority" and len(words) == 9 and all(w.isdigit() for w in words[1:]):
            prios = [int(w) for w in words[1:]]
            continue
        if words and words[0] == "enabled" and prios is not None and len(words) == 9:
            if prios != list(range(8)):
                raise HostPfcError(f"mlnx_qos PFC table does not list priorities 0..7: {prios}")
            bits = [int(w) for w in words[1:]]
            if any(b not in (0, 1) for b in bits):
                raise HostPfcError(f"mlnx_qos PFC enabled row has values other than 0/1: {s!r}")
            result["pfc"] = bits
    if result["pfc"] is None:
        raise HostPfcError(f"no PFC configuration table in mlnx_qos output: {text!r}")
    return result


def pfc_bits(priorities):
    if priorities is None:
        return None
    if isinstance(priorities, int):
        priorities = [priorities]
    bits = [0] * 8
    for p in priorities:
        p = int(p)
        if not 0 <= p <= 7:
            raise HostPfcError(f"PFC priority {p} is outside 0..7")
        bits[p] = 1
    return bits


def _dscp_prio(value):
    if value is None:
        return None
    if not isinstance(value, dict):
        raise HostPfcError(f"dscp_prio must map DSCP to priority, got {value!r}")
    out = {}
    for k, v in value.items():
        d = dscp_value(k)
        p = int(v)
        if not 0 <= p <= 7:
            raise HostPfcError(f"dscp_prio {k}: {v} priority is outside 0..7")
        out[d] = p
    return out


def plan_dcb(interface, current_pfc, current_app, wanted, dcb="dcb"):
    """dcb backend. current_pfc: parse_dcb_pfc(); current_app: parse_dcb_app_dscp(); wanted: pfc_priorities,
    trust, dscp_prio. Returns (commands, before, after)."""
    commands, before, after = [], {}, {}
    bits = pfc_bits(wanted.get("pfc_priorities"))
    trust = wanted.get("trust")
    dscp_prio = _dscp_prio(wanted.get("dscp_prio"))
    if trust not in (None, "dscp"):
        raise HostPfcError(f"the dcb backend sets DSCP trust through dcb app dscp-prio entries; trust={trust!r} "
                           "cannot be set with it (use backend=mlnx_qos, or leave trust unset)")
    if trust == "dscp" and not dscp_prio:
        raise HostPfcError("trust=dscp with the dcb backend needs dscp_prio (the DSCP -> priority entries that "
                           "switch the NIC to DSCP trust)")
    if bits is not None:
        before["pfc_priorities"] = [i for i, b in enumerate(current_pfc["pfc"]) if b]
        after["pfc_priorities"] = [i for i, b in enumerate(bits) if b]
        if current_pfc["pfc"] != bits:
            commands.append([dcb, "pfc", "set", "dev", interface, "prio-pfc"]
                            + [f"{i}:{'on' if b else 'off'}" for i, b in enumerate(bits)])
    if dscp_prio:
        before["dscp_prio"] = {d: current_app.get(d) for d in sorted(dscp_prio)}
        after["dscp_prio"] = {d: [dscp_prio[d]] for d in sorted(dscp_prio)}
        changed = [d for d in sorted(dscp_prio) if current_app.get(d) != [dscp_prio[d]]]
        if changed:
            commands.append([dcb, "app", "replace", "dev", interface, "dscp-prio"]
                            + [f"{d}:{dscp_prio[d]}" for d in changed])
    return commands, before, after


def plan_mlnx_qos(interface, current, wanted, mlnx_qos="mlnx_qos"):
    """mlnx_qos backend. current: parse_mlnx_qos(). Returns (commands, before, after)."""
    before, after = {}, {}
    args = []
    extra = []
    bits = pfc_bits(wanted.get("pfc_priorities"))
    trust = wanted.get("trust")
    dscp_prio = _dscp_prio(wanted.get("dscp_prio"))
    if trust is not None and trust not in ("dscp", "pcp"):
        raise HostPfcError(f"trust must be dscp or pcp, got {trust!r}")
    if bits is not None:
        before["pfc_priorities"] = [i for i, b in enumerate(current["pfc"]) if b]
        after["pfc_priorities"] = [i for i, b in enumerate(bits) if b]
        if current["pfc"] != bits:
            args += ["--pfc", ",".join(str(b) for b in bits)]
    if trust is not None:
        before["trust"] = current["trust"]
        after["trust"] = trust
        if current["trust"] != trust:
            args += ["--trust", trust]
    if dscp_prio:
        before["dscp_prio"] = {d: current["dscp2prio"].get(d) for d in sorted(dscp_prio)}
        after["dscp_prio"] = {d: dscp_prio[d] for d in sorted(dscp_prio)}
        for d in sorted(dscp_prio):
            seen = current["dscp2prio"].get(d)
            # mlnx_qos prints the dscp2prio table only in DSCP trust; its default maps DSCP d to priority d // 8
            if seen is None and current["trust"] != "dscp":
                seen = d // 8
            if seen != dscp_prio[d]:
                extra.append([mlnx_qos, "-i", interface, "--dscp2prio", f"set,{d},{dscp_prio[d]}"])
    # one mapping per call, as the mlnx_qos examples do (kernel selftests mlxsw, NVIDIA docs)
    commands = ([[mlnx_qos, "-i", interface] + args] if args else []) + extra
    return commands, before, after
