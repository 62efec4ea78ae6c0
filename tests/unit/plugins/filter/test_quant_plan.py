"""The quant_plan filter against the quantization guide of each vllm-ascend release, as kept line by line in
plugins/module_utils/_generated/quant_guides.py: the clone, the checkout, the directory and the guide's command."""

from __future__ import annotations

import os
import re
import shlex

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.quant_plan import FilterModule
from ansible_collections.ascendai.vllm.plugins.module_utils._generated.quant_guides import GUIDES

quant_plan = FilterModule().filters()["quant_plan"]

PYTHON = "/opt/ascendai/venvs/quant/bin/python"
MODEL, SAVE = "/models/m", "/models/m-w8a8"


def guide(tag):
    return GUIDES[tag]


@pytest.mark.parametrize("tag", ["v0.8.4rc2", "v0.9.0rc1", "v0.10.0rc1", "v0.11.0", "v0.13.0", "v0.21.0rc1",
                                 "v0.23.0"])
def test_plan_is_the_guides_command(tag):
    lines = guide(tag)
    plan = quant_plan(tag, python=PYTHON, model_path=MODEL, save_path=SAVE)
    # git clone <repo> [-b <ref>]: the same repository and branch or tag
    clone = shlex.split(lines["clone"]["text"])
    repo = next(word for word in clone[2:] if "://" in word)
    assert plan["repo"] == repo
    if "-b" in clone:
        assert plan["ref"] == clone[clone.index("-b") + 1]
        assert f"git clone {repo} -b {plan['ref']}" in plan["install"]
    if "checkout" in lines:
        commit = lines["checkout"]["text"].split()[-1]
        assert plan["commit"] == commit and any(step.endswith(f"checkout {commit}") for step in plan["install"])
    else:
        assert plan["commit"] is None
    assert ("pip install accelerate" in plan["install"]) is ("accelerate" in lines)
    assert plan["install"][-1 if "accelerate" not in lines else -2] == "bash install.sh"
    # the tool's msmodelslim directory: <clone_dir>/msit/msmodelslim (msit) or <clone_dir>/msmodelslim
    checkout = re.sub(r"\.git$", "", repo.rstrip("/").rsplit("/", 1)[-1])
    assert plan["tool"] == ("msit" if checkout == "msit" else "msmodelslim")
    assert plan["tool_dir"] == ("/opt/ascendai/msit/msmodelslim" if checkout == "msit" else "/opt/ascendai/msmodelslim")
    # cd example/<family> (or an absolute /msit/msmodelslim/example/...), then python3 <script> <args>
    cd = lines["cd"]["text"].split()[1]
    example = cd[cd.index("example/"):]
    assert plan["chdir"] == f"{plan['tool_dir']}/{example}"
    command = shlex.split(lines["command"]["text"])
    assert command[0] == "python3"
    assert plan["script"] == f"{plan['chdir']}/{command[1]}"
    wanted = [MODEL if word == "$MODEL_PATH" else SAVE if word == "$SAVE_PATH" else word for word in command[2:]]
    assert plan["argv"] == [PYTHON, plan["script"]] + wanted
    # the guide's data sets, relative to the script's directory, made absolute
    for relative in (word for word in command if word.startswith("../")):
        assert os.path.normpath(os.path.join(plan["chdir"], relative)) in plan["data_files"]
    assert plan["vllm_ascend"] == tag[1:] and plan["family"] is None


def test_own_script_args_env_and_directories():
    plan = quant_plan("0.23.0.post1", python=PYTHON, model_path=MODEL, save_path=SAVE, clone_dir="/srv/tools/",
                      script="/srv/tools/msmodelslim/example/Qwen/quant_qwen.py", args=["--w_bit", 8],
                      env={"ASCEND_RT_VISIBLE_DEVICES": 0})
    assert plan["tool_dir"] == "/srv/tools/msmodelslim" and plan["install"][0] == "cd /srv/tools"
    assert plan["argv"] == [PYTHON, "/srv/tools/msmodelslim/example/Qwen/quant_qwen.py", "--model_path", MODEL,
                            "--save_path", SAVE, "--w_bit", "8"]
    assert plan["chdir"] == "/srv/tools/msmodelslim/example/Qwen"
    assert plan["data_files"] == []           # an own script reads its own data sets
    assert plan["environment"] == {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:False",
                                   "ASCEND_RT_VISIBLE_DEVICES": "0"}


def test_deepseek_v3_takes_the_tools_deepseek_example():
    plan = quant_plan("0.23.0", python=PYTHON, model_path=MODEL, save_path=SAVE, model_type="deepseek_v3")
    # DOCUMENTATION: example/DeepSeek/quant_deepseek_w8a8.py --batch_size 4 --trust_remote_code True
    assert plan["family"] == "deepseek_v3"
    assert plan["script"] == "/opt/ascendai/msmodelslim/example/DeepSeek/quant_deepseek_w8a8.py"
    assert plan["argv"][2:] == ["--model_path", MODEL, "--save_path", SAVE, "--batch_size", "4",
                                "--trust_remote_code", "True"]
    assert plan["prerequisites"]


@pytest.mark.parametrize("version,kwargs,needle", [
    ("0.8.4rc1", {}, "vllm-ascend 0.8.4rc1 documents no quantization tool"),
    ("0.7.3", {}, "vllm-ascend 0.7.3 documents no quantization tool"),
    ("0.5.0", {}, "vllm-ascend 0.5.0 is older than every release with a quantization guide"),
    ("banana", {}, "'banana' is not a vllm-ascend version"),
    # no number is read as a version (an unquoted 0.10 is the float 0.1) and no model_type turned into text
    (0.10, {}, r"vllm_ascend_version=0\.1 is not a version string: set model_vllm_ascend_version quoted in YAML, "
               r"e\.g\. '0\.11\.0' \(an unquoted 0\.10 is the number 0\.1\), or install vllm-ascend in the venv "
               r"of model_quant_python$"),
    (11, {}, r"vllm_ascend_version=11 is not a version string"),
    (None, {}, r"vllm_ascend_version=None is not a version string"),
    ("0.23.0", {"model_type": ["deepseek_v3"]}, r"model_type=\['deepseek_v3'\] must be the model_type of the "
                                                r"model's config\.json \(a string\) or empty$"),
    ("0.11.0", {"model_path": ""}, "model_path must be a non-empty path, got ''"),
    ("0.11.0", {"python": None}, "python must be a non-empty path, got None"),
    ("0.11.0", {"clone_dir": "opt/ascendai"}, "clone_dir must be an absolute path, got 'opt/ascendai'"),
    ("0.11.0", {"args": "--w_bit 8"}, "args must be a list of strings, got '--w_bit 8'"),
    ("0.11.0", {"env": ["A=1"]}, r"env must be a mapping of names to values, got \['A=1'\]"),
])
def test_bad_input_is_named(version, kwargs, needle):
    call = {"python": PYTHON, "model_path": MODEL, "save_path": SAVE}
    call.update(kwargs)
    with pytest.raises(AnsibleFilterError, match=rf"^quant_plan: .*{needle}"):
        quant_plan(version, **call)
