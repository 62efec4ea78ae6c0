"""CANN versions side by side for the generations of the serving stack (issue 32), on the simulated packages.

The CANN package framework installs each version into its own directory and moves the shared links to it
(``multi_version_install`` and the latest manager: docs/sources.md, "CANN: versions side by side"); the simulator
(tests/simulator/atlas_sim/installer.py) does so for ``--install``. On a temp node root: CANN 8.5.1, then 9.1.0
beside it; then ascendai.vllm.ascend_cann's generation_env entry point writes a generation's env.sh for 8.5.1, which
must name 8.5.1's own directories although every shared link now names 9.1.0."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import changed_count, run_playbook

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SIM_DIR = os.path.join(ROOT, "tests", "simulator")
CANN_OPTS = ("--install", "--quiet", "--nox11", "--install-for-all")
ARCH = os.uname().machine


def _build(target, *args):
    out = subprocess.run([sys.executable, os.path.join(SIM_DIR, "build_installers.py"), str(target), "--arch", ARCH,
                          *args], stdout=subprocess.PIPE, check=True, text=True)
    return {os.path.basename(p).split("_")[0]: p for p in out.stdout.split()}


class _Node:
    def __init__(self, root):
        self.root = str(root)
        self.env = dict(os.environ, ATLAS_SIM_ROOT=self.root, ATLAS_SIM_LIB=SIM_DIR, ATLAS_SIM_BOOT_ID="boot-1")
        for key in ("ATLAS_SIM_STATE", "ASCEND_TOOLKIT_HOME"):
            self.env.pop(key, None)
        os.makedirs(self.path("/etc"), exist_ok=True)
        with open(self.path("/etc/passwd"), "a") as handle:
            handle.write("root:x:0:0:root:/root:/bin/bash\nHwHiAiUser:x:1000:1000::/home/HwHiAiUser:/bin/bash\n")
        with open(self.path("/etc/group"), "a") as handle:
            handle.write("root:x:0:\nHwHiAiUser:x:1000:\n")

    def path(self, node_path):
        return os.path.join(self.root, node_path.lstrip("/"))

    def run(self, *argv, env=None):
        proc = subprocess.run(list(argv), env=dict(self.env, **(env or {})), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:]
        return proc.stdout


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory):
    """A node root with driver 25.2.0, then CANN 8.5.1, then CANN 9.1.0 installed with --install beside it."""
    node = _Node(tmp_path_factory.mktemp("node"))
    driver = _build(tmp_path_factory.mktemp("drv"), "--set", "n+1", "--only", "driver")["Ascend-hdk-910b-npu-driver"]
    node.run("bash", driver, "--full", "--quiet", "--nox11", "--install-for-all")
    for version in ("8.5.1", "9.1.0"):
        pkgs = _build(tmp_path_factory.mktemp("cann"), "--cann-version", version, "--only", "toolkit,kernels,nnal")
        node.run("bash", pkgs["Ascend-cann-toolkit"], *CANN_OPTS)
        node.run("bash", pkgs["Ascend-cann-910b-ops"], *CANN_OPTS)
        node.run("bash", pkgs["Ascend-cann-nnal"], *CANN_OPTS,
                 env={"ASCEND_TOOLKIT_HOME": f"/usr/local/Ascend/cann-{version}"})
    return node


def test_the_second_install_goes_beside_the_first(side_by_side):
    node = side_by_side
    for version in ("8.5.1", "9.1.0"):
        assert os.path.isfile(node.path(f"/usr/local/Ascend/cann-{version}/{ARCH}-linux/ascend_toolkit_install.info"))
        assert os.path.isfile(node.path(f"/usr/local/Ascend/cann-{version}/{ARCH}-linux/ascend_ops_install.info"))
        assert os.path.isfile(node.path(f"/usr/local/Ascend/nnal/atb/{version}/version.info"))
    # the shared links name the version installed last
    assert os.readlink(node.path("/usr/local/Ascend/cann")) == "cann-9.1.0"
    assert os.readlink(node.path("/usr/local/Ascend/nnal/atb/latest")) == "9.1.0"


def _generation_env(tmp_path, node, version, check=False, include_vars=None):
    stack = {"asked": "", "vllm_ascend": "0.23.0", "cann": version, "cann_versions": [version], "label": "test",
             "source": {"vllm_ascend": "test"}}
    play = [{"hosts": "localhost", "gather_facts": True, "tasks": [
        {"name": "Stand in for the stack decision", "ansible.builtin.set_fact": {"ascendai_stack": stack}},
        {"name": "Entry point", "ansible.builtin.include_role": {"name": "ascendai.vllm.ascend_cann",
                                                                 "tasks_from": "generation_env"},
         "vars": include_vars or {}}]}]
    extra = {"ascend_cann_version": version, "ascend_cann_install_path": node.path("/usr/local/Ascend"),
             "ascend_cann_generation_env": str(tmp_path / "gen" / "env.sh"), "ascend_cann_nnal_cxx_abi": "1"}
    (tmp_path / "gen").mkdir(exist_ok=True)
    return run_playbook(tmp_path, play, extra, args=["--check"] if check else [])


def _sourced(script, *names):
    out = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", "bash", "-c",
                          '. "$0" && printf "%s\\n" ' + " ".join(f'"${{{n}:-}}"' for n in names), str(script)],
                         capture_output=True, text=True, check=True)
    return dict(zip(names, out.stdout.splitlines()))


def test_a_generations_env_names_its_own_cann(tmp_path, side_by_side):
    node = side_by_side
    script = tmp_path / "gen" / "env.sh"
    proc = _generation_env(tmp_path, node, "8.5.1", check=True)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert not script.exists()  # check mode wrote nothing
    proc = _generation_env(tmp_path, node, "8.5.1")
    assert changed_count(proc) == 1, proc.stdout[-3000:]
    assert changed_count(_generation_env(tmp_path, node, "8.5.1")) == 0

    root = node.path("/usr/local/Ascend")
    env = _sourced(script, "ASCEND_TOOLKIT_HOME", "ASCEND_TOOLKIT_LATEST_HOME", "ASCEND_HOME_PATH", "ASCEND_OPP_PATH",
                   "ATB_HOME_PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "PATH")
    assert env["ASCEND_TOOLKIT_HOME"] == env["ASCEND_TOOLKIT_LATEST_HOME"] == env["ASCEND_HOME_PATH"] == \
        f"{root}/cann-8.5.1"
    assert env["ASCEND_OPP_PATH"] == f"{root}/cann-8.5.1/opp"
    assert env["ATB_HOME_PATH"] == f"{root}/nnal/atb/8.5.1/atb/cxx_abi_1"
    libs = env["LD_LIBRARY_PATH"].split(":")
    assert "" not in libs and "" not in env["PYTHONPATH"].split(":")  # no empty entry (the current directory)
    assert libs[0] == f"{root}/nnal/atb/8.5.1/atb/cxx_abi_1/lib"
    # the toolkit is 8.5.1's alone; NNAL's shared script adds the latest (9.1.0) tree, behind this version's
    assert not [p for p in libs + env["PYTHONPATH"].split(":") if "cann-9.1.0" in p or "/ascend-toolkit/" in p]
    own = [i for i, p in enumerate(libs) if "/nnal/atb/8.5.1/" in p]
    shared = [i for i, p in enumerate(libs) if "/nnal/atb/latest/" in p]
    assert own and (not shared or max(own) < min(shared))
    assert env["PATH"].split(":")[0] == f"{root}/nnal/atb/8.5.1/atb/cxx_abi_1/bin"


def test_a_cann_that_is_not_installed_is_refused(tmp_path, side_by_side):
    proc = _generation_env(tmp_path, side_by_side, "9.2.0")
    assert proc.returncode != 0
    assert "CANN 9.2.0 is not installed in its own directories" in proc.stdout
    assert not (tmp_path / "gen" / "env.sh").exists()


def test_the_generations_own_release_outranks_the_new_one_on_the_command_line(tmp_path, side_by_side):
    """upgrade.yml -e ascend_cann_version=9.1.0 names the new generation's CANN; the current generation's env.sh,
    written by the same run, must name the CANN it has (8.5.1): an extra variable outranks the include's
    ascend_cann_version, so the playbook gives ascend_cann_generation_version."""
    proc = _generation_env(tmp_path, side_by_side, "9.1.0", include_vars={"ascend_cann_generation_version": "8.5.1"})
    assert proc.returncode == 0, proc.stdout[-3000:]
    env = _sourced(tmp_path / "gen" / "env.sh", "ASCEND_TOOLKIT_HOME")
    assert env["ASCEND_TOOLKIT_HOME"] == side_by_side.path("/usr/local/Ascend/cann-8.5.1")
