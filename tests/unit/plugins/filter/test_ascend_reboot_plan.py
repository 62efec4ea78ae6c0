"""The ascend_reboot_plan filter: reboot on the installers' own word (the real install log of llm-action's 910
guide, tests/unit/fixtures/ascend-install), on a reboot still owed, or on a loaded driver other than the one on
disk; never on a failing npu-smi alone."""

from __future__ import annotations

import base64
import os
import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.ascend_reboot_plan import FilterModule
from ansible_collections.ascendai.vllm.plugins.module_utils import _ascend_driver_plan as plan_mod

ascend_reboot_plan = FilterModule().filters()["ascend_reboot_plan"]

LOG = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "ascend-install",
                   "driver-firmware-toolkit-run-install-logs-910-llm-action.txt")
DRIVER_SAYS = "Driver package installed successfully! The new version takes effect immediately."
FIRMWARE_SAYS = ("Firmware package installed successfully! Reboot now or after driver installation for the "
                 "installation/upgrade to take effect.")


def installer_output(marker):
    """The lines of one installer run in the captured log, from its command line to the next blank line."""
    with open(LOG, encoding="utf-8") as handle:
        text = handle.read()
    start = text.index(marker)
    return text[start:text.index("\n\n", start)]


def test_driver_that_took_effect_needs_no_reboot():
    plan = ascend_reboot_plan({"driver": installer_output("--install-path=/usr/local/Ascend\n")})
    assert plan == {"reboot": False, "reasons": [], "said": {"driver": DRIVER_SAYS}, "probe_error": ""}


def test_firmware_installer_asks_for_a_reboot():
    outputs = {"driver": installer_output("--install-path=/usr/local/Ascend\n"),
               "firmware": installer_output("Uncompressing ASCEND-HDK-910-NPU FIRMWARE")}
    plan = ascend_reboot_plan(outputs)
    assert plan["reboot"] is True
    assert plan["said"] == {"driver": DRIVER_SAYS, "firmware": FIRMWARE_SAYS}
    assert plan["reasons"] == [f"the firmware installer says: {FIRMWARE_SAYS}"]


def test_coloured_driver_line_asking_for_a_reboot():
    line = "Driver package installed successfully! Reboot needed for installation/upgrade to take effect!"
    out = f"\x1b[1;33m[Driver] [2025-03-01 10:00:00] [WARNING]{line}\x1b[0m\n"
    plan = ascend_reboot_plan({"driver": out})
    assert plan["reboot"] is True and plan["said"] == {"driver": line}


def test_failing_npu_smi_is_reported_not_a_reason():
    probe = {"failed": True, "kind": "dcmi_init", "msg": "dcmi module initialize failed. ret is -8005"}
    plan = ascend_reboot_plan({}, probe=probe, disk_driver="25.2.0")
    assert plan["reboot"] is False and plan["reasons"] == []
    assert plan["probe_error"] == "npu-smi fails (dcmi_init): dcmi module initialize failed. ret is -8005"


def test_loaded_driver_other_than_on_disk_and_owed_reboot_are_reasons():
    plan = ascend_reboot_plan({}, owed=["firmware 7.7.0.1.231 installed"], probe={"driver_version": "24.1.rc3"},
                              disk_driver="25.2.0")
    assert plan["reboot"] is True
    assert plan["reasons"] == ["still owed from an earlier run (firmware 7.7.0.1.231 installed)",
                               "npu-smi reports the loaded driver 24.1.rc3, the driver on disk is 25.2.0"]
    same = ascend_reboot_plan({}, probe={"driver_version": "25.2.0"}, disk_driver="25.2.0")
    assert same["reboot"] is False


@pytest.mark.parametrize("outputs,kind", [(["driver output"], "list"), ("driver output", "str"), (7, "int")])
def test_outputs_that_are_not_a_mapping_are_refused(outputs, kind):
    # the message names the value as well as its type, and what to pass
    with pytest.raises(AnsibleFilterError, match=rf"^ascend_reboot_plan: outputs must map driver/firmware to the "
                                                 rf"installer's stdout, got {kind} {re.escape(repr(outputs))}; pass "
                                                 r"\{'driver': <the driver installer's stdout>\} \(or firmware\)$"):
        ascend_reboot_plan(outputs)


def test_a_long_value_is_cut_in_the_message():
    outputs = ["x" * 1000]
    with pytest.raises(AnsibleFilterError) as err:
        ascend_reboot_plan(outputs)
    message = str(err.value)
    assert "got list ['xxx" in message and "x" * 300 not in message
    assert len(message) < 400


@pytest.mark.parametrize("args,kwargs,needle", [
    ([{"driver": 7}], {}, r"outputs\['driver'\]=7 is not the installer's stdout \(a string\); pass the stdout of the "
                          r"registered run, e.g\. \{'driver': run\.stdout\}"),
    ([{"driver": ["line 1", "line 2"]}], {}, r"outputs\['driver'\]=\['line 1', 'line 2'\] is not the installer's "
                                             r"stdout"),
    ([{"drivers": "Reboot needed"}], {}, r"outputs has unknown kinds \['drivers'\]; use driver and/or firmware"),
    ([{}], {"owed": "firmware 7.7.0 installed"}, r"owed='firmware 7.7.0 installed' must be a list of lines \(strings\)"
                                                 r"; pass the lines of the reboot marker, e\.g\. "
                                                 r"\(content \| b64decode\)\.splitlines\(\)"),
    ([{}], {"owed": 7}, r"owed=7 must be a list of lines"),
    ([{}], {"owed": ["ok", 7]}, r"owed=\['ok', 7\] must be a list of lines"),
    ([{}], {"probe": "npu-smi failed"}, r"probe='npu-smi failed' must be the registered result of "
                                        r"ascendai\.vllm\.npu_info \(a mapping\), or \{\} when it was skipped"),
    ([{}], {"probe": ["x"]}, r"probe=\['x'\] must be the registered result"),
    ([{}], {"probe": {"driver_version": 25.2}}, r"probe\['driver_version'\]=25\.2 is not a version string"),
    ([{}], {"disk_driver": 25.2}, r"disk_driver=25\.2 is not a version string; pass the Version of "
                                  r"driver/version\.info as a string, e\.g\. '25\.2\.0'"),
    ([{}], {"disk_driver": {"version": "25.2.0"}}, r"disk_driver=\{'version': '25\.2\.0'\} is not a version string"),
])
def test_inputs_that_are_not_what_the_role_registers_are_named(args, kwargs, needle):
    with pytest.raises(AnsibleFilterError, match=rf"^ascend_reboot_plan: {needle}"):
        ascend_reboot_plan(*args, **kwargs)


def test_empty_inputs_stay_empty():
    # what the role passes when nothing ran, nothing is owed and npu_info was skipped
    plan = ascend_reboot_plan({}, owed=[], probe={}, disk_driver="")
    assert plan == {"reboot": False, "reasons": [], "said": {}, "probe_error": ""}
    assert ascend_reboot_plan(None, owed=None, probe=None, disk_driver=None)["reboot"] is False
    assert ascend_reboot_plan({"driver": None})["said"] == {"driver": ""}


# --- as roles/ascend_driver/tasks/reboot.yml passes them: the registered slurp of the marker, the probe's result ----
# The driver's lines as drvColorEcho prints them (echo -e with colours),
# https://github.com/verylucky01/driver/blob/e29d066/scripts/package/custom/driver/common/scripts/driver_install.sh#L327-L347
UPGRADE_REBOOT = ("[Driver] [2025-03-31 09:51:36] [INFO]\x1b[32mDriver package upgraded successfully! \x1b[0m"
                  "\x1b[31mReboot needed for installation/upgrade to take effect! \x1b[0m\n")
KO_ABORT = ("[Driver] [2025-03-31 09:51:36] [INFO]\x1b[32mDriver package installed finished! \x1b[0m\n"
            "[Driver] [2025-03-31 09:51:36] [WARNING]\x1b[33mKernel modules can not be removed, reboot needed for "
            "installation/upgrade to take effect! \x1b[0m\n")
DCMI_8005 = {"failed": True, "kind": "dcmi_init", "msg": "npu-smi info: dcmi module initialize failed. ret is -8005"}
NO_MARKER = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
SKIPPED_PROBE = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}


def marker(text):
    """The registered slurp of the reboot marker."""
    return {"content": base64.b64encode(text.encode()).decode(), "encoding": "base64", "source": "/run/x",
            "changed": False}


def decide(said, probe=None, owed=None, disk_driver="25.2.0"):
    return ascend_reboot_plan(said, owed=NO_MARKER if owed is None else owed,
                              probe=SKIPPED_PROBE if probe is None else probe, disk_driver=disk_driver)


def test_fresh_driver_that_takes_effect_immediately_needs_no_reboot_even_when_npu_smi_fails():
    result = decide({"driver": installer_output("--install-path=/usr/local/Ascend\n")}, probe=DCMI_8005)
    assert result["reboot"] is False, result
    assert result["said"]["driver"] == DRIVER_SAYS
    assert "-8005" in result["probe_error"]


def test_a_failing_dcmi_init_alone_is_no_reason():
    held = {"failed": True, "kind": "dcmi_init", "msg": "dcmi module initialize failed. ret is -8020"}
    assert decide({}, probe=held)["reboot"] is False
    assert decide({}, probe=DCMI_8005)["reboot"] is False


def test_firmware_always_asks_for_the_reboot_even_when_npu_smi_fails():
    result = decide({"firmware": installer_output("Uncompressing ASCEND-HDK-910-NPU FIRMWARE")}, probe=DCMI_8005)
    assert result["reboot"] is True
    assert result["reasons"] == [f"the firmware installer says: {FIRMWARE_SAYS}"]


@pytest.mark.parametrize("output", [UPGRADE_REBOOT, KO_ABORT])
def test_driver_upgrade_that_says_reboot_needed(output):
    result = decide({"driver": output})
    assert result["reboot"] is True
    assert "reboot needed for installation/upgrade" in result["reasons"][0].lower()
    assert "\x1b" not in result["reasons"][0]


def test_an_owed_request_read_back_from_the_marker_and_a_loaded_driver_other_than_the_disk_one():
    owed = "firmware 7.7.0.1.231: Firmware package installed successfully! Reboot now or after driver installation\n"
    result = decide({}, probe=DCMI_8005, owed=marker(owed))
    assert result["reboot"] is True
    assert result["reasons"] == [f"still owed from an earlier run ({owed.strip()})"]
    assert decide({}, probe=DCMI_8005, owed=marker(""))["reboot"] is False
    stale = {"failed": False, "driver_version": "24.1.rc3"}
    result = decide({}, probe=stale, disk_driver="25.2.0")
    assert result["reboot"] is True
    assert result["reasons"] == ["npu-smi reports the loaded driver 24.1.rc3, the driver on disk is 25.2.0"]
    assert decide({}, probe={"failed": False, "driver_version": "25.2.0"})["reboot"] is False


def test_a_skipped_probe_is_no_probe_and_a_marker_that_is_not_base64_is_named():
    # check mode with installers to run skips the probe: a skipped result carries no driver_version
    assert decide({}, probe=dict(SKIPPED_PROBE, driver_version="24.1.rc3"))["reboot"] is False
    with pytest.raises(AnsibleFilterError, match=r"owed=.*not a slurp result of base64 UTF-8 text"):
        decide({}, owed={"content": "%%%", "encoding": "base64"})


def test_installer_word_without_prefix_and_colours():
    assert plan_mod.installer_word(UPGRADE_REBOOT) == (
        True, "Driver package upgraded successfully! Reboot needed for installation/upgrade to take effect!")
    assert plan_mod.installer_word("") == (False, "")
