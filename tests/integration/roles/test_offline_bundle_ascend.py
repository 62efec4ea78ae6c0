"""The ascend bundle for Kunpeng, built for real from PyPI by playbooks/download.yml (the `bundle` stage).

This downloads the aarch64 set of vllm-ascend's compatibility row (about 500 MB for the default row) and so
runs under the marker bundle (.ci/run bundle). ASCENDAI_BUNDLE_VLLM_ASCEND picks another
row (default: the role's own default), ASCENDAI_BUNDLE_DIR the folder (default .cache/bundle-ascend, kept
between runs: a re-run downloads nothing).

What it proves, without CANN or an aarch64 machine:
- the row resolves for aarch64 manylinux_2_28 / CPython 3.11 from PyPI alone, with torch and torch_npu of the
  row and vllm-ascend's own pins;
- every wheel of the bundle installs on that target (its tags), no CUDA wheel slipped in;
- the bundle is closed: the runtime set, vLLM's build set and the vllm role's own pins resolve again with
  --no-index against the bundle's folder alone;
- MANIFEST.sha256 matches the files, and a second run changes nothing.
"""

from __future__ import annotations

import hashlib
import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml
from ansible_collections.ascendai.vllm.plugins.module_utils import _compat_matrix as cm
from packaging.tags import compatible_tags, cpython_tags
from packaging.utils import parse_sdist_filename, parse_wheel_filename

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import (
    BIN, ROOT, changed_count, run_playbook,
)

pytestmark = pytest.mark.bundle  # deselected unless -m bundle (.ci/run bundle)

with open(os.path.join(ROOT, "roles", "offline_bundle", "defaults", "main.yml"), encoding="utf-8") as _handle:
    DEFAULTS = yaml.safe_load(_handle)
TARGET = DEFAULTS["offline_bundle_targets"][0]
# The release this stage bundles: v0.11.0, the oldest row whose whole aarch64 set PyPI holds as wheels (the
# default release for manylinux_2_28, v0.18.0, adds the arctic-inference sdist that the emulated Kunpeng node would
# have to compile under qemu). The default's choice is tested without downloading
# (test_offline_bundle_preflight.py).
VLLM_ASCEND = os.environ.get("ASCENDAI_BUNDLE_VLLM_ASCEND") or "0.11.0"
BUNDLE = os.environ.get("ASCENDAI_BUNDLE_DIR") or os.path.join(ROOT, ".cache", "bundle-ascend")
WHEELS = os.path.join(BUNDLE, "wheels", TARGET["name"])
WORK = os.path.join(BUNDLE, ".work")


def run_download(tmp_path):
    extra = {"offline_bundle_dir": BUNDLE, "offline_bundle_python_tarballs": False,
             "offline_bundle_vllm_ascend_version": VLLM_ASCEND, "offline_bundle_uv": os.path.join(BIN, "uv")}
    out = run_playbook(tmp_path, pathlib.Path(ROOT, "playbooks", "download.yml"), extra, connection=None, cwd=ROOT)
    if out.returncode != 0:
        # pip's download lists run to thousands of lines: show the failed task itself, then the end
        failed = out.stdout.find("fatal: [")
        pytest.fail(("the failed task:\n" + out.stdout[max(0, failed - 600):failed + 3000] if failed >= 0 else "")
                    + "\n...\n" + out.stdout[-1500:] + out.stderr[-2000:], pytrace=False)
    return changed_count(out), out.stdout


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    return run_download(tmp_path_factory.mktemp("download"))


def target_tags():
    """The tags pip accepts on the target: CPython 3.11, manylinux 2.17 ... the target's glibc, aarch64."""
    match = re.match(r"^manylinux_2_(\d+)_(\w+)$", TARGET["platforms"][0])
    glibc, arch = int(match.group(1)), match.group(2)
    platforms = [f"manylinux_2_{n}_{arch}" for n in range(glibc, 16, -1)]
    platforms += [f"manylinux2014_{arch}", f"linux_{arch}"]
    version = tuple(int(p) for p in str(TARGET["python_version"]).split("."))
    return set(cpython_tags(version, platforms=platforms)) | set(compatible_tags(version, platforms=platforms))


def pins(lock):
    with open(os.path.join(WHEELS, lock), encoding="utf-8") as handle:
        lines = [line.strip() for line in handle]
    return dict(line.split("==", 1) for line in lines if line and not line.startswith(("#", "-")))


def locks():
    """Each resolved set and the requirements it came from: runtime, vLLM's build, each other sdist's build."""
    out = {}
    for name in sorted(os.listdir(WHEELS)):
        if name.endswith(".lock"):
            stem = name[:-len(".lock")]
            out[name] = os.path.join(WORK, f"{TARGET['name']}-{stem}.in")
    return out


def files_by_project():
    found = {}
    for name in os.listdir(WHEELS):
        if name.endswith(".whl"):
            project, version, _build, tags = parse_wheel_filename(name)
            found.setdefault(str(project), []).append((str(version), name, tags))
        elif name.endswith(".tar.gz"):
            project, version = parse_sdist_filename(name)
            found.setdefault(str(project), []).append((str(version), name, None))
    return found


def test_the_row_resolves_from_pypi_for_the_target(first_run):
    row = cm.find_row(VLLM_ASCEND)
    runtime = pins("runtime.lock")
    assert runtime["vllm-ascend"] == VLLM_ASCEND
    assert runtime["torch"] == row["torch"]
    # torch_npu of the row's release, the build the vllm-ascend wheel itself pins
    assert cm.same_release(row["torch_npu"], runtime["torch-npu"]), (runtime["torch-npu"], row["torch_npu"])
    assert cm.check_combination(vllm_ascend=VLLM_ASCEND, torch=runtime["torch"],
                                torch_npu=runtime["torch-npu"])["ok"]
    if row["triton_ascend"]:
        assert cm.same_release(row["triton_ascend"], runtime["triton-ascend"])
    assert not [name for name in runtime if name.startswith(("nvidia-", "cuda-"))], sorted(runtime)
    # vLLM itself is the sdist the node builds with VLLM_TARGET_DEVICE=empty
    assert os.path.exists(os.path.join(WHEELS, f"vllm-{row['vllm_min']}.tar.gz"))


def test_every_pin_has_a_file_for_the_target(first_run):
    accepted = target_tags()
    found = files_by_project()
    sdists = {str(p).lower() for p in DEFAULTS["offline_bundle_sdist_packages"]} | {"vllm"}
    sets = locks()
    assert {"runtime.lock", "build.lock"} <= set(sets), sorted(sets)
    # every sdist the node builds has its build set (pip builds it in an isolated environment from the bundle)
    for project, files in found.items():
        for _version, name, tags in files:
            if tags is None and project != "vllm":
                assert f"build-{project.replace('-', '_')}.lock" in sets, f"{name} has no build set"
    for lock in sets:
        for project, version in pins(lock).items():
            files = [f for f in found.get(project, []) if f[0] == version]
            assert files, f"{lock}: {project}=={version} has no file in {WHEELS}"
            for _version, name, tags in files:
                if tags is None:
                    assert project in sdists, f"{name}: an sdist the node would have to build"
                else:
                    assert tags & accepted, f"{name} does not install on {TARGET['platforms'][0]} cp311"


def test_the_bundle_is_closed_without_an_index(first_run, tmp_path):
    """Resolve again with --no-index: the bundle alone must satisfy every set the node installs."""
    row = cm.find_row(VLLM_ASCEND)
    role_pins = tmp_path / "role.in"
    # the vllm role's pins (roles/vllm/tasks/preflight.yml), less vLLM, an sdist that builds only on the target
    role_pins.write_text(f"torch=={row['torch']}\ntorch-npu=={row['torch_npu_pin']}\nvllm-ascend=={VLLM_ASCEND}\n")
    for lock, source in list(locks().items()) + [(None, str(role_pins))]:
        out = subprocess.run(
            [os.path.join(BIN, "uv"), "pip", "compile", "--quiet", "--no-header", "--no-annotate", "--offline",
             "--no-index", "--find-links", WHEELS, "--python-version", str(TARGET["python_version"]),
             "--python-platform", TARGET["uv_platform"], "--no-binary", "arctic-inference", source],
            capture_output=True, text=True, check=False)
        assert out.returncode == 0, f"{source}:\n{out.stderr[-3000:]}"
        resolved = dict(line.split("==", 1) for line in out.stdout.splitlines() if "==" in line)
        if lock:
            assert resolved == pins(lock)
        else:
            assert resolved["torch-npu"] == pins("runtime.lock")["torch-npu"]


def test_manifest_matches_the_files(first_run):
    with open(os.path.join(BUNDLE, "MANIFEST.sha256"), encoding="utf-8") as handle:
        entries = [line.split("  ", 1) for line in handle.read().splitlines() if line]
    listed = {path for _digest, path in entries}
    assert {f"wheels/{TARGET['name']}/{name}" for name in os.listdir(WHEELS)} <= listed
    for digest, path in entries:
        sha = hashlib.sha256()
        with open(os.path.join(BUNDLE, path), "rb") as handle:
            for block in iter(lambda h=handle: h.read(1 << 20), b""):
                sha.update(block)
        assert sha.hexdigest() == digest, path


def test_a_second_run_changes_nothing(first_run, tmp_path):
    changed, stdout = run_download(tmp_path)
    assert changed == 0, stdout[-4000:]
    assert "Saved " not in stdout
    total = sum(os.path.getsize(os.path.join(WHEELS, n)) for n in os.listdir(WHEELS))
    print(f"\nbundle {WHEELS}: vllm-ascend {VLLM_ASCEND}, {len(os.listdir(WHEELS))} files, "
          f"{total / 2**20:.0f} MiB", file=sys.stderr)
