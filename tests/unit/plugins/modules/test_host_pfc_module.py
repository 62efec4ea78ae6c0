"""ascendai.vllm.host_pfc main() with mocked dcb / mlnx_qos answering with the verbatim samples."""

from __future__ import annotations

import os

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.ascendai.vllm.plugins.modules import host_pfc as host_pfc_module
from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.module_harness import (
    AnsibleExitJson, AnsibleFailJson, patch_exits)

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "host_pfc")


def sample(name, start):
    with open(os.path.join(FIX, name), encoding="utf-8") as fh:
        text = fh.read().split(start, 1)[1]
    return text.split("\n", 1)[1].split("\n\n", 1)[0] + "\n"


def run_module(monkeypatch, answers, args):
    calls = []

    def run_command(self, argv, **kw):
        calls.append(list(argv))
        return answers(argv)

    patch_exits(monkeypatch)
    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    with patch_module_args(args):
        with pytest.raises((AnsibleExitJson, AnsibleFailJson)) as info:
            host_pfc_module.main()
    return info.type is AnsibleExitJson, info.value.args[0], calls


MAN = "dcb-pfc-app-show-iproute2-manpages.txt"


def dcb_answers(argv):
    if argv[1:3] == ["pfc", "show"]:
        return 0, sample(MAN, "# dcb pfc show dev eth0"), ""
    if argv[1:4] == ["-N", "app", "show"]:
        return 0, sample(MAN, "# dcb -N app show dev eth0 dscp-prio"), ""
    return 0, "", ""


def test_dcb_backend_sets_pfc_and_dscp(monkeypatch):
    ok, res, calls = run_module(monkeypatch, dcb_answers, {
        "interface": "eth0", "backend": "dcb", "dcb_path": "/sbin/dcb", "pfc_priorities": [4], "trust": "dscp",
        "dscp_prio": {"33": 4}, "_ansible_diff": True})
    assert ok and res["changed"]
    assert res["commands"][0][:6] == ["/sbin/dcb", "pfc", "set", "dev", "eth0", "prio-pfc"]
    assert res["commands"][0][6:] == ["0:off", "1:off", "2:off", "3:off", "4:on", "5:off", "6:off", "7:off"]
    assert res["commands"][1] == ["/sbin/dcb", "app", "replace", "dev", "eth0", "dscp-prio", "33:4"]
    assert res["diff"]["before"]["pfc_priorities"] == [6, 7]
    assert calls[-2:] == res["commands"]


def test_dcb_backend_check_mode(monkeypatch):
    ok, res, calls = run_module(monkeypatch, dcb_answers, {
        "interface": "eth0", "backend": "dcb", "dcb_path": "/sbin/dcb", "pfc_priorities": [6, 7],
        "_ansible_check_mode": True})
    assert ok and res["changed"] is False and res["commands"] == []
    assert all(c[2] == "show" for c in calls)


def test_dcb_unsupported_driver_suggests_mlnx_qos(monkeypatch):
    ok, res, _calls = run_module(monkeypatch, lambda argv: (1, "", "Attribute read: Operation not supported\n"), {
        "interface": "lo", "backend": "dcb", "dcb_path": "/sbin/dcb", "pfc_priorities": [4]})
    assert not ok and "Operation not supported" in res["msg"] and "backend=mlnx_qos" in res["msg"]


def test_mlnx_qos_backend(monkeypatch):
    text = sample("mlnx_qos-trust-pcp-pfc-off-cx-blog.txt", "root@centos12:/home/centos12# mlnx_qos -i ens6")
    ok, res, calls = run_module(monkeypatch, lambda argv: (0, text, ""), {
        "interface": "ens6", "backend": "mlnx_qos", "mlnx_qos_path": "/usr/bin/mlnx_qos", "pfc_priorities": [4],
        "trust": "dscp", "dscp_prio": {"33": 4}})
    assert ok and res["changed"]
    assert res["commands"] == [["/usr/bin/mlnx_qos", "-i", "ens6", "--pfc", "0,0,0,0,1,0,0,0", "--trust", "dscp"]]
    assert res["before"]["trust"] == "pcp" and res["after"]["trust"] == "dscp"
