"""Tests for the ascendai.vllm.vllm_config filter."""

from __future__ import annotations

import re

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.vllm_config import FilterModule, vllm_config


def test_registered_under_its_name():
    assert FilterModule().filters() == {"vllm_config": vllm_config}


def test_renders_the_config_file():
    options = {"tensor_parallel_size": 4, "max_model_len": 4096, "max_num_seqs": 64, "gpu_memory_utilization": 0.9,
               "enable_prefix_caching": False, "quantization": None,
               "additional_config": {"ascend_scheduler_config": {"enabled": True}}}
    config = vllm_config(options, model="/srv/models/deepseek-llm-67b-chat", served_model_name="deepseek-67b")
    text = yaml.safe_dump(config, sort_keys=False)
    assert text.splitlines()[:2] == ["model: /srv/models/deepseek-llm-67b-chat", "served-model-name: deepseek-67b"]
    assert yaml.safe_load(text) == {
        "model": "/srv/models/deepseek-llm-67b-chat", "served-model-name": "deepseek-67b",
        "tensor-parallel-size": 4, "max-model-len": 4096, "max-num-seqs": 64, "gpu-memory-utilization": 0.9,
        "no-enable-prefix-caching": True, "additional-config": {"ascend_scheduler_config": {"enabled": True}}}


def test_removed_option_fails_with_replacement():
    with pytest.raises(AnsibleFilterError) as info:
        vllm_config({"swap_space": 16, "worker_use_ray": True})
    text = str(info.value)
    assert text.startswith("vllm_config: swap_space (--swap-space) is removed in vLLM 0.18.0")
    assert "use distributed_executor_backend: ray" in text


def test_vllm_version_and_allow_unknown():
    assert vllm_config({"swap_space": 4}, vllm_version="0.9.1") == {"swap-space": 4}
    with pytest.raises(AnsibleFilterError, match="did you mean max_num_seqs"):
        vllm_config({"max_num_seq": 4})
    assert vllm_config({"future_flag": "x"}, allow_unknown=True) == {"future-flag": "x"}


def test_not_a_mapping():
    with pytest.raises(AnsibleFilterError, match="must be a mapping of vLLM option names to values, got list"):
        vllm_config(["max_model_len"])


@pytest.mark.parametrize("version,needle", [
    (0.10, r"vllm_version=0\.1 is not a version string; quote it in YAML, e\.g\. '0\.11\.0' \(an unquoted 0\.10 is "
           r"the number 0\.1\)"),
    (0.11, r"vllm_version=0\.11 is not a version string"),
    (11, r"vllm_version=11 is not a version string"),
    (["0.11.0"], r"vllm_version=\['0\.11\.0'\] is not a version string"),
])
def test_a_vllm_version_that_is_not_a_string_is_refused(version, needle):
    # str() of a float loses digits: 0.10 would be read as 0.1 (and 0.11 happened to be read as 0.11.0)
    with pytest.raises(AnsibleFilterError, match=rf"^vllm_config: {needle}"):
        vllm_config({"max_num_seqs": 4}, vllm_version=version)


@pytest.mark.parametrize("value", ["false", "no", 0, None, [True]])
def test_allow_unknown_that_is_not_a_boolean_is_refused(value):
    # bool('false') is True: a text would have let every unknown option through
    with pytest.raises(AnsibleFilterError, match=rf"^vllm_config: allow_unknown={re.escape(repr(value))} must be true "
                                                 r"or false"):
        vllm_config({"future_flag": "x"}, allow_unknown=value)


def test_additional_config_switch_follows_the_vllm_ascend_release():
    # vllm-ascend 0.23.0 reads additional_config.enable_balance_scheduling; scheduler_config's from v0.25.1rc1
    nested = {"additional_config": {"scheduler_config": {"enable_balance_scheduling": True}}}
    with pytest.raises(AnsibleFilterError, match=r"^vllm_config: additional_config: \{scheduler_config: "
                                                 r"\{enable_balance_scheduling: true\}\} in the vLLM options does "
                                                 r"not switch balance scheduling on in vllm-ascend 0\.23\.0"):
        vllm_config(nested, vllm_version="0.23.0", vllm_ascend_version="0.23.0")
    config = vllm_config(nested, vllm_version="0.26.0", vllm_ascend_version="0.26.0rc1")
    assert config["additional-config"] == {"scheduler_config": {"enable_balance_scheduling": True}}
    top = {"additional_config": {"enable_balance_scheduling": True}}
    assert vllm_config(top, vllm_version="0.23.0", vllm_ascend_version="0.23.0")["additional-config"] == {
        "enable_balance_scheduling": True}
