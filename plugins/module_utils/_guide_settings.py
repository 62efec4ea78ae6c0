# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Translate the deployment guide's settings into real vLLM options and environment variables.

The guide describes a ``config.py`` block (tensor_parallel_size, dtype "half", executor "ascend", batch_size,
max_seq_len, swap_space, max_num_seqs, a "distributed" dict with backend "hccl", gradient_accumulation_steps)
and environment variables (ASCEND_GLOBAL_MEM_SIZE, ASCEND_OP_DEV_ALLOC_BUFF). Several of these are not vLLM
options or not real variables (docs/sources.md, "The deployment guide's settings, corrected").
:func:`translate_guide` keeps what is real, maps what has a real equivalent and says why for every key it
changed, renamed, dropped or rejected.

Pure stdlib; the option and variable names come from :mod:`vllm_options`.
"""

from __future__ import annotations

import re

from ansible_collections.ascendai.vllm.plugins.module_utils._compat_matrix import parse_version
from ansible_collections.ascendai.vllm.plugins.module_utils._vllm_options import (
    FAKE_ENV,
    KNOWN_ENV,
    KNOWN_ENV_PREFIXES,
    KNOWN_OPTIONS,
    REMOVED_OPTIONS,
    SECRET_OPTIONS,
    removed_message,
    snake,
    suggest,
    version_type_error,
)

ACTIONS = ("changed", "renamed", "dropped", "rejected")

_DTYPES = {
    "half": "float16", "fp16": "float16", "float16": "float16",
    "bf16": "bfloat16", "bfloat16": "bfloat16",
    "float": "float32", "fp32": "float32", "float32": "float32",
    "auto": "auto",
}
_POSITIVE_INTS = ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size", "max_num_seqs",
                  "max_model_len", "max_num_batched_tokens", "block_size")
# DeepSeek-V2/V3/R1 architecture keys of the model's config.json (MLA and MoE): fixed by the checkpoint, not vLLM
# options (https://huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json). vLLM's --hf-overrides changes
# config.json keys at load time.
_MODEL_CONFIG_KEYS = frozenset((
    "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "n_routed_experts",
    "n_shared_experts", "num_experts_per_tok", "moe_intermediate_size", "first_k_dense_replace", "moe_layer_freq",
    "topk_method", "n_group", "topk_group", "scoring_func", "routed_scaling_factor", "norm_topk_prob",
    "num_nextn_predict_layers",
))
_PERCENT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%?)\s*$")


def _note(notes, key, action, why):
    notes.append({"key": key, "action": action, "why": why})


def _as_positive_int(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, float) and value.is_integer() and value > 0:
        return int(value)
    if isinstance(value, str) and value.strip().isdigit() and int(value) > 0:
        return int(value)
    return None


def _fraction(value):
    """``"90%"`` -> 0.9, ``"0.9"`` / 0.9 -> 0.9, ``90`` -> 0.9; None when it is not a share of memory."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        number, percent = float(value), False
    else:
        match = _PERCENT_RE.match(str(value))
        if not match:
            return None
        number, percent = float(match.group(1)), bool(match.group(2))
    if percent or number > 1:
        number = number / 100.0
    if not 0 < number <= 1:
        return None
    return round(number, 4)


def _option(settings, notes, key, value, given, vllm_version):
    """One key of the guide's config block (``given`` is the spelling the guide used, for the note)."""
    if key == "dtype":
        canonical = _DTYPES.get(str(value).lower())
        if canonical is None:
            _note(notes, given, "rejected", f"dtype {value!r} is not a vLLM dtype (auto, float16, bfloat16, float32)")
        elif canonical != value:
            settings["dtype"] = canonical
            _note(notes, given, "changed", f"dtype {value!r} is vLLM's {canonical!r} (canonical spelling)")
        else:
            settings["dtype"] = canonical
        return
    if key in _POSITIVE_INTS:
        number = _as_positive_int(value)
        if number is None:
            _note(notes, given, "rejected", f"{key} must be a positive integer, got {value!r}")
            return
        if number != value or given != key:
            _note(notes, given, "changed" if given == key else "renamed",
                  f"written as vLLM option {key}: {number}")
        settings[key] = number
        return
    if key == "worker_use_ray":
        if value:
            settings.setdefault("distributed_executor_backend", "ray")
            _note(notes, given, "renamed", removed_message(key) + "; set distributed_executor_backend: ray")
        else:
            _note(notes, given, "dropped", removed_message(key))
        return
    if key in SECRET_OPTIONS:
        _note(notes, given, "rejected", f"{key} does not belong in the settings; use {SECRET_OPTIONS[key]}")
        return
    if key in REMOVED_OPTIONS:
        message = removed_message(key, vllm_version)
        if message:
            _note(notes, given, "dropped", message)
            return
    elif key in _MODEL_CONFIG_KEYS and key not in KNOWN_OPTIONS:
        _note(notes, given, "rejected", f"{given} is a key of the model's config.json (DeepSeek-V3's MLA/MoE "
              "architecture), fixed by the checkpoint, not a vLLM option; the model role checks it "
              "(ascendai.vllm.model_config_check)")
        return
    elif key not in KNOWN_OPTIONS:
        hint = suggest(key)
        mean = f"; did you mean {' or '.join(hint)}?" if hint else ""
        _note(notes, given, "rejected", f"{given} is not a vLLM option{mean}")
        return
    settings[key] = value
    if given != key:
        _note(notes, given, "renamed", f"vLLM option names use underscores here: {key}")


def _distributed(settings, notes, value):
    if not isinstance(value, dict):
        _note(notes, "distributed", "rejected", f"expected a mapping such as {{backend: hccl}}, got {value!r}")
        return
    for sub, sub_value in value.items():
        key = f"distributed.{sub}"
        if sub == "backend":
            backend = str(sub_value).lower()
            if backend == "hccl":
                _note(notes, key, "dropped", "nothing to set: torch_npu registers the hccl process-group backend "
                      "and vllm-ascend uses it automatically; tune HCCL only through HCCL_* variables "
                      "(HCCL_BUFFSIZE, HCCL_OP_EXPANSION_MODE, HCCL_IF_IP, ...)")
            elif backend in ("ray", "mp"):
                settings["distributed_executor_backend"] = backend
                _note(notes, key, "renamed", f"the multi-process launcher is vLLM's distributed_executor_backend: "
                      f"{backend}")
            else:
                _note(notes, key, "rejected", f"backend {sub_value!r} does not apply to Ascend NPUs: collectives "
                      "use HCCL (automatic); the executor is distributed_executor_backend ray or mp")
        elif sub in ("world_size", "num_nodes", "nnodes"):
            _note(notes, key, "dropped", "vLLM derives the world size from tensor_parallel_size x "
                  "pipeline_parallel_size x data_parallel_size")
        else:
            _note(notes, key, "rejected", f"{sub} is not a vLLM distributed setting")


def _config(settings, notes, config, vllm_version):
    keys = {snake(k): k for k in config}
    for given, value in config.items():
        key = snake(given)
        if value is None:
            _note(notes, str(given), "dropped", "no value (null): vLLM's default applies")
            continue
        if key == "distributed":
            _distributed(settings, notes, value)
        elif key == "executor":
            backend = str(value).lower()
            if backend in ("ray", "mp"):
                settings["distributed_executor_backend"] = backend
                _note(notes, given, "renamed", f"distributed_executor_backend: {backend}")
            else:
                _note(notes, given, "dropped", f"executor {value!r}: vllm-ascend is a platform plugin, activated "
                      "automatically through the vllm.platform_plugins entry point; no vLLM option selects the "
                      "device (--device was removed in vLLM 0.10)")
        elif key == "batch_size":
            if "max_num_seqs" in keys:
                _note(notes, given, "dropped", f"vLLM has no batch_size; batching is continuous and capped by "
                      f"max_num_seqs, which the guide sets to {config[keys['max_num_seqs']]!r} "
                      f"(batch_size {value!r} ignored)")
            else:
                _option(settings, notes, "max_num_seqs", value, given, vllm_version)
                if notes and notes[-1]["key"] == given:
                    notes[-1]["why"] = ("vLLM has no batch_size; the closest is max_num_seqs, the most sequences "
                                        f"scheduled at once: {notes[-1]['why']}")
        elif key in ("max_seq_len", "max_sequence_length", "max_context_len"):
            if "max_model_len" in keys:
                _note(notes, given, "dropped", f"{given} is not a vLLM option and max_model_len is set already "
                      f"({config[keys['max_model_len']]!r})")
            else:
                _option(settings, notes, "max_model_len", value, given, vllm_version)
                if notes and notes[-1]["key"] == given:
                    notes[-1]["why"] = (f"{given} is not a vLLM option; the context length (prompt + output) is "
                                        f"max_model_len: {notes[-1]['why']}")
        elif key == "gradient_accumulation_steps":
            _note(notes, given, "dropped", "training-only hyper-parameter, meaningless for serving; batching is "
                  "max_num_seqs / max_num_batched_tokens / chunked prefill")
        else:
            _option(settings, notes, key, value, given, vllm_version)


def _env(settings, env_out, notes, env):
    for name, value in env.items():
        name = str(name)
        text = "" if value is None else str(value)
        if name == "ASCEND_GLOBAL_MEM_SIZE":
            share = _fraction(value)
            if "gpu_memory_utilization" in settings:
                _note(notes, name, "dropped", f"{FAKE_ENV[name]}; gpu_memory_utilization is set already "
                      f"({settings['gpu_memory_utilization']})")
            elif share is None:
                _note(notes, name, "dropped", f"{FAKE_ENV[name]}; {value!r} is not a share of memory, so "
                      "vLLM's default gpu_memory_utilization applies")
            else:
                settings["gpu_memory_utilization"] = share
                _note(notes, name, "renamed", f"{FAKE_ENV[name]}: gpu_memory_utilization {share}")
        elif name == "ASCEND_OP_DEV_ALLOC_BUFF":
            if "PYTORCH_NPU_ALLOC_CONF" in env:
                _note(notes, name, "dropped", f"{FAKE_ENV[name]}; PYTORCH_NPU_ALLOC_CONF is set already")
            else:
                env_out["PYTORCH_NPU_ALLOC_CONF"] = "expandable_segments:True"
                _note(notes, name, "renamed", f"{FAKE_ENV[name]}: PYTORCH_NPU_ALLOC_CONF=expandable_segments:True "
                      "(the value vllm-ascend's tutorials use)")
        elif name in FAKE_ENV:
            _note(notes, name, "dropped", FAKE_ENV[name])
        elif name in KNOWN_ENV or name.startswith(KNOWN_ENV_PREFIXES):
            if name == "VLLM_API_KEY":
                _note(notes, name, "rejected", "the API key comes from a vaulted variable into a 0600 environment "
                      "file, never from plain settings")
                continue
            env_out[name] = text
        else:
            _note(notes, name, "rejected", f"{name} is not a variable known to CANN, torch_npu, HCCL, vLLM or "
                  "vllm-ascend (see docs/sources.md of ascendai.vllm)")


def translate_guide(guide, vllm_version=None):
    """``{config: {...}, env: {...}}`` -> ``{settings: {...}, env: {...}, notes: [{key, action, why}]}``.

    ``settings`` holds real vLLM options only (snake_case, ready for the ``vllm_config`` filter); ``env`` real
    environment variables only. ``vllm_version``: the vLLM the node will run (keeps an option that was removed
    only in a later release; None or empty: none). Raises TypeError when ``guide`` is not shaped like that or
    ``vllm_version`` is not a string, ValueError when ``vllm_version`` is no version.
    """
    if not isinstance(guide, dict):
        raise TypeError(f"expected a mapping {{config: {{...}}, env: {{...}}}}, got {type(guide).__name__}")
    if vllm_version is not None and not isinstance(vllm_version, str):
        raise TypeError(version_type_error(vllm_version))
    if vllm_version:
        try:
            parse_version(vllm_version)
        except ValueError:
            raise ValueError(f"vllm_version={vllm_version!r:.200} is not a vLLM version; give the release the node "
                             "runs, e.g. '0.11.0', or leave it empty") from None
    settings, env_out, notes = {}, {}, []
    for top in guide:
        if top not in ("config", "env"):
            _note(notes, str(top), "rejected", "only 'config' (the guide's config.py block) and 'env' are read")
    config = guide.get("config") or {}
    env = guide.get("env") or {}
    if not isinstance(config, dict):
        raise TypeError(f"config must be a mapping of the guide's settings, got {type(config).__name__}")
    if not isinstance(env, dict):
        raise TypeError(f"env must be a mapping of environment variables, got {type(env).__name__}")
    _config(settings, notes, config, vllm_version)
    _env(settings, env_out, notes, env)
    return {"settings": settings, "env": env_out, "notes": notes}
