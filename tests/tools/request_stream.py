#!/usr/bin/env python3
"""A bounded stream of completions against one API address, with the real ``openai`` client, while something
else happens (Molecule scale: playbooks/upgrade.yml restarts each node behind the shared front in turn).

Usage: request_stream.py --url URL --key-file F --model NAME --out OUT.json [--stop-file F] [--max N] [--interval S]

One request at a time, ``--interval`` seconds apart, until ``--stop-file`` exists (after at least one request) or
``--max`` requests have been sent. The client makes no retry of its own (``max_retries=0``): a request the
server side did not answer counts as failed. OUT.json: the counts, the latency percentiles (nearest rank) and every
request (start, seconds, status or error). Test infrastructure, never shipped.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time


def percentile(values, fraction):
    """Nearest-rank percentile of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def summary(requests):
    """Counts and latency percentiles of the recorded requests."""
    ok = [r["seconds"] for r in requests if r["ok"]]
    failed = [r for r in requests if not r["ok"]]
    return {"sent": len(requests), "ok": len(ok), "failed": len(failed),
            "p50_s": percentile(ok, 0.50), "p99_s": percentile(ok, 0.99), "max_s": max(ok) if ok else None,
            "first_failures": failed[:5]}


def run(args, client, clock=time.monotonic, sleep=time.sleep, wall=time.time):
    requests = []
    while len(requests) < args.max and not (requests and os.path.exists(args.stop_file or "")):
        started, t0 = wall(), clock()
        try:
            answer = client.completions.create(model=args.model, prompt="The capital of France is", max_tokens=8,
                                               temperature=0)
            ok = bool(answer.choices) and answer.usage is not None and answer.usage.completion_tokens > 0
            requests.append({"start": started, "seconds": round(clock() - t0, 4), "ok": ok,
                             "status": 200, "error": "" if ok else "no tokens"})
        except Exception as exc:  # noqa: BLE001 - every failure is recorded, with its kind
            requests.append({"start": started, "seconds": round(clock() - t0, 4), "ok": False,
                             "status": getattr(exc, "status_code", None),
                             "error": f"{type(exc).__name__}: {exc}"[:300]})
        sleep(args.interval)
    return requests


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True, help="the API address, e.g. http://10.0.0.2:8080/v1")
    parser.add_argument("--key-file", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--stop-file", default="")
    parser.add_argument("--max", type=int, default=400)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    import openai  # pylint: disable=import-outside-toplevel

    with open(args.key_file, encoding="utf-8") as handle:
        key = handle.read().strip()
    client = openai.OpenAI(base_url=args.url, api_key=key, max_retries=0, timeout=args.timeout)
    requests = run(args, client)
    # whether the stream covered the whole of what it ran beside: it stopped at the stop file, not at its bound
    stopped_by = "stop-file" if args.stop_file and os.path.exists(args.stop_file) else "max"
    result = dict(summary(requests), url=args.url, stopped_by=stopped_by, requests=requests)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(result, handle, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "requests"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
