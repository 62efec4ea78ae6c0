"""hccn_tool parsers (on the real captured outputs), change planning and the NIC address plan."""

from __future__ import annotations

import ipaddress
import os
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.ascendai.vllm.plugins.module_utils import _hccn as hccn
from ansible_collections.ascendai.vllm.plugins.module_utils._hccn import HccnError

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "hccn_tool")
_CMD = re.compile(r"^(\$ |\+ |/usr/local/\S+|root@\S+# )")


def blocks(name):
    """Fixture -> list of (command line, output text); the first line (source header) is dropped."""
    with open(os.path.join(FIX, name), encoding="utf-8") as fh:
        lines = fh.read().splitlines()[1:]
    out, cmd, buf = [], None, []
    for line in lines:
        if _CMD.match(line):
            if cmd is not None:
                out.append((cmd, "\n".join(buf).strip("\n") + "\n"))
            cmd, buf = line, []
        elif cmd is not None:
            buf.append(line)
    if cmd is not None:
        out.append((cmd, "\n".join(buf).strip("\n") + "\n"))
    return out


def block(name, needle):
    found = [text for cmd, text in blocks(name) if needle in cmd]
    assert found, f"no block with {needle!r} in {name}"
    return found[0]


ARTHUR_IP = "hccn_tool-ip-g-and-route-g-910b1-arthurchiao-blog.txt"
MINDCLUSTER = "hccn_tool-net_health-link-optical-tls-fec-ip-stat-link_stat-mindcluster-doc.txt"
FAULTDIAG = "npu_info_before-hccn_tool-npu-smi-910a-faultdiag-fixture-mindcluster.txt"
DEEPSEEK = "hccn_tool-multinode-checks-910b3-8card-deepseekv3-doc.txt"
RENDERED = "hccn_tool-pfc-prio_tc-dscp_to_tc-mtu-netdetect-g-rendered-from-driver-source.txt"


# ----------------------------------------------------------------------------------------------- parsers

def test_parse_ip_910b1_capture():
    assert hccn.parse_ip(block(ARTHUR_IP, "-ip -g")) == {"address": "29.1.112.213", "netmask": "255.255.0.0"}


def test_parse_ip_mindcluster_placeholder_is_rejected():
    # the official doc masks the address as 10.xx.xx.10: not an address, must not be accepted silently
    with pytest.raises(HccnError, match="10.xx.xx.10"):
        hccn.parse_ip(block(MINDCLUSTER, "-ip -g"))


def test_parse_ip_faultdiag_devices_and_unset():
    expected = {"address": "192.161.201.10", "netmask": "255.255.255.0"}
    assert hccn.parse_ip(block(FAULTDIAG, "-i 1 -ip -g")) == expected
    # device 2 printed nothing: no address configured
    assert hccn.parse_ip(block(FAULTDIAG, "-i 2 -ip -g")) == {"address": None, "netmask": None}


def test_parse_ip_eight_devices_in_one_loop_output():
    text = block(DEEPSEEK, "-ip -g")
    pairs = re.findall(r"ipaddr:.*\nnetmask:.*", text)
    parsed = [hccn.parse_ip(p) for p in pairs]
    assert [p["address"] for p in parsed] == [f"11.12.165.{80 + i}" for i in range(8)]
    assert {p["netmask"] for p in parsed} == {"255.255.255.0"}


def test_parse_link_and_net_health():
    assert hccn.parse_link(block(MINDCLUSTER, "-link -g")) == "UP"
    assert hccn.parse_net_health(block(MINDCLUSTER, "-net_health -g")) == "Init"
    assert hccn.parse_net_health(block(FAULTDIAG, "-net_health -g")) == "Socket failed"
    assert hccn.parse_net_health(block(DEEPSEEK, "-net_health -g").splitlines()[0]) == "Success"
    assert hccn.health_ok("Success") and not hccn.health_ok("Init") and not hccn.health_ok("Socket failed")


def test_parse_gateway_netdetect_tls_from_multinode_doc():
    gw_lines = block(DEEPSEEK, "-gateway -g").splitlines()
    assert [hccn.parse_gateway(line) for line in gw_lines][7] == {"gateway": "11.12.165.1", "iface": "eth7"}
    assert hccn.parse_netdetect(block(DEEPSEEK, "-netdetect -g").splitlines()[0]) == "11.12.165.1"
    tls_lines = block(DEEPSEEK, "-tls -g").splitlines()
    assert hccn.parse_tls(tls_lines[5]) == {"dev_id": 5, "enabled": False, "preconfigured": True, "alarm_days": 60}
    assert hccn.parse_tls(block(MINDCLUSTER, "-tls -g"))["dev_id"] == 0


def test_parse_netdetect_driver_format_and_unset():
    assert hccn.parse_netdetect(block(RENDERED, "-netdetect -g")) == "29.1.0.1"
    assert hccn.parse_netdetect("netdetect addr: 0.0.0.0\n") is None
    # nothing set yet: no output at all (as -ip -g and -gateway -g); anything else unknown still fails
    assert hccn.parse_netdetect("") is None and hccn.parse_netdetect("\n") is None
    with pytest.raises(HccnError, match="unrecognised hccn_tool -netdetect -g output"):
        hccn.parse_netdetect("netdetect: n/a\n")


def test_parse_ping_910b1_and_multinode():
    p = hccn.parse_ping(block("hccn_tool-ping-g-910b1-arthurchiao-blog.txt", "-ping -g"))
    assert p == {"device": 3, "address": "29.1.137.205", "times_ms": [1.418, 0.034, 0.04], "transmitted": 3,
                 "received": 3, "loss_percent": 0.0}
    second = block(DEEPSEEK, "-ping -g").split("device 1 ")[1]
    assert hccn.parse_ping("device 1 " + second)["times_ms"][0] == pytest.approx(0.149)


def test_parse_ping_newer_driver_format():
    text = "device 0 dev eth0 PING 10.0.0.1 to 10.0.0.2\n3 packets transmitted, 0 received, 100.00% packet loss\n"
    p = hccn.parse_ping(text)
    assert (p["device"], p["address"], p["received"], p["loss_percent"]) == (0, "10.0.0.2", 0, 100.0)


def test_parse_lldp_910b1():
    lldp = hccn.parse_lldp(block("hccn_tool-lldp-g-910b1-arthurchiao-blog.txt", "-lldp -g"))
    assert lldp["port_ifname"] == "400GE1/1/20:2"
    assert lldp["max_frame_size"] == 9216
    assert lldp["mgmt_ipv4"] == "26.xx.xx.xx"
    assert "Huarong DX511" in lldp["system_description"]
    assert lldp["tlvs"]["System Capabilities"] == ["Enabled capabilities: Bridge, Router"]


def test_parse_pfc_prio_tc_dscp_mtu_rendered_formats():
    assert hccn.parse_pfc(block(RENDERED, "-pfc -g")) == [0, 0, 0, 0, 1, 0, 0, 0]
    assert hccn.parse_prio_tc(block(RENDERED, "-prio_tc -g")) == [0, 0, 0, 0, 3, 0, 0, 0]
    full = hccn.parse_dscp_to_tc(blocks(RENDERED)[2][1])  # the full table block
    assert len(full) == 64 and full[33] == 3 and full[0] == 0 and sum(full.values()) == 3
    assert hccn.parse_dscp_to_tc(block(RENDERED, "-g dscp 33")) == {33: 3}
    assert hccn.parse_mtu(block(RENDERED, "-mtu -g")) == 9000


def test_parse_hccn_conf():
    with open(os.path.join(FIX, "etc-hccn-conf-910b1-arthurchiao-blog.txt"), encoding="utf-8") as fh:
        text = "\n".join(fh.read().splitlines()[3:])  # header, note, and the '$ cat' line
    conf = hccn.parse_hccn_conf(text)
    assert sorted(conf) == [0, 7]
    assert conf[0] == {"address": "29.1.137.205", "netmask": "255.255.0.0", "netdetect": "29.1.0.1",
                       "gateway": "29.1.0.1", "send_arp_status": "1"}
    assert conf[7]["address"] == "29.1.170.143"


@pytest.mark.parametrize("parser,text", [
    (hccn.parse_link, "dsmi get link fail\n"),
    (hccn.parse_net_health, ""),
    (hccn.parse_pfc, "PFC configuration:\npriority   0 1 2 3\nenabled    0 0 0 1\n"),
    (hccn.parse_prio_tc, "Priority mapping:\npriority   0 1 2 3 4 5 6 7\nTC         0 0 0 0 9 0 0 0\n"),
    (hccn.parse_dscp_to_tc, "   0       0\n"),
    (hccn.parse_mtu, "mtu: big\n"),
    (hccn.parse_tls, "dev_id:0\n"),
    (hccn.parse_ping, "device 0 PING 1.2.3.4\n"),
])
def test_parsers_reject_unrecognised_output(parser, text):
    with pytest.raises(HccnError):
        parser(text)


@given(st.lists(st.integers(0, 1), min_size=8, max_size=8))
def test_pfc_round_trip(bits):
    text = "PFC configuration:\npriority   0 1 2 3 4 5 6 7\nenabled    " + " ".join(map(str, bits)) + "\n"
    assert hccn.parse_pfc(text) == bits
    assert hccn.normalize_pfc(hccn.bitmap_priorities(bits)) == bits
    assert hccn.normalize_pfc(",".join(map(str, bits))) == bits


@given(st.dictionaries(st.integers(0, 63), st.integers(0, 3), min_size=1))
def test_dscp_to_tc_round_trip(mapping):
    text = "%4s%8s\n" % ("dscp", "tc") + "".join("%4d%8u\n" % (d, t) for d, t in sorted(mapping.items()))
    assert hccn.parse_dscp_to_tc(text) == mapping


@given(st.ip_addresses(v=4), st.integers(0, 32))
def test_ip_round_trip(addr, prefix):
    mask = str(ipaddress.IPv4Network(f"0.0.0.0/{prefix}").netmask)
    assert hccn.parse_ip(f"ipaddr:{addr}\nnetmask:{mask}\n") == {"address": str(addr), "netmask": mask}


@given(st.text(max_size=200))
def test_parsers_never_crash_with_other_exceptions(text):
    for parser in (hccn.parse_ip, hccn.parse_gateway, hccn.parse_netdetect, hccn.parse_link, hccn.parse_pfc,
                   hccn.parse_prio_tc, hccn.parse_dscp_to_tc, hccn.parse_mtu, hccn.parse_tls, hccn.parse_ping,
                   hccn.parse_net_health, hccn.parse_lldp):
        try:
            parser(text)
        except HccnError:
            pass
    assert isinstance(hccn.parse_hccn_conf(text), dict)


# ----------------------------------------------------------------------------------------------- planning

TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"


def current_from_fixtures():
    """Device 3 of the 910B1 capture: address from -ip -g, PFC/TC maps from the rendered formats."""
    state = hccn.parse_ip(block(ARTHUR_IP, "-ip -g"))
    state["gateway"] = "29.1.0.1"  # from the -route -g default route of the same capture
    state["netdetect"] = hccn.parse_netdetect(block(RENDERED, "-netdetect -g"))
    state["pfc"] = [0] * 8
    state["prio_tc"] = hccn.parse_prio_tc(block(RENDERED, "-prio_tc -g"))
    state["dscp_to_tc"] = hccn.parse_dscp_to_tc(blocks(RENDERED)[2][1])
    state["mtu"] = hccn.parse_mtu(block(RENDERED, "-mtu -g"))
    state["tls"] = hccn.parse_tls(block(DEEPSEEK, "-tls -g").splitlines()[3])["enabled"]
    return state


def test_plan_no_change_when_everything_matches():
    cur = current_from_fixtures()
    wanted = {"address": "29.1.112.213", "netmask": "16", "gateway": "29.1.0.1", "netdetect": "29.1.0.1",
              "mtu": 9000, "dscp_to_tc": {33: 3}, "tls": False, "prio_tc": "0,0,0,0,3,0,0,0"}
    commands, before, after = hccn.plan_changes(3, cur, wanted, tool=TOOL)
    assert commands == []
    assert before == after
    assert after["netmask"] == "255.255.0.0"


def test_plan_changes_only_what_differs_in_order():
    cur = current_from_fixtures()
    wanted = {"address": "29.1.112.213", "netmask": "255.255.0.0", "pfc": [4], "dscp_to_tc": {33: 3, 34: 2},
              "tls": False, "mtu": 4200}
    commands, before, after = hccn.plan_changes(3, cur, wanted, tool=TOOL)
    assert commands == [
        [TOOL, "-i", "3", "-mtu", "-s", "size", "4200"],
        [TOOL, "-i", "3", "-pfc", "-s", "bitmap", "0,0,0,0,1,0,0,0"],
        [TOOL, "-i", "3", "-dscp_to_tc", "-s", "dscp", "34", "tc", "2"],
    ]
    assert before["pfc"] == [0] * 8 and after["pfc"] == [0, 0, 0, 0, 1, 0, 0, 0]
    assert before["dscp_to_tc"] == {33: 3, 34: 0} and after["dscp_to_tc"] == {33: 3, 34: 2}
    assert before["mtu"] == 9000 and after["mtu"] == 4200


def test_plan_new_address_resets_gateway_even_if_same():
    cur = current_from_fixtures()
    commands, _before, after = hccn.plan_changes(3, cur, {"address": "29.1.112.214", "gateway": "29.1.0.1"}, tool=TOOL)
    assert commands == [
        [TOOL, "-i", "3", "-ip", "-s", "address", "29.1.112.214", "netmask", "255.255.0.0"],
        [TOOL, "-i", "3", "-gateway", "-s", "gateway", "29.1.0.1"],
    ]
    assert after == {"address": "29.1.112.214", "netmask": "255.255.0.0", "gateway": "29.1.0.1"}


def test_plan_unconfigured_device_needs_both_ip_and_netmask():
    cur = hccn.parse_ip(block(FAULTDIAG, "-i 2 -ip -g"))
    with pytest.raises(HccnError, match="device 2: no address"):
        hccn.plan_changes(2, cur, {"address": "192.161.202.10"})
    commands, before, _after = hccn.plan_changes(2, cur, {"address": "192.161.202.10", "netmask": "24"}, tool=TOOL)
    assert before == {"address": None, "netmask": None}
    assert commands == [[TOOL, "-i", "2", "-ip", "-s", "address", "192.161.202.10", "netmask", "255.255.255.0"]]


@pytest.mark.parametrize("wanted,message", [
    ({"gateway": "10.0.0.1"}, "gateway 10.0.0.1 is outside the device subnet 29.1.0.0/16"),
    ({"mtu": 9800}, "mtu 9800 is outside"),
    ({"pfc": [8]}, "pfc priority 8 is outside 0..7"),
    ({"pfc": "0,0,0,0,2,0,0,0"}, "may only contain 0 and 1"),
    ({"prio_tc": [0, 0, 0, 0, 4, 0, 0, 0]}, "prio_tc"),
    ({"dscp_to_tc": {64: 1}}, "out of range"),
    ({"address": "29.1.300.1"}, "not an IPv4 address"),
    ({"netmask": "255.0.255.0"}, "not a valid IPv4 netmask"),
])
def test_plan_rejects_bad_settings(wanted, message):
    with pytest.raises(HccnError, match=re.escape(message)):
        hccn.plan_changes(3, current_from_fixtures(), wanted)


def test_read_commands_cover_wanted_keys():
    cmds = hccn.read_commands(5, ["gateway", "pfc"], tool="hccn_tool")
    assert cmds == {"ip": ["hccn_tool", "-i", "5", "-ip", "-g"], "gateway": ["hccn_tool", "-i", "5", "-gateway", "-g"],
                    "pfc": ["hccn_tool", "-i", "5", "-pfc", "-g"]}


def test_check_link_and_health_names_device():
    assert hccn.check_link_and_health(0, "UP", "Success") == []
    problems = hccn.check_link_and_health(6, "DOWN", "Socket failed")
    assert len(problems) == 2 and all(p.startswith("NPU device 6:") for p in problems)
    assert "'Socket failed'" in problems[1]


def test_format_ping_table():
    row = dict(hccn.parse_ping(block("hccn_tool-ping-g-910b1-arthurchiao-blog.txt", "-ping -g")), host="node1")
    table = hccn.format_ping_table([row]).splitlines()
    assert table[0].split() == ["host", "device", "peer", "address", "recv/sent", "loss", "%"]
    assert table[2].split() == ["node1", "3", "29.1.137.205", "3/3", "0.00"]


# ----------------------------------------------------------------------------------------------- address plan

PLANES = [f"29.1.{i}.0/24" for i in range(8)]


def test_plan_addresses_8_planes():
    plan = hccn.plan_addresses(["node-a", "node-b"], PLANES, gateway="first")
    assert sorted(plan) == ["node-a", "node-b"]
    assert plan["node-a"][0] == {"device": 0, "address": "29.1.0.2", "netmask": "255.255.255.0",
                                 "gateway": "29.1.0.1", "netdetect": "29.1.0.1", "plane": "29.1.0.0/24"}
    assert [d["address"] for d in plan["node-b"]] == [f"29.1.{i}.3" for i in range(8)]


def test_plan_addresses_dict_index_16_devices_on_8_planes():
    plan = hccn.plan_addresses({"a3-1": 4}, PLANES, devices_per_host=16, netdetect=None, offset=10)
    devs = plan["a3-1"]
    assert len(devs) == 16
    assert devs[0]["address"] == "29.1.0.18" and devs[8]["address"] == "29.1.0.19"
    assert devs[15]["plane"] == "29.1.7.0/24" and devs[15]["gateway"] is None and devs[15]["netdetect"] is None


@pytest.mark.parametrize("hosts,planes,kwargs,message", [
    (["n1"], ["10.0.0.0/24", "10.0.0.128/25"], {"devices_per_host": 2},
     "planes 10.0.0.0/24 and 10.0.0.128/25 overlap"),
    (["n1"], ["10.0.0.1/24"], {"devices_per_host": 1}, "plane '10.0.0.1/24' is not an IPv4 network"),
    ({"n1": 0, "n2": 0}, PLANES, {}, "hosts 'n1' and 'n2' share index 0"),
    (["n1", "n1"], PLANES, {}, "host 'n1' is listed twice"),
    ({"n%d" % i: i for i in range(7)}, [f"10.{i}.0.0/29" for i in range(8)], {}, "plane 10.0.0.0/29 is too small"),
    (["n1"], PLANES, {"gateway": "10.9.9.9"}, "gateway of plane 29.1.0.0/24 10.9.9.9 is outside plane"),
    (["n1"], PLANES, {"gateway": 1, "offset": 1}, "duplicate address 29.1.0.1: n1 device 0 collides with the gateway"),
    (["n1"], PLANES, {"devices_per_host": 12}, "not a multiple of the 8 planes"),
    (["n1"], PLANES[:7], {"gateway": ["first"] * 8, "devices_per_host": 7},
     "gateway lists 8 entries but there are 7 planes"),
    ([], PLANES, {}, "hosts is empty"),
])
def test_plan_addresses_rejections(hosts, planes, kwargs, message):
    with pytest.raises(HccnError, match=re.escape(message)):
        hccn.plan_addresses(hosts, planes, **kwargs)


@given(st.integers(1, 40), st.integers(20, 28), st.sampled_from([None, "first", "last"]))
def test_plan_addresses_properties(nhosts, prefix, gw):
    planes = [str(ipaddress.IPv4Network(f"10.{i}.0.0/{prefix}")) for i in range(8)]
    hosts = [f"h{i}" for i in range(nhosts)]
    try:
        plan = hccn.plan_addresses(hosts, planes, gateway=gw)
    except HccnError as exc:
        assert "too small" in str(exc) or "collides" in str(exc)
        return
    seen = set()
    for host in hosts:
        for entry in plan[host]:
            net = ipaddress.IPv4Network(entry["plane"])
            addr = ipaddress.IPv4Address(entry["address"])
            assert addr in net and addr not in (net.network_address, net.broadcast_address)
            assert entry["plane"] == planes[entry["device"]]
            assert entry["address"] not in seen and entry["address"] != entry["gateway"]
            seen.add(entry["address"])


def test_ping_summary_of_the_hccs_ping_and_lost_replies():
    # tool_ping_printf (hccn_product_ext/tool_cmd.c) prints "packets loss"; a lost reply reads "recv time out seq"
    # (dsmi_ping_fun, ds_net_ext.c), which also makes hccn_tool exit non-zero
    out = ("device 1 PING 29.1.0.13\nrecv time out seq=0\nrecv time out seq=1\nrecv time out seq=2\n"
           "3 packets transmitted, 0 received, 100.00% packets loss\n")
    ping = hccn.parse_ping(out)
    assert (ping["device"], ping["transmitted"], ping["received"], ping["loss_percent"]) == (1, 3, 0, 100.0)


def test_not_preset_reads_are_told_from_other_failures():
    assert hccn.read_not_preset("ip", 13, "Get ipconf failed, because no ip was preset there!\n")
    assert hccn.read_not_preset("gateway", 2, "Get gateway failed, because no gateway was preset there!\n")
    assert not hccn.read_not_preset("ip", 1, "dcmi module initialize failed. ret is -8005\n")
    assert not hccn.read_not_preset("mtu", 13, "")
