"""Hostile input for every filter and every module_util entry point.

Each call gets generated hostile input: wrong types, NaN/inf/huge numbers, control characters, deep nesting, noise
made of the tokens the parsers look for, and structurally mutated real captures. The suite asserts that

- only the documented error class escapes: AnsibleFilterError from a filter, the module_util's own error class
  from a module_util entry point (never TypeError, ValueError, KeyError, OverflowError, RecursionError ...);
- every call finishes within BOUND_S (a SIGALRM stops a hang and fails the example);
- a parser fed a mutated real capture (a line deleted, repeated, cut, two lines swapped, the text cut) either
  refuses it, or gives the same plausible result, or says so in a note.

Budget: the unit stage runs this in well under a minute on 2 busy cores (max_examples below); Hypothesis'
own deadline is off because a loaded CI machine makes it flaky: the alarm is the bound.
"""

from __future__ import annotations

import glob
import importlib
import inspect
import json
import math
import os
import signal
import struct
import time
from contextlib import contextmanager

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils import (
    _ascend_driver_plan as ascend_driver_plan,
    _ascend_packages as ascend_packages,
    _bench_report as bench_report,
    _bundle as bundle,
    _compat_matrix as compat_matrix,
    _diagnose as diagnose,
    _hccn as hccn,
    _host_pfc as host_pfc,
    _kv_cache as kv_cache,
    _model_config as model_config,
    _model_fetch as model_fetch,
    _npu_smi as npu_smi,
    _openai_probe as openai_probe,
    _quant_tools as quant_tools,
    _roce_qos as roce_qos,
    _safetensors_convert as safetensors_convert,
    _service_env as service_env,
    _vllm_options as vllm_options,
)

# the nested-bracket strings make Hypothesis warn about long reprs of failing examples; that is expected here
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
FIXTURES = os.path.join(HERE, "fixtures")
BOUND_S = 5.0
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.function_scoped_fixture])


class Hang(BaseException):
    """Raised by the alarm: a BaseException so that no ``except Exception`` in the code under test hides it."""


@contextmanager
def bounded(seconds=BOUND_S):
    def on_alarm(_signum, _frame):
        raise Hang(f"call still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


RAISED = object()


def call(fn, allowed, *args, **kwargs):
    """``fn(*args, **kwargs)``; an ``allowed`` exception gives RAISED, anything else propagates."""
    start = time.monotonic()
    try:
        with bounded():
            try:
                return fn(*args, **kwargs)
            except allowed as exc:
                assert str(exc).strip(), f"{type(exc).__name__} without a message"
                return RAISED
    finally:
        elapsed = time.monotonic() - start
        assert elapsed < BOUND_S, f"{getattr(fn, '__name__', fn)} took {elapsed:.1f} s"


# --------------------------------------------------------------------------- strategies

TOKENS = [
    "|", "+", "-", "=", ":", ",", ";", "/", " / ", "\n", "\r\n", "\t", " ", "  ", "\x00", "\x1b[31m", "\u2026", "...",
    "NPU", "Name", "Health", "Chip", "Bus-Id", "HBM-Usage(MB)", "Phy-ID", "Device", "OK", "Alarm", "NA", "N/A",
    "0000:C1:00.0", "3418 / 65536", "910B2", "Ascend910", "npu-smi 25.2.0", "Version: 25.2.0", "Process id",
    "No running processes found in NPU 3", "[WARNING]", "ret is -8005", "dcmi module initialize failed",
    "Invalid card id.", "ipaddr:10.0.0.1", "netmask:255.255.255.0", "gateway:", "link status: UP",
    "net health status: Success", "mtu:9000", "pfc:", "dscp", "tc", "api_key", "VLLM_API_KEY=", "Bearer ",
    "Authorization: Basic ", "https://user:pass@host/", "{", "}", "[", "]", '"', "'", "1e400", "NaN", "Infinity",
    "-1", "0", "99999999999999999999999999999", "2.9", "true", "null", "version=", "8.3.RC2", "25.2.0", "[V100R001C15]",
    "data: ", "[DONE]", '{"choices": []}', "sha256", "a" * 64, "  models/tiny/config.json", "../", "/etc/passwd",
]
noise = st.lists(st.sampled_from(TOKENS) | st.text(max_size=6), max_size=40).map("".join)
texts = st.one_of(st.text(max_size=200), noise, st.sampled_from(["", " ", "\n", "\x00", "\ud7ff" * 3]))
numbers = st.one_of(
    st.integers(), st.integers(min_value=-10**40, max_value=10**40), st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1, 2**31, 2**63, 10**100, 0.5, 2.9, -0.0, float("nan"), float("inf"), float("-inf")]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
hostile = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=5), st.dictionaries(st.one_of(texts, st.sampled_from(
        ["model", "dtype", "api_key", "hidden_size", "num_attention_heads", "num_hidden_layers", "head_dim",
         "num_key_value_heads", "architectures", "torch_dtype", "dscp", "priority", "traffic_class", "pfc",
         "ip", "address", "netmask", "gateway", "mtu", "tensor_parallel_size", "max_model_len", "port"])),
        inner, max_size=5)),
    max_leaves=12,
)
deep = st.integers(min_value=200, max_value=3000).map(lambda n: "[" * n + "]" * n)
anything = st.one_of(hostile, deep)


# --------------------------------------------------------------------------- every filter


def _filters():
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "plugins", "filter", "*.py"))):
        name = os.path.basename(path)[:-3]
        if name.startswith("_"):
            continue
        mod = importlib.import_module(f"ansible_collections.ascendai.vllm.plugins.filter.{name}")
        for fname, fn in sorted(mod.FilterModule().filters().items()):
            found.append(pytest.param(fname, fn, id=fname))
    return found


FILTERS = _filters()

# Plausible shapes with hostile values inside, so that the filters get past their first type check.
_config = st.dictionaries(st.sampled_from(["hidden_size", "num_attention_heads", "num_hidden_layers", "head_dim",
                                           "num_key_value_heads", "vocab_size", "intermediate_size", "torch_dtype",
                                           "architectures", "model_type", "max_position_embeddings",
                                           "kv_lora_rank", "qk_rope_head_dim", "text_config"]),
                          st.one_of(numbers, texts, st.lists(texts, max_size=2)), max_size=10)
_cidr = st.one_of(st.builds(lambda a, b, c, d, p: f"{a}.{b}.{c}.{d}/{p}", *[st.integers(0, 255)] * 4,
                            st.integers(0, 32)), texts)
PLAUSIBLE = {
    "kv_cache_plan": st.tuples(_config, st.dictionaries(st.sampled_from(
        ["dtype", "tensor_parallel_size", "hbm_gib_per_npu", "gpu_memory_utilization", "max_model_len",
         "max_num_seqs", "kv_cache_dtype", "block_size", "reserved_gib"]), scalars, max_size=5)),
    "model_config_check": st.tuples(_config, st.one_of(numbers, texts)),
    "hccn_plan": st.tuples(st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=4),
                           st.lists(_cidr, min_size=1, max_size=4), st.one_of(numbers, texts),
                           st.one_of(st.none(), st.sampled_from(["first", "last"]), numbers, texts)),
    "roce_qos": st.tuples(st.dictionaries(st.sampled_from(["dscp", "priority", "traffic_class", "pfc", "ecn",
                                                           "prio_tc", "dscp_to_tc", "headroom"]), scalars, max_size=5),
                          st.sampled_from(["policy", "hccl_env", "hccn", "host_nic", "switch", "check", "x"])),
    "service_env": st.tuples(st.dictionaries(texts, scalars, max_size=4), st.one_of(st.none(), texts, numbers)),
    "vllm_config": st.tuples(st.dictionaries(st.sampled_from(["tensor_parallel_size", "max_model_len", "port",
                                                              "api_key", "dtype", "enforce_eager", "x y", "a\nb"]),
                                             scalars, max_size=5)),
    "diagnose_redact": st.tuples(texts),
    "parse_npu_smi": st.tuples(texts),
}


def _args(draw, name, fn):
    """Positional arguments (and sometimes keyword ones) for ``fn``: plausible-with-hostile-values or hostile."""
    if name in PLAUSIBLE and draw(st.booleans()):
        drawn = list(draw(PLAUSIBLE[name]))
        if name == "kv_cache_plan":  # kv_cache_plan(config_json, **options)
            return drawn[:1], drawn[1]
        return drawn, {}
    params = list(inspect.signature(fn).parameters.values())
    args, kwargs = [], {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is p.empty:
            args.append(draw(anything))
        elif draw(st.integers(0, 3)) == 0:
            kwargs[p.name] = draw(hostile)
    return args, kwargs


@pytest.mark.parametrize("name,fn", FILTERS)
@SETTINGS
@given(data=st.data())
def test_every_filter_raises_only_ansible_filter_error(name, fn, data):
    args, kwargs = _args(data.draw, name, fn)
    call(fn, AnsibleFilterError, *args, **kwargs)


def test_the_suite_covers_the_filters_of_the_collection():
    names = {p.values[0] for p in FILTERS}
    assert {"parse_npu_smi", "hccn_plan", "kv_cache_plan", "model_config_check", "roce_qos", "service_env",
            "diagnose_redact", "vllm_config"} <= names


# --------------------------------------------------------------------------- module_util entry points


ENTRY_POINTS = [
    # (id, callable taking the drawn values, strategies, the documented error class)
    ("npu_smi.parse_info", npu_smi.parse_info, (texts,), npu_smi.NpuSmiParseError),
    ("npu_smi.summarize", lambda t: npu_smi.summarize(npu_smi.parse_info(t)), (texts,), npu_smi.NpuSmiParseError),
    ("npu_smi.parse_info_m", npu_smi.parse_info_m, (texts,), npu_smi.NpuSmiParseError),
    ("npu_smi.parse_board", npu_smi.parse_board, (texts,), npu_smi.NpuSmiParseError),
    ("npu_smi.parse_memory", npu_smi.parse_memory, (texts,), npu_smi.NpuSmiParseError),
    ("npu_smi.parse_usages", npu_smi.parse_usages, (texts,), npu_smi.NpuSmiParseError),
    ("npu_smi.parse_common", npu_smi.parse_common, (texts,), npu_smi.NpuSmiParseError),
    ("npu_smi.parse_health", npu_smi.parse_health, (texts,), npu_smi.NpuSmiParseError),
    ("npu_smi.classify_error", npu_smi.classify_error, (texts, texts, st.one_of(st.none(), st.integers(-300, 300))),
     npu_smi.NpuSmiParseError),
    ("hccn.parsers", lambda which, t: getattr(hccn, which)(t),
     (st.sampled_from(["parse_ip", "parse_gateway", "parse_netdetect", "parse_link", "parse_net_health",
                       "parse_mtu", "parse_pfc", "parse_prio_tc", "parse_dscp_to_tc", "parse_tls", "parse_lldp",
                       "parse_ping", "parse_hccn_conf"]), texts), hccn.HccnError),
    ("hccn.normalize", lambda which, v: getattr(hccn, which)(v),
     (st.sampled_from(["normalize_pfc", "normalize_prio_tc", "normalize_dscp_to_tc", "normalize_wanted"]), anything),
     hccn.HccnError),
    ("hccn.plan_changes", hccn.plan_changes, (anything, st.one_of(st.none(), st.dictionaries(
        st.sampled_from(["address", "netmask", "gateway", "mtu", "pfc"]), scalars)), st.dictionaries(
        st.sampled_from(["address", "netmask", "gateway", "netdetect", "mtu", "pfc", "prio_tc", "dscp_to_tc", "tls"]),
        scalars, max_size=4)), hccn.HccnError),
    ("hccn.plan_addresses", hccn.plan_addresses, (anything, anything), hccn.HccnError),
    ("host_pfc.parsers", lambda which, t: getattr(host_pfc, which)(t),
     (st.sampled_from(["parse_dcb_pfc", "parse_dcb_app_dscp", "parse_mlnx_qos", "dscp_value"]), texts),
     host_pfc.HostPfcError),
    ("kv_cache.plan", kv_cache.plan, (_config,), kv_cache.PlanError),
    ("model_config.check_model_config", model_config.check_model_config, (_config, scalars), model_config.ConfigError),
    ("diagnose.redact", diagnose.redact, (texts,), diagnose.DiagnoseError),
    ("diagnose.match", diagnose.match, (st.one_of(texts, st.lists(texts, max_size=3), hostile),),
     diagnose.DiagnoseError),
    ("roce_qos.normalize_policy", roce_qos.normalize_policy, (anything,), roce_qos.RoceQosError),
    ("roce_qos.cloudengine_config", roce_qos.cloudengine_config, (hostile, hostile), roce_qos.RoceQosError),
    ("roce_qos.check_consistency", roce_qos.check_consistency, (hostile, hostile), roce_qos.RoceQosError),
    ("service_env.service_env", service_env.service_env, (anything, scalars), service_env.ServiceEnvError),
    ("bundle.parse_manifest", bundle.parse_manifest, (texts,), bundle.FetchError),
    ("model_fetch.model_entries", lambda t, m: model_fetch.model_entries(bundle.parse_manifest(t), m),
     (texts, texts), bundle.FetchError),
    ("bundle.select", lambda t, f, p: bundle.select(bundle.parse_manifest(t), f, p),
     (texts, st.lists(texts, max_size=3), st.one_of(st.none(), texts)), bundle.BundleError),
    ("bundle.format_manifest", bundle.format_manifest, (st.dictionaries(texts, texts, max_size=4),),
     bundle.BundleError),
    ("safetensors_convert.parse_size", safetensors_convert.parse_size, (anything,), safetensors_convert.ConvertError),
    ("ascend_packages.versions", lambda which, a, b: getattr(ascend_packages, which)(a, b),
     (st.sampled_from(["compare_versions", "version_in_ranges"]), texts, texts), ascend_packages.AscendVersionError),
    ("ascend_packages.parse", lambda which, t: getattr(ascend_packages, which)(t),
     (st.sampled_from(["parse_ranges", "parse_kv", "cann_generation"]), texts), ascend_packages.AscendVersionError),
    ("ascend_driver_plan.install_sequence", ascend_driver_plan.install_sequence, (anything, anything),
     ascend_driver_plan.PlanError),
    ("ascend_driver_plan.reboot_plan", ascend_driver_plan.reboot_plan, (anything,), ascend_driver_plan.PlanError),
    ("openai_probe.interpret_event", openai_probe.interpret_event, (texts,), openai_probe.ProbeError),
    # documented: "raises ValueError when unreadable" (the body of a server's /v1/models)
    ("openai_probe.served_model_ids", openai_probe.served_model_ids, (st.one_of(texts, deep, st.binary()),),
     ValueError),
    ("bench_report.normalize_slo", bench_report.normalize_slo, (anything,), bench_report.ReportError),
    ("bench_report.build_report", bench_report.build_report, (anything, anything), bench_report.ReportError),
    ("vllm_options.render_config", vllm_options.render_config, (anything,), vllm_options.OptionError),
    ("quant_tools.quant_plan", quant_tools.quant_plan, (anything, texts, texts, texts, texts),
     quant_tools.QuantToolError),
    # documented: "Raises ValueError when the string is not a version" (a user's vllm_ascend_version)
    ("compat_matrix.find_row", compat_matrix.find_row, (anything,), ValueError),
    ("compat_matrix.check_combination", lambda a, c, p, g: compat_matrix.check_combination(
        vllm_ascend=a, cann=c, python=p, glibc=g), (anything, anything, anything, anything), ValueError),
    ("compat_matrix.default_release", compat_matrix.default_release,
     (anything, st.one_of(st.none(), st.lists(texts, max_size=3)), anything), ValueError),
]


@pytest.mark.parametrize("name,fn,strategies,error", [pytest.param(*e, id=e[0]) for e in ENTRY_POINTS])
@SETTINGS
@given(data=st.data())
def test_every_module_util_entry_point_raises_only_its_error(name, fn, strategies, error, data):
    args = [data.draw(s) for s in strategies]
    call(fn, error, *args)


def test_the_suite_covers_every_module_util_error_class():
    """Each module_util that documents an error class has at least one entry point above."""
    covered = {e[3] for e in ENTRY_POINTS}
    for path in sorted(glob.glob(os.path.join(ROOT, "plugins", "module_utils", "*.py"))):
        name = os.path.basename(path)[:-3].lstrip("_")
        mod = importlib.import_module(f"ansible_collections.ascendai.vllm.plugins.module_utils._{name}")
        errors = [v for v in vars(mod).values() if inspect.isclass(v) and issubclass(v, Exception)
                  and v.__module__ == mod.__name__ and not issubclass(v, (TimeoutError,))]
        roots = [e for e in errors if not any(issubclass(e, o) and e is not o for o in errors)]
        if name in ("openai_probe", "bundle", "safetensors_convert", "kv_cache", "npu_smi", "hccn",
                    "host_pfc", "model_config", "diagnose", "roce_qos", "service_env", "ascend_packages",
                    "ascend_driver_plan", "bench_report", "vllm_options"):
            assert any(r in covered for r in roots), f"{name}: no entry point of {roots} in ENTRY_POINTS"


# --------------------------------------------------------------------------- safetensors headers


_small = st.one_of(st.integers(0, 8), st.integers(0, 8), st.integers(0, 40),
                   st.sampled_from([-1, 2**64, 2**70, 1e400, 2.0, float("nan"), "4", None, True]))
_tensor = st.fixed_dictionaries({"dtype": st.sampled_from(["F32", "F16", "BF16", "I64", "U8", "F33", "", 7]),
                                 "shape": st.one_of(st.lists(_small, max_size=3), _small),
                                 "data_offsets": st.one_of(st.lists(_small, min_size=2, max_size=2),
                                                           st.lists(_small, max_size=3))})
_headers = st.dictionaries(st.sampled_from(["a", "b", "c", "__metadata__"]), _tensor, max_size=3)


@settings(SETTINGS, max_examples=200)
@given(header=st.one_of(_headers.map(json.dumps), _headers.map(json.dumps), hostile.map(json.dumps), texts),
       length=st.one_of(st.none(), st.none(), st.integers(0, 2**64 - 1)), data=st.binary(max_size=64))
def test_read_header_raises_only_convert_error(tmp_path_factory, header, length, data):
    path = os.path.join(str(tmp_path_factory.getbasetemp()), "hostile.safetensors")
    raw = header.encode("utf-8", "surrogatepass")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    out = call(safetensors_convert.read_header, safetensors_convert.ConvertError, path)
    if out is not RAISED:
        tensors, _meta, start, size = out
        at = start
        for t in tensors:  # what the safetensors library requires of an accepted file
            assert t["begin"] == at and t["dtype"] in safetensors_convert.ITEMSIZE
            at = t["end"]
        assert at == size


# --------------------------------------------------------------------------- mutated real captures


def _load(name):
    with open(os.path.join(FIXTURES, "npu-smi", name), encoding="utf-8") as handle:
        return "\n".join(x for x in handle.read().split("\n") if not x.startswith("# "))


CAPTURES = [_load(n) for n in (
    "npu-smi-info-910b2-8card-idle-vllm-ascend-issue3906.txt",
    "npu-smi-info-910b4-4card-busy-with-procs-vllm-ascend-issue843.txt",
    "npu-smi-info-a3-ascend910-8npu-16die-busy-with-procs-vllm-ascend-issue3002.txt",
    "npu-smi-info-310p3-300i-duo-1card-2chip-nvtop-issue421-partial.txt",
    "npu-smi-info-910b4-1card-wide-format-v26-triton-ascend-faq.txt",
)]


def _facts(summary):
    return (summary["count"], summary["chip_count"], sorted(summary["npu_ids"]), summary["hbm_total_mb"],
            summary["hbm_used_mb"])


@st.composite
def mutated(draw):
    text = draw(st.sampled_from(CAPTURES))
    lines = text.split("\n")
    kind = draw(st.sampled_from(["delete", "repeat", "cut_line", "swap", "cut_text"]))
    i = draw(st.integers(0, len(lines) - 1))
    j = draw(st.integers(0, len(lines) - 1))
    if kind == "delete":
        lines = lines[:i] + lines[i + 1:]
    elif kind == "repeat":
        lines = lines[:i + 1] + [lines[i]] + lines[i + 1:]
    elif kind == "cut_line":
        lines[i] = lines[i][:draw(st.integers(0, max(len(lines[i]) - 1, 0)))]
    elif kind == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    else:
        return text, text[:draw(st.integers(0, len(text)))]
    return text, "\n".join(lines)


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(pair=mutated())
def test_a_mutated_capture_is_refused_noted_or_unchanged(pair):
    original, text = pair
    want = _facts(npu_smi.summarize(npu_smi.parse_info(original)))
    info = call(npu_smi.parse_info, npu_smi.NpuSmiParseError, text)
    if info is RAISED:
        return
    got = npu_smi.summarize(info)
    assert got["notes"] or got["inconsistent"] or _facts(got) == want, (
        f"{_facts(got)} instead of {want} without a note")


# --------------------------------------------------------------------------- numbers never truncated


@SETTINGS
@given(tp=st.floats(min_value=1.01, max_value=64, allow_nan=False).filter(lambda x: not float(x).is_integer()))
def test_fractional_tensor_parallel_size_is_refused_not_truncated(tp):
    config = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
              "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 32000}
    out = call(model_config.check_model_config, model_config.ConfigError, config, tp)
    assert out is RAISED or not math.isfinite(tp)
