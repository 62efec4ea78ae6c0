"""ascendai.vllm.ascend_package_info against the simulated .run packages (tests/simulator), on a temp install path."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.ascendai.vllm.plugins.modules import ascend_package_info
from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.module_harness import (
    AnsibleExitJson, AnsibleFailJson, patch_exits)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
BUILD = os.path.join(ROOT, "tests", "simulator", "build_installers.py")


@pytest.fixture(scope="module")
def pkgs(tmp_path_factory):
    out = {}
    for name in ("n", "n+1"):
        target = tmp_path_factory.mktemp("pkg")
        paths = subprocess.run([sys.executable, BUILD, str(target), "--set", name, "--arch", "x86_64"], check=True,
                               stdout=subprocess.PIPE, universal_newlines=True).stdout.split()
        out[name] = {kind: next(p for p in paths if key in os.path.basename(p)) for kind, key in (
            ("driver", "npu-driver"), ("firmware", "npu-firmware"), ("toolkit", "cann-toolkit"))}
    return out


@pytest.fixture(autouse=True)
def patched(monkeypatch):
    patch_exits(monkeypatch)


def run(args):
    with patch_module_args(args), pytest.raises((AnsibleExitJson, AnsibleFailJson)) as exc:
        ascend_package_info.main()
    return exc.type, exc.value.args[0]


def install_driver(path, version, inner="V100R001C19SPC002B230"):
    os.makedirs(os.path.join(path, "driver"), exist_ok=True)
    with open(os.path.join(path, "driver", "version.info"), "w") as handle:
        handle.write(f"Version={version}\nInnerversion={inner}\ncompatible_version_fw=[7.0.0,7.7.99]\n")


def test_fresh_node_plans_a_full_install(pkgs, tmp_path, monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    kind, res = run({"kind": "driver", "package": pkgs["n+1"]["driver"], "version": "25.5.1",
                     "install_path": str(tmp_path)})
    assert kind is AnsibleExitJson, res
    assert res["action"] == "full" and res["changed"] is False
    assert res["installed"] == {"version": None, "file": None, "info": {}}
    assert res["package"]["version"] == "25.5.1"
    assert res["package"]["info"]["compatible_version_fw"] == "[7.0.0,7.8.99]"
    assert res["package"]["info"]["Innerversion"] == "V100R001C23SPC006B220"
    assert res["package"]["check"].endswith("SHA256 checksums are OK. All good.")
    assert os.listdir(str(scratch)) == []  # the extracted package is gone


@pytest.mark.parametrize("installed,allow,action", [
    ("24.1.rc3", False, "upgrade"), ("25.5.1", False, "none"), ("26.0.rc1", False, "refuse"),
    ("26.0.rc1", True, "downgrade")])
def test_installed_versions(pkgs, tmp_path, installed, allow, action):
    install_driver(str(tmp_path), installed)
    kind, res = run({"kind": "driver", "package": pkgs["n+1"]["driver"], "install_path": str(tmp_path),
                     "allow_downgrade": allow})
    assert kind is AnsibleExitJson, res
    assert (res["installed"]["version"], res["wanted"], res["action"]) == (installed, "25.5.1", action)
    assert res["installed"]["file"] == os.path.join(str(tmp_path), "driver", "version.info")


def test_firmware_ranges_read_from_the_package(pkgs, tmp_path):
    kind, res = run({"kind": "firmware", "package": pkgs["n"]["firmware"], "install_path": str(tmp_path)})
    assert kind is AnsibleExitJson, res
    assert res["package"]["version"] == "7.5.0.1.129"
    assert res["package"]["info"]["compatible_version_drv"] == \
        "[24.1.rc1,24.1.rc3.],[24.1.0,24.1.0.],[25.0.rc1,25.2.0.]"


def test_toolkit_installed_layout(pkgs, tmp_path):
    info = tmp_path / "ascend-toolkit" / "8.2.RC1" / "x86_64-linux"
    info.mkdir(parents=True)
    (info / "ascend_toolkit_install.info").write_text("package_name=Ascend-cann-toolkit\nversion=8.2.RC1\n")
    os.symlink("8.2.RC1", str(tmp_path / "ascend-toolkit" / "latest"))
    kind, res = run({"kind": "toolkit", "package": pkgs["n+1"]["toolkit"], "install_path": str(tmp_path),
                     "arch": "x86_64"})
    assert kind is AnsibleExitJson, res
    assert (res["installed"]["version"], res["package"]["version"], res["action"]) == ("8.2.RC1", "8.3.RC2", "upgrade")
    assert res["package"]["info"]["compatible_version"].startswith("[V100R001C15]")


def test_tampered_package_fails_its_own_check(pkgs, tmp_path):
    text = open(pkgs["n+1"]["driver"]).read()
    bad = tmp_path / os.path.basename(pkgs["n+1"]["driver"])
    bad.write_text(text[:-20] + ("A" if text[-20] != "A" else "B") + text[-19:])
    kind, res = run({"kind": "driver", "package": str(bad), "install_path": str(tmp_path)})
    assert kind is AnsibleFailJson
    assert "failed its own integrity check (--check, rc 1)" in res["msg"]
    assert "Error in SHA256 checksums" in res["msg"]


def test_wrong_version_and_missing_package(pkgs, tmp_path):
    kind, res = run({"kind": "driver", "package": pkgs["n"]["driver"], "version": "25.5.1",
                     "install_path": str(tmp_path)})
    assert kind is AnsibleFailJson and "holds driver 24.1.rc3, not the wanted 25.5.1" in res["msg"]
    kind, res = run({"kind": "driver", "package": str(tmp_path / "nope.run"), "install_path": str(tmp_path)})
    assert kind is AnsibleFailJson and res["msg"].endswith("nope.run does not exist on the node")


def test_check_mode_without_the_package_plans_from_the_version(tmp_path):
    install_driver(str(tmp_path), "24.1.rc3")
    kind, res = run({"kind": "driver", "package": str(tmp_path / "not-copied-yet.run"), "version": "25.5.1",
                     "install_path": str(tmp_path), "_ansible_check_mode": True})
    assert kind is AnsibleExitJson, res
    assert (res["package"], res["wanted"], res["action"]) == (None, "25.5.1", "upgrade")


def test_wrong_kind_of_package(pkgs, tmp_path):
    kind, res = run({"kind": "firmware", "package": pkgs["n+1"]["toolkit"], "install_path": str(tmp_path)})
    assert kind is AnsibleFailJson
    assert res["msg"].endswith("its version.info names Ascend-cann-toolkit; is it a firmware package?")


def test_nnal_installed_is_seen(tmp_path):
    """NNAL's version.info is indented 'key : value' (https://github.com/vllm-project/vllm-ascend/issues/451):
    the installed NNAL must be read, else every run plans a full install."""
    atb = tmp_path / "nnal" / "atb" / "8.3.RC2"
    atb.mkdir(parents=True)
    (atb / "version.info").write_text("    Ascend-cann-atb : 8.3.RC2\n    Ascend-cann-atb Version : 8.3.RC2.B030\n"
                                      "    Platform : x86_64\n    branch : br_release_cann_8.3.RC2\n"
                                      "    commit id : 02a94694766ebf12d820aa4b5d9c95c4fe149379\n")
    os.symlink("8.3.RC2", str(tmp_path / "nnal" / "atb" / "latest"))
    kind, res = run({"kind": "nnal", "version": "8.3.RC2", "install_path": str(tmp_path), "arch": "x86_64"})
    assert kind is AnsibleExitJson, res
    assert (res["installed"]["version"], res["action"]) == ("8.3.RC2", "none")


def test_toolkit_installed_cann_85_layout(tmp_path):
    """CANN 8.5 records itself in <root>/cann/<arch>-linux/ascend_toolkit_install.info (hiascend CANN 8.5.0
    installation guide, "File Paths"; vllm-ascend issue #6271 for the content)."""
    info = tmp_path / "cann-8.5.0" / "x86_64-linux"
    info.mkdir(parents=True)
    (info / "ascend_toolkit_install.info").write_text(
        "package_name=Ascend-cann-toolkit\nversion=8.5.0\ninnerversion=V100R001C25SPC001B232\n"
        "path=/usr/local/Ascend/cann-8.5.0/x86_64-linux\n")
    os.symlink("cann-8.5.0", str(tmp_path / "cann"))
    kind, res = run({"kind": "toolkit", "version": "8.5.1", "install_path": str(tmp_path), "arch": "x86_64"})
    assert kind is AnsibleExitJson, res
    assert (res["installed"]["version"], res["action"]) == ("8.5.0", "upgrade")
    assert res["installed"]["file"].endswith("/cann/x86_64-linux/ascend_toolkit_install.info")


def test_ops_installed_cann_85_layout(tmp_path):
    """The CANN 8.5+ ops package records its version in <root>/cann/<arch>-linux/ascend_ops_install.info
    (hicann/ops-math docs/zh/install/quick_install.md, "环境验证"): a good install reads as installed, so the role's
    verify passes and a re-run installs nothing."""
    info = tmp_path / "cann-9.1.0" / "aarch64-linux"
    info.mkdir(parents=True)
    (info / "ascend_ops_install.info").write_text(
        "package_name=Ascend-cann-910b-ops\nversion=9.1.0\narch=aarch64\nos=linux\n"
        "path=/usr/local/Ascend/cann-9.1.0/aarch64-linux\n")
    os.symlink("cann-9.1.0", str(tmp_path / "cann"))
    kind, res = run({"kind": "kernels", "version": "9.1.0", "install_path": str(tmp_path), "arch": "aarch64"})
    assert kind is AnsibleExitJson, res
    assert (res["installed"]["version"], res["action"]) == ("9.1.0", "none")
    assert res["installed"]["file"].endswith("/cann/aarch64-linux/ascend_ops_install.info")


def test_kinds_read_several_packages_in_one_run(pkgs, tmp_path):
    """The scan of the packages and installed versions is one module run per role, so that it does not grow with the
    number of packages; each result is what the one-kind form returns for that kind, in the order asked."""
    install_driver(str(tmp_path), "24.1.rc3")
    pkg_dir = os.path.dirname(pkgs["n+1"]["driver"])
    assert os.path.dirname(pkgs["n+1"]["firmware"]) == pkg_dir
    kind, res = run({"kinds": ["firmware", "driver"], "package_dir": pkg_dir,
                     "package_files": {k: os.path.basename(pkgs["n+1"][k]) for k in ("driver", "firmware")},
                     "versions": {"driver": "25.5.1"}, "install_path": str(tmp_path)})
    assert kind is AnsibleExitJson, res
    assert res["changed"] is False and [r["kind"] for r in res["results"]] == ["firmware", "driver"]
    for one in res["results"]:
        single_kind, single = run({"kind": one["kind"], "package": pkgs["n+1"][one["kind"]],
                                   "version": "25.5.1" if one["kind"] == "driver" else None,
                                   "install_path": str(tmp_path)})
        assert single_kind is AnsibleExitJson
        assert {k: single[k] for k in one} == one
    assert [(r["installed"]["version"], r["wanted"], r["action"]) for r in res["results"]] == [
        (None, "7.8.0.6.201", "full"), ("24.1.rc3", "25.5.1", "upgrade")]


def test_kinds_without_packages_read_the_installed_versions(tmp_path):
    install_driver(str(tmp_path), "25.5.1")
    kind, res = run({"kinds": ["driver", "firmware"], "version": "25.5.1", "versions": {"firmware": "7.8.0.6.201"},
                     "install_path": str(tmp_path)})
    assert kind is AnsibleExitJson, res
    assert [(r["kind"], r["installed"]["version"], r["package"], r["action"]) for r in res["results"]] == [
        ("driver", "25.5.1", None, "none"), ("firmware", None, None, "full")]
    kind, res = run({"kinds": [], "install_path": str(tmp_path)})
    assert kind is AnsibleExitJson and res["results"] == []


def test_kinds_fail_like_one_kind_and_need_the_package_dir(pkgs, tmp_path):
    kind, res = run({"kinds": ["driver"], "package_dir": os.path.dirname(pkgs["n"]["driver"]),
                     "package_files": {"driver": os.path.basename(pkgs["n"]["driver"])}, "version": "25.5.1",
                     "install_path": str(tmp_path)})
    assert kind is AnsibleFailJson and "holds driver 24.1.rc3, not the wanted 25.5.1" in res["msg"]
    kind, res = run({"kinds": ["driver"], "package_files": {"driver": "x.run"}, "install_path": str(tmp_path)})
    assert kind is AnsibleFailJson and res["msg"] == "package_files names packages of driver: package_dir is needed " \
        "to find them"
    kind, res = run({"kind": "driver", "kinds": ["driver"], "install_path": str(tmp_path)})
    assert kind is AnsibleFailJson and "mutually exclusive" in res["msg"]


def test_driver_package_version_info_at_the_root(pkgs, tmp_path):
    """The driver's own installer reads ./version.info at the top of the extracted package (env_check.sh
    getVersionInRunFile, ver_check.sh): the simulated driver has it there, and the module reads it."""
    listing = subprocess.run(["bash", pkgs["n+1"]["driver"], "--list"], stdout=subprocess.PIPE,
                             universal_newlines=True, check=True).stdout.split()
    assert "./version.info" in listing
    kind, res = run({"kind": "driver", "package": pkgs["n+1"]["driver"], "install_path": str(tmp_path)})
    assert kind is AnsibleExitJson, res
    assert (res["package"]["version"], res["package"]["info_file"]) == ("25.5.1", "version.info")
    assert res["package"]["info"]["compatible_version_fw"] == "[7.0.0,7.8.99]"


def test_packages_are_not_unpacked(pkgs, tmp_path, monkeypatch):
    """Only the version file comes out of a package (makeself --tar), nothing is unpacked into /tmp: a CANN
    toolkit is several GB."""
    calls = []
    real = ascend_package_info.AnsibleModule.run_command

    def spy(self, args, *a, **kw):
        calls.append(list(args))
        return real(self, args, *a, **kw)

    monkeypatch.setattr(ascend_package_info.AnsibleModule, "run_command", spy)
    for kind in ("toolkit", "driver", "firmware"):
        result, res = run({"kind": kind, "package": pkgs["n+1"][kind], "install_path": str(tmp_path)})
        assert result is AnsibleExitJson, res
        assert res["package"]["version"] == {"toolkit": "8.3.RC2", "driver": "25.5.1", "firmware": "7.8.0.6.201"}[kind]
    assert calls and not [c for c in calls if "--noexec" in c or any(a.startswith("--extract") for a in c)]


def test_version_from_the_file_name_when_the_package_has_no_version_file(tmp_path):
    stub = tmp_path / "Ascend-hdk-910b-npu-driver_25.5.1_linux-aarch64.run"
    stub.write_text("#!/bin/bash\necho 'Verifying archive integrity...  100%   SHA256 checksums are OK. All good.'\n"
                    "exit 0\n")
    kind, res = run({"kind": "driver", "package": str(stub), "install_path": str(tmp_path / "root")})
    assert kind is AnsibleExitJson, res
    assert (res["package"]["version"], res["package"]["info_file"], res["action"]) == ("25.5.1", None, "full")
    fw = tmp_path / "Ascend-hdk-910b-npu-firmware_7.8.0.6.201.run"
    fw.write_text(stub.read_text())
    kind, res = run({"kind": "firmware", "package": str(fw), "install_path": str(tmp_path / "root")})
    assert (res["package"]["version"], res["action"]) == ("7.8.0.6.201", "full")
    kind, res = run({"kind": "firmware", "package": str(stub), "install_path": str(tmp_path / "root")})
    assert kind is AnsibleFailJson and "is it a firmware package?" in res["msg"]


def _cann_tree(root, version, arch="aarch64"):
    """One CANN 8.5+ version's records as its toolkit, ops and NNAL installs leave them."""
    info = root / f"cann-{version}" / f"{arch}-linux"
    info.mkdir(parents=True)
    (info / "ascend_toolkit_install.info").write_text(f"package_name=Ascend-cann-toolkit\nversion={version}\n")
    (info / "ascend_ops_install.info").write_text(f"package_name=Ascend-cann-910b-ops\nversion={version}\n")
    atb = root / "nnal" / "atb" / version
    atb.mkdir(parents=True)
    (atb / "version.info").write_text(f"    Ascend-cann-atb : {version}\n")


def test_side_by_side_reads_the_wanted_versions_own_records(tmp_path):
    """With generations, CANN versions sit side by side and the shared links name the last one installed: the
    wanted version is installed when its own records are, whatever the links say; a missing one is a full install
    (--install, beside the others), never an upgrade that would remove them."""
    _cann_tree(tmp_path, "8.5.1")
    _cann_tree(tmp_path, "9.1.0")
    os.symlink("cann-9.1.0", str(tmp_path / "cann"))
    os.symlink("9.1.0", str(tmp_path / "nnal" / "atb" / "latest"))
    common = {"kinds": ["toolkit", "kernels", "nnal"], "install_path": str(tmp_path), "arch": "aarch64"}
    kind, res = run(dict(common, version="8.5.1", side_by_side=True))
    assert kind is AnsibleExitJson, res
    assert [(r["installed"]["version"], r["action"]) for r in res["results"]] == [("8.5.1", "none")] * 3
    assert res["results"][0]["installed"]["file"] == f"{tmp_path}/cann-8.5.1/aarch64-linux/ascend_toolkit_install.info"
    kind, res = run(dict(common, version="9.2.0", side_by_side=True))
    assert [(r["installed"]["version"], r["action"]) for r in res["results"]] == [(None, "full")] * 3
    # without it the shared records answer: 9.1.0 is newer than the wanted 8.5.1
    kind, res = run(dict(common, version="8.5.1"))
    assert [(r["installed"]["version"], r["action"]) for r in res["results"]] == [("9.1.0", "refuse")] * 3


def test_side_by_side_needs_a_version(tmp_path):
    kind, res = run({"kind": "toolkit", "side_by_side": True, "install_path": str(tmp_path)})
    assert kind is AnsibleFailJson and "give version" in res["msg"]
    # the driver has one version per node: read as without side_by_side
    install_driver(str(tmp_path), "25.5.1")
    kind, res = run({"kind": "driver", "side_by_side": True, "install_path": str(tmp_path)})
    assert kind is AnsibleExitJson and res["installed"]["version"] == "25.5.1"
