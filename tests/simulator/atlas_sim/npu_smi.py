"""Simulated ``npu-smi``: prints the node state in the formats of real captures.

Layouts (state ``layout``): ``classic`` (npu-smi 22.x-25.2, 98 columns), ``a3`` (Atlas A3, two dies per NPU,
``Chip  Phy-ID``), ``wide`` (npu-smi 25.5+/26.x, 114 columns, ``Process id in container``).
Column positions were taken from the real captures in tests/unit/fixtures/npu-smi (each file's first line names
its public source; the unit tests re-render them byte for byte). The ``-t`` outputs, the health query with and
without ``-c`` and the DCMI failures follow npu-smi's source (https://github.com/verylucky01/driver/blob/e29d066/
src/custom/dev_prod/user/npucli/src/), as the conformance table in tests/simulator/README.md lists.
"""

import sys

from atlas_sim import SIMULATED_NOTE, state as st

# npu_smi.c handle_dcmi_initialization: any dcmi_init failure but -8020 prints the first text, -8020
# (DCMI_ERR_CODE_RESOURCE_OCCUPIED, dcmi_interface_api.h) the second; main() then exit(ret), i.e. ret & 0xff.
DCMI_ERR_CODE_INNER_ERR = -8005
DCMI_ERR_CODE_RESOURCE_OCCUPIED = -8020
DCMI_FAIL = "dcmi module initialize failed. ret is %d"
DCMI_USED = "dcmi model initialized failed, because the device is used. ret is %d"
USAGE = "Usage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]"
DRIVER_WARNING = ("[WARNING]The driver package may not be completely installed, which may cause function abnormal. "
                  "Please reinstall it.")

INFO_HELP = USAGE + """

Commands:
       watch          Show all device's status in scrolling format
       proc           Show device's matrix process status in scrolling format
       -h, --help     Show this help text and exit
       -m             Show all device's mapping information
       -l             Show all device's topology information
       -t type        Show information for type
                      type: board, flash, memory, usages, sensors, temp, power, volt, mac-addr,
                            common, health, product, ecc, ip, sys-time, i2c_check, work-mode,
                            ecc-enable, p2p-enable, ssh-enable, license, customized-info,
                            device-share, nve-level, aicpu-config, pcie-err, mcu-monitor,
                            err-count, boot-area, vnpu-mode, info-vnpu, vnpu-svm, cpu-num-cfg,
                            first-power-on-date, proc-mem, phyid-remap, vnpu-cfg-recover, key-manage,
                            template-info, pkcs-enable, p2p-mem-cfg, pwm-mode, pwm-duty-ratio,
                            boot-select, topo.

Options:
       -i %d          Card ID
       -c %d          Chip ID
       -p %d          Chip Physical ID
"""
TOP_HELP = """Usage: npu-smi [OPTIONS...] [COMMAND] [OPTIONS...]

Commands:
       info           Show device information
       -h, --help     Show this help text and exit
"""

# --- the device table -----------------------------------------------------------------------------------

_CLASSIC = {
    "rule": "+" + "-" * 96 + "+",
    "cols": "+---------------------------+---------------+----------------------------------------------------+",
    "eq": "+===========================+===============+====================================================+",
    "hdr1": "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",
    "hdr2": "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
    "hdr2_a3": "| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
    "proc_hdr": "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |",
    "version": "| npu-smi {tool:<24} Version: {ver:<53}|",
    "row1": "| {npu:<5} {name:<19} | {health:<13} | {power:<11} {temp:<17} {hpu:<5}/ {hpt:<13} |",
    "row2": "| {chip:<5} {phy:<19} | {bus:<13} | {aicore:<11} {mu:<5}/ {mt:<10} {hu:<5}/ {ht:<13} |",
    "proc": "| {npu:<7} {chip:<17} | {pid:<13} | {name:<24} | {mem:<23} |",
    "width": 98,
}
_WIDE = {
    "rule": "+" + "-" * 114 + "+",
    "cols": "+---------------------------+---------------+" + "-" * 70 + "+",
    "eq": "+===========================+===============+" + "=" * 70 + "+",
    "hdr1": "| NPU   Name                | Health        | Power(W)             Temp(C)                 "
            "Hugepages-Usage(page)   |",
    "hdr2": "| Chip                      | Bus-Id        | AICore(%)            Memory-Usage(MB)        "
            "HBM-Usage(MB)           |",
    "hdr2_a3": "| Chip  Phy-ID              | Bus-Id        | AICore(%)            Memory-Usage(MB)        "
               "HBM-Usage(MB)           |",
    "proc_hdr": "| NPU     Chip              | Process id    | Process name       | Process memory(MB)    "
                "| Process id in container |",
    "version": "| npu-smi {tool:<35} Version: {ver:<60}|",
    "row1": "| {npu:<5} {name:<19} | {health:<13} | {power:<20} {temp:<23} {hpu:<5}/ {hpt:<16} |",
    "row2": "| {chip:<5} {phy:<19} | {bus:<13} | {aicore:<20} {mu:<5}/ {mt:<16} {hu:<5}/ {ht:<16} |",
    "proc": "| {npu:<7} {chip:<17} | {pid:<13} | {name:<18} | {mem:<21} | {cpid:<23} |",
    "width": 116,
}


def _fmt(layout):
    return _WIDE if layout == "wide" else _CLASSIC


def present_cards(state):
    return [card for card in state["npus"] if card.get("present", True)]


def _power(chip):
    if chip.get("power") is None:
        return "-"
    return "%.1f" % chip["power"]


def render_info(state):
    """``npu-smi info``."""
    layout = state.get("layout", "classic")
    f = _fmt(layout)
    version = state["running"]["driver"] or ""
    out = [f["rule"], f["version"].format(tool=version, ver=version), f["cols"], f["hdr1"],
           f["hdr2_a3"] if layout == "a3" else f["hdr2"], f["eq"]]
    cards = present_cards(state)
    for card in cards:
        for index, chip in enumerate(card["chips"]):
            out.append(f["row1"].format(npu=card["id"], name=chip["name"], health=chip["health"],
                                        power=_power(chip), temp=chip["temp"], hpu=chip["hugepages_used"],
                                        hpt=chip["hugepages_total"]))
            out.append(f["row2"].format(chip=chip["chip_id"], phy=chip["phy_id"] if layout == "a3" else "",
                                        bus=chip["bus_id"], aicore=chip["aicore_usage"], mu=chip["ddr_used"],
                                        mt=chip["ddr_total"], hu=chip["hbm_used"], ht=chip["hbm_total"]))
            if index != len(card["chips"]) - 1:
                out.append(f["rule"])
        out.append(f["eq"])
    out.append(f["cols"])
    out.append(f["proc_hdr"])
    out.append(f["eq"])
    inner = f["width"] - 3
    for card in cards:
        rows = []
        for chip in card["chips"]:
            for proc in chip["processes"]:
                rows.append(f["proc"].format(npu=card["id"], chip=chip["chip_id"], pid=proc["pid"],
                                             name=proc.get("name", ""), mem=proc["memory"],
                                             cpid=proc.get("container_pid", "-")))
        if not rows:
            rows.append("| " + ("No running processes found in NPU %d" % card["id"]).ljust(inner) + "|")
        out.extend(rows)
        out.append(f["eq"])
    return "\n".join(out) + "\n"


def _kv(key, value):
    return "\t%-31s: %s" % (key, value)


def render_mapping(state):
    """``npu-smi info -m``: one line per chip plus the MCU of each card (logic id ``-``)."""
    a3 = state.get("layout") == "a3"
    cols = ["NPU ID", "Chip ID", "Chip Logic ID"] + (["Chip Phy-ID"] if a3 else []) + ["Chip Name"]
    out = ["\t" + "".join("%-31s" % c for c in cols[:-1]) + cols[-1]]
    for card in present_cards(state):
        for chip in card["chips"]:
            name = chip["name"] if chip["name"].startswith("Ascend") else "Ascend " + chip["name"]
            row = [card["id"], chip["chip_id"], chip["logic_id"]] + ([chip["phy_id"]] if a3 else []) + [name]
            out.append("\t" + "".join("%-31s" % c for c in row[:-1]) + str(row[-1]))
        mcu = [card["id"], len(card["chips"]), "-"] + (["-"] if a3 else []) + ["Mcu"]
        out.append("\t" + "".join("%-31s" % c for c in mcu[:-1]) + mcu[-1])
    return "\n".join(out) + "\n"


def render_list(state):
    cards = present_cards(state)
    out = ["\tTotal Count                    : %d" % len(cards)]
    for card in cards:
        out += ["", _kv("NPU ID", card["id"]), _kv("Chip Count", len(card["chips"]))]
    return "\n".join(out) + "\n\n"  # npu_info_print.c print_all_info: "%-30s : %d\n\n" after each count


def _fw_compatible(state):
    from atlas_sim import versions
    drv, fw = state["running"].get("driver"), state["running"].get("firmware")
    info = _read_kv(st.path("/usr/local/Ascend/driver/version.info"))
    rng = info.get("compatible_version_fw")
    if not (drv and fw and rng):
        return "OK"
    return "OK" if versions.version_in_ranges(fw, rng) else "NOK"


def _read_kv(filename):
    out = {}
    try:
        with open(filename) as handle:
            for line in handle:
                if "=" in line:
                    k, v = line.rstrip("\n").split("=", 1)
                    out[k.strip()] = v.strip()
    except OSError:
        pass
    return out


def render_board(state, card, chip=None):
    b = card["board"]
    fw = state["running"]["firmware"] or "NA"
    if chip is None:
        rows = [("NPU ID", card["id"]), ("Software Version", state["running"]["driver"]), ("Firmware Version", fw),
                ("Compatibility", _fw_compatible(state)), ("Board ID", b["board_id"]), ("PCB ID", b["pcb_id"]),
                ("BOM ID", b["bom_id"]), ("PCIe Bus Info", card["chips"][0]["bus_id"]), ("Slot ID", b["slot_id"]),
                ("Class ID", b["class_id"]), ("PCI Vendor ID", b["vendor_id"]), ("PCI Device ID", b["device_id"]),
                ("Subsystem Vendor ID", b["subsystem_vendor_id"]),
                ("Subsystem Device ID", b["subsystem_device_id"]), ("Chip Count", len(card["chips"]))]
    else:
        # npu_info_print.c print_ascend_chip_info: an A3 (910_93) build prints 'NPU Name' and no 'Chip Type'
        a3 = state.get("layout") == "a3"
        rows = [("NPU ID", card["id"])] + ([("NPU Name", chip["name"])] if a3 else []) + [
                ("Chip ID", chip["chip_id"])] + ([] if a3 else [("Chip Type", "Ascend")]) + [
                ("Chip Name", chip["name"]), ("Chip Version", "V1"), ("Board ID", b["board_id"]), ("PCB ID", "NA"),
                ("BOM ID", b["bom_id"]), ("VDie ID", chip["vdie_id"]), ("NDie ID", chip["ndie_id"]),
                ("Chip Position ID", chip["chip_id"]), ("PCIe Bus Info", chip["bus_id"]), ("Firmware Version", fw)]
    return "\n".join(_kv(k, v) for k, v in rows) + "\n"


def render_health_chip(chip):
    """``-t health -i N -c C`` (910B/A3 builds, npu_chip_info.c show_ascend_chip_health_info ->
    npu_info_print.c print_diagnosis_info): ``Health Status`` / ``Error Code`` / ``Error Information``.

    ``handle_health_state``: an unhealthy state (Warning/Alarm/Critical) without any error code is printed as OK.
    Codes print as ``" %04X"`` each; every further error text follows a blank line, under a blank key.
    """
    health, codes = chip["health"], list(chip["error_codes"] or [])
    if not codes and health in ("Warning", "Alarm", "Critical"):
        health = "OK"
    lines = [_kv("Health Status", health)]
    if not codes:
        return "\n".join(lines + [_kv("Error Code", "NA"), _kv("Error Information", "NA")]) + "\n"
    lines.append(_kv("Error Code", " ".join(codes)))
    infos = list(chip["error_info"] or []) or ["NA"]  # one text per code (simulator: as many as the fault gave)
    lines.append(_kv("Error Information", infos[0]))
    for extra in infos[1:len(codes)]:
        lines += ["", _kv(" ", extra)]
    return "\n".join(lines) + "\n"


def render_health_card(card):
    """``-t health -i N`` without ``-c`` (910B/A3 builds, npu_card_info.c show_ascend_card_health ->
    show_ascend_card_info(show_ascend_chip_health_state)): the card header, then per chip ``Health`` and
    ``Chip ID``, then the MCU's ``Health`` and ``Chip Name : MCU``. No error code, no error text."""
    out = [_kv("NPU ID", card["id"]), _kv("Chip Count", len(card["chips"])), ""]
    for chip in card["chips"]:
        out += [_kv("Health", chip["health"]), _kv("Chip ID", chip["chip_id"]), ""]
    out += [_kv("Health", "OK"), _kv("Chip Name", "MCU"), ""]
    return "\n".join(out) + "\n"


def render_health(state, card, chip=None):
    if chip is None:
        return render_health_card(card)
    return render_health_chip(chip)


def _pct(used, total):
    return int(round(100.0 * used / total)) if total else 0


def render_memory(state, card, chip=None):
    chip = chip or card["chips"][0]
    rows = [("NPU ID", card["id"]), ("DDR Capacity(MB)", chip["ddr_total"]), ("DDR Clock Speed(MHz)", 0),
            ("HBM Capacity(MB)", chip["hbm_total"]), ("HBM Clock Speed(MHz)", chip["hbm_clock"]),
            ("HBM Temperature(C)", chip["hbm_temp"]), ("HBM Manufacturer ID", chip["hbm_manufacturer"])]
    return "\n".join(_kv(k, v) for k, v in rows) + "\n"


def _usage_rows(chip):
    return [("DDR Capacity(MB)", chip["ddr_total"]), ("DDR Usage Rate(%)", _pct(chip["ddr_used"], chip["ddr_total"])),
            ("DDR Hugepages Total(page)", chip["hugepages_total"]),
            ("DDR Hugepages Usage Rate(%)", _pct(chip["hugepages_used"], chip["hugepages_total"])),
            ("HBM Capacity(MB)", chip["hbm_total"]), ("HBM Usage Rate(%)", _pct(chip["hbm_used"], chip["hbm_total"])),
            ("Aicore Usage Rate(%)", chip["aicore_usage"]), ("Aivector Usage Rate(%)", chip["aivector_usage"]),
            ("Aicpu Usage Rate(%)", chip["aicpu_usage"]), ("Ctrlcpu Usage Rate(%)", chip["ctrlcpu_usage"]),
            ("DDR Bandwidth Usage Rate(%)", 0), ("HBM Bandwidth Usage Rate(%)", chip["hbm_bw_usage"]),
            ("Chip ID", chip["chip_id"])]


def render_usages(state, card, chip=None):
    chips = [chip] if chip is not None else card["chips"]
    out = [_kv("NPU ID", card["id"]), _kv("Chip Count", len(card["chips"]))]
    for item in chips:
        out.append("")
        out += [_kv(k, v) for k, v in _usage_rows(item)]
    return "\n".join(out) + "\n"


def _common_rows(chip):
    power = "NA" if chip.get("power") is None else "%.1f" % chip["power"]
    return [("Chip ID", chip["chip_id"]), ("Memory Usage Rate(%)", _pct(chip["ddr_used"], chip["ddr_total"])),
            ("HBM Usage Rate(%)", _pct(chip["hbm_used"], chip["hbm_total"])),
            ("Aicore Usage Rate(%)", chip["aicore_usage"]), ("Aicore Freq(MHZ)", chip["aicore_freq"]),
            ("Aicore curFreq(MHZ)", chip["aicore_cur_freq"]), ("Aicore Count", chip["aicore_count"]),
            ("Temperature(C)", chip["temp"]), ("NPU Real-time Power(W)", power)]


def render_common(state, card, chip=None):
    chips = [chip] if chip is not None else card["chips"]
    out = [_kv("NPU ID", card["id"]), _kv("Chip Count", len(card["chips"]))]
    for item in chips:
        out.append("")
        out += [_kv(k, v) for k, v in _common_rows(item)]
    if chip is None:
        out += ["", _kv("Chip Name", "mcu"), _kv("Temperature(C)", card["chips"][0]["mcu_temp"])]
    return "\n".join(out) + "\n"


def render_topo(state):
    cards = present_cards(state)
    names = ["NPU%d" % c["id"] for c in cards]
    # as captured (arthurchiao blog): the header row starts at column 0, not above the first data column
    out = ["".join("%-11s" % n for n in names) + "CPU Affinity"]
    for card in cards:
        cells = ["X" if other["id"] == card["id"] else "HCCS" for other in cards]
        out.append("%-11s" % ("NPU%d" % card["id"]) + "".join("%-11s" % c for c in cells) + card["cpu_affinity"])
    out += ["", "Legend:",
            "  X    = Self",
            "  SYS  = Path traversing PCIe and NUMA nodes. Nodes are connected through SMP, such as QPI, UPI.",
            "  PHB  = Path traversing PCIe and the PCIe host bridge of a CPU.",
            "  PIX  = Path traversing a single PCIe switch",
            "  PXB  = Path traversing multipul PCIe switches",
            "  HCCS = Connection traversing HCCS."]
    return "\n".join(out) + "\n"


TYPES = {"board": render_board, "health": render_health, "memory": render_memory, "usages": render_usages,
         "common": render_common}


class Result(object):
    def __init__(self, out="", rc=0, err=""):
        self.out, self.rc, self.err = out, rc, err


def dcmi_failure(ret):
    """What npu-smi prints and exits with when dcmi_init() returns ``ret``."""
    text = DCMI_USED if ret == DCMI_ERR_CODE_RESOURCE_OCCUPIED else DCMI_FAIL
    return Result(text % ret + "\n", ret & 0xFF)


# npu_smi.h: NPU_ERR_CODE_INVALID_PARAMETER -9001, NPU_ERR_CODE_INNER_ERR -9005; main() exit(ret): ret & 0xff
RC_INVALID_PARAMETER = -9001 & 0xFF
RC_INNER_ERR = -9005 & 0xFF


def _invalid_card():
    # npu_parameter_parse.c parse_card_param prints 'Invalid card id.'; the rest as in the FaultDiag capture
    return Result("Invalid card id.\nError parameter of -i\n" + USAGE + "\n", RC_INVALID_PARAMETER)


def run(argv, state):
    """Pure: argv (without the program name) and a state -> Result.  Does not touch the disk."""
    if not argv:
        # npu_smi.c validate_arguments: the help, then NPU_ERR_CODE_INVALID_PARAMETER (-9001) -> exit 215
        return Result(TOP_HELP + "\n" + SIMULATED_NOTE + "\n", RC_INVALID_PARAMETER)
    if argv[0] in ("-h", "--help"):
        return Result(TOP_HELP + "\n" + SIMULATED_NOTE + "\n")
    if argv[0] != "info":
        # npu_smi.c handle_command_not_found (before dcmi_init)
        return Result("Command or option is not found.\n" + TOP_HELP, RC_INNER_ERR)
    args = argv[1:]
    if any(a in ("-h", "--help") for a in args):
        return Result(INFO_HELP + "\n" + SIMULATED_NOTE + "\n")
    held = (state.get("faults") or {}).get("device_held")
    if held:
        return dcmi_failure(held)
    if state.get("pending_reboot"):
        return dcmi_failure(DCMI_ERR_CODE_INNER_ERR)
    opts, positional = {}, []
    i = 0
    while i < len(args):
        if args[i] in ("-i", "-c", "-t", "-p") and i + 1 < len(args):
            opts[args[i]] = args[i + 1]
            i += 2
        else:
            positional.append(args[i])
            i += 1
    if "-m" in positional:
        return Result(render_mapping(state))
    if "-l" in positional:
        return Result(render_list(state))
    kind = opts.get("-t")
    if kind is None:
        if positional:
            return Result("Invalid parameter: %s\n%s\n" % (positional[0], USAGE), 1)
        return Result(render_info(state))
    if kind == "topo":
        return Result(render_topo(state))
    if kind not in TYPES:
        return Result("The parameter of -t is invalid or not supported on this device: %s\n%s\n" % (kind, USAGE), 1)
    if "-i" not in opts:
        # npu_card_info.c query_card_info, then npu_info_run shows the help
        return Result("\nThis command must input card id.\n\n" + USAGE + "\n", RC_INVALID_PARAMETER)
    try:
        card_id = int(opts["-i"])
    except ValueError:
        return _invalid_card()
    cards = {c["id"]: c for c in present_cards(state)}
    if card_id not in cards:
        return _invalid_card()
    card = cards[card_id]
    chip = None
    if "-c" in opts:
        try:
            chip_id = int(opts["-c"])
        except ValueError:
            chip_id = -1
        matches = [c for c in card["chips"] if c["chip_id"] == chip_id]
        if not matches:
            # npu_parameter_parse.c parse_chip_param prints 'Invalid chip id.'
            return Result("Invalid chip id.\nError parameter of -c\n" + USAGE + "\n", RC_INVALID_PARAMETER)
        chip = matches[0]
    return Result(TYPES[kind](state, card, chip))


def _driver_complete():
    info = _read_kv(st.path("/etc/ascend_install.info"))
    return info.get("Driver_Install_Status") == "complete"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    with st.locked():
        state = st.refresh(st.load())
    result = run(argv, state)
    out = result.out
    if (result.rc == 0 and argv[:1] == ["info"] and len(argv) == 1 and not _driver_complete()):
        out += DRIVER_WARNING + "\n"
    sys.stdout.write(out)
    if result.err:
        sys.stderr.write(result.err)
    return result.rc


if __name__ == "__main__":
    sys.exit(main())
