"""hccn_ping_table: the cross-node ping results of all hosts as one table."""

from __future__ import annotations

import os

import re

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.ascendai.vllm.plugins.filter.hccn_ping_table import hccn_ping_table
from ansible_collections.ascendai.vllm.plugins.module_utils._hccn import parse_ping

PING = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "hccn_tool",
                    "hccn_tool-ping-g-910b1-arthurchiao-blog.txt")


def real_ping_entry():
    """The module's ping entry for the captured `hccn_tool -i 3 -ping -g address 29.1.137.205`."""
    with open(PING, encoding="utf-8") as fh:
        text = "\n".join(fh.read().splitlines()[2:]) + "\n"  # source header and the command line
    return parse_ping(text)


def cells(table):
    return [line.split() for line in table.splitlines()[2:]]


def test_real_capture_and_a_lost_peer_in_one_table():
    ok = real_ping_entry()
    assert (ok["device"], ok["received"], ok["transmitted"]) == (3, 3, 3)
    lost = {"device": 3, "address": "29.1.170.143", "transmitted": 3, "received": 0, "loss_percent": 100.0}
    table = hccn_ping_table({"node2": [lost], "node1": [ok]})
    lines = table.splitlines()
    assert lines[0].split() == ["host", "device", "peer", "address", "recv/sent", "loss", "%"]
    assert set(lines[1]) == {"-", " "}
    # sorted by host: node1's captured reply first, then node2's loss
    assert cells(table) == [["node1", "3", "29.1.137.205", "3/3", "0.00"],
                            ["node2", "3", "29.1.170.143", "0/3", "100.00"]]


def test_list_input_sorted_by_host_device_and_numeric_address():
    rows = [
        {"host": "b", "device": 1, "address": "10.0.1.10", "transmitted": 3, "received": 3, "loss_percent": 0.0},
        {"host": "b", "device": 1, "address": "10.0.1.9", "transmitted": 3, "received": 2, "loss_percent": 33.33},
        {"host": "a", "device": 10, "address": "10.0.2.2", "transmitted": 3, "received": 3, "loss_percent": 0},
        {"host": "a", "device": 2, "address": "10.0.2.3", "transmitted": None, "received": None},
    ]
    assert cells(hccn_ping_table(rows)) == [["a", "2", "10.0.2.3", "?/?"],
                                            ["a", "10", "10.0.2.2", "3/3", "0.00"],
                                            ["b", "1", "10.0.1.9", "2/3", "33.33"],
                                            ["b", "1", "10.0.1.10", "3/3", "0.00"]]


def test_no_entries_gives_header_only():
    assert len(hccn_ping_table({"node1": [], "node2": None}).splitlines()) == 2


@pytest.mark.parametrize("data,message", [
    ("node1", "input must be a dict hostname -> ping entries or a list"),
    ({"node1": "10.0.0.1"}, "host 'node1' maps to '10.0.0.1', not a list"),
    ({"node1": [{"address": "10.0.0.1"}]}, "of host 'node1' needs 'device' and 'address'"),
    ([{"device": 0, "address": "10.0.0.1"}], "has no 'host'"),
    ({"node1": [{"device": 0, "address": "1.2.3.4", "received": "three"}]}, "received 'three' of host 'node1'"),
    ({"node1": [{"device": True, "address": "1.2.3.4"}]}, "device True of host 'node1'"),
])
def test_rejections_name_the_host_and_entry(data, message):
    with pytest.raises(AnsibleFilterError, match=__import__("re").escape(message)):
        hccn_ping_table(data)


@given(st.dictionaries(
    st.text(alphabet="abcdefgh-0123456789", min_size=1, max_size=12),
    st.lists(st.fixed_dictionaries({
        "device": st.integers(0, 15),
        "address": st.ip_addresses(v=4).map(str),
        "transmitted": st.integers(1, 10),
        "received": st.integers(0, 10),
        "loss_percent": st.floats(0, 100, allow_nan=False),
    }), max_size=6),
    max_size=5))
def test_one_row_per_entry_with_its_counts(data):
    table = hccn_ping_table(data)
    rows = cells(table)
    assert len(rows) == sum(len(v) for v in data.values())
    expected = sorted((h, str(e["device"]), e["address"], f"{e['received']}/{e['transmitted']}")
                      for h, entries in data.items() for e in entries)
    assert sorted(tuple(r[:4]) for r in rows) == expected
    widths = {len(line.rstrip()) <= len(table.splitlines()[1]) for line in table.splitlines()}
    assert widths == {True}


@pytest.mark.parametrize("address", [None, 10, ["10.0.0.1"]])
def test_an_address_that_is_not_text_is_named(address):
    # str() would have printed None or a list as the peer address
    data = {"node1": [{"device": 0, "address": address, "received": 3, "transmitted": 3}]}
    with pytest.raises(AnsibleFilterError, match=rf"^hccn_ping_table: address {re.escape(repr(address))} of host "
                                                 r"'node1' entry .* is not an IPv4 address \(a string\); pass the ping "
                                                 r"entries of ascendai\.vllm\.hccn unchanged$"):
        hccn_ping_table(data)
