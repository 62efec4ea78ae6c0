#!/usr/bin/env python3
"""Time the diagnose_redact filter's redaction on one long line of 1, 2 and 4 MiB, for hostile line shapes.

Each shape is one unit repeated to the size (a key whose value never closes, a key without a value, options,
headers, URLs, PEM markers, netrc and curl forms...). Prints, per shape, the seconds at each size and the ratio
of each size's time to the first's: a linear redactor doubles its time when the size doubles (ratios near 2 and
4), a quadratic one quadruples it (4 and 16). Times are the process's CPU seconds, the best of --repeat runs: on a
shared CI host the wall clock of one run swings by a factor of three with the other jobs. Run from the repository
root:

  .venv/bin/python benchmarks/redact_scale.py [--sizes 1024,2048,4096] [--units 'a=,api_key="'] [--repeat 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
UNITS = ['api_key="', "api_key=[", "token: ", '"a":', "a=", "--api-key ", "Cookie: ", "x://a@",
         "machine h login u password ", "-----BEGIN PRIVATE KEY-----", "curl -u a:", "eyJa.eyJb.", "[{",
         "'token'='", "- --token\n", "data:\n", "api_key=x ", "A,B\n", "<password>", "api_key: !&", "--api-key -",
                 'api_key="""', "docker login -p ", "obsutil config -k=", "token x\n"]


def _load_diagnose():
    # diagnose.py is stdlib only: loaded by path, so the script needs neither Ansible nor the collection installed
    path = os.path.join(ROOT, "plugins", "module_utils", "_diagnose.py")
    spec = importlib.util.spec_from_file_location("ascendai_diagnose", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024,2048,4096", help="line sizes in KiB, comma separated")
    parser.add_argument("--units", help="comma-separated units to repeat (default: the built-in hostile shapes)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per size; the fastest is kept")
    args = parser.parse_args(argv)
    redact = _load_diagnose().redact
    sizes = [int(s) for s in args.sizes.split(",")]
    units = args.units.split(",") if args.units else UNITS
    header = f"{'unit':34}" + "".join(f"{str(s) + ' KiB cpu s':>16}" for s in sizes) + "".join(
        f"{'ratio ' + str(s // sizes[0]) + 'x':>11}" for s in sizes[1:])
    print(header)
    worst = 0.0
    for unit in units:
        times = []
        for size in sizes:
            text = unit * (size * 1024 // len(unit))
            best = None
            for _ in range(max(1, args.repeat)):
                started = time.process_time()
                redact(text)
                took = time.process_time() - started
                best = took if best is None else min(best, took)
            times.append(best)
        ratios = [t / times[0] if times[0] else 0.0 for t in times[1:]]
        worst = max([worst] + [r / (s / sizes[0]) for r, s in zip(ratios, sizes[1:])])
        print(f"{unit!r:34}" + "".join(f"{t:16.3f}" for t in times) + "".join(f"{r:11.2f}" for r in ratios))
    print(f"worst ratio per size doubling, normalised (1.0 = linear, 2.0 = quadratic): {worst:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
