# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Benchmark report: openai_probe results + ``vllm bench serve`` result JSON -> SLO verdict, JSON, Markdown, SVG.

Standard library only. The latency plot is an SVG written here (no matplotlib on the controller).
"""

from __future__ import annotations

import math
from xml.sax.saxutils import escape

PROBE_KEYS = ("requests", "succeeded", "failed_requests", "error_rate", "errors_by_kind", "errors", "duration_s",
              "output_tokens", "token_source", "output_tokens_per_s", "request_throughput", "ttft_ms", "e2e_ms",
              "tpot_ms", "tokens_per_s", "model", "endpoint")
# Scalars kept from the vllm bench serve result (lists such as ttfts/itls are reduced to the plot series).
BENCH_KEYS = ("date", "backend", "model_id", "tokenizer_id", "num_prompts", "max_concurrency", "request_rate",
              "duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
              "output_throughput", "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests")
BENCH_METRICS = ("ttft", "tpot", "itl", "e2el")
STAT_TO_BENCH = {"mean": "mean", "p50": "median", "p90": "p90", "p99": "p99"}
DEFAULT_SLO = {"ttft_ms": 350.0, "tokens_per_s": 1200.0, "ttft_stat": "p90", "max_error_rate": 0.0}


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
        failed = _num(bench.get("failed")) or 0
        bench_out["error_rate"] = round(failed / (completed + failed), 4) if completed + failed else None
        stat = slo["ttft_stat"]
        checks.append(_check("vllm_bench", "ttft_ms", slo["ttft_ms"], bench_metric(bench, "ttft", stat),
                             False, f"TTFT {stat}", "ms"))
        checks.append(_check("vllm_bench", "tokens_per_s", slo["tokens_per_s"], _num(bench.get("output_throughput")),
                             True, "output throughput", "tokens/s"))
        checks.append(_check("vllm_bench", "error_rate", slo["max_error_rate"], bench_out["error_rate"],
                             False, "error rate", ""))
        ttfts, latencies = bench.get("ttfts"), bench.get("latencies")
        if isinstance(ttfts, list) and ttfts:
            lat = latencies if isinstance(latencies, list) and len(latencies) == len(ttfts) else [None] * len(ttfts)
            series["vllm_bench"] = [{"index": i, "ttft_ms": None if not _num(t) else _num(t) * 1000.0,
                                     "e2e_ms": None if not _num(e) else _num(e) * 1000.0, "ok": bool(_num(t))}
                                    for i, (t, e) in enumerate(zip(ttfts, lat))]
    checks = [c for c in checks if c is not None]
    return {"meta": dict(meta or {}), "slo": slo, "slo_ok": all(c["ok"] for c in checks), "checks": checks,
            "violations": [c["message"] for c in checks if not c["ok"]], "probe": probe_out, "vllm_bench": bench_out,
            "series": series}


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
