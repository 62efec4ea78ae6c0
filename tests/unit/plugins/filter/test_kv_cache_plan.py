"""Tests for the ascendai.vllm.kv_cache_plan filter."""

from __future__ import annotations

import json

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.kv_cache_plan import FilterModule, kv_cache_plan

# deepseek-ai/deepseek-llm-67b-base config.json (the fields the plan reads).
CONFIG_JSON = json.dumps({
    "architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 22016,
    "num_hidden_layers": 95, "num_attention_heads": 64, "num_key_value_heads": 8, "vocab_size": 102400,
    "max_position_embeddings": 4096, "tie_word_embeddings": False, "torch_dtype": "bfloat16"})


def test_registered_under_its_name():
    assert FilterModule().filters() == {"kv_cache_plan": kv_cache_plan}


def test_plan_from_json_string():
    plan = kv_cache_plan(CONFIG_JSON, dtype="float16", tensor_parallel_size=4, hbm_gib_per_npu=64,
                         gpu_memory_utilization=0.9, max_model_len=4096, max_num_seqs=32)
    assert plan["weight_bytes_per_npu"] == 33714847744
    assert plan["kv_bytes_per_token_per_npu"] == 97280
    assert plan["kv_cache_tokens_per_npu"] == 267008
    assert plan["max_concurrent_full_seqs"] == 65
    assert plan["fits"] is True
    assert plan["warnings"] == []


def test_overflow_warning_for_the_guide_settings():
    plan = kv_cache_plan(CONFIG_JSON, dtype="float16", tensor_parallel_size=4, hbm_gib_per_npu=64,
                         max_model_len=4096, max_num_seqs=128)
    assert plan["fits"] is True
    assert plan["warnings"][0].startswith("PagedAttention KV cache overflow")


def test_errors_name_the_input():
    with pytest.raises(AnsibleFilterError, match=r"unknown arguments \['tp'\]"):
        kv_cache_plan(CONFIG_JSON, tp=4, hbm_gib_per_npu=64)
    with pytest.raises(AnsibleFilterError, match="kv_cache_plan: give hbm_gib_per_npu"):
        kv_cache_plan(CONFIG_JSON)
