"""The tiny DeepSeek-LLM-shaped model generator (tests/tools/make_tiny_model.py)."""

from __future__ import annotations

import hashlib
import json
import os
import sys

import pytest

pytest.importorskip("numpy")
pytest.importorskip("tokenizers")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import make_tiny_model
from ansible_collections.ascendai.vllm.plugins.module_utils import (
    _safetensors_convert as sc,
)


def import_torch():
    """Import torch (or skip), with the real sys.intern: ansible.module_utils.basic, once imported by another
    test, replaces sys.intern by an object that torch._dynamo refuses at import."""
    import sys
    current = sys.intern
    sys.intern = getattr(type(current), "unpatched_implementation", current)
    try:
        return pytest.importorskip("torch")
    finally:
        sys.intern = current


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tiny") / "model")
    make_tiny_model.make_tiny_model(d, seed=0)
    return d


def digest(d):
    return {f: hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest() for f in sorted(os.listdir(d))}


def test_files_config_and_weights(tiny):
    assert sorted(os.listdir(tiny)) == ["config.json", "generation_config.json", "model.safetensors",
                                        "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"]
    with open(os.path.join(tiny, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["vocab_size"], cfg["intermediate_size"]) == (256, 2, 4, 2, 512, 688)
    assert cfg["hidden_size"] // cfg["num_attention_heads"] == cfg["head_dim"] == 64
    tensors, meta, _start, _size = sc.read_header(os.path.join(tiny, "model.safetensors"))
    shapes = {t["name"]: (t["dtype"], t["shape"]) for t in tensors}
    assert meta == {"format": "pt"} and len(shapes) == 1 + 9 * 2 + 2
    assert shapes["model.layers.1.self_attn.k_proj.weight"] == ("BF16", [128, 256])  # 2 KV heads x 64
    assert shapes["model.layers.0.mlp.down_proj.weight"] == ("BF16", [256, 688])
    assert shapes["lm_head.weight"] == ("BF16", [512, 256])


def test_deterministic_for_a_seed(tiny, tmp_path):
    again = str(tmp_path / "again")
    make_tiny_model.make_tiny_model(again, seed=0)
    assert digest(again) == digest(tiny)
    other = str(tmp_path / "other")
    make_tiny_model.make_tiny_model(other, seed=1)
    assert digest(other)["model.safetensors"] != digest(tiny)["model.safetensors"]


def test_tokenizer_round_trips_and_chat_template(tiny):
    import_torch()
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.from_pretrained(tiny)
    assert cfg.model_type == "llama" and cfg.num_key_value_heads == 2
    tok = transformers.AutoTokenizer.from_pretrained(tiny)
    assert len(tok) == 512
    text = "The quick engineer explains a new question to every student, twice!"
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id == cfg.bos_token_id
    assert len(ids) < len(text) // 2  # BPE merged the common words
    assert tok.decode(ids, skip_special_tokens=True) == text
    prompt = tok.apply_chat_template([{"role": "user", "content": "Hello"}], tokenize=False,
                                     add_generation_prompt=True)
    assert prompt == tok.bos_token + "User: Hello\n\nAssistant:"


def test_weights_load_in_transformers(tiny, monkeypatch):
    torch = import_torch()
    transformers = pytest.importorskip("transformers")
    # transformers imports parts of torch._dynamo lazily: keep the real sys.intern for the whole test
    monkeypatch.setattr(sys, "intern", getattr(type(sys.intern), "unpatched_implementation", sys.intern))
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny)
    assert model.dtype == torch.bfloat16
    # 2 x 512x256 embeddings/head + 2 layers x (q,o 256x256; k,v 128x256; 3 x 688x256; 2 norms) + final norm
    assert sum(p.numel() for p in model.parameters()) == 2 * 512 * 256 + 2 * (
        2 * 256 * 256 + 2 * 128 * 256 + 3 * 688 * 256 + 2 * 256) + 256
    out = model.generate(torch.tensor([[0, 5, 6]]), max_new_tokens=4, do_sample=False)
    assert out.shape == (1, 7)
