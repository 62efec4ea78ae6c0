"""``atlas-sim-fault``: inject a hardware/installer fault into the simulated node, one command each."""

import argparse
import sys

from atlas_sim import SIMULATED_NOTE, state as st

# Error information texts, one per code as npu-smi prints them (npu_info_print.c print_diagnosis_info): the three
# codes and texts of the MindCluster FaultDiag capture (npu_info_after.txt); other codes get a generic text.
ERROR_INFO = {
    "A4025021": "ascend_monitor adda heart beat lost error",
    "8C03A000": "node type=process-manager, sensor type=General Software, event state=The process start failed "
                "or exit abnormally",
    "8C084E00": "node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost.",
}


def _code(text):
    code = text.upper()
    return code[2:] if code.startswith("0X") else code


def _chips(state, npu):
    for card in state["npus"]:
        if card["id"] == npu:
            return card
    raise SystemExit("atlas-sim-fault: no NPU %d on this node" % npu)


def apply(state, args):
    if args.fault == "card-alarm":
        card = _chips(state, args.npu)
        chip = card["chips"][args.chip]
        codes = [_code(c) for c in args.code]
        chip["health"] = args.health
        chip["error_codes"] = codes
        chip["error_info"] = [args.info] if args.info else [
            ERROR_INFO.get(code, "node type=NPU, sensor type=General Fault, event state=fault event %s" % code)
            for code in codes]
    elif args.fault == "nic-down":
        state["nics"][str(args.dev)]["link"] = "DOWN"
    elif args.fault == "nic-up":
        state["nics"][str(args.dev)]["link"] = "UP"
    elif args.fault == "net-health-fail":
        state["nics"][str(args.dev)]["net_health"] = args.status
    elif args.fault == "peer-silent":
        state.setdefault("fabric", {}).setdefault("silent", []).append(args.address)
    elif args.fault == "card-missing":
        _chips(state, args.npu)["present"] = False
    elif args.fault == "installer-fail":
        state["faults"]["installer_fail"] = True
    elif args.fault == "device-held":
        state["faults"]["device_held"] = args.ret
    elif args.fault == "driver-floor":
        state["faults"]["driver_floor"] = args.version
    elif args.fault == "clear":
        for card in state["npus"]:
            card["present"] = True
            for chip in card["chips"]:
                chip["health"], chip["error_codes"], chip["error_info"] = "OK", [], []
        for nic in state["nics"].values():
            nic["link"], nic["net_health"] = "UP", None
        state.pop("fabric", None)
        state["faults"]["installer_fail"] = False
        state["faults"]["device_held"] = None
        state["faults"].pop("driver_floor", None)
    return state


def parser():
    p = argparse.ArgumentParser(prog="atlas-sim-fault", description="Inject a fault into the simulated Atlas "
                                "node. " + SIMULATED_NOTE)
    sub = p.add_subparsers(dest="fault")
    sub.required = True
    alarm = sub.add_parser("card-alarm", help="put an NPU chip into Alarm (or Warning/Critical) with error codes")
    alarm.add_argument("--npu", type=int, required=True)
    alarm.add_argument("--chip", type=int, default=0)
    alarm.add_argument("--code", action="append", required=True, help="error code, e.g. 0x80E01801 (repeatable)")
    alarm.add_argument("--health", default="Alarm", choices=["Warning", "Alarm", "Critical", "UNKNOWN"])
    alarm.add_argument("--info", help="Error Information text")
    for name, helptext in (("nic-down", "NIC link DOWN"), ("nic-up", "NIC link UP again")):
        sub.add_parser(name, help=helptext).add_argument("--dev", type=int, required=True)
    health = sub.add_parser("net-health-fail", help="net_health reports a failure")
    health.add_argument("--dev", type=int, required=True)
    health.add_argument("--status", default="Receive timeout",
                        choices=["Socket fail", "Receive timeout", "Unreachable", "Time exceeded", "Fault",
                                 "Thread error", "Unknown"])
    sub.add_parser("peer-silent", help="an address of the RoCE fabric stops answering (hccn_tool ping / "
                   "net_health)").add_argument("--address", required=True)
    sub.add_parser("card-missing", help="an NPU card vanishes from the bus").add_argument("--npu", type=int,
                                                                                          required=True)
    sub.add_parser("installer-fail", help="the next installer run fails midway")
    held = sub.add_parser("device-held", help="another process (a container) holds the NPUs: npu-smi's DCMI init "
                          "fails with -8020 (the device is used) or the generic -8005")
    held.add_argument("--ret", type=int, default=-8020, choices=[-8020, -8005])
    floor = sub.add_parser("driver-floor", help="the cards' hardware anti-rollback (a CDR, HBM or flash rule of the "
                           "driver package's run_driver_upgrade_check.sh) demands this driver version or later")
    floor.add_argument("--version", required=True, help="e.g. 24.1.rc2.2 or 23.0.7")
    sub.add_parser("clear", help="remove every injected fault")
    return p


def main(argv=None):
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    with st.locked():
        state = st.load()
        apply(state, args)
        st.save(state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
