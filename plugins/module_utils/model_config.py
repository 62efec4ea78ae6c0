# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Consistency checks of a Hugging Face ``config.json`` before vLLM is pointed at it.

vLLM fails on these only at start-up, after minutes of loading weights, or worse: some inconsistencies load and
produce garbage. Every problem is reported in one list, each message naming the key, the value and the fix.
"""

from __future__ import annotations

import json

# Head sizes vLLM's CPU attention backend accepts (vllm 0.32, v1/attention/backends/cpu_attn.py
# get_supported_head_sizes). The sandbox serves on it; head_dim 16 fails there with
# "Unsupported CPU attention configuration" (docs/sources.md, "vLLM on the CPU").
DEFAULT_HEAD_DIMS = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)


class ConfigError(Exception):
    """The input is not a config.json at all."""


def load_config(config_json):
    """A mapping from a dict or a JSON string."""
    if isinstance(config_json, (str, bytes)):
        try:
            config_json = json.loads(config_json)
        except (ValueError, RecursionError) as exc:  # RecursionError: '[[[[...' nested past Python's limit
            raise ConfigError(f"config.json is not valid JSON ({exc}); pass the file's content, e.g. "
                              "lookup('ansible.builtin.file', path) or the b64decode of a slurp") from None
    if not isinstance(config_json, dict):
        raise ConfigError(f"config.json must be a JSON object, got {type(config_json).__name__}")
    return config_json


def _int(cfg, key, problems, required=True):
    value = cfg.get(key)
    if value is None:
        if required:
            problems.append(f"{key} is missing; a decoder-only model's config.json needs it")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        problems.append(f"{key}={value!r} must be a positive integer")
        return None
    return value


def check_model_config(config_json, tensor_parallel_size=1, supported_architectures=None, head_dims=None):
    """Check a config.json; returns a summary dict with ``problems`` (empty when all is well)."""
    cfg = load_config(config_json)
    # Multimodal configs keep the language model's dimensions in text_config.
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else cfg
    problems = []
    tp = tensor_parallel_size
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ConfigError(f"tensor_parallel_size={tp!r} must be a positive integer")
    head_dims = tuple(DEFAULT_HEAD_DIMS if head_dims is None else head_dims)

    archs = cfg.get("architectures")
    if not isinstance(archs, list) or not archs or not all(isinstance(a, str) for a in archs):
        problems.append(f"architectures={archs!r} must be a non-empty list of class names such as "
                        "['LlamaForCausalLM']; vLLM picks its implementation from it")
        archs = []
    architecture = archs[0] if archs else None
    if supported_architectures is not None and archs:
        supported = set(supported_architectures)
        known = [a for a in archs if a in supported]
        if known:
            architecture = known[0]
        else:
            architecture = None
            problems.append(f"architectures={archs} is not supported by the installed vLLM "
                            f"({len(supported)} architectures known); install a vLLM release that has it, or "
                            "serve a model of a supported architecture")

    hidden = _int(text, "hidden_size", problems)
    heads = _int(text, "num_attention_heads", problems)
    layers = _int(text, "num_hidden_layers", problems)
    vocab = _int(text, "vocab_size", problems)
    kv_heads = heads if text.get("num_key_value_heads") is None else _int(text, "num_key_value_heads", problems)
    mla = text.get("kv_lora_rank") is not None
    explicit_head_dim = text.get("head_dim")
    head_dim = None
    attention = None

    if mla:
        attention = "mla"
        nope = _int(text, "qk_nope_head_dim", problems)
        rope = _int(text, "qk_rope_head_dim", problems)
        _int(text, "kv_lora_rank", problems)
        _int(text, "v_head_dim", problems)
        if nope and rope:
            head_dim = nope + rope
    elif hidden and heads:
        if explicit_head_dim is not None:
            head_dim = _int(text, "head_dim", problems)
        elif hidden % heads:
            problems.append(f"hidden_size={hidden} is not divisible by num_attention_heads={heads} and there is "
                            "no head_dim: the head size would not be a whole number; the config is damaged")
        else:
            head_dim = hidden // heads
        if head_dim is not None and head_dim not in head_dims:
            problems.append(f"head_dim={head_dim} (the attention head size) is not one vLLM's attention supports "
                            f"({', '.join(str(d) for d in head_dims)})")
    if heads and kv_heads and not mla:
        if heads % kv_heads:
            problems.append(f"num_attention_heads={heads} is not divisible by num_key_value_heads={kv_heads}: "
                            "grouped-query attention needs whole groups; the config is damaged")
        attention = "mha" if kv_heads == heads else ("mqa" if kv_heads == 1 else "gqa")
    if heads and heads % tp:
        problems.append(f"num_attention_heads={heads} is not divisible by tensor_parallel_size={tp}; choose a "
                        f"tensor-parallel size among {[d for d in range(1, min(heads, 64) + 1) if heads % d == 0]}")
    if kv_heads and not mla and tp > 1:
        if kv_heads >= tp and kv_heads % tp:
            problems.append(f"num_key_value_heads={kv_heads} is not divisible by tensor_parallel_size={tp}; vLLM "
                            "splits the KV heads evenly over the ranks")
        elif kv_heads < tp and tp % kv_heads:
            problems.append(f"tensor_parallel_size={tp} is not a multiple of num_key_value_heads={kv_heads}; vLLM "
                            "replicates each KV head over a whole number of ranks")

    quant = cfg.get("quantization_config")
    return {
        "ok": not problems,
        "problems": problems,
        "architectures": archs,
        "architecture": architecture,
        "model_type": cfg.get("model_type"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": None if mla else kv_heads,
        "num_hidden_layers": layers,
        "vocab_size": vocab,
        "head_dim": head_dim,
        "attention": attention,
        "torch_dtype": cfg.get("torch_dtype") or cfg.get("dtype") or text.get("torch_dtype"),
        "quantization": (quant.get("quant_method") if isinstance(quant, dict) else None),
        "tensor_parallel_size": tp,
    }
