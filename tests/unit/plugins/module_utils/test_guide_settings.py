"""Tests for module_utils/_guide_settings.py (the guide -> real vLLM settings translation)."""

from __future__ import annotations

import pytest
from ansible_collections.ascendai.vllm.plugins.module_utils._guide_settings import ACTIONS, translate_guide
from ansible_collections.ascendai.vllm.plugins.module_utils._vllm_options import KNOWN_OPTIONS, render_config
from hypothesis import given
from hypothesis import strategies as st

# The guide's example: its config.py block and environment.
GUIDE = {
    "config": {
        "tensor_parallel_size": 4,
        "dtype": "half",
        "executor": "ascend",
        "batch_size": 32,
        "max_seq_len": 4096,
        "swap_space": 16,
        "max_num_seqs": 128,
        "distributed": {"backend": "hccl"},
        "gradient_accumulation_steps": 8,
    },
    "env": {"ASCEND_GLOBAL_MEM_SIZE": "90%", "ASCEND_OP_DEV_ALLOC_BUFF": "1"},
}


def _notes(result):
    return {note["key"]: note for note in result["notes"]}


def test_guide_example():
    result = translate_guide(GUIDE)
    assert result["settings"] == {"tensor_parallel_size": 4, "dtype": "float16", "max_model_len": 4096,
                                  "max_num_seqs": 128, "gpu_memory_utilization": 0.9}
    assert result["env"] == {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
    notes = _notes(result)
    assert {key: note["action"] for key, note in notes.items()} == {
        "dtype": "changed",
        "executor": "dropped",
        "batch_size": "dropped",
        "max_seq_len": "renamed",
        "swap_space": "dropped",
        "distributed.backend": "dropped",
        "gradient_accumulation_steps": "dropped",
        "ASCEND_GLOBAL_MEM_SIZE": "renamed",
        "ASCEND_OP_DEV_ALLOC_BUFF": "renamed",
    }
    assert "'float16'" in notes["dtype"]["why"]
    assert "platform plugin" in notes["executor"]["why"]
    assert "max_num_seqs, which the guide sets to 128" in notes["batch_size"]["why"]
    assert "max_model_len: 4096" in notes["max_seq_len"]["why"]
    assert "removed in vLLM 0.18.0" in notes["swap_space"]["why"]
    assert "hccl" in notes["distributed.backend"]["why"] and "automatically" in notes["distributed.backend"]["why"]
    assert "training-only" in notes["gradient_accumulation_steps"]["why"]
    assert "gpu_memory_utilization 0.9" in notes["ASCEND_GLOBAL_MEM_SIZE"]["why"]
    assert "PYTORCH_NPU_ALLOC_CONF" in notes["ASCEND_OP_DEV_ALLOC_BUFF"]["why"]
    # Unchanged keys carry no note; every note has a known action and a reason.
    assert "tensor_parallel_size" not in notes and "max_num_seqs" not in notes
    assert all(note["action"] in ACTIONS and note["why"] for note in result["notes"])


def test_settings_render_into_a_valid_config():
    settings = translate_guide(GUIDE)["settings"]
    assert render_config(settings, model="/m") == {"model": "/m", "tensor-parallel-size": 4, "dtype": "float16",
                                                   "max-model-len": 4096, "max-num-seqs": 128,
                                                   "gpu-memory-utilization": 0.9}


def test_batch_size_without_max_num_seqs_becomes_max_num_seqs():
    result = translate_guide({"config": {"batch_size": "64"}})
    assert result["settings"] == {"max_num_seqs": 64}
    note = result["notes"][0]
    assert (note["key"], note["action"]) == ("batch_size", "renamed")
    assert note["why"].startswith("vLLM has no batch_size")


@pytest.mark.parametrize(("env", "settings", "action"), [
    ({"ASCEND_GLOBAL_MEM_SIZE": "85%"}, {"gpu_memory_utilization": 0.85}, "renamed"),
    ({"ASCEND_GLOBAL_MEM_SIZE": 0.8}, {"gpu_memory_utilization": 0.8}, "renamed"),
    ({"ASCEND_GLOBAL_MEM_SIZE": "60GB"}, {}, "dropped"),
    ({"ASCEND_GLOBAL_MEM_SIZE": "150%"}, {}, "dropped"),
])
def test_global_mem_size(env, settings, action):
    result = translate_guide({"env": env})
    assert result["settings"] == settings
    assert result["notes"][0]["action"] == action
    assert "not a CANN/torch_npu variable" in result["notes"][0]["why"]


def test_explicit_gpu_memory_utilization_wins():
    result = translate_guide({"config": {"gpu_memory_utilization": 0.85}, "env": {"ASCEND_GLOBAL_MEM_SIZE": "90%"}})
    assert result["settings"] == {"gpu_memory_utilization": 0.85}
    assert result["notes"][0]["action"] == "dropped"


def test_alloc_buff_keeps_existing_allocator_conf():
    env = {"ASCEND_OP_DEV_ALLOC_BUFF": "1", "PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:256"}
    result = translate_guide({"env": env})
    assert result["env"] == {"PYTORCH_NPU_ALLOC_CONF": "max_split_size_mb:256"}
    assert result["notes"] == [{"key": "ASCEND_OP_DEV_ALLOC_BUFF", "action": "dropped",
                                "why": result["notes"][0]["why"]}]
    assert "PYTORCH_NPU_ALLOC_CONF is set already" in result["notes"][0]["why"]


def test_unknown_keys_are_rejected_not_passed():
    result = translate_guide({
        "config": {"max_model_length": 4096, "learning_rate": 1e-4, "distributed": {"backend": "nccl", "foo": 1}},
        "env": {"ASCEND_MAGIC": "1", "HCCL_BUFFSIZE": "200", "TASK_QUEUE_ENABLE": 2},
        "extra": {},
    })
    assert result["settings"] == {}
    assert result["env"] == {"HCCL_BUFFSIZE": "200", "TASK_QUEUE_ENABLE": "2"}
    notes = _notes(result)
    assert all(notes[key]["action"] == "rejected" for key in (
        "max_model_length", "learning_rate", "distributed.backend", "distributed.foo", "ASCEND_MAGIC", "extra"))
    assert "did you mean max_model_len?" in notes["max_model_length"]["why"]


def test_removed_options_and_secrets():
    result = translate_guide({"config": {"worker_use_ray": True, "device": "ascend_npu", "adapter": "ascend",
                                         "num_gpus_per_worker": 1, "api_key": "s3cret"},
                              "env": {"VLLM_API_KEY": "s3cret"}})
    assert result["settings"] == {"distributed_executor_backend": "ray"}
    assert result["env"] == {}
    actions = {note["key"]: note["action"] for note in result["notes"]}
    assert actions == {"worker_use_ray": "renamed", "device": "dropped", "adapter": "dropped",
                       "num_gpus_per_worker": "dropped", "api_key": "rejected", "VLLM_API_KEY": "rejected"}
    assert "s3cret" not in str(result)


def test_swap_space_kept_for_old_vllm():
    result = translate_guide({"config": {"swap_space": 4}}, vllm_version="0.9.1")
    assert result["settings"] == {"swap_space": 4}
    assert result["notes"] == []


def test_bad_shapes():
    with pytest.raises(TypeError, match="expected a mapping"):
        translate_guide(["config"])
    with pytest.raises(TypeError, match="config must be a mapping"):
        translate_guide({"config": "tp=4"})
    result = translate_guide({"config": {"tensor_parallel_size": 0, "dtype": "int3"}})
    assert [note["action"] for note in result["notes"]] == ["rejected", "rejected"]


@given(st.dictionaries(st.from_regex(r"[a-z][a-z_]{0,20}", fullmatch=True),
                       st.one_of(st.integers(1, 9999), st.text(max_size=5), st.booleans()), max_size=8))
def test_every_key_is_accounted_for(config):
    result = translate_guide({"config": config})
    noted = {note["key"] for note in result["notes"]}
    for key in config:
        # Each key is either passed through unchanged under its own name, or carries a note.
        assert key in noted or result["settings"].get(key) == config[key], key
    assert set(result["settings"]) <= KNOWN_OPTIONS


def test_deepseek_r1_tutorial_settings_pass_and_model_keys_are_named():
    """vllm-ascend's DeepSeek-R1 multi-node tutorial at v0.23.0 (DP 4 x TP 4, expert parallel, MTP, graph mode,
    its exports) translates unchanged for vLLM 0.23.0; DeepSeek-V3 config.json keys are named as such."""
    options = {"tensor_parallel_size": 4, "data_parallel_size": 4, "data_parallel_size_local": 2,
               "data_parallel_address": "192.168.10.11", "data_parallel_rpc_port": 13389,
               "enable_expert_parallel": True, "quantization": "ascend", "seed": 1024, "max_num_seqs": 16,
               "max_model_len": 16384, "max_num_batched_tokens": 4096, "trust_remote_code": True,
               "gpu_memory_utilization": 0.92, "speculative_config": {"num_speculative_tokens": 3, "method": "mtp"},
               "compilation_config": {"cudagraph_mode": "FULL_DECODE_ONLY"}}
    env = {"HCCL_IF_IP": "192.168.10.11", "GLOO_SOCKET_IFNAME": "eth0", "TP_SOCKET_IFNAME": "eth0",
           "HCCL_SOCKET_IFNAME": "eth0", "OMP_PROC_BIND": "false", "OMP_NUM_THREADS": "1", "HCCL_BUFFSIZE": "200",
           "VLLM_ASCEND_BALANCE_SCHEDULING": "1", "HCCL_INTRA_PCIE_ENABLE": "1", "HCCL_INTRA_ROCE_ENABLE": "0"}
    out = translate_guide({"config": options, "env": env}, vllm_version="0.23.0")
    assert out["settings"] == options and out["env"] == env and out["notes"] == []
    assert render_config(out["settings"], vllm_version="0.23.0")["enable-expert-parallel"] is True
    out = translate_guide({"config": dict(options, kv_lora_rank=512, n_routed_experts=256)})
    assert [n["key"] for n in out["notes"]] == ["kv_lora_rank", "n_routed_experts"]
    assert all("config.json" in n["why"] and "did you mean" not in n["why"] for n in out["notes"])
