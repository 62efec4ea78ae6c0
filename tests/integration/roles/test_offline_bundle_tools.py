"""roles/offline_bundle/files/bundle_tools.py: vLLM sdist requirements and the bundle manifest."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import subprocess
import sys
import tarfile

import pytest
from hypothesis import given
from hypothesis import strategies as st

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SCRIPT = os.path.join(ROOT, "roles", "offline_bundle", "files", "bundle_tools.py")

_spec = importlib.util.spec_from_file_location("bundle_tools", SCRIPT)
bundle_tools = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bundle_tools)

# The shape of vLLM's sdist (vllm-0.23.0/requirements/common.txt including build.txt, pyproject.toml).
COMMON = """regex # Replace re for higher-performance regex matching
cachetools
numpy
transformers >= 4.56.0
tokenizers >= 0.21.1  # Required for fast incremental detokenization.
-r build.txt
# a comment
--extra-index-url https://example.invalid/simple
setuptools>=77.0.3,<81.0.0; python_version > '3.11'
"""
BUILD = "cmake>=3.26.1\nninja\ntorch==2.10.0\n"
PYPROJECT = """[build-system]
requires = [
    "cmake>=3.26.1",
    "ninja",
    "packaging>=24.2",
    "setuptools>=77.0.3,<81.0.0",
    "setuptools-scm>=8.0",
    "torch == 2.10.0",
    "wheel",
    "jinja2",
]
build-backend = "setuptools.build_meta"

[project]
name = "vllm"
"""


def make_sdist(path, files, root="vllm-0.23.0"):
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_sdist_requirements_runtime_and_build(tmp_path):
    sdist = tmp_path / "vllm-0.23.0.tar.gz"
    make_sdist(sdist, {"requirements/common.txt": COMMON, "requirements/build.txt": BUILD,
                       "pyproject.toml": PYPROJECT, "setup.py": "raise SystemExit\n"})
    assert bundle_tools.sdist_requirements(str(sdist)) == [
        "regex", "cachetools", "numpy", "transformers >= 4.56.0", "tokenizers >= 0.21.1",
        "cmake>=3.26.1", "ninja", "torch==2.10.0",
        "setuptools>=77.0.3,<81.0.0; python_version > '3.11'",
    ]
    out = subprocess.run([sys.executable, SCRIPT, "sdist-build-requirements", str(sdist)], capture_output=True,
                         text=True, check=True).stdout
    assert out.splitlines() == [
        "cmake>=3.26.1", "ninja", "packaging>=24.2", "setuptools>=77.0.3,<81.0.0", "setuptools-scm>=8.0",
        "torch == 2.10.0", "wheel", "jinja2"]


def test_sdist_without_requirements_is_refused(tmp_path):
    sdist = tmp_path / "x-1.0.tar.gz"
    make_sdist(sdist, {"pyproject.toml": PYPROJECT}, root="x-1.0")
    with pytest.raises(ValueError, match="requirements/common.txt"):
        bundle_tools.sdist_requirements(str(sdist))


ARCTIC_PYPROJECT = """[build-system]
requires = [
    "setuptools>=61.0",
    "wheel",
    "nanobind==2.9.2",
    # uv pip install vllm==0.9.1 --dry-run 2>&1 | grep protobuf | sed 's/^ + //'
    "protobuf==5.29.5",
    "torch == 2.7.0",
]
build-backend = "setuptools.build_meta"
"""


def test_build_requirements_of_any_sdist(tmp_path):
    """arctic-inference 0.1.1 (vllm-ascend >= 0.13 pins it; no aarch64 wheel): no requirements/common.txt."""
    sdist = tmp_path / "arctic_inference-0.1.1.tar.gz"
    make_sdist(sdist, {"pyproject.toml": ARCTIC_PYPROJECT, "setup.py": ""}, root="arctic_inference-0.1.1")
    assert bundle_tools.sdist_requirements(str(sdist), build=True) == [
        "setuptools>=61.0", "wheel", "nanobind==2.9.2", "protobuf==5.29.5", "torch == 2.7.0"]


@pytest.mark.parametrize("pyproject", [None, "[tool.black]\nline-length = 100\n"])
def test_build_requirements_fall_back_like_pip(tmp_path, pyproject):
    sdist = tmp_path / "old-1.0.tar.gz"
    files = {"setup.py": "from setuptools import setup\nsetup()\n"}
    if pyproject:
        files["pyproject.toml"] = pyproject
    make_sdist(sdist, files, root="old-1.0")
    assert bundle_tools.sdist_requirements(str(sdist), build=True) == ["setuptools>=40.8.0", "wheel"]


def test_build_requires_without_tomllib(monkeypatch):
    monkeypatch.setattr(bundle_tools, "tomllib", None)
    assert bundle_tools.build_requires(PYPROJECT) == [
        "cmake>=3.26.1", "ninja", "packaging>=24.2", "setuptools>=77.0.3,<81.0.0", "setuptools-scm>=8.0",
        "torch == 2.10.0", "wheel", "jinja2"]


@given(st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,10}(==[0-9]\.[0-9])?", fullmatch=True), max_size=8),
       st.lists(st.sampled_from(["", "# c", "  ", "--index-url x", "-e ."]), max_size=5))
def test_requirement_lines_keep_only_requirements(reqs, noise):
    text = "\n".join(noise + reqs + noise)
    assert bundle_tools.requirement_lines(text, lambda name: None) == reqs


def test_manifest_matches_sha256sum(tmp_path):
    (tmp_path / "wheels" / "x86_64").mkdir(parents=True)
    (tmp_path / "wheels" / "x86_64" / "a-1.0-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "huawei").mkdir()
    (tmp_path / "huawei" / "README.md").write_text("readme\n")
    (tmp_path / ".work").mkdir()
    (tmp_path / ".work" / "reqs.txt").write_text("skipped\n")
    (tmp_path / "MANIFEST.sha256").write_text("old\n")
    out = subprocess.run([sys.executable, SCRIPT, "manifest", str(tmp_path)], capture_output=True, text=True,
                         check=True).stdout
    assert out.splitlines() == [
        f"{hashlib.sha256(b'readme' + bytes([10])).hexdigest()}  huawei/README.md",
        f"{hashlib.sha256(b'wheel').hexdigest()}  wheels/x86_64/a-1.0-py3-none-any.whl",
    ]
    (tmp_path / "MANIFEST.sha256").write_text(out)
    check = subprocess.run(["sha256sum", "-c", "MANIFEST.sha256"], cwd=tmp_path, capture_output=True, text=True,
                           check=False)
    assert check.returncode == 0, check.stdout + check.stderr


def sums_of(root, paths):
    return {path: hashlib.sha256((root / path).read_bytes()).hexdigest() for path in paths}


def manifest_lines(root):
    return (root / "MANIFEST.sha256").read_text().splitlines()


def test_write_manifest_lists_the_tree_and_drops_stale_lines(tmp_path):
    """The role's manifest task: every file, dot files and folders left out, lines of removed files dropped."""
    (tmp_path / "wheels" / "x86_64").mkdir(parents=True)
    (tmp_path / "wheels" / "x86_64" / "a-1.0-py3-none-any.whl").write_bytes(b"wheel")
    (tmp_path / "wheels" / "x86_64" / ".partial").write_bytes(b"x")
    (tmp_path / ".work").mkdir()
    (tmp_path / ".work" / "reqs.in").write_text("skipped\n")
    (tmp_path / "MANIFEST.sha256").write_text(f"{'0' * 64}  huawei/gone.run\n")
    run = [sys.executable, SCRIPT, "write-manifest", str(tmp_path)]
    first = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert first == "changed MANIFEST.sha256 (1 files)\n"
    assert manifest_lines(tmp_path) == [f"{hashlib.sha256(b'wheel').hexdigest()}  wheels/x86_64/a-1.0-py3-none-any.whl"]
    assert (tmp_path / ".work" / "manifest.lock").exists()  # written under the lock every writer takes
    again = subprocess.run(run, capture_output=True, text=True, check=True).stdout
    assert again == "unchanged MANIFEST.sha256 (1 files)\n"


def test_update_manifest_replaces_only_the_lines_of_its_files_and_folders(tmp_path):
    for path in ("models/tiny/config.json", "models/tiny/old.bin", "huawei/a.run", "wheels/x/w.whl"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(path)
    before = sums_of(tmp_path, ["models/tiny/config.json", "models/tiny/old.bin", "wheels/x/w.whl"])
    before["huawei/a.run"] = "f" * 64  # stale: replaced
    (tmp_path / "MANIFEST.sha256").write_text("".join(f"{d}  {p}\n" for p, d in sorted(before.items())))
    (tmp_path / "models" / "tiny" / "old.bin").unlink()  # gone from the folder: its line goes
    (tmp_path / "models" / "tiny" / "model.safetensors").write_text("new")
    out = subprocess.run([sys.executable, SCRIPT, "update-manifest", str(tmp_path), "--path", "huawei/a.run",
                          "--prefix", "models/tiny"], capture_output=True, text=True, check=True).stdout
    assert out == "changed MANIFEST.sha256 (3 lines for 1 files, models/tiny/; 4 in all)\n"
    want = sums_of(tmp_path, ["huawei/a.run", "models/tiny/config.json", "models/tiny/model.safetensors"])
    want["wheels/x/w.whl"] = before["wheels/x/w.whl"]
    assert manifest_lines(tmp_path) == [f"{d}  {p}" for p, d in sorted(want.items())]


@pytest.mark.parametrize("args, message", [
    ([], "needs --path FILE or --prefix FOLDER"),
    (["--file", "a"], "unknown option --file"),
    (["--path", "huawei/missing.run"], "huawei/missing.run: no such file"),
    (["--path", "../etc/passwd"], "not a plain relative path"),
])
def test_update_manifest_refuses_bad_arguments(tmp_path, args, message):
    out = subprocess.run([sys.executable, SCRIPT, "update-manifest", str(tmp_path)] + args, capture_output=True,
                         text=True, check=False)
    assert out.returncode != 0 and message in out.stderr, out.stderr
    assert not (tmp_path / "MANIFEST.sha256").exists()
