"""ascendai.vllm.hccn main(): a fake hccn_tool whose -g answers start from the real captured outputs."""

from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.ascendai.vllm.plugins.modules import hccn as hccn_module
from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.module_harness import (
    AnsibleExitJson, AnsibleFailJson, patch_exits)

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "hccn_tool")
TOOL = "/opt/fake/hccn_tool"


def read_block(name, needle):
    with open(os.path.join(FIX, name), encoding="utf-8") as fh:
        text = fh.read().split(needle, 1)[1]
    body = text.split("\n", 1)[1]
    return body.split("\n\n", 1)[0] + "\n"


class FakeHccnTool:
    """Device 3 of the 910B1 capture. -g answers are the captured text until a -s changes the value; then the
    answer is rendered in the driver's printf format."""

    def __init__(self, link="link status: UP\n", health="net health status: Success\n"):
        self.out = {
            "-ip": read_block("hccn_tool-ip-g-and-route-g-910b1-arthurchiao-blog.txt", "-ip -g"),
            "-gateway": "default gateway:29.1.0.1, Iface:eth3\n",
            "-netdetect": read_block("hccn_tool-pfc-prio_tc-dscp_to_tc-mtu-netdetect-g-rendered-from-driver-source.txt",
                                     "-netdetect -g"),
            "-pfc": "PFC configuration:\npriority   0 1 2 3 4 5 6 7\nenabled    0 0 0 0 0 0 0 0\n",
            "-dscp_to_tc": None,
            "-tls": read_block("hccn_tool-multinode-checks-910b3-8card-deepseekv3-doc.txt", "-tls -g").splitlines()[3],
            "-mtu": "mtu:1500\n",
            "-link": link,
            "-net_health": health,
        }
        self.dscp = {d: 0 for d in range(64)}
        self.calls = []

    def __call__(self, argv, *args, **kwargs):
        self.calls.append(list(argv))
        assert argv[0] == TOOL and argv[1] == "-i" and argv[2] == "3", argv
        flag, mode, rest = argv[3], argv[4], argv[5:]
        if mode == "-g":
            if flag == "-ping":
                return 0, read_block("hccn_tool-ping-g-910b1-arthurchiao-blog.txt", "-ping -g"), ""
            if flag == "-dscp_to_tc":
                return 0, "%4s%8s\n" % ("dscp", "tc") + "".join("%4d%8u\n" % kv for kv in sorted(self.dscp.items())), ""
            if isinstance(self.out[flag], tuple):   # (rc, stderr): a failed read
                return self.out[flag][0], "", self.out[flag][1]
            return 0, self.out[flag], ""
        assert mode == "-s", argv
        if flag == "-ip":
            self.out["-ip"] = f"ipaddr:{rest[1]}\nnetmask:{rest[3]}\n"
        elif flag == "-gateway":
            self.out["-gateway"] = f"default gateway:{rest[1]}, Iface:eth3\n"
        elif flag == "-netdetect":
            self.out["-netdetect"] = f"netdetect addr: {rest[1]}\n"
        elif flag == "-pfc":
            bits = rest[1].replace(",", " ")
            self.out["-pfc"] = f"PFC configuration:\npriority   0 1 2 3 4 5 6 7\nenabled    {bits}\n"
        elif flag == "-dscp_to_tc":
            self.dscp[int(rest[1])] = int(rest[3])
        elif flag == "-mtu":
            self.out["-mtu"] = f"mtu:{rest[1]}\n"
        elif flag == "-tls":
            self.out["-tls"] = self.out["-tls"].replace("switch[0]", f"switch[{rest[1]}]")
        return 0, "", ""


def run_module(monkeypatch, fake, args):
    patch_exits(monkeypatch)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, argv, **kw: fake(argv))
    args = dict({"device": 3, "hccn_tool_path": TOOL, "health_timeout": 0}, **args)
    with patch_module_args(args):
        with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as info:
            hccn_module.main()
    return info.type is AnsibleExitJson, info.value.args[0]


POLICY = {"ip": "29.1.112.213", "netmask": "255.255.0.0", "gateway": "29.1.0.1", "netdetect": "29.1.0.1",
          "pfc_priorities": [4], "dscp_to_tc": {"33": 3}, "tls": False, "mtu": 9000}


def test_applies_only_differences_then_is_idempotent(monkeypatch):
    fake = FakeHccnTool()
    ok, res = run_module(monkeypatch, fake, dict(POLICY, _ansible_diff=True))
    assert ok, res
    assert res["changed"] is True
    assert res["commands"] == [
        [TOOL, "-i", "3", "-mtu", "-s", "size", "9000"],
        [TOOL, "-i", "3", "-pfc", "-s", "bitmap", "0,0,0,0,1,0,0,0"],
        [TOOL, "-i", "3", "-dscp_to_tc", "-s", "dscp", "33", "tc", "3"],
    ]
    assert res["diff"]["before"]["pfc"] == [0] * 8 and res["diff"]["after"]["pfc"] == [0, 0, 0, 0, 1, 0, 0, 0]
    assert res["link"] == "UP" and res["net_health"] == "Success"
    assert [c for c in fake.calls if c[4] == "-s"] == res["commands"]
    json.dumps(res)  # result must be JSON-serialisable (int dict keys become strings)

    ok, res = run_module(monkeypatch, fake, POLICY)
    assert ok and res["changed"] is False and res["commands"] == []


def test_check_mode_runs_nothing(monkeypatch):
    fake = FakeHccnTool()
    ok, res = run_module(monkeypatch, fake, dict(POLICY, _ansible_check_mode=True))
    assert ok and res["changed"] is True and len(res["commands"]) == 3
    assert not [c for c in fake.calls if c[4] == "-s"]
    assert res["link"] is None  # not verified while changes are pending


def test_link_down_and_bad_health_name_the_device(monkeypatch):
    fake = FakeHccnTool(link="link status: DOWN\n",
                        health=read_block("npu_info_before-hccn_tool-npu-smi-910a-faultdiag-fixture-mindcluster.txt",
                                          "-net_health -g"))
    ok, res = run_module(monkeypatch, fake, {"mtu": 1500})
    assert not ok
    assert res["msg"].startswith("NPU device 3: link status is DOWN")
    assert "NPU device 3: net health status is 'Socket failed'" in res["msg"]


def test_gateway_outside_subnet_fails_before_any_change(monkeypatch):
    fake = FakeHccnTool()
    ok, res = run_module(monkeypatch, fake, {"gateway": "10.0.0.1"})
    assert not ok and "outside the device subnet 29.1.0.0/16" in res["msg"]
    assert not [c for c in fake.calls if c[4] == "-s"]


def test_ping_reports_results(monkeypatch):
    fake = FakeHccnTool()
    ok, res = run_module(monkeypatch, fake, {"ping": ["29.1.137.205"], "check_health": False})
    assert ok and res["changed"] is False
    assert res["ping"][0]["received"] == 3 and res["ping"][0]["times_ms"] == [1.418, 0.034, 0.04]


# the driver's own texts and exit codes (hccn_tool cmd.c g_uda_dsmi_err_list; exit = UDA code & 0xFF)
NO_IP = (13, "Get ipconf failed, because no ip was preset there!\n")
NO_GATEWAY = (2, "Get gateway failed, because no gateway was preset there!\n")


def test_unconfigured_nic_gets_address_and_gateway(monkeypatch):
    fake = FakeHccnTool()
    fake.out["-ip"], fake.out["-gateway"] = NO_IP, NO_GATEWAY
    ok, res = run_module(monkeypatch, fake, {"ip": "29.1.112.213", "netmask": "255.255.0.0", "gateway": "29.1.0.1",
                                             "check_health": False})
    assert ok, res
    assert res["commands"] == [
        [TOOL, "-i", "3", "-ip", "-s", "address", "29.1.112.213", "netmask", "255.255.0.0"],
        [TOOL, "-i", "3", "-gateway", "-s", "gateway", "29.1.0.1"],
    ]
    assert res["before"]["address"] is None and res["before"]["gateway"] is None


def test_a_failed_read_is_not_taken_for_an_unset_address(monkeypatch):
    fake = FakeHccnTool()
    fake.out["-ip"] = (1, "dcmi module initialize failed. ret is -8005\n")
    ok, res = run_module(monkeypatch, fake, {"ip": "29.1.112.213", "netmask": "255.255.0.0", "check_health": False})
    assert not ok
    assert "-ip -g failed (rc=1): dcmi module initialize failed" in res["msg"]
    assert not [c for c in fake.calls if c[4] == "-s"]
