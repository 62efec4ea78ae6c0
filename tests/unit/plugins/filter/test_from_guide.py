"""Tests for the ascendai.vllm.from_guide filter."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.from_guide import FilterModule, from_guide
from ansible_collections.ascendai.vllm.plugins.filter.vllm_config import vllm_config


def test_registered_under_its_name():
    assert FilterModule().filters() == {"from_guide": from_guide}


def test_guide_example_end_to_end():
    guide = {
        "config": {"tensor_parallel_size": 4, "dtype": "half", "executor": "ascend", "batch_size": 128,
                   "max_seq_len": 4096, "swap_space": 16, "max_num_seqs": 128, "distributed": {"backend": "hccl"},
                   "gradient_accumulation_steps": 8},
        "env": {"ASCEND_GLOBAL_MEM_SIZE": "90%", "ASCEND_OP_DEV_ALLOC_BUFF": "1"},
    }
    result = from_guide(guide)
    assert result["settings"] == {"tensor_parallel_size": 4, "dtype": "float16", "max_model_len": 4096,
                                  "max_num_seqs": 128, "gpu_memory_utilization": 0.9}
    assert result["env"] == {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
    assert [(n["key"], n["action"]) for n in result["notes"]] == [
        ("dtype", "changed"), ("executor", "dropped"), ("batch_size", "dropped"), ("max_seq_len", "renamed"),
        ("swap_space", "dropped"), ("distributed.backend", "dropped"), ("gradient_accumulation_steps", "dropped"),
        ("ASCEND_GLOBAL_MEM_SIZE", "renamed"), ("ASCEND_OP_DEV_ALLOC_BUFF", "renamed")]
    # The translated settings are accepted by vllm_config as they are.
    assert vllm_config(result["settings"], model="/m")["max-model-len"] == 4096


def test_bad_shape_is_a_filter_error():
    with pytest.raises(AnsibleFilterError, match="from_guide: expected a mapping"):
        from_guide("tensor_parallel_size=4")


GUIDE = {"config": {"swap_space": 16}}


@pytest.mark.parametrize("version,needle", [
    (0.10, r"vllm_version=0\.1 is not a version string; quote it in YAML, e\.g\. '0\.11\.0' \(an unquoted 0\.10 is "
           r"the number 0\.1\)"),
    (11, r"vllm_version=11 is not a version string"),
    (True, r"vllm_version=True is not a version string"),
    (["0.11.0"], r"vllm_version=\['0\.11\.0'\] is not a version string"),
    ("eleven", r"vllm_version='eleven' is not a vLLM version; give the release the node runs, e\.g\. '0\.11\.0', or "
               r"leave it empty"),
])
def test_a_vllm_version_that_is_not_a_version_string_is_refused(version, needle):
    # str() of a float loses digits (0.10 is 0.1) and a text that is no version read as 0.0.0: both are errors
    with pytest.raises(AnsibleFilterError, match=rf"^from_guide: {needle}"):
        from_guide(GUIDE, vllm_version=version)


def test_an_empty_vllm_version_is_none():
    assert from_guide(GUIDE, vllm_version="") == from_guide(GUIDE)
    assert from_guide(GUIDE, vllm_version="0.9.1")["notes"] != from_guide(GUIDE)["notes"]   # swap_space kept in 0.9
