"""Faults show as the real tools show them; hccn_tool settings parse back and persist to /etc/hccn.conf."""

from __future__ import annotations

import os
import subprocess
import sys

from ansible_collections.ascendai.vllm.plugins.module_utils import _hccn as hparser
from ansible_collections.ascendai.vllm.plugins.module_utils import _npu_smi as parser
from atlas_sim import state as st


def _driver_running(node):
    state = node.state()
    state["running"]["driver"] = state["software"]["driver"] = "25.2.0"
    st.save(state)


def test_card_alarm_shows_in_table_and_health(node):
    _driver_running(node)
    assert node.fault("card-alarm", "--npu", "2", "--code", "0x80E01801").returncode == 0
    info = parser.parse_info(node.npu_smi("info").stdout)
    assert [n["health"] for n in info["npus"]] == ["OK", "OK", "Alarm", "OK"]
    health = parser.parse_health(node.npu_smi("info", "-t", "health", "-i", "2", "-c", "0").stdout)
    assert (health["health"], health["error_codes"]) == ("Alarm", ["80E01801"])
    assert parser.parse_health(node.npu_smi("info", "-t", "health", "-i", "1").stdout)["health"] == "OK"


def test_card_alarm_multi_line_information_like_capture(node):
    _driver_running(node)
    node.fault("card-alarm", "--npu", "0", "--code", "A4025021", "--code", "8C03A000", "--code", "8C084E00")
    out = node.npu_smi("info", "-t", "health", "-i", "0", "-c", "0").stdout
    assert out.splitlines()[:3] == ["\tHealth Status                  : Alarm",
                                    "\tError Code                     : A4025021 8C03A000 8C084E00",
                                    "\tError Information              : ascend_monitor adda heart beat lost error"]
    health = parser.parse_health(out)
    assert health["error_information_lines"][2] == "node type=adda, sensor type=Heartbeat Sensor, event state=" \
                                                   "Heartbeat Lost."


def test_card_missing(node):
    _driver_running(node)
    node.fault("card-missing", "--npu", "3")
    info = parser.parse_info(node.npu_smi("info").stdout)
    assert [n["npu_id"] for n in info["npus"]] == [0, 1, 2]
    result = node.npu_smi("info", "-t", "board", "-i", "3")
    assert result.returncode != 0 and result.stdout.startswith("Invalid card id.\n")
    assert node.hccn("-i", "3", "-link", "-g").returncode != 0
    node.fault("clear")
    assert len(parser.parse_info(node.npu_smi("info").stdout)["npus"]) == 4


def test_nic_faults(node):
    _driver_running(node)
    assert node.hccn("-i", "1", "-ip", "-s", "address", "29.1.0.11", "netmask", "255.255.0.0").returncode == 0
    node.hccn("-i", "1", "-netdetect", "-s", "address", "29.1.0.1")
    node.hccn("-i", "3", "-ip", "-s", "address", "29.1.0.13", "netmask", "255.255.0.0")
    node.hccn("-i", "3", "-netdetect", "-s", "address", "29.1.0.1")
    assert hparser.parse_net_health(node.hccn("-i", "1", "-net_health", "-g").stdout) == "Success"
    node.fault("nic-down", "--dev", "3")
    assert hparser.parse_link(node.hccn("-i", "3", "-link", "-g").stdout) == "DOWN"
    assert hparser.parse_link(node.hccn("-i", "1", "-link", "-g").stdout) == "UP"
    assert hparser.parse_net_health(node.hccn("-i", "3", "-net_health", "-g").stdout) == "Fault"
    node.fault("net-health-fail", "--dev", "1")
    assert hparser.parse_net_health(node.hccn("-i", "1", "-net_health", "-g").stdout) == "Receive timeout"
    ping = hparser.parse_ping(node.hccn("-i", "1", "-ping", "-g", "address", "29.1.0.13").stdout)
    assert (ping["transmitted"], ping["received"], ping["loss_percent"]) == (3, 0, 100.0)
    node.fault("clear")
    ping = hparser.parse_ping(node.hccn("-i", "1", "-ping", "-g", "address", "29.1.0.13").stdout)
    assert (ping["device"], ping["received"], ping["loss_percent"]) == (1, 3, 0.0)


def test_hccn_settings_parse_back_and_persist(node):
    _driver_running(node)
    for dev, last in ((0, 205), (7 % 4, 143)):
        assert node.hccn("-i", str(dev), "-ip", "-s", "address", "29.1.137.%d" % last, "netmask",
                         "255.255.0.0").returncode == 0
        node.hccn("-i", str(dev), "-netdetect", "-s", "address", "29.1.0.1")
        node.hccn("-i", str(dev), "-gateway", "-s", "gateway", "29.1.0.1")
    # same keys and order as the real /etc/hccn.conf capture (arthurchiao blog); send_arp_status_N comes only
    # from -send_arp -s enable (tool_send_arp.c), not from -ip -s (tool_write_ip_conf writes address, netmask)
    assert node.read("/etc/hccn.conf").splitlines()[:4] == [
        "address_0=29.1.137.205", "netmask_0=255.255.0.0", "netdetect_0=29.1.0.1", "gateway_0=29.1.0.1"]
    assert hparser.parse_hccn_conf(node.read("/etc/hccn.conf"))[3]["address"] == "29.1.137.143"
    assert hparser.parse_ip(node.hccn("-i", "3", "-ip", "-g").stdout) == {"address": "29.1.137.143",
                                                                          "netmask": "255.255.0.0"}
    assert hparser.parse_gateway(node.hccn("-i", "0", "-gateway", "-g").stdout) == {"gateway": "29.1.0.1",
                                                                                    "iface": "eth0"}
    assert hparser.parse_netdetect(node.hccn("-i", "0", "-netdetect", "-g").stdout) == "29.1.0.1"
    assert node.hccn("-i", "2", "-ip", "-g").returncode == 13
    node.hccn("-i", "2", "-pfc", "-s", "bitmap", "0,0,0,0,1,0,0,0")
    node.hccn("-i", "2", "-prio_tc", "-s", "map", "0,0,0,0,3,0,0,0")
    node.hccn("-i", "2", "-dscp_to_tc", "-s", "dscp", "33", "tc", "3")
    node.hccn("-i", "2", "-mtu", "-s", "size", "9000")
    node.hccn("-i", "2", "-tls", "-s", "enable", "1")
    assert hparser.parse_pfc(node.hccn("-i", "2", "-pfc", "-g").stdout) == [0, 0, 0, 0, 1, 0, 0, 0]
    assert hparser.parse_prio_tc(node.hccn("-i", "2", "-prio_tc", "-g").stdout) == [0, 0, 0, 0, 3, 0, 0, 0]
    assert hparser.parse_dscp_to_tc(node.hccn("-i", "2", "-dscp_to_tc", "-g", "dscp", "33").stdout) == {33: 3}
    assert hparser.parse_dscp_to_tc(node.hccn("-i", "2", "-dscp_to_tc", "-g").stdout)[32] == 0
    assert hparser.parse_mtu(node.hccn("-i", "2", "-mtu", "-g").stdout) == 9000
    assert hparser.parse_tls(node.hccn("-i", "2", "-tls", "-g").stdout)["enabled"] is True
    assert hparser.parse_lldp(node.hccn("-i", "2", "-lldp", "-g").stdout)["port_ifname"] == "400GE1/1/3:2"
    # a reboot re-applies /etc/hccn.conf
    node.reboot()
    assert hparser.parse_ip(node.hccn("-i", "0", "-ip", "-g").stdout)["address"] == "29.1.137.205"
    assert hparser.parse_mtu(node.hccn("-i", "2", "-mtu", "-g").stdout) == 9000


def test_hccn_rejects_bad_values(node):
    _driver_running(node)
    for argv in (("-i", "0", "-ip", "-s", "address", "300.1.1.1", "netmask", "255.255.0.0"),
                 ("-i", "0", "-pfc", "-s", "bitmap", "0,0,1"), ("-i", "0", "-mtu", "-s", "size", "9703"),
                 ("-i", "0", "-dscp_to_tc", "-s", "dscp", "64", "tc", "1"), ("-i", "9", "-link", "-g")):
        assert node.hccn(*argv).returncode != 0, argv
    assert not node.exists("/etc/hccn.conf")
    assert "SIMULATED" in node.hccn("-h").stdout
    assert "simulat" not in node.hccn("-i", "0", "-link", "-g").stdout.lower()


def _hccn(node, *args):
    """hccn_tool with stdout and stderr apart (the driver prints its errors on stderr)."""
    env = dict(node.env, PYTHONPATH=os.environ.get("ATLAS_SIM_LIB", node.env["ATLAS_SIM_LIB"]))
    return subprocess.run([sys.executable, "-m", "atlas_sim.hccn_tool"] + list(args), env=env, check=False,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)


def test_unconfigured_nic_get_fails_like_the_driver(node):
    # cmd.c g_uda_dsmi_err_list; exit status = UDA code & 0xFF (main.c returns it): 0x400D -> 13, 0x4002 -> 2
    _driver_running(node)
    ip = _hccn(node, "-i", "0", "-ip", "-g")
    assert (ip.returncode, ip.stdout, ip.stderr) == (13, "", "Get ipconf failed, because no ip was preset there!\n")
    gw = _hccn(node, "-i", "0", "-gateway", "-g")
    assert (gw.returncode, gw.stdout) == (2, "")
    assert gw.stderr == "Get gateway failed, because no gateway was preset there!\n"
    # tool_get_netdetect prints whatever address the device holds: 0.0.0.0 before any -s (assumption)
    assert _hccn(node, "-i", "0", "-netdetect", "-g").stdout == "netdetect addr: 0.0.0.0\n"
    gw = _hccn(node, "-i", "0", "-gateway", "-s", "gateway", "29.1.0.1")
    assert (gw.returncode, gw.stderr) == (26, "Unable to configure gateway, because ip is not configured!\n")
    _hccn(node, "-i", "0", "-ip", "-s", "address", "29.1.0.10", "netmask", "255.255.0.0")
    gw = _hccn(node, "-i", "0", "-gateway", "-s", "gateway", "30.1.0.1")
    assert gw.returncode == 8 and "doesn't match that of the configured ip adress" in gw.stderr
    bad = _hccn(node, "-i", "9", "-link", "-g")
    assert (bad.returncode, bad.stderr) == (4, "Get invalid device id.\n")


def test_ping_pkt_is_the_packet_length_and_loss_fails(node):
    # tool_get_ping_status: options address / pkt (data length 0..65507, no count); dsmi_ping_fun turns a
    # "recv time out seq" reply into an error (UDA_DSMI_EXE_ERR -> "Command execute failed!", exit 1)
    _driver_running(node)
    _hccn(node, "-i", "1", "-ip", "-s", "address", "29.1.0.11", "netmask", "255.255.0.0")
    ping = _hccn(node, "-i", "1", "-ping", "-g", "address", "29.1.0.13", "pkt", "10")
    assert ping.returncode == 0
    assert hparser.parse_ping(ping.stdout)["transmitted"] == 3
    assert _hccn(node, "-i", "1", "-ping", "-g", "address", "29.1.0.13", "pkt", "65508").returncode == 1
    node.fault("peer-silent", "--address", "29.1.0.13")
    lost = _hccn(node, "-i", "1", "-ping", "-g", "address", "29.1.0.13")
    assert (lost.returncode, lost.stderr) == (1, "Command execute failed!\n")
    assert "recv time out seq=0" in lost.stdout
    assert hparser.parse_ping(lost.stdout)["received"] == 0


def test_net_health_success_only_when_the_detect_address_answers(node):
    _driver_running(node)
    _hccn(node, "-i", "0", "-ip", "-s", "address", "29.1.0.10", "netmask", "255.255.0.0")
    assert hparser.parse_net_health(_hccn(node, "-i", "0", "-net_health", "-g").stdout) == "Init"
    _hccn(node, "-i", "0", "-netdetect", "-s", "address", "30.1.0.1")   # other subnet, no gateway
    assert hparser.parse_net_health(_hccn(node, "-i", "0", "-net_health", "-g").stdout) == "Unreachable"
    _hccn(node, "-i", "0", "-netdetect", "-s", "address", "29.1.0.1")
    assert hparser.parse_net_health(_hccn(node, "-i", "0", "-net_health", "-g").stdout) == "Success"
    node.fault("peer-silent", "--address", "29.1.0.1")
    assert hparser.parse_net_health(_hccn(node, "-i", "0", "-net_health", "-g").stdout) == "Receive timeout"


def test_hccn_conf_persists_qos_keys_and_boot_reapplies_them(node):
    # key names of the source's cfg_write_conf calls: bitmap (tool_cmd.c), prio_tc (tool_prio_tc.c), dscp_tc
    # "D:T," (tool_ops.c tool_dscp_write_conf), mtu, tls_enable (tool_tls.c)
    _driver_running(node)
    for argv in (("-pfc", "-s", "bitmap", "0,0,0,0,1,0,0,0"), ("-prio_tc", "-s", "map", "0,0,0,0,3,0,0,0"),
                 ("-dscp_to_tc", "-s", "dscp", "33", "tc", "3"), ("-dscp_to_tc", "-s", "dscp", "24", "tc", "2"),
                 ("-dscp_to_tc", "-s", "dscp", "33", "tc", "1"), ("-mtu", "-s", "size", "9000"),
                 ("-tls", "-s", "enable", "1")):
        assert _hccn(node, "-i", "2", *argv).returncode == 0, argv
    conf = node.read("/etc/hccn.conf").splitlines()
    assert conf == ["bitmap_2=0,0,0,0,1,0,0,0", "prio_tc_2=0,0,0,0,3,0,0,0", "dscp_tc_2=33:1,24:2,", "mtu_2=9000",
                    "tls_enable_2=1"]
    # the device forgets everything at a reset; the boot recovery applies /etc/hccn.conf again
    state = node.state()
    state["nics"]["2"].update(pfc=[0] * 8, prio_tc=[0] * 8, mtu=1500, dscp_to_tc={str(d): 0 for d in range(64)})
    st.save(state)
    node.reboot()
    assert hparser.parse_pfc(_hccn(node, "-i", "2", "-pfc", "-g").stdout) == [0, 0, 0, 0, 1, 0, 0, 0]
    assert hparser.parse_prio_tc(_hccn(node, "-i", "2", "-prio_tc", "-g").stdout) == [0, 0, 0, 0, 3, 0, 0, 0]
    assert hparser.parse_dscp_to_tc(_hccn(node, "-i", "2", "-dscp_to_tc", "-g").stdout)[33] == 1
    assert hparser.parse_mtu(_hccn(node, "-i", "2", "-mtu", "-g").stdout) == 9000


def test_hccn_refusals_use_the_driver_codes(node):
    _driver_running(node)
    pfc = _hccn(node, "-i", "0", "-pfc", "-s", "bitmap", "1,1,1,1,1,0,0,0")   # at most 4 on 910B (INFO: stdout)
    assert (pfc.returncode, pfc.stdout) == (25, "The number of pfc priority queues exceeds the maximum value(4).\n")
    dscp = _hccn(node, "-i", "0", "-dscp_to_tc", "-s", "dscp", "64", "tc", "1")
    assert (dscp.returncode, dscp.stderr) == (9, "The value of dscp you input is out of the valid range!\n")
    assert dscp.stdout.startswith("[ hccn_tool -i devid -dscp_to_tc ] needs the following parameters:")
    assert _hccn(node, "-i", "0", "-mtu", "-s", "size", "9703").returncode == 13
    assert _hccn(node, "-i", "0", "-tls", "-s", "enable", "2").returncode == 16
    assert not node.exists("/etc/hccn.conf")


def test_pending_reboot_fails_as_a_device_call_not_as_npu_smi():
    """hccn_tool has no dcmi_init: a failing device call prints UDA_DSMI_EXE_ERR's text, not npu-smi's -8005."""
    from atlas_sim import hccn_tool, state as st

    node = st.default_state()
    node["pending_reboot"] = True
    result = hccn_tool.run(["-i", "0", "-link", "-g"], node, [])
    assert result.rc == 1
    assert "Command execute failed!" in result.err
    assert "-8005" not in result.err + result.out
