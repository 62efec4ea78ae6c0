"""Run the simulated Atlas node (tests/simulator) on a temp root: no container, no hardware."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ansible_collections.ascendai.vllm.tests.unit.simulator.sim_support import SIM_DIR


class Node(object):
    """A simulated node rooted at a temp directory; run tools as subprocesses like a role would."""

    def __init__(self, root, monkeypatch):
        self.root = str(root)
        self.boot = 1
        self.env = dict(os.environ, ATLAS_SIM_ROOT=self.root, ATLAS_SIM_LIB=SIM_DIR, ATLAS_SIM_BOOT_ID="boot-1")
        self.env.pop("ATLAS_SIM_STATE", None)
        self.env.pop("ASCEND_TOOLKIT_HOME", None)
        for key in ("ATLAS_SIM_ROOT", "ATLAS_SIM_LIB", "ATLAS_SIM_BOOT_ID"):
            monkeypatch.setenv(key, self.env[key])
        monkeypatch.delenv("ATLAS_SIM_STATE", raising=False)

    def path(self, node_path):
        return os.path.join(self.root, node_path.lstrip("/"))

    def read(self, node_path):
        with open(self.path(node_path)) as handle:
            return handle.read()

    def exists(self, node_path):
        return os.path.lexists(self.path(node_path))

    def add_user(self, user="HwHiAiUser", group="HwHiAiUser"):
        os.makedirs(self.path("/etc"), exist_ok=True)
        with open(self.path("/etc/passwd"), "a") as handle:
            handle.write("root:x:0:0:root:/root:/bin/bash\n%s:x:1000:1000::/home/%s:/bin/bash\n" % (user, user))
        with open(self.path("/etc/group"), "a") as handle:
            handle.write("root:x:0:\n%s:x:1000:\n" % group)

    def run(self, argv, env=None, stdin=None):
        full = dict(self.env, **(env or {}))
        return subprocess.run(argv, check=False, env=full, input=stdin, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT,
                              universal_newlines=True, timeout=300)

    def tool(self, module, *args, **kw):
        return self.run([sys.executable, "-m", "atlas_sim." + module] + list(args),
                        env=dict(kw.get("env") or {}, PYTHONPATH=SIM_DIR))

    def npu_smi(self, *args):
        return self.tool("npu_smi", *args)

    def hccn(self, *args):
        return self.tool("hccn_tool", *args)

    def fault(self, *args):
        return self.tool("fault", *args)

    def reboot(self):
        """A container restart: new boot id, and the boot hook runs."""
        self.boot += 1
        self.env["ATLAS_SIM_BOOT_ID"] = "boot-%d" % self.boot
        os.environ["ATLAS_SIM_BOOT_ID"] = self.env["ATLAS_SIM_BOOT_ID"]
        return self.tool("reboot")

    def init(self, *args):
        return self.tool("statecli", "init", *args)

    def state(self):
        from atlas_sim import state as st
        return st.load()


@pytest.fixture
def node(tmp_path, monkeypatch):
    n = Node(tmp_path / "root", monkeypatch)
    assert n.init().returncode == 0
    return n


@pytest.fixture(scope="session")
def packages(tmp_path_factory):
    """Installer sets N and N+1 built once per session: {'n': {kind: path}, 'n+1': {...}}."""
    out = {}
    for name in ("n", "n+1"):
        target = tmp_path_factory.mktemp("pkgs-" + name.replace("+", "p"))
        proc = subprocess.run([sys.executable, os.path.join(SIM_DIR, "build_installers.py"), str(target),
                               "--set", name, "--arch", "aarch64"], stdout=subprocess.PIPE, check=True,
                              universal_newlines=True)
        paths = proc.stdout.split()
        out[name] = {kind: next(p for p in paths if key in os.path.basename(p)) for kind, key in (
            ("driver", "npu-driver"), ("firmware", "npu-firmware"), ("toolkit", "cann-toolkit"),
            ("kernels", "cann-kernels"), ("nnal", "cann-nnal"))}
    return out
