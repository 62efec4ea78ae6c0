"""tools/sandbox/bundle.sh and tools/sandbox/model.sh merge MANIFEST.sha256 through the collection's one writer.

Both go through roles/offline_bundle/files/bundle_tools.py update-manifest (plugins/module_utils/_bundle.py), which
takes <bundle>/.work/manifest.lock: a writer holding that lock (the role, the other script) is waited for, so
neither loses the other's lines. bundle.sh merged without the lock before.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
OTHER = {"wheels/x86_64/a-1.0-py3-none-any.whl": b"wheel", "python/cpython.tar.gz": b"tarball"}


def bundle_with_other_lines(root):
    """A bundle whose manifest already lists other writers' files, and one stale line of each script's files."""
    lines = []
    for path, data in OTHER.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(data)
        lines.append(f"{hashlib.sha256(data).hexdigest()}  {path}\n")
    stale = ["0" * 64 + "  huawei/Ascend-hdk-910b-npu-firmware_7.8.0.6.201.run\n",
             "0" * 64 + "  models/tiny-deepseek/gone.bin\n"]
    (root / "MANIFEST.sha256").write_text("".join(sorted(lines + stale, key=lambda line: line.split("  ")[1])))


def check_manifest(root, prefix):
    rows = dict(reversed(line.split("  ", 1)) for line in (root / "MANIFEST.sha256").read_text().splitlines())
    for path, data in OTHER.items():
        assert rows[path] == hashlib.sha256(data).hexdigest(), path  # kept as they were
    ours = {path: digest for path, digest in rows.items() if path.startswith(prefix)}
    assert ours, rows
    for path, digest in ours.items():
        assert digest == hashlib.sha256((root / path).read_bytes()).hexdigest(), path


def test_sandbox_bundle_waits_for_the_manifest_lock_and_keeps_other_lines(tmp_path):
    bundle_with_other_lines(tmp_path)
    old_manifest = (tmp_path / "MANIFEST.sha256").read_text()
    (tmp_path / ".work").mkdir()
    env = dict(os.environ, BUNDLE_DIR=str(tmp_path), ARCH="x86_64", PYTHON=sys.executable)
    with open(tmp_path / ".work" / "manifest.lock", "a", encoding="utf-8") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        proc = subprocess.Popen([os.path.join(ROOT, "tools", "sandbox", "bundle.sh")], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            # While another writer holds the lock the script must not finish (it waits; without the lock it
            # rewrote the manifest at once).
            with pytest.raises(subprocess.TimeoutExpired):
                proc.wait(timeout=3)
            assert (tmp_path / "MANIFEST.sha256").read_text() == old_manifest
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    assert "changed MANIFEST.sha256 (16 lines for 16 files; 19 in all)" in err
    check_manifest(tmp_path, "huawei/")


def test_sandbox_model_replaces_only_its_folder(tmp_path):
    bundle_with_other_lines(tmp_path)
    env = dict(os.environ, BUNDLE_DIR=str(tmp_path), MODEL_NAME="tiny-deepseek")
    out = subprocess.run([os.path.join(ROOT, "tools", "sandbox", "model.sh")], env=env, capture_output=True,
                         text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    check_manifest(tmp_path, "models/tiny-deepseek/")
    text = (tmp_path / "MANIFEST.sha256").read_text()
    assert "models/tiny-deepseek/gone.bin" not in text  # a file gone from the folder leaves the manifest
    # the firmware's stale line belongs to tools/sandbox/bundle.sh: kept as it is
    assert "0" * 64 + "  huawei/Ascend-hdk-910b-npu-firmware_7.8.0.6.201.run" in text
    assert sorted(os.listdir(tmp_path / ".work")) == ["manifest.lock", "sandbox-model-tiny-deepseek.stamp"]
