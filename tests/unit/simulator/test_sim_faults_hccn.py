"""Faults show as the real tools show them; hccn_tool settings parse back and persist to /etc/hccn.conf."""

from __future__ import annotations

from ansible_collections.ascendai.vllm.plugins.module_utils import hccn as hparser
from ansible_collections.ascendai.vllm.plugins.module_utils import npu_smi as parser
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
    node.fault("card-alarm", "--npu", "0", "--code", "A4025021", "--code", "8C03A000")
    out = node.npu_smi("info", "-t", "health", "-i", "0", "-c", "0").stdout
    assert out.splitlines()[:3] == ["\tHealth Status                  : Alarm",
                                    "\tError Code                     : A4025021 8C03A000",
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
    # same keys and order as the real /etc/hccn.conf capture (arthurchiao blog)
    assert node.read("/etc/hccn.conf").splitlines()[:5] == [
        "address_0=29.1.137.205", "netmask_0=255.255.0.0", "netdetect_0=29.1.0.1", "gateway_0=29.1.0.1",
        "send_arp_status_0=1"]
    assert hparser.parse_hccn_conf(node.read("/etc/hccn.conf"))[3]["address"] == "29.1.137.143"
    assert hparser.parse_ip(node.hccn("-i", "3", "-ip", "-g").stdout) == {"address": "29.1.137.143",
                                                                          "netmask": "255.255.0.0"}
    assert hparser.parse_gateway(node.hccn("-i", "0", "-gateway", "-g").stdout) == {"gateway": "29.1.0.1",
                                                                                    "iface": "eth0"}
    assert hparser.parse_netdetect(node.hccn("-i", "0", "-netdetect", "-g").stdout) == "29.1.0.1"
    assert hparser.parse_ip(node.hccn("-i", "2", "-ip", "-g").stdout) == {"address": None, "netmask": None}
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
    # a reboot re-applies /etc/hccn.conf; settings outside it stay on the device
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
