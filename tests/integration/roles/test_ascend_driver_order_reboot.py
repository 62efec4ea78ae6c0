"""ascend_driver: Huawei's installer order (upgrade: firmware first) and the reboot decision (the installers' word).

Renders the role's own expressions (tasks/inspect.yml, tasks/reboot.yml) with the collection's filters, fed with the
real installer output of llm-action's 910 install log (tests/unit/fixtures/ascend-install) and the driver's own
completion messages (https://github.com/verylucky01/driver/blob/e29d066/scripts/package/custom/driver/common/scripts/
driver_install.sh#L278-L348).
"""

from __future__ import annotations

import os

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.ascendai.vllm.plugins.filter import ascend_install_sequence as seq_mod
from ansible_collections.ascendai.vllm.plugins.filter import ascend_reboot_plan as plan_mod
from ansible_collections.ascendai.vllm.plugins.module_utils import ascend_driver_plan as plan

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "unit", "fixtures")
TASKS = os.path.join(ROOT, "roles", "ascend_driver", "tasks")
CAPTURE = os.path.join(FIXTURES, "ascend-install", "driver-firmware-toolkit-run-install-logs-910-llm-action.txt")


def capture_blocks():
    """The driver and firmware install outputs of the capture: {'driver': text, 'firmware': text}."""
    out, kind = {}, None
    with open(CAPTURE) as handle:
        for line in handle:
            if line.startswith("$ ./Ascend-hdk-910-npu-driver"):
                kind = "driver"
            elif line.startswith("$ ./Ascend-hdk-910-npu-firmware") and "--full" in line:
                kind = "firmware"
            elif line.startswith("$ "):
                kind = None
            elif kind:
                out[kind] = out.get(kind, "") + line
    return out


# The driver's lines as drvColorEcho prints them (echo -e with colours), driver_install.sh#L327-L347.
UPGRADE_REBOOT = ("[Driver] [2025-03-31 09:51:36] [INFO]\x1b[32mDriver package upgraded successfully! \x1b[0m"
                  "\x1b[31mReboot needed for installation/upgrade to take effect! \x1b[0m\n")
KO_ABORT = ("[Driver] [2025-03-31 09:51:36] [INFO]\x1b[32mDriver package installed finished! \x1b[0m\n"
            "[Driver] [2025-03-31 09:51:36] [WARNING]\x1b[33mKernel modules can not be removed, reboot needed for "
            "installation/upgrade to take effect! \x1b[0m\n")
DCMI_8005 = {"failed": True, "kind": "dcmi_init", "msg": "npu-smi info: dcmi module initialize failed. ret is -8005"}


def env():
    e = jinja2.Environment(undefined=jinja2.StrictUndefined, extensions=["jinja2.ext.do"])
    e.filters["ascendai.vllm.ascend_install_sequence"] = seq_mod.ascend_install_sequence
    e.filters["ascendai.vllm.ascend_reboot_plan"] = plan_mod.ascend_reboot_plan
    e.filters["dict2items"] = lambda d: [{"key": k, "value": v} for k, v in d.items()]
    e.filters["b64decode"] = lambda s: s
    e.tests["skipped"] = lambda r: bool(isinstance(r, dict) and r.get("skipped"))
    return e


def task(filename, name):
    with open(os.path.join(TASKS, filename)) as handle:
        return [t for t in yaml.safe_load(handle) if t["name"].startswith(name)][0]


def render(expr, **variables):
    return env().from_string(expr).render(**variables).strip()


def todo(order, driver_installed, actions):
    """tasks/inspect.yml's list of installers to run, rendered as written."""
    t = task("inspect.yml", "Note what will be done")
    read = [{"kind": k, "installed": {"version": driver_installed if k == "driver" else "7.5.0.1.129"}}
            for k in order]
    kept = [{"kind": k, "installed": {"version": driver_installed if k == "driver" else None}}
            for k in ("driver", "firmware") if k not in order]
    variables = {"ascend_driver_order": order, "_ascend_driver_read": {"results": read},
                 "_ascend_driver_kept": {"results": kept},
                 "ascend_driver_packages": {k: {"action": a} for k, a in actions.items()}}
    for key, expr in t.get("vars", {}).items():
        variables[key] = render(expr, **variables)
    return yaml.safe_load(render(t["ansible.builtin.set_fact"]["_ascend_driver_todo"], **variables))


def test_upgrade_runs_firmware_then_driver():
    # Huawei: an overwrite installation or upgrade goes firmware > driver (mindie_instg_0006, instg_0005)
    assert todo(["driver", "firmware"], "24.1.rc3", {"driver": "upgrade", "firmware": "upgrade"}) == [
        "firmware", "driver"]


def test_first_install_runs_driver_then_firmware():
    assert todo(["driver", "firmware"], None, {"driver": "full", "firmware": "full"}) == ["driver", "firmware"]
    assert todo(["firmware", "driver"], None, {"driver": "full", "firmware": "full"}) == ["firmware", "driver"]
    assert todo(["driver", "firmware"], "25.2.0", {"driver": "none", "firmware": "upgrade"}) == ["firmware"]
    assert todo(["firmware"], "24.1.rc3", {"firmware": "upgrade"}) == ["firmware"]


def test_sequence_filter_refuses_a_bad_order():
    with pytest.raises(AnsibleFilterError, match="ascend_driver_order"):
        seq_mod.ascend_install_sequence(["driver", "cann"], "")
    with pytest.raises(AnsibleFilterError, match="once each"):
        seq_mod.ascend_install_sequence(["driver", "driver"], "")


def decide(said, probe=None, owed="", disk_driver="25.2.0"):
    """tasks/reboot.yml's decision, rendered as written."""
    t = task("reboot.yml", "Decide whether to reboot")
    variables = {
        "_ascend_driver_said": said,
        "_ascend_driver_marker": {"stat": {"exists": bool(owed)}},
        "_ascend_driver_owed": {"content": owed},
        "_ascend_driver_probe": probe if probe is not None else {"skipped": True},
        "_ascend_driver_after": {"driver": {"version": disk_driver}},
    }
    # set_fact turns the rendered text back into data; the filter returns a dict, so render it as JSON
    expr = t["ansible.builtin.set_fact"]["_ascend_driver_reboot_plan"].strip()
    assert expr.startswith("{{") and expr.endswith("}}")
    return env().compile_expression(expr[2:-2])(**variables)


def test_fresh_driver_that_takes_effect_immediately_needs_no_reboot_even_when_npu_smi_fails():
    driver = capture_blocks()["driver"]
    assert "Driver package installed successfully! The new version takes effect immediately." in driver
    result = decide({"driver": driver}, probe=DCMI_8005)
    assert result["reboot"] is False, result
    assert result["said"]["driver"] == (
        "Driver package installed successfully! The new version takes effect immediately.")
    assert "-8005" in result["probe_error"]


def test_a_failing_dcmi_init_alone_is_no_reason():
    held = {"failed": True, "kind": "dcmi_init", "msg": "dcmi module initialize failed. ret is -8020"}
    assert decide({}, probe=held)["reboot"] is False
    assert decide({}, probe=DCMI_8005)["reboot"] is False


def test_firmware_always_asks_for_the_reboot():
    firmware = capture_blocks()["firmware"]
    result = decide({"firmware": firmware}, probe=DCMI_8005)
    assert result["reboot"] is True
    assert result["reasons"] == ["the firmware installer says: Firmware package installed successfully! Reboot now "
                                 "or after driver installation for the installation/upgrade to take effect."]


@pytest.mark.parametrize("output", [UPGRADE_REBOOT, KO_ABORT])
def test_driver_upgrade_that_says_reboot_needed(output):
    result = decide({"driver": output})
    assert result["reboot"] is True
    assert "reboot needed for installation/upgrade" in result["reasons"][0].lower()
    assert "\x1b" not in result["reasons"][0]


def test_an_owed_request_and_a_loaded_driver_other_than_the_disk_one():
    owed = "firmware 7.7.0.1.231: Firmware package installed successfully! Reboot now or after driver installation\n"
    assert decide({}, probe=DCMI_8005, owed=owed)["reboot"] is True
    stale = {"failed": False, "driver_version": "24.1.rc3"}
    result = decide({}, probe=stale, disk_driver="25.2.0")
    assert result["reboot"] is True
    assert result["reasons"] == ["npu-smi reports the loaded driver 24.1.rc3, the driver on disk is 25.2.0"]
    assert decide({}, probe={"failed": False, "driver_version": "25.2.0"})["reboot"] is False


def test_installer_word_without_prefix_and_colours():
    assert plan.installer_word(UPGRADE_REBOOT) == (
        True, "Driver package upgraded successfully! Reboot needed for installation/upgrade to take effect!")
    assert plan.installer_word("") == (False, "")
    with pytest.raises(AnsibleFilterError):
        plan_mod.ascend_reboot_plan("not a dict")
