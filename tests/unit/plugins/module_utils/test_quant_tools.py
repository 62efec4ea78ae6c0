"""plugins/module_utils/_quant_tools.py against every vllm-ascend release's own quantization guide.

plugins/module_utils/_generated/quant_guides.py holds the lines of each release tag's guide (``git clone``, ``git
checkout``, ``pip install accelerate``, the ``cd example/...`` and the quantization command), read from the tags by
tools/generate/quant_tool_facts.py. Every tag must get the tool, branch, commit, script and arguments its guide gives.
"""

from __future__ import annotations

import json
import os
import re
import shlex

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.quant_plan import quant_plan as quant_plan_filter
from ansible_collections.ascendai.vllm.plugins.module_utils._generated.quant_guides import GUIDES
from ansible_collections.ascendai.vllm.plugins.module_utils._quant_tools import (
    GUIDES_READ_UP_TO,
    ROWS,
    QuantToolError,
    find_row,
    quant_plan,
)

WITH_GUIDE = sorted(t for t, g in GUIDES.items() if g)
WITHOUT_GUIDE = sorted(t for t, g in GUIDES.items() if not g)


def _plan(tag, **kwargs):
    return quant_plan(tag, "/venv/bin/python", "", "/models/m", "/models/m-w8a8", clone_dir="/opt/t", **kwargs)


def _clone(text):
    """(repository, branch or None) of a guide's ``git clone`` line, in either order of its words."""
    words = text.split()[2:]
    branch = words[words.index("-b") + 1] if "-b" in words else None
    repo = next(w for w in words if w.startswith("https://"))
    return repo, branch


def _command(text):
    """(script, save option, the arguments after the model and save paths) of a guide's command."""
    words = shlex.split(text)[1:]
    script = words.pop(0)
    out = []
    save = None
    skip = False
    for word in words:
        if skip:
            skip = False
            continue
        if word == "--model_path" or word in ("--save_path", "--save_directory"):
            save = word if word != "--model_path" else save
            skip = True
            continue
        out.append(word)
    return script, save, out


def test_the_fixture_reaches_the_newest_guide_read():
    assert WITH_GUIDE and f"v{GUIDES_READ_UP_TO}" in GUIDES
    # every tag: either a guide, or a release before the first guide
    assert set(WITHOUT_GUIDE) == {"v0.7.1rc1", "v0.7.3rc1", "v0.7.3rc2", "v0.7.3", "v0.7.3.post1", "v0.8.4rc1"}


@pytest.mark.parametrize("tag", WITH_GUIDE)
def test_each_release_gets_its_guide_s_tool(tag):
    guide = GUIDES[tag]
    plan = _plan(tag)
    repo, branch = _clone(guide["clone"]["text"])
    # v0.12.0rc1/v0.13.0rc1 print a web page address (.../msit/tree/master), not a repository
    assert plan["repo"] == ("https://gitcode.com/Ascend/msit.git" if repo.endswith("/tree/master") else repo)
    assert plan["ref"] == (branch or "master")
    checkout = guide.get("checkout", {}).get("text", "").split()
    assert plan["commit"] == (checkout[2] if checkout else None)
    assert ("pip install accelerate" in plan["install"]) == ("accelerate" in guide)
    script, save, args = _command(guide["command"]["text"])
    example = guide["cd"]["text"].split()[1].rsplit("msmodelslim/", 1)[-1]
    assert plan["script"] == f"{plan['tool_dir']}/{example}/{script}"
    assert plan["chdir"] == f"{plan['tool_dir']}/{example}"
    assert plan["argv"] == ["/venv/bin/python", plan["script"], "--model_path", "/models/m", save,
                            "/models/m-w8a8"] + args
    for data in plan["data_files"]:
        assert os.path.relpath(data, plan["chdir"]) in args


@pytest.mark.parametrize("tag", WITH_GUIDE)
def test_the_install_steps_put_the_tool_where_the_plan_looks(tag):
    plan = _plan(tag)
    steps = plan["install"]
    assert steps[0] == "cd /opt/t" and steps[-1 if "pip install accelerate" not in steps else -2] == "bash install.sh"
    cd = next(s for s in steps[1:] if s.startswith("cd "))
    assert plan["tool_dir"] == "/opt/t/" + cd.split()[1]
    assert plan["tool"] == ("msmodelslim" if "msmodelslim.git" in plan["repo"] else "msit")


@pytest.mark.parametrize("tag", WITHOUT_GUIDE)
def test_releases_without_a_guide_are_refused(tag):
    with pytest.raises(QuantToolError, match="documents no quantization tool|older than every release"):
        _plan(tag)


def test_the_rows_cite_their_guide_lines():
    for row in ROWS:
        for url in row["sources"]:
            m = re.match(r"https://github.com/vllm-project/vllm-ascend/blob/(v[^/]+)/(.+)#L(\d+)$", url)
            assert m, url
            tag, path, line = m.group(1), m.group(2), int(m.group(3))
            if path.startswith("docs/"):
                guide = GUIDES[tag]
                assert guide["path"] == path
                assert line in (guide["clone"]["line"], guide["command"]["line"]), url
            assert find_row(tag) is row


def test_rows_follow_one_another():
    for row in ROWS:
        assert find_row(row["first"]) is row
        if row["last"]:
            assert find_row(row["last"]) is row
    assert ROWS[-1]["last"] is None


@pytest.mark.parametrize("version,row_first", [
    ("0.11.0rc0", "0.10.1rc1"), ("0.11.0.post1", "0.10.1rc1"), ("v0.13.0rc1", "0.12.0rc1"),
    ("0.13.0rc2", "0.13.0rc2"), ("0.20.2rc1", "0.13.0rc2"), ("0.21.0rc1", "0.21.0rc1"), ("0.30.0rc2", "0.21.0rc1"),
    ("0.9.1", "0.9.1rc1"), ("0.9.0rc2", "0.9.0rc1"),
])
def test_release_ordering(version, row_first):
    assert find_row(version)["first"] == row_first


def test_issue_16_s_claims_against_the_guides():
    # the issue: v0.11.0 -> msit br_release_MindStudio_8.1.RC2_TR5_20260624 (true)
    assert _plan("0.11.0")["ref"] == "br_release_MindStudio_8.1.RC2_TR5_20260624"
    # the issue: v0.13 to v0.20 -> 8.3.0; the guides: v0.13.0rc1 still 8.1.RC2, 8.3.0 from v0.13.0rc2
    assert _plan("0.13.0rc1")["ref"] == "br_release_MindStudio_8.1.RC2_TR5_20260624"
    assert _plan("0.20.2rc1")["ref"] == "br_release_MindStudio_8.3.0_20261231"
    # the issue: msModelSlim 26.0.0 only from v0.23.0; the guides: from v0.21.0rc1
    assert _plan("0.21.0rc1")["tool_name"] == "msModelSlim 26.0.0"
    assert _plan("0.22.1rc1")["tool_name"] == "msModelSlim 26.0.0"


def test_own_script_args_and_env():
    plan = _plan("0.23.0", script="/opt/t/msmodelslim/example/Qwen/quant_qwen.py", args=["--w_bit", 8],
                 save_option="--save_directory", env={"ASCEND_RT_VISIBLE_DEVICES": "0,1"})
    assert plan["argv"][1:] == ["/opt/t/msmodelslim/example/Qwen/quant_qwen.py", "--model_path", "/models/m",
                                "--save_directory", "/models/m-w8a8", "--w_bit", "8"]
    assert plan["chdir"] == "/opt/t/msmodelslim/example/Qwen"
    assert plan["data_files"] == []
    assert plan["environment"] == {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:False",
                                   "ASCEND_RT_VISIBLE_DEVICES": "0,1"}
    assert _plan("0.23.0")["data_files"] == ["/opt/t/msmodelslim/example/common/qwen3-moe_anti_prompt_50.json",
                                             "/opt/t/msmodelslim/example/common/qwen3-moe_calib_prompt_50.json"]


@pytest.mark.parametrize("kwargs,error", [
    ({"args": "--w_bit 8"}, "list of strings"),
    ({"env": ["A=1"]}, "mapping"),
])
def test_bad_arguments(kwargs, error):
    with pytest.raises(QuantToolError, match=error):
        _plan("0.23.0", **kwargs)
    with pytest.raises(QuantToolError, match="not a vllm-ascend version"):
        _plan("latest")
    with pytest.raises(QuantToolError, match="non-empty path"):
        quant_plan("0.23.0", "", "", "/m", "/s")
    with pytest.raises(QuantToolError, match="absolute path"):
        quant_plan("0.23.0", "/py", "", "/m", "/s", clone_dir="opt")


def test_filter():
    plan = quant_plan_filter("0.18.0", python="/py", model_path="/m", save_path="/s")
    assert plan["tool_dir"] == "/opt/ascendai/msit/msmodelslim"
    assert plan["install"][1] == "git clone https://gitcode.com/Ascend/msit.git -b br_release_MindStudio_8.3.0_20261231"
    with pytest.raises(AnsibleFilterError, match="quant_plan: vllm-ascend 0.7.3 documents no quantization tool"):
        quant_plan_filter("0.7.3", python="/py", model_path="/m", save_path="/s")


# msModelSlim's own README and script at its tag 26.0.0 (the tool of vllm-ascend v0.21.0rc1 and later), the lines
# for DeepSeek-V3/R1 W8A8 (tests/unit/fixtures/quant-tools/msmodelslim-26.0.0-deepseek.json).
_MSMODELSLIM = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "quant-tools",
                            "msmodelslim-26.0.0-deepseek.json")
with open(_MSMODELSLIM, encoding="utf-8") as _handle:
    MSMODELSLIM_DEEPSEEK = json.load(_handle)


@pytest.mark.parametrize("line", ["202", "323"])  # "DeepSeek-V3 W8A8 ..." and "DeepSeek-R1 W8A8 ..."
def test_deepseek_v3_class_takes_the_tool_s_deepseek_command(line):
    readme = MSMODELSLIM_DEEPSEEK["example/DeepSeek/README.md"]
    command = shlex.split(readme[line])
    assert command[:2] == ["python3", "quant_deepseek_w8a8.py"]
    plan = _plan("0.23.0", model_type="deepseek_v3")
    assert plan["family"] == "deepseek_v3" and plan["tool_name"] == "msModelSlim 26.0.0"
    assert plan["script"] == "/opt/t/msmodelslim/example/DeepSeek/quant_deepseek_w8a8.py"
    assert plan["chdir"] == "/opt/t/msmodelslim/example/DeepSeek"
    # the README's command with the node's paths
    want = command[2:]
    want[want.index("${model_path}")] = "/models/m"
    want[want.index("${save_path}")] = "/models/m-w8a8"
    assert plan["argv"] == ["/venv/bin/python", plan["script"], *want]
    # the script's default data sets (argparse defaults, relative to example/DeepSeek)
    script = MSMODELSLIM_DEEPSEEK["example/DeepSeek/quant_deepseek_w8a8.py"]
    defaults = [re.search(r"default=\"([^\"]+)\"", script[n]).group(1) for n in ("56", "58")]
    assert defaults == ["../common/deepseek_anti_prompt.json", "../common/deepseek_calib_prompt.json"]
    assert plan["data_files"] == ["/opt/t/msmodelslim/example/common/deepseek_anti_prompt.json",
                                  "/opt/t/msmodelslim/example/common/deepseek_calib_prompt.json"]
    # what it writes: quant_model_description.json (without --mindie_format) and the w8a8_dynamic safetensors
    assert 'quant_model_description_json_name = "quant_model_description.json"' in script["300"]
    assert 'safetensors_name="quant_model_weight_w8a8_dynamic.safetensors"' in script["305"]
    assert plan["output"][:2] == ["quant_model_description.json", "quant_model_weight_w8a8_dynamic*.safetensors"]
    # the README's checks before running: transformers 4.48.2, flash_attn out of modeling_deepseek.py, no FP8 fields
    assert "4.48.2" in readme["187"] and "4.48.2" in plan["prerequisites"][0]
    assert "flash_attn" in readme["185"] and "flash_attn" in plan["prerequisites"][1]
    assert "FP8" in readme["188"] and "quantization_config" in plan["prerequisites"][2]
    assert any("github.com/Ascend/msmodelslim/blob/26.0.0/example/DeepSeek/README.md#L318-L324" in s
               for s in plan["sources"])


def test_other_models_and_older_tools_keep_the_guide_s_command():
    # a Qwen3-MoE model: the guide's example, as before
    assert _plan("0.23.0", model_type="qwen3_moe")["script"].endswith("example/Qwen3-MOE/quant_qwen_moe_w8a8.py")
    assert _plan("0.23.0")["family"] is None
    # msit rows: the guide's own script (v0.11.0's is already the DeepSeek W8A8 one); no family applied
    old = _plan("0.11.0", model_type="deepseek_v3")
    assert old["family"] is None and old["script"].endswith("example/DeepSeek/quant_deepseek_w8a8.py")
    # an explicit script wins over the family's
    mine = _plan("0.23.0", model_type="deepseek_v3", script="/x/quant.py", args=["--a"])
    assert mine["argv"][1] == "/x/quant.py" and mine["argv"][-1] == "--a" and mine["data_files"] == []
