"""npu_info on broken 'npu-smi info' output: parser notes become warnings, a table whose NPU count
disagrees with itself fails with kind 'inconsistent', a cut or repeated row with kind 'parse'."""

from __future__ import annotations

import os

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.ascendai.vllm.plugins.modules import npu_info
from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.module_harness import (
    AnsibleExitJson, AnsibleFailJson, patch_exits)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "npu-smi")
NPU_SMI = "/usr/local/sbin/npu-smi"


def load(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return "\n".join(x for x in handle.read().split("\n") if not x.startswith("# "))


# https://github.com/vllm-project/vllm-ascend/issues/3906 (8 x 910B2)
B2 = load("npu-smi-info-910b2-8card-idle-vllm-ascend-issue3906.txt")
LINES = B2.split("\n")
ROW1_NPU3 = next(i for i, x in enumerate(LINES) if x.startswith("| 3     910B2"))


@pytest.fixture
def module_env(monkeypatch):
    replies = {}
    warnings = []

    def run_command(self, args, **kwargs):
        return replies[" ".join(args[1:])]

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    patch_exits(monkeypatch)
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, msg: warnings.append(msg))
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: NPU_SMI)
    return replies, warnings


def run(args):
    with patch_module_args(args), pytest.raises((AnsibleExitJson, AnsibleFailJson)) as exc:
        npu_info.main()
    return exc.type, exc.value.args[0]


def test_real_capture_has_no_warning(module_env):
    replies, warnings = module_env
    replies["info"] = (0, B2, "")
    kind, res = run({"detail": False})
    assert kind is AnsibleExitJson and res["count"] == 8 and res["notes"] == [] and warnings == []


def test_missing_npu_rows_fail_instead_of_reporting_7(module_env):
    replies, _warnings = module_env
    replies["info"] = (0, "\n".join(LINES[:ROW1_NPU3] + LINES[ROW1_NPU3 + 3:]), "")
    kind, res = run({"detail": False})
    assert kind is AnsibleFailJson, f"reported {res.get('count')} NPUs"
    assert res["kind"] == "inconsistent"
    assert "process table names NPU 3" in res["msg"] and "NPU count (7)" in res["msg"]


def test_missing_first_row_fails(module_env):
    replies, _warnings = module_env
    replies["info"] = (0, "\n".join(LINES[:ROW1_NPU3] + LINES[ROW1_NPU3 + 1:]), "")
    kind, res = run({"detail": False})
    assert kind is AnsibleFailJson and res["kind"] == "inconsistent" and "without its first row" in res["msg"]


def test_cut_row_fails_as_parse(module_env):
    replies, _warnings = module_env
    lines = list(LINES)
    lines[ROW1_NPU3 + 1] = lines[ROW1_NPU3 + 1][:-12]
    replies["info"] = (0, "\n".join(lines), "")
    kind, res = run({"detail": False})
    assert kind is AnsibleFailJson and res["kind"] == "parse" and "closing '|'" in res["msg"]


def test_repeated_rows_fail_as_parse(module_env):
    replies, _warnings = module_env
    replies["info"] = (0, "\n".join(LINES[:ROW1_NPU3 + 2] + LINES[ROW1_NPU3:]), "")
    kind, res = run({"detail": False})
    assert kind is AnsibleFailJson and res["kind"] == "parse" and "listed a second time" in res["msg"]


def test_parser_notes_become_warnings(module_env):
    replies, warnings = module_env
    replies["info"] = (0, "\n".join(LINES[:ROW1_NPU3 + 3]), "")  # cut after NPU 3, between two rows
    kind, res = run({"detail": False})
    assert kind is AnsibleExitJson and res["count"] == 4
    assert any("no process table" in w for w in warnings)
    assert res["notes"] and res["notes"][0] in warnings[0]
