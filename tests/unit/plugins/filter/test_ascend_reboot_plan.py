"""The ascend_reboot_plan filter: reboot on the installers' own word (the real install log of llm-action's 910
guide, tests/unit/fixtures/ascend-install), on a reboot still owed, or on a loaded driver other than the one on
disk; never on a failing npu-smi alone."""

from __future__ import annotations

import os

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.ascend_reboot_plan import FilterModule

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
    with pytest.raises(AnsibleFilterError, match=rf"^ascend_reboot_plan: outputs must map driver/firmware to the "
                                                 rf"installer's stdout, got {kind}$"):
        ascend_reboot_plan(outputs)
