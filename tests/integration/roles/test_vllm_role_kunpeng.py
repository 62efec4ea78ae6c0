"""The vllm role's ascend flavour on an emulated Kunpeng (aarch64) node, from the real aarch64 bundle.

Runs under the marker kunpeng (.ci/run kunpeng), after the `bundle` stage has built
the aarch64 bundle of the default vllm-ascend row (ASCENDAI_BUNDLE_DIR, default .cache/bundle-ascend).
tools/ci/kunpeng-root.sh makes a Debian 12 arm64 root run through qemu-user-static; the roles python_runtime and
vllm (flavour ascend) converge it through the community.general.chroot connection, exactly as on an Atlas
node before CANN: pip --no-index from the bundle, torch and torch_npu of the row, vLLM built from its sdist
with VLLM_TARGET_DEVICE=empty, vllm-ascend with its platform plugin entry point. A second run changes nothing.
CANN is not there, so torch_npu is not imported (no libascendcl); everything up to it is real aarch64 code.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from ansible_collections.ascendai.vllm.plugins.module_utils import _compat_matrix as cm

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import ROOT, changed_count, run_playbook

pytestmark = pytest.mark.kunpeng  # deselected unless -m kunpeng (.ci/run kunpeng)

BUNDLE = os.environ.get("ASCENDAI_BUNDLE_DIR") or os.path.join(ROOT, ".cache", "bundle-ascend")
WHEELS = os.path.join(BUNDLE, "wheels", "aarch64")
WHEELHOUSE = "/opt/ascendai/wheelhouse"
VENV = "/opt/ascendai/venvs/vllm"

# The release the bundle stage downloaded (tests/integration/roles/test_offline_bundle_ascend.py). The wheels are
# bind-mounted on the node (vllm_wheelhouse_src empty), where the role cannot list them, so the play pins it.
VLLM_ASCEND = os.environ.get("ASCENDAI_BUNDLE_VLLM_ASCEND") or "0.11.0"


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A fresh node: an overlay on the cached emulated root (which stays as debootstrap made it, so a second run
    of this stage starts from a bare node too), the bundle's wheels bind-mounted where the role finds them, /proc."""
    assert os.path.isdir(WHEELS), f"no aarch64 bundle at {WHEELS}: run .ci/run bundle first"
    out = subprocess.run([os.path.join(ROOT, "tools", "ci", "kunpeng-root.sh")], capture_output=True, text=True,
                         check=True)
    cached = out.stdout.strip().splitlines()[-1]
    layer = tmp_path_factory.mktemp("kunpeng-node")
    root = str(layer / "root")
    for name in ("upper", "work", "root"):
        os.makedirs(layer / name)
    mounts = []
    try:
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o",
                        f"lowerdir={cached},upperdir={layer / 'upper'},workdir={layer / 'work'}", root], check=True)
        mounts.append(root)
        for source, target, args in ((WHEELS, root + WHEELHOUSE, ["--bind", "-o", "ro"]),
                                     ("proc", root + "/proc", ["-t", "proc"])):
            os.makedirs(target, exist_ok=True)
            subprocess.run(["mount", *args, source, target], check=True)
            mounts.append(target)
        yield root
    finally:
        for target in reversed(mounts):
            subprocess.run(["umount", "-l", target], check=False)


def converge(node, tmp_path):
    play = [{
        "name": "Kunpeng node, ascend flavour", "hosts": "all", "gather_facts": True,
        "roles": [
            {"role": "ascendai.vllm.python_runtime"},
            {"role": "ascendai.vllm.vllm", "vllm_flavour": "ascend", "vllm_ascend_version": VLLM_ASCEND,
             "vllm_wheelhouse_src": "",
             "vllm_wheelhouse_dest": WHEELHOUSE,
             # PIP_COMPILE 0: pip's `--compile` (store_true, default True) set from the environment, read as a
             # boolean (pip 23.0.1, the root's: src/pip/_internal/commands/install.py and cli/parser.py
             # _update_defaults; PIP_NO_COMPILE=1 would mean compile=True). No .pyc written at install, for torch
             # twice (the target and vLLM's isolated build env, which inherits the variable). Under qemu, pip's
             # byte-compiling is emulated Python and over half the install's time (446 s -> 194 s); it checks
             # nothing the role does, and pip never fails on it.
             "vllm_pip_env": {"PIP_INDEX_URL": "http://192.0.2.1:9/simple", "PIP_TIMEOUT": "2", "PIP_RETRIES": "0",
                              "PIP_COMPILE": "0"}},
        ],
    }]
    inventory = {"all": {"hosts": {"kunpeng": {
        "ansible_host": node, "ansible_connection": "community.general.chroot",
        "ansible_python_interpreter": "/usr/bin/python3"}}}}
    out = run_playbook(tmp_path, play, inventory=inventory, connection=None, python=None,
                       env={"ANSIBLE_TIMEOUT": "120"})
    runs = sorted(tmp_path.glob("run-*.log"))
    (tmp_path / f"run-{len(runs) + 1}.log").write_text(out.stdout + out.stderr)  # the whole run, kept by pytest
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    return changed_count(out, "kunpeng"), out.stdout


def in_node(node, *argv, env=None):
    command = ["chroot", node, "/usr/bin/env", *[f"{k}={v}" for k, v in (env or {}).items()], *argv]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_ascend_flavour_converges_on_aarch64(node, tmp_path):
    changed, stdout = converge(node, tmp_path)
    assert changed >= 1, stdout[-3000:]
    print(f"\nfirst run: changed={changed}", file=sys.stderr)

    arch = in_node(node, "uname", "-m")
    assert arch.stdout.strip() == "aarch64"
    listed = in_node(node, VENV + "/bin/python", "-m", "pip", "list", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    versions = {d["name"].lower().replace("_", "-"): d["version"] for d in json.loads(listed.stdout)}
    row = cm.find_row(VLLM_ASCEND)
    assert versions["vllm-ascend"] == VLLM_ASCEND
    assert versions["torch"] == row["torch"]
    assert cm.same_release(row["torch_npu"], versions["torch-npu"])
    assert versions["vllm"] == row["vllm_min"] + "+empty"  # built here from the sdist, for no device

    # the wheels are aarch64 builds (torch's C extension is an aarch64 ELF)
    elf = in_node(node, VENV + "/bin/python", "-c",
                  "import glob, torch, os; p = glob.glob(os.path.dirname(torch.__file__) + '/_C*.so')[0]; "
                  "print(open(p, 'rb').read(20)[18])", env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
    assert elf.stdout.strip() == "183", elf.stderr[-2000:]  # EM_AARCH64

    plugin = in_node(node, VENV + "/bin/python", "-c",
                     "import vllm, importlib.metadata as m; "
                     "print([e.value for e in m.entry_points(group='vllm.platform_plugins') if e.name == 'ascend'])",
                     env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "VLLM_LOGGING_LEVEL": "ERROR"})
    assert plugin.stdout.strip().splitlines()[-1] == "['vllm_ascend:register']", plugin.stderr[-2000:]

    # Without CANN, torch's autoload of torch_npu fails the way it does on a node before set_env.sh:
    # the reason the role imports vllm with TORCH_DEVICE_BACKEND_AUTOLOAD=0 and torch_npu with CANN's env.
    bare = in_node(node, VENV + "/bin/python", "-c", "import torch")
    assert bare.returncode != 0 and "torch_npu" in bare.stderr

    changed, stdout = converge(node, tmp_path)
    assert changed == 0, stdout[-4000:]
    # (a callback such as profile_tasks may print a timestamp line, ending in *****, between header and result)
    assert re.search(r"Install from the wheelhouse\] \*+\n(?:[^\n]*\*{5} *\n)?skipping", stdout), stdout[-3000:]
