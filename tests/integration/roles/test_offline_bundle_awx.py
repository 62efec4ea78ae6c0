"""awx.awx without Galaxy: the offline bundle's artifact made from the `ansible` package's wheel
(roles/offline_bundle/files/awx_collection.py).

The wheel's ansible_collections/awx/awx/FILES.json lists the collection's tests/, which the ansible package strips
(ansible 13.8.0's wheel on PyPI: 260 entries, 163 of them absent), so a plain re-tar fails ansible-galaxy's
install with "Unable to extract 'tests' from collection". The fake wheel here has that shape."""

from __future__ import annotations

import glob
import hashlib
import json
import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCRIPT = os.path.join(ROOT, "roles", "offline_bundle", "files", "awx_collection.py")
BIN = os.path.dirname(sys.executable)
PREFIX = "ansible_collections/awx/awx/"


def _entry(name, data=None):
    if data is None:
        return {"name": name, "ftype": "dir", "chksum_type": None, "chksum_sha256": None, "format": 1}
    return {"name": name, "ftype": "file", "chksum_type": "sha256",
            "chksum_sha256": hashlib.sha256(data).hexdigest(), "format": 1}


def _fake_wheel(path, module=b"# module\n"):
    files = {"plugins/modules/job_template.py": module, "README.md": b"awx\n"}
    listed = [_entry("."), _entry("plugins"), _entry("plugins/modules"),
              _entry("plugins/modules/job_template.py", module), _entry("README.md", b"awx\n"),
              # stripped by the ansible package, still listed
              _entry("tests"), _entry("tests/config.yml", b"x: 1\n")]
    files_json = json.dumps({"files": listed, "format": 1}).encode()
    manifest = {"collection_info": {"namespace": "awx", "name": "awx", "version": "24.6.1", "authors": ["AWX"],
                                    "readme": "README.md", "tags": [], "description": "", "license": [],
                                    "license_file": None, "dependencies": {}, "repository": "", "documentation": "",
                                    "homepage": "", "issues": ""},
                "file_manifest_file": {"name": "FILES.json", "ftype": "file", "chksum_type": "sha256",
                                       "chksum_sha256": hashlib.sha256(files_json).hexdigest(), "format": 1},
                "format": 1}
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("ansible/__init__.py", "")
        wheel.writestr(PREFIX + "MANIFEST.json", json.dumps(manifest))
        wheel.writestr(PREFIX + "FILES.json", files_json)
        for name, data in files.items():
            wheel.writestr(PREFIX + name, data)
    return path


def _run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, check=False)


def _install(tmp_path, artifact):
    env = dict(os.environ, PATH=BIN + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_COLLECTIONS_PATH=str(tmp_path / "coll"))
    install = subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--offline", "--force",
                              "--no-deps", "-p", str(tmp_path / "coll"), artifact],
                             capture_output=True, text=True, check=False, env=env, cwd=str(tmp_path))
    assert install.returncode == 0, install.stdout + install.stderr
    verify = subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "verify", "--offline", "awx.awx"],
                            capture_output=True, text=True, check=False, env=env, cwd=str(tmp_path))
    assert verify.returncode == 0, verify.stdout + verify.stderr
    return tmp_path / "coll" / "ansible_collections" / "awx" / "awx"


def test_artifact_from_a_stripped_wheel_installs_and_verifies_offline(tmp_path):
    wheel = _fake_wheel(str(tmp_path / "ansible-13.8.0-py3-none-any.whl"))
    result = _run(wheel, str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out == {"path": str(tmp_path / "out" / "awx-awx-24.6.1.tar.gz"), "changed": True}
    installed = _install(tmp_path, out["path"])
    assert (installed / "plugins" / "modules" / "job_template.py").read_bytes() == b"# module\n"
    names = {e["name"] for e in json.loads((installed / "FILES.json").read_text())["files"]}
    assert "tests" not in names and "plugins/modules/job_template.py" in names
    # a second run leaves the artifact alone
    assert json.loads(_run(wheel, str(tmp_path / "out")).stdout)["changed"] is False


def test_a_wheel_without_the_collection_names_the_release_to_take(tmp_path):
    wheel = str(tmp_path / "ansible-14.5.0-py3-none-any.whl")
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("ansible_collections/community/general/MANIFEST.json", "{}")
    result = _run(wheel, str(tmp_path / "out"))
    assert result.returncode == 1
    assert "ansible 13.8.0 or older" in result.stderr


def test_a_file_changed_against_its_listed_checksum_is_refused(tmp_path):
    wheel = _fake_wheel(str(tmp_path / "w.whl"))
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(str(tmp_path / "bad.whl"), "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            dst.writestr(name, b"# changed\n" if name.endswith("job_template.py") else data)
    result = _run(str(tmp_path / "bad.whl"), str(tmp_path / "out"))
    assert result.returncode == 1 and "differs from the collection's FILES.json" in result.stderr


@pytest.mark.skipif(not glob.glob(os.path.join(ROOT, ".cache", "awx", "ansible-13.8.0-py3-none-any.whl")),
                    reason="the ansible 13.8.0 wheel is not in .cache/awx (tools/ci/awx-collection.sh downloads it)")
def test_the_real_ansible_13_8_0_wheel(tmp_path):
    wheel = glob.glob(os.path.join(ROOT, ".cache", "awx", "ansible-13.8.0-py3-none-any.whl"))[0]
    result = _run(wheel, str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    installed = _install(tmp_path, json.loads(result.stdout)["path"])
    assert (installed / "plugins" / "modules" / "job_template.py").is_file()
