"""The vllm_bench_argv filter: the probe's workload on the flags of each vLLM release as DOCUMENTATION lists them
(--endpoint-type openai-comp 0.8.4 to 0.9.0, --endpoint-type openai 0.9.1, --backend openai from 0.9.2,
--save-detailed from 0.9.1, --num-warmups from 0.12), and the errors that name the input."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.vllm_bench_argv import FilterModule

vllm_bench_argv = FilterModule().filters()["vllm_bench_argv"]

# the workload of the sandbox run in tests/unit/fixtures/bench/vllm-0.32.0-sandbox.json: 40 requests, 8 at once,
# 128 tokens in and out
SETTINGS = {"python": "/opt/ascendai/venvs/vllm/bin/python", "launcher": "import runpy  # launcher",
            "base_url": "http://127.0.0.1:8000", "model": "tiny-deepseek",
            "tokenizer": "/opt/ascendai/models/tiny-deepseek", "input_len": 128, "output_len": 128, "requests": 40,
            "concurrency": 8, "warmup": 1, "ignore_eos": True, "result_dir": "/tmp/bench",
            "result_filename": "vllm-bench.json"}
COMMON = ["--base-url", "--model", "--tokenizer", "--dataset-name", "--random-input-len", "--random-output-len",
          "--num-prompts", "--max-concurrency", "--percentile-metrics", "--metric-percentiles", "--save-result",
          "--result-dir", "--result-filename", "--disable-tqdm", "--ignore-eos"]


def options(*extra, **choices):
    out = dict.fromkeys(COMMON + list(extra))
    out.update({f"--{key.replace('_', '-')}": value for key, value in choices.items()})
    return out


RELEASES = {
    "0.8.4": options(endpoint_type=["openai-comp", "openai-chat"]),
    "0.9.1": options("--save-detailed", endpoint_type=["vllm", "openai", "openai-chat"]),
    "0.11.0": options("--save-detailed", "--temperature", backend=["vllm", "openai"]),
    "0.12.0": options("--save-detailed", "--temperature", "--num-warmups", backend=["vllm", "openai"]),
}


def flags(argv):
    """``--flag value`` pairs and lone ``--flag`` switches of an argv, as a dict."""
    out, i = {}, 0
    while i < len(argv):
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[argv[i]] = argv[i + 1]
            i += 2
        else:
            out[argv[i]] = True
            i += 1
    return out


WORKLOAD = {"--base-url": "http://127.0.0.1:8000", "--model": "tiny-deepseek",
            "--tokenizer": "/opt/ascendai/models/tiny-deepseek", "--dataset-name": "random",
            "--random-input-len": "128", "--random-output-len": "128", "--num-prompts": "40",
            "--max-concurrency": "8", "--percentile-metrics": "ttft,tpot,itl,e2el", "--metric-percentiles": "50,90,99",
            "--save-result": True, "--result-dir": "/tmp/bench", "--result-filename": "vllm-bench.json",
            "--disable-tqdm": True, "--ignore-eos": True}


@pytest.mark.parametrize("release,backend,extra", [
    ("0.8.4", {"--endpoint-type": "openai-comp"}, {}),
    ("0.9.1", {"--endpoint-type": "openai"}, {"--save-detailed": True}),
    ("0.11.0", {"--backend": "openai"}, {"--save-detailed": True, "--temperature": "0.0"}),
    ("0.12.0", {"--backend": "openai"}, {"--save-detailed": True, "--temperature": "0.0"}),
])
def test_each_release_gets_its_own_flags(release, backend, extra):
    out = vllm_bench_argv({"vllm": release, "module": True, "options": RELEASES[release]}, SETTINGS)
    assert out["argv"][:3] == [SETTINGS["python"], "-c", SETTINGS["launcher"]]
    assert flags(out["argv"][3:]) == {**backend, **WORKLOAD, **extra}
    assert out["warmup"] == 1 and out["notes"] == []


def test_more_warmup_requests():
    settings = dict(SETTINGS, warmup=3)
    out = vllm_bench_argv({"vllm": "0.12.0", "module": True, "options": RELEASES["0.12.0"]}, settings)
    # the initial test request counts as one warm-up: --num-warmups 2 makes three
    assert flags(out["argv"])["--num-warmups"] == "2" and out["warmup"] == 3
    out = vllm_bench_argv({"vllm": "0.11.0", "module": True, "options": RELEASES["0.11.0"]}, settings)
    assert "--num-warmups" not in out["argv"] and out["warmup"] == 1
    assert out["notes"] == ["this vllm bench serve has no --num-warmups: it warms up with its one initial test "
                            "request, not 3"]


def test_0_7_3_runs_the_source_trees_script_or_nothing():
    info = {"vllm": "0.7.3", "module": False, "error": "ModuleNotFoundError: No module named 'vllm.benchmarks'"}
    out = vllm_bench_argv(info, SETTINGS)
    assert out["argv"] is None and out["warmup"] is None
    assert "vLLM 0.7.3" in out["notes"][0] and "No module named 'vllm.benchmarks'" in out["notes"][0]
    script = "/opt/vllm-0.7.3/benchmarks/benchmark_serving.py"
    out = vllm_bench_argv(info, dict(SETTINGS, script=script))
    assert out["argv"][:2] == [SETTINGS["python"], script]
    assert flags(out["argv"][2:]) == {"--backend": "openai", **WORKLOAD}


HOLD = ("the settings dict holds python, launcher, base_url, model, tokenizer, result_dir, result_filename "
        "(strings), input_len, output_len, requests, concurrency (positive integers), and optionally script, "
        "warmup and ignore_eos (see the bench role's task that calls this filter)")


@pytest.mark.parametrize("info,settings,start,end", [
    (["0.11.0"], SETTINGS, "vllm_bench_argv: pass the detection result (a dict) and settings (a dict), got list "
                           "and dict", ""),
    ({"module": True, "options": RELEASES["0.11.0"]}, "python", "vllm_bench_argv: pass the detection result",
     "got dict and str"),
    ({"module": True, "options": RELEASES["0.11.0"]}, {k: v for k, v in SETTINGS.items() if k != "python"},
     "vllm_bench_argv: settings lack python; " + HOLD, ""),
    ({"module": True, "options": RELEASES["0.11.0"]},
     {k: v for k, v in SETTINGS.items() if k not in ("model", "result_dir")},
     "vllm_bench_argv: settings lack model, result_dir; " + HOLD, ""),
    ({"module": False}, {}, "vllm_bench_argv: settings lack python, launcher, base_url, model, tokenizer, input_len, "
                            "output_len, requests, concurrency, result_dir, result_filename; " + HOLD, ""),
    ({"module": True, "options": RELEASES["0.11.0"]}, dict(SETTINGS, warmups=3),
     "vllm_bench_argv: settings has unknown keys warmups; " + HOLD, ""),
    ({"module": True, "options": RELEASES["0.11.0"]}, dict(SETTINGS, input_len="long"),
     "vllm_bench_argv: settings input_len='long' is not a positive integer (bench_input_len, e.g. 128)", ""),
    ({"module": True, "options": RELEASES["0.11.0"]}, dict(SETTINGS, requests=0),
     "vllm_bench_argv: settings requests=0 is not a positive integer (bench_requests, e.g. 50)", ""),
    ({"module": True, "options": RELEASES["0.11.0"]}, dict(SETTINGS, concurrency=True),
     "vllm_bench_argv: settings concurrency=True is not a positive integer", ""),
    ({"module": True, "options": RELEASES["0.11.0"]}, dict(SETTINGS, output_len=12.5),
     "vllm_bench_argv: settings output_len=12.5 is not a positive integer", ""),
    ({"module": True, "options": RELEASES["0.11.0"]}, dict(SETTINGS, warmup="two"),
     "vllm_bench_argv: settings warmup='two' is not a whole number of requests (bench_warmup, e.g. 1)", ""),
    ({"module": True, "options": RELEASES["0.11.0"]}, dict(SETTINGS, model=None),
     "vllm_bench_argv: settings model=None is not a non-empty string", ""),
    ({"module": True, "options": RELEASES["0.11.0"]}, dict(SETTINGS, tokenizer=["/opt/tok"]),
     "vllm_bench_argv: settings tokenizer=['/opt/tok'] is not a non-empty string", ""),
    ({"module": False}, dict(SETTINGS, script=7),
     "vllm_bench_argv: settings script=7 must be the path of benchmark_serving.py (a string) or empty", ""),
    ({"module": True, "options": RELEASES["0.11.0"]}, dict(SETTINGS, ignore_eos="false"),
     "vllm_bench_argv: settings ignore_eos='false' must be true or false", ""),
    ({"vllm": "0.11.0", "module": True, "options": ["--model", "--base-url"]}, SETTINGS,
     "vllm_bench_argv: the detection result's options=['--model', '--base-url'] must map each option string to its "
     "choices (or null)", ""),
    ({"vllm": "0.8.0", "module": True, "options": {"--model": None}}, SETTINGS,
     "vllm_bench_argv: vllm bench serve of vLLM 0.8.0 lacks --base-url, ",
     "set bench_vllm_serve=false to run only openai_probe"),
    ({"vllm": "0.9.9", "module": True, "options": options(backend=["vllm", "tgi"])}, SETTINGS,
     "vllm_bench_argv: vllm bench serve of vLLM 0.9.9 offers no OpenAI completions backend", ""),
])
def test_bad_input_is_named(info, settings, start, end):
    with pytest.raises(AnsibleFilterError) as err:
        vllm_bench_argv(info, settings)
    message = str(err.value)
    assert message.startswith(start) and message.endswith(end), message
