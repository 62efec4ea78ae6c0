"""Simulated ``hccn_tool`` (the 910B NPU RoCE NIC tool), with ``/etc/hccn.conf`` persistence.

Follows the open-sourced 910B hccn_tool (github.com/verylucky01/driver @e29d066,
src/custom/network/hccn/ascend910B/): output formats are the printf templates of the ``-g`` commands, errors go
to stderr with the texts of ``cmd.c`` (``g_uda_dsmi_err_list`` ...), and the exit status is what ``main()``
returns (the UDA error code) modulo 256: ``-ip -g`` without an address exits 13 (UDA_DSMI_IPCONF_NOT_PRESET_ERR
0x400D), ``-gateway -g`` without a gateway exits 2 (UDA_DSMI_GATEWAY_NOT_PRESET_ERR 0x4002). ``-s`` commands
persist with the source's key names (``cfg_write_conf``: ``<key>_<phy_id>=<value>``, the old line removed, the
new one appended). Where the source leaves a value to the device firmware (net health, ping replies, LLDP, the
factory QoS maps) the simulator's choice is listed as an assumption in the conformance table
(tests/simulator/README.md).
"""

import ipaddress
import random
import sys

from atlas_sim import SIMULATED_NOTE, state as st

HCCN_CONF = "/etc/hccn.conf"
NET_HEALTH = ("Success", "Socket fail", "Receive timeout", "Unreachable", "Time exceeded", "Fault", "Init",
              "Thread error", "Detect ip set", "Unknown")
PING_COUNT = 3          # the RoCE ping has no count option (tool_get_ping_status); captures show 3 packets
PING_MAX_DATA_LEN = 65535 - 20 - 8
PFC_MAX_PRIORITIES = 4  # PRIORITY_NUM_TOTAL on CFG_SOC_PLATFORM_CLOUD_V2 (910B/C)
MTU_MIN, MTU_MAX = 68, 9702

# UDA codes (ossl_user_linux.h): the process exit status is the code & 0xFF
PARAM_INVALID, PARAM_OP_NOT_SUPPORT, PARAM_CMD_COUNT = 0x2001, 0x2003, 0x2004
PARAM_IP_INVALID, PARAM_CONFLICT_IP, PARAM_DIFF_SEGMT_GTWY = 0x2006, 0x2007, 0x2008
PARAM_DSCP_RANGE, PARAM_TC_RANGE, PARAM_MTU_RANGE, PARAM_TLS_ENABLE = 0x2009, 0x200A, 0x200D, 0x2010
TOOL_PFC_NUMS, TOOL_GATEWAY_NO_IP, TOOL_BROADCAST = 0x3019, 0x301A, 0x3025
DSMI_EXE, DSMI_GATEWAY_NOT_PRESET, DSMI_IPCONF_NOT_PRESET = 0x4001, 0x4002, 0x400D
MAJOR_DEV_ID, MAJOR_CMD_INVALID = 0x1004, 0x1003

ERROR_TEXT = {  # cmd.c uda_handle_param_err / g_uda_tool_err_list / g_uda_dsmi_err_list / uda_handle_major_err
    PARAM_INVALID: "Get invalid parameters!",
    PARAM_OP_NOT_SUPPORT: "Get unknown option!",
    PARAM_CMD_COUNT: "The total count of input parameters is wrong!",
    PARAM_IP_INVALID: "The ip address you configured is invalid!",
    PARAM_CONFLICT_IP: "The ip address configured is conflicted!",
    PARAM_DIFF_SEGMT_GTWY: "The segment of configured gateway doesn't match that of the configured ip adress!",
    PARAM_DSCP_RANGE: "The value of dscp you input is out of the valid range!",
    PARAM_TC_RANGE: "The value of tc you input is out of the valid range!",
    PARAM_MTU_RANGE: "The value of mtu you input is out of the valid range!",
    PARAM_TLS_ENABLE: "Get invalid enable value!",
    TOOL_PFC_NUMS: "The number of pfc priority queues exceeds the maximum value(4).",
    TOOL_GATEWAY_NO_IP: "Unable to configure gateway, because ip is not configured!",
    TOOL_BROADCAST: "Can not config broadcast address!",
    DSMI_EXE: "Command execute failed!",
    DSMI_GATEWAY_NOT_PRESET: "Get gateway failed, because no gateway was preset there!",
    DSMI_IPCONF_NOT_PRESET: "Get ipconf failed, because no ip was preset there!",
    MAJOR_DEV_ID: "Get invalid device id.",
    MAJOR_CMD_INVALID: "Get invalid major cmd.\nEnter [ hccn_tool -h ] for more details.",
}
INFO_LEVEL = (TOOL_PFC_NUMS,)          # UDA_PRINT_LEVEL_INFO: printed on stdout
WITH_PARAM_LIST = (PARAM_INVALID, PARAM_OP_NOT_SUPPORT, PARAM_CMD_COUNT, PARAM_DSCP_RANGE, PARAM_TC_RANGE,
                   PARAM_MTU_RANGE, PARAM_TLS_ENABLE)

# option_help of g_cmd_list (cmd.c) / the ext list (hccn_product_ext/cmd_ext.c), for the commands simulated
CMD_HELP = {
    "-ip": "   [-s]                 : set ip cfg \n       address %s       : set IPv4 ip address, such as x.x.x.x\n"
           "       netmask %s       : set IPv4 ip netmask, such as x.x.x.x\n"
           "   [-g]                 : get ip address and netmask/prefix_length \n",
    "-gateway": "   [-s]                : set gateway cfg \n"
                "       gateway %s      : set IPv4 gateway, such as x.x.x.x\n"
                "   [-g]                : get gateway address \n",
    "-netdetect": "   [-s]                : set net detect cfg \n"
                  "       address %s      : set net detect IPv4 ip address, such as x.x.x.x\n"
                  "   [-g]                : get net detect cfg \n",
    "-lldp": "   [-g]        : get lldp cfg \n",
    "-cfg": "   recovery    : recovery cfg \n   status      : config status \n",
    "-link": "   [-s]                   : set the eth ports link status\n"
             "       down               : shut down eth port \n"
             "       up                 : start up eth port \n"
             "   [-g]                   : get the eth ports link status, UP or DOWN \n",
    "-dscp_to_tc": "   [-s]        : set dscp to tc map \n       dscp %u : set dscp value, [0 ~ 63] \n"
                   "       tc   %u : set tc value, [0 ~ 3] \n   [-g]        : get the all dscp to tc map info \n"
                   "       [dscp %u] : get the specify dscp of tc map info, [0 ~ 63] \n",
    "-mtu": "   [-s]        : set mtu cfg \n       size %d : set mtu size, ETH from 68 to 9702\n"
            "   [-g]        : get mtu cfg\n",
    "-net_health": "   [-g]        : get net health status\n",
    "-tls": "   [-s]        : set tls cfg\n       enable %d : set tls enable, 0: disable, 1: enable\n"
            "   [-g]        : get tls cfg\n",
    "-pfc": "   [-s]        : set pfc cfg\n"
            "       bitmap %s  : set pfc cfg, each bit corresponds to one priority, such as 0,0,0,0,1,0,0,0\n"
            "   [-g]        : get pfc cfg\n",
    "-prio_tc": "   [-s]        : set the mapping between each priority and TC, TC range [0 ~ 3]\n"
                "       map %s  : set the mapping between each priority and TC, each number corresponds to one TC, "
                "such as 0,0,0,0,0,0,0,0\n   [-g]        : get the mapping between priority and TC\n",
    "-ping": "   [-g]                : get ping result\n"
             "       address %s      : set net detect IPv4 ip address, such as x.x.x.x\n"
             "      pkt %d           : ping cfg, the packet data length, [0 ~ 65507]\n",
}
HELP = "".join("hccn_tool -i devid %s\n%s\n" % (cmd, text) for cmd, text in CMD_HELP.items())


class Result(object):
    def __init__(self, out="", rc=0, err=""):
        self.out, self.rc, self.err = out, rc, err


def fail(code, cmd=None, out=""):
    """The error path of main(): the UDA code's text (stderr, or stdout for INFO level), exit status code & 0xFF."""
    text = ERROR_TEXT[code] + "\n"
    if code in INFO_LEVEL:
        out, text = out + text, ""
    if code in WITH_PARAM_LIST and cmd in CMD_HELP:
        out += "[ hccn_tool -i devid %s ] needs the following parameters:\n%s\n" % (cmd, CMD_HELP[cmd])
    return Result(out, code & 0xFF, text)


# ----------------------------------------------------------------------------------------- /etc/hccn.conf

def parse_conf(text):
    """``/etc/hccn.conf`` -> ordered list of [name, value] (``name`` = ``<key>_<dev>``), as cfg.c reads it;
    other lines (comments...) are kept as [line, None]: cfg_inner_write_conf_byfd copies them through."""
    entries = []
    for line in (text or "").splitlines():
        if line.startswith("#") or "=" not in line:
            entries.append([line, None])
            continue
        name, value = line.split("=", 1)
        entries.append([name, value])
    return entries


def read_conf(text):
    """``/etc/hccn.conf`` text -> {dev: {key: value}}."""
    conf = {}
    for name, value in parse_conf(text):
        if value is None:
            continue
        key, _, dev = name.rpartition("_")
        if key and dev.isdigit():
            conf.setdefault(int(dev), {})[key] = value
    return conf


def conf_write(entries, dev, key, value):
    """cfg_write_conf: drop the line of ``<key>_<dev>``, append ``<key>_<dev>=<value>``."""
    name = "%s_%d" % (key, dev)
    entries[:] = [e for e in entries if e[0] != name] + [[name, str(value)]]


def conf_delete(entries, dev, key):
    name = "%s_%d" % (key, dev)
    entries[:] = [e for e in entries if e[0] != name]


def conf_get(entries, dev, key):
    name = "%s_%d" % (key, dev)
    for entry in entries:
        if entry[0] == name and entry[1] is not None:
            return entry[1]
    return None


def write_conf(entries):
    return "".join(name + "\n" if value is None else "%s=%s\n" % (name, value) for name, value in entries)


# ----------------------------------------------------------------------------------------- helpers

def _ip(text):
    try:
        return str(ipaddress.IPv4Address(text))
    except (ipaddress.AddressValueError, ValueError):
        return None


def _netmask(text):
    try:
        return str(ipaddress.IPv4Network("0.0.0.0/%s" % text).netmask)
    except (ipaddress.NetmaskValueError, ValueError):
        return None


def _same_segment(address, other, netmask):
    net = ipaddress.IPv4Network("%s/%s" % (address, netmask), strict=False)
    return ipaddress.IPv4Address(other) in net


def _u8(text):
    """tool_str_to_u8: digits only, no leading zero, 0..255."""
    if not text or not text.isdigit() or (len(text) > 1 and text[0] == "0") or int(text) > 255:
        return None
    return int(text)


def _map8(text, allowed):
    """tool_pfc_str2char / tool_prio_tc_str2char: exactly 15 chars, 'd,d,d,d,d,d,d,d'."""
    if text is None or len(text) != 15:
        return None
    parts = text.split(",")
    if len(parts) != 8 or any(p not in allowed for p in parts):
        return None
    return [int(p) for p in parts]


def _answers(state, nic, address):
    """Does ``address`` answer this NIC in the simulated fabric?

    Assumption (no source: the replies come from the network): with the link UP and an address set, every
    address of the NIC's subnet answers, and every other address answers through a gateway, except the
    addresses made silent with ``atlas-sim-fault peer-silent``. Returns None when it answers, else the
    net-health word for the failure (``Unreachable`` without a route, ``Receive timeout`` when silent).
    """
    if not nic.get("ip") or not nic.get("netmask"):
        return "Init"
    if nic.get("link") != "UP":
        return "Fault"
    if not _same_segment(nic["ip"], address, nic["netmask"]) and not nic.get("gateway"):
        return "Unreachable"
    if address in (state.get("fabric") or {}).get("silent", []):
        return "Receive timeout"
    return None


def net_health(state, nic):
    """-net_health -g: an injected status wins; else Init until a detect address is set, then Success only
    when the detect address answers (see _answers)."""
    if nic.get("net_health"):
        return nic["net_health"]
    if not nic.get("netdetect"):
        return "Init"
    return _answers(state, nic, nic["netdetect"]) or "Success"


def _lldp(dev, nic):
    if nic.get("link") != "UP":
        return ""
    return ("Chassis ID TLV\n\tMAC: 70:7b:e8:%02x:00:01\nPort ID TLV\n\tIfname: %s\n"
            "System Description TLV\n\tVersatile Routing Platform Software\n"
            "VRP (R) software, Version 8.211 (DX511 V200R021C10SPC600)\n\nHuarong DX511\n\n"
            "System Capabilities TLV\n\tEnabled capabilities: Bridge, Router\n"
            "Maximum Frame Size TLV\n\t9216\nEnd of LLDPDU TLV\n" % (dev, nic["lldp_ifname"]))


def factory_nic(dev):
    return st._nic(dev)


def apply_conf(state, entries, devs=None):
    """What the boot-time recovery (g_recovery_ipv4_cmd_list / g_recovery_com_cmd_list in tool_ops.c) does:
    the device comes up with its factory NIC settings, then every key of /etc/hccn.conf is applied again
    (address+netmask, netdetect, gateway, mtu, dscp_tc, bitmap (PFC), prio_tc, tls_enable)."""
    for dev_text, nic in state["nics"].items():
        dev = int(dev_text)
        if devs is not None and dev not in devs:
            continue
        factory = factory_nic(dev)
        for key in ("ip", "netmask", "gateway", "netdetect", "mtu", "pfc", "prio_tc", "dscp_to_tc"):
            nic[key] = factory[key]

        def get(key, dev=dev):
            return conf_get(entries, dev, key)

        if get("address") and get("netmask") and _ip(get("address")) and _netmask(get("netmask")):
            nic["ip"], nic["netmask"] = _ip(get("address")), _netmask(get("netmask"))
        if get("netdetect") and _ip(get("netdetect")):
            nic["netdetect"] = _ip(get("netdetect"))
        if get("gateway") and nic["ip"] and _ip(get("gateway")) and _same_segment(nic["ip"], get("gateway"),
                                                                                   nic["netmask"]):
            nic["gateway"] = _ip(get("gateway"))
        if get("mtu") and get("mtu").isdigit() and MTU_MIN <= int(get("mtu")) <= MTU_MAX:
            nic["mtu"] = int(get("mtu"))
        for item in (get("dscp_tc") or "").split(","):
            dscp, _, tc = item.partition(":")
            if dscp.isdigit() and tc.isdigit() and int(dscp) <= 63 and int(tc) <= 3:
                nic["dscp_to_tc"][str(int(dscp))] = int(tc)
        bits = _map8(get("bitmap"), ("0", "1"))
        if bits is not None:
            nic["pfc"] = bits
        tcs = _map8(get("prio_tc"), ("0", "1", "2", "3"))
        if tcs is not None:
            nic["prio_tc"] = tcs
        if get("tls_enable") in ("0", "1"):
            nic["tls"]["enable"] = int(get("tls_enable"))
    return state


# ----------------------------------------------------------------------------------------- commands

def _cmd_ip(state, dev, nic, rest, entries):
    if rest[:1] == ["-g"]:
        if len(rest) != 1:
            return fail(PARAM_CMD_COUNT, "-ip")
        if not nic.get("ip"):
            return fail(DSMI_IPCONF_NOT_PRESET)
        return Result("ipaddr:%s\nnetmask:%s\n" % (nic["ip"], nic["netmask"]))
    if rest[:1] != ["-s"]:
        return fail(PARAM_OP_NOT_SUPPORT, "-ip")
    if len(rest) != 5:
        return fail(PARAM_CMD_COUNT, "-ip")
    opts = {}
    for key, value in (rest[1:3], rest[3:5]):
        if key not in ("address", "netmask"):
            return fail(PARAM_OP_NOT_SUPPORT, "-ip")
        opts[key] = value
    address, mask = _ip(opts.get("address")), _netmask(opts.get("netmask"))
    if not address or not mask or "address" not in opts or "netmask" not in opts:
        return fail(PARAM_IP_INVALID)
    vnic = ipaddress.IPv4Network("192.168.1.0/24")   # is_ipaddr_conflict: the device vnic's host subnet
    others = [n.get("ip") for d, n in state["nics"].items() if int(d) != dev]
    if ipaddress.IPv4Address(address) in vnic or address in others:
        return fail(PARAM_CONFLICT_IP)
    nic["ip"], nic["netmask"] = address, mask
    gateway = conf_get(entries, dev, "gateway")   # tool_set_ipaddr_recovery: a gateway of another segment goes
    if gateway and not _same_segment(address, gateway, mask):
        conf_delete(entries, dev, "gateway")
        nic["gateway"] = None
    elif gateway:
        nic["gateway"] = gateway
    conf_write(entries, dev, "address", address)
    conf_write(entries, dev, "netmask", mask)
    return Result("")


def _cmd_gateway(state, dev, nic, rest, entries):
    if rest[:1] == ["-g"]:
        if len(rest) != 1:
            return fail(PARAM_CMD_COUNT, "-gateway")
        if not nic.get("gateway"):
            return fail(DSMI_GATEWAY_NOT_PRESET)
        return Result("default gateway:%s, Iface:eth%d\n" % (nic["gateway"], dev))
    if rest[:1] != ["-s"]:
        return fail(PARAM_OP_NOT_SUPPORT, "-gateway")
    if len(rest) != 3:
        return fail(PARAM_CMD_COUNT, "-gateway")
    if rest[1] != "gateway":
        return fail(PARAM_OP_NOT_SUPPORT, "-gateway")
    gateway = _ip(rest[2])
    if not gateway:
        return fail(PARAM_IP_INVALID)
    if not nic.get("ip"):
        return fail(TOOL_GATEWAY_NO_IP)
    if not _same_segment(nic["ip"], gateway, nic["netmask"]):
        return fail(PARAM_DIFF_SEGMT_GTWY)
    nic["gateway"] = gateway
    conf_write(entries, dev, "gateway", gateway)
    return Result("")


def _cmd_netdetect(state, dev, nic, rest, entries):
    if rest[:1] == ["-g"]:
        if len(rest) != 1:
            return fail(PARAM_CMD_COUNT, "-netdetect")
        return Result("netdetect addr: %s\n" % (nic.get("netdetect") or "0.0.0.0"))
    if rest[:1] != ["-s"]:
        return fail(PARAM_OP_NOT_SUPPORT, "-netdetect")
    if len(rest) != 3:
        return fail(PARAM_CMD_COUNT, "-netdetect")
    if rest[1] != "address":
        return fail(PARAM_OP_NOT_SUPPORT, "-netdetect")
    address = _ip(rest[2])
    if not address:
        return fail(PARAM_IP_INVALID)
    if address == "255.255.255.255":
        return fail(TOOL_BROADCAST)
    nic["netdetect"] = None if address == "0.0.0.0" else address
    conf_write(entries, dev, "netdetect", rest[2])
    return Result("")


def _cmd_mtu(state, dev, nic, rest, entries):
    if rest[:1] == ["-g"]:
        if len(rest) != 1:
            return fail(PARAM_CMD_COUNT, "-mtu")
        return Result("mtu:%d\n" % nic["mtu"])
    if rest[:1] != ["-s"]:
        return fail(PARAM_OP_NOT_SUPPORT, "-mtu")
    if len(rest) != 3:
        return fail(PARAM_CMD_COUNT, "-mtu")
    if rest[1] != "size":
        return fail(PARAM_OP_NOT_SUPPORT, "-mtu")
    if not rest[2].isdigit():
        return fail(PARAM_INVALID, "-mtu")
    if not MTU_MIN <= int(rest[2]) <= MTU_MAX:
        return fail(PARAM_MTU_RANGE, "-mtu")
    nic["mtu"] = int(rest[2])
    conf_write(entries, dev, "mtu", rest[2])
    return Result("")


def _cmd_pfc(state, dev, nic, rest, entries):
    if rest[:1] == ["-g"]:
        if len(rest) != 1:
            return fail(PARAM_CMD_COUNT, "-pfc")
        return Result("PFC configuration:\npriority   0 1 2 3 4 5 6 7\nenabled    %s\n"
                      % " ".join(str(b) for b in nic["pfc"]))
    if rest[:1] != ["-s"]:
        return fail(PARAM_OP_NOT_SUPPORT, "-pfc")
    if len(rest) != 3:
        return fail(PARAM_CMD_COUNT, "-pfc")
    if rest[1] != "bitmap":
        return fail(PARAM_OP_NOT_SUPPORT, "-pfc")
    bits = _map8(rest[2], ("0", "1"))
    if bits is None:
        return fail(PARAM_INVALID, "-pfc")
    if sum(bits) > PFC_MAX_PRIORITIES:
        return fail(TOOL_PFC_NUMS)
    nic["pfc"] = bits
    conf_write(entries, dev, "bitmap", rest[2])
    return Result("")


def _cmd_prio_tc(state, dev, nic, rest, entries):
    if rest[:1] == ["-g"]:
        if len(rest) != 1:
            return fail(PARAM_CMD_COUNT, "-prio_tc")
        return Result("Priority mapping:\npriority   0 1 2 3 4 5 6 7\nTC         %s\n"
                      % " ".join(str(t) for t in nic["prio_tc"]))
    if rest[:1] != ["-s"]:
        return fail(PARAM_OP_NOT_SUPPORT, "-prio_tc")
    if len(rest) != 3:
        return fail(PARAM_CMD_COUNT, "-prio_tc")
    if rest[1] != "map":
        return fail(PARAM_OP_NOT_SUPPORT, "-prio_tc")
    tcs = _map8(rest[2], ("0", "1", "2", "3"))
    if tcs is None:
        return fail(PARAM_INVALID, "-prio_tc")
    nic["prio_tc"] = tcs
    conf_write(entries, dev, "prio_tc", rest[2])
    return Result("")


def _cmd_dscp_to_tc(state, dev, nic, rest, entries):
    if rest[:1] == ["-g"]:
        if len(rest) not in (1, 3):
            return fail(PARAM_CMD_COUNT, "-dscp_to_tc")
        if len(rest) == 3:
            if rest[1] != "dscp":
                return fail(PARAM_OP_NOT_SUPPORT, "-dscp_to_tc")
            dscp = _u8(rest[2])
            if dscp is None:
                return fail(PARAM_INVALID, "-dscp_to_tc")
            if dscp > 63:
                return fail(PARAM_DSCP_RANGE, "-dscp_to_tc")
            dscps = [dscp]
        else:
            dscps = range(64)
        return Result("%4s%8s\n" % ("dscp", "tc")
                      + "".join("%4d%8u\n" % (d, nic["dscp_to_tc"][str(d)]) for d in dscps))
    if rest[:1] != ["-s"]:
        return fail(PARAM_OP_NOT_SUPPORT, "-dscp_to_tc")
    if len(rest) != 5:
        return fail(PARAM_CMD_COUNT, "-dscp_to_tc")
    if rest[1] != "dscp":
        return fail(PARAM_OP_NOT_SUPPORT, "-dscp_to_tc")
    dscp = _u8(rest[2])
    if dscp is None:
        return fail(PARAM_INVALID, "-dscp_to_tc")
    if dscp > 63:
        return fail(PARAM_DSCP_RANGE, "-dscp_to_tc")
    if rest[3] != "tc":
        return fail(PARAM_OP_NOT_SUPPORT, "-dscp_to_tc")
    tc = _u8(rest[4])
    if tc is None:
        return fail(PARAM_INVALID, "-dscp_to_tc")
    if tc > 3:
        return fail(PARAM_TC_RANGE, "-dscp_to_tc")
    nic["dscp_to_tc"][str(dscp)] = tc
    # tool_dscp_write_conf: one line "dscp_tc_N=D:T,D:T," (an entry updated in place, a new one appended)
    items = [i for i in (conf_get(entries, dev, "dscp_tc") or "").split(",") if ":" in i]
    pairs = [[int(d), int(t)] for d, _, t in (i.partition(":") for i in items)]
    for pair in pairs:
        if pair[0] == dscp:
            pair[1] = tc
            break
    else:
        pairs.append([dscp, tc])
    conf_write(entries, dev, "dscp_tc", "".join("%u:%u," % (d, t) for d, t in pairs))
    return Result("")


def _cmd_tls(state, dev, nic, rest, entries):
    tls = nic["tls"]
    if rest[:1] == ["-g"]:
        if len(rest) != 1:
            return fail(PARAM_CMD_COUNT, "-tls")
        if conf_get(entries, dev, "tls_enable") is None:   # tool_get_tls_cfg saves it the first time
            conf_write(entries, dev, "tls_enable", tls["enable"])
        return Result("dev_id:%d, tls switch[%d](0:disable, 1:enable), tls preconfigured[%d](0:non-preset, "
                      "1:preset), tls alarm time threshold[%d]days\n"
                      % (dev, tls["enable"], tls["preconfigured"], tls["alarm_days"]))
    if rest[:1] != ["-s"]:
        return fail(PARAM_OP_NOT_SUPPORT, "-tls")
    if len(rest) < 3 or rest[1] != "enable":
        return fail(PARAM_CMD_COUNT if len(rest) < 3 else PARAM_OP_NOT_SUPPORT, "-tls")
    if len(rest) != 3:
        return fail(PARAM_CMD_COUNT, "-tls")
    if rest[2] not in ("0", "1"):
        return fail(PARAM_TLS_ENABLE, "-tls")
    out = ""
    if rest[2] == "1" and tls["preconfigured"]:
        out = ("[Warning] The currently loaded is a preset certificate, which has security risks."
               "It is recommended to configure a security certificate.\n")
    tls["enable"] = int(rest[2])
    conf_write(entries, dev, "tls_enable", rest[2])
    return Result(out)


def _cmd_ping(state, dev, nic, rest, entries):
    if rest[:1] != ["-g"]:
        return fail(PARAM_OP_NOT_SUPPORT, "-ping")
    if len(rest) < 3 or len(rest) > 5:
        return fail(PARAM_CMD_COUNT, "-ping")
    address, index = None, 1
    while index < len(rest):
        key = rest[index]
        if key not in ("address", "pkt"):
            return fail(PARAM_OP_NOT_SUPPORT, "-ping")
        if index + 1 >= len(rest):
            return fail(PARAM_CMD_COUNT, "-ping")
        value = rest[index + 1]
        if key == "address":
            address = _ip(value)
            if address is None:
                return fail(PARAM_IP_INVALID)
        elif not value.isdigit() or int(value) > PING_MAX_DATA_LEN:   # pkt = the packet's data length
            return fail(PARAM_INVALID, "-ping")
        index += 2
    if address is None:
        return fail(DSMI_EXE)
    problem = nic.get("net_health") if nic.get("net_health") not in (None, "Success") else None
    problem = problem or _answers(state, nic, address)
    rng = random.Random("%s-%s" % (dev, address))
    lines = ["device %d PING %s" % (dev, address)]
    for seq in range(PING_COUNT):
        if problem:
            lines.append("recv time out seq=%d" % seq)
        else:
            lines.append("recv seq=%d,time=%.6fms" % (seq, rng.uniform(0.03, 1.5)))
    received = 0 if problem else PING_COUNT
    loss = 100.0 * (PING_COUNT - received) / PING_COUNT
    lines.append("%d packets transmitted, %d received, %.2f%% packet loss" % (PING_COUNT, received, loss))
    out = "\n".join(lines) + "\n"
    if problem:   # dsmi_ping_fun: "recv time out seq" in the reply -> PING_INNER_ERROR -> UDA_DSMI_EXE_ERR
        return Result(out, DSMI_EXE & 0xFF, ERROR_TEXT[DSMI_EXE] + "\n")
    return Result(out)


def _cmd_link(state, dev, nic, rest, entries):
    if rest != ["-g"]:
        return fail(PARAM_OP_NOT_SUPPORT, "-link")
    return Result("link status: %s\n" % nic["link"])


def _cmd_net_health(state, dev, nic, rest, entries):
    if rest[:1] != ["-g"]:
        return fail(PARAM_OP_NOT_SUPPORT, "-net_health")
    if len(rest) != 1:
        return fail(PARAM_CMD_COUNT, "-net_health")
    return Result("net health status: %s\n" % net_health(state, nic))


def _cmd_lldp(state, dev, nic, rest, entries):
    if len(rest) != 1:
        return fail(PARAM_CMD_COUNT, "-lldp")
    if rest != ["-g"]:
        return fail(PARAM_OP_NOT_SUPPORT, "-lldp")
    return Result(_lldp(dev, nic))


def _cmd_cfg(state, dev, nic, rest, entries):
    if rest != ["recovery"]:
        return fail(PARAM_OP_NOT_SUPPORT, "-cfg")
    apply_conf(state, entries, devs=[dev])
    return Result("")


COMMANDS = {
    "-ip": _cmd_ip, "-gateway": _cmd_gateway, "-netdetect": _cmd_netdetect, "-mtu": _cmd_mtu, "-pfc": _cmd_pfc,
    "-prio_tc": _cmd_prio_tc, "-dscp_to_tc": _cmd_dscp_to_tc, "-tls": _cmd_tls, "-ping": _cmd_ping,
    "-link": _cmd_link, "-net_health": _cmd_net_health, "-lldp": _cmd_lldp, "-cfg": _cmd_cfg,
}


def run(argv, state, entries):
    """Pure: (argv, state, conf entries) -> Result; mutates ``state`` and ``entries`` like the device would."""
    if not argv or argv[0] in ("-h", "--help") or "-h" in argv or "--help" in argv:
        return Result(HELP + "\n" + SIMULATED_NOTE + "\n", 0 if argv else 1)
    if state.get("pending_reboot"):
        # hccn_tool calls no dcmi_init (main.c): a failing device call (the driver not answering until the
        # reboot) falls to dsmi_analysis_dsmi_ret_to_uda's default, UDA_DSMI_EXE_ERR (network/dsmi/ascend910B/
        # ds_net.c#L2236-L2262), "Command execute failed!" on stderr, exit 0x4001 & 0xff. That the device call
        # fails while a reboot is pending is an assumption. A device held by another process does not stop it.
        return fail(DSMI_EXE)
    if argv[0] != "-i" or len(argv) < 3:
        return fail(MAJOR_CMD_INVALID)
    dev_text, cmd, rest = argv[1], argv[2], argv[3:]
    nics = state["nics"]
    missing = {str(c["chips"][i]["phy_id"]) for c in state["npus"] if not c.get("present", True)
               for i in range(len(c["chips"]))}
    if not dev_text.isdigit() or len(dev_text) > 2 or dev_text not in nics or dev_text in missing:
        return fail(MAJOR_DEV_ID)
    if cmd not in COMMANDS:
        return fail(MAJOR_CMD_INVALID)
    if not rest:
        return fail(PARAM_CMD_COUNT, cmd)
    return COMMANDS[cmd](state, int(dev_text), nics[dev_text], rest, entries)


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    conf_path = st.path(HCCN_CONF)
    with st.locked():
        state = st.refresh(st.load())
        text = _read(conf_path)
        entries = parse_conf(text)
        before = [list(e) for e in entries]
        snapshot = repr(state)
        result = run(argv, state, entries)
        if repr(state) != snapshot:
            st.save(state)
        if entries != before:
            with open(conf_path, "w") as handle:
                handle.write(write_conf(entries))
    sys.stdout.write(result.out)
    sys.stderr.write(result.err)
    return result.rc


if __name__ == "__main__":
    sys.exit(main())
