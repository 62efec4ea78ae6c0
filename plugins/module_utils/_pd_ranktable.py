# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The LLMDataDist ranktable (``DISAGGREGATED_PREFILL_RANK_TABLE_PATH``) from the collection's hccn facts.

vllm-ascend v0.11.0rc1 to v0.11.0 build it with ``examples/disaggregated_prefill_v1/gen_ranktable.sh``, which runs
``gen_ranktable.py`` once per node under torchrun (git blob 98ce9f5c97a9 at each of those tags; v0.12.0rc1 removed
both with the LLMDataDist connector). G = https://github.com/vllm-project/vllm-ascend/blob/v0.11.0/examples/
disaggregated_prefill_v1/gen_ranktable.py, S = the ``.sh`` next to it; :func:`build_ranktable` returns the same
mapping, key for key and in the same order, without running anything on the nodes:

* nodes in ``--ips`` order: S#L45-L58 makes the node's index in ``--ips`` its torchrun ``--node_rank`` with one
  process per node (S#L81-L87), and ``all_gather_object`` returns the lists in rank order (G#L109-L115);
* per node, every device ``card * chips_per_card + chip`` in order (G#L65-L72), each
  ``{"server_id": <the node's --ips address>, "device_id": str(id), "device_ip": str(ip)}`` (G#L97-L101), the
  address from ``hccn_tool -i <id> -ip -g`` ``ipaddr`` (G#L93-L95; A2) or ``-vnic -g`` (G#L83-L85; A3, with
  ``super_pod_id`` and ``super_device_id`` added from ``npu-smi info -t spod-info``, G#L86-L91, G#L102-L106);
* then ``cluster_id`` ``"1"``, ``"2"``, ... over all devices of all nodes (G#L116-L119);
* ``{"version": "1.2", "server_count": str(WORLD_SIZE), "prefill_device_list": first prefill_device_cnt,
  "decode_device_list": the next decode_device_cnt, "status": "completed"}`` (G#L122-L134), ``WORLD_SIZE`` being
  torchrun's, the number of nodes (G#L41-L43), and the file ``json.dump(..., indent=4)`` (G#L138-L139);
* refused like G#L120-L121: more prefill plus decode devices than the nodes have.

``--local-device-ids`` is not modelled: G#L66 keeps its ids as strings and G#L80 then computes ``"0" % chips``,
which raises TypeError in Python, so the script works only with every device of the node.
"""

from __future__ import annotations

import json

from ansible_collections.ascendai.vllm.plugins.module_utils import _hccn as hccn

SOCS = ("A2", "A3")
MAX_NODES = 4096
MAX_DEVICES = 64


class RanktableError(ValueError):
    """Facts the ranktable cannot be built from; the message names the input and the fix."""


def _device_ip(entry, where):
    """The device's address: ``address`` (hccn_plan's and the hccn module's ``ip.address``) or the raw
    ``hccn_tool -ip -g`` text under ``ip_g``, parsed by the collection's parser."""
    if "ip_g" in entry:
        try:
            address = hccn.parse_ip(entry["ip_g"])["address"]
        except hccn.HccnError as exc:
            raise RanktableError(f"{where}.ip_g: {exc}") from None
    else:
        address = entry.get("address")
        if isinstance(entry.get("ip"), dict):
            address = entry["ip"].get("address")
    if not isinstance(address, str) or not address:
        raise RanktableError(f"{where}: no device address; give address (hccn_plan's) or ip_g (the output of "
                             "hccn_tool -i N -ip -g); set the NPU NIC addresses first (role ascendai.vllm.roce)")
    try:
        return str(hccn._ipv4(address, f"{where}.address"))
    except hccn.HccnError as exc:
        raise RanktableError(str(exc)) from None


def build_ranktable(nodes, prefill_device_cnt, decode_device_cnt, soc="A2"):
    """The ranktable mapping (module doc). ``nodes``: the ``--ips`` in order, each ``{"server_id": address,
    "devices": [{"device": id, "address": ip} | {"device": id, "ip_g": text}, ...]}`` with, on A3, each device's
    ``super_pod_id`` and ``super_device_id``."""
    if soc not in SOCS:
        raise RanktableError(f"soc={soc!r}: use A2 (hccn_tool -ip) or A3 (hccn_tool -vnic, super pod ids)")
    if not isinstance(nodes, list) or not nodes or len(nodes) > MAX_NODES:
        raise RanktableError("nodes: give the list of nodes in gen_ranktable.sh's --ips order, each with server_id "
                             "and devices")
    for name, value in (("prefill_device_cnt", prefill_device_cnt), ("decode_device_cnt", decode_device_cnt)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise RanktableError(f"{name}={value!r}: give a number of devices (0 or more)")
    devices = []
    for index, node in enumerate(nodes):
        where = f"nodes[{index}]"
        if not isinstance(node, dict) or not isinstance(node.get("server_id"), str) or not node["server_id"]:
            raise RanktableError(f"{where}: give a mapping with server_id (the node's --ips address) and devices")
        entries = node.get("devices")
        if not isinstance(entries, list) or not entries or len(entries) > MAX_DEVICES:
            raise RanktableError(f"{where}.devices: give the node's NPUs, each with device and address")
        by_id = {}
        for number, entry in enumerate(entries):
            spot = f"{where}.devices[{number}]"
            if not isinstance(entry, dict):
                raise RanktableError(f"{spot}: give a mapping with device and address")
            device = entry.get("device")
            if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < MAX_DEVICES:
                raise RanktableError(f"{spot}.device={device!r}: give the NPU's id (hccn_tool -i N)")
            if device in by_id:
                raise RanktableError(f"{spot}: device {device} is listed twice on {node['server_id']}")
            by_id[device] = entry
        if sorted(by_id) != list(range(len(by_id))):
            raise RanktableError(f"{where}.devices: ids {sorted(by_id)} are not 0 to {len(by_id) - 1}; "
                                 "gen_ranktable.py takes every device of the node, numbered from 0")
        for device in sorted(by_id):
            entry = by_id[device]
            spot = f"{where}.devices[device {device}]"
            info = {"server_id": node["server_id"], "device_id": str(device),
                    "device_ip": _device_ip(entry, spot)}
            if soc == "A3":
                for key in ("super_pod_id", "super_device_id"):
                    if entry.get(key) in (None, ""):
                        raise RanktableError(f"{spot}: A3 needs {key} (npu-smi info -t spod-info)")
                info["super_pod_id"] = str(entry["super_pod_id"])
                info["super_device_id"] = str(entry["super_device_id"])
            devices.append(info)
    for number, info in enumerate(devices, start=1):
        info["cluster_id"] = str(number)
    if prefill_device_cnt + decode_device_cnt > len(devices):
        raise RanktableError(f"prefill_device_cnt + decode_device_cnt = {prefill_device_cnt} + {decode_device_cnt} "
                             f"is more than the {len(devices)} devices of the nodes; lower them or add nodes")
    return {
        "version": "1.2",
        "server_count": str(len(nodes)),
        "prefill_device_list": devices[:prefill_device_cnt],
        "decode_device_list": devices[prefill_device_cnt:prefill_device_cnt + decode_device_cnt],
        "status": "completed",
    }


def ranktable_text(ranktable):
    """The file as gen_ranktable.py writes it (``json.dump(ranktable, f, indent=4)``, no trailing newline)."""
    return json.dumps(ranktable, indent=4)
