"""The simulated driver and firmware installers follow the real install scripts' word on reboots.

Source: the driver package's own scripts (https://github.com/verylucky01/driver/blob/e29d066/scripts/package/custom/
driver/common/scripts/driver_install.sh): a first install whose modules were not loaded "takes effect immediately"
(L299-L328), otherwise "Reboot needed for installation/upgrade to take effect!" (L346), coloured by drvColorEcho;
processes on the devices stop an install over a loaded driver (L415-L420). Firmware: llm-action's install log.
"""

from __future__ import annotations

from ansible_collections.ascendai.vllm.plugins.module_utils import _npu_smi as parser
from ansible_collections.ascendai.vllm.tests.unit.simulator.sim_support import DRIVER_OPTS, kv, run_pkg


def test_fresh_driver_takes_effect_immediately_firmware_asks_for_the_reboot(node, packages):
    node.add_user()
    drv = run_pkg(node, packages["n+1"]["driver"], *DRIVER_OPTS)
    assert drv.returncode == 0
    assert ("[INFO]\x1b[32mDriver package installed successfully! The new version takes effect immediately. \x1b[0m"
            in drv.stdout)
    assert not node.state()["pending_reboot"]
    assert parser.parse_info(node.npu_smi("info").stdout)["driver_version"] == "25.5.1"
    fw = run_pkg(node, packages["n+1"]["firmware"], "--full", "--quiet")
    assert ("[INFO]Firmware package installed successfully! Reboot now or after driver installation for the "
            "installation/upgrade to take effect.") in fw.stdout
    assert node.state()["pending_reboot"]
    log = node.read("/var/log/ascend_seclog/ascend_install.log")
    assert "\x1b" not in log
    assert "Driver package installed successfully! The new version takes effect immediately." in log


def test_upgrade_needs_the_reboot_and_history_keeps_the_order(node, packages):
    node.add_user()
    assert run_pkg(node, packages["n"]["driver"], *DRIVER_OPTS).returncode == 0
    assert run_pkg(node, packages["n"]["firmware"], "--full", "--quiet").returncode == 0
    node.reboot()
    fw = run_pkg(node, packages["n+1"]["firmware"], "--upgrade", "--quiet")
    drv = run_pkg(node, packages["n+1"]["driver"], "--upgrade", "--quiet")
    assert fw.returncode == 0 and drv.returncode == 0
    assert ("[INFO]\x1b[32mDriver package upgraded successfully! \x1b[0m\x1b[31mReboot needed for "
            "installation/upgrade to take effect! \x1b[0m") in drv.stdout
    before = node.npu_smi("info")
    assert before.returncode != 0 and "ret is -8005" in before.stdout
    history = [(h["kind"], h["op"], h["from"], h["to"], h["reboot_needed"]) for h in node.state()["history"]]
    assert history == [("driver", "full", None, "24.1.rc3", False), ("firmware", "full", None, "7.5.0.1.129", True),
                       ("firmware", "upgrade", "7.5.0.1.129", "7.8.0.6.201", True),
                       ("driver", "upgrade", "24.1.rc3", "25.5.1", True)]
    node.reboot()
    assert parser.parse_info(node.npu_smi("info").stdout)["driver_version"] == "25.5.1"


def test_busy_devices_stop_an_install_over_a_loaded_driver(node, packages):
    node.add_user()
    assert run_pkg(node, packages["n"]["driver"], *DRIVER_OPTS).returncode == 0
    from atlas_sim import state as st
    state = st.load()
    state["npus"][0]["chips"][0]["processes"] = [{"pid": 4242, "name": "python", "memory": 1024}]
    st.save(state)
    busy = run_pkg(node, packages["n+1"]["driver"], "--upgrade", "--quiet")
    assert busy.returncode == 1
    assert "The davinci nodes are occupied by some processes, please stop processes and install or uninstall" in (
        busy.stdout)
    assert "add the force parameter" in busy.stdout
    assert parser.parse_info(node.npu_smi("info").stdout)["driver_version"] == "24.1.rc3"
    forced = run_pkg(node, packages["n+1"]["driver"], "--upgrade", "--quiet", "--force")
    assert forced.returncode == 0 and "Reboot needed" in forced.stdout


def test_device_held_stops_an_install_over_a_loaded_driver(node, packages):
    # driver_install.sh check_boot_status (L377-L411): without --force, a device still open (common.sh
    # checkUserDocker / setHotResetFlag: a process or a container on /dev/davinci*) ends in exitInstallInfo
    node.add_user()
    assert run_pkg(node, packages["n"]["driver"], *DRIVER_OPTS).returncode == 0
    assert node.tool("fault", "device-held").returncode == 0
    busy = run_pkg(node, packages["n+1"]["driver"], "--upgrade", "--quiet")
    assert busy.returncode == 1
    assert "The davinci nodes are occupied by some processes" in busy.stdout
    assert kv(node, "/usr/local/Ascend/driver/version.info")["Version"] == "24.1.rc3"
    assert node.tool("fault", "clear").returncode == 0
    assert run_pkg(node, packages["n+1"]["driver"], "--upgrade", "--quiet").returncode == 0


def test_hardware_anti_rollback_refuses_an_older_driver_before_removing_anything(node, packages):
    # run_driver_upgrade_check.sh (https://github.com/verylucky01/driver/blob/e29d066/scripts/package/custom/driver/
    # common/scripts/run_driver_upgrade_check.sh): the installed driver's ascend_driver_config.sh stop runs it for
    # --full, --run and --upgrade before the uninstall; a card whose CDR, HBM or flash demands a newer driver stops
    # the installation with two coloured ERROR lines on stdout (show_version_suggestion, fail_exit), rc 1
    node.add_user()
    assert run_pkg(node, packages["n+1"]["driver"], *DRIVER_OPTS).returncode == 0
    assert node.tool("fault", "driver-floor", "--version", "25.2.0").returncode == 0
    for op in ("--upgrade", "--full"):
        refused = run_pkg(node, packages["n"]["driver"], op, "--quiet")
        assert refused.returncode == 1, refused.stdout
        assert "[ERROR] \x1b[31mVersion check does not match, please use 25.2.0 or later.\x1b[0m" in refused.stdout
        assert "Driver upgrade failed, details in /var/log/ascend_seclog/ascend_install.log" in refused.stdout
        assert kv(node, "/usr/local/Ascend/driver/version.info")["Version"] == "25.5.1"
    log = node.read("/var/log/ascend_seclog/ascend_install.log")
    assert "The driver version 24.1.rc3 is not allowed in this device." in log
    assert "Installation is stopped by interception rules" in log
    # not older than the floor: the check passes (25.5.1 again, an equal version)
    assert run_pkg(node, packages["n+1"]["driver"], "--upgrade", "--quiet").returncode == 0
    assert node.tool("fault", "clear").returncode == 0
    assert run_pkg(node, packages["n"]["driver"], "--upgrade", "--quiet").returncode == 0


def test_version_lt_is_the_scripts():
    from atlas_sim.installer import version_lt
    assert version_lt("24.1.rc3", "24.1.rc2.2") is False  # 'rc3' > 'rc2' as strings
    assert version_lt("24.1.rc2", "24.1.rc2.2") is True  # a missing field is smaller
    assert version_lt("23.0.6", "23.0.7") is True
    assert version_lt("23.0.10", "23.0.7") is False  # numerically where both are digits
    assert version_lt("25.2.0", "25.2.0") is False
