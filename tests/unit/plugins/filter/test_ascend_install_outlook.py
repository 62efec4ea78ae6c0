"""The ascend_install_outlook filter, fed as roles/ascend_driver/tasks/inspect.yml feeds it: the registered results
of its two ascend_package_info reads (the second skipped when the order holds both packages) and
ascend_driver_packages. Huawei's order: an upgrade or overwrite runs firmware > driver, a first installation
driver > firmware (mindie_instg_0006, instg_0005)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.ascend_install_outlook import FilterModule

ascend_install_outlook = FilterModule().filters()["ascend_install_outlook"]
SKIPPED = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}


def outlook(order, driver_installed, actions):
    """The role's reads for ``order``: the firmware installed as 7.5.0.1.129 where the order reads it."""
    read = [{"kind": k, "installed": {"version": driver_installed if k == "driver" else "7.5.0.1.129"}}
            for k in order]
    kept = [{"kind": k, "installed": {"version": driver_installed if k == "driver" else None}}
            for k in ("driver", "firmware") if k not in order]
    return ascend_install_outlook(order, read={"results": read}, kept={"results": kept} if kept else SKIPPED,
                                  packages={k: {"action": a} for k, a in actions.items()})


def test_upgrade_runs_firmware_then_driver():
    assert outlook(["driver", "firmware"], "24.1.rc3", {"driver": "upgrade", "firmware": "upgrade"})["todo"] == [
        "firmware", "driver"]


def test_first_install_runs_driver_then_firmware():
    assert outlook(["driver", "firmware"], None, {"driver": "full", "firmware": "full"})["todo"] == [
        "driver", "firmware"]
    assert outlook(["firmware", "driver"], None, {"driver": "full", "firmware": "full"})["todo"] == [
        "firmware", "driver"]


def test_only_packages_that_install_something_run():
    assert outlook(["driver", "firmware"], "25.2.0", {"driver": "none", "firmware": "upgrade"})["todo"] == [
        "firmware"]
    assert outlook(["driver", "firmware"], "25.2.0", {"driver": "refuse", "firmware": "downgrade"})["todo"] == [
        "firmware"]


def test_the_driver_the_order_leaves_alone_still_decides_the_order():
    """Only the firmware managed: the installed driver comes from the second read."""
    result = outlook(["firmware"], "24.1.rc3", {"firmware": "upgrade"})
    assert result["todo"] == ["firmware"] and result["installed_driver"] == "24.1.rc3"
    assert ascend_install_outlook(["firmware", "driver"], read={"results": [
        {"kind": "firmware", "installed": {"version": "7.5.0.1.129"}}]}, kept={"results": [
            {"kind": "driver", "installed": {"version": "24.1.rc3"}}]}, packages={
        "firmware": {"action": "full"}, "driver": {"action": "full"}})["todo"] == ["firmware", "driver"]


def test_the_order_leaving_nothing_alone_skips_the_second_read():
    """With both packages in ascend_driver_order the read of the others is skipped: its registered result has no
    results, and the driver's installed version is still found; the driver and firmware as they will be come from
    the staged package, else the installed one."""
    read = {"results": [{"kind": "firmware", "installed": {"version": "7.5.0.1.129"}, "package": None},
                        {"kind": "driver", "installed": {"version": "24.1.rc3"}, "package": {"version": "25.2.0"}}]}
    result = ascend_install_outlook(["driver", "firmware"], read=read, kept=SKIPPED, packages={})
    assert result == {"installed_driver": "24.1.rc3", "todo": [],
                      "after": {"firmware": {"version": "7.5.0.1.129"}, "driver": {"version": "25.2.0"}}}
    assert list(result["after"]) == ["firmware", "driver"]


def test_no_driver_installed_is_an_empty_version():
    read = {"results": [{"kind": "driver", "installed": {"version": None}, "package": {"version": "25.2.0"}}]}
    assert ascend_install_outlook(["driver"], read=read, kept=SKIPPED)["installed_driver"] == ""


@pytest.mark.parametrize("order, read, packages, needle", [
    (["driver", "cann"], {"results": []}, {}, "got ['driver', 'cann']"),
    (["driver", "driver"], {"results": []}, {}, "once each"),
    (["driver"], {"results": [{"kind": "cann"}]}, {}, "read must be the registered result"),
    (["driver"], "not registered", {}, "read must be the registered result"),
    (["driver"], {"results": []}, ["driver"], "packages must map each kind"),
])
def test_bad_input_is_named(order, read, packages, needle):
    with pytest.raises(AnsibleFilterError) as info:
        ascend_install_outlook(order, read=read, kept=SKIPPED, packages=packages)
    assert needle in str(info.value) and str(info.value).startswith("ascend_install_outlook: ")
