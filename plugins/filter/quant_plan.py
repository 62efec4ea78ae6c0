# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: quant_plan
short_description: The W8A8 quantization tool and command a vllm-ascend release prescribes
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Looks a vllm-ascend release up in the collection's table of quantization tools, read from that release's
    quantization guide, and returns the tool (msModelSlim of an msit branch, tag or commit up to v0.20.2rc1,
    msModelSlim 26.0.0 from v0.21.0rc1), how to install it, and the guide's quantization command for the paths
    given.
  - Fails with the reason for a release without a documented tool (v0.7.3 to v0.8.4rc1).
options:
  _input:
    description: The vllm-ascend release, for example C(0.11.0), C(v0.13.0rc2) or C(0.23.0.post1).
    type: str
    required: true
  python:
    description: Python on the node that runs the tool (where its C(install.sh) ran).
    type: str
    required: true
  tool_dir:
    description:
      - The tool's C(msmodelslim) directory on the node.
      - Empty is where the install steps put it, C(<clone_dir>/msit/msmodelslim) for msit,
        C(<clone_dir>/msmodelslim) for msModelSlim.
    type: str
    default: ""
  clone_dir:
    description: Directory the install steps clone the tool into.
    type: str
    default: /opt/ascendai
  model_path:
    description: The model to quantize.
    type: str
    required: true
  save_path:
    description: Where the script writes the quantized model.
    type: str
    required: true
  script:
    description: Another example script of the same checkout (absolute path); empty takes the guide's.
    type: str
    default: ""
  args:
    description: The script's arguments after the model and save paths; empty takes the guide's.
    type: list
    elements: str
  save_option:
    description: The script's option naming the output directory; empty takes the guide's.
    type: str
    default: ""
  env:
    description: Environment added to the guide's.
    type: dict
  model_type:
    description:
      - The model's C(config.json) C(model_type). C(deepseek_v3) (DeepSeek-V3, R1, V3.1) with msModelSlim takes the
        tool's DeepSeek example (C(example/DeepSeek/quant_deepseek_w8a8.py --batch_size 4 --trust_remote_code True),
        its README's W8A8 mixed quantization for V3 and R1) instead of the guide's Qwen3-MoE example, unless
        O(script) or O(args) are given.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Plan the quantization for the node's vllm-ascend
  ansible.builtin.set_fact:
    quant: >-
      {{ '0.11.0' | ascendai.vllm.quant_plan(python='/opt/ascendai/venvs/vllm/bin/python',
         model_path='/models/m', save_path='/models/m-w8a8') }}
"""

RETURN = r"""
_value:
  description: The plan.
  type: dict
  contains:
    tool:
      description: C(msit) or C(msmodelslim).
      type: str
    tool_name:
      description: The tool and its version in words, for example C(msModelSlim 26.0.0).
      type: str
    repo:
      description: Repository to clone.
      type: str
    ref:
      description: Branch or tag to clone.
      type: str
    commit:
      description: Commit to check out after cloning, or null.
      type: str
    tool_dir:
      description: The tool's C(msmodelslim) directory.
      type: str
    install:
      description: The install steps, as shell commands.
      type: list
      elements: str
    script:
      description: The script that quantizes.
      type: str
    chdir:
      description: Directory the script runs in (its relative data set paths start there).
      type: str
    argv:
      description: The command.
      type: list
      elements: str
    environment:
      description: Environment of the command.
      type: dict
    data_files:
      description: Data sets the guide's command reads (absolute), to check before running.
      type: list
      elements: str
    sources:
      description: The guide's lines (install, command) at the release tag.
      type: list
      elements: str
    release_range:
      description: The vllm-ascend releases that share this tool and command.
      type: str
    family:
      description: The model family whose script was taken (C(deepseek_v3)), or null for the guide's.
      type: str
    prerequisites:
      description: What the family's script needs on the node besides the tool (from the tool's README).
      type: list
      elements: str
    output:
      description: The files the script writes into O(save_path) (vLLM serves them with C(--quantization ascend)).
      type: list
      elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._quant_tools import QuantToolError, quant_plan as _plan


def quant_plan(vllm_ascend_version, python, model_path, save_path, tool_dir="", script="", args=None, save_option="",
               env=None, clone_dir="/opt/ascendai", model_type=""):
    """The W8A8 tool and command of a vllm-ascend release."""
    try:
        return _plan(vllm_ascend_version, python, tool_dir or "", model_path, save_path, script=script or "",
                     args=args or None, save_option=save_option or "", env=env or None,
                     clone_dir=clone_dir or "/opt/ascendai", model_type=model_type or "")
    except QuantToolError as exc:
        raise AnsibleFilterError(f"quant_plan: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"quant_plan": quant_plan}
