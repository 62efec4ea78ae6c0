"""Simulated ``hccn_tool`` (the NPU RoCE NIC tool), with ``/etc/hccn.conf`` persistence.

Output formats follow the captures in shared/fixtures/hccn_tool and ascend-facts.md section 3; where no capture
exists (``-pfc -g``, ``-dscp_to_tc -g``, ``-prio_tc -g``, ``-mtu -g``) they follow the formats documented in the
collection's own parser (plugins/module_utils/hccn.py, taken from the driver source).
"""

import ipaddress
import random
import sys

from atlas_sim import SIMULATED_NOTE, state as st

HCCN_CONF = "/etc/hccn.conf"
CONF_KEYS = ("address", "netmask", "netdetect", "gateway", "send_arp_status")
NET_HEALTH = ("Success", "Socket fail", "Receive timeout", "Unreachable", "Time exceeded", "Fault", "Init",
              "Thread error", "Detect ip set", "Unknown")
HELP = """Usage: hccn_tool [-i %d] <command> [-s|-g|-a|-d|-c] [options...]

Commands (910B):
  -ip -s address <A.B.C.D> netmask <A.B.C.D> | -ip -g
  -gateway -s gateway <A.B.C.D> | -gateway -g
  -netdetect -s address <A.B.C.D> | -netdetect -g
  -link -g            -net_health -g        -lldp -g
  -pfc -s bitmap <b0,...,b7> | -pfc -g
  -dscp_to_tc -s dscp <0..63> tc <0..3> | -dscp_to_tc -g [dscp <n>]
  -prio_tc -s map <t0,...,t7> | -prio_tc -g
  -tls -s enable <0|1> | -tls -g
  -mtu -s size <68..9702> | -mtu -g
  -ping -g address <A.B.C.D> [pkt <n>]
"""


class Result(object):
    def __init__(self, out="", rc=0):
        self.out, self.rc = out, rc


def read_conf(text):
    """``/etc/hccn.conf`` text -> {dev: {key: value}} (unknown lines are kept under key ``None``)."""
    conf = {}
    for line in (text or "").splitlines():
        if "=" not in line:
            continue
        name, value = line.split("=", 1)
        key, _, dev = name.strip().rpartition("_")
        if key and dev.isdigit():
            conf.setdefault(int(dev), {})[key] = value.strip()
    return conf


def write_conf(conf):
    lines = []
    for dev in sorted(conf):
        keys = [k for k in CONF_KEYS if k in conf[dev]] + sorted(k for k in conf[dev] if k not in CONF_KEYS)
        lines += ["%s_%d=%s" % (key, dev, conf[dev][key]) for key in keys]
    return "\n".join(lines) + ("\n" if lines else "")


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


def net_health(nic):
    if nic.get("net_health"):
        return nic["net_health"]
    if not nic.get("netdetect") or not nic.get("ip"):
        return "Init"
    if nic.get("link") != "UP":
        return "Fault"
    return "Success"


def _options(args):
    """``address 1.2.3.4 netmask 255.0.0.0`` -> dict."""
    out = {}
    for index in range(0, len(args) - 1, 2):
        out[args[index]] = args[index + 1]
    return out


def _bits(text, allowed):
    parts = (text or "").split(",")
    if len(parts) != 8 or any(p.strip() not in allowed for p in parts):
        return None
    return [int(p) for p in parts]


def _lldp(dev, nic):
    if nic.get("link") != "UP":
        return ""
    return ("Chassis ID TLV\n\tMAC: 70:7b:e8:%02x:00:01\nPort ID TLV\n\tIfname: %s\n"
            "System Description TLV\n\tVersatile Routing Platform Software\n"
            "VRP (R) software, Version 8.211 (DX511 V200R021C10SPC600)\n\nHuarong DX511\n\n"
            "System Capabilities TLV\n\tEnabled capabilities: Bridge, Router\n"
            "Maximum Frame Size TLV\n\t9216\nEnd of LLDPDU TLV\n" % (dev, nic["lldp_ifname"]))


def _reachable(nic, address):
    if nic.get("link") != "UP" or not nic.get("ip") or not nic.get("netmask"):
        return False
    if nic.get("net_health") not in (None, "Success"):
        return False
    net = ipaddress.IPv4Network("%s/%s" % (nic["ip"], nic["netmask"]), strict=False)
    return ipaddress.IPv4Address(address) in net or bool(nic.get("gateway"))


def run(argv, state, conf):
    """Pure: (argv, state, conf dict) -> Result; mutates ``state`` and ``conf`` for ``-s`` commands."""
    if not argv or argv[0] in ("-h", "--help") or "-h" in argv or "--help" in argv:
        return Result(HELP + "\n" + SIMULATED_NOTE + "\n", 0 if argv else 1)
    if state.get("pending_reboot"):
        return Result("dcmi module initialize failed. ret is -8005\n", 1)
    if argv[0] != "-i" or len(argv) < 3:
        return Result("Parameter error, please check the command.\n" + HELP, 1)
    dev_text, cmd, rest = argv[1], argv[2], argv[3:]
    nics = state["nics"]
    missing = {str(c["chips"][i]["phy_id"]) for c in state["npus"] if not c.get("present", True)
               for i in range(len(c["chips"]))}
    if dev_text not in nics or dev_text in missing:
        return Result("Device id [%s] is invalid.\n" % dev_text, 1)
    dev, nic = int(dev_text), nics[dev_text]
    mode, opts = (rest[0] if rest else ""), _options(rest[1:])
    if mode not in ("-s", "-g"):
        return Result("Parameter error, please check the command.\n", 1)
    entry = conf.setdefault(dev, {})

    if cmd == "-ip":
        if mode == "-g":
            if not nic.get("ip"):
                return Result("")
            return Result("ipaddr:%s\nnetmask:%s\n" % (nic["ip"], nic["netmask"]))
        address, mask = _ip(opts.get("address")), _netmask(opts.get("netmask"))
        if not address or not mask:
            return Result("Parameter address or netmask is invalid.\n", 1)
        nic["ip"], nic["netmask"] = address, mask
        entry["address"], entry["netmask"] = address, mask
        entry.setdefault("send_arp_status", str(nic.get("send_arp_status", 1)))
        return Result("")
    if cmd == "-gateway":
        if mode == "-g":
            return Result("default gateway:%s, Iface:eth%d\n" % (nic["gateway"], dev) if nic.get("gateway") else "")
        gateway = _ip(opts.get("gateway"))
        if not gateway:
            return Result("Parameter gateway is invalid.\n", 1)
        nic["gateway"] = entry["gateway"] = gateway
        return Result("")
    if cmd == "-netdetect":
        if mode == "-g":
            return Result("netdetect addr: %s\n" % nic["netdetect"] if nic.get("netdetect") else "")
        address = _ip(opts.get("address"))
        if not address:
            return Result("Parameter address is invalid.\n", 1)
        nic["netdetect"] = entry["netdetect"] = address
        return Result("")
    if cmd == "-link" and mode == "-g":
        return Result("link status: %s\n" % nic["link"])
    if cmd == "-net_health" and mode == "-g":
        return Result("net health status: %s\n" % net_health(nic))
    if cmd == "-lldp" and mode == "-g":
        return Result(_lldp(dev, nic))
    if cmd == "-pfc":
        if mode == "-g":
            return Result("PFC configuration:\npriority   0 1 2 3 4 5 6 7\nenabled    %s\n"
                          % " ".join(str(b) for b in nic["pfc"]))
        bits = _bits(opts.get("bitmap"), ("0", "1"))
        if bits is None:
            return Result("Parameter bitmap is invalid, it must be 8 values of 0 or 1 separated by ','.\n", 1)
        nic["pfc"] = bits
        return Result("")
    if cmd == "-dscp_to_tc":
        if mode == "-g":
            if "dscp" in opts:
                if not (opts["dscp"].isdigit() and 0 <= int(opts["dscp"]) <= 63):
                    return Result("Parameter dscp(0~63) is invalid.\n", 1)
                dscps = [int(opts["dscp"])]
            else:
                dscps = range(64)
            return Result("dscp      tc\n" + "".join("%4d%8u\n" % (d, nic["dscp_to_tc"][str(d)]) for d in dscps))
        dscp, tc = opts.get("dscp", ""), opts.get("tc", "")
        if not (dscp.isdigit() and 0 <= int(dscp) <= 63 and tc.isdigit() and 0 <= int(tc) <= 3):
            return Result("Parameter dscp(0~63) or tc(0~3) is invalid.\n", 1)
        nic["dscp_to_tc"][str(int(dscp))] = int(tc)
        return Result("")
    if cmd == "-prio_tc":
        if mode == "-g":
            return Result("Priority mapping:\npriority   0 1 2 3 4 5 6 7\nTC         %s\n"
                          % " ".join(str(t) for t in nic["prio_tc"]))
        bits = _bits(opts.get("map"), ("0", "1", "2", "3"))
        if bits is None:
            return Result("Parameter map is invalid, it must be 8 values of 0~3 separated by ','.\n", 1)
        nic["prio_tc"] = bits
        return Result("")
    if cmd == "-tls":
        tls = nic["tls"]
        if mode == "-g":
            return Result("dev_id:%d, tls switch[%d](0:disable, 1:enable), tls preconfigured[%d](0:non-preset, "
                          "1:preset), tls alarm time threshold[%d]days\n"
                          % (dev, tls["enable"], tls["preconfigured"], tls["alarm_days"]))
        if opts.get("enable") not in ("0", "1"):
            return Result("Parameter enable is invalid.\n", 1)
        tls["enable"] = int(opts["enable"])
        return Result("")
    if cmd == "-mtu":
        if mode == "-g":
            return Result("mtu:%d\n" % nic["mtu"])
        size = opts.get("size", "")
        if not (size.isdigit() and 68 <= int(size) <= 9702):
            return Result("Parameter size(68~9702) is invalid.\n", 1)
        nic["mtu"] = int(size)
        return Result("")
    if cmd == "-ping" and mode == "-g":
        address = _ip(opts.get("address"))
        if not address:
            return Result("Parameter address is invalid.\n", 1)
        count = int(opts.get("pkt", "3")) if opts.get("pkt", "3").isdigit() else 3
        lines = ["device %d PING %s" % (dev, address)]
        ok = _reachable(nic, address)
        rng = random.Random("%s-%s" % (dev, address))
        received = 0
        for seq in range(count):
            if ok:
                received += 1
                lines.append("recv seq=%d,time=%.6fms" % (seq, rng.uniform(0.03, 1.5)))
        loss = 100.0 * (count - received) / count if count else 0.0
        lines.append("%d packets transmitted, %d received, %.2f%% packet loss" % (count, received, loss))
        return Result("\n".join(lines) + "\n", 0)
    return Result("Command %s %s is not supported.\n" % (cmd, mode), 1)


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
        conf = read_conf(text)
        result = run(argv, state, conf)
        if result.rc == 0 and "-s" in argv[:4]:
            st.save(state)
            new = write_conf({d: v for d, v in conf.items() if v})
            if new != text:
                with open(conf_path, "w") as handle:
                    handle.write(new)
    sys.stdout.write(result.out)
    return result.rc


if __name__ == "__main__":
    sys.exit(main())
