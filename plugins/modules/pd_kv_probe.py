# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: pd_kv_probe
short_description: Check that prefill and decode nodes reach each other on the planned kv ports, before vLLM listens
version_added: 0.5.0
description:
  - Reads a prefill/decode plan (the output of P(ascendai.vllm.pd_plan#filter)) and works out, for this host, which
    kv ports it must accept connections on and which ports of other hosts it must reach, the way the plan's connector
    connects (Mooncake, LLMDataDist and NIXL - the decode side dials the prefill side; Mooncake layerwise - the
    prefill side dials the decode side). The sources are in C(plugins/module_utils/_pd_kv_reach.py).
  - O(mode=listen) holds every such port open on O(bind_address) (a plain TCP listener that accepts and closes) until
    each expected host has connected once or O(timeout) seconds have passed, then closes them. Run it with
    C(async) and C(poll=0) on every host, then O(mode=dial) on every host, then collect the listeners with
    C(ansible.builtin.async_status).
  - O(mode=dial) connects to every peer port, retrying until O(timeout) seconds have passed, and returns the ports
    it could not reach with a message that names both hosts, the port and what to check.
  - A port that is already listened on (the rank's own service after an earlier run) is left to its owner and
    reported in RV(in_use); the dialers then reach the service itself.
  - Changes nothing on the host; the listeners are gone when the module returns.
options:
  plan:
    description: The P/D plan, as P(ascendai.vllm.pd_plan#filter) returns it (its C(connector) and C(ranks) are read).
    type: dict
    required: true
  host:
    description: This host's name in the plan (the inventory name, C(inventory_hostname)).
    type: str
    required: true
  mode:
    description: V(listen) holds this host's kv ports open for the peers; V(dial) connects to the peers' kv ports.
    type: str
    choices: [listen, dial]
    required: true
  directions:
    description:
      - V(connector) checks the direction the connector connects in; V(both) also the reverse (every rank's kv ports
        from the other role's hosts).
    type: str
    choices: [connector, both]
    default: connector
  bind_address:
    description: Address the listeners bind (O(mode=listen)); the wildcard V(0.0.0.0) takes every NIC of the host.
    type: str
    default: 0.0.0.0
  timeout:
    description:
      - Seconds a listener waits for its peers, and a dialer keeps retrying a port that refuses or does not answer.
    type: int
    default: 10
extends_documentation_fragment:
  - ascendai.vllm.attributes
  - ascendai.vllm.attributes.info_module
notes:
  - The listener takes only connections; nothing is read or written on them.
  - A port in use by another process in O(mode=listen) is not an error here; the plan's own port check
    (P(ascendai.vllm.pd_plan#filter)) refuses overlaps between the layout's ports.
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: Hold this host's kv ports open for the peers (in the background)
  ascendai.vllm.pd_kv_probe:
    plan: "{{ pd_layout | ascendai.vllm.pd_plan }}"
    host: "{{ inventory_hostname }}"
    mode: listen
    timeout: 30
  async: 60
  poll: 0
  register: listener

- name: Dial the peers' kv ports
  ascendai.vllm.pd_kv_probe:
    plan: "{{ pd_layout | ascendai.vllm.pd_plan }}"
    host: "{{ inventory_hostname }}"
    mode: dial
  register: dialed

- name: Fail on an unreachable port
  ansible.builtin.assert:
    that: dialed.problems | length == 0
    fail_msg: "{{ dialed.problems | join('\n') }}"
"""

RETURN = r"""
npu_roce:
  description: Whether the plan's connector moves the KV over the NPU RoCE NICs (every connector but NixlConnector
    with C(kv_buffer_device) C(cpu)).
  returned: always
  type: bool
  sample: true
listener:
  description: The role whose ranks listen on their kv ports (C(prefill) or C(decode)).
  returned: always
  type: str
  sample: prefill
listen:
  description: The ports this host holds open (O(mode=listen)), each with C(port), C(what) and C(dialers) (the hosts
    expected to connect).
  returned: always
  type: list
  elements: dict
  sample: [{"port": 30000, "what": "the kv port of prefill rank 0", "dialers": ["d1"]}]
dial:
  description: The peer ports this host dials, each with C(peer), C(address), C(port), C(what).
  returned: always
  type: list
  elements: dict
accepted:
  description: Connections accepted per port (O(mode=listen)).
  returned: always
  type: dict
  sample: {"30000": 1}
in_use:
  description: Ports that another process already listens on (O(mode=listen)); not held by this module.
  returned: always
  type: list
  elements: int
reached:
  description: Peer ports reached (O(mode=dial)), as C(address:port).
  returned: always
  type: list
  elements: str
unreachable:
  description: Peer ports not reached (O(mode=dial)), each a C(dial) entry with C(error).
  returned: always
  type: list
  elements: dict
problems:
  description: One message per unreachable port, naming both hosts, the port and what to check.
  returned: always
  type: list
  elements: str
notes:
  description: What the listener left to another process.
  returned: always
  type: list
  elements: str
"""

import errno
import selectors
import socket
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ascendai.vllm.plugins.module_utils._pd_kv_reach import (
    PdReachError,
    listener_notes,
    probe_plan,
    refusal,
)


def listen(ports, bind_address, timeout):
    """Hold ``ports`` (probe_plan's listen entries) open until each got as many connections as it has dialers, or
    ``timeout`` seconds. Returns (accepted per port, ports in use, ports that failed to bind with the error)."""
    selector = selectors.DefaultSelector()
    accepted, in_use, failed, expected = {}, [], {}, {}
    family = socket.AF_INET6 if ":" in bind_address else socket.AF_INET
    try:
        for entry in ports:
            port = entry["port"]
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((bind_address, port))
                sock.listen(64)
            except OSError as exc:
                sock.close()
                if exc.errno == errno.EADDRINUSE:
                    in_use.append(port)
                else:
                    failed[port] = str(exc)
                continue
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, port)
            accepted[port] = 0
            expected[port] = len(entry["dialers"])
        deadline = time.monotonic() + max(timeout, 0)
        while accepted and any(accepted[p] < expected[p] for p in accepted):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for key, _events in selector.select(timeout=min(left, 1.0)):
                try:
                    conn, _peer = key.fileobj.accept()
                except OSError:
                    continue
                conn.close()
                accepted[key.data] += 1
    finally:
        for key in list(selector.get_map().values()):
            selector.unregister(key.fileobj)
            key.fileobj.close()
        selector.close()
    return accepted, in_use, failed


def dial_one(target, timeout):
    """Connect to ``target`` (address, port) until it answers or ``timeout`` seconds pass; '' or the last error."""
    deadline = time.monotonic() + max(timeout, 0)
    error = "timed out"
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((target["address"], target["port"]), timeout=max(min(left, 3.0), 0.2)):
                return ""
        except OSError as exc:
            error = exc.strerror or str(exc) or type(exc).__name__
        if deadline - time.monotonic() <= 0:
            return error
        time.sleep(min(0.5, max(deadline - time.monotonic(), 0)))


def dial(targets, timeout):
    """Dial every target at once; returns (reached, unreachable with errors)."""
    if not targets:
        return [], []
    with ThreadPoolExecutor(max_workers=min(64, len(targets))) as pool:
        errors = list(pool.map(lambda t: dial_one(t, timeout), targets))
    reached = [f"{t['address']}:{t['port']}" for t, e in zip(targets, errors) if not e]
    unreachable = [dict(t, error=e) for t, e in zip(targets, errors) if e]
    return reached, unreachable


def main():
    module = AnsibleModule(
        argument_spec={
            "plan": {"type": "dict", "required": True},
            "host": {"type": "str", "required": True},
            "mode": {"type": "str", "required": True, "choices": ["listen", "dial"]},
            "directions": {"type": "str", "default": "connector", "choices": ["connector", "both"]},
            "bind_address": {"type": "str", "default": "0.0.0.0"},
            "timeout": {"type": "int", "default": 10},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        todo = probe_plan(p["plan"], p["host"], p["directions"])
    except PdReachError as exc:
        module.fail_json(msg=f"pd_kv_probe: {exc}")
    result = dict(changed=False, npu_roce=todo["npu_roce"], listener=todo["listener"], listen=todo["listen"],
                  dial=todo["dial"], accepted={}, in_use=[], reached=[], unreachable=[], problems=[], notes=[])
    if p["mode"] == "listen":
        accepted, in_use, failed = listen(todo["listen"], p["bind_address"], p["timeout"])
        result.update(accepted={str(k): v for k, v in accepted.items()}, in_use=in_use)
        result["notes"] = listener_notes(p["host"], result)
        if failed:
            module.fail_json(msg="; ".join(f"{p['host']}: cannot listen on {p['bind_address']}:{port} ({error}); "
                                           "check bind_address" for port, error in sorted(failed.items())), **result)
    else:
        reached, unreachable = dial(todo["dial"], p["timeout"])
        result.update(reached=reached, unreachable=unreachable, problems=refusal(p["host"], unreachable))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
