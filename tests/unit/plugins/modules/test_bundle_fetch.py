"""Module-level tests for ascendai.vllm.bundle_fetch: the three ways the roles use it (download on the node, check
a controller directory in place, verify copied files), check mode, diff, idempotence and the failure messages."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.ascendai.vllm.plugins.module_utils import _bundle as bundle
from ansible_collections.ascendai.vllm.plugins.modules import bundle_fetch
from ansible_collections.ascendai.vllm.tests.unit.plugins.module_utils import test_model_fetch as helpers

server = helpers.server  # the HTTP server fixture (HEAD, Range)

DRIVER = "huawei/Ascend-hdk-910b-npu-driver_25.2.0_linux-x86-64.run"
FIRMWARE = "huawei/Ascend-hdk-910b-npu-firmware_7.7.0.6.236.run"
TARBALL = "python/cpython-3.11.15+20260807-x86_64-unknown-linux-gnu-install_only.tar.gz"
HINT = "Download the packages from Huawei's support site, or set ascend_driver_version. Nothing was installed."


def make(root):
    """A bundle like tools/sandbox/bundle.sh makes: files and their manifest (written through module_utils/_bundle)."""
    data = {DRIVER: b"#!/bin/sh\necho driver\n" * 4000, FIRMWARE: b"#!/bin/sh\necho firmware\n" * 10,
            TARBALL: bytes(range(256)) * 100, "models/m/config.json": b"{}\n", "models/m/sub/w.bin": b"\0" * 1000}
    for rel, blob in data.items():
        os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(blob)
    bundle.update_manifest(root, prefixes=["huawei", "python", "models"])
    return {rel: hashlib.sha256(blob).hexdigest() for rel, blob in data.items()}


def run_module(capsys, args, check=False, diff=False):
    args = dict(args)
    if check:
        args["_ansible_check_mode"] = True
    if diff:
        args["_ansible_diff"] = True
    with patch_module_args(args), pytest.raises(SystemExit):
        bundle_fetch.main()
    return json.loads(capsys.readouterr().out)


def test_download_check_mode_then_fetch_then_idempotent(server, tmp_path, capsys):
    sums = make(server.root)
    dest = str(tmp_path / "var" / "cache" / "ascendai" / "huawei")
    args = {"src": server.url, "files": [DRIVER, "huawei/*firmware*.run"], "dest": dest, "mode": "0600"}
    res = run_module(capsys, args, check=True, diff=True)
    assert res["changed"] is True and not os.path.exists(dest)   # a fresh node: check mode writes nothing
    names = sorted(os.path.basename(p) for p in (DRIVER, FIRMWARE))
    assert res["diff"]["before"]["missing_or_different"] == names
    res = run_module(capsys, args)
    assert res["changed"] is True and sorted(res["fetched"]) == names
    assert res["bundle_paths"] == {os.path.basename(p): p for p in (DRIVER, FIRMWARE)}
    assert res["sha256"][os.path.basename(DRIVER)] == sums[DRIVER]
    with open(os.path.join(dest, os.path.basename(DRIVER)), "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == sums[DRIVER]
    assert stat.S_IMODE(os.stat(os.path.join(dest, os.path.basename(FIRMWARE))).st_mode) == 0o600
    log = len(server.log)
    res = run_module(capsys, args)
    assert res["changed"] is False and res["fetched"] == [] and sorted(res["present"]) == names
    assert [r for r in server.log[log:] if r[0] != "GET" or r[1] != bundle.MANIFEST_NAME] == []  # only the manifest
    res = run_module(capsys, args, check=True)
    assert res["changed"] is False


def test_a_file_the_manifest_lacks_fails_before_anything_is_written(server, tmp_path, capsys):
    make(server.root)
    dest = str(tmp_path / "stage")
    other = "huawei/Ascend-hdk-910b-npu-driver_24.1.rc3_linux-x86-64.run"
    res = run_module(capsys, {"src": server.url, "files": [DRIVER, other], "dest": dest, "hint": HINT})
    assert res["failed"] is True and not os.path.exists(dest)
    assert f"{other} is not in the MANIFEST.sha256 of {server.url}" in res["msg"]
    assert f"(cd BUNDLE && sha256sum {other} >> MANIFEST.sha256)" in res["msg"] and res["msg"].endswith(HINT)


def test_a_damaged_download_is_removed_and_named(server, tmp_path, capsys):
    make(server.root)
    with open(os.path.join(server.root, FIRMWARE), "ab") as f:
        f.write(b"tampered")
    dest = str(tmp_path / "stage")
    res = run_module(capsys, {"src": server.url, "files": [FIRMWARE], "dest": dest, "hint": HINT, "retries": 0})
    assert res["failed"] is True and res["msg"].endswith(". " + HINT) and "uid" not in res
    assert re.search(r"firmware_7.7.0.6.236.run: (the server sends more|sha256 [0-9a-f]{64} does not match)",
                     res["msg"])
    assert not os.path.exists(os.path.join(dest, os.path.basename(FIRMWARE)))


def test_check_a_controller_directory_in_place(tmp_path, capsys):
    root = str(tmp_path / "bundle")
    sums = make(root)
    res = run_module(capsys, {"src": root, "files": [DRIVER, TARBALL], "hint": HINT})
    assert res["changed"] is False and res["sha256"] == {DRIVER: sums[DRIVER], TARBALL: sums[TARBALL]}
    assert res["files"] == [DRIVER, TARBALL] and not os.path.exists(os.path.join(root, bundle.STATE_DIR))
    # molecule/ascend_faults' bundle: a manifest whose driver line holds another file's sum
    manifest = os.path.join(root, bundle.MANIFEST_NAME)
    with open(manifest, encoding="utf-8") as f:
        text = f.read().replace(sums[DRIVER], sums[FIRMWARE])
    with open(manifest, "w", encoding="utf-8") as f:
        f.write(text)
    res = run_module(capsys, {"src": root, "files": [DRIVER], "hint": HINT})
    assert res["failed"] is True
    assert re.search(r"Ascend-hdk-910b-npu-driver_25.2.0_linux-x86-64.run. sha256 [0-9a-f]{64}, "
                     r"but MANIFEST.sha256 says [0-9a-f]{64}", res["msg"])
    assert res["msg"].endswith(HINT)


def test_in_place_needs_a_directory(server, capsys):
    make(server.root)
    res = run_module(capsys, {"src": server.url, "files": [DRIVER]})
    assert res["failed"] is True and "dest is required" in res["msg"]


def test_prefix_from_a_node_directory_keeps_the_tree(tmp_path, capsys):
    root = str(tmp_path / "mnt")
    make(root)
    dest = str(tmp_path / "models" / "m")
    args = {"src": root, "prefix": "models/m", "dest": dest, "mode": "0640", "directory_mode": "0750"}
    res = run_module(capsys, args)
    assert res["changed"] is True and sorted(res["fetched"]) == ["config.json", "sub/w.bin"]
    assert stat.S_IMODE(os.stat(os.path.join(dest, "sub")).st_mode) == 0o750
    assert run_module(capsys, args)["changed"] is False


def test_verify_copied_files_against_manifest_content(tmp_path, capsys):
    root = str(tmp_path / "bundle")
    make(root)
    with open(os.path.join(root, bundle.MANIFEST_NAME), encoding="utf-8") as f:
        manifest = f.read()
    dest = os.path.join(root, "python")
    res = run_module(capsys, {"manifest_content": manifest, "files": [TARBALL], "dest": dest})
    assert res["changed"] is False and res["present"] == [os.path.basename(TARBALL)]
    os.unlink(os.path.join(dest, os.path.basename(TARBALL)))
    res = run_module(capsys, {"manifest_content": manifest, "files": [TARBALL], "dest": dest, "hint": HINT})
    assert res["failed"] is True and f"{os.path.basename(TARBALL)}: missing" in res["msg"]
    assert res["msg"].endswith(HINT)


def test_credentials_never_appear(server, tmp_path, capsys):
    make(server.root)
    url = server.url.replace("http://", "http://alice:s3cret@")
    res = run_module(capsys, {"src": url, "files": ["huawei/absent.run"], "dest": str(tmp_path / "d")})
    assert res["failed"] is True and "s3cret" not in res["msg"] and "***@" in res["msg"]
    res = run_module(capsys, {"src": url, "files": [DRIVER], "dest": str(tmp_path / "d")})
    assert res["changed"] is True and "s3cret" not in json.dumps({k: v for k, v in res.items() if k != "invocation"})


def test_needs_a_source_and_a_selection(tmp_path, capsys):
    res = run_module(capsys, {"files": [DRIVER], "dest": str(tmp_path)})
    assert res["failed"] is True and "src, manifest_content" in res["msg"]
    res = run_module(capsys, {"src": str(tmp_path), "dest": str(tmp_path)})
    assert res["failed"] is True and "files, prefix" in res["msg"]
    res = run_module(capsys, {"src": "ftp://x/", "files": [DRIVER], "dest": str(tmp_path / "d")})
    assert res["failed"] is True and "neither an http(s):// URL nor a directory" in res["msg"]
