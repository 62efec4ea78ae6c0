# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: npu_info
short_description: Gather Huawei Ascend NPU facts from npu-smi
version_added: 0.1.0
description:
  - Runs C(npu-smi info) and, per NPU, C(npu-smi info -t board -i N) and, per chip, C(npu-smi info -t health -i N -c C)
    (without C(-c) a 910B or Atlas A3 npu-smi prints the health only, without error codes or text).
  - Returns the number of NPUs, the chip name and family, HBM totals, processes, and the unhealthy NPUs with
    their error codes and error text.
  - Reads only; it runs in check mode too.
  - Understands the classic 910A/910B table (npu-smi 22.x-25.2), the wide 25.5+/26.x table, Atlas A3
    (two dies per NPU), the 310P and old 310 tables and the 950 table.
options:
  npu_smi_path:
    description:
      - Path of the C(npu-smi) executable.
      - When not set, C(npu-smi) is looked up in E(PATH), C(/usr/local/sbin) and C(/usr/local/bin).
    type: path
  detail:
    description:
      - Also run C(npu-smi info -t board -i N) for every NPU and C(npu-smi info -t health -i N -c C) for every chip.
      - Board detail gives the firmware version and PCI device id; health detail gives error codes and text.
    type: bool
    default: true
  set_fact:
    description:
      - Also return the result as the fact C(ascend_npu) (under C(ansible_facts)).
    type: bool
    default: false
    aliases: [register_fact]
extends_documentation_fragment:
  - ascendai.vllm.attributes
  - ascendai.vllm.attributes.info_module
  - ascendai.vllm.attributes.facts
notes:
  - C(npu-smi) needs root or membership in the C(HwHiAiUser) group; use O(ignore:become=true) otherwise.
  - The health gate fails closed. An NPU counts as healthy only when every health word printed for it (each chip's
    table row and C(-t health) detail) is exactly V(OK) and no non-zero error code is set. V(Warning), V(Alarm),
    V(Critical), V(UNKNOWN), an error code beside V(OK), or a detail query saying C(Invalid card id.) make it
    unhealthy; a word npu-smi never prints (another case, a translation, colour codes, an empty cell) or a code
    that is not hexadecimal makes it C(unknown) and refused, with a reason naming the word.
  - When npu-smi cannot initialise DCMI the module looks up the processes that hold C(/dev/davinci*) (read from
    C(/proc)). C(dcmi model initialized failed, because the device is used. ret is -8020) is C(kind=device_in_use),
    a C(-8005) while such holders exist is C(kind=device_held); both are fixed by stopping the holder, not by a
    reboot. A C(-8005) without holders is C(kind=dcmi_init).
seealso:
  - plugin: ascendai.vllm.parse_npu_smi
    plugin_type: filter
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: Gather NPU facts
  ascendai.vllm.npu_info:
    set_fact: true

- name: Stop when an NPU is unhealthy
  ansible.builtin.assert:
    that: ascend_npu.healthy
    fail_msg: "Unhealthy NPUs: {{ ascend_npu.unhealthy }}"

- name: Use npu-smi from a container mount, summary only
  ascendai.vllm.npu_info:
    npu_smi_path: /usr/local/bin/npu-smi
    detail: false
  register: npu
"""

RETURN = r"""
count:
  description: Number of NPUs (cards) listed by C(npu-smi info).
  returned: success
  type: int
  sample: 8
npu_ids:
  description: NPU ids as printed.
  returned: success
  type: list
  elements: int
  sample: [0, 1, 2, 3, 4, 5, 6, 7]
chip_count:
  description: Number of chips (dies) over all NPUs; an Atlas A3 NPU has two.
  returned: success
  type: int
  sample: 16
chip_name:
  description: Chip name printed most often in the table (C(910B3), C(Ascend910), C(310P3) ...).
  returned: success
  type: str
  sample: 910B3
chip_names:
  description: All distinct chip names.
  returned: success
  type: list
  elements: str
family:
  description: Chip family (C(910B), C(A3), C(910A), C(310P), C(310), C(950)); null when unknown.
  returned: success
  type: str
  sample: 910B
layout:
  description: Table layout (C(classic), C(wide), C(a3), C(310p), C(310), C(950)).
  returned: success
  type: str
  sample: classic
npu_smi_version:
  description: Version of the npu-smi tool.
  returned: success
  type: str
  sample: 23.0.6
driver_version:
  description: Driver package version printed after C(Version:) in the table header.
  returned: success
  type: str
  sample: 23.0.6
healthy:
  description: True when every NPU is known to be healthy (see the notes; the gate fails closed).
  returned: success
  type: bool
unhealthy:
  description:
    - NPUs not known to be healthy, with health (the worst word printed), C(verdict) (C(unhealthy) or C(unknown)),
      error codes, error text and the reason.
  returned: success
  type: list
  elements: dict
  sample:
    - npu_id: 0
      name: 910B3
      health: Alarm
      verdict: unhealthy
      error_codes: [A4025021, 8C03A000]
      error_information: ascend_monitor adda heart beat lost error
      reason: health Alarm; error code A4025021; error code 8C03A000
hbm_total_mb:
  description: Sum of HBM over all chips in MB; null when the chips have no HBM (310/310P).
  returned: success
  type: int
  sample: 524288
hbm_used_mb:
  description: Sum of used HBM in MB.
  returned: success
  type: int
hbm_free_mb:
  description: O(ignore:hbm_total_mb) minus O(ignore:hbm_used_mb).
  returned: success
  type: int
npus:
  description:
    - One entry per NPU as parsed from the table (C(npu_id), C(name), C(health), C(power_w), C(temp_c), C(chips))
      plus C(family), C(hbm_total_mb), C(hbm_used_mb), C(hbm_free_mb), C(board) and C(health_detail)
      (parsed C(-t board) output and the C(-t health -c C) output of its chips merged, worst health and every
      error code, each chip's under C(chips); null without O(detail)) and C(detail_error).
  returned: success
  type: list
  elements: dict
processes:
  description: Processes using NPUs (C(npu_id), C(chip_id), C(pid), C(name), C(memory_mb), C(container_pid)).
  returned: success
  type: list
  elements: dict
npu_smi_warnings:
  description:
    - Warning lines printed by npu-smi (for example that the driver package may be incompletely installed).
    - They are also shown as task warnings.
  returned: success
  type: list
  elements: str
driver_install_incomplete:
  description: npu-smi printed that the driver package may not be completely installed.
  returned: success
  type: bool
notes:
  description:
    - What the parser noticed in the C(npu-smi info) output (rows elided with C(...), no process table, a second
      table ignored). They are also shown as task warnings.
  returned: success
  type: list
  elements: str
npu_smi_path:
  description: The npu-smi executable that was run.
  returned: success
  type: str
  sample: /usr/local/sbin/npu-smi
ansible_facts:
  description: With O(set_fact=true), C(ascend_npu) holds all of the above.
  returned: when O(set_fact=true)
  type: dict
kind:
  description:
    - On failure, the kind of error (C(dcmi_init), C(device_in_use), C(device_held), C(invalid_card), C(not_found),
      C(permission), C(no_device), C(unknown), C(parse), C(inconsistent)).
    - C(parse) includes a table row cut before its closing C(|) and a row printed twice (chips would double);
      C(inconsistent) is a device row without its partner row, or an NPU that the process table names and the
      device table lacks (the NPU count would be wrong).
  returned: failure
  type: str
holders:
  description:
    - When npu-smi could not initialise DCMI, the processes that hold an NPU device open (C(pid), C(name),
      C(devices), C(container), the container id from the process's cgroup or null).
  returned: failure with kind dcmi_init, device_in_use or device_held
  type: list
  elements: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ascendai.vllm.plugins.module_utils._npu_smi import (
    NpuSmiParseError,
    classify_error,
    find_device_holders,
    merge_health,
    parse_board,
    parse_health,
    parse_info,
    summarize,
)

SEARCH_DIRS = ["/usr/local/sbin", "/usr/local/bin"]


def find_npu_smi(module):
    path = module.params["npu_smi_path"]
    if path:
        if not os.path.exists(path):
            _kind, msg = classify_error("", "", 127)
            module.fail_json(msg=f"npu_smi_path={path} does not exist. {msg}", kind="not_found")
        if not os.access(path, os.X_OK):
            _kind, msg = classify_error("", "", 126)
            module.fail_json(msg=f"npu_smi_path={path} is not executable by this user. {msg}", kind="permission")
        return path
    path = module.get_bin_path("npu-smi", required=False, opt_dirs=SEARCH_DIRS)
    if not path:
        __kind, msg = classify_error("", "", 127)
        module.fail_json(msg="npu-smi not found in PATH, {}. {}".format(", ".join(SEARCH_DIRS), msg), kind="not_found")
    return path


def run_npu_smi(module, argv):
    rc, out, err = module.run_command(argv)
    kind, msg = classify_error(out, err, rc)
    return rc, out, err, kind, msg


def fail_run(module, argv, rc, out, err, kind, msg):
    extra = {}
    if kind in ("dcmi_init", "device_in_use"):
        # who holds the NPU devices tells a held device (stop it) from a pending reboot (-8005 is generic)
        extra["holders"] = find_device_holders()
        kind, msg = classify_error(out, err, rc, holders=extra["holders"])
    module.fail_json(msg="{}: {}".format(" ".join(argv), msg), kind=kind, rc=rc, stdout=out, stderr=err, cmd=argv,
                     **extra)


def main():
    module = AnsibleModule(
        argument_spec={
            "npu_smi_path": {"type": "path"},
            "detail": {"type": "bool", "default": True},
            "set_fact": {"type": "bool", "default": False, "aliases": ["register_fact"]},
        },
        supports_check_mode=True,
    )
    npu_smi = find_npu_smi(module)

    argv = [npu_smi, "info"]
    rc, out, err, kind, msg = run_npu_smi(module, argv)
    if kind != "ok":
        fail_run(module, argv, rc, out, err, kind, msg)
    try:
        info = parse_info(out)
    except NpuSmiParseError as exc:
        module.fail_json(
            msg="{}: could not read the output: {}".format(" ".join(argv), exc),
            kind="parse", rc=rc, stdout=out, stderr=err,
        )

    if info["inconsistent"]:
        # a lost or unpaired row: the NPU count, chip count and HBM totals are not those of the node
        module.fail_json(
            msg="{}: the table disagrees with itself, so its NPU count ({}) cannot be trusted: {}. Run it again and "
                "compare with 'npu-smi info -l' (Total Count).".format(
                    " ".join(argv), len(info["npus"]), "; ".join(info["inconsistent"])),
            kind="inconsistent", rc=rc, stdout=out, stderr=err, notes=info["notes"],
        )

    boards, healths, detail_errors = {}, {}, {}
    if module.params["detail"]:
        for npu in info["npus"]:
            npu_id = npu["npu_id"]
            # board: one query per NPU; health: one per chip, with -c (without it a 910B/A3 npu-smi prints the
            # health only, no error code or text: npu_card_info.c show_ascend_card_health)
            queries = [("board", parse_board, ["-t", "board", "-i", str(npu_id)])]
            for index, chip in enumerate(npu.get("chips") or [{}]):
                chip_id = chip.get("chip_id") if chip.get("chip_id") is not None else index
                queries.append(("health", parse_health, ["-t", "health", "-i", str(npu_id), "-c", str(chip_id)]))
            chip_healths = []
            for what, parser, args in queries:
                argv = [npu_smi, "info"] + args
                rc, out, err, kind, msg = run_npu_smi(module, argv)
                if kind == "invalid_card":
                    # the NPU is in the summary but its detail query says it does not exist: a vanished card
                    detail_errors.setdefault(npu_id, "{}: {}".format(" ".join(argv[1:]), msg))
                    continue
                if kind != "ok":
                    fail_run(module, argv, rc, out, err, kind, msg)
                try:
                    parsed = parser(out)
                except NpuSmiParseError as exc:
                    module.fail_json(
                        msg="{}: could not read the output: {}".format(" ".join(argv), exc),
                        kind="parse", rc=rc, stdout=out, stderr=err,
                    )
                if what == "board":
                    boards[npu_id] = parsed
                else:
                    chip_healths.append(dict(parsed, chip_id=int(args[-1])))
            if chip_healths:
                healths[npu_id] = merge_health(chip_healths)

    facts = summarize(info, boards, healths, detail_errors)
    for warning in facts["warnings"]:
        module.warn(f"npu-smi: {warning}")
    for note in facts["notes"]:
        module.warn(f"npu-smi info: {note}")
    for error in detail_errors.values():
        module.warn(error)
    # ``warnings`` is a reserved key of a module's result: return them as npu_smi_warnings.
    facts["npu_smi_warnings"] = facts.pop("warnings")
    result = dict(changed=False, npu_smi_path=npu_smi, **facts)
    if module.params["set_fact"]:
        result["ansible_facts"] = {"ascend_npu": dict(facts, npu_smi_path=npu_smi)}
    module.exit_json(**result)


if __name__ == "__main__":
    main()
