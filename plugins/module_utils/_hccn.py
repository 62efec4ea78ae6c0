# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""hccn_tool (Ascend NPU RoCE NIC) output parsers, change planning and address planning.

Pure functions only (stdlib), used by the ``ascendai.vllm.hccn`` module on the node and by the
``ascendai.vllm.hccn_plan`` filter on the controller.

Output formats (910B hccn_tool source, github.com/verylucky01/driver src/custom/network/hccn/ascend910B, and the
captures in ``tests/unit/fixtures/hccn_tool/``; see docs/sources.md):

* ``-ip -g``          ``ipaddr:29.1.112.213`` / ``netmask:255.255.0.0``; with no address set it prints
  ``Get ipconf failed, because no ip was preset there!`` on stderr and exits 13 (UDA_DSMI_IPCONF_NOT_PRESET_ERR)
* ``-gateway -g``     ``default gateway:11.12.165.1, Iface:eth0``; with no gateway set
  ``Get gateway failed, because no gateway was preset there!`` on stderr, exit 2 (UDA_DSMI_GATEWAY_NOT_PRESET_ERR)
* ``-netdetect -g``   ``netdetect addr: 29.1.0.1`` (driver source) or ``netdetect address: 11.12.165.1`` (docs)
* ``-link -g``        ``link status: UP``
* ``-net_health -g``  ``net health status: Success`` (``Init``, ``Socket fail(ed)``, ``Receive timeout`` ...)
* ``-lldp -g``        TLV blocks (``Port ID TLV`` / ``Ifname: 400GE1/1/20:2`` ...)
* ``-pfc -g``         ``PFC configuration:`` / ``priority   0 1 2 3 4 5 6 7`` / ``enabled    0 0 0 0 1 0 0 0``
* ``-prio_tc -g``     ``Priority mapping:`` / ``priority   0 1 ...`` / ``TC         0 0 ...``
* ``-dscp_to_tc -g``  ``dscp      tc`` header then ``%4d%8u`` rows (``  33       3``)
* ``-tls -g``         ``dev_id:0, tls switch[0](0:disable, 1:enable), tls preconfigured[1]...``
* ``-mtu -g``         ``mtu:9000``
* ``-ping -g address A [pkt LEN]``  ``device 3 PING A`` / ``recv seq=0,time=1.418000ms`` /
  ``3 packets transmitted, 3 received, 0.00% packet loss``; ``pkt`` is the packet's data length (0..65507), the
  count is the device's (no option); a reply with ``recv time out seq`` makes the tool exit non-zero
* ``/etc/hccn.conf``  ``address_N=...``, ``netmask_N=...``, ``netdetect_N=...``, ``gateway_N=...``, ``mtu_N=``,
  ``bitmap_N=`` (PFC), ``prio_tc_N=``, ``dscp_tc_N=33:3,``, ``tls_enable_N=``, ``send_arp_status_N=``
"""

from __future__ import annotations

import ipaddress
import re

DEFAULT_HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"
PRIORITY_COUNT = 8
MTU_MIN = 68
MTU_MAX = 9702
DSCP_MAX = 63
TC_MAX = 3

# g_net_health_status in the driver source (hccn_tool cmd.c); "Socket failed" is what older drivers print.
NET_HEALTH_STATUSES = ("Success", "Socket fail", "Receive timeout", "Unreachable", "Time exceeded", "Fault",
                       "Init", "Thread error", "Detect ip set", "Unknown")

# Order in which settings are applied: the address first (gateway must lie in its subnet), then the rest.
SETTING_ORDER = ("address", "netmask", "gateway", "netdetect", "mtu", "pfc", "prio_tc", "dscp_to_tc", "tls")


class HccnError(Exception):
    """Raised for hccn_tool output that cannot be read, or settings that cannot be applied."""


# No id, counter or setting hccn_tool prints is wider than a 64-bit integer (20 digits). A longer number is not
# hccn_tool output, and Python refuses to convert more than 4300 digits at all: refuse it before int() sees it.
_MAX_DIGITS = 20


def _uint(digits, what):
    """A whole number printed by hccn_tool (ASCII digits, at most 20 of them), or HccnError naming it."""
    preview = digits[:24] + ("..." if len(digits) > 24 else "")
    if len(digits) > _MAX_DIGITS:
        raise HccnError(f"{what}: a number of {len(digits)} digits ({preview!r}); hccn_tool prints at most "
                        f"{_MAX_DIGITS}, so this is not its output")
    if not re.fullmatch(r"[0-9]+", digits):
        raise HccnError(f"{what}: {preview!r} is not a number of ASCII digits as hccn_tool prints them")
    return int(digits)


def _ufloat(text, what):
    """A decimal number printed by hccn_tool (digits and one dot), bounded like :func:`_uint`."""
    whole, _dot, frac = text.partition(".")
    if len(whole) + len(frac) > 2 * _MAX_DIGITS:
        raise HccnError(f"{what}: a number of {len(whole) + len(frac)} digits ({text[:24]!r}...); hccn_tool prints "
                        "far fewer, so this is not its output")
    try:
        return float(text)
    except ValueError:
        raise HccnError(f"{what}: {text[:24]!r} is not a number") from None


# --------------------------------------------------------------------------------------------- helpers

def _lines(text):
    if text is None:
        return []
    if not isinstance(text, str):
        raise HccnError(f"hccn_tool output must be text, got {type(text).__name__}")
    return [line.rstrip("\r") for line in text.splitlines()]


def _ipv4(value, what):
    try:
        return ipaddress.IPv4Address(str(value).strip())
    except (ipaddress.AddressValueError, ValueError):
        raise HccnError(f"{what} {value!r} is not an IPv4 address") from None


def _netmask(value, what="netmask"):
    text = str(value).strip()
    try:
        # IPv4Network accepts both a prefix length and a dotted (contiguous) netmask after the slash
        return ipaddress.IPv4Network(f"0.0.0.0/{text}").netmask
    except (ipaddress.NetmaskValueError, ValueError):
        raise HccnError(f"{what} {value!r} is not a valid IPv4 netmask (dotted like 255.255.255.0 or a prefix "
                        "length)") from None


# Ranges no NPU NIC address or plane may use: "this network" (0.0.0.0/8, 0.0.0.0 unspecified), loopback,
# multicast, and the reserved 240.0.0.0/4 with the limited broadcast 255.255.255.255 (RFC 6890 / Python's
# ipaddress is_unspecified, is_loopback, is_multicast, is_reserved).
_NOT_FOR_HOSTS = (
    (ipaddress.IPv4Network("0.0.0.0/8"), "'this network' (0.0.0.0/8, 0.0.0.0 is unspecified)"),
    (ipaddress.IPv4Network("127.0.0.0/8"), "loopback"),
    (ipaddress.IPv4Network("224.0.0.0/4"), "multicast"),
    (ipaddress.IPv4Network("240.0.0.0/4"), "reserved or broadcast"),
)


def _host_ipv4(value, what):
    """An IPv4 address a NIC can have (not unspecified, loopback, multicast, reserved or 255.255.255.255)."""
    addr = _ipv4(value, what)
    for net, label in _NOT_FOR_HOSTS:
        if addr in net:
            raise HccnError(f"{what} {addr} is a {label} address, which no NPU NIC can use")
    return addr


def _whole(value, what, minimum=0, maximum=2**32):
    """An integer option: an int, a whole float (8.0) or a string of digits; never True, 2.9, inf or NaN."""
    if isinstance(value, bool):
        raise HccnError(f"{what} {value!r} is a boolean, not an integer")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d{1,12}\s*", value):
        value = int(value)
    if not isinstance(value, int):
        raise HccnError(f"{what} {value!r} is not an integer")
    if not minimum <= value <= maximum:
        raise HccnError(f"{what} {value} is outside {minimum}..{maximum}")
    return value


def _unset_ip(value):
    return value is None or value in ("", "0.0.0.0")


# --------------------------------------------------------------------------------------------- parsers

_KV_RE = re.compile(r"^\s*([A-Za-z_ ]+?)\s*:\s*(.*?)\s*$")


def parse_ip(text):
    """``-ip -g`` -> {'address': str|None, 'netmask': str|None}. Empty output means no address set."""
    result = {"address": None, "netmask": None}
    for line in _lines(text):
        m = re.match(r"^\s*ipaddr\s*:\s*(\S+)\s*$", line)
        if m:
            result["address"] = str(_ipv4(m.group(1), "ipaddr"))
            continue
        m = re.match(r"^\s*netmask\s*:\s*(\S+)\s*$", line)
        if m:
            result["netmask"] = str(_netmask(m.group(1)))
    if (result["address"] is None) != (result["netmask"] is None):
        raise HccnError(f"hccn_tool -ip -g printed only one of ipaddr/netmask: {text!r}")
    if result["address"] is None and any(line.strip() for line in _lines(text)):
        raise HccnError(f"unrecognised hccn_tool -ip -g output: {text!r}")
    return result


def parse_gateway(text):
    """``-gateway -g`` -> {'gateway': str|None, 'iface': str|None}."""
    for line in _lines(text):
        m = re.match(r"^\s*default gateway\s*:\s*([0-9.]+)\s*(?:,\s*Iface\s*:\s*(\S+))?\s*$", line, re.IGNORECASE)
        if m:
            gw = str(_ipv4(m.group(1), "default gateway"))
            return {"gateway": None if _unset_ip(gw) else gw, "iface": m.group(2)}
    if any(line.strip() for line in _lines(text)):
        raise HccnError(f"unrecognised hccn_tool -gateway -g output: {text!r}")
    return {"gateway": None, "iface": None}


def parse_netdetect(text):
    """``-netdetect -g`` -> address or None (``0.0.0.0`` = not set)."""
    for line in _lines(text):
        m = re.match(r"^\s*netdetect\s+addr(?:ess)?\s*:\s*(\S+)\s*$", line, re.IGNORECASE)
        if m:
            addr = str(_ipv4(m.group(1), "netdetect address"))
            return None if _unset_ip(addr) else addr
    if not any(line.strip() for line in _lines(text)):
        return None  # nothing configured yet: prints nothing, like -ip -g and -gateway -g
    raise HccnError(f"unrecognised hccn_tool -netdetect -g output: {text!r}")


def parse_link(text):
    """``-link -g`` -> 'UP' or 'DOWN'."""
    for line in _lines(text):
        m = re.match(r"^\s*link status\s*:\s*(\w+)\s*$", line, re.IGNORECASE)
        if m:
            return m.group(1).upper()
    raise HccnError(f"unrecognised hccn_tool -link -g output: {text!r}")


def parse_net_health(text):
    """``-net_health -g`` -> the status words as printed (``Success``, ``Init``, ``Socket failed`` ...)."""
    for line in _lines(text):
        m = re.match(r"^\s*net health status\s*:\s*(.+?)\s*$", line, re.IGNORECASE)
        if m:
            return m.group(1)
    raise HccnError(f"unrecognised hccn_tool -net_health -g output: {text!r}")


# -g reads that fail because nothing was configured yet (cmd.c g_uda_dsmi_err_list; exit = UDA code & 0xFF)
NOT_PRESET = {
    "ip": ("no ip was preset", 0x400D & 0xFF),
    "gateway": ("no gateway was preset", 0x4002 & 0xFF),
}


def read_not_preset(name, rc, text):
    """True when the failed ``-<name> -g`` read means "nothing set yet" (not a broken tool or driver)."""
    if name not in NOT_PRESET or not rc:
        return False
    phrase, code = NOT_PRESET[name]
    return phrase in (text or "") or rc == code


def health_ok(status):
    """True only for the word hccn_tool prints for a healthy link (tool_ops.c g_net_health_status "Success"):
    another case or spelling is not known to be healthy."""
    return status == "Success"


def parse_mtu(text):
    """``-mtu -g`` -> int."""
    for line in _lines(text):
        m = re.match(r"^\s*mtu\s*:\s*(\d+)\s*$", line, re.IGNORECASE)
        if m:
            return _uint(m.group(1), "hccn_tool -mtu -g")
    raise HccnError(f"unrecognised hccn_tool -mtu -g output: {text!r}")


def _parse_priority_table(text, value_label, what):
    prios = None
    values = None
    for line in _lines(text):
        words = line.split()
        if not words:
            continue
        if words[0].lower() == "priority" and len(words) > 1 and all(w.isdigit() for w in words[1:]):
            prios = [_uint(w, f"hccn_tool {what}") for w in words[1:]]
        elif words[0].lower() == value_label.lower() and len(words) > 1 and all(w.isdigit() for w in words[1:]):
            values = [_uint(w, f"hccn_tool {what}") for w in words[1:]]
    if prios is None or values is None:
        raise HccnError(f"unrecognised hccn_tool {what} output: {text!r}")
    if prios != list(range(PRIORITY_COUNT)) or len(values) != PRIORITY_COUNT:
        raise HccnError(f"hccn_tool {what} output does not list priorities 0..7 with one value each: {text!r}")
    return values


def parse_pfc(text):
    """``-pfc -g`` -> bitmap list of 8 ints (index = priority, 1 = PFC enabled)."""
    values = _parse_priority_table(text, "enabled", "-pfc -g")
    if any(v not in (0, 1) for v in values):
        raise HccnError(f"hccn_tool -pfc -g printed a value other than 0/1: {values}")
    return values


def parse_prio_tc(text):
    """``-prio_tc -g`` -> list of 8 TCs (index = priority)."""
    values = _parse_priority_table(text, "TC", "-prio_tc -g")
    if any(v > TC_MAX for v in values):
        raise HccnError(f"hccn_tool -prio_tc -g printed a TC above {TC_MAX}: {values}")
    return values


def parse_dscp_to_tc(text):
    """``-dscp_to_tc -g [dscp N]`` -> {dscp: tc}."""
    header = False
    mapping = {}
    for line in _lines(text):
        words = line.split()
        if not words:
            continue
        if [w.lower() for w in words] == ["dscp", "tc"]:
            header = True
            continue
        if header and len(words) == 2 and words[0].isdigit() and words[1].isdigit():
            dscp, tc = _uint(words[0], "hccn_tool -dscp_to_tc -g"), _uint(words[1], "hccn_tool -dscp_to_tc -g")
            if dscp > DSCP_MAX or tc > TC_MAX:
                raise HccnError(f"hccn_tool -dscp_to_tc -g row out of range: {line!r}")
            mapping[dscp] = tc
    if not header:
        raise HccnError(f"unrecognised hccn_tool -dscp_to_tc -g output: {text!r}")
    return mapping


def parse_tls(text):
    """``-tls -g`` -> {'dev_id', 'enabled', 'preconfigured', 'alarm_days'} from the ``tls switch`` line."""
    for line in _lines(text):
        m = re.search(r"tls switch\[(\d)\]", line)
        if not m:
            continue
        dev = re.search(r"dev_id\s*:\s*(\d+)", line)
        pre = re.search(r"tls preconfigured\[(\d)\]", line)
        alarm = re.search(r"threshold\[(\d+)\]", line)
        return {
            "dev_id": _uint(dev.group(1), "hccn_tool -tls -g dev_id") if dev else None,
            "enabled": m.group(1) == "1",
            "preconfigured": (pre.group(1) == "1") if pre else None,
            "alarm_days": _uint(alarm.group(1), "hccn_tool -tls -g threshold") if alarm else None,
        }
    raise HccnError(f"no 'tls switch[...]' line in hccn_tool -tls -g output: {text!r}")


def parse_lldp(text):
    """``-lldp -g`` -> {TLV name: [value lines]} plus convenience keys ``port_ifname``, ``system_name``,
    ``mgmt_ipv4``, ``max_frame_size``, ``chassis_mac``."""
    tlvs = {}
    current = None
    for line in _lines(text):
        if not line.strip():
            continue
        if line.strip().endswith("TLV") and not line[:1].isspace():
            current = line.strip()[:-3].strip()
            tlvs.setdefault(current, [])
            continue
        if current is None:
            continue
        tlvs[current].append(line.strip())
    if not tlvs:
        raise HccnError(f"unrecognised hccn_tool -lldp -g output: {text!r}")

    def first(tlv, prefix=None):
        for value in tlvs.get(tlv, []):
            if prefix is None:
                return value
            if value.lower().startswith(prefix.lower() + ":"):
                return value.split(":", 1)[1].strip()
        return None

    frame = first("Maximum Frame Size")
    return {
        "tlvs": tlvs,
        "chassis_mac": first("Chassis ID", "MAC"),
        "port_ifname": first("Port ID", "Ifname"),
        "system_name": first("System Name"),
        "system_description": "\n".join(tlvs.get("System Description", [])) or None,
        "mgmt_ipv4": first("Management Address", "IPv4"),
        "max_frame_size": _uint(frame, "hccn_tool -lldp -g Maximum Frame Size") if frame and frame.isdigit() else None,
    }


def parse_ping(text):
    """``-ping -g address A`` -> {'device', 'address', 'times_ms', 'transmitted', 'received', 'loss_percent'}."""
    result = {"device": None, "address": None, "times_ms": [], "transmitted": None, "received": None,
              "loss_percent": None}
    for line in _lines(text):
        m = re.match(r"^\s*device\s+(\d+)\s+(?:dev\s+\S+\s+)?PING6?\s+(\S+)(?:\s+to\s+(\S+))?", line)
        if m:
            result["device"] = _uint(m.group(1), "hccn_tool -ping device")
            result["address"] = m.group(3) or m.group(2)
            continue
        m = re.match(r"^\s*recv seq=(\d+),\s*time=([0-9.]+)ms", line)
        if m:
            result["times_ms"].append(_ufloat(m.group(2), "hccn_tool -ping time"))
            continue
        m = re.match(r"^\s*(\d+) packets transmitted,\s*(\d+) received,\s*([0-9.]+)% packets? loss", line)
        if m:
            result["transmitted"] = _uint(m.group(1), "hccn_tool -ping packets transmitted")
            result["received"] = _uint(m.group(2), "hccn_tool -ping packets received")
            result["loss_percent"] = _ufloat(m.group(3), "hccn_tool -ping packet loss")
    if result["transmitted"] is None:
        raise HccnError(f"no 'packets transmitted' summary in hccn_tool -ping output: {text!r}")
    return result


def parse_hccn_conf(text):
    """``/etc/hccn.conf`` -> {device: {key: value}} (``address_0=1.2.3.4`` -> {0: {'address': '1.2.3.4'}})."""
    result = {}
    for line in _lines(text):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or "=" not in stripped:
            continue
        key, value = stripped.split("=", 1)
        m = re.match(r"^([A-Za-z_]+?)_(\d+)$", key.strip())
        if not m:
            continue
        result.setdefault(_uint(m.group(2), f"/etc/hccn.conf key {key.strip()[:40]!r}"), {})[m.group(1)] = value.strip()
    return result


# --------------------------------------------------------------------------------------------- normalising

def _int_list(value, what):
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip() != ""]
    elif isinstance(value, (list, tuple)):
        parts = list(value)
    else:
        raise HccnError(f"{what} must be a list or a comma-separated string, got {value!r}")
    try:
        return [int(p) for p in parts]
    except (TypeError, ValueError):
        raise HccnError(f"{what} {value!r} contains a non-integer") from None


def normalize_pfc(value):
    """PFC setting -> bitmap of 8 ints.

    A string with 8 comma-separated 0/1 values (``"0,0,0,0,1,0,0,0"``) is a bitmap, as hccn_tool takes it;
    a list (``[4]``) or a single integer is the list of priorities that have PFC enabled.
    """
    if value is None:
        return None
    if isinstance(value, str) and "," in value and len(value.split(",")) == PRIORITY_COUNT:
        bits = _int_list(value, "pfc bitmap")
        if any(b not in (0, 1) for b in bits):
            raise HccnError(f"pfc bitmap {value!r} may only contain 0 and 1")
        return bits
    prios = [value] if isinstance(value, int) else _int_list(value, "pfc_priorities")
    bits = [0] * PRIORITY_COUNT
    for p in prios:
        if not 0 <= p < PRIORITY_COUNT:
            raise HccnError(f"pfc priority {p} is outside 0..7 (pfc_priorities={value!r})")
        bits[p] = 1
    return bits


def bitmap_priorities(bits):
    return [i for i, b in enumerate(bits) if b]


def normalize_prio_tc(value):
    if value is None:
        return None
    tcs = _int_list(value, "prio_tc")
    if len(tcs) != PRIORITY_COUNT or any(not 0 <= t <= TC_MAX for t in tcs):
        raise HccnError(f"prio_tc {value!r} must have 8 traffic classes, each 0..{TC_MAX}")
    return tcs


def normalize_dscp_to_tc(value):
    if value is None:
        return None
    if not isinstance(value, dict):
        raise HccnError(f"dscp_to_tc must be a mapping of DSCP to TC, got {value!r}")
    result = {}
    for k, v in value.items():
        try:
            dscp, tc = int(k), int(v)
        except (TypeError, ValueError):
            raise HccnError(f"dscp_to_tc entry {k!r}: {v!r} is not two integers") from None
        if not 0 <= dscp <= DSCP_MAX or not 0 <= tc <= TC_MAX:
            raise HccnError(f"dscp_to_tc entry {dscp}: {tc} is out of range (DSCP 0..{DSCP_MAX}, TC 0..{TC_MAX})")
        result[dscp] = tc
    return result


def normalize_wanted(wanted):
    """Validate the wanted settings (None = leave alone) and return them normalised."""
    if not isinstance(wanted, dict):
        raise HccnError(f"the wanted settings must be a mapping, got {type(wanted).__name__}")
    w = dict(wanted)
    out = {}
    if w.get("address") is not None:
        out["address"] = str(_host_ipv4(w["address"], "ip"))
    if w.get("netmask") is not None:
        out["netmask"] = str(_netmask(w["netmask"]))
    if w.get("gateway") is not None:
        out["gateway"] = str(_host_ipv4(w["gateway"], "gateway"))
    if w.get("netdetect") is not None:
        out["netdetect"] = str(_host_ipv4(w["netdetect"], "netdetect"))
    if w.get("mtu") is not None:
        mtu = _whole(w["mtu"], "mtu", -2**63, 2**63)
        if not MTU_MIN <= mtu <= MTU_MAX:
            raise HccnError(f"mtu {mtu} is outside hccn_tool's range {MTU_MIN}..{MTU_MAX}")
        out["mtu"] = mtu
    if w.get("pfc") is not None:
        out["pfc"] = normalize_pfc(w["pfc"])
    if w.get("prio_tc") is not None:
        out["prio_tc"] = normalize_prio_tc(w["prio_tc"])
    if w.get("dscp_to_tc") is not None:
        out["dscp_to_tc"] = normalize_dscp_to_tc(w["dscp_to_tc"])
    if w.get("tls") is not None:
        out["tls"] = bool(w["tls"])
    return out


# --------------------------------------------------------------------------------------------- planning

def _whole_or_none(value):
    try:
        return _whole(value, "device", 0, 2**16)
    except HccnError:
        return None


def plan_changes(device, current, wanted, tool=DEFAULT_HCCN_TOOL):
    """Compute the hccn_tool commands that bring ``current`` to ``wanted`` on one device.

    ``current``: state as read (keys of SETTING_ORDER; ``dscp_to_tc`` a full or partial map, ``tls`` bool).
    ``wanted``: settings to enforce; missing or None keys are left alone. ``dscp_to_tc`` only touches the
    DSCPs it names.
    Returns ``(commands, before, after)``: argv lists in apply order, and the diff of the managed keys.
    """
    dev = _whole_or_none(device)
    if dev is None:
        raise HccnError(f"device {device!r} must be a non-negative NPU device id")
    want = normalize_wanted(wanted)
    cur = dict(current or {})
    base = [tool, "-i", str(dev)]
    commands = []
    before = {}
    after = {}

    # address/netmask are set together by hccn_tool
    if "address" in want or "netmask" in want:
        address = want.get("address", cur.get("address"))
        netmask = want.get("netmask", cur.get("netmask"))
        if address is None or netmask is None:
            raise HccnError(f"device {dev}: no address is configured yet, so ip and netmask must both be given")
        for key, value in (("address", address), ("netmask", netmask)):
            before[key] = cur.get(key)
            after[key] = value
        if (cur.get("address"), cur.get("netmask")) != (address, netmask):
            commands.append(base + ["-ip", "-s", "address", address, "netmask", netmask])
    eff_address = after.get("address", cur.get("address"))
    eff_netmask = after.get("netmask", cur.get("netmask"))
    if "address" in want and eff_netmask:
        net = ipaddress.IPv4Network(f"{eff_address}/{eff_netmask}", strict=False)
        if net.prefixlen < 31 and ipaddress.IPv4Address(eff_address) in (net.network_address, net.broadcast_address):
            which = "network" if ipaddress.IPv4Address(eff_address) == net.network_address else "broadcast"
            raise HccnError(f"device {dev}: ip {eff_address} is the {which} address of its subnet {net}; give a host "
                            "address")

    if "gateway" in want:
        gw = want["gateway"]
        if eff_address and gw == eff_address:
            raise HccnError(f"device {dev}: gateway {gw} is the device's own address; the gateway is another host of "
                            "the subnet (the switch's interface)")
        if eff_address and eff_netmask:
            net = ipaddress.IPv4Network(f"{eff_address}/{eff_netmask}", strict=False)
            if ipaddress.IPv4Address(gw) not in net:
                raise HccnError(f"device {dev}: gateway {gw} is outside the device subnet {net}; "
                                "hccn_tool refuses a gateway in another segment")
        before["gateway"] = cur.get("gateway")
        after["gateway"] = gw
        # hccn_tool drops the gateway when the address changes to another segment: set it again then
        if cur.get("gateway") != gw or (commands and commands[-1][3] == "-ip"):
            commands.append(base + ["-gateway", "-s", "gateway", gw])

    for key, flag, arg in (("netdetect", "-netdetect", "address"), ("mtu", "-mtu", "size")):
        if key in want:
            before[key] = cur.get(key)
            after[key] = want[key]
            if cur.get(key) != want[key]:
                commands.append(base + [flag, "-s", arg, str(want[key])])

    if "pfc" in want:
        before["pfc"] = cur.get("pfc")
        after["pfc"] = want["pfc"]
        if cur.get("pfc") != want["pfc"]:
            commands.append(base + ["-pfc", "-s", "bitmap", ",".join(str(b) for b in want["pfc"])])

    if "prio_tc" in want:
        before["prio_tc"] = cur.get("prio_tc")
        after["prio_tc"] = want["prio_tc"]
        if cur.get("prio_tc") != want["prio_tc"]:
            commands.append(base + ["-prio_tc", "-s", "map", ",".join(str(t) for t in want["prio_tc"])])

    if "dscp_to_tc" in want:
        cur_map = cur.get("dscp_to_tc") or {}
        before["dscp_to_tc"] = {d: cur_map.get(d) for d in sorted(want["dscp_to_tc"])}
        after["dscp_to_tc"] = {d: want["dscp_to_tc"][d] for d in sorted(want["dscp_to_tc"])}
        for dscp in sorted(want["dscp_to_tc"]):
            if cur_map.get(dscp) != want["dscp_to_tc"][dscp]:
                commands.append(base + ["-dscp_to_tc", "-s", "dscp", str(dscp), "tc", str(want["dscp_to_tc"][dscp])])

    if "tls" in want:
        before["tls"] = cur.get("tls")
        after["tls"] = want["tls"]
        if cur.get("tls") != want["tls"]:
            commands.append(base + ["-tls", "-s", "enable", "1" if want["tls"] else "0"])

    return commands, before, after


def read_commands(device, keys, tool=DEFAULT_HCCN_TOOL):
    """The ``-g`` commands needed to read the given setting keys: {name: argv}."""
    base = [tool, "-i", str(int(device))]
    table = {
        "ip": ("address", "netmask"),
        "gateway": ("gateway",),
        "netdetect": ("netdetect",),
        "mtu": ("mtu",),
        "pfc": ("pfc",),
        "prio_tc": ("prio_tc",),
        "dscp_to_tc": ("dscp_to_tc",),
        "tls": ("tls",),
    }
    out = {}
    for name, covers in table.items():
        if any(k in keys for k in covers) or (name == "ip" and "gateway" in keys):
            out[name] = base + ["-" + name, "-g"]
    return out


def check_link_and_health(device, link, health):
    """Messages naming the device when its link is not UP or its net health is not Success."""
    problems = []
    if link is not None and str(link).upper() != "UP":
        problems.append(f"NPU device {device}: link status is {link}, expected UP "
                        f"(check the cable/optical module: hccn_tool -i {device} -link -g, -optical -g)")
    if health is not None and not health_ok(health):
        problems.append(f"NPU device {device}: net health status is {health!r}, expected Success "
                        f"(check the netdetect address and gateway: hccn_tool -i {device} -netdetect -g)")
    return problems


def format_ping_table(rows):
    """Rows of {'host', 'device', 'address', 'received', 'transmitted', 'loss_percent'} -> one text table."""
    header = ("host", "device", "peer address", "recv/sent", "loss %")
    body = []
    for r in rows:
        body.append((str(r.get("host", "")), str(r.get("device", "")), str(r.get("address", "")),
                     f"{r.get('received', '?')}/{r.get('transmitted', '?')}",
                     "" if r.get("loss_percent") is None else f"{r['loss_percent']:.2f}"))
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(widths[i]) for i, h in enumerate(header))
    out = [line, "  ".join("-" * w for w in widths)]
    out.extend("  ".join(c.ljust(widths[i]) for i, c in enumerate(b)) for b in body)
    return "\n".join(out)


# --------------------------------------------------------------------------------------------- address plan

def _rule_address(rule, net, what):
    """Gateway/netdetect rule for one plane: None, 'first', 'last', int offset, or an explicit address."""
    if rule is None or rule == "" or rule is False:
        return None
    hosts_count = net.num_addresses - 2 if net.prefixlen < 31 else net.num_addresses
    first = net.network_address + (1 if net.prefixlen < 31 else 0)
    if rule == "first":
        return first
    if rule == "last":
        return first + hosts_count - 1
    if isinstance(rule, int) and not isinstance(rule, bool):
        if not 1 <= rule <= hosts_count:
            raise HccnError(f"{what} offset {rule} does not fit plane {net} ({hosts_count} usable addresses)")
        return net.network_address + rule
    addr = _ipv4(rule, what)
    if addr not in net or addr in (net.network_address, net.broadcast_address) and net.prefixlen < 31:
        raise HccnError(f"{what} {addr} is outside plane {net} (or is its network/broadcast address)")
    return addr


def plan_addresses(hosts, planes, devices_per_host=8, gateway=None, netdetect="gateway", offset=None):
    """Address plan for NPU NICs.

    hosts: list of hostnames (index = position) or dict hostname -> host index.
    planes: list of CIDRs, one per NIC plane; device i uses plane ``i % len(planes)``.
    gateway / netdetect: per-plane rule ('first', 'last', int offset, None) or a list with one rule per plane;
    netdetect may also be 'gateway' (the default: detect through the gateway, as in the Ascend samples).
    offset: offset of host index 0 inside each plane (default: 1, or the first address after the
    gateway/detect address when that rule is 'first').
    Returns {host: [{'device', 'address', 'netmask', 'gateway', 'netdetect', 'plane'}, ...]}.
    """
    if isinstance(hosts, dict):
        index = {}
        for host, idx in hosts.items():
            if not isinstance(host, str) or not host.strip():
                raise HccnError(f"hosts: key {host!r} is not a hostname")
            if isinstance(idx, bool) or (isinstance(idx, float) and not idx.is_integer()) or not isinstance(
                    idx, (int, float, str)):
                raise HccnError(f"host {host!r} has index {idx!r}, which is not an integer")
            idx = _whole(idx, f"host {host!r} index", -2**63, 2**24)
            if idx < 0:
                raise HccnError(f"host {host!r} has negative index {idx}")
            index[str(host)] = idx
    elif isinstance(hosts, (list, tuple)):
        seen = set()
        for h in hosts:
            if not isinstance(h, str) or not h.strip():
                raise HccnError(f"hosts: {h!r} is not a hostname (give the inventory hostnames, e.g. groups['npu'])")
            if h in seen:
                raise HccnError(f"host {h!r} is listed twice in hosts")
            seen.add(h)
        index = {str(h): i for i, h in enumerate(hosts)}
    else:
        raise HccnError(f"hosts must be a list of hostnames or a dict hostname -> index, got {hosts!r}")
    if not index:
        raise HccnError("hosts is empty: give the inventory hostnames of the NPU nodes")
    by_index = {}
    for host, idx in index.items():
        if idx in by_index:
            raise HccnError(f"hosts {by_index[idx]!r} and {host!r} share index {idx}: their addresses would be "
                            "duplicates; give each host its own index")
        by_index[idx] = host

    devices_per_host = _whole(devices_per_host, "devices_per_host", -2**63, 2**63)
    if devices_per_host < 1:
        raise HccnError(f"devices_per_host must be at least 1, got {devices_per_host}")
    if devices_per_host > 1024:
        raise HccnError(f"devices_per_host {devices_per_host} is more NPUs than a server holds (Atlas A2: 8, A3: 16)")
    if not isinstance(planes, (list, tuple)) or not planes:
        raise HccnError("planes must be a non-empty list of CIDRs, one per NIC plane (e.g. 8 for Atlas A2)")
    nets = []
    for p in planes:
        if not isinstance(p, str):
            raise HccnError(f"plane {p!r} is not a string in CIDR form (e.g. '10.10.0.0/24')")
        try:
            net = ipaddress.IPv4Network(p.strip(), strict=True)
        except ValueError as exc:
            raise HccnError(f"plane {p!r} is not an IPv4 network in CIDR form with host bits zero ({exc})") from None
        for bad, label in _NOT_FOR_HOSTS:
            if net.overlaps(bad):
                raise HccnError(f"plane {net} overlaps the {label} range {bad}, which no NPU NIC can use")
        nets.append(net)
    for i, a in enumerate(nets):
        for b in nets[i + 1:]:
            if a.overlaps(b):
                raise HccnError(f"planes {a} and {b} overlap: every NIC plane needs its own subnet")
    if devices_per_host % len(nets) != 0:
        raise HccnError(f"devices_per_host {devices_per_host} is not a multiple of the {len(nets)} planes given")
    per_plane = devices_per_host // len(nets)

    def rules(value, name):
        if isinstance(value, (list, tuple)):
            if len(value) != len(nets):
                raise HccnError(f"{name} lists {len(value)} entries but there are {len(nets)} planes")
            return list(value)
        return [value] * len(nets)

    gw_rules = rules(gateway, "gateway")
    nd_rules = rules(netdetect, "netdetect")
    gws = [_rule_address(r, n, f"gateway of plane {n}") for r, n in zip(gw_rules, nets)]
    nds = []
    for r, n, g in zip(nd_rules, nets, gws):
        nds.append(g if r == "gateway" else _rule_address(r, n, f"netdetect of plane {n}"))

    if offset is None:
        offset = 1
        if any(r == "first" for r in gw_rules) or any(r == "first" for r in nd_rules):
            offset = 2
    offset = _whole(offset, "offset", -2**63, 2**63)
    if offset < 1:
        raise HccnError(f"offset must be at least 1 (0 is the network address), got {offset}")

    max_index = max(by_index)
    plan = {host: [] for host in index}
    used = {}
    for p, net in enumerate(nets):
        for special, label in ((gws[p], "gateway"), (nds[p], "netdetect")):
            if special is not None:
                used.setdefault(special, f"{label} of plane {net}")
        last_needed = int(net.network_address) + offset + (max_index + 1) * per_plane - 1
        limit = net.broadcast_address - (1 if net.prefixlen < 31 else 0)
        if last_needed > int(limit):
            needed = str(ipaddress.IPv4Address(last_needed)) if last_needed < 2**32 else "beyond 255.255.255.255"
            raise HccnError(f"plane {net} is too small: host index {max_index} with {per_plane} device(s) per "
                            f"plane from offset {offset} needs up to {needed}, beyond {limit}; "
                            "use a larger subnet or a smaller offset")
    for idx in sorted(by_index):
        host = by_index[idx]
        for dev in range(devices_per_host):
            p = dev % len(nets)
            net = nets[p]
            addr = net.network_address + offset + idx * per_plane + dev // len(nets)
            owner = f"{host} device {dev}"
            if addr in used and not used[addr].startswith(("gateway", "netdetect")):
                raise HccnError(f"duplicate address {addr}: {owner} and {used[addr]}")
            if addr in used:
                raise HccnError(f"duplicate address {addr}: {owner} collides with the {used[addr]}; "
                                "change offset or the gateway/netdetect rule")
            used[addr] = owner
            plan[host].append({
                "device": dev,
                "address": str(addr),
                "netmask": str(net.netmask),
                "gateway": str(gws[p]) if gws[p] is not None else None,
                "netdetect": str(nds[p]) if nds[p] is not None else None,
                "plane": str(net),
            })
    return plan
