"""The simulated CANN packages of each generation (8.3 and earlier, 8.5.x, 9.x) against their sources.

8.3: <path>/ascend-toolkit/<version>, ASCEND_TOOLKIT_HOME=<path>/ascend-toolkit/latest, Ascend-cann-kernels-910b_*.
8.5 and 9.x: <path>/cann-<version>, ASCEND_TOOLKIT_HOME=<path>/cann-<version>, Ascend-cann-910b-ops_*
(Huawei's images https://github.com/Ascend/cann-container-image cann/<release>/Dockerfile; vllm-ascend issue #6271;
hiascend CANN 8.5.0 installation guide, "File Paths"). NNAL's version.info is indented ``key : value``
(vllm-ascend issue #451); its set_env.sh picks the ABI of python3's torch, 1 without torch
(https://github.com/hicann/ascend-transformer-boost/blob/ddcc8b6/scripts/set_env.sh).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ansible_collections.ascendai.vllm.plugins.module_utils import _ascend_packages as ap
from ansible_collections.ascendai.vllm.tests.unit.simulator.sim_support import SIM_DIR

DRIVER_OPTS = ("--full", "--quiet", "--nox11", "--install-for-all")
CANN_OPTS = ("--install", "--quiet", "--nox11", "--install-for-all")


def run_pkg(node, pkg, *args, env=None):
    return node.run(["bash", pkg] + list(args), env=env)


def build(target, *args):
    out = subprocess.run([sys.executable, os.path.join(SIM_DIR, "build_installers.py"), str(target), "--arch",
                          "aarch64"] + list(args), stdout=subprocess.PIPE, check=True, universal_newlines=True)
    return {os.path.basename(p).split("_")[0]: p for p in out.stdout.split()}


@pytest.fixture(scope="module")
def generations(tmp_path_factory):
    """{'8.3.RC2': {name: path}, '8.5.1': ..., '9.1.0': ..., 'driver': path} (n+1 driver 25.2.0)."""
    out = {}
    for version in ("8.3.RC2", "8.5.1", "9.1.0"):
        out[version] = build(tmp_path_factory.mktemp("cann"), "--cann-version", version, "--only",
                             "toolkit,kernels,nnal")
    out["driver"] = build(tmp_path_factory.mktemp("drv"), "--set", "n+1", "--only", "driver")[
        "Ascend-hdk-910b-npu-driver"]
    return out


def sourced(node, script, *args, env=None):
    """ASCEND_TOOLKIT_HOME, ASCEND_HOME_PATH, ATB_HOME_PATH after sourcing a node script, like a service would."""
    cmd = '. "$ATLAS_SIM_ROOT$0" "$@" >/dev/null; printf "%s\\n" "$ASCEND_TOOLKIT_HOME" "$ASCEND_HOME_PATH" ' \
          '"${ATB_HOME_PATH:-}" "${ASCEND_TOOLKIT_LATEST_HOME:-}"'
    return node.run(["bash", "-c", cmd, script] + list(args), env=env).stdout.splitlines()


def install(node, pkgs, version):
    ops = "Ascend-cann-910b-ops" if version != "8.3.RC2" else "Ascend-cann-kernels-910b"
    assert run_pkg(node, pkgs["Ascend-cann-toolkit"], *CANN_OPTS).returncode == 0
    assert run_pkg(node, pkgs[ops], *CANN_OPTS).returncode == 0
    home = sourced(node, "/usr/local/Ascend/ascend-toolkit/set_env.sh")[0]
    nnal = run_pkg(node, pkgs["Ascend-cann-nnal"], *CANN_OPTS, env={"ASCEND_TOOLKIT_HOME": home})
    assert nnal.returncode == 0, nnal.stdout


def test_names_per_generation(generations):
    assert sorted(generations["8.3.RC2"]) == ["Ascend-cann-kernels-910b", "Ascend-cann-nnal", "Ascend-cann-toolkit"]
    for version in ("8.5.1", "9.1.0"):
        assert os.path.basename(generations[version]["Ascend-cann-910b-ops"]) == \
            "Ascend-cann-910b-ops_%s_linux-aarch64.run" % version


@pytest.mark.parametrize("version", ["8.5.1", "9.1.0"])
def test_cann_layout_from_85_on(node, generations, version):
    node.add_user()
    assert run_pkg(node, generations["driver"], *DRIVER_OPTS).returncode == 0
    install(node, generations[version], version)
    root = "/usr/local/Ascend/cann-%s" % version
    info = ap.parse_kv(node.read("/usr/local/Ascend/cann/aarch64-linux/ascend_toolkit_install.info"))
    assert (info["version"], info["path"]) == (version, root + "/aarch64-linux")
    assert os.readlink(node.path("/usr/local/Ascend/cann")) == "cann-%s" % version
    # the older readers (vllm-ascend's collect_env.py) still find it under ascend-toolkit/latest
    assert ap.parse_kv(node.read("/usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/"
                                 "ascend_toolkit_install.info"))["version"] == version
    for script in ("/usr/local/Ascend/ascend-toolkit/set_env.sh", root + "/set_env.sh"):
        assert sourced(node, script) == [root, root, "", "/usr/local/Ascend/ascend-toolkit/latest"]
    assert not node.exists("/usr/local/Ascend/ascend-toolkit/%s" % version)
    nnal = node.read("/usr/local/Ascend/nnal/atb/latest/version.info")
    assert nnal.splitlines()[0] == "    Ascend-cann-atb : %s" % version
    # the ops package records itself beside the toolkit (hicann/ops-math docs/zh/install/quick_install.md)
    ops = ap.parse_kv(node.read("/usr/local/Ascend/cann/aarch64-linux/ascend_ops_install.info"))
    assert (ops["package_name"], ops["version"]) == ("Ascend-cann-910b-ops", version)
    assert not node.exists("/usr/local/Ascend/cann/opp_kernel/version.info")
    # what the collection reads back
    layout = ap.cann_layout(version, "aarch64")
    assert layout["home"] == root
    for kind in ("toolkit", "kernels", "nnal"):
        assert ap.info_version(ap.parse_kv(node.read(layout["info"][kind]))) == version, kind


def test_83_layout_unchanged(node, generations):
    node.add_user()
    assert run_pkg(node, generations["driver"], *DRIVER_OPTS).returncode == 0
    install(node, generations["8.3.RC2"], "8.3.RC2")
    assert sourced(node, "/usr/local/Ascend/ascend-toolkit/set_env.sh")[:2] == [
        "/usr/local/Ascend/ascend-toolkit/latest"] * 2
    assert os.readlink(node.path("/usr/local/Ascend/ascend-toolkit/latest")) == "8.3.RC2"
    assert not node.exists("/usr/local/Ascend/cann")
    layout = ap.cann_layout("8.3.RC2", "aarch64")
    for kind in ("toolkit", "kernels", "nnal"):
        assert ap.info_version(ap.parse_kv(node.read(layout["info"][kind]))) == "8.3.RC2", kind


def test_upgrade_85_to_91_and_already_installed(node, generations):
    node.add_user()
    assert run_pkg(node, generations["driver"], *DRIVER_OPTS).returncode == 0
    install(node, generations["8.5.1"], "8.5.1")
    again = run_pkg(node, generations["8.5.1"]["Ascend-cann-toolkit"], *CANN_OPTS)
    assert again.returncode == 1 and "already installed in /usr/local/Ascend/cann-8.5.1" in again.stdout
    new = generations["9.1.0"]
    assert run_pkg(node, new["Ascend-cann-toolkit"], "--upgrade", "--quiet", "--nox11").returncode == 0
    assert not node.exists("/usr/local/Ascend/cann-8.5.1")
    assert os.readlink(node.path("/usr/local/Ascend/cann")) == "cann-9.1.0"
    assert run_pkg(node, new["Ascend-cann-910b-ops"], "--upgrade", "--quiet", "--nox11").returncode == 0
    nnal = run_pkg(node, new["Ascend-cann-nnal"], "--upgrade", "--quiet", "--nox11",
                   env={"ASCEND_TOOLKIT_HOME": "/usr/local/Ascend/cann-9.1.0"})
    assert nnal.returncode == 0, nnal.stdout
    assert os.readlink(node.path("/usr/local/Ascend/nnal/atb/latest")) == "9.1.0"
    assert not node.exists("/usr/local/Ascend/nnal/atb/8.5.1")


def test_nnal_needs_the_sourced_toolkit_of_its_release(node, generations):
    node.add_user()
    assert run_pkg(node, generations["driver"], *DRIVER_OPTS).returncode == 0
    pkgs = generations["9.1.0"]
    assert run_pkg(node, pkgs["Ascend-cann-toolkit"], *CANN_OPTS).returncode == 0
    bare = run_pkg(node, pkgs["Ascend-cann-nnal"], *CANN_OPTS)
    assert bare.returncode == 1 and "source /usr/local/Ascend/ascend-toolkit/set_env.sh" in bare.stdout
    older = run_pkg(node, generations["8.5.1"]["Ascend-cann-nnal"], *CANN_OPTS,
                    env={"ASCEND_TOOLKIT_HOME": "/usr/local/Ascend/cann-9.1.0"})
    assert older.returncode == 1 and "requires Ascend-cann-toolkit_8.5.1" in older.stdout


@pytest.fixture
def fake_torch(tmp_path):
    """A python3 on PATH whose torch reports the given ABI (or has no torch)."""
    def make(abi):
        bindir = tmp_path / ("bin-%s" % abi)
        site = tmp_path / ("site-%s" % abi)
        bindir.mkdir()
        site.mkdir()
        if abi is not None:
            (site / "torch.py").write_text("def compiled_with_cxx11_abi():\n    return %s\n" % bool(abi))
        py = bindir / "python3"
        py.write_text('#!/bin/sh\nPYTHONPATH=%s exec %s -S "$@"\n' % (site, sys.executable))
        py.chmod(0o755)
        return {"PATH": "%s:%s" % (bindir, os.environ["PATH"])}
    return make


@pytest.mark.parametrize("abi,args,expected", [
    (None, [], "1"),                 # no torch: 1
    (0, [], "0"),                    # torch built without the C++11 ABI
    (1, [], "1"),                    # torch >= 2.7
    (1, ["--cxx_abi=0"], "0"),       # the flag wins
])
def test_nnal_set_env_abi(node, generations, fake_torch, abi, args, expected):
    node.add_user()
    assert run_pkg(node, generations["driver"], *DRIVER_OPTS).returncode == 0
    install(node, generations["8.5.1"], "8.5.1")
    lines = sourced(node, "/usr/local/Ascend/nnal/atb/set_env.sh", *args, env=fake_torch(abi))
    # the script names its own directory: under a temp root the prefix is the root's
    assert lines[2] == node.path("/usr/local/Ascend/nnal/atb") + "/latest/atb/cxx_abi_" + expected
