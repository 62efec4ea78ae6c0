"""Simulated ``upgrade-tool`` (driver/tools): component versions as in the MindCluster FaultDiag capture."""

import sys

from atlas_sim import SIMULATED_NOTE, state as st

COMPONENTS = ((0, "nve"), (3, "uefi"), (8, "imu"), (9, "imp"))


def run(argv, state):
    if not argv or "-h" in argv or "--help" in argv:
        return "Usage: upgrade-tool --device_index <-1|id> --component <-1|id> --version\n" + SIMULATED_NOTE + "\n"
    fw = state["running"]["firmware"]
    out = ["{"]
    for card in state["npus"]:
        if not card.get("present", True):
            continue
        for ctype, name in COMPONENTS:
            out.append("Get component version(%s) succeed for deviceId(%d), componentType(%d)."
                       % (fw, card["id"], ctype))
            out.append('{"device_id":%d, "component":%s, "version":%s}' % (card["id"], name, fw))
    out.append("}")
    return "\n".join(out) + "\n"


def main(argv=None):
    with st.locked():
        state = st.refresh(st.load())
    sys.stdout.write(run(sys.argv[1:] if argv is None else argv, state))
    return 0


if __name__ == "__main__":
    sys.exit(main())
