#!/usr/bin/env python3
"""Make a tiny random model in DeepSeek-V3's architecture (a test and benchmark tool, not shipped).

DeepSeek-V3/R1 is a ``DeepseekV3ForCausalLM``: multi-head latent attention (MLA) and a mixture of experts.
This one has it at toy size: hidden 256, 3 layers of which the first is dense (``first_k_dense_replace`` 1),
8 routed experts plus 1 shared, top-2 with ``noaux_tc`` routing (sigmoid scores, ``e_score_correction_bias``,
4 groups of which 2 are kept), ``q_lora_rank`` 96, ``kv_lora_rank`` 512, ``qk_rope_head_dim`` 64,
``qk_nope_head_dim`` 64, ``v_head_dim`` 64, 4 attention heads, vocab 512, bf16 safetensors. The latent cache
is ``kv_lora_rank + qk_rope_head_dim`` = 576 wide, the one head size vLLM's CPU MLA backends take
(vllm 0.32, v1/attention/backends/mla/cpu_mla.py and amx_mla.py, get_supported_head_sizes). The tokenizer is
the one of make_tiny_model.py (the tiny DeepSeek-LLM model), trained the same way. Deterministic for a given
--seed. Needs numpy and tokenizers, not torch.

  .venv/bin/python tests/tools/make_tiny_v3_model.py OUTDIR [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import sys

# numpy and the base tool (tokenizers) are imported where the weights are made, so CONFIG and shapes() load on a
# controller without them (the controller14 stage reads CONFIG in its unit subset, in a container without numpy).

# DeepSeek-V3's config.json keys (https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json) at toy
# size. No MTP layer (num_nextn_predict_layers 0): vLLM loads it only for speculative decoding.
CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 256,
    "intermediate_size": 688,
    "moe_intermediate_size": 128,
    "num_hidden_layers": 3,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "n_group": 4,
    "topk_group": 2,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "q_lora_rank": 96,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 64,
    "v_head_dim": 64,
    "num_nextn_predict_layers": 0,
    "vocab_size": 512,
    "max_position_embeddings": 2048,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "tie_word_embeddings": False,
    "use_cache": True,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "torch_dtype": "bfloat16",
}


def shapes(cfg):
    """(name, shape) of every tensor, with the names vLLM's deepseek_v2.py loads."""
    h, v = cfg["hidden_size"], cfg["vocab_size"]
    nh, ql, kvl = cfg["num_attention_heads"], cfg["q_lora_rank"], cfg["kv_lora_rank"]
    nope, rope, vd = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    out = [("model.embed_tokens.weight", (v, h))]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (h,)),
                (p + "self_attn.q_a_proj.weight", (ql, h)),
                (p + "self_attn.q_a_layernorm.weight", (ql,)),
                (p + "self_attn.q_b_proj.weight", (nh * (nope + rope), ql)),
                (p + "self_attn.kv_a_proj_with_mqa.weight", (kvl + rope, h)),
                (p + "self_attn.kv_a_layernorm.weight", (kvl,)),
                (p + "self_attn.kv_b_proj.weight", (nh * (nope + vd), kvl)),
                (p + "self_attn.o_proj.weight", (h, nh * vd)),
                (p + "post_attention_layernorm.weight", (h,))]
        if i < cfg["first_k_dense_replace"]:
            inter = cfg["intermediate_size"]
            out += [(p + "mlp.gate_proj.weight", (inter, h)), (p + "mlp.up_proj.weight", (inter, h)),
                    (p + "mlp.down_proj.weight", (h, inter))]
            continue
        moe = cfg["moe_intermediate_size"]
        experts = cfg["n_routed_experts"]
        out += [(p + "mlp.gate.weight", (experts, h)), (p + "mlp.gate.e_score_correction_bias", (experts,))]
        for j in range(experts):
            q = f"{p}mlp.experts.{j}."
            out += [(q + "gate_proj.weight", (moe, h)), (q + "up_proj.weight", (moe, h)),
                    (q + "down_proj.weight", (h, moe))]
        shared = moe * cfg["n_shared_experts"]
        out += [(p + "mlp.shared_experts.gate_proj.weight", (shared, h)),
                (p + "mlp.shared_experts.up_proj.weight", (shared, h)),
                (p + "mlp.shared_experts.down_proj.weight", (h, shared))]
    out += [("model.norm.weight", (h,)), ("lm_head.weight", (v, h))]
    return out


def weights(rng, cfg):
    """normal(0, 0.02) matrices, RMSNorm weights at 1, the routing correction bias at 0 (as trained from)."""
    import numpy as np
    for name, shape in shapes(cfg):
        if name.endswith("norm.weight"):
            arr = np.ones(shape, dtype=np.float32)
        elif name.endswith("e_score_correction_bias"):
            arr = np.zeros(shape, dtype=np.float32)
        else:
            arr = (rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)).astype(np.float32)
        yield name, arr


def make_tiny_v3_model(outdir, seed=0):
    """Write the model into ``outdir``; returns the list of files written."""
    import numpy as np
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_tiny_model as base  # the tokenizer, the bf16 writer

    sc = base._convert_module()
    rng = np.random.default_rng(seed)
    os.makedirs(outdir, exist_ok=True)
    cfg = dict(CONFIG)
    tok = base.train_tokenizer(base.make_text(rng), cfg["vocab_size"])
    tok.save(os.path.join(outdir, "tokenizer.json"))
    base.write_json(os.path.join(outdir, "tokenizer_config.json"), {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": base.BOS, "eos_token": base.EOS, "pad_token": base.EOS,
        "add_bos_token": True, "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": cfg["max_position_embeddings"],
        "chat_template": base.CHAT_TEMPLATE,
    })
    base.write_json(os.path.join(outdir, "special_tokens_map.json"), {"bos_token": base.BOS, "eos_token": base.EOS,
                                                                      "pad_token": base.EOS})
    cfg["bos_token_id"], cfg["eos_token_id"] = tok.token_to_id(base.BOS), tok.token_to_id(base.EOS)
    base.write_json(os.path.join(outdir, "config.json"), cfg)
    base.write_json(os.path.join(outdir, "generation_config.json"), {
        "bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"], "do_sample": True,
        "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 64,
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
    files = make_tiny_v3_model(args.outdir, args.seed)
    print("wrote {}: {}".format(args.outdir, ", ".join(files)))


if __name__ == "__main__":
    main()
