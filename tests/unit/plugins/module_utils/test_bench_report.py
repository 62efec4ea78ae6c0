"""Benchmark report: SLO checks, Markdown and SVG from an openai_probe result and a real vllm bench serve result."""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.bench_report import bench_report
from ansible_collections.ascendai.vllm.plugins.module_utils._bench_report import (
    ReportError,
    build_report,
    nice_ceiling,
    normalize_slo,
    render_markdown,
    render_svg,
)
from hypothesis import given
from hypothesis import strategies as st

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "bench_report", "vllm-bench-serve-0.32-fake.json")
SVG_NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture
def bench():
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


def probe_result(ttfts=(120.0, 180.0, 400.0), e2es=(900.0, 950.0, 1300.0), tokens_per_s=1500.0, failed=0):
    """A registered openai_probe result (mode bench), with the keys Ansible adds."""
    per_request = [{"index": i, "ok": True, "ttft_ms": t, "e2e_ms": e} for i, (t, e) in enumerate(zip(ttfts, e2es))]
    per_request += [{"index": len(ttfts) + i, "ok": False, "ttft_ms": None, "e2e_ms": 3.0} for i in range(failed)]
    n = len(per_request)
    return {"changed": False, "failed": False, "invocation": {"module_args": {"api_key": "VALUE_SPECIFIED_IN_NO_LOG"}},
            "mode": "bench", "model": "tiny", "endpoint": "/v1/completions", "requests": n,
            "succeeded": len(ttfts), "failed_requests": failed, "error_rate": round(failed / n, 4),
            "errors_by_kind": {"http": failed} if failed else {},
            "errors": [{"index": len(ttfts), "kind": "http", "status": 500, "message": "HTTP 500 Internal | Error",
                        "body": "{}"}] if failed else [],
            "duration_s": 2.0, "output_tokens": int(tokens_per_s * 2), "token_source": "usage",
            "output_tokens_per_s": tokens_per_s, "request_throughput": 1.5,
            "ttft_ms": {"mean": sum(ttfts) / len(ttfts), "p50": sorted(ttfts)[len(ttfts) // 2], "p90": max(ttfts) - 1,
                        "p99": max(ttfts), "min": min(ttfts), "max": max(ttfts), "count": len(ttfts)},
            "e2e_ms": {"mean": 1000.0, "p50": 950.0, "p90": 1250.0, "p99": 1295.0, "count": len(ttfts)},
            "tpot_ms": {"mean": 12.5, "p50": 12.0, "p99": 20.0}, "tokens_per_s": {"mean": 60.0},
            "per_request": per_request}


def test_probe_and_real_vllm_bench_against_guide_slos(bench):
    report = build_report(probe_result(), bench, meta={"host": "atlas-1", "model": "tiny"})
    assert report["slo"] == {"ttft_ms": 350.0, "tokens_per_s": 1200.0, "ttft_stat": "p90", "max_error_rate": 0.0}
    checks = {(c["source"], c["slo"]): c for c in report["checks"]}
    # probe: p90 TTFT 399 ms > 350 violates, 1500 tokens/s passes
    assert checks[("openai_probe", "ttft_ms")]["ok"] is False
    assert checks[("openai_probe", "ttft_ms")]["message"] == "openai_probe: TTFT p90 399.0 ms > 350 ms"
    assert checks[("openai_probe", "tokens_per_s")]["ok"] is True
    # vllm bench (the fixture): p90 TTFT from the file, 185 tokens/s < 1200
    assert checks[("vllm_bench", "ttft_ms")]["measured"] == bench["p90_ttft_ms"]
    assert checks[("vllm_bench", "ttft_ms")]["ok"] is True
    assert checks[("vllm_bench", "tokens_per_s")]["measured"] == bench["output_throughput"]
    assert checks[("vllm_bench", "tokens_per_s")]["ok"] is False
    assert checks[("vllm_bench", "error_rate")]["measured"] == 0.0
    assert report["slo_ok"] is False
    assert report["violations"] == [checks[("openai_probe", "ttft_ms")]["message"],
                                    checks[("vllm_bench", "tokens_per_s")]["message"]]
    assert report["vllm_bench"]["ttft_ms"] == {"mean": bench["mean_ttft_ms"], "p50": bench["median_ttft_ms"],
                                               "p90": bench["p90_ttft_ms"], "p99": bench["p99_ttft_ms"]}
    assert report["vllm_bench"]["completed"] == 6 and "generated_texts" not in report["vllm_bench"]
    # per-request series: probe in ms, vllm bench converted from seconds
    assert [p["ttft_ms"] for p in report["series"]["openai_probe"]] == [120.0, 180.0, 400.0]
    assert [p["ttft_ms"] for p in report["series"]["vllm_bench"]] == pytest.approx([t * 1000 for t in bench["ttfts"]])
    assert "invocation" not in report["probe"] and "per_request" not in report["probe"]
    json.dumps(report)  # what the playbook writes


def test_slo_overrides_and_disabled_checks(bench):
    report = build_report(probe_result(), bench, slo={"ttft_ms": 500, "tokens_per_s": None, "ttft_stat": "p99"})
    assert [c["slo"] for c in report["checks"]] == ["ttft_ms", "error_rate", "ttft_ms", "error_rate"]
    assert report["slo_ok"] is True
    assert report["checks"][0]["measured"] == 400.0 and report["checks"][2]["measured"] == bench["p99_ttft_ms"]


def test_errors_make_the_verdict_fail_and_show_in_markdown():
    report = build_report(probe_result(failed=1, ttfts=(100.0,), e2es=(500.0,)), None)
    assert report["vllm_bench"] is None and report["slo_ok"] is False
    assert report["violations"] == ["openai_probe: error rate 0.500 > 0"]
    md = render_markdown(report)
    assert "**SLO verdict: FAIL**" in md
    assert "| 1 | http | 500 | HTTP 500 Internal \\| Error |" in md
    assert "| openai_probe | error_rate | 0.00 | 0.50 | **violated** |" in md


def test_markdown_side_by_side(bench):
    md = render_markdown(build_report(probe_result(), bench, meta={"host": "atlas-1", "model": "tiny"}))
    assert md.startswith("# vLLM benchmark: tiny on atlas-1\n")
    assert "- **host**: atlas-1" in md
    assert "**SLO verdict: FAIL** (TTFT p90 <= 350 ms, output throughput >= 1200 tokens/s, error rate <= 0.00)" in md
    assert f"| TTFT p90 (ms) | 399.0 | {bench['p90_ttft_ms']:.1f} |" in md
    assert f"| Output throughput (tokens/s) | 1500.0 | {bench['output_throughput']:.1f} |" in md
    assert f"| End-to-end latency p99 (ms) | 1295.0 | {bench['p99_e2el_ms']:.1f} |" in md
    assert f"| Requests completed | 3 | {bench['completed']} |" in md
    assert "![Latency per request](latency.svg)" in md


def test_markdown_without_bench_says_na():
    md = render_markdown(build_report(probe_result(), None), plot_file=None)
    assert "| TTFT p50 (ms) | 180.0 | n/a |" in md and "![" not in md


def test_svg_is_valid_and_places_points(bench):
    report = build_report(probe_result(), bench)
    root = ET.fromstring(render_svg(report, width=800, height=420))
    assert root.tag == SVG_NS + "svg" and root.get("width") == "800"
    circles = root.findall(f"{SVG_NS}circle")
    # 3 probe TTFT + 3 probe e2e + 6 bench TTFT + 6 bench e2e
    assert len(circles) == 18
    titles = [c.find(f"{SVG_NS}title").text for c in circles]
    assert "openai_probe TTFT #2: 400.0 ms" in titles
    # y axis tops at 1300 -> nice ceiling 2000; plot area from y=40 to y=330 (420 - 90)
    top_circle = [c for c in circles if c.find(f"{SVG_NS}title").text == "openai_probe end-to-end #2: 1300.0 ms"][0]
    assert float(top_circle.get("cy")) == pytest.approx(40 + 290 * (1 - 1300 / 2000), abs=0.1)
    slo_line = [ln for ln in root.findall(f"{SVG_NS}line") if ln.get("stroke-dasharray")][0]
    assert float(slo_line.get("y1")) == pytest.approx(40 + 290 * (1 - 350 / 2000), abs=0.1)
    legend = [t.text for t in root.findall(f"{SVG_NS}text")]
    assert "TTFT SLO 350 ms" in legend and "vllm bench TTFT" in legend


def test_svg_without_points_still_renders():
    report = build_report(dict(probe_result(), per_request=[]), None, slo={"ttft_ms": None})
    root = ET.fromstring(render_svg(report))
    assert root.findall(f"{SVG_NS}circle") == []
    assert "no per-request data" in [t.text for t in root.findall(f"{SVG_NS}text")]


@given(st.floats(min_value=1e-3, max_value=1e7, allow_nan=False))
def test_nice_ceiling_is_tight(value):
    top = nice_ceiling(value)
    assert top >= value * (1 - 1e-9)
    assert top <= value * 2.5 + 1e-9
    mantissa = top / 10 ** int(f"{top:e}".split("e")[1])
    assert round(mantissa, 6) in (1.0, 2.0, 2.5, 5.0)


def test_bad_inputs_name_the_problem():
    with pytest.raises(ReportError, match="needs the openai_probe result"):
        build_report(None, None)
    with pytest.raises(ReportError, match="not a vllm bench serve result"):
        build_report(None, {"foo": 1})
    with pytest.raises(ReportError, match=re.escape("slo has unknown keys ['ttft']")):
        normalize_slo({"ttft": 3})
    with pytest.raises(ReportError, match="slo.ttft_stat='p95'"):
        normalize_slo({"ttft_stat": "p95"})
    with pytest.raises(ReportError, match="slo.tokens_per_s='fast' is not a number"):
        normalize_slo({"tokens_per_s": "fast"})


def test_filter_returns_three_forms_and_accepts_json_text(bench):
    out = bench_report(probe_result(), bench=json.dumps(bench), meta={"host": "h"})
    assert set(out) == {"report", "markdown", "svg"}
    assert out["report"]["vllm_bench"]["completed"] == 6
    assert out["svg"].startswith("<svg") and out["markdown"].startswith("# vLLM benchmark on h")
    skipped = bench_report({"changed": False, "skipped": True, "skip_reason": "Conditional result was False"},
                           bench=bench)
    assert skipped["report"]["probe"] is None and skipped["report"]["vllm_bench"]["completed"] == 6
    with pytest.raises(AnsibleFilterError, match="bench_report: bench is not JSON"):
        bench_report(probe_result(), bench="{oops")
    with pytest.raises(AnsibleFilterError, match="bench_report: slo has unknown keys"):
        bench_report(probe_result(), slo={"x": 1})
