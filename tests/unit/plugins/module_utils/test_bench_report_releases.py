"""The bench role and its report on every vLLM release's vllm bench serve.

The result files under tests/unit/fixtures/bench/ follow each release's writing code (see their README.md);
the launcher is run against each release's module layout taken from the committed sdist extracts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile

import pytest
import yaml
from ansible_collections.ascendai.vllm.plugins.module_utils._bench_report import (
    bench_failed,
    bench_series,
    build_report,
    compare,
    render_markdown,
    vllm_bench_argv,
)
from ansible_collections.ascendai.vllm.plugins.module_utils._openai_probe import random_token_prompts

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
BENCH = os.path.join(ROOT, "tests", "unit", "fixtures", "bench")
RELEASES = os.path.join(ROOT, "tests", "unit", "fixtures", "vllm-releases")
BENCH_VARS = os.path.join(ROOT, "roles", "bench", "vars", "main.yml")


def load(name):
    with open(os.path.join(BENCH, name), encoding="utf-8") as f:
        return json.load(f)


def probe(tokens_per_s=32.0, input_tokens=4 * 128, input_len=128, succeeded=4, output_tokens=64, failed=0):
    return {"requests": succeeded + failed, "succeeded": succeeded, "failed_requests": failed,
            "error_rate": failed / (succeeded + failed), "output_tokens": output_tokens, "input_tokens": input_tokens,
            "input_len": input_len, "warmup_requests": 1, "token_source": "usage", "output_tokens_per_s": tokens_per_s,
            "request_throughput": 2.0, "duration_s": 2.0, "ttft_ms": {"mean": 230.0, "p50": 230.0, "p90": 247.0},
            "tpot_ms": {"mean": 50.0}, "e2e_ms": {"p50": 980.0}, "per_request": []}


# ------------------------------------------------------------------------------------------- failed requests
def test_error_rate_of_a_0_11_detailed_result_counts_its_errors():
    bench = load("vllm-0.11.0-save-detailed.json")
    assert "failed" not in bench            # 0.11 writes no 'failed'
    assert bench_failed(bench) == (2, "errors")
    report = build_report(bench=bench, slo={"max_error_rate": 0.0})
    assert report["vllm_bench"]["error_rate"] == pytest.approx(2 / 6, abs=1e-4)
    assert not report["slo_ok"]
    assert any("vllm_bench: error rate 0.333" in v for v in report["violations"])


def test_error_rate_of_a_0_11_result_without_details_is_num_prompts_less_completed():
    bench = load("vllm-0.11.0.json")
    assert "errors" not in bench and "failed" not in bench
    assert bench_failed(bench) == (1, "num_prompts - completed")
    report = build_report(bench=bench)
    assert report["vllm_bench"]["error_rate"] == pytest.approx(1 / 6, abs=1e-4)
    assert "counted from num_prompts - completed" in render_markdown(report)


def test_failed_as_written_from_0_12():
    bench = dict(load("vllm-0.11.0.json"), failed=3)
    assert bench_failed(bench) == (3, "failed")


# ------------------------------------------------------------------------------------------- per-request series
@pytest.mark.parametrize("name", ["vllm-0.8.4.json", "vllm-0.11.0-save-detailed.json"])
def test_end_to_end_latency_without_latencies_is_ttft_plus_itls(name):
    bench = load(name)
    assert "latencies" not in bench          # only 0.32 writes it
    points = bench_series(bench)
    assert [p["ok"] for p in points] == [True, True, False, True, True, False]
    assert points[0]["e2e_ms"] == pytest.approx((0.21 + 15 * 0.05) * 1000.0)
    assert points[2]["e2e_ms"] is None and points[2]["ttft_ms"] is None
    report = build_report(bench=bench)
    assert report["series"]["vllm_bench"][1]["e2e_ms"] == pytest.approx(1000.0)


def test_0_8_4_result_reads_completely():
    report = build_report(probe=probe(), bench=load("vllm-0.8.4.json"), meta={"concurrency": 2})
    assert report["vllm_bench"]["failed"] == 2 and report["vllm_bench"]["ttft_ms"]["p90"] == 247.0
    assert report["comparison"]["gap_pct"] == 0.0


# ------------------------------------------------------------------------------------------- side by side
def test_side_by_side_shows_the_difference_in_percent():
    report = build_report(probe=probe(tokens_per_s=36.0), bench=load("vllm-0.11.0-save-detailed.json"),
                          meta={"concurrency": 2})
    row = report["comparison"]["rows"][0]
    assert (row["probe"], row["vllm_bench"], row["diff_pct"]) == (36.0, 32.0, 12.5)
    text = render_markdown(report)
    assert "| Output throughput (tokens/s) | 36.00 | 32.00 | +12.5 % |" in text
    assert "differ by more than 10 % (+12.5 %)" in text


def test_a_gap_with_no_known_cause_says_so():
    comp = compare(probe(tokens_per_s=50.0, succeeded=6, input_tokens=768, output_tokens=96),
                   dict(load("vllm-0.11.0.json"), completed=6, total_input_tokens=768, total_output_tokens=96),
                   {"concurrency": 2})
    assert comp["gap_over_limit"]
    assert len(comp["notes"]) == 1 and "cause is not known" in comp["notes"][0]


def test_a_text_prompt_against_random_prompts_is_named_as_the_cause():
    comp = compare(probe(tokens_per_s=50.0, input_tokens=4 * 6, input_len=None), load("vllm-0.11.0.json"),
                   {"concurrency": 2})
    assert any("openai_probe sent its text prompt (6 tokens)" in n and "128 tokens" in n for n in comp["notes"])
    assert not any("cause is not known" in n for n in comp["notes"])


def test_retokenized_prompts_are_named_as_the_cause():
    bench = dict(load("vllm-0.11.0.json"), total_input_tokens=5 * 150)
    comp = compare(probe(tokens_per_s=50.0, succeeded=5, input_tokens=5 * 128, output_tokens=80), bench,
                   {"concurrency": 2})
    assert any("prompt tokens per request differ: openai_probe 128.0, vllm bench serve 150.0" in n
               for n in comp["notes"])


# ------------------------------------------------------------------------------------------- same workload
def test_probe_prompts_have_exactly_input_len_token_ids_and_differ():
    prompts = random_token_prompts(50, 128, 32000, seed=0)
    assert len(prompts) == 50 and {len(p) for p in prompts} == {128}
    assert all(0 <= t < 32000 for p in prompts for t in p)
    assert len({tuple(p[:8]) for p in prompts}) == 50          # no shared prefix for the prefix cache
    assert random_token_prompts(3, 4, 10, seed=1) == random_token_prompts(3, 4, 10, seed=1)
    with pytest.raises(ValueError, match="vocab_size"):
        random_token_prompts(1, 4, None)


SETTINGS = {"python": "/venv/bin/python", "launcher": "CODE", "script": "", "base_url": "http://127.0.0.1:8000",
            "model": "deepseek", "tokenizer": "/models/x", "input_len": 128, "output_len": 64, "requests": 50,
            "concurrency": 8, "warmup": 1, "ignore_eos": True, "result_dir": "/tmp/r",
            "result_filename": "vllm-bench.json"}
COMMON = {o: None for o in ("--base-url", "--model", "--tokenizer", "--dataset-name", "--random-input-len",
                            "--random-output-len", "--num-prompts", "--max-concurrency", "--percentile-metrics",
                            "--metric-percentiles", "--save-result", "--result-dir", "--result-filename",
                            "--disable-tqdm", "--ignore-eos", "--random-range-ratio")}
# The options of each release's parser that differ (vllm/benchmarks/serve.py add_cli_args of each sdist).
OPTIONS = {
    "0.8.4": dict(COMMON, **{"--endpoint-type": ["openai-comp", "openai-chat"]}),
    "0.9.1": dict(COMMON, **{"--endpoint-type": ["vllm", "openai", "openai-chat"], "--save-detailed": None}),
    "0.11.0": dict(COMMON, **{"--backend": ["vllm", "openai"], "--endpoint-type": ["vllm", "openai"],
                              "--save-detailed": None, "--temperature": None}),
    "0.12.0": dict(COMMON, **{"--backend": ["vllm", "openai"], "--save-detailed": None, "--temperature": None,
                              "--num-warmups": None}),
}


def flag(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.mark.parametrize("release,backend,detailed", [("0.8.4", ("--endpoint-type", "openai-comp"), False),
                                                      ("0.9.1", ("--endpoint-type", "openai"), True),
                                                      ("0.11.0", ("--backend", "openai"), True),
                                                      ("0.12.0", ("--backend", "openai"), True)])
def test_argv_follows_the_release(release, backend, detailed):
    out = vllm_bench_argv({"vllm": release, "module": True, "options": OPTIONS[release]}, SETTINGS)
    argv = out["argv"]
    assert argv[:3] == ["/venv/bin/python", "-c", "CODE"]
    assert flag(argv, backend[0]) == backend[1]
    assert ("--save-detailed" in argv) is detailed
    assert (flag(argv, "--random-input-len"), flag(argv, "--random-output-len"), flag(argv, "--num-prompts"),
            flag(argv, "--max-concurrency")) == ("128", "64", "50", "8")
    assert "--ignore-eos" in argv and "--random-range-ratio" not in argv    # each release's default: fixed length
    assert out["warmup"] == 1 and "--num-warmups" not in argv


def test_more_warmup_uses_num_warmups_where_the_release_has_it():
    out = vllm_bench_argv({"module": True, "options": OPTIONS["0.12.0"]}, dict(SETTINGS, warmup=3))
    assert flag(out["argv"], "--num-warmups") == "2" and out["warmup"] == 3
    out = vllm_bench_argv({"module": True, "options": OPTIONS["0.11.0"]}, dict(SETTINGS, warmup=3))
    assert "--num-warmups" not in out["argv"] and out["warmup"] == 1 and "no --num-warmups" in out["notes"][0]


def test_0_7_3_has_no_serve_benchmark_module():
    info = {"vllm": "0.7.3", "module": False, "error": "ModuleNotFoundError: No module named 'vllm.benchmarks'"}
    out = vllm_bench_argv(info, SETTINGS)
    assert out["argv"] is None and "benchmark_serving.py" in out["notes"][0]
    out = vllm_bench_argv(info, dict(SETTINGS, script="/opt/vllm-src/benchmarks/benchmark_serving.py"))
    assert out["argv"][:2] == ["/venv/bin/python", "/opt/vllm-src/benchmarks/benchmark_serving.py"]
    assert flag(out["argv"], "--backend") == "openai" and "--save-detailed" not in out["argv"]


# ------------------------------------------------------------------------------------------- the launcher
def _layout(archive):
    with tarfile.open(os.path.join(RELEASES, archive)) as tar:
        return "vllm/utils/argparse_utils.py" in tar.getnames()


@pytest.mark.parametrize("archive", sorted(a for a in os.listdir(RELEASES) if a.endswith(".tar.xz")))
def test_launcher_imports_the_parser_in_every_release_layout(archive, tmp_path):
    """FlexibleArgumentParser is in vllm/utils/argparse_utils.py from 0.12, in vllm.utils before (the sdists)."""
    with open(BENCH_VARS, encoding="utf-8") as f:
        launcher = yaml.safe_load(f)["_bench_vllm_serve_launcher"]
    pkg = tmp_path / "vllm"
    (pkg / "utils").mkdir(parents=True)
    (pkg / "benchmarks").mkdir()
    (pkg / "__init__.py").write_text("")
    parser_src = "import argparse\nclass FlexibleArgumentParser(argparse.ArgumentParser):\n    pass\n"
    if _layout(archive):
        (pkg / "utils" / "__init__.py").write_text("")
        (pkg / "utils" / "argparse_utils.py").write_text(parser_src)
    else:
        (pkg / "utils" / "__init__.py").write_text(parser_src)
    (pkg / "benchmarks" / "__init__.py").write_text("")
    (pkg / "benchmarks" / "serve.py").write_text(
        "def add_cli_args(parser):\n    parser.add_argument('--num-prompts', type=int)\n"
        "def main(args):\n    print('RAN', args.num_prompts)\n")
    run = subprocess.run([sys.executable, "-c", launcher, "--num-prompts", "7"], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(tmp_path)), timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "RAN 7"


# ------------------------------------------------------------------------------------------- real sandbox run
def test_real_0_32_run_latency_is_ttft_plus_itls():
    """On a real 0.32 result the derivation used for older releases gives 0.32's own 'latencies'."""
    bench = load("vllm-0.32.0-sandbox.json")
    with_latencies = bench_series(bench)
    derived = bench_series({k: v for k, v in bench.items() if k != "latencies"})
    assert len(derived) == 40
    for a, b in zip(with_latencies, derived):
        assert b["e2e_ms"] == pytest.approx(a["e2e_ms"], abs=0.05)


def test_real_sandbox_run_side_by_side():
    probe_run, bench = load("openai-probe-sandbox.json"), load("vllm-0.32.0-sandbox.json")
    report = build_report(probe=probe_run, bench=bench, meta={"concurrency": 8, "warmup (vllm bench)": 1})
    assert report["vllm_bench"]["failed"] == 0 and report["vllm_bench"]["failed_from"] == "failed"
    comp = report["comparison"]
    assert comp["rows"][0]["probe"] == probe_run["output_tokens_per_s"]
    assert comp["rows"][0]["vllm_bench"] == bench["output_throughput"]
    assert comp["gap_pct"] == pytest.approx((probe_run["output_tokens_per_s"] / bench["output_throughput"] - 1) * 100,
                                            abs=0.05)
    # same workload: 128 prompt tokens (vllm bench's re-encoded text: 5138 for 40), 128 out, 40 requests, 8 at once
    assert not any("differ:" in n for n in comp["notes"])
    assert "## The two tools side by side" in render_markdown(report)
