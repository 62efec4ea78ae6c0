"""``atlas-sim-reboot``: what a (re)boot does to the simulated hardware.

Run at every boot by ``atlas-sim-reboot.service`` (a oneshot unit), so ``ansible.builtin.reboot`` /
``docker restart`` activates a newly installed driver/firmware and clears the pending-reboot flag.
"""

import sys

from atlas_sim import SIMULATED_NOTE, state as st


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print("Usage: atlas-sim-reboot\nApply a simulated reboot to the node state. " + SIMULATED_NOTE)
        return 0
    with st.locked():
        state = st.load()
        st.apply_reboot(state)
        st.save(state)
    return 0


if __name__ == "__main__":
    sys.exit(main())
