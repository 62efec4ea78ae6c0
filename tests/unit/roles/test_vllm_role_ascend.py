"""The vllm role's ascend install steps, run for real on this machine against a stub wheelhouse.

No CANN and no NPU here, so the wheelhouse holds stand-ins with the names and versions of the v0.23.0 row:
torch 2.10.0, torch-npu 2.10.0.post4, vllm-ascend 0.23.0 (with its ``vllm.platform_plugins`` entry point) and
vLLM 0.23.0 as an sdist whose build backend refuses to build unless ``VLLM_TARGET_DEVICE=empty``, the way
vllm-ascend's docs install vLLM. The role must install them with pip --no-index, verify, and change nothing
on the second run.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")
PLAYBOOK = os.path.join(ROOT, ".venv", "bin", "ansible-playbook")

BACKEND = '''
import os, zipfile

def _check():
    if os.environ.get("VLLM_TARGET_DEVICE") != "empty":
        raise RuntimeError("vLLM must be built with VLLM_TARGET_DEVICE=empty, got %r"
                           % os.environ.get("VLLM_TARGET_DEVICE"))

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _check()
    name = "vllm-0.23.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        z.writestr("vllm/__init__.py", "__version__ = '0.23.0'\\n")
        z.writestr("vllm-0.23.0.dist-info/METADATA", "Metadata-Version: 2.1\\nName: vllm\\nVersion: 0.23.0\\n")
        z.writestr("vllm-0.23.0.dist-info/WHEEL",
                   "Wheel-Version: 1.0\\nGenerator: stub\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n")
        z.writestr("vllm-0.23.0.dist-info/RECORD", "")
    return name
'''


def write_wheel(directory, name, version, files, entry_points=""):
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    path = os.path.join(directory, f"{dist}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as whl:
        for member, text in files.items():
            whl.writestr(member, text)
        whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: stub\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        if entry_points:
            whl.writestr(f"{info}/entry_points.txt", entry_points)
        whl.writestr(f"{info}/RECORD", "")


def write_vllm_sdist(directory):
    files = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n',
        "backend.py": BACKEND,
        "PKG-INFO": "Metadata-Version: 2.1\nName: vllm\nVersion: 0.23.0\n",
    }
    with tarfile.open(os.path.join(directory, "vllm-0.23.0.tar.gz"), "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-0.23.0/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def run_role(tmp_path, venv, wheelhouse):
    play = tmp_path / "play.yml"
    play.write_text(json.dumps([{
        "name": "vllm ascend flavour", "hosts": "localhost", "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "roles": [{"role": "ascendai.vllm.vllm", "vllm_flavour": "ascend", "vllm_ascend_version": "0.23.0",
                   "vllm_venv": str(venv), "vllm_wheelhouse_src": "", "vllm_wheelhouse_dest": str(wheelhouse),
                   "vllm_venv_owner": str(os.getuid()), "vllm_venv_group": str(os.getgid()),
                   "vllm_pip_env": {"PIP_INDEX_URL": "http://192.0.2.1:9/simple"}}],
    }]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOCALHOST_WARNING="0")
    out = subprocess.run([PLAYBOOK, "-i", "localhost,", "-c", "local", str(play)], capture_output=True, text=True,
                         env=env, cwd=str(tmp_path), check=False)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    recap = re.search(r"localhost\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=0\s+failed=0", out.stdout)
    assert recap, out.stdout[-2000:]
    return int(recap.group(2)), out.stdout


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
def test_ascend_install_steps(tmp_path):
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    write_wheel(str(wheelhouse), "torch", "2.10.0", {"torch/__init__.py": "__version__ = '2.10.0'\n"})
    write_wheel(str(wheelhouse), "torch-npu", "2.10.0.post4", {"torch_npu/__init__.py": ""})
    write_wheel(str(wheelhouse), "vllm-ascend", "0.23.0", {"vllm_ascend/__init__.py": "def register():\n    pass\n"},
                entry_points="[vllm.platform_plugins]\nascend = vllm_ascend:register\n")
    # A newer torch-npu in the wheelhouse must not be taken: the row pins 2.10.0.post4.
    write_wheel(str(wheelhouse), "torch-npu", "2.14.0", {"torch_npu/__init__.py": ""})
    write_vllm_sdist(str(wheelhouse))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)

    changed, stdout = run_role(tmp_path, venv, wheelhouse)
    assert changed >= 1, stdout[-3000:]
    assert "Install from the wheelhouse" in stdout

    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
                            capture_output=True, text=True, check=True).stdout
    versions = {d["name"].lower().replace("_", "-"): d["version"] for d in json.loads(listed)}
    assert versions["torch"] == "2.10.0"
    assert versions["torch-npu"] == "2.10.0.post4"
    assert versions["vllm"] == "0.23.0"
    assert versions["vllm-ascend"] == "0.23.0"

    changed, stdout = run_role(tmp_path, venv, wheelhouse)
    assert changed == 0, stdout[-3000:]
    assert re.search(r"Install from the wheelhouse\] \*+\nskipping", stdout), stdout[-3000:]
