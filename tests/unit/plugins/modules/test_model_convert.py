"""Module-level tests for ascendai.vllm.model_convert (arguments, check mode, diff, failures)."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("numpy")

from ansible.module_utils.testing import patch_module_args
from ansible_collections.ascendai.vllm.plugins.modules import model_convert
from ansible_collections.ascendai.vllm.tests.unit.plugins.module_utils.test_safetensors_convert import (
    make_model,
)


def run_module(capsys, args, check=False, diff=False):
    args = dict(args)
    if check:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    with patch_module_args(args), pytest.raises(SystemExit):
        model_convert.main()
    return json.loads(capsys.readouterr().out)


def test_module_converts_then_is_idempotent(tmp_path, capsys):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    make_model(src)
    args = {"src": src, "dest": dest, "dtype": "bfloat16", "max_shard_size": "3KB"}
    res = run_module(capsys, args, check=True, diff=True)
    assert res["changed"] is True and not os.path.exists(dest)
    assert res["diff"]["before"] == {"state": "absent"} and res["diff"]["after"]["dtype"] == "bfloat16"
    res = run_module(capsys, args)
    assert res["changed"] is True and "diff" not in res
    assert res["tensors"] == 14 and res["dest_dtypes"]["BF16"] == 11
    assert sorted(f for f in os.listdir(dest) if f.endswith(".safetensors")) == res["shards"]
    res = run_module(capsys, args)
    assert res["changed"] is False


def test_module_fails_on_pickles_with_reason(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    (src / "consolidated.pt").write_bytes(b"pickle")
    res = run_module(capsys, {"src": str(src), "dest": str(tmp_path / "d"), "dtype": "float16"})
    assert res["failed"] is True
    assert "consolidated.pt" in res["msg"] and "arbitrary code" in res["msg"]


def test_module_rejects_unknown_dtype(tmp_path, capsys):
    res = run_module(capsys, {"src": str(tmp_path), "dest": str(tmp_path / "d"), "dtype": "int8"})
    assert res["failed"] is True and "dtype" in res["msg"] and "bfloat16" in res["msg"]
