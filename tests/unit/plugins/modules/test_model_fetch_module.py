"""Module-level tests for ascendai.vllm.model_fetch: arguments, modes, check mode, diff, failures."""

from __future__ import annotations

import json
import os
import stat

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.ascendai.vllm.plugins.module_utils import _bundle as bundle_utils
from ansible_collections.ascendai.vllm.plugins.modules import model_fetch
from ansible_collections.ascendai.vllm.tests.unit.plugins.module_utils import test_model_fetch as helpers
from ansible_collections.ascendai.vllm.tests.unit.plugins.module_utils.test_model_fetch import (
    MODEL,
    make_bundle,
    model_files,
)

server = helpers.server  # the HTTP server fixture (Range support)


def run_module(capsys, args, check=False, diff=False):
    args = dict(args)
    if check:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    with patch_module_args(args), pytest.raises(SystemExit):
        model_fetch.main()
    return json.loads(capsys.readouterr().out)


def test_fetch_sets_modes_then_is_idempotent(server, tmp_path, capsys):
    bundle = make_bundle(server.root, model_files())
    dest = str(tmp_path / "models" / MODEL)
    args = {"src": server.url, "model": MODEL, "dest": dest, "mode": "0640", "directory_mode": "0750"}
    res = run_module(capsys, args, check=True, diff=True)
    assert res["changed"] is True and not os.path.exists(dest)
    assert res["diff"]["before"]["missing_or_different"] == sorted(bundle.files)
    res = run_module(capsys, args)
    assert res["changed"] is True and sorted(res["fetched"]) == sorted(bundle.files)
    assert stat.S_IMODE(os.stat(os.path.join(dest, "config.json")).st_mode) == 0o640
    assert stat.S_IMODE(os.stat(os.path.join(dest, "sub", "extra.txt")).st_mode) == 0o640
    assert stat.S_IMODE(os.stat(dest).st_mode) == 0o750
    assert stat.S_IMODE(os.stat(os.path.join(dest, "sub")).st_mode) == 0o750
    res = run_module(capsys, args)
    assert res["changed"] is False and res["fetched"] == []
    os.chmod(os.path.join(dest, "config.json"), 0o644)
    res = run_module(capsys, args)
    assert res["changed"] is True and res["fetched"] == []
    assert stat.S_IMODE(os.stat(os.path.join(dest, "config.json")).st_mode) == 0o640


def test_verify_only_with_manifest_content(tmp_path, capsys):
    bundle = make_bundle(str(tmp_path / "b"), model_files())
    dest = os.path.join(bundle.root, "models", MODEL)
    res = run_module(capsys, {"model": MODEL, "dest": dest, "manifest_content": bundle.manifest})
    assert res["changed"] is False and sorted(res["present"]) == sorted(bundle.files)
    os.unlink(os.path.join(dest, "config.json"))
    res = run_module(capsys, {"model": MODEL, "dest": dest, "manifest_content": bundle.manifest})
    assert res["failed"] is True and "config.json: missing" in res["msg"]


def test_needs_src_or_manifest(tmp_path, capsys):
    res = run_module(capsys, {"model": MODEL, "dest": str(tmp_path)})
    assert res["failed"] is True and "src, manifest_content" in res["msg"]


def test_failure_names_model_and_dest(server, tmp_path, capsys):
    make_bundle(server.root, model_files())
    res = run_module(capsys, {"src": server.url, "model": "other", "dest": str(tmp_path / "d")})
    assert res["failed"] is True and res["model"] == "other"
    assert "lists no files under models/other/" in res["msg"] and f"models in this bundle: {MODEL}" in res["msg"]
    assert not os.path.exists(tmp_path / "d" / bundle_utils.STATE_DIR)
