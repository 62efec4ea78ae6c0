"""Tests for module_utils/_vllm_options.py (node-side check: tests/unit/plugins/modules/test_vllm_config_file.py)."""

from __future__ import annotations

import argparse
import json
import os

import pytest
from ansible_collections.ascendai.vllm.plugins.module_utils import _vllm_options as vo
from hypothesis import given
from hypothesis import strategies as st

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def test_render_kebab_keys_model_first_none_left_out():
    config = vo.render_config(
        {"max_model_len": 4096, "tensor-parallel-size": 4, "enable_prefix_caching": False, "seed": None,
         "compilation_config": {"cudagraph_mode": "FULL_DECODE_ONLY"}},
        model="/srv/models/deepseek-llm-67b-chat", served_model_name="deepseek-67b")
    # false becomes no-X: true even on vLLM 0.32: under `vllm serve` the CLI's top-level parser reads the file and
    # does not know --no-enable-prefix-caching (it is the serve sub-parser's), so it would drop the false
    assert list(config) == ["model", "served-model-name", "max-model-len", "tensor-parallel-size",
                            "no-enable-prefix-caching", "compilation-config"]
    assert config["no-enable-prefix-caching"] is True
    assert config["compilation-config"] == {"cudagraph_mode": "FULL_DECODE_ONLY"}


@pytest.mark.parametrize(("name", "fragment"), [
    ("swap_space", "swap_space (--swap-space) is removed in vLLM 0.18.0; use nothing"),
    ("device", "device (--device) is removed in vLLM 0.10.0; use nothing: the platform is detected"),
    ("worker_use_ray", "worker_use_ray (--worker-use-ray) is not an option of current vLLM; use "
                       "distributed_executor_backend: ray"),
    ("adapter", "vllm-ascend is a platform plugin"),
    ("num_gpus_per_worker", "tensor_parallel_size / pipeline_parallel_size"),
    ("api_key", "VLLM_API_KEY"),
])
def test_removed_and_secret_options_say_what_instead(name, fragment):
    with pytest.raises(vo.OptionError) as info:
        vo.render_config({name: 1})
    assert fragment in str(info.value)


def test_swap_space_kept_for_an_old_vllm():
    assert vo.render_config({"swap_space": 4}, vllm_version="0.17.1") == {"swap-space": 4}
    with pytest.raises(vo.OptionError, match="removed in vLLM 0.18.0"):
        vo.render_config({"swap_space": 4}, vllm_version="0.18.0")


def test_unknown_option_suggests_and_can_be_allowed():
    with pytest.raises(vo.OptionError, match=r"max_model_length is not a vLLM 0\.32\.0 option; did you mean "
                                             r"max_model_len\?"):
        vo.render_config({"max_model_length": 4096})
    assert vo.render_config({"brand_new_flag": True}, allow_unknown=True) == {"brand-new-flag": True}


def test_all_errors_reported_at_once():
    with pytest.raises(vo.OptionError) as info:
        vo.render_config({"swap_space": 4, "device": "npu", "max_model_len": [{"a": 1}], "Bad Key": 1})
    text = str(info.value)
    for fragment in ("swap_space", "device (--device)", "max_model_len: list items", "'Bad Key' is not an option"):
        assert fragment in text


def test_duplicate_spellings_rejected():
    with pytest.raises(vo.OptionError, match="max_model_len is given twice"):
        vo.render_config({"max_model_len": 1, "max-model-len": 2})


def test_option_names_in_one_place():
    assert "max_model_len" in vo.KNOWN_OPTIONS
    assert not set(vo.REMOVED_OPTIONS) & vo.KNOWN_OPTIONS
    assert "api_key" not in vo.KNOWN_OPTIONS
    assert all(name == name.lower() and "-" not in name for name in vo.KNOWN_OPTIONS)


@given(st.lists(st.sampled_from(sorted(vo.KNOWN_OPTIONS - {"model", "served_model_name"})), max_size=8, unique=True))
def test_known_names_round_trip(names):
    kinds = vo.release_options(vo.REFERENCE_VLLM_VERSION)
    config = vo.render_config({name: True if kinds[name] in "fbs" else 1 for name in names})
    assert [vo.snake(key) for key in config] == names
    assert all("_" not in key for key in config)


def _fake_vllm_parser():
    """A parser shaped like vLLM's: abbreviations allowed, BooleanOptionalAction, JSON and nargs options."""
    parser = argparse.ArgumentParser(prog="api_server")
    parser.add_argument("--model")
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    parser.add_argument("--compilation-config", type=json.loads)
    parser.add_argument("--dtype", choices=["auto", "float16", "bfloat16"])
    return parser


def test_config_to_argv_like_vllm_loader():
    parser = _fake_vllm_parser()
    config = {"served-model-name": ["a", "b"], "enable-prefix-caching": False, "enforce-eager": False,
              "compilation-config": {"level": 3}, "max-model-len": 4096, "lora-modules": []}
    argv = vo.config_to_argv(config, has_option=lambda opt: opt in parser._option_string_actions)
    assert argv == ["--served-model-name", "a", "b", "--no-enable-prefix-caching", "--compilation-config",
                    '{"level": 3}', "--max-model-len", "4096"]


def test_validate_with_parser_accepts_rendered_config():
    parser = _fake_vllm_parser()
    config = vo.render_config({"max_model_len": 2048, "enable_prefix_caching": False, "dtype": "float16",
                               "compilation_config": {"level": 3}}, model="/m", served_model_name="tiny")
    assert vo.validate_with_parser(config, parser) == []
    namespace = parser.parse_args(vo.config_to_argv(config, lambda opt: opt in parser._option_string_actions))
    assert namespace.enable_prefix_caching is False
    assert namespace.compilation_config == {"level": 3}
    assert namespace.served_model_name == ["tiny"]


def test_validate_with_parser_rejects_abbreviation_and_bad_values():
    parser = _fake_vllm_parser()
    # argparse alone would take --enforce as --enforce-eager.
    assert parser.parse_args(["--enforce"]).enforce_eager is True
    assert vo.validate_with_parser({"enforce": True}, parser) == ["enforce: not an option of this vLLM (--enforce)"]
    problems = vo.validate_with_parser({"swap-space": 4}, parser)
    assert problems[0].startswith("swap-space: not an option of this vLLM (--swap-space); swap_space (--swap-space)"
                                  " is removed in vLLM 0.18.0")
    problems = vo.validate_with_parser({"max-model-len": "lots"}, parser)
    assert problems == ["api_server: error: argument --max-model-len: invalid int value: 'lots'"]
    problems = vo.validate_with_parser({"dtype": "half16"}, parser)
    assert "invalid choice: 'half16'" in problems[0]
    assert vo.validate_with_parser(["not", "a", "mapping"], parser) == ["the config must be a mapping, got list"]


@pytest.mark.parametrize(("node", "table"), [
    # exact match first: 0.10.1 and 0.10.1.1 are two releases with two tables
    ("0.10.1", "0.10.1"), ("0.10.1+empty", "0.10.1"), ("0.10.1.1", "0.10.1.1"), ("0.10.1.1+cpu", "0.10.1.1"),
    ("0.8.5.post1", "0.8.5.post1"), ("0.32.0+cpu", "0.32.0"),
    # else the newest table at or before it in PEP 440 order
    ("0.10.1.2", "0.10.1.1"), ("0.10.1.1.post1", "0.10.1.1"), ("0.23.0.post1", "0.23.0"), ("0.17.1", "0.17.0"),
    # a pre-release sorts before its final release (vllm-ascend v0.11.0rc0 runs on vLLM 0.11.0rc3)
    ("0.11.0rc3", "0.10.2"), ("0.11.0.dev5", "0.10.2"), ("0.8.5", "0.8.4"),
])
def test_release_lookup_is_exact_first_then_pep440(node, table):
    assert vo.release_for(node) == table


def test_release_lookup_for_0101_reads_the_0101_table():
    # the two tables differ; the lookup of the older one must not return the newer one's
    assert vo.release_options("0.10.1") is vo.release_options(vo.release_for("0.10.1"))
    assert vo.release_for("0.10.1") != vo.release_for("0.10.1.1")


def test_release_lookup_refuses_older_and_non_versions():
    with pytest.raises(vo.OptionError, match="older than every release"):
        vo.release_for("0.6.0")
    with pytest.raises(vo.OptionError, match="not a version"):
        vo.release_for("latest")
