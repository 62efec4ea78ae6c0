"""The vllm role's ascend install steps, run for real on this machine against a stub wheelhouse.

No CANN and no NPU here, so the wheelhouse holds stand-ins with the names, versions and pins of two rows:
torch, torch-npu, vllm-ascend (with its ``vllm.platform_plugins`` entry point and the ``Requires-Dist`` pins
of the published wheel) and vLLM as an sdist whose build backend refuses to build unless
``VLLM_TARGET_DEVICE=empty``, the way vllm-ascend's docs install vLLM. The role must install them with
pip --no-index, verify, and change nothing on the second run.

v0.11.0 is the row whose doc names torch_npu 2.7.1.post1 while the published vllm-ascend 0.11.0 wheel requires
``torch-npu==2.7.1``: pinning the doc's label would make pip's resolution impossible.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest
from ansible_collections.ascendai.vllm.plugins.module_utils import _compat_matrix as compat_matrix

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import PLAYBOOK, run_playbook


BACKEND = '''
import os, zipfile

# vLLM's setup.py appends "+empty" to the version for VLLM_TARGET_DEVICE=empty (vllm-0.11.0+empty-py3-none-any.whl)
VERSION = "@VERSION@+empty"

def _check():
    if os.environ.get("VLLM_TARGET_DEVICE") != "empty":
        raise RuntimeError("vLLM must be built with VLLM_TARGET_DEVICE=empty, got %r"
                           % os.environ.get("VLLM_TARGET_DEVICE"))

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _check()
    name = "vllm-%s-py3-none-any.whl" % VERSION
    info = "vllm-%s.dist-info" % VERSION
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        z.writestr("vllm/__init__.py", "__version__ = %r\\n" % VERSION)
        z.writestr(info + "/METADATA", "Metadata-Version: 2.1\\nName: vllm\\nVersion: %s\\n" % VERSION)
        z.writestr(info + "/WHEEL",
                   "Wheel-Version: 1.0\\nGenerator: stub\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n")
        z.writestr(info + "/RECORD", "")
    return name
'''


def write_wheel(directory, name, version, files, entry_points="", requires=()):
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    path = os.path.join(directory, f"{dist}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w") as whl:
        for member, text in files.items():
            whl.writestr(member, text)
        requires_dist = "".join(f"Requires-Dist: {req}\n" for req in requires)
        whl.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires_dist}")
        whl.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: stub\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        if entry_points:
            whl.writestr(f"{info}/entry_points.txt", entry_points)
        whl.writestr(f"{info}/RECORD", "")


def write_vllm_sdist(directory, version):
    files = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n',
        "backend.py": BACKEND.replace("@VERSION@", version),
        "PKG-INFO": f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n",
    }
    with tarfile.open(os.path.join(directory, f"vllm-{version}.tar.gz"), "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"vllm-{version}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def run_role(tmp_path, venv, wheelhouse, vllm_ascend, play_vars=None, expect_ok=True):
    out = run_playbook(tmp_path, [{
        "name": "vllm ascend flavour", "hosts": "localhost", "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable, **(play_vars or {})},
        "roles": [{"role": "ascendai.vllm.vllm", "vllm_flavour": "ascend", "vllm_ascend_version": vllm_ascend,
                   "vllm_venv": str(venv), "vllm_wheelhouse_src": "", "vllm_wheelhouse_dest": str(wheelhouse),
                   "vllm_venv_owner": str(os.getuid()), "vllm_venv_group": str(os.getgid()),
                   "vllm_pip_env": {"PIP_INDEX_URL": "http://192.0.2.1:9/simple"}}],
    }])
    if not expect_ok:
        return out
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    recap = re.search(r"localhost\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=0\s+failed=0", out.stdout)
    assert recap, out.stdout[-2000:]
    return int(recap.group(2)), out.stdout


def python_for_row(vllm_ascend):
    """A Python the row allows for the node's venv: the controller's when it fits (vllm-ascend 0.11.0 refuses 3.12+,
    so a Python 3.13 controller cannot build that venv), else a python3.N on PATH, newest first; skip without one."""
    row = compat_matrix.find_row(vllm_ascend)
    low, high = (tuple(int(part) for part in row[key].split(".")) for key in ("python_min", "python_max"))
    if low <= sys.version_info[:2] <= high:
        return sys.executable
    for minor in range(high[1], low[1] - 1, -1):
        found = shutil.which(f"python{high[0]}.{minor}")
        if found:
            return found
    pytest.skip(f"vllm-ascend {vllm_ascend} needs Python {row['python_min']}-{row['python_max']}; this controller "
                f"runs {sys.version_info[0]}.{sys.version_info[1]} and no python3.N of that range is on PATH")
    return None


def write_row_wheelhouse(wheelhouse, vllm_ascend, torch, torch_npu, vllm, decoys):
    """Stand-ins of one row's packages in ``wheelhouse`` (made if missing)."""
    wheelhouse.mkdir(exist_ok=True)
    write_wheel(str(wheelhouse), "torch", torch, {"torch/__init__.py": f"__version__ = '{torch}'\n"})
    for version in [torch_npu] + decoys:
        write_wheel(str(wheelhouse), "torch-npu", version, {"torch_npu/__init__.py": ""}, requires=[f"torch=={torch}"])
    # The published wheel's pins (Requires-Dist), which pip honours along with the role's.
    write_wheel(str(wheelhouse), "vllm-ascend", vllm_ascend, {"vllm_ascend/__init__.py": "def register():\n    pass\n"},
                entry_points="[vllm.platform_plugins]\nascend = vllm_ascend:register\n",
                requires=[f"torch=={torch}", f"torch-npu=={torch_npu}"])
    write_vllm_sdist(str(wheelhouse), vllm)


# vllm-ascend release, torch, the wheel's torch-npu pin, vLLM, wheelhouse decoys of torch-npu that must not be taken
ROWS = [
    ("0.23.0", "2.10.0", "2.10.0.post4", "0.23.0", ["2.14.0", "2.10.0.post6"]),
    ("0.11.0", "2.7.1", "2.7.1", "0.11.0", ["2.8.0", "2.7.1.post2"]),
]


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
@pytest.mark.parametrize(("vllm_ascend", "torch", "torch_npu", "vllm", "decoys"), ROWS, ids=[r[0] for r in ROWS])
def test_ascend_install_steps(tmp_path, vllm_ascend, torch, torch_npu, vllm, decoys):
    wheelhouse = tmp_path / "wheelhouse"
    write_row_wheelhouse(wheelhouse, vllm_ascend, torch, torch_npu, vllm, decoys)
    venv = tmp_path / "venv"
    subprocess.run([python_for_row(vllm_ascend), "-m", "venv", str(venv)], check=True)

    changed, stdout = run_role(tmp_path, venv, wheelhouse, vllm_ascend)
    assert changed >= 1, stdout[-3000:]
    assert "Install from the wheelhouse" in stdout

    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
                            capture_output=True, text=True, check=True).stdout
    versions = {d["name"].lower().replace("_", "-"): d["version"] for d in json.loads(listed)}
    assert versions["torch"] == torch
    assert versions["torch-npu"] == torch_npu
    assert versions["vllm"] == vllm + "+empty"
    assert versions["vllm-ascend"] == vllm_ascend

    changed, stdout = run_role(tmp_path, venv, wheelhouse, vllm_ascend)
    assert changed == 0, stdout[-3000:]
    assert re.search(r"Install from the wheelhouse\] \*+\nskipping", stdout), stdout[-3000:]


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
@pytest.mark.parametrize(("vllm_ascend", "cann", "glibc", "error"), [
    ("0.23.0", "9.1.0", "2.28", "glibc 2.28 is older than the glibc 2.34 that row's aarch64 wheels need"),
    ("0.11.0", "8.3.RC2", "2.28", None),
    ("0.23.0", "9.1.0", "2.34", None),
    # vllm_ascend_version empty: the default release for the node (chosen from its glibc and CANN)
    ("", "8.5.1", "2.28", None),
    # the stack's default for glibc 2.28 is v0.18.0; a CANN outside its row is refused, naming both
    ("", "9.1.0", "2.28", "No row of the table accepts CANN 9.1.0, glibc 2.28 together"),
])
def test_preflight_checks_the_glibc_of_an_aarch64_node(tmp_path, vllm_ascend, cann, glibc, error):
    """playbooks/preflight.yml's vllm check (compat.yml) on a Kylin V10-like aarch64 node: getconf says 2.28."""
    fake = tmp_path / "bin"
    fake.mkdir()
    getconf = fake / "getconf"
    getconf.write_text(f"#!/bin/sh\n[ \"$1\" = GNU_LIBC_VERSION ] && echo 'glibc {glibc}'\n")
    getconf.chmod(0o755)
    out = run_playbook(tmp_path, [{
        "name": "compat", "hosts": "localhost", "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "tasks": [{"ansible.builtin.include_role": {"name": "ascendai.vllm.vllm", "tasks_from": "compat.yml"},
                   # the ascend_cann role's output, as playbooks/preflight.yml has it from the role's plan
                   "vars": {"vllm_flavour": "ascend", "vllm_ascend_version": vllm_ascend,
                            "ascend_cann_release_version": cann}},
                  {"ansible.builtin.debug": {"msg": "glibc={{ ascendai_stack.glibc }}"}}],
    }], {"_common_stack_arch": "aarch64"}, env={"PATH": f"{fake}:{os.environ['PATH']}"})
    if error:
        assert out.returncode != 0, out.stdout[-3000:]
        assert error in out.stdout + out.stderr
        if vllm_ascend:
            assert "On glibc 2.28 the newest release whose aarch64 wheels install is vllm-ascend v0.18.0" in out.stdout
    else:
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
        assert f"glibc={glibc}" in out.stdout
        if not vllm_ascend:
            assert "vllm-ascend 0.18.0 (default: the newest final release with aarch64 wheels that install on " \
                "glibc 2.28)" in " ".join(out.stdout.split())


def installed_versions(venv):
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
                            capture_output=True, text=True, check=True).stdout
    return {d["name"].lower().replace("_", "-"): d["version"] for d in json.loads(listed)}


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
@pytest.mark.parametrize("in_generation", [True, False], ids=["generation-venv", "site-venv"])
def test_release_change_inside_a_generation_is_refused(tmp_path, in_generation):
    """After upgrade.yml the serving venv is a generation's (<generation_root>/<name>/venv, named after its release).
    A site.yml whose inventory still names another release must not install it there: refused, naming both releases
    and both ways out, with nothing changed. A venv outside the generations (site.yml's own, before any upgrade) still
    changes release in place."""
    new, old = ROWS[0], ROWS[1]
    python = python_for_row(old[0])
    for row in (new, old):
        low, high = (compat_matrix.find_row(row[0])[key] for key in ("python_min", "python_max"))
        got = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
        if not (tuple(map(int, low.split("."))) <= tuple(map(int, got.split("."))) <= tuple(map(int, high.split(".")))):
            pytest.skip(f"no Python on PATH fits both rows {new[0]} and {old[0]}")
    wheelhouse = tmp_path / "wheelhouse"
    for row in (new, old):
        write_row_wheelhouse(wheelhouse, *row)
    gens = tmp_path / "generations"
    venv = gens / f"vllm-ascend-{new[0]}" / "venv"
    venv.parent.mkdir(parents=True)
    (gens / "current").symlink_to(venv.parent.name)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    record = {"ascendai_generation": {"root": str(gens if in_generation else tmp_path / "elsewhere"),
                                      "current": venv.parent.name, "history": [venv.parent.name], "failed": []}}
    facts = {"ansible_local": record}

    run_role(tmp_path, venv, wheelhouse, new[0], facts)
    assert installed_versions(venv)["vllm-ascend"] == new[0]

    out = run_role(tmp_path, venv, wheelhouse, old[0], facts, expect_ok=False)
    if in_generation:
        text = " ".join(out.stdout.split())
        assert out.returncode != 0, out.stdout[-3000:]
        assert f"holds vllm-ascend {new[0]}; the run asks for {old[0]}" in text, out.stdout[-3000:]
        assert f"set vllm_ascend_version={new[0]} in the inventory" in text
        assert "run playbooks/upgrade.yml" in text and "The venv was not changed" in text
        assert "Install from the wheelhouse" not in out.stdout
        assert installed_versions(venv)["vllm-ascend"] == new[0]
    else:
        assert out.returncode == 0, out.stdout[-3000:]
        assert installed_versions(venv)["vllm-ascend"] == old[0]
