"""Host NIC PFC: dcb and mlnx_qos parsers on verbatim samples, change planning."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.ascendai.vllm.plugins.module_utils import _host_pfc as host_pfc
from ansible_collections.ascendai.vllm.plugins.module_utils._host_pfc import HostPfcError

FIX = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "host_pfc")


def sample_blocks(name, prefixes):
    with open(os.path.join(FIX, name), encoding="utf-8") as fh:
        lines = fh.read().splitlines()[1:]
    out, cur = [], None
    for line in lines:
        if line.startswith(prefixes):
            cur = [line, []]
            out.append(cur)
        elif cur is not None:
            cur[1].append(line)
    return [(cmd, "\n".join(body).strip() + "\n") for cmd, body in out]


MAN = sample_blocks("dcb-pfc-app-show-iproute2-manpages.txt", ("# dcb",))
MLNX_DSCP = sample_blocks("mlnx_qos-trust-dscp-pfc3-cx5-att-netarbiter.txt", ("+ mlnx_qos",))[0][1]
MLNX_PCP = sample_blocks("mlnx_qos-trust-pcp-pfc-off-cx-blog.txt", ("root@",))[0][1]


def test_parse_dcb_pfc_manpage():
    assert host_pfc.parse_dcb_pfc(MAN[0][1]) == {"pfc_cap": 8, "macsec_bypass": False, "delay": 4096,
                                                 "pfc": [0, 0, 0, 0, 0, 0, 1, 1]}


def test_parse_dcb_app_symbolic_and_numeric_agree():
    symbolic = host_pfc.parse_dcb_app_dscp(MAN[1][1])
    numeric = host_pfc.parse_dcb_app_dscp(MAN[2][1])
    assert symbolic == numeric == {0: [0], 24: [2, 3], 48: [6]}
    assert host_pfc.parse_dcb_app_dscp(MAN[3][1]) == {0: [0], 24: [4], 48: [6]}


def test_parse_mlnx_qos_dscp_trust():
    st_ = host_pfc.parse_mlnx_qos(MLNX_DSCP)
    assert st_["trust"] == "dscp" and st_["dcbx_mode"] == "OS controlled"
    assert st_["pfc"] == [0, 0, 0, 1, 0, 0, 0, 0]
    assert st_["dscp2prio"][33] == 4 and st_["dscp2prio"][26] == 3 and len(st_["dscp2prio"]) == 64


def test_parse_mlnx_qos_pcp_trust_with_buffer_row():
    st_ = host_pfc.parse_mlnx_qos(MLNX_PCP)
    assert st_["trust"] == "pcp" and st_["pfc"] == [0] * 8 and st_["dscp2prio"] == {}


@pytest.mark.parametrize("parser,text", [
    (host_pfc.parse_dcb_pfc, "pfc-cap 8 macsec-bypass off delay 0\n"),
    (host_pfc.parse_dcb_pfc, "prio-pfc 0:off 1:off\n"),
    (host_pfc.parse_dcb_app_dscp, "dscp-prio FOO:3\n"),
    (host_pfc.parse_mlnx_qos, "Priority trust state: dscp\n"),
])
def test_parsers_reject(parser, text):
    with pytest.raises(HostPfcError):
        parser(text)


@given(st.lists(st.booleans(), min_size=8, max_size=8))
def test_dcb_pfc_round_trip(flags):
    line = "prio-pfc " + " ".join(f"{i}:{'on' if f else 'off'}" for i, f in enumerate(flags))
    assert host_pfc.parse_dcb_pfc(line + "\n")["pfc"] == [int(f) for f in flags]


@given(st.text(max_size=300))
def test_parsers_only_raise_their_error(text):
    for parser in (host_pfc.parse_dcb_pfc, host_pfc.parse_dcb_app_dscp, host_pfc.parse_mlnx_qos):
        try:
            parser(text)
        except HostPfcError:
            pass


def test_plan_dcb_from_manpage_state():
    pfc = host_pfc.parse_dcb_pfc(MAN[0][1])
    app = host_pfc.parse_dcb_app_dscp(MAN[2][1])
    cmds, before, after = host_pfc.plan_dcb("eth0", pfc, app, {"pfc_priorities": [4], "trust": "dscp",
                                                               "dscp_prio": {33: 4, "CS3": 2}})
    assert cmds == [
        ["dcb", "pfc", "set", "dev", "eth0", "prio-pfc", "0:off", "1:off", "2:off", "3:off", "4:on", "5:off",
         "6:off", "7:off"],
        ["dcb", "app", "replace", "dev", "eth0", "dscp-prio", "24:2", "33:4"],
    ]
    assert before == {"pfc_priorities": [6, 7], "dscp_prio": {24: [2, 3], 33: None}}
    assert after == {"pfc_priorities": [4], "dscp_prio": {24: [2], 33: [4]}}
    # idempotent once applied
    pfc2 = host_pfc.parse_dcb_pfc("prio-pfc 0:off 1:off 2:off 3:off 4:on 5:off 6:off 7:off\n")
    app2 = host_pfc.parse_dcb_app_dscp("dscp-prio 0:0 CS3:2 33:4 CS6:6\n")
    assert host_pfc.plan_dcb("eth0", pfc2, app2, {"pfc_priorities": [4], "dscp_prio": {33: 4, 24: 2}})[0] == []


def test_plan_dcb_rejects_pcp_and_bare_dscp_trust():
    pfc = host_pfc.parse_dcb_pfc(MAN[0][1])
    with pytest.raises(HostPfcError, match="backend=mlnx_qos"):
        host_pfc.plan_dcb("eth0", pfc, {}, {"trust": "pcp"})
    with pytest.raises(HostPfcError, match="needs dscp_prio"):
        host_pfc.plan_dcb("eth0", pfc, {}, {"trust": "dscp"})


def test_plan_mlnx_qos_from_samples():
    cur = host_pfc.parse_mlnx_qos(MLNX_PCP)
    cmds, before, after = host_pfc.plan_mlnx_qos("ens6", cur, {"pfc_priorities": [4], "trust": "dscp",
                                                               "dscp_prio": {33: 4}})
    # pcp trust, no table printed: DSCP 33 defaults to priority 4 -> no --dscp2prio needed
    assert cmds == [["mlnx_qos", "-i", "ens6", "--pfc", "0,0,0,0,1,0,0,0", "--trust", "dscp"]]
    assert before == {"pfc_priorities": [], "trust": "pcp", "dscp_prio": {33: None}}
    cur = host_pfc.parse_mlnx_qos(MLNX_DSCP)
    wanted = {"pfc_priorities": [3], "trust": "dscp", "dscp_prio": {26: 3, 33: 5}}
    cmds, _before, _after = host_pfc.plan_mlnx_qos("eth4", cur, wanted)
    assert cmds == [["mlnx_qos", "-i", "eth4", "--dscp2prio", "set,33,5"]]
