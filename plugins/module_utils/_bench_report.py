# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Benchmark report: openai_probe results + ``vllm bench serve`` result JSON -> SLO verdict, JSON, Markdown, SVG.

Standard library only. The latency plot is an SVG written here (no matplotlib on the controller).
"""

from __future__ import annotations

import math
from xml.sax.saxutils import escape

PROBE_KEYS = ("requests", "succeeded", "failed_requests", "error_rate", "errors_by_kind", "errors", "duration_s",
              "output_tokens", "input_tokens", "input_len", "warmup_requests", "token_source", "output_tokens_per_s",
              "request_throughput", "ttft_ms", "e2e_ms", "tpot_ms", "tokens_per_s", "model", "endpoint")
# Scalars kept from the vllm bench serve result (lists such as ttfts/itls are reduced to the plot series).
BENCH_KEYS = ("date", "backend", "model_id", "tokenizer_id", "num_prompts", "max_concurrency", "request_rate",
              "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
              "output_throughput", "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests")
BENCH_METRICS = ("ttft", "tpot", "itl", "e2el")
STAT_TO_BENCH = {"mean": "mean", "p50": "median", "p90": "p90", "p99": "p99"}
DEFAULT_SLO = {"ttft_ms": 350.0, "tokens_per_s": 1200.0, "ttft_stat": "p90", "max_error_rate": 0.0}


# Where each release writes what (result JSON of ``vllm bench serve --save-result``, vllm/benchmarks/serve.py):
# - ``failed``: from vLLM 0.12.0 on (https://github.com/vllm-project/vllm/blob/v0.12.0/vllm/benchmarks/serve.py#L797-L800);
#   0.8.4 to 0.11.x write only ``completed``
#   (https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/benchmarks/serve.py#L717-L735).
# - ``errors`` (one string per request, "" when it succeeded), ``ttfts``, ``itls``: with ``--save-detailed`` (0.9.1 on)
#   or always (0.8.4 to 0.9.0, which have no --save-detailed).
# - ``latencies`` (end-to-end seconds per request): only 0.32
#   (https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/benchmarks/serve.py#L1280-L1302); older releases give
#   ``ttft + sum(itl)``, which is the same number: the request function sets ``latency`` to the last chunk's time
#   (https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/benchmarks/lib/endpoint_request_func.py#L185-L214).
GAP_PCT = 10.0
COMPARED = (("output_tokens_per_s", "output_throughput", "Output throughput (tokens/s)"),
            ("request_throughput", "request_throughput", "Request throughput (req/s)"))


class ReportError(ValueError):
    pass


def _num(value):
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return None if isinstance(value, float) and (math.isnan(value) or math.isinf(value)) else value
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def normalize_slo(slo):
    """Fill the SLO dict with the guide's defaults for keys not given; None disables a check."""
    out = dict(DEFAULT_SLO)
    if slo is None:
        return out
    if not isinstance(slo, dict):
        raise ReportError(f"slo must be a dict such as {DEFAULT_SLO}, got {type(slo).__name__}: {slo!r}")
    unknown = set(slo) - set(DEFAULT_SLO)
    if unknown:
        raise ReportError(f"slo has unknown keys {sorted(unknown)}; known: {sorted(DEFAULT_SLO)}")
    out.update(slo)
    if out["ttft_stat"] not in STAT_TO_BENCH:
        raise ReportError(f"slo.ttft_stat={out['ttft_stat']!r}: use one of {', '.join(STAT_TO_BENCH)}")
    for key in ("ttft_ms", "tokens_per_s", "max_error_rate"):
        if out[key] is not None and _num(out[key]) is None:
            raise ReportError(f"slo.{key}={out[key]!r} is not a number (or null to skip that check)")
        out[key] = None if out[key] is None else float(out[key])
    return out


def bench_metric(bench, metric, stat):
    """A statistic of a ``vllm bench serve`` metric in ms (``stat`` in mean, p50, p90, p99), or None."""
    key = f"{STAT_TO_BENCH[stat]}_{metric}_ms"
    return _num(bench.get(key))


def bench_failed(bench):
    """``(failed, how)``: the failed requests of a ``vllm bench serve`` result in every release's format.

    ``failed`` (vLLM 0.12 on) as written; else the non-empty ``errors`` (per-request list, with --save-detailed);
    else ``num_prompts - completed`` (0.11 and older without the details). ``(None, reason)`` when none of these.
    """
    failed = _num(bench.get("failed"))
    if failed is not None:
        return int(failed), "failed"
    errors = bench.get("errors")
    if isinstance(errors, list) and errors:
        return sum(1 for e in errors if e), "errors"
    completed, prompts = _num(bench.get("completed")), _num(bench.get("num_prompts"))
    if completed is not None and prompts is not None and prompts >= completed:
        return int(prompts - completed), "num_prompts - completed"
    return None, "the result has no failed, errors or num_prompts"


def bench_series(bench):
    """Per-request points of a ``vllm bench serve`` result with details: ttft and end-to-end in ms, ok.

    End-to-end is ``latencies`` (0.32) or ``ttft + sum(itls)`` (older releases; the same instant).
    """
    ttfts = bench.get("ttfts")
    if not isinstance(ttfts, list) or not ttfts:
        return []
    latencies, itls, errors = bench.get("latencies"), bench.get("itls"), bench.get("errors")
    out = []
    for i, ttft in enumerate(ttfts):
        ok = (not errors[i]) if isinstance(errors, list) and i < len(errors) else bool(_num(ttft))
        ttft = _num(ttft)
        e2e = None
        if isinstance(latencies, list) and len(latencies) == len(ttfts):
            e2e = _num(latencies[i])
        elif isinstance(itls, list) and i < len(itls) and isinstance(itls[i], list) and ttft is not None:
            gaps = [_num(g) for g in itls[i]]
            e2e = None if None in gaps else ttft + sum(gaps)
        out.append({"index": i, "ttft_ms": ttft * 1000.0 if ok and ttft else None,
                    "e2e_ms": e2e * 1000.0 if ok and e2e else None, "ok": ok})
    return out


def _pct(probe_value, bench_value):
    probe_value, bench_value = _num(probe_value), _num(bench_value)
    if probe_value is None or not bench_value:
        return None
    return round((probe_value - bench_value) * 100.0 / bench_value, 1)


def _per(total, count):
    total, count = _num(total), _num(count)
    return total / count if total is not None and count else None


def compare(probe, bench, meta=None):
    """The two tools side by side: ``{rows, gap, notes}``.

    rows: ``{metric, probe, vllm_bench, diff_pct}`` with diff_pct = (probe - vllm bench) / vllm bench in %.
    notes: the workload differences found that explain a gap (prompt or output tokens per request, request
    count, concurrency, warm-up, failures, token counting); when the throughput differs by more than 10 % and
    none is found, a note says that the cause is not known.
    """
    meta = meta or {}
    rows = []
    for pkey, bkey, label in COMPARED:
        rows.append({"metric": label, "probe": _num(probe.get(pkey)), "vllm_bench": _num(bench.get(bkey)),
                     "diff_pct": _pct(probe.get(pkey), bench.get(bkey))})
    for stat in ("p50", "p90"):
        pval = _num((probe.get("ttft_ms") or {}).get(stat))
        bval = bench_metric(bench, "ttft", stat)
        rows.append({"metric": f"TTFT {stat} (ms)", "probe": pval, "vllm_bench": bval, "diff_pct": _pct(pval, bval)})
    pval, bval = _num((probe.get("tpot_ms") or {}).get("mean")), bench_metric(bench, "tpot", "mean")
    rows.append({"metric": "TPOT mean (ms)", "probe": pval, "vllm_bench": bval, "diff_pct": _pct(pval, bval)})
    notes = []
    p_in = _per(probe.get("input_tokens"), probe.get("succeeded"))
    b_in = _per(bench.get("total_input_tokens"), bench.get("completed"))
    if probe.get("input_len") is None and b_in is not None:
        notes.append("openai_probe sent its text prompt"
                     + (f" ({p_in:.0f} tokens)" if p_in is not None else "")
                     + f", vllm bench serve random prompts of {b_in:.0f} tokens: a longer prefill per request "
                     "(set input_len on the probe for the same workload)")
    elif p_in is not None and b_in is not None and abs(_pct(p_in, b_in) or 0) > 5:
        notes.append(f"prompt tokens per request differ: openai_probe {p_in:.1f}, vllm bench serve {b_in:.1f} "
                     "(vllm bench decodes random token ids to text and the server tokenizes that text again, "
                     "which need not give the same number of tokens)")
    p_out = _per(probe.get("output_tokens"), probe.get("succeeded"))
    b_out = _per(bench.get("total_output_tokens"), bench.get("completed"))
    if p_out is not None and b_out is not None and abs(_pct(p_out, b_out) or 0) > 5:
        notes.append(f"output tokens per request differ: openai_probe {p_out:.1f}, vllm bench serve {b_out:.1f} "
                     "(without ignore_eos a request stops at the end-of-sequence token)")
    for label, pval, bval in (("requests", probe.get("requests"), bench.get("num_prompts")),
                              ("concurrency", meta.get("concurrency"), bench.get("max_concurrency"))):
        if _num(pval) is not None and _num(bval) is not None and _num(pval) != _num(bval):
            notes.append(f"{label} differ: openai_probe {pval}, vllm bench serve {bval}")
    pfail = _num(probe.get("failed_requests")) or 0
    bfail, _how = bench_failed(bench)
    if pfail or bfail:
        notes.append(f"failed requests: openai_probe {pfail}, vllm bench serve {bfail}")
    if probe.get("token_source") not in (None, "usage"):
        notes.append("openai_probe counted one token per streamed chunk (the server sent no usage), vllm bench "
                     "serve the usage's completion_tokens")
    if meta.get("warmup (vllm bench)") is not None and _num(probe.get("warmup_requests")) is not None \
            and _num(probe.get("warmup_requests")) != _num(meta.get("warmup (vllm bench)")):
        notes.append(f"warm-up differs: openai_probe {probe.get('warmup_requests')} request(s), vllm bench serve "
                     f"{meta.get('warmup (vllm bench)')}")
    gap = rows[0]["diff_pct"]
    big = gap is not None and abs(gap) > GAP_PCT
    if big and not notes:
        notes.append(f"the output throughput differs by {gap:+.1f} % on the same workload and no workload difference "
                     "explains it, so the cause is not known. The tools run one after the other: anything else using "
                     "the node's processors between the two runs shows as a gap (on a CPU-only or shared node most of "
                     "all). Rerun, with more requests, to see whether it holds")
    return {"rows": rows, "gap_pct": gap, "gap_over_limit": big, "notes": notes}


def _check(source, slo_name, limit, measured, higher_is_better, label, unit):
    if limit is None:
        return None
    if measured is None:
        ok, text = False, f"{source}: {label} not measured"
    else:
        ok = measured >= limit if higher_is_better else measured <= limit
        if higher_is_better:
            sign = ">=" if ok else "<"
        else:
            sign = "<=" if ok else ">"
        suffix = f" {unit}" if unit else ""
        digits = 1 if unit else 3
        text = f"{source}: {label} {measured:.{digits}f}{suffix} {sign} {limit:g}{suffix}"
    return {"source": source, "slo": slo_name, "limit": limit, "measured": measured, "ok": ok, "message": text}


# The parts of an openai_probe result that are read as mappings or lists, and what each must be.
_PROBE_STATS = ("ttft_ms", "e2e_ms", "tpot_ms", "tokens_per_s")
_PROBE_FIX = "; pass the registered result of ascendai.vllm.openai_probe (mode bench) unchanged"


def _check_probe_shapes(probe):
    """ReportError naming the first part of an openai_probe result that is not of the shape the module writes."""
    for key in _PROBE_STATS:
        value = probe.get(key)
        if value is not None and not isinstance(value, dict):
            raise ReportError(f"probe.{key}={value!r:.200} must be the statistics openai_probe writes (a mapping of "
                              f"min, mean, p50, p90, p99, max) or null{_PROBE_FIX}")
    value = probe.get("errors_by_kind")
    if value is not None and not isinstance(value, dict):
        raise ReportError(f"probe.errors_by_kind={value!r:.200} must be a mapping of error kind to count{_PROBE_FIX}")
    value = probe.get("errors")
    if value is not None and (not isinstance(value, list) or not all(isinstance(e, dict) for e in value)):
        raise ReportError(f"probe.errors={value!r:.200} must be a list of the failed requests (mappings with index, "
                          f"kind, status, message){_PROBE_FIX}")
    value = probe.get("per_request")
    if value is not None and not isinstance(value, list):
        raise ReportError(f"probe.per_request={value!r:.200} must be a list of the requests (mappings){_PROBE_FIX}")


def build_report(probe=None, bench=None, slo=None, meta=None):
    """Compare the probe summary and the vllm bench result with the SLOs.

    probe: the registered result of ascendai.vllm.openai_probe (mode bench), or None.
    bench: the JSON that ``vllm bench serve --save-result`` wrote, or None.
    Returns ``{meta, slo, slo_ok, checks, probe, vllm_bench, series}``.
    """
    if probe is None and bench is None:
        raise ReportError("build_report needs the openai_probe result, the vllm bench serve result, or both")
    for name, value in (("probe", probe), ("bench", bench), ("meta", meta)):
        if value is not None and not isinstance(value, dict):
            raise ReportError(f"{name} must be a dict, got {type(value).__name__}")
    slo = normalize_slo(slo)
    checks = []
    series = {}
    probe_out = None
    if probe is not None:
        if "ttft_ms" not in probe or "requests" not in probe:
            raise ReportError("probe is not an openai_probe result in mode bench (no 'ttft_ms'/'requests'); "
                              f"its keys: {sorted(probe)[:12]}")
        _check_probe_shapes(probe)
        probe_out = {key: probe.get(key) for key in PROBE_KEYS}
        stat = slo["ttft_stat"]
        checks.append(_check("openai_probe", "ttft_ms", slo["ttft_ms"], _num((probe.get("ttft_ms") or {}).get(stat)),
                             False, f"TTFT {stat}", "ms"))
        checks.append(_check("openai_probe", "tokens_per_s", slo["tokens_per_s"],
                             _num(probe.get("output_tokens_per_s")), True, "output throughput", "tokens/s"))
        checks.append(_check("openai_probe", "error_rate", slo["max_error_rate"], _num(probe.get("error_rate")),
                             False, "error rate", ""))
        rows = [r for r in probe.get("per_request") or [] if isinstance(r, dict)]
        series["openai_probe"] = [{"index": r.get("index", i), "ttft_ms": _num(r.get("ttft_ms")),
                                   "e2e_ms": _num(r.get("e2e_ms")), "ok": bool(r.get("ok"))}
                                  for i, r in enumerate(rows)]
    bench_out = None
    if bench is not None:
        if "completed" not in bench:
            raise ReportError("bench is not a vllm bench serve result (no 'completed'); "
                              f"its keys: {sorted(bench)[:12]}")
        bench_out = {key: bench.get(key) for key in BENCH_KEYS if key in bench}
        for metric in BENCH_METRICS:
            values = {stat: bench_metric(bench, metric, stat) for stat in STAT_TO_BENCH}
            if any(v is not None for v in values.values()):
                bench_out[f"{metric}_ms"] = values
        completed = _num(bench.get("completed")) or 0
        failed, how = bench_failed(bench)
        bench_out["failed"], bench_out["failed_from"] = failed, how
        total = completed + (failed or 0)
        bench_out["error_rate"] = round(failed / total, 4) if failed is not None and total else None
        stat = slo["ttft_stat"]
        checks.append(_check("vllm_bench", "ttft_ms", slo["ttft_ms"], bench_metric(bench, "ttft", stat),
                             False, f"TTFT {stat}", "ms"))
        checks.append(_check("vllm_bench", "tokens_per_s", slo["tokens_per_s"], _num(bench.get("output_throughput")),
                             True, "output throughput", "tokens/s"))
        checks.append(_check("vllm_bench", "error_rate", slo["max_error_rate"], bench_out["error_rate"],
                             False, "error rate", ""))
        points = bench_series(bench)
        if points:
            series["vllm_bench"] = points
    checks = [c for c in checks if c is not None]
    comparison = compare(probe, bench, meta) if probe is not None and bench is not None else None
    return {"meta": dict(meta or {}), "slo": slo, "slo_ok": all(c["ok"] for c in checks), "checks": checks,
            "violations": [c["message"] for c in checks if not c["ok"]], "probe": probe_out, "vllm_bench": bench_out,
            "comparison": comparison, "series": series}


def _fmt(value, digits=1):
    value = _num(value)
    if value is None:
        return "n/a"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{digits}f}"


def render_markdown(report, plot_file="latency.svg"):
    """A Markdown page for people: verdict, SLO checks, side-by-side metrics, errors, the plot."""
    meta = report.get("meta") or {}
    probe = report.get("probe")
    bench = report.get("vllm_bench")
    slo = report["slo"]
    title = "# vLLM benchmark"
    if meta.get("model"):
        title += f": {meta['model']}"
    if meta.get("host"):
        title += f" on {meta['host']}"
    lines = [title, ""]
    for key in sorted(meta):
        lines.append(f"- **{key}**: {meta[key]}")
    lines += ["", f"**SLO verdict: {'PASS' if report['slo_ok'] else 'FAIL'}** "
              f"(TTFT {slo['ttft_stat']} <= {_fmt(slo['ttft_ms'], 0)} ms, "
              f"output throughput >= {_fmt(slo['tokens_per_s'], 0)} tokens/s, "
              f"error rate <= {_fmt(slo['max_error_rate'], 2)})", ""]
    if report["checks"]:
        lines += ["| Source | SLO | Limit | Measured | Result |", "|---|---|---:|---:|---|"]
        for c in report["checks"]:
            lines.append(f"| {c['source']} | {c['slo']} | {_fmt(c['limit'], 2)} | {_fmt(c['measured'], 2)} | "
                         f"{'ok' if c['ok'] else '**violated**'} |")
        lines.append("")
    comparison = report.get("comparison")
    if comparison:
        gap = comparison.get("gap_pct")
        lines += ["## The two tools side by side", "",
                  "Difference: (openai_probe - vllm bench serve) / vllm bench serve.", "",
                  "| Metric | openai_probe | vllm bench serve | Difference |", "|---|---:|---:|---:|"]
        for row in comparison["rows"]:
            diff = "n/a" if row["diff_pct"] is None else f"{row['diff_pct']:+.1f} %"
            lines.append(f"| {row['metric']} | {_fmt(row['probe'], 2)} | {_fmt(row['vllm_bench'], 2)} | {diff} |")
        lines.append("")
        if gap is not None:
            verdict = "differ by more than" if comparison["gap_over_limit"] else "agree within"
            lines.append(f"Output throughput: the tools {verdict} {GAP_PCT:g} % ({gap:+.1f} %).")
            lines.append("")
        if comparison["notes"]:
            lines += ["Why the figures can differ:", ""] + [f"- {note}" for note in comparison["notes"]] + [""]
    if bench and bench.get("failed_from") not in (None, "failed"):
        lines += [f"vllm bench serve's failed requests are counted from {bench['failed_from']} (this vLLM release's "
                  "result has no 'failed' field).", ""]
    lines += ["## Measurements", "", "| Metric | openai_probe | vllm bench serve |", "|---|---:|---:|"]

    def pget(key, stat=None):
        if not probe:
            return None
        value = probe.get(key)
        return (value or {}).get(stat) if stat else value

    def bget(key, stat=None):
        if not bench:
            return None
        value = bench.get(key)
        return (value or {}).get(stat) if stat else value

    rows = [("Requests completed", pget("succeeded"), bget("completed"), 0),
            ("Requests failed", pget("failed_requests"), bget("failed"), 0),
            ("Duration (s)", pget("duration_s"), bget("duration"), 2),
            ("Output tokens", pget("output_tokens"), bget("total_output_tokens"), 0),
            ("Output throughput (tokens/s)", pget("output_tokens_per_s"), bget("output_throughput"), 1),
            ("Request throughput (req/s)", pget("request_throughput"), bget("request_throughput"), 2)]
    for stat in ("mean", "p50", "p90", "p99"):
        rows.append((f"TTFT {stat} (ms)", pget("ttft_ms", stat), bget("ttft_ms", stat), 1))
    for stat in ("mean", "p50", "p99"):
        rows.append((f"TPOT {stat} (ms)", pget("tpot_ms", stat), bget("tpot_ms", stat), 2))
    for stat in ("mean", "p50", "p99"):
        rows.append((f"End-to-end latency {stat} (ms)", pget("e2e_ms", stat), bget("e2el_ms", stat), 1))
    for label, a, b, digits in rows:
        lines.append(f"| {label} | {_fmt(a, digits)} | {_fmt(b, digits)} |")
    lines.append("")
    if probe and probe.get("token_source") == "chunks":
        lines += ["openai_probe counted one token per streamed chunk (the server sent no usage).", ""]
    if plot_file:
        lines += ["## Latency per request", "", f"![Latency per request]({plot_file})", ""]
    errors = (probe or {}).get("errors") or []
    if errors:
        lines += ["## Errors (openai_probe)", "", "| Request | Kind | HTTP status | Message |", "|---:|---|---:|---|"]
        for e in errors:
            message = str(e.get("message", "")).replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {e.get('index')} | {e.get('kind')} | {e.get('status') or ''} | {message} |")
        lines.append("")
    return "\n".join(lines)


def nice_ceiling(value):
    """The smallest 1, 2, 2.5 or 5 x 10^n at or above value (axis top); 1 for value <= 0."""
    if value is None or value <= 0:
        return 1.0
    exp = math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        top = step * 10 ** exp
        if top >= value * (1 - 1e-12):
            return top
    return 10.0 ** (exp + 1)


SERIES_STYLE = (("openai_probe", "ttft_ms", "#1f77b4", "openai_probe TTFT"),
                ("openai_probe", "e2e_ms", "#aec7e8", "openai_probe end-to-end"),
                ("vllm_bench", "ttft_ms", "#d62728", "vllm bench TTFT"),
                ("vllm_bench", "e2e_ms", "#ff9896", "vllm bench end-to-end"))


def render_svg(report, width=800, height=420):
    """Latency per request (ms) of both tools as points, with the TTFT SLO as a dashed line. Returns SVG text."""
    left, right, top, bottom = 70, 20, 40, 90
    plot_w, plot_h = width - left - right, height - top - bottom
    series = report.get("series") or {}
    slo_ttft = (report.get("slo") or {}).get("ttft_ms")
    points = []
    max_index = 0
    for source, key, color, label in SERIES_STYLE:
        rows = series.get(source) or []
        values = [(i, r.get(key)) for i, r in enumerate(rows) if r.get(key) is not None]
        if values:
            points.append((color, label, values))
            max_index = max(max_index, len(rows) - 1)
    all_values = [v for _c, _l, vals in points for _i, v in vals]
    y_top = nice_ceiling(max(all_values + ([slo_ttft] if slo_ttft else [])) if all_values or slo_ttft else 1.0)
    x_span = max(max_index, 1)

    def x(i):
        return left + plot_w * i / x_span

    def y(v):
        return top + plot_h * (1 - v / y_top)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2:.1f}" y="22" text-anchor="middle" font-size="15">'
           f'{escape("Latency per request (ms)")}</text>']
    for k in range(6):
        v = y_top * k / 5
        out.append(f'<line x1="{left}" y1="{y(v):.1f}" x2="{left + plot_w}" y2="{y(v):.1f}" stroke="#e0e0e0"/>')
        out.append(f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
    out.append(f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="black"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="black"/>')
    ticks = sorted({round(max_index * k / 5) for k in range(6)}) if max_index else [0]
    for i in ticks:
        out.append(f'<text x="{x(i):.1f}" y="{top + plot_h + 16}" text-anchor="middle">{i}</text>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{top + plot_h + 34}" text-anchor="middle">request</text>')
    if not points:
        out.append(f'<text x="{left + plot_w / 2:.1f}" y="{top + plot_h / 2:.1f}" text-anchor="middle">'
                   'no per-request data</text>')
    for color, label, values in points:
        for i, v in values:
            out.append(f'<circle cx="{x(i):.1f}" cy="{y(v):.1f}" r="3" fill="{color}">'
                       f'<title>{escape(label)} #{i}: {v:.1f} ms</title></circle>')
    legend = [(color, label) for color, label, _v in points]
    if slo_ttft:
        out.append(f'<line x1="{left}" y1="{y(slo_ttft):.1f}" x2="{left + plot_w}" y2="{y(slo_ttft):.1f}" '
                   'stroke="#2ca02c" stroke-width="2" stroke-dasharray="6,4"/>')
        legend.append(("#2ca02c", f"TTFT SLO {slo_ttft:g} ms"))
    for n, (color, label) in enumerate(legend):
        lx, ly = left + (n % 3) * (plot_w / 3), height - 36 + (n // 3) * 18
        out.append(f'<rect x="{lx:.1f}" y="{ly - 9}" width="10" height="10" fill="{color}"/>')
        out.append(f'<text x="{lx + 15:.1f}" y="{ly}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


# ``vllm bench serve`` across releases: what the node's vLLM offers is read from its own parser (the playbook
# builds it with ``vllm.benchmarks.serve.add_cli_args`` and hands the option strings and their choices here).
# - 0.8.4 to 0.9.0: ``--endpoint-type openai-comp``, no ``--save-detailed`` (the details are always written)
#   (https://github.com/vllm-project/vllm/blob/v0.8.4/vllm/benchmarks/serve.py#L566-L572);
# - 0.9.1: ``--endpoint-type openai``; 0.9.2 to 0.10.x: ``--endpoint-type`` and ``--backend``; 0.11 on: ``--backend``
#   (https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/benchmarks/serve.py#L880-L895);
# - ``--num-warmups`` from 0.12.0 (https://github.com/vllm-project/vllm/blob/v0.12.0/vllm/benchmarks/serve.py#L1080);
#   every release first sends one initial test request, not measured
#   (https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/benchmarks/serve.py#L518-L547).
# - 0.7.3 has no vllm.benchmarks package: its serve benchmark is benchmarks/benchmark_serving.py of the source
#   tree, not in the wheel (https://github.com/vllm-project/vllm/blob/v0.7.3/benchmarks/benchmark_serving.py);
#   run with ``script`` its flags are those of 0.7.3 (``--backend openai``, no --save-detailed).
LEGACY_SCRIPT_OPTIONS = {"--backend": ["openai"], "--base-url": None, "--model": None, "--tokenizer": None,
                         "--dataset-name": None, "--random-input-len": None, "--random-output-len": None,
                         "--num-prompts": None, "--max-concurrency": None, "--percentile-metrics": None,
                         "--metric-percentiles": None, "--save-result": None, "--result-dir": None,
                         "--result-filename": None, "--disable-tqdm": None, "--ignore-eos": None}
REQUIRED_OPTIONS = ("--base-url", "--model", "--tokenizer", "--dataset-name", "--random-input-len",
                    "--random-output-len", "--num-prompts", "--max-concurrency", "--save-result",
                    "--result-dir", "--result-filename")

# What the settings of vllm_bench_argv hold: text, counts (with the bench role's variable and an example) and the
# optional keys.
BENCH_SETTINGS_TEXT = ("python", "launcher", "base_url", "model", "tokenizer", "result_dir", "result_filename")
BENCH_SETTINGS_COUNTS = {"input_len": ("bench_input_len", 128), "output_len": ("bench_output_len", 128),
                         "requests": ("bench_requests", 50), "concurrency": ("bench_concurrency", 8)}
BENCH_SETTINGS_REQUIRED = ("python", "launcher", "base_url", "model", "tokenizer", "input_len", "output_len",
                           "requests", "concurrency", "result_dir", "result_filename")   # in DOCUMENTATION's order
BENCH_SETTINGS_OPTIONAL = ("script", "warmup", "ignore_eos")
BENCH_SETTINGS_HOLD = (f"the settings dict holds {', '.join(BENCH_SETTINGS_TEXT)} (strings), "
                       f"{', '.join(BENCH_SETTINGS_COUNTS)} (positive integers), and optionally script, warmup and "
                       "ignore_eos (see the bench role's task that calls this filter)")


def _whole(value):
    """``value`` as an int when it is one (or its digits as text), else None; a boolean is no number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def check_bench_settings(info, settings):
    """ReportError naming what is missing or wrong in the inputs of :func:`vllm_bench_argv`, before anything is
    built from them (no value is turned into text or a number it is not)."""
    if not isinstance(info, dict) or not isinstance(settings, dict):
        raise ReportError("pass the detection result (a dict) and settings (a dict), got "
                          f"{type(info).__name__} and {type(settings).__name__}")
    options = info.get("options")
    if options is not None and (not isinstance(options, dict) or not all(
            choices is None or (isinstance(choices, (list, tuple)) and all(isinstance(c, str) for c in choices))
            for choices in options.values())):
        raise ReportError(f"the detection result's options={options!r:.200} must map each option string to its "
                          "choices (or null), as the bench role's detection writes it")
    missing = [key for key in BENCH_SETTINGS_REQUIRED if key not in settings]
    if missing:
        raise ReportError(f"settings lack {', '.join(missing)}; {BENCH_SETTINGS_HOLD}")
    unknown = sorted(set(settings) - set(BENCH_SETTINGS_REQUIRED) - set(BENCH_SETTINGS_OPTIONAL), key=str)
    if unknown:
        raise ReportError(f"settings has unknown keys {', '.join(map(str, unknown))}; {BENCH_SETTINGS_HOLD}")
    for key in BENCH_SETTINGS_TEXT:
        value = settings[key]
        if not isinstance(value, str) or not value.strip():
            raise ReportError(f"settings {key}={value!r:.200} is not a non-empty string; {BENCH_SETTINGS_HOLD}")
    for key, (variable, example) in BENCH_SETTINGS_COUNTS.items():
        value = settings[key]
        number = _whole(value)
        if number is None or number < 1:
            raise ReportError(f"settings {key}={value!r:.200} is not a positive integer ({variable}, e.g. "
                              f"{example})")
    script = settings.get("script")
    if script is not None and not isinstance(script, str):
        raise ReportError(f"settings script={script!r:.200} must be the path of benchmark_serving.py (a string) or "
                          "empty (bench_vllm_serve_script)")
    warmup = settings.get("warmup")
    if warmup not in (None, "") and _whole(warmup) is None:
        raise ReportError(f"settings warmup={warmup!r:.200} is not a whole number of requests (bench_warmup, e.g. 1)")
    ignore_eos = settings.get("ignore_eos")
    if ignore_eos is not None and not isinstance(ignore_eos, bool):
        raise ReportError(f"settings ignore_eos={ignore_eos!r:.200} must be true or false (bench_ignore_eos | bool)")


def vllm_bench_argv(info, settings):
    """The command line that runs the serve benchmark of the node's vLLM with the probe's workload.

    info: what the node's venv offers: ``{vllm, module, options: {option string: choices or None}, error}``.
    settings: ``python``, ``launcher`` (code for ``python -c``), ``script`` (benchmark_serving.py, optional),
    ``base_url``, ``model``, ``tokenizer``, ``input_len``, ``output_len``, ``requests``, ``concurrency``,
    ``warmup``, ``ignore_eos``, ``result_dir``, ``result_filename``.
    Returns ``{argv, warmup, notes}`` (warmup: requests vllm bench sends before measuring); argv is None (and
    notes say why) when this vLLM has no serve benchmark and no script is given; raises ReportError when the
    benchmark lacks an option the workload needs, and (:func:`check_bench_settings`) when a setting is missing or
    not what it must be.
    """
    check_bench_settings(info, settings)
    notes = []
    if info.get("module"):
        options = info.get("options") or {}
        argv = [settings["python"], "-c", settings["launcher"]]
    elif settings.get("script"):
        options = LEGACY_SCRIPT_OPTIONS
        argv = [settings["python"], settings["script"]]
        notes.append(f"vllm bench serve ran from {settings['script']} (this vLLM has no vllm.benchmarks.serve)")
    else:
        return {"argv": None, "warmup": None, "notes": [
            f"vllm bench serve not run: vLLM {info.get('vllm') or '(version unknown)'} in this venv has no "
            f"vllm.benchmarks.serve ({info.get('error') or 'not found'}). Before 0.8.4 the serve benchmark is "
            "benchmarks/benchmark_serving.py of vLLM's source tree, which the wheel does not install: copy that "
            "release's benchmarks/ directory to the node and set bench_vllm_serve_script to its "
            "benchmark_serving.py (it also needs pandas and datasets in the venv)"]}
    missing = [o for o in REQUIRED_OPTIONS if o not in options]
    if missing:
        raise ReportError(f"vllm bench serve of vLLM {info.get('vllm')} lacks {', '.join(missing)}; "
                          "set bench_vllm_serve=false to run only openai_probe")
    for flag in ("--backend", "--endpoint-type"):
        choices = options.get(flag, False)
        if choices is False:
            continue
        pick = next((c for c in ("openai", "openai-comp") if choices is None or c in choices), None)
        if pick:
            argv += [flag, pick]
            break
    else:
        raise ReportError(f"vllm bench serve of vLLM {info.get('vllm')} offers no OpenAI completions backend "
                          "(--backend/--endpoint-type openai or openai-comp)")
    argv += ["--base-url", settings["base_url"], "--model", settings["model"],
             "--tokenizer", settings["tokenizer"], "--dataset-name", "random",
             "--random-input-len", str(_whole(settings["input_len"])),
             "--random-output-len", str(_whole(settings["output_len"])),
             "--num-prompts", str(_whole(settings["requests"])),
             "--max-concurrency", str(_whole(settings["concurrency"]))]
    # --random-range-ratio is left at its default, which gives every prompt exactly input_len tokens in each
    # release: 1.0 with lengths from ratio*N to N up to 0.8.4, 0.0 with (1-ratio)*N to (1+ratio)*N from 0.8.5
    # (https://github.com/vllm-project/vllm/blob/v0.8.4/vllm/benchmarks/serve.py#L79-L92,
    # https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/benchmarks/datasets.py#L482-L489).
    if "--percentile-metrics" in options:
        argv += ["--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99"]
    argv += ["--save-result"]
    if "--save-detailed" in options:
        argv += ["--save-detailed"]
    argv += ["--result-dir", settings["result_dir"], "--result-filename", settings["result_filename"]]
    if "--disable-tqdm" in options:
        argv += ["--disable-tqdm"]
    if settings.get("ignore_eos"):
        argv += ["--ignore-eos"]
    if "--temperature" in options:   # greedy, as openai_probe asks (the default of the releases that have it)
        argv += ["--temperature", "0.0"]
    wanted = _whole(settings.get("warmup") or 0)
    warmup = 1   # the initial test run
    if wanted > 1 and "--num-warmups" in options:
        argv += ["--num-warmups", str(wanted - 1)]
        warmup = wanted
    elif wanted > 1:
        notes.append(f"this vllm bench serve has no --num-warmups: it warms up with its one initial test request, "
                     f"not {wanted}")
    return {"argv": argv, "warmup": warmup, "notes": notes}
