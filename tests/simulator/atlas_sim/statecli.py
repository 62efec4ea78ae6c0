"""``atlas-sim-state``: create (``init``) or print (``show``) the simulated node state."""

import argparse
import json
import sys

from atlas_sim import SIMULATED_NOTE, state as st


def main(argv=None):
    p = argparse.ArgumentParser(prog="atlas-sim-state", description="Simulated Atlas node state. " + SIMULATED_NOTE)
    sub = p.add_subparsers(dest="cmd")
    sub.required = True
    init = sub.add_parser("init", help="write a fresh state (no driver installed, healthy hardware)")
    init.add_argument("--npus", type=int, default=4, choices=[1, 2, 4, 8])
    init.add_argument("--chip", default="910B3", choices=sorted(st.CHIPS))
    init.add_argument("--product", default="Atlas 800I A2")
    init.add_argument("--layout", default="classic", choices=list(st.LAYOUTS))
    sub.add_parser("show", help="print the state as JSON")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    with st.locked():
        if args.cmd == "init":
            st.save(st.default_state(args.npus, args.chip, args.product, args.layout))
        else:
            print(json.dumps(st.load(), indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
