"""The bench_report filter on a real run (tests/unit/fixtures/bench: openai_probe's result and vllm bench serve
0.32.0's --save-result JSON of the same sandbox run) and on vLLM 0.11.0's result format."""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.bench_report import FilterModule

bench_report = FilterModule().filters()["bench_report"]

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "bench")


def text(name):
    with open(os.path.join(BENCH, name), encoding="utf-8") as handle:
        return handle.read()


@pytest.fixture
def probe():
    return json.loads(text("openai-probe-sandbox.json"))


def test_real_run_passes_the_guide_slos(probe):
    raw = text("vllm-0.32.0-sandbox.json")       # JSON text, as read from the file without from_json
    bench = json.loads(raw)
    out = bench_report(probe, bench=raw, meta={"host": "sandbox"})
    report = out["report"]
    # DOCUMENTATION's defaults: TTFT p90 <= 350 ms, >= 1200 output tokens/s, no failed request
    assert report["slo"] == {"ttft_ms": 350.0, "ttft_stat": "p90", "tokens_per_s": 1200.0, "max_error_rate": 0.0}
    measured = {(c["source"], c["slo"]): c["measured"] for c in report["checks"]}
    assert measured == {
        ("openai_probe", "ttft_ms"): probe["ttft_ms"]["p90"],
        ("openai_probe", "tokens_per_s"): probe["output_tokens_per_s"],
        ("openai_probe", "error_rate"): probe["error_rate"],
        ("vllm_bench", "ttft_ms"): bench["p90_ttft_ms"],
        ("vllm_bench", "tokens_per_s"): bench["output_throughput"],
        ("vllm_bench", "error_rate"): bench["failed"] / (bench["completed"] + bench["failed"]),
    }
    assert report["slo_ok"] is True and report["violations"] == []
    # --save-detailed per-request latencies (seconds) become the plotted series (ms)
    series = report["series"]["vllm_bench"]
    assert len(series) == bench["num_prompts"]
    assert [p["e2e_ms"] for p in series] == pytest.approx([s * 1000.0 for s in bench["latencies"]])
    assert [p["ttft_ms"] for p in series] == pytest.approx([s * 1000.0 for s in bench["ttfts"]])
    assert out["markdown"].startswith("# vLLM benchmark on sandbox")
    assert "SLO verdict: PASS" in out["markdown"] and "latency.svg" in out["markdown"]
    assert ET.fromstring(out["svg"]).tag == "{http://www.w3.org/2000/svg}svg"


def test_a_stricter_throughput_slo_fails_vllm_bench_only(probe):
    out = bench_report(probe, bench=json.loads(text("vllm-0.32.0-sandbox.json")), slo={"tokens_per_s": 2000},
                       plot_file="run1.svg")
    # probe 2471.6 tokens/s >= 2000, vllm bench serve 1727.0 < 2000
    assert out["report"]["violations"] == ["vllm_bench: output throughput 1727.0 tokens/s < 2000 tokens/s"]
    assert out["report"]["slo_ok"] is False
    assert "SLO verdict: FAIL" in out["markdown"] and "run1.svg" in out["markdown"]


def test_skipped_probe_and_a_0_11_result_without_failed():
    bench = json.loads(text("vllm-0.11.0.json"))
    out = bench_report({"skipped": True, "changed": False}, bench=bench)
    report = out["report"]
    assert report["probe"] is None
    # 0.11.0 writes no 'failed': 6 prompts, 5 completed -> 1 failed, error rate 1/6
    assert (bench["num_prompts"], bench["completed"]) == (6, 5)
    assert report["vllm_bench"]["failed"] == 1
    assert report["vllm_bench"]["error_rate"] == pytest.approx(1 / 6, abs=1e-4)
    assert report["violations"] == ["vllm_bench: output throughput 40.0 tokens/s < 1200 tokens/s",
                                    "vllm_bench: error rate 0.167 > 0"]


@pytest.mark.parametrize("probe_in,kwargs,needle", [
    ("P", {"bench": "not json {"}, r"bench is not JSON \(.*\): 'not json \{'"),
    (None, {}, "needs the openai_probe result, the vllm bench serve result, or both"),
    ({}, {"bench": ""}, "needs the openai_probe result"),
    ("P", {"slo": {"ttft": 300}}, r"slo has unknown keys \['ttft'\]"),
    ("P", {"slo": {"ttft_stat": "p95"}}, "slo.ttft_stat='p95': use one of mean, p50, p90, p99"),
    ("P", {"slo": {"tokens_per_s": "fast"}}, "slo.tokens_per_s='fast' is not a number"),
    ({"requests": 3, "ttft": 1}, {}, r"probe is not an openai_probe result in mode bench"),
    ("P", {"bench": [1, 2]}, "bench must be a dict, got list"),
    ("P", {"bench": {"num_prompts": 4}}, r"bench is not a vllm bench serve result \(no 'completed'\)"),
])
def test_bad_input_is_named(probe, probe_in, kwargs, needle):
    with pytest.raises(AnsibleFilterError, match=rf"^bench_report: .*{needle}"):
        bench_report(probe if probe_in == "P" else probe_in, **kwargs)


@pytest.mark.parametrize("key,value,needle", [
    ("ttft_ms", "fast", r"probe\.ttft_ms='fast' must be the statistics openai_probe writes \(a mapping of min, mean, "
                        r"p50, p90, p99, max\) or null"),
    ("e2e_ms", [1, 2], r"probe\.e2e_ms=\[1, 2\] must be the statistics"),
    ("tpot_ms", 7, r"probe\.tpot_ms=7 must be the statistics"),
    ("tokens_per_s", True, r"probe\.tokens_per_s=True must be the statistics"),
    ("errors_by_kind", ["timeout"], r"probe\.errors_by_kind=\['timeout'\] must be a mapping of error kind to count"),
    ("errors", "HTTP 500", r"probe\.errors='HTTP 500' must be a list of the failed requests \(mappings with index, "
                           r"kind, status, message\)"),
    ("errors", [1], r"probe\.errors=\[1\] must be a list of the failed requests"),
    ("per_request", 7, r"probe\.per_request=7 must be a list of the requests \(mappings\)"),
])
def test_a_probe_field_of_the_wrong_shape_is_named(probe, key, value, needle):
    # before the fix these escaped as AttributeError/TypeError ('str' object has no attribute 'get')
    with pytest.raises(AnsibleFilterError, match=rf"^bench_report: {needle}.*; pass the registered result of "
                                                 r"ascendai\.vllm\.openai_probe \(mode bench\) unchanged$"):
        bench_report(dict(probe, **{key: value}))


def test_a_bench_text_that_is_not_json_is_named_once_with_the_fix(probe):
    with pytest.raises(AnsibleFilterError) as err:
        bench_report(probe, bench="not json {")
    message = str(err.value)
    assert message.endswith("pass the file that vllm bench serve --save-result wrote, read with from_json"), message
    assert message.count("Expecting value") == 1
