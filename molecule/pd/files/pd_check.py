"""The pd scenario's checks, run on the decode node (standard library only; argv[1]: a JSON object).

    answers  the proxy's completions equal the prefill rank's own (temperature 0, fp32), and the decode rank's
             /metrics moved: vllm:prompt_tokens_by_source{source="external_kv_transfer"} by the prompts' tokens
             (less at most one per request, which vLLM recomputes), source="local_compute" by at most one token per
             request, vllm:nixl_xfer_time_seconds_count by at least one transfer per request (vLLM 0.32.0:
             vllm/v1/metrics/loggers.py, vllm/v1/metrics/stats.py PromptTokenStats,
             vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py NixlPromMetrics)
    routes   every path and method of each rank's OpenAPI document (read with the key) and of the proxy answers 401
             without the key, /health excepted (200)

Prints one JSON object; exits 1 with the failures listed.
"""

from __future__ import annotations

import json
import re
import sys
import urllib.error
import urllib.request

# Few and short: a loaded 2-core CI machine generates about one token a second per rank.
PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village by the sea,",
]
METRIC_LINE = re.compile(r'^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)$')


def call(url, key=None, body=None, method=None, timeout=300):
    """(status, text) of one request; no exception for an HTTP error status."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method or ("POST" if data is not None else "GET"))
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")


def metric(text, name, **labels):
    """The sum of a metric's samples whose labels include ``labels``."""
    total = 0.0
    for line in text.splitlines():
        match = METRIC_LINE.match(line.strip())
        if not match or match.group("name") != name:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', match.group("labels") or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(match.group("value"))
    return total


def kv_counters(text):
    return {
        "external_kv_transfer": metric(text, "vllm:prompt_tokens_by_source_total", source="external_kv_transfer"),
        "local_compute": metric(text, "vllm:prompt_tokens_by_source_total", source="local_compute"),
        "nixl_transfers": metric(text, "vllm:nixl_xfer_time_seconds_count"),
    }


def kv_failures(before, after, prompt_tokens, requests):
    """What the decode rank's counters say against a real transfer of every prompt's KV."""
    moved = {name: after[name] - before[name] for name in after}
    failures = []
    if moved["external_kv_transfer"] < prompt_tokens - requests or moved["external_kv_transfer"] <= 0:
        failures.append(f"decode loaded {moved['external_kv_transfer']:.0f} prompt tokens over NIXL, expected at "
                        f"least {prompt_tokens - requests} of {prompt_tokens}")
    if moved["local_compute"] > requests:
        failures.append(f"decode computed {moved['local_compute']:.0f} prompt tokens itself, expected at most "
                        f"{requests} (one per request)")
    if moved["nixl_transfers"] < requests:
        failures.append(f"decode made {moved['nixl_transfers']:.0f} NIXL transfers for {requests} requests")
    return moved, failures


def complete(base, key, model, prompt):
    status, text = call(base + "/v1/completions", key, {"model": model, "prompt": prompt, "max_tokens": 8,
                                                        "temperature": 0})
    if status != 200:
        raise SystemExit(f"{base}/v1/completions answered {status}: {text[:500]}")
    answer = json.loads(text)
    return answer["choices"][0]["text"], answer["usage"]["prompt_tokens"]


def answers(args):
    key, model = args["key"], args["model"]
    before = kv_counters(call(args["decode"] + "/metrics", key)[1])
    through_proxy = [complete(args["proxy"], key, model, p) for p in PROMPTS]
    after = kv_counters(call(args["decode"] + "/metrics", key)[1])
    alone = [complete(args["prefill"], key, model, p)[0] for p in PROMPTS]
    failures = [f"{p!r}: proxy {via[0]!r}, prefill rank alone {own!r}"
                for p, via, own in zip(PROMPTS, through_proxy, alone) if via[0] != own or not own.strip()]
    moved, kv = kv_failures(before, after, sum(n for _t, n in through_proxy), len(PROMPTS))
    return {"answers": [{"prompt": p, "text": via[0]} for p, via in zip(PROMPTS, through_proxy)],
            "decode_counters_moved": moved}, failures + kv


def openapi_routes(base, key):
    status, text = call(base + "/openapi.json", key)
    if status != 200:
        raise SystemExit(f"{base}/openapi.json answered {status} with the key")
    routes = []
    for path, methods in json.loads(text)["paths"].items():
        for method in methods:
            if method.upper() in ("GET", "POST", "PUT", "DELETE", "PATCH"):
                routes.append((method.upper(), re.sub(r"\{[^}]*\}", "x", path)))
    return routes


def route_failures(bases, routes, open_paths=("/health",)):
    failures, checked = [], 0
    for base in bases:
        for method, path in routes:
            status, _text = call(base + path, None, {} if method in ("POST", "PUT", "PATCH") else None, method,
                                 timeout=60)
            checked += 1
            want = (200, 405) if path in open_paths else (401,)
            if path in open_paths and method != "GET":
                continue
            if status not in want:
                failures.append(f"{method} {base}{path} without the key answered {status}, expected {want[0]}")
    return checked, failures


def routes(args):
    found = set()
    for base in args["ranks"]:
        found.update(openapi_routes(base, args["key"]))
    # the proxy's own routes, and a path nobody serves
    found.update({("GET", "/metrics"), ("GET", "/v1/models"), ("POST", "/v1/completions"),
                  ("POST", "/v1/chat/completions"), ("GET", "/no/such/route")})
    listed = sorted(found)
    if ("GET", "/health") not in found or len(listed) < 10:
        raise SystemExit(f"the ranks' OpenAPI documents list too few routes: {listed}")
    checked, failures = route_failures(args["ranks"] + [args["proxy"]], listed)
    return {"routes": len(listed), "requests": checked}, failures


def main():
    args = json.loads(sys.argv[1])
    result, failures = {"answers": answers, "routes": routes}[args["check"]](args)
    print(json.dumps(dict(result, failures=failures), indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
