#!/usr/bin/env python3
"""Make a tiny random model in DeepSeek-LLM's architecture (a test and benchmark tool, not shipped).

DeepSeek-LLM is a ``LlamaForCausalLM``; this one has it at toy size: hidden 256, 2 layers, 4 attention
heads of head_dim 64 (vLLM's CPU attention rejects head_dim 16), 2 key/value heads (grouped-query
attention), vocab 512, intermediate 688, bf16 safetensors. The tokenizer is a byte-level BPE trained
offline with ``tokenizers`` on generated English text, with DeepSeek-LLM-chat's special tokens and chat
template. Everything is deterministic for a given --seed. Needs numpy and tokenizers, not torch.

  .venv/bin/python tests/tools/make_tiny_model.py OUTDIR [--seed 0]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
# DeepSeek-LLM-chat's template (User:/Assistant: turns, eos after each answer).
CHAT_TEMPLATE = (
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ 'User: ' + message['content'] + '\n\n' }}"
    "{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + message['content'] + eos_token }}"
    "{% elif message['role'] == 'system' %}{{ message['content'] + '\n\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 512,
    "max_position_embeddings": 2048,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "mlp_bias": False,
    "initializer_range": 0.02,
    "tie_word_embeddings": False,
    "use_cache": True,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "torch_dtype": "bfloat16",
}

_WORDS = {
    "det": ["the", "a", "every", "this", "that", "one", "some"],
    "adj": ["small", "quick", "quiet", "bright", "old", "green", "careful", "happy", "large", "cold", "warm"],
    "noun": ["model", "server", "cat", "river", "engineer", "node", "teacher", "garden", "city", "network", "book",
             "question", "answer", "mountain", "student", "machine", "window", "library", "kitchen", "planet",
             "village", "doctor", "printer", "harbour", "journey", "picture", "computer", "language"],
    "verb": ["reads", "builds", "answers", "follows", "finds", "helps", "watches", "writes", "moves", "loads",
             "serves", "counts", "remembers", "explains", "discovers", "carries", "measures", "describes"],
    "adv": ["slowly", "today", "again", "well", "carefully", "often", "quickly", "together"],
    "prep": ["near", "under", "with", "for", "after", "before", "behind", "across"],
}


def make_text(rng, sentences=4000):
    """Deterministic simple English: the tokenizer's training corpus."""
    def pick(kind):
        words = _WORDS[kind]
        return words[int(rng.integers(len(words)))]

    out = []
    for _ in range(sentences):
        s = "{} {} {} {} {} {} {}".format(pick("det"), pick("adj"), pick("noun"), pick("verb"), pick("det"),
                                      pick("noun"), pick("adv"))
        if rng.random() < 0.4:
            s += " {} {} {}".format(pick("prep"), pick("det"), pick("noun"))
        s = s[0].upper() + s[1:] + (". " if rng.random() < 0.8 else "? ")
        if rng.random() < 0.05:
            s = f"User: {s}Assistant: {s.lower()}"
        out.append(s + ("\n" if rng.random() < 0.1 else ""))
    out.append("0123456789 ,.;:!?'\"()-")
    return "".join(out)


def train_tokenizer(text, vocab_size):
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([line for line in text.splitlines() if line], trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                                       special_tokens=[(BOS, bos_id)])
    return tok


def weights(rng, cfg):
    """Llama weights: normal(0, 0.02) matrices, RMSNorm weights at 1."""
    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    q = cfg["num_attention_heads"] * cfg["head_dim"]
    shapes = [("model.embed_tokens.weight", (v, h))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes += [(p + "input_layernorm.weight", (h,)), (p + "self_attn.q_proj.weight", (q, h)),
                   (p + "self_attn.k_proj.weight", (kv, h)), (p + "self_attn.v_proj.weight", (kv, h)),
                   (p + "self_attn.o_proj.weight", (h, q)), (p + "post_attention_layernorm.weight", (h,)),
                   (p + "mlp.gate_proj.weight", (inter, h)), (p + "mlp.up_proj.weight", (inter, h)),
                   (p + "mlp.down_proj.weight", (h, inter))]
    shapes += [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]
    out = []
    for name, shape in shapes:
        if name.endswith("norm.weight"):
            arr = np.ones(shape, dtype=np.float32)
        else:
            arr = (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)).astype(np.float32)
        out.append((name, arr))
    return out


def _convert_module():
    spec = importlib.util.spec_from_file_location("collection_tree", os.path.join(ROOT, "tools/ci/collection_tree.py"))
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    sys.path.insert(0, builder.link(ROOT))
    from ansible_collections.ascendai.vllm.plugins.module_utils import (
        _safetensors_convert as safetensors_convert,
    )
    return safetensors_convert


def write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")


def make_tiny_model(outdir, seed=0):
    """Write the model into ``outdir``; returns the list of files written."""
    sc = _convert_module()
    rng = np.random.default_rng(seed)
    os.makedirs(outdir, exist_ok=True)
    cfg = dict(CONFIG)
    tok = train_tokenizer(make_text(rng), cfg["vocab_size"])
    tok.save(os.path.join(outdir, "tokenizer.json"))
    write_json(os.path.join(outdir, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS, "eos_token": EOS, "pad_token": EOS,
        "add_bos_token": True, "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": cfg["max_position_embeddings"],
        "chat_template": CHAT_TEMPLATE,
    })
    write_json(os.path.join(outdir, "special_tokens_map.json"), {"bos_token": BOS, "eos_token": EOS,
                                                                 "pad_token": EOS})
    cfg["bos_token_id"], cfg["eos_token_id"] = tok.token_to_id(BOS), tok.token_to_id(EOS)
    write_json(os.path.join(outdir, "config.json"), cfg)
    write_json(os.path.join(outdir, "generation_config.json"), {
        "bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"], "do_sample": True,
        "temperature": 0.7, "top_p": 0.95, "max_new_tokens": 64,
    })
    entries, blobs = [], []
    for name, arr in weights(rng, cfg):
        raw = sc.convert_chunk("F32", "BF16", arr.reshape(-1).view(np.uint8)).copy()
        entries.append({"name": name, "dtype": "BF16", "shape": list(arr.shape), "nbytes": raw.size})
        blobs.append(raw)
    with open(os.path.join(outdir, "model.safetensors"), "wb") as f:
        f.write(sc.build_header(entries, {"format": "pt"}))
        for raw in blobs:
            f.write(raw.tobytes())
    return sorted(os.listdir(outdir))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outdir")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    files = make_tiny_model(args.outdir, args.seed)
    print("wrote {}: {}".format(args.outdir, ", ".join(files)))


if __name__ == "__main__":
    main()
