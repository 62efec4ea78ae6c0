# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: hccn_ping_table
short_description: One text table of the NPU NIC ping results of all hosts
version_added: 0.1.0
description:
  - Turns the C(ping) results of P(ascendai.vllm.hccn#module) (one entry per peer address, with C(device),
    C(address), C(transmitted), C(received), C(loss_percent)) of every host into one table with the columns
    C(host), C(device), C(peer address), C(recv/sent), C(loss %), ordered by host, device and address.
  - Fails on an entry without C(device) or C(address), or with a C(received) that is not a number, naming
    the host and the entry.
options:
  _input:
    description:
      - A dict hostname -> list of ping entries (as the module returns them), or a list of entries that
        each carry a C(host) key.
    type: raw
    required: true
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: One table for the cross-node ping of every host
  ansible.builtin.debug:
    msg: "{{ (dict(ansible_play_hosts | zip(ansible_play_hosts | map('extract', hostvars, 'ping_rows')))
             | ascendai.vllm.hccn_ping_table).split('\n') }}"
  run_once: true
  # host      device  peer address  recv/sent  loss %
  # --------  ------  ------------  ---------  ------
  # node1     0       10.20.0.3     3/3        0.00
  # node2     0       10.20.0.2     0/3        100.00
"""

RETURN = r"""
_value:
  description: The table as text, header and separator line first; only those two lines when there are no entries.
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._hccn import format_ping_table


def _number(value, what, host, entry):
    if value is None:
        return None
    if isinstance(value, bool):
        raise AnsibleFilterError(f"hccn_ping_table: {what} {value!r} of host {host!r} entry {entry!r} is not a number")
    try:
        return float(value) if what == "loss_percent" else int(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"hccn_ping_table: {what} {value!r} of host {host!r} entry {entry!r} is not a "
                                 "number; pass the ping entries of ascendai.vllm.hccn unchanged") from None


def hccn_ping_table(data):
    if isinstance(data, dict):
        pairs = []
        for host, entries in data.items():
            if entries is None:
                entries = []
            if not isinstance(entries, (list, tuple)):
                raise AnsibleFilterError(f"hccn_ping_table: host {host!r} maps to {entries!r}, not a list of ping "
                                         "entries")
            pairs.extend((str(host), e) for e in entries)
    elif isinstance(data, (list, tuple)):
        pairs = []
        for e in data:
            if not isinstance(e, dict) or "host" not in e:
                raise AnsibleFilterError(f"hccn_ping_table: list entry {e!r} has no 'host'; give a dict hostname -> "
                                         "entries or entries with a host key")
            pairs.append((str(e["host"]), e))
    else:
        raise AnsibleFilterError(f"hccn_ping_table: input must be a dict hostname -> ping entries or a list of "
                                 f"entries, got {type(data).__name__}")
    rows = []
    for host, e in pairs:
        if not isinstance(e, dict) or "device" not in e or "address" not in e:
            raise AnsibleFilterError(f"hccn_ping_table: entry {e!r} of host {host!r} needs 'device' and 'address'")
        if not isinstance(e["address"], str):
            raise AnsibleFilterError(f"hccn_ping_table: address {e['address']!r} of host {host!r} entry {e!r:.200} is "
                                     "not an IPv4 address (a string); pass the ping entries of ascendai.vllm.hccn "
                                     "unchanged")
        rows.append({
            "host": host,
            "device": _number(e["device"], "device", host, e),
            "address": e["address"],
            "received": _number(e.get("received"), "received", host, e),
            "transmitted": _number(e.get("transmitted"), "transmitted", host, e),
            "loss_percent": _number(e.get("loss_percent"), "loss_percent", host, e),
        })

    def _order(row):
        return (row["host"], row["device"], tuple(int(p) if p.isdigit() else 0 for p in row["address"].split(".")))

    rows.sort(key=_order)
    for r in rows:
        for key in ("received", "transmitted"):
            if r[key] is None:
                r[key] = "?"
    return format_ping_table(rows)


class FilterModule:
    def filters(self):
        return {"hccn_ping_table": hccn_ping_table}
