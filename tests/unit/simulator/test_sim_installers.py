"""The simulated Ascend .run packages: fresh install, upgrade, same version, uninstall, and each refusal."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ansible_collections.ascendai.vllm.plugins.module_utils import _npu_smi as parser
from ansible_collections.ascendai.vllm.tests.unit.simulator.sim_support import DRIVER_OPTS, SIM_DIR, kv, run_pkg


def test_real_file_names(packages):
    assert {k: os.path.basename(v) for k, v in packages["n+1"].items()} == {
        "driver": "Ascend-hdk-910b-npu-driver_25.5.1_linux-aarch64.run",
        "firmware": "Ascend-hdk-910b-npu-firmware_7.8.0.6.201.run",
        "toolkit": "Ascend-cann-toolkit_8.3.RC2_linux-aarch64.run",
        "kernels": "Ascend-cann-kernels-910b_8.3.RC2_linux-aarch64.run",
        "nnal": "Ascend-cann-nnal_8.3.RC2_linux-aarch64.run"}


def test_check_version_help_and_tampering(node, packages, tmp_path):
    pkg = packages["n"]["driver"]
    check = run_pkg(node, pkg, "--check")
    assert check.returncode == 0 and "SHA256 checksums are OK. All good." in check.stdout
    assert run_pkg(node, pkg, "--version").stdout.strip() == "24.1.rc3"
    assert "SIMULATED" in run_pkg(node, pkg, "--help").stdout
    text = open(pkg).read()
    bad = tmp_path / os.path.basename(pkg)
    bad.write_text(text[:-20] + ("A" if text[-20] != "A" else "B") + text[-19:])
    tampered = run_pkg(node, str(bad), "--check")
    assert tampered.returncode != 0 and "Error in SHA256 checksums" in tampered.stdout


def test_driver_refused_without_hwhiaiuser(node, packages):
    result = run_pkg(node, packages["n+1"]["driver"], *DRIVER_OPTS)
    assert result.returncode == 1
    assert "[ERROR]ERR_NO:0x0091;ERR_DES:HwHiAiUser not exists! Please add HwHiAiUser" in result.stdout
    assert not node.exists("/usr/local/Ascend/driver/version.info")
    assert not node.exists("/usr/local/sbin/npu-smi")


def test_driver_refuses_root_without_for_all_and_bad_option_mixes(node, packages):
    node.add_user()
    pkg = packages["n+1"]["driver"]
    root = run_pkg(node, pkg, "--full", "--quiet", "--install-username=root", "--install-usergroup=root")
    # env_check.sh#L476-L487: a root user or group without --install-for-all is ERR_NO:0x0091
    assert root.returncode == 1
    assert "[ERROR]ERR_NO:0x0091;ERR_DES:username not permission for root" in root.stdout
    mixed = run_pkg(node, pkg, "--upgrade", "--install-for-all")
    assert mixed.returncode == 1 and "cannot be used with" in mixed.stdout
    # --upgrade on a node without a driver is a first installation (driver_install.sh#L751-L762)
    upgrade = run_pkg(node, pkg, "--upgrade", "--quiet")
    assert upgrade.returncode == 0 and "Driver package installed successfully!" in upgrade.stdout


def test_fresh_install_then_reboot(node, packages):
    node.add_user()
    assert not node.exists("/usr/local/sbin/npu-smi")
    result = run_pkg(node, packages["n+1"]["driver"], *DRIVER_OPTS)
    assert result.returncode == 0, result.stdout
    assert "[INFO]set username and usergroup, HwHiAiUser:HwHiAiUser" in result.stdout
    assert "The new version takes effect immediately." in result.stdout   # first install: no reboot
    version = kv(node, "/usr/local/Ascend/driver/version.info")
    assert (version["Version"], version["compatible_version_fw"]) == ("25.5.1", "[7.0.0,7.8.99]")
    info = kv(node, "/etc/ascend_install.info")
    assert (info["UserName"], info["Driver_Install_For_All"], info["Driver_Install_Status"]) == (
        "HwHiAiUser", "yes", "complete")
    assert os.readlink(node.path("/usr/local/bin/hccn_tool")) == "/usr/local/Ascend/driver/tools/hccn_tool"
    assert os.readlink(node.path("/usr/local/bin/npu-smi")) == "/usr/local/sbin/npu-smi"
    npu_smi = node.path("/usr/local/sbin/npu-smi")
    # the first install loads the driver at once (driver_install.sh#L299-L328): npu-smi answers before any reboot
    assert parser.parse_info(node.run([npu_smi, "info"]).stdout)["driver_version"] == "25.5.1"
    fw = run_pkg(node, packages["n+1"]["firmware"], "--full", "--quiet")
    assert fw.returncode == 0 and "Reboot now or after driver installation" in fw.stdout
    before = node.run([npu_smi, "info"])
    assert before.returncode != 0 and before.stdout.strip() == "dcmi module initialize failed. ret is -8005"
    assert parser.classify_error(before.stdout, "", before.returncode)[0] == "dcmi_init"
    node.reboot()
    info = parser.parse_info(node.run([npu_smi, "info"]).stdout)
    assert (info["driver_version"], len(info["npus"])) == ("25.5.1", 4)
    assert {n["name"] for n in info["npus"]} == {"910B3"} and {n["health"] for n in info["npus"]} == {"OK"}
    assert {c["hbm_total_mb"] for n in info["npus"] for c in n["chips"]} == {65536}
    assert not info["driver_install_incomplete"]
    hccn = node.run([node.path("/usr/local/Ascend/driver/tools/hccn_tool"), "-i", "0", "-link", "-g"])
    assert hccn.stdout == "link status: UP\n"


def test_reboot_detected_without_boot_hook(node, packages):
    """A container restart changes the boot id; npu-smi notices even if the oneshot unit did not run."""
    node.add_user()
    run_pkg(node, packages["n"]["driver"], *DRIVER_OPTS)
    run_pkg(node, packages["n"]["firmware"], "--full", "--quiet")
    assert node.npu_smi("info").returncode != 0
    node.env["ATLAS_SIM_BOOT_ID"] = "another-boot"
    result = node.run([sys.executable, "-m", "atlas_sim.npu_smi", "info"], env={"PYTHONPATH": SIM_DIR})
    assert parser.parse_info(result.stdout)["driver_version"] == "24.1.rc3"


def _install_set(node, pkgs):
    assert run_pkg(node, pkgs["driver"], *DRIVER_OPTS).returncode == 0
    assert run_pkg(node, pkgs["firmware"], "--full", "--quiet").returncode in (0, 2)
    node.reboot()
    assert run_pkg(node, pkgs["toolkit"], "--install", "--install-for-all", "--quiet").returncode == 0
    assert run_pkg(node, pkgs["kernels"], "--install", "--quiet").returncode == 0
    env = {"ASCEND_TOOLKIT_HOME": "/usr/local/Ascend/ascend-toolkit/latest"}
    assert run_pkg(node, pkgs["nnal"], "--install", "--quiet", env=env).returncode == 0


def test_full_stack_install_and_upgrade_n_to_n1(node, packages):
    node.add_user()
    _install_set(node, packages["n"])
    tk = kv(node, "/usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info")
    assert (tk["version"], tk["path"]) == ("8.2.RC1", "/usr/local/Ascend/ascend-toolkit/8.2.RC1/aarch64-linux")
    assert os.readlink(node.path("/usr/local/Ascend/ascend-toolkit/latest")) == "8.2.RC1"
    assert "ASCEND_TOOLKIT_HOME=/usr/local/Ascend/ascend-toolkit/latest" in node.read(
        "/usr/local/Ascend/ascend-toolkit/set_env.sh")
    assert 'ATB_HOME_PATH="${atb_path}/latest/atb/cxx_abi_${cxx_abi}"' in node.read(
        "/usr/local/Ascend/nnal/atb/set_env.sh")
    board = parser.parse_board(node.npu_smi("info", "-t", "board", "-i", "0").stdout)
    assert (board["software_version"], board["firmware_version"], board["compatibility"]) == (
        "24.1.rc3", "7.5.0.1.129", "OK")
    # upgrade: firmware, driver (--upgrade keeps the user from /etc/ascend_install.info), then CANN
    new = packages["n+1"]
    fw = run_pkg(node, new["firmware"], "--upgrade", "--quiet")
    assert fw.returncode == 0 and "Reboot now or after driver installation" in fw.stdout
    drv = run_pkg(node, new["driver"], "--upgrade", "--quiet")
    assert drv.returncode == 0 and "base version is 24.1.rc3." in drv.stdout
    assert node.npu_smi("info").returncode != 0
    node.reboot()
    board = parser.parse_board(node.npu_smi("info", "-t", "board", "-i", "0").stdout)
    assert (board["software_version"], board["firmware_version"]) == ("25.5.1", "7.8.0.6.201")
    assert run_pkg(node, new["toolkit"], "--upgrade", "--quiet").returncode == 0
    assert os.readlink(node.path("/usr/local/Ascend/ascend-toolkit/latest")) == "8.3.RC2"
    assert not node.exists("/usr/local/Ascend/ascend-toolkit/8.2.RC1")
    assert node.state()["software"] == {"driver": "25.5.1", "firmware": "7.8.0.6.201", "cann": "8.3.RC2"}


def test_same_version_again(node, packages):
    node.add_user()
    pkgs = packages["n+1"]
    _install_set(node, pkgs)
    drv = run_pkg(node, pkgs["driver"], *DRIVER_OPTS)
    assert drv.returncode == 0 and "do you want to continue?" not in drv.stdout   # --quiet asks nothing
    assert "takes effect immediately" in drv.stdout and node.npu_smi("info").returncode == 0
    # without --quiet it asks; "n" stops with rc 0 (driver_install.sh#L716-L729)
    no = run_pkg(node, pkgs["driver"], "--full", "--install-for-all", stdin="n\n")
    assert ("Driver package has been installed on the path /usr/local/Ascend, the version is 25.5.1, and the "
            "version of this package is 25.5.1,do you want to continue?  [y/n]") in no.stdout
    assert no.returncode == 0 and "[INFO]installation Stoped!" in no.stdout
    fw = run_pkg(node, pkgs["firmware"], "--full", "--quiet")
    assert fw.returncode == 2 and "no need to upgrade" in fw.stdout
    tk = run_pkg(node, pkgs["toolkit"], "--install", "--quiet")
    assert tk.returncode == 1 and "already installed" in tk.stdout


def test_uninstall(node, packages):
    node.add_user()
    pkgs = packages["n+1"]
    _install_set(node, pkgs)
    script = node.path("/usr/local/Ascend/ascend-toolkit/8.3.RC2/aarch64-linux/script/uninstall.sh")
    assert node.run(["bash", script]).returncode == 0
    assert not node.exists("/usr/local/Ascend/ascend-toolkit")
    assert node.state()["software"]["cann"] is None
    result = node.run(["bash", node.path("/usr/local/Ascend/driver/script/uninstall.sh"), "--quiet"])
    assert result.returncode == 0 and "Driver package uninstalled successfully!" in result.stdout
    assert not node.exists("/usr/local/Ascend/driver") and not node.exists("/usr/local/sbin/npu-smi")
    assert "Driver_Install_Status" not in kv(node, "/etc/ascend_install.info")
    fw = run_pkg(node, pkgs["firmware"], "--uninstall")
    assert fw.returncode == 0 and not node.exists("/usr/local/Ascend/firmware/version.info")
    again = run_pkg(node, pkgs["firmware"], "--uninstall")
    assert again.returncode == 1


def _custom(tmp_path, name, *args):
    out = tmp_path / name
    subprocess.run([sys.executable, os.path.join(SIM_DIR, "build_installers.py"), str(out), "--arch", "aarch64"]
                   + list(args), check=True, stdout=subprocess.PIPE)
    return {p.name.split("_")[0]: str(p) for p in out.iterdir()}


def test_incompatible_firmware_only_warns_under_quiet(node, packages, tmp_path):
    # the firmware installer's check is not published; it follows the driver's ver_check.sh (assumption)
    node.add_user()
    assert run_pkg(node, packages["n+1"]["driver"], *DRIVER_OPTS).returncode == 0
    old_fw = _custom(tmp_path, "oldfw", "--firmware-version", "7.1.0.11.220",
                     "--firmware-compatible-drv", "[23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.]",
                     "--only", "firmware")["Ascend-hdk-910b-npu-firmware"]
    result = run_pkg(node, old_fw, "--full", "--quiet")
    assert result.returncode == 0, result.stdout
    assert "[WARNING]driver and firmware version relationship check fail" in result.stdout
    assert "ERR_NO:0x0095" not in result.stdout
    assert kv(node, "/usr/local/Ascend/firmware/version.info")["Version"] == "7.1.0.11.220"


def test_driver_outside_installed_firmware_range_warns_under_quiet_asks_without(node, packages, tmp_path):
    # ver_check.sh#L100-L135: a failed relationship check prints a WARNING; with --quiet the install goes on
    # (rc 0), without it the installer asks and "n" stops it (exit 1)
    node.add_user()
    assert run_pkg(node, packages["n+1"]["firmware"], "--full", "--quiet").returncode == 0
    narrow = _custom(tmp_path, "narrow", "--driver-compatible-fw", "[7.0.0,7.2.99]", "--only", "driver")
    asked = run_pkg(node, narrow["Ascend-hdk-910b-npu-driver"], "--full", "--nox11", "--install-for-all",
                    stdin="n\n")
    assert asked.returncode == 1 and "do you want to continue?" in asked.stdout
    assert "Stop installation!" in asked.stdout
    assert not node.exists("/usr/local/Ascend/driver/version.info")
    result = run_pkg(node, narrow["Ascend-hdk-910b-npu-driver"], *DRIVER_OPTS)
    assert result.returncode == 0, result.stdout
    assert "[WARNING]driver and firmware version relationship check fail" in result.stdout
    assert "ERR_NO:0x0095" not in result.stdout
    assert kv(node, "/usr/local/Ascend/driver/version.info")["Version"] == "25.5.1"


def test_cann_refused_for_incompatible_driver(node, packages, tmp_path):
    node.add_user()
    assert run_pkg(node, packages["n+1"]["driver"], *DRIVER_OPTS).returncode == 0
    other = _custom(tmp_path, "cann", "--cann-compatible", "[V100R001C13],[V100R001C15]", "--only", "toolkit")
    result = run_pkg(node, other["Ascend-cann-toolkit"], "--install", "--quiet")
    assert result.returncode == 1 and "is not compatible with Ascend-cann-toolkit_8.3.RC2" in result.stdout
    assert not node.exists("/usr/local/Ascend/ascend-toolkit")


def test_kernels_and_nnal_refusals(node, packages):
    pkgs = packages["n+1"]
    kernels = run_pkg(node, pkgs["kernels"], "--install", "--quiet")
    assert kernels.returncode == 1 and "install the toolkit of the same version first" in kernels.stdout
    assert run_pkg(node, pkgs["toolkit"], "--install", "--quiet").returncode == 0
    nnal = run_pkg(node, pkgs["nnal"], "--install", "--quiet")
    assert nnal.returncode == 1 and "source /usr/local/Ascend/ascend-toolkit/set_env.sh" in nnal.stdout
    old = run_pkg(node, packages["n"]["nnal"], "--install", "--quiet",
                  env={"ASCEND_TOOLKIT_HOME": "/usr/local/Ascend/ascend-toolkit/latest"})
    assert old.returncode == 1 and "requires Ascend-cann-toolkit_8.2.RC1" in old.stdout


@pytest.mark.parametrize("kind", ["driver", "toolkit"])
def test_installer_fails_midway_once(node, packages, kind):
    node.add_user()
    pkgs = packages["n+1"]
    assert node.fault("installer-fail").returncode == 0
    args = DRIVER_OPTS if kind == "driver" else ("--install", "--quiet")
    failed = run_pkg(node, pkgs[kind], *args)
    assert failed.returncode == 1 and "[ERROR]" in failed.stdout
    if kind == "driver":
        assert "upgradePercentage:40%" in failed.stdout
        assert "Driver_Install_Status" not in kv(node, "/etc/ascend_install.info")
        assert not node.exists("/usr/local/Ascend/driver/version.info")
    else:
        assert not node.exists("/usr/local/Ascend/ascend-toolkit/latest")
    assert run_pkg(node, pkgs[kind], *args).returncode == 0   # the fault fires once


@pytest.mark.parametrize("kind,rel,expected", [
    # the driver's installer reads ./version.info at the top (env_check.sh getVersionInRunFile, ver_check.sh#L100)
    ("driver", "version.info", {"Version": "25.5.1", "Innerversion": "V100R001C23SPC006B220",
                                "compatible_version_fw": "[7.0.0,7.8.99]"}),
    ("firmware", "firmware/version.info", {"Version": "7.8.0.6.201", "package_version": "25.5.1",
                                           "compatible_version_drv": "[24.1.rc1,24.1.rc3.],[24.1.0,24.1.0.],"
                                                                     "[25.0.rc1,25.5.1.]"}),
    ("toolkit", "version.info", {"Version": "8.3.RC2", "innerversion": "V100R001C23SPC002B210"}),
])
def test_extract_mirrors_the_real_layout(node, packages, tmp_path, kind, rel, expected):
    dest = tmp_path / ("x-" + kind)
    result = run_pkg(node, packages["n+1"][kind], "--noexec", "--extract=%s" % dest)
    assert result.returncode == 0, result.stdout
    info = dict(line.split("=", 1) for line in (dest / rel).read_text().splitlines())
    assert {k: info[k] for k in expected} == expected
    assert not node.exists("/usr/local/Ascend")
    # makeself's --tar streams the payload through tar: one file comes out, nothing is unpacked
    one = run_pkg(node, packages["n+1"][kind], "--tar", "xOf", "./" + rel)
    assert dict(line.split("=", 1) for line in one.stdout.splitlines() if "=" in line)["Version"] == expected["Version"]
