# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""ascendai.vllm.vllm_config_file: the vllm_service role's config file, checked by the installed vLLM's own parser.

It replaces roles/vllm_service/files/validate_config.py, a copy of module_utils/_vllm_options that had
drifted: its unknown-option message lacked what to use instead of a removed option. The parser here is vLLM 0.32.0's
CLI (its FlexibleArgumentParser from the sdist in tests/unit/fixtures/vllm-releases, with a ``serve`` sub-parser
carrying that release's options), put where the module imports vLLM's.
"""

from __future__ import annotations

import importlib.util
import json
import os
import stat
import subprocess
import sys

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.ascendai.vllm.plugins.module_utils import _vllm_options as vo
from ansible_collections.ascendai.vllm.plugins.module_utils._generated.vllm_release_options import RELEASES
from ansible_collections.ascendai.vllm.plugins.modules import vllm_config_file
from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.module_harness import (
    AnsibleExitJson, AnsibleFailJson, patch_exits, patch_module)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
_spec = importlib.util.spec_from_file_location("vllm_release_facts",
                                               os.path.join(ROOT, "tools", "generate", "vllm_release_facts.py"))
facts_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(facts_tool)

GOOD = yaml.safe_dump(vo.render_config({"enable_prefix_caching": False, "max_model_len": 4096}, model="/m",
                                       served_model_name="tiny", vllm_version="0.32.0"), sort_keys=False)


def _serve_parser(version="0.32.0"):
    """``(serve, top, validate)`` as module_utils' vllm_serve_parser returns them, from the release's own source."""
    files = facts_tool.read_release(os.path.join(facts_tool.FIXTURES, f"vllm-{version}.tar.xz"))
    options = dict(word.split(":") for word in "".join(RELEASES[version]["options"]).split())
    top, serve = facts_tool.cli_parser(files, options)
    return serve, top, None


@pytest.fixture(name="vllm")
def fixture_vllm(monkeypatch):
    """vLLM 0.32.0 as the module's Python would import it; ``calls`` counts the checks."""
    calls = []

    def parser():
        calls.append(1)
        return _serve_parser()

    monkeypatch.setattr(vllm_config_file, "vllm_serve_parser", parser)
    monkeypatch.setattr(vllm_config_file, "installed_vllm_version", lambda: "0.32.0")
    patch_exits(monkeypatch)
    return calls


def run(args):
    with patch_module_args(args), pytest.raises((AnsibleExitJson, AnsibleFailJson)) as exc:
        vllm_config_file.main()
    return exc.type, exc.value.args[0]


def test_writes_what_vllm_accepts_with_its_mode_and_then_leaves_it(vllm, tmp_path):
    dest = tmp_path / "vllm.yaml"
    kind, result = run({"content": GOOD, "dest": str(dest), "mode": "0640"})
    assert kind is AnsibleExitJson, result
    got = (result["changed"], result["checked"], result["problems"], result["vllm_version"])
    assert got == (True, True, [], "0.32.0")
    assert dest.read_text() == GOOD
    assert stat.S_IMODE(dest.stat().st_mode) == 0o640
    assert list(tmp_path.iterdir()) == [dest]  # no temporary file left
    kind, result = run({"content": GOOD, "dest": str(dest), "mode": "0640"})
    assert (kind, result["changed"], result["checked"]) == (AnsibleExitJson, False, False)
    assert len(vllm) == 1  # an unchanged file is not checked again


@pytest.mark.parametrize(("text", "problem"), [
    # The drift of the old script: no word on what replaces a removed option (module_utils' _removed_suffix).
    ("model: /m\nswap-space: 4\n",
     "swap-space: not an option of this vLLM (--swap-space); swap_space (--swap-space) is removed in vLLM 0.18.0; "
     "use nothing: it only sized the CPU swap of the V0 engine"),
    ("model: /m\nenforce: true\n", "enforce: not an option of this vLLM (--enforce)"),
    # under `vllm serve` the CLI's top-level parser reads the file: it drops false even on vLLM 0.32
    ("model: /m\nenable-prefix-caching: false\n",
     "enable-prefix-caching: false is dropped by this vLLM's --config loader (write no-enable-prefix-caching: true"),
    # the release's parser rejects the value (vLLM's messages end in argparse's last line)
    ("model: /m\ncompilation-config: '{not json'\n", "argument --compilation-config"),
    ("- a list\n", "the config must be a YAML mapping, got list"),
])
def test_refuses_what_vllm_rejects_and_keeps_the_old_file(vllm, tmp_path, text, problem):
    dest = tmp_path / "vllm.yaml"
    dest.write_text(GOOD)
    kind, result = run({"content": text, "dest": str(dest)})
    assert kind is AnsibleFailJson, result
    assert problem in " ".join(result["problems"]), result["problems"]
    assert result["msg"].startswith(f"vLLM 0.32.0 rejects the configuration for {dest}: ")
    assert str(tmp_path) + "/." not in result["msg"]  # the temporary file is named as the file
    assert dest.read_text() == GOOD
    assert list(tmp_path.iterdir()) == [dest]


def test_check_mode_checks_and_writes_nothing(vllm, tmp_path):
    dest = tmp_path / "vllm.yaml"
    kind, result = run({"content": GOOD, "dest": str(dest), "_ansible_check_mode": True, "_ansible_diff": True})
    assert (kind, result["changed"], result["checked"]) == (AnsibleExitJson, True, True)
    assert result["diff"]["after"] == GOOD and result["diff"]["before"] == ""
    assert not dest.exists()
    kind, result = run({"content": "model: /m\nswap-space: 4\n", "dest": str(dest), "_ansible_check_mode": True})
    assert kind is AnsibleFailJson


def test_without_vllm_fails_but_check_mode_only_warns(monkeypatch, tmp_path):
    def no_vllm():
        raise ImportError("No module named 'vllm'")

    monkeypatch.setattr(vllm_config_file, "vllm_serve_parser", no_vllm)
    patch_exits(monkeypatch)
    warnings = []
    patch_module(monkeypatch, bin_path=False, warnings=warnings)
    dest = tmp_path / "vllm.yaml"
    kind, result = run({"content": GOOD, "dest": str(dest)})
    assert kind is AnsibleFailJson
    assert "cannot import vLLM" in result["msg"] and "ansible_python_interpreter: <venv>/bin/python" in result["msg"]
    assert not dest.exists()
    kind, result = run({"content": GOOD, "dest": str(dest), "_ansible_check_mode": True})
    assert (kind, result["changed"], result["checked"]) == (AnsibleExitJson, True, False)
    assert any("not checked in check mode: cannot import vLLM" in w for w in warnings), warnings


def test_dest_must_be_a_yaml_file(vllm, tmp_path):
    kind, result = run({"content": GOOD, "dest": str(tmp_path / "vllm.conf")})
    assert kind is AnsibleFailJson and "ending in .yaml or .yml" in result["msg"]


def test_the_role_writes_the_config_with_the_module_under_the_venv_python():
    with open(os.path.join(ROOT, "roles", "vllm_service", "tasks", "configure.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    task = [t for t in tasks if "ascendai.vllm.vllm_config_file" in t][0]
    assert task["ascendai.vllm.vllm_config_file"]["dest"] == "{{ _vllm_service_config }}"
    assert task["vars"]["ansible_python_interpreter"].split()[1] == "_vllm_service_python"
    assert not os.path.exists(os.path.join(ROOT, "roles", "vllm_service", "files", "validate_config.py"))
    assert not [t for t in tasks if "validate" in t.get("ansible.builtin.template", {})]


# The same module under a real vLLM (its parser and --config loader): Molecule default's verify, "The config check
# against the node's real vLLM" (these cases used to wait here for a VLLM_VALIDATE_PYTHON that CI never set).


def _ansible(args, python):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json",
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_NOCOLOR="1")
    out = subprocess.run([os.path.join(os.path.dirname(sys.executable), "ansible"), "localhost", "-i", "localhost,",
                          "-c", "local", "-e", f"ansible_python_interpreter={python}",
                          "-m", "ascendai.vllm.vllm_config_file", "-a", json.dumps(args)],
                         capture_output=True, text=True, check=False, env=env, timeout=600)
    return json.loads(out.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_through_ansible_without_vllm_says_it_cannot_check(tmp_path):
    """Through Ansible under a Python without vLLM (this test's): the module says how to run it."""
    try:
        import vllm  # noqa: F401  # pylint: disable=unused-import,import-outside-toplevel
    except ImportError:
        pass
    else:  # pragma: no cover
        pytest.skip("this Python has vLLM")
    result = _ansible({"content": GOOD, "dest": str(tmp_path / "vllm.yaml")}, sys.executable)
    assert result["failed"] is True
    assert result["msg"].startswith(f"cannot import vLLM with {sys.executable}")
    assert not (tmp_path / "vllm.yaml").exists()
