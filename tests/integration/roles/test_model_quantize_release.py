# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The model role quantizes with the tool and the command of the node's vllm-ascend release.

The role's quantize tasks run for real (ansible-playbook, local connection) against a stand-in for the venv's
Python: it answers the vllm-ascend version and ``import msmodelslim``, and when it runs the tool's script it
records its arguments, working directory and environment and writes ``quant_model_description.json`` where the
script's output option says, as msModelSlim does. Expected commands: each release's quantization guide
(plugins/module_utils/_generated/quant_guides.py).
"""

from __future__ import annotations

import getpass
import grp
import json
import os
import re
import sys

import pytest

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import PLAYBOOK, run_playbook

FAKE_PYTHON = r'''#!/bin/sh
if [ "$1" = "-c" ]; then
  case "$2" in
    *vllm-ascend*) [ -n "@VERSION@" ] && { echo "@VERSION@"; exit 0; }
                   echo "importlib.metadata.PackageNotFoundError: No package metadata was found for vllm-ascend" >&2
                   exit 1 ;;
    *msmodelslim*) [ "@TOOL@" = yes ] && { echo /x/msmodelslim/__init__.py; exit 0; }
                   echo "ModuleNotFoundError: No module named 'msmodelslim'" >&2; exit 1 ;;
  esac
  exit 3
fi
out=""
prev=""
for a in "$@"; do
  case "$prev" in --save_path|--save_directory) out="$a" ;; esac
  prev="$a"
done
@PY@ - "$@" <<'EOF'
import json, os, sys
with open("@LOG@", "w") as handle:
    json.dump({"argv": sys.argv[1:], "cwd": os.getcwd(),
               "env": {k: v for k, v in os.environ.items() if k.startswith(("PYTORCH_NPU", "ASCEND_"))}}, handle)
EOF
mkdir -p "$out" && echo '{"model_quant_type": "W8A8"}' > "$out/quant_model_description.json"
'''


def run_quantize(tmp_path, version, tool_installed=True, extra=None, config=None):
    """Runs the role's quantize tasks; returns (rc, output, the tool's record or None, the directories)."""
    log = tmp_path / "tool.json"
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON.replace("@VERSION@", version).replace("@TOOL@", "yes" if tool_installed else "no")
                      .replace("@LOG@", str(log)).replace("@PY@", sys.executable))
    python.chmod(0o755)
    clone = tmp_path / "clone"
    # the example scripts and data sets of both kinds of checkout, where the install steps put them
    for tool_dir in (clone / "msit" / "msmodelslim", clone / "msmodelslim"):
        for script in ("example/DeepSeek/quant_deepseek.py", "example/DeepSeek/quant_deepseek_w8a8.py",
                       "example/Qwen/quant_qwen.py", "example/Qwen3-MOE/quant_qwen_moe_w8a8.py",
                       "example/common/boolq.jsonl", "example/common/qwen3-moe_anti_prompt_50.json",
                       "example/common/qwen3-moe_calib_prompt_50.json", "example/common/deepseek_anti_prompt.json",
                       "example/common/deepseek_calib_prompt.json"):
            (tool_dir / script).parent.mkdir(parents=True, exist_ok=True)
            (tool_dir / script).write_text("")
    model = tmp_path / "models" / "m"
    model.mkdir(parents=True)
    if config is not None:
        (model / "config.json").write_text(json.dumps(config))
    role_vars = {"_model_present": True, "model_quantization": "w8a8", "model_dir": str(tmp_path / "models"),
                 "model_name": "m", "model_serve_path": str(model), "model_quant_python": str(python),
                 "model_quant_clone_dir": str(clone), "model_owner": getpass.getuser(),
                 "model_group": grp.getgrgid(os.getgid()).gr_name}
    role_vars.update(extra or {})
    out = run_playbook(tmp_path, [{
        "name": "quantize", "hosts": "localhost", "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "tasks": [{"name": "Quantize",
                   "ansible.builtin.include_role": {"name": "ascendai.vllm.model", "tasks_from": "quantize"},
                   "vars": role_vars}],
    }])
    record = json.loads(log.read_text()) if log.exists() else None
    dirs = {"clone": str(clone), "model": str(model), "save": str(tmp_path / "models" / "m-w8a8.partial")}
    return out.returncode, out.stdout + out.stderr, record, dirs


# release, the tool's msmodelslim directory below the clone dir, the guide's script and arguments after the paths
CASES = [
    ("0.9.1", "msit/msmodelslim", "example/DeepSeek/quant_deepseek.py", "--save_directory",
     ["--device_type", "cpu", "--act_method", "2", "--w_bit", "8", "--a_bit", "8", "--is_dynamic", "True"], {}),
    ("0.11.0", "msit/msmodelslim", "example/DeepSeek/quant_deepseek_w8a8.py", "--save_path", ["--batch_size", "4"],
     {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:False"}),
    ("0.13.0", "msit/msmodelslim", "example/Qwen3-MOE/quant_qwen_moe_w8a8.py", "--save_path",
     ["--anti_dataset", "../common/qwen3-moe_anti_prompt_50.json", "--calib_dataset",
      "../common/qwen3-moe_calib_prompt_50.json", "--trust_remote_code", "True"],
     {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:False"}),
    ("0.23.0", "msmodelslim", "example/Qwen3-MOE/quant_qwen_moe_w8a8.py", "--save_path",
     ["--anti_dataset", "../common/qwen3-moe_anti_prompt_50.json", "--calib_dataset",
      "../common/qwen3-moe_calib_prompt_50.json", "--trust_remote_code", "True"],
     {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:False"}),
]


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
@pytest.mark.parametrize("version,tool_dir,script,save_option,args,env", CASES, ids=[c[0] for c in CASES])
def test_the_guide_command_of_the_release_runs(tmp_path, version, tool_dir, script, save_option, args, env):
    rc, output, record, dirs = run_quantize(tmp_path, version)
    assert rc == 0, output[-4000:]
    script_path = f"{dirs['clone']}/{tool_dir}/{script}"
    assert record["argv"] == [script_path, "--model_path", dirs["model"], save_option, dirs["save"]] + args
    assert record["cwd"] == os.path.dirname(script_path)
    assert record["env"] == env
    assert os.path.exists(os.path.join(dirs["save"][:-len(".partial")], "quant_model_description.json"))


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
@pytest.mark.parametrize("version,ref,not_ref", [
    ("0.11.0", "git clone https://gitee.com/ascend/msit -b br_release_MindStudio_8.1.RC2_TR5_20260624", "26.0.0"),
    ("0.18.0", "git clone https://gitcode.com/Ascend/msit.git -b br_release_MindStudio_8.3.0_20261231", "26.0.0"),
    ("0.21.0rc1", "git clone https://gitcode.com/Ascend/msmodelslim.git -b 26.0.0", "msit"),
])
def test_a_missing_tool_names_the_release_s_tool(tmp_path, version, ref, not_ref):
    rc, output, record, _dirs = run_quantize(tmp_path, version, tool_installed=False)
    assert rc != 0 and record is None
    message = re.sub(r"\s+", " ", output)
    assert "Fail without msModelSlim" in message
    assert ref in message and f"vllm-ascend {version} " in message
    assert not_ref not in message.split("prescribes", 1)[1].split("Quantizing needs the NPU")[0]


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
def test_a_release_without_a_tool_is_refused(tmp_path):
    rc, output, record, _dirs = run_quantize(tmp_path, "0.7.3")
    assert rc != 0 and record is None
    assert "documents no quantization tool" in re.sub(r"\s+", " ", output)


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
def test_release_unknown_and_own_script(tmp_path):
    rc, output, record, _dirs = run_quantize(tmp_path, "")
    assert rc != 0 and record is None
    assert "set model_vllm_ascend_version" in re.sub(r"\s+", " ", output)
    # the release given, another example script of the checkout with its own arguments
    other = tmp_path / "other"
    other.mkdir()
    script = f"{tmp_path}/clone/msit/msmodelslim/example/Qwen/quant_qwen.py"
    rc, output, record, dirs = run_quantize(other, "", extra={
        "model_vllm_ascend_version": "0.11.0", "model_quant_script": script,
        "model_quant_args": ["--w_bit", "8"], "model_quant_save_option": "--save_directory",
        "model_quant_env": {"ASCEND_RT_VISIBLE_DEVICES": "0,1"}})
    assert rc == 0, output[-4000:]
    assert record["argv"] == [script, "--model_path", dirs["model"], "--save_directory", dirs["save"], "--w_bit", "8"]
    assert record["env"] == {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:False", "ASCEND_RT_VISIBLE_DEVICES": "0,1"}


# tests/tools/make_tiny_v3_model.py's config.json keys that name the family (DeepSeek-V3/R1: model_type deepseek_v3)
V3_CONFIG = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "kv_lora_rank": 512}


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
def test_deepseek_v3_runs_msmodelslim_s_deepseek_command(tmp_path):
    """msModelSlim 26.0.0's README (example/DeepSeek/README.md lines 202 and 323) for DeepSeek-V3/R1 W8A8."""
    rc, output, record, dirs = run_quantize(tmp_path, "0.23.0", config=V3_CONFIG)
    assert rc == 0, output[-4000:]
    script = f"{dirs['clone']}/msmodelslim/example/DeepSeek/quant_deepseek_w8a8.py"
    assert record["argv"] == [script, "--model_path", dirs["model"], "--save_path", dirs["save"],
                              "--batch_size", "4", "--trust_remote_code", "True"]
    assert record["cwd"] == os.path.dirname(script)
    assert os.path.exists(os.path.join(dirs["save"][:-len(".partial")], "quant_model_description.json"))


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
def test_deepseek_v3_without_the_tool_stops_and_names_what_a_real_node_needs(tmp_path):
    """The sandbox (no msModelSlim, no NPU) stops before running, naming the tool, the script, its prerequisites
    and the output vLLM serves."""
    rc, output, record, _dirs = run_quantize(tmp_path, "0.23.0", tool_installed=False, config=V3_CONFIG)
    assert rc != 0 and record is None
    message = re.sub(r"\s+", " ", output)
    assert "Fail without msModelSlim" in message
    assert "git clone https://gitcode.com/Ascend/msmodelslim.git -b 26.0.0" in message
    assert "example/DeepSeek/quant_deepseek_w8a8.py --model_path" in message
    assert "--batch_size 4 --trust_remote_code True" in message
    assert "the tool's script for deepseek_v3 models; it also needs transformers 4.48.2" in message
    assert "expects quant_model_description.json, quant_model_weight_w8a8_dynamic*.safetensors" in message
    assert "--quantization ascend" in message and "Quantizing needs the NPU" in message
