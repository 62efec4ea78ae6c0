"""The logic inside the simulated Ascend ``.run`` packages (driver, firmware, CANN toolkit, kernels, NNAL).

Runs from the package payload (``python3 -m atlas_sim.installer --package-meta package.json -- ARGS``) and
from the installed ``uninstall.sh`` scripts.  Writes the real file layout under ``$ATLAS_SIM_ROOT`` and
updates the node state (installed versions, pending reboot).  Messages follow real install logs
(tests/unit/fixtures/ascend-install, each naming its public source) where known.
"""

import datetime
import json
import os
import shutil
import sys

from atlas_sim import SIMULATED_NOTE, state as st, versions

DEFAULT_PATH = "/usr/local/Ascend"
TAGS = {"driver": "Driver", "firmware": "Firmware", "toolkit": "Toolkit", "kernels": "Kernels", "nnal": "NNAL"}
OPERATION_FLAGS = ("--full", "--install", "--run", "--devel", "--docker", "--upgrade", "--uninstall")


class Fail(Exception):
    def __init__(self, rc, message=None):
        Exception.__init__(self, message)
        self.rc, self.message = rc, message


# --- small helpers ----------------------------------------------------------------------------------------

def read_kv(filename):
    out = {}
    try:
        with open(filename) as handle:
            for line in handle:
                if "=" in line:
                    key, value = line.rstrip("\n").split("=", 1)
                    out[key.strip()] = value.strip()
    except OSError:
        pass
    return out


def write_kv(filename, pairs):
    os.makedirs(os.path.dirname(filename), exist_ok=True)
    with open(filename, "w") as handle:
        for key, value in pairs:
            handle.write("%s=%s\n" % (key, value))


def update_kv(filename, updates, remove=()):
    """Rewrite a ``key=value`` file keeping the order of existing keys."""
    current = []
    seen = set()
    for key, value in read_kv(filename).items():
        if key in remove:
            continue
        if key in updates:
            value = updates[key]
        seen.add(key)
        current.append((key, value))
    current += [(k, v) for k, v in updates.items() if k not in seen]
    if current:
        write_kv(filename, current)
    elif os.path.exists(filename):
        os.remove(filename)


def write_text(filename, text, mode=0o644):
    os.makedirs(os.path.dirname(filename), exist_ok=True)
    with open(filename, "w") as handle:
        handle.write(text)
    os.chmod(filename, mode)


def symlink(target, link):
    os.makedirs(os.path.dirname(link), exist_ok=True)
    if os.path.islink(link) or os.path.exists(link):
        os.remove(link)
    os.symlink(target, link)


def _names(filename, column):
    out = {}
    try:
        with open(filename) as handle:
            for line in handle:
                parts = line.strip().split(":")
                if len(parts) > column:
                    out[parts[0]] = parts
    except OSError:
        pass
    return out


def user_exists(name):
    return name in _names(st.path("/etc/passwd"), 3)


def group_exists(name):
    return name in _names(st.path("/etc/group"), 2)


def user_in_group(user, group):
    users, groups = _names(st.path("/etc/passwd"), 3), _names(st.path("/etc/group"), 2)
    if user not in users or group not in groups:
        return False
    gid = groups[group][2]
    members = groups[group][3].split(",") if len(groups[group]) > 3 else []
    return users[user][3] == gid or user in members


class Logger(object):
    def __init__(self, kind, quiet):
        self.tag, self.kind, self.quiet = TAGS[kind], kind, quiet
        self.logfile = st.path("/var/log/ascend_seclog/%s" % (
            "ascend_install.log" if kind in ("driver", "firmware") else "ascend_%s_install.log" % kind))

    def __call__(self, level, message, plain=None):
        """Print one line; ``plain`` (the text without colours) goes to the log file instead when given."""
        now = datetime.datetime.now()
        if self.kind in ("driver", "firmware"):
            fmt, stamp = "[%s] [%s] [%s]%s", now.strftime("%Y-%m-%d %H:%M:%S")
        else:
            fmt, stamp = "[%s] [%s] [%s] %s", now.strftime("%Y%m%d-%H:%M:%S")
        line = fmt % (self.tag, stamp, level, message)
        print(line)
        sys.stdout.flush()
        try:
            os.makedirs(os.path.dirname(self.logfile), exist_ok=True)
            with open(self.logfile, "a") as handle:
                handle.write((fmt % (self.tag, stamp, level, plain) if plain is not None else line) + "\n")
        except OSError:
            pass


# --- argument handling ------------------------------------------------------------------------------------

def parse_args(argv):
    opts = {"quiet": False, "op": None, "install_path": None, "username": None, "usergroup": None,
            "for_all": False, "force": False, "extract": None, "noexec": False, "cxx_abi": "0", "ops": []}
    for arg in argv:
        name, _, value = arg.partition("=")
        if name in ("--quiet", "-q"):
            opts["quiet"] = True
        elif name in OPERATION_FLAGS:
            opts["ops"].append(name)
        elif name == "--install-path":
            opts["install_path"] = value
        elif name == "--install-username":
            opts["username"] = value
        elif name == "--install-usergroup":
            opts["usergroup"] = value
        elif name == "--install-for-all":
            opts["for_all"] = True
        elif name == "--force":
            opts["force"] = True
        elif name == "--cxx_abi":
            opts["cxx_abi"] = value
        elif name in ("--nox11", "--type", "--pylocal", "--chip", "--feature", "--whitelist"):
            pass
        else:
            raise Fail(1, "Unrecognized parameters: %s. Try './xxx.run --help' for more information." % arg)
    if len(set(opts["ops"])) > 1:
        raise Fail(1, "[ERROR]ERR_NO:0x0004;ERR_DES:Only one of %s can be used at a time." % ", ".join(opts["ops"]))
    opts["op"] = opts["ops"][0] if opts["ops"] else None
    if opts["op"] == "--upgrade" and (opts["username"] or opts["usergroup"] or opts["for_all"]):
        raise Fail(1, "[ERROR]ERR_NO:0x0004;ERR_DES:--upgrade cannot be used with --install-username, "
                   "--install-usergroup or --install-for-all.")
    if bool(opts["username"]) != bool(opts["usergroup"]):
        raise Fail(1, "[ERROR]ERR_NO:0x0004;ERR_DES:--install-username and --install-usergroup must be used "
                   "together.")
    if opts["install_path"] is not None and not opts["install_path"].startswith("/"):
        raise Fail(1, "[ERROR]ERR_NO:0x0003;ERR_DES:install-path input error, install failed")
    return opts


def confirm(log, quiet, question):
    if quiet:
        log("INFO", question + " [y/n] y")
        return True
    sys.stdout.write(question + " [y/n] ")
    sys.stdout.flush()
    answer = sys.stdin.readline().strip().lower()
    return answer in ("y", "yes")


def _take_installer_fault(state):
    if state["faults"].get("installer_fail"):
        state["faults"]["installer_fail"] = False
        return True
    return False


# --- driver -----------------------------------------------------------------------------------------------

# drvColorEcho (echo -e) colours of the driver's completion lines:
# https://github.com/verylucky01/driver/blob/e29d066/scripts/package/custom/driver/common/scripts/driver_install.sh#L326-L347
GREEN, RED, RESET = "\033[32m", "\033[31m", "\033[0m"


def _history(state, kind, op, before, after, reboot):
    """Record what ran, in order (the simulator's own record: ``state['history']``, read by the Molecule checks)."""
    entries = state.setdefault("history", [])
    entries.append({"seq": len(entries) + 1, "time": datetime.datetime.now().isoformat(timespec="seconds"),
                    "kind": kind, "op": op, "from": before, "to": after, "reboot_needed": bool(reboot)})

NPU_SMI_WRAPPER = """#!/usr/bin/env python3
# npu-smi -- SIMULATED (ascendai.vllm test infrastructure: tests/simulator); installed by the driver package.
import os
import sys
sys.path.insert(0, os.environ.get("ATLAS_SIM_LIB", {lib!r}))
from atlas_sim.{module} import main
sys.exit(main())
"""

UNINSTALL_SH = """#!/bin/bash
# uninstall.sh of the {kind} package {version} -- SIMULATED (ascendai.vllm test infrastructure)
export PYTHONPATH="${{ATLAS_SIM_LIB:-{lib}}}${{PYTHONPATH:+:$PYTHONPATH}}"
exec python3 -m atlas_sim.installer --uninstall-kind {kind} --uninstall-version {version} \\
    --uninstall-path {path} -- "$@"
"""


def _lib_dir():
    return os.environ.get("ATLAS_SIM_LIB") or "/opt/atlas-sim"


def _install_tools(path):
    lib = _lib_dir()
    tools = st.path(path, "driver/tools")
    write_text(os.path.join(tools, "hccn_tool"), NPU_SMI_WRAPPER.format(lib=lib, module="hccn_tool"), 0o755)
    write_text(os.path.join(tools, "upgrade-tool"), NPU_SMI_WRAPPER.format(lib=lib, module="upgrade_tool"), 0o755)
    write_text(st.path("/usr/local/sbin/npu-smi"), NPU_SMI_WRAPPER.format(lib=lib, module="npu_smi"), 0o755)
    symlink("/usr/local/sbin/npu-smi", st.path("/usr/local/bin/npu-smi"))
    symlink(os.path.join(path, "driver/tools/hccn_tool"), st.path("/usr/local/bin/hccn_tool"))


def _uninstall_script(kind, version, path, where):
    write_text(where, UNINSTALL_SH.format(kind=kind, version=version, path=path, lib=_lib_dir()), 0o755)


def relationship_check(log, opts, ok, question):
    """The driver/firmware version relationship check as ver_check.sh runs it (driver_install.sh#L716, #L747,
    #L760): a failure is a WARNING; under --quiet the install goes on, otherwise the user is asked and "n"
    stops it (exit 1). False when the install must stop."""
    if ok:
        log("INFO", "driver and firmware version relationship check success")
        return True
    log("WARNING", "driver and firmware version relationship check fail")
    if opts["quiet"]:
        return True
    sys.stdout.write("[WARNING]%s ,do you want to continue?  [y/n] \n" % question)
    sys.stdout.flush()
    if sys.stdin.readline().strip() == "y":
        return True
    print("Stop installation!")
    return False


def version_lt(first, second):
    """run_driver_upgrade_check.sh version_lt: the first four dot-separated fields, numerically where both are
    digits, else as strings; a missing field is smaller."""
    one, two = first.split("."), second.split(".")
    for i in range(4):
        v1 = one[i] if i < len(one) else ""
        v2 = two[i] if i < len(two) else ""
        if v1 == v2:
            continue
        if not v1:
            return True
        if not v2:
            return False
        if (v1 + v2).isdigit():
            return int(v1) < int(v2)
        return v1 < v2
    return False


def anti_rollback(meta, opts, state, installed):
    """The hardware anti-rollback interception (run_driver_upgrade_check.sh, called by the INSTALLED driver's
    ascend_driver_config.sh stop before anything is removed, for --full, --run and --upgrade): a card whose CDR,
    HBM or flash demands a newer driver refuses the package. The simulator keeps the demanded version
    (atlas-sim-fault driver-floor); the two stdout lines are the script's logger_error -c (coloured, with a space
    after the level), the others go to the log only (-q)."""
    floor = (state.get("faults") or {}).get("driver_floor")
    if not (installed and floor and opts["op"] in ("--full", "--run", "--upgrade")):
        return
    if not version_lt(meta["version"], floor):
        return
    stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    quiet = ["The driver version %s is not allowed in this device." % meta["version"],
             "Installation is stopped by interception rules"]
    loud = ["Version check does not match, please use %s or later." % floor,
            "Driver upgrade failed, details in /var/log/ascend_seclog/ascend_install.log"]
    for text in loud:
        print("[Driver] [%s] [ERROR] %s%s%s" % (stamp, RED, text, RESET))
    sys.stdout.flush()
    try:
        with open(st.path("/var/log/ascend_seclog/ascend_install.log"), "a") as handle:
            for text in quiet[:1] + loud[:1] + quiet[1:] + loud[1:]:
                handle.write("[Driver] [%s] [root] [ERROR] %s\n" % (stamp, text))
    except OSError:
        pass
    raise Fail(1)


def install_driver(meta, opts, state, log):
    path = opts["install_path"] or DEFAULT_PATH
    info_file = st.path("/etc/ascend_install.info")
    install_info = read_kv(info_file)
    version_file = st.path(path, "driver/version.info")
    installed = read_kv(version_file).get("Version")
    log("INFO", "Start time: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"))
    log("INFO", "LogFile: /var/log/ascend_seclog/ascend_install.log")
    log("INFO", "OperationLogFile: /var/log/ascend_seclog/operation.log")
    if installed:
        log("INFO", "base version is %s." % installed)
    log("WARNING", "Do not power off or restart the system during the installation/upgrade")
    username = opts["username"] or install_info.get("UserName") or "HwHiAiUser"
    usergroup = opts["usergroup"] or install_info.get("UserGroup") or "HwHiAiUser"
    # env_check.sh#L476-L487: a root user or group given without --install-for-all
    if opts["username"] == "root" and not opts["for_all"]:
        raise Fail(1, "[ERROR]ERR_NO:0x0091;ERR_DES:username not permission for root")
    if opts["usergroup"] == "root" and not opts["for_all"]:
        raise Fail(1, "[ERROR]ERR_NO:0x0091;ERR_DES:usergroup not permission for root")
    if not user_exists(username):
        raise Fail(1, "[ERROR]ERR_NO:0x0091;ERR_DES:%s not exists! Please add %s" % (username, username))
    if not group_exists(usergroup):
        raise Fail(1, "[ERROR]ERR_NO:0x0091;ERR_DES:%s group not exists! Please add %s group"
                   % (usergroup, usergroup))
    if not user_in_group(username, usergroup):
        raise Fail(1, "[ERROR]ERR_NO:0x0096;ERR_DES:%s not right! Please check the relatianship of %s and %s"
                   % (usergroup, username, usergroup))
    log("INFO", "set username and usergroup, %s:%s" % (username, usergroup))
    fw = read_kv(st.path(path, "firmware/version.info"))
    if fw.get("Version"):
        fw_ok = versions.version_in_ranges(fw["Version"], meta["compatible_version_fw"])
        drv_ok = versions.version_in_ranges(meta["version"], fw.get("compatible_version_drv", ""))
        if not relationship_check(log, opts, fw_ok and drv_ok, "driver required firmware version not match"):
            return 1
    if installed and opts["op"] != "--upgrade" and not opts["quiet"]:
        # driver_install.sh#L716-L729: asked only without --quiet; "n" stops with rc 0
        question = ("Driver package has been installed on the path %s, the version is %s, and the version of this "
                    "package is %s,do you want to continue? " % (path, installed, meta["version"]))
        if not confirm(log, opts["quiet"], question):
            log("INFO", "installation Stoped!")
            return 0
    anti_rollback(meta, opts, state, installed)
    busy = [c["chip_id"] for card in state["npus"] for c in card["chips"] if c.get("processes")]
    # a device held open (atlas-sim-fault device-held) is what check_boot_status finds too (common.sh
    # checkUserDocker/setHotResetFlag fail while /dev/davinci* is open)
    if (state.get("faults") or {}).get("device_held"):
        busy.append("held")
    if installed and state["running"].get("driver") and busy and not opts["force"]:
        # check_boot_status/exitInstallInfo, driver_install.sh#L415-L420: no hot reset while the devices are in use
        raise Fail(1, "[ERROR]%sThe davinci nodes are occupied by some processes, please stop processes and install "
                   "or uninstall again, details in : /var/log/ascend_seclog/ascend_install.log %s\n"
                   "[INFO]If you want to install or uninstall the driver forcibly, add the force parameter. "
                   "For details, see [--help]." % (RED, RESET))
    log("INFO", "driver install type: Direct")
    log("INFO", "upgradePercentage:10%")
    log("INFO", "upgradePercentage:30%")
    log("INFO", "upgradePercentage:40%")
    driver_dir = st.path(path, "driver")
    for sub in ("lib64/common", "lib64/driver", "script", "tools", "kernel"):
        os.makedirs(os.path.join(driver_dir, sub), exist_ok=True)
    if _take_installer_fault(state):
        update_kv(info_file, {"UserName": username, "UserGroup": usergroup, "Driver_Install_Type": "full",
                              "Driver_Install_Path_Param": path,
                              "Driver_Install_For_All": "yes" if opts["for_all"] else "no"},
                  remove=("Driver_Install_Status",))
        raise Fail(1, "[ERROR]Driver_ko_install failed, details in : /var/log/ascend_seclog/ascend_install.log\n"
                   "[ERROR]Driver package install failed, please retry after uninstall and reboot!")
    write_kv(version_file, [
        ("Version", meta["version"]), ("ascendhal_version", "7.35.23"), ("aicpu_version", "1.0"),
        ("tdt_version", "1.0"), ("log_version", "1.0"), ("prof_version", "2.0"), ("dvppkernels_version", "1.1"),
        ("tsfw_version", "1.0"), ("Innerversion", meta["innerversion"]),
        ("compatible_version", meta["compatible_version"]), ("compatible_version_fw", meta["compatible_version_fw"]),
        ("package_version", meta["version"])])
    _install_tools(path)
    _uninstall_script("driver", meta["version"], path, os.path.join(driver_dir, "script/uninstall.sh"))
    update_kv(info_file, {"UserName": username, "UserGroup": usergroup, "Driver_Install_Type": "full",
                          "Driver_Install_Path_Param": path,
                          "Driver_Install_For_All": "yes" if opts["for_all"] else "no",
                          "Driver_Install_Status": "complete"})
    log("INFO", "upgradePercentage:90%")
    log("INFO", "Waiting for device startup...")
    log("INFO", "Device startup success")
    log("INFO", "upgradePercentage:100%")
    # driver_install.sh#L278-L348: "takes effect immediately" on a first installation whose modules were not
    # loaded before (first_time_install_drv_flag=Y, PCIE_INSMOD_STATUS_BEFORE_INSTALL=n, no --force: the chips boot
    # with the new driver at once) or after a hot reset that worked; "Reboot needed" otherwise. The simulator has no
    # hot reset: an upgrade over a loaded driver needs the reboot (a reinstall of the running version does not).
    done = "upgraded" if opts["op"] == "--upgrade" and installed else "installed"
    running = state["running"].get("driver")
    first = not installed and not running and not opts["force"]
    immediate = first or (running == meta["version"] and not state.get("pending_reboot"))
    state["software"]["driver"] = meta["version"]
    if immediate:
        state["running"]["driver"] = meta["version"]
        text = "Driver package %s successfully! The new version takes effect immediately. " % done
        log("INFO", "%s%s%s" % (GREEN, text, RESET), plain=text.rstrip())
    else:
        state["pending_reboot"] = True
        state["boot_id"] = st.current_boot_id()
        head = "Driver package %s successfully! " % done
        tail = "Reboot needed for installation/upgrade to take effect! "
        log("INFO", "%s%s%s%s%s%s" % (GREEN, head, RESET, RED, tail, RESET), plain=(head + tail).rstrip())
    _history(state, "driver", opts["op"].lstrip("-"), installed, meta["version"], not immediate)
    log("INFO", "End time: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"))
    return 0


def uninstall_driver(path, state, log):
    driver_dir = st.path(path, "driver")
    if not os.path.exists(os.path.join(driver_dir, "version.info")):
        raise Fail(1, "[ERROR]ERR_NO:0x0080;ERR_DES:Driver package is not installed on the path %s." % path)
    version = read_kv(os.path.join(driver_dir, "version.info")).get("Version")
    log("INFO", "base version is %s." % version)
    shutil.rmtree(driver_dir, ignore_errors=True)
    for link in ("/usr/local/sbin/npu-smi", "/usr/local/bin/npu-smi", "/usr/local/bin/hccn_tool"):
        if os.path.islink(st.path(link)) or os.path.exists(st.path(link)):
            os.remove(st.path(link))
    update_kv(st.path("/etc/ascend_install.info"), {},
              remove=("Driver_Install_Type", "Driver_Install_Path_Param", "Driver_Install_For_All",
                      "Driver_Install_Status"))
    state["software"]["driver"] = None
    state["pending_reboot"] = True
    state["boot_id"] = st.current_boot_id()
    log("INFO", "Driver package uninstalled successfully! Reboot needed for uninstallation to take effect!")
    return 0


# --- firmware ---------------------------------------------------------------------------------------------

def install_firmware(meta, opts, state, log):
    if opts["username"] or opts["usergroup"]:
        raise Fail(1, "[ERROR]ERR_NO:0x0004;ERR_DES:The firmware package does not support --install-username "
                   "or --install-usergroup.")
    path = opts["install_path"] or DEFAULT_PATH
    log("INFO", "Start time: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"))
    log("INFO", "LogFile: /var/log/ascend_seclog/ascend_install.log")
    log("INFO", "OperationLogFile: /var/log/ascend_seclog/operation.log")
    version_file = st.path(path, "firmware/version.info")
    installed = read_kv(version_file).get("Version")
    if opts["op"] == "--upgrade" and not installed:
        raise Fail(1, "[ERROR]ERR_NO:0x0080;ERR_DES:Firmware package is not installed, please use --full.")
    log("WARNING", "Do not power off or restart the system during the installation/upgrade")
    drv = read_kv(st.path(path, "driver/version.info"))
    if drv.get("Version"):
        drv_ok = versions.version_in_ranges(drv["Version"], meta["compatible_version_drv"])
        fw_ok = versions.version_in_ranges(meta["version"], drv.get("compatible_version_fw", ""))
        if not relationship_check(log, opts, drv_ok and fw_ok, "firmware required driver version not match"):
            return 1
    chips = sum(len(c["chips"]) for c in state["npus"] if c.get("present", True))
    if installed == meta["version"] and state["running"].get("firmware") == meta["version"]:
        log("INFO", "The firmware version is the same as the installed version %s, no need to upgrade."
            % installed)
        log("INFO", "End time: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"))
        return 2
    log("INFO", "upgradePercentage: 0%")
    if _take_installer_fault(state):
        raise Fail(1, "[ERROR]The firmware of [%d] chips upgrade failed.\n"
                   "[ERROR]Firmware package install failed, please retry." % chips)
    write_kv(version_file, [("Version", meta["version"]), ("firmware_version", "1.0"),
                            ("package_version", meta["package_version"]),
                            ("compatible_version_drv", meta["compatible_version_drv"])])
    _uninstall_script("firmware", meta["version"], path, st.path(path, "firmware/script/uninstall.sh"))
    update_kv(st.path("/etc/ascend_install.info"),
              {"Firmware_Install_Type": "full", "Firmware_Install_Path_Param": path})
    log("INFO", "upgradePercentage: 100%")
    log("INFO", "The firmware of [%d] chips are successfully upgraded." % chips)
    state["software"]["firmware"] = meta["version"]
    state["pending_reboot"] = True
    state["boot_id"] = st.current_boot_id()
    log("INFO", "Firmware package installed successfully! Reboot now or after driver installation for the "
        "installation/upgrade to take effect.")
    _history(state, "firmware", opts["op"].lstrip("-"), installed, meta["version"], True)
    log("INFO", "End time: %s" % datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"))
    return 0


def uninstall_firmware(path, state, log):
    fw_dir = st.path(path, "firmware")
    if not os.path.exists(os.path.join(fw_dir, "version.info")):
        raise Fail(1, "[ERROR]ERR_NO:0x0080;ERR_DES:Firmware package is not installed on the path %s." % path)
    shutil.rmtree(fw_dir, ignore_errors=True)
    update_kv(st.path("/etc/ascend_install.info"), {},
              remove=("Firmware_Install_Type", "Firmware_Install_Path_Param"))
    state["software"]["firmware"] = None
    log("INFO", "Firmware package uninstalled successfully! The running firmware is kept on the chips.")
    return 0


# --- CANN -------------------------------------------------------------------------------------------------
# Two layouts (sources: tests/simulator/README.md, conformance table):
#  - up to 8.3: <path>/ascend-toolkit/<version> + ascend-toolkit/latest -> <version>; set_env.sh sets
#    ASCEND_TOOLKIT_HOME=<path>/ascend-toolkit/latest; kernels package Ascend-cann-kernels-910b_*, its version
#    under ascend-toolkit/<version>/opp_kernel.
#  - from 8.5 on (9.x alike): <path>/cann-<version> + <path>/cann -> cann-<version> + ascend-toolkit/latest -> ../cann;
#    <path>/ascend-toolkit/set_env.sh and cann-<version>/set_env.sh set ASCEND_TOOLKIT_HOME=ASCEND_HOME_PATH=
#    <path>/cann-<version> and ASCEND_TOOLKIT_LATEST_HOME=<path>/ascend-toolkit/latest; install record
#    <path>/cann/<arch>-linux/ascend_toolkit_install.info; ops package Ascend-cann-910b-ops_*.

def _cann_path(opts, log):
    pinned = read_kv(st.path("/etc/Ascend/ascend_cann_install.info")).get("Install_Path")
    if pinned:
        if opts["install_path"] and opts["install_path"] != pinned:
            log("WARNING", "--install-path=%s is ignored: CANN packages are installed in %s "
                "(/etc/Ascend/ascend_cann_install.info)." % (opts["install_path"], pinned))
        return pinned
    return opts["install_path"] or DEFAULT_PATH


def cann_generation_85(version):
    """True from CANN 8.5.0 on (the cann-<version> layout)."""
    return versions.compare(version, "8.5.0") >= 0


SET_ENV = """# set_env.sh of Ascend-cann-toolkit -- SIMULATED (ascendai.vllm test infrastructure)
export LD_LIBRARY_PATH={p}/driver/lib64:{p}/driver/lib64/common:{p}/driver/lib64/driver:${{LD_LIBRARY_PATH}}
export ASCEND_TOOLKIT_HOME={home}
{latest}export LD_LIBRARY_PATH=${{ASCEND_TOOLKIT_HOME}}/lib64/plugin/opskernel:${{LD_LIBRARY_PATH}}
export LD_LIBRARY_PATH=${{ASCEND_TOOLKIT_HOME}}/lib64:${{LD_LIBRARY_PATH}}
export LD_LIBRARY_PATH=${{ASCEND_TOOLKIT_HOME}}/lib64/plugin/nnengine:${{LD_LIBRARY_PATH}}
export PYTHONPATH=${{ASCEND_TOOLKIT_HOME}}/python/site-packages:${{PYTHONPATH}}
export PYTHONPATH=${{ASCEND_TOOLKIT_HOME}}/opp/built-in/op_impl/ai_core/tbe:${{PYTHONPATH}}
export PATH=${{ASCEND_TOOLKIT_HOME}}/bin:${{ASCEND_TOOLKIT_HOME}}/compiler/ccec_compiler/bin:${{PATH}}
export ASCEND_AICPU_PATH=${{ASCEND_TOOLKIT_HOME}}
export ASCEND_OPP_PATH=${{ASCEND_TOOLKIT_HOME}}/opp
export TOOLCHAIN_HOME=${{ASCEND_TOOLKIT_HOME}}/toolkit
export ASCEND_HOME_PATH=${{ASCEND_TOOLKIT_HOME}}
"""

# nnal/atb/set_env.sh as NNAL installs it: ATB's scripts/set_env.sh with ${atb_path} -> ${atb_path}/latest/atb
# (hicann/ascend-transformer-boost scripts/set_env.sh and build.sh#L517). --cxx_abi=0|1 wins; without it the ABI
# of the torch that python3 imports, 1 when python3 has no torch.
ATB_SET_ENV = """#!/bin/bash
# set_env.sh of Ascend-cann-nnal (ATB) -- SIMULATED (ascendai.vllm test infrastructure)
function get_cxx_abi_option()
{
    cxx_abi=""
    until [[ -z "$1" ]]
    do {
        case "$1" in
        "--cxx_abi=1")
            cxx_abi=1
            ;;
        "--cxx_abi=0")
            cxx_abi=0
            ;;
        esac
        shift
    }
    done
    if [[ "$cxx_abi" == "" ]]; then
        res=$(python3 -c "import torch" &> /dev/null || echo "torch_not_exist")
        if [[ "$res" == "torch_not_exist" ]]; then
            cxx_abi=1
        else
            if [[ $(python3 -c 'import torch; print(torch.compiled_with_cxx11_abi())') == "True" ]]; then
                cxx_abi=1
            else
                cxx_abi=0
            fi
        fi
    fi
}

set_env_path="${BASH_SOURCE[0]}"
if [[ -f "$set_env_path" ]] && [[ "$set_env_path" =~ (^|/)set_env\\.sh$ ]];then
    atb_path=$(cd $(dirname $set_env_path); pwd)
    get_cxx_abi_option "$@"
    export ATB_HOME_PATH="${atb_path}/latest/atb/cxx_abi_${cxx_abi}"
    export LD_LIBRARY_PATH=$ATB_HOME_PATH/lib:$ATB_HOME_PATH/examples:$ATB_HOME_PATH/tests/atbopstest:$LD_LIBRARY_PATH
    export PATH=$ATB_HOME_PATH/bin:$PATH
else
    echo "There is no 'set_env.sh' to import"
fi
"""


def _toolkit_versions(path):
    """Installed toolkit versions, both layouts: ascend-toolkit/<version> and cann-<version> directories."""
    found = []
    base = st.path(path, "ascend-toolkit")
    if os.path.isdir(base):
        for name in sorted(os.listdir(base)):
            if name != "latest" and not os.path.islink(os.path.join(base, name)) and \
                    os.path.isdir(os.path.join(base, name)):
                found.append(name)
    root = st.path(path)
    if os.path.isdir(root):
        for name in sorted(os.listdir(root)):
            full = os.path.join(root, name)
            if name.startswith("cann-") and os.path.isdir(full) and not os.path.islink(full):
                found.append(name[len("cann-"):])
    return found


def _toolkit_root(path, version):
    if cann_generation_85(version):
        return st.path(path, "cann-%s" % version)
    return st.path(path, "ascend-toolkit", version)


def _toolkit_info(path, version, arch):
    return os.path.join(_toolkit_root(path, version), "%s-linux" % arch, "ascend_toolkit_install.info")


def _remove_toolkit(path, version):
    shutil.rmtree(_toolkit_root(path, version), ignore_errors=True)
    if cann_generation_85(version):
        link = st.path(path, "cann")
        if os.path.islink(link) and os.readlink(link) == "cann-%s" % version:
            os.remove(link)


def _summary(meta, path):
    return ("\n\n===========\n= Summary =\n===========\n\n"
            "Driver:   %s\n"
            "Toolkit:  Ascend-cann-toolkit_%s_linux-%s install success, installed in %s.\n\n"
            "Please make sure that the environment variables have been configured.\n"
            "-  To take effect for all users, you can add \"source %s/ascend-toolkit/set_env.sh\" to /etc/profile.\n"
            "-  To take effect for current user, you can exec command below: source %s/ascend-toolkit/set_env.sh "
            "or add \"source %s/ascend-toolkit/set_env.sh\" to ~/.bashrc."
            % ("Installed in %s/driver." % path if os.path.exists(st.path(path, "driver/version.info"))
               else "Not installed.", meta["version"], meta["arch"], path, path, path, path))


def install_toolkit(meta, opts, state, log):
    path = _cann_path(opts, log)
    version, arch = meta["version"], meta["arch"]
    log("INFO", "LogFile:/var/log/ascend_seclog/ascend_toolkit_install.log")
    installed = _toolkit_versions(path)
    if opts["op"] == "--upgrade" and not installed:
        raise Fail(1, "[ERROR] Ascend-cann-toolkit is not installed in %s, upgrade failed; use --install." % path)
    if version in installed and os.path.exists(_toolkit_info(path, version, arch)) and opts["op"] != "--upgrade":
        where = ("%s/cann-%s" % (path, version)) if cann_generation_85(version) else \
            ("%s/ascend-toolkit/%s" % (path, version))
        raise Fail(1, "[ERROR] Ascend-cann-toolkit_%s is already installed in %s, "
                   "uninstall it first if you want to reinstall it." % (version, where))
    drv = read_kv(st.path(path, "driver/version.info"))
    if drv.get("Innerversion") and not versions.family_listed(drv["Innerversion"], meta["compatible_version"]):
        raise Fail(1, "[ERROR] The installed driver %s (%s) is not compatible with Ascend-cann-toolkit_%s, "
                   "compatible driver versions: %s"
                   % (drv.get("Version"), drv["Innerversion"], version, meta["compatible_version"]))
    log("INFO", "%s start" % ("upgrade" if opts["op"] == "--upgrade" else "install"))
    log("INFO", "The installation path is %s." % path)
    inner = "%s-linux.%s.run" % (meta["inner_build"], arch)
    for sub in ("runtime", "compiler", "opp", "toolkit", "aoe", "ncs"):
        log("INFO", "install package CANN-%s-%s start" % (sub, inner))
        if sub == "opp" and _take_installer_fault(state):
            raise Fail(1, "[ERROR] CANN-opp-%s --full --quiet --nox11 install failed\n"
                       "[ERROR] Ascend-cann-toolkit_%s_linux-%s install failed" % (inner, version, arch))
        log("INFO", "CANN-%s-%s --full --quiet --nox11%s install success"
            % (sub, inner, " --install-for-all" if opts["for_all"] else ""))
    if opts["op"] == "--upgrade":
        for old in installed:
            if old != version:
                _remove_toolkit(path, old)
    new = cann_generation_85(version)
    root = _toolkit_root(path, version)
    for sub in ("%s-linux/lib64" % arch, "%s-linux/include" % arch, "%s-linux/bin" % arch, "opp/built-in",
                "python/site-packages", "compiler/ccec_compiler/bin", "runtime", "toolkit", "tools"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    for link in ("lib64", "include", "bin"):
        symlink("%s-linux/%s" % (arch, link), os.path.join(root, link))
    home = ("%s/cann-%s" % (path, version)) if new else ("%s/ascend-toolkit/latest" % path)
    write_kv(_toolkit_info(path, version, arch), [
        ("package_name", "Ascend-cann-toolkit"), ("version", version), ("innerversion", meta["innerversion"]),
        ("compatible_version", meta["compatible_version"]), ("arch", arch), ("os", "linux"),
        ("path", ("%s/cann-%s/%s-linux" % (path, version, arch)) if new
         else "%s/ascend-toolkit/%s/%s-linux" % (path, version, arch))])
    _uninstall_script("toolkit", version, path, os.path.join(root, "%s-linux/script/uninstall.sh" % arch))
    set_env = SET_ENV.format(p=path, home=home, latest=(
        "export ASCEND_TOOLKIT_LATEST_HOME=%s/ascend-toolkit/latest\n" % path) if new else "")
    write_text(os.path.join(root, "set_env.sh"), set_env)
    write_text(st.path(path, "ascend-toolkit/set_env.sh"), set_env)
    if new:
        symlink("cann-%s" % version, st.path(path, "cann"))
        symlink("../cann", st.path(path, "ascend-toolkit/latest"))
    else:
        symlink(version, st.path(path, "ascend-toolkit/latest"))
    if not os.path.exists(st.path("/etc/Ascend/ascend_cann_install.info")):
        write_kv(st.path("/etc/Ascend/ascend_cann_install.info"), [("Install_Path", path)])
    state["software"]["cann"] = version
    print(_summary(meta, path))
    return 0


def uninstall_toolkit(path, version, state, log):
    root = _toolkit_root(path, version)
    if not os.path.isdir(root):
        raise Fail(1, "[ERROR] Ascend-cann-toolkit_%s is not installed in %s." % (version, path))
    _remove_toolkit(path, version)
    left = _toolkit_versions(path)
    latest = st.path(path, "ascend-toolkit/latest")
    if left:
        if cann_generation_85(left[-1]):
            symlink("cann-%s" % left[-1], st.path(path, "cann"))
            symlink("../cann", latest)
        else:
            symlink(left[-1], latest)
    else:
        shutil.rmtree(st.path(path, "ascend-toolkit"), ignore_errors=True)
        if os.path.exists(st.path("/etc/Ascend/ascend_cann_install.info")):
            os.remove(st.path("/etc/Ascend/ascend_cann_install.info"))
    state["software"]["cann"] = left[-1] if left else None
    log("INFO", "Ascend-cann-toolkit_%s uninstall success" % version)
    return 0


def _kernels_name(version):
    return "Ascend-cann-910b-ops" if cann_generation_85(version) else "Ascend-cann-kernels-910b"


def install_kernels(meta, opts, state, log):
    path = _cann_path(opts, log)
    version = meta["version"]
    name = _kernels_name(version)
    log("INFO", "LogFile:/var/log/ascend_seclog/ascend_kernels_install.log")
    if not os.path.exists(_toolkit_info(path, version, meta["arch"])):
        raise Fail(1, "[ERROR] Ascend-cann-toolkit_%s is not installed in %s, install the toolkit "
                   "of the same version first." % (version, path))
    target = os.path.join(_toolkit_root(path, version), "opp_kernel")
    record = _kernels_record(path, version, meta["arch"])
    if os.path.exists(record) and opts["op"] != "--upgrade":
        raise Fail(1, "[ERROR] %s_%s is already installed in %s." % (name, version, os.path.dirname(record)))
    log("INFO", "install start")
    if _take_installer_fault(state):
        raise Fail(1, "[ERROR] %s_%s install failed" % (name, version))
    os.makedirs(os.path.join(_toolkit_root(path, version),
                             "opp/built-in/op_impl/ai_core/tbe/kernel/ascend910b"), exist_ok=True)
    if cann_generation_85(version):
        # hicann/ops-math docs/zh/install/quick_install.md: <path>/cann/<arch>-linux/ascend_ops_install.info; the
        # keys follow ascend_toolkit_install.info (package_name and version as a public CI reads them)
        tree = "%s/cann-%s/%s-linux" % (path, version, meta["arch"])
        write_kv(record, [("package_name", name), ("version", version), ("innerversion", meta["innerversion"]),
                          ("arch", meta["arch"]), ("os", "linux"), ("path", tree)])
    else:
        write_kv(record, [("Version", version), ("version_dir", version), ("soc_version", "ascend910b")])
    _uninstall_script("kernels", version, path, os.path.join(target, "script/uninstall.sh"))
    log("INFO", "%s_%s_linux-%s install success" % (name, version, meta["arch"]))
    return 0


def _kernels_record(path, version, arch):
    """Where the kernels/ops package records its version: opp_kernel/version.info up to 8.3, from 8.5 on
    <arch>-linux/ascend_ops_install.info beside the toolkit's record."""
    if cann_generation_85(version):
        return os.path.join(_toolkit_root(path, version), "%s-linux" % arch, "ascend_ops_install.info")
    return os.path.join(_toolkit_root(path, version), "opp_kernel", "version.info")


def uninstall_kernels(path, version, state, log):
    target = os.path.join(_toolkit_root(path, version), "opp_kernel")
    if not os.path.isdir(target):
        raise Fail(1, "[ERROR] %s_%s is not installed." % (_kernels_name(version), version))
    shutil.rmtree(target)
    for arch in ("aarch64", "x86_64"):
        record = _kernels_record(path, version, arch)
        if cann_generation_85(version) and os.path.exists(record):
            os.remove(record)
    log("INFO", "%s_%s uninstall success" % (_kernels_name(version), version))
    return 0


def _sourced_toolkit_version():
    home = os.environ.get("ASCEND_TOOLKIT_HOME")
    if not home:
        return None
    real = os.path.realpath(st.path(home))
    if not os.path.isdir(real):
        return None
    name = os.path.basename(real)
    return name[len("cann-"):] if name.startswith("cann-") else name


def _nnal_version_info(version, arch):
    """nnal/atb/<version>/version.info as NNAL writes it: indented ``key : value`` lines
    (https://github.com/vllm-project/vllm-ascend/issues/451); the build number and commit are made up."""
    return ("    Ascend-cann-atb : %s\n    Ascend-cann-atb Version : %s.B150\n    Platform : %s\n"
            "    branch : br_release_cann_%s_20250101\n    commit id : 0000000000000000000000000000000000000000\n"
            % (version, version, arch, version))


def install_nnal(meta, opts, state, log):
    path = _cann_path(opts, log)
    version = meta["version"]
    log("INFO", "LogFile:/var/log/ascend_seclog/ascend_nnal_install.log")
    sourced = _sourced_toolkit_version()
    if not sourced:
        raise Fail(1, "[ERROR] Please source the CANN toolkit environment first: "
                   "source %s/ascend-toolkit/set_env.sh" % path)
    if sourced != version:
        raise Fail(1, "[ERROR] Ascend-cann-nnal_%s requires Ascend-cann-toolkit_%s, the sourced toolkit is %s."
                   % (version, version, sourced))
    base = st.path(path, "nnal/atb")
    if os.path.exists(os.path.join(base, version, "version.info")) and opts["op"] != "--upgrade":
        raise Fail(1, "[ERROR] Ascend-cann-nnal_%s is already installed in %s/nnal/atb/%s." % (version, path, version))
    log("INFO", "install start")
    if _take_installer_fault(state):
        raise Fail(1, "[ERROR] Ascend-cann-nnal_%s install failed" % version)
    if opts["op"] == "--upgrade" and os.path.isdir(base):
        for old in os.listdir(base):
            if old not in ("latest", "set_env.sh", version) and os.path.isdir(os.path.join(base, old)):
                shutil.rmtree(os.path.join(base, old))
    for abi in ("0", "1"):
        for sub in ("lib", "include", "bin"):
            os.makedirs(os.path.join(base, version, "atb/cxx_abi_%s" % abi, sub), exist_ok=True)
    write_text(os.path.join(base, version, "version.info"), _nnal_version_info(version, meta["arch"]))
    _uninstall_script("nnal", version, path, os.path.join(base, version, "atb/script/uninstall.sh"))
    symlink(version, os.path.join(base, "latest"))
    write_text(os.path.join(base, "set_env.sh"), ATB_SET_ENV)
    log("INFO", "Ascend-cann-nnal_%s install success, installed in %s/nnal." % (version, path))
    return 0


def uninstall_nnal(path, version, state, log):
    base = st.path(path, "nnal/atb")
    if not os.path.isdir(os.path.join(base, version)):
        raise Fail(1, "[ERROR] Ascend-cann-nnal_%s is not installed." % version)
    shutil.rmtree(os.path.join(base, version))
    if not [d for d in os.listdir(base) if d not in ("latest", "set_env.sh")]:
        shutil.rmtree(st.path(path, "nnal"), ignore_errors=True)
    log("INFO", "Ascend-cann-nnal_%s uninstall success" % version)
    return 0


INSTALL = {"driver": install_driver, "firmware": install_firmware, "toolkit": install_toolkit,
           "kernels": install_kernels, "nnal": install_nnal}


def uninstall(kind, version, path, state, log):
    if kind == "driver":
        return uninstall_driver(path, state, log)
    if kind == "firmware":
        return uninstall_firmware(path, state, log)
    return {"toolkit": uninstall_toolkit, "kernels": uninstall_kernels, "nnal": uninstall_nnal}[kind](
        path, version, state, log)


def _root_ok():
    return os.geteuid() == 0 or bool(os.environ.get("ATLAS_SIM_ROOT"))


def _run_locked(func, kind, quiet):
    log = Logger(kind, quiet)
    with st.locked():
        state = st.refresh(st.load())
        try:
            rc = func(state, log)
        except Fail as failure:
            if failure.message:
                for line in failure.message.splitlines():
                    if line.startswith("[ERROR]") or line.startswith("[INFO]"):
                        level, _, text = line[1:].partition("]")
                        log(level, text.lstrip() if kind not in ("driver", "firmware") else text)
                    else:
                        print(line)
            rc = failure.rc
        st.save(state)
    return rc


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if "--" in argv:
        head, args = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    else:
        head, args = argv, []
    head_opts = dict(zip(head[::2], head[1::2]))
    if "--uninstall-kind" in head_opts:   # installed uninstall.sh
        kind = head_opts["--uninstall-kind"]
        quiet = "--quiet" in args or "-q" in args
        return _run_locked(lambda state, log: uninstall(kind, head_opts["--uninstall-version"],
                                                        head_opts["--uninstall-path"], state, log), kind, quiet)
    with open(head_opts["--package-meta"]) as handle:
        meta = json.load(handle)
    kind = meta["kind"]
    try:
        opts = parse_args(args)
    except Fail as failure:
        print(failure.message)
        return failure.rc
    if opts["op"] is None:
        print("Please input the operation: --full, --install, --upgrade or --uninstall. "
              "Try './%s --help' for more information." % meta["filename"])
        return 1
    if not _root_ok():
        print("[%s] [ERROR]ERR_NO:0x0093;ERR_DES:do not have root permission, operation failed, please use root "
              "permission!" % TAGS[kind])
        return 1
    if opts["op"] == "--uninstall":
        path = opts["install_path"] or DEFAULT_PATH
        return _run_locked(lambda state, log: uninstall(kind, meta["version"], path, state, log), kind,
                           opts["quiet"])
    return _run_locked(lambda state, log: INSTALL[kind](meta, opts, state, log), kind, opts["quiet"])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
        print(SIMULATED_NOTE)
    sys.exit(main())
