"""Drive ascendai.vllm.npu_info main() with patched args and a mocked run_command."""

from __future__ import annotations

import os

import pytest
from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args
from ansible_collections.ascendai.vllm.plugins.modules import npu_info
from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.module_harness import (
    AnsibleExitJson, AnsibleFailJson, patch_exits)

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "npu-smi")
NPU_SMI = "/usr/local/sbin/npu-smi"


def load(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        lines = f.read().split("\n")
    while lines and lines[0].startswith("# "):
        lines.pop(0)
    return "\n".join(lines)


A3 = load("npu-smi-info-a3-ascend910-8npu-16die-busy-with-procs-vllm-ascend-issue3002.txt")
B4 = load("npu-smi-info-910b4-4card-busy-with-procs-vllm-ascend-issue843.txt")
WARN = load("npu-smi-info-warning-before-after-offline-reset-mindcluster-doc.txt")
BOARD_910A = """NPU ID                         : 0
Software Version               : 23.0.5
Firmware Version               : 7.1.0.7.220
Compatibility                  : OK
PCI Device ID                  : 0xD801
Chip Count                     : 1
"""
HEALTH_OK = """Health Status                  : OK
Error Code                     : NA
Error Information              : NA
"""
HEALTH_ALARM = """\tHealth Status                  : Alarm
\tError Code                     : A4025021 8C03A000 8C084E00
\tError Information              : ascend_monitor adda heart beat lost error

\t                               : node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost.
"""
INVALID = "Invalid card id.\nError parameter of -i\nUsage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]\n"


@pytest.fixture
def module_env(monkeypatch):
    calls = []
    replies = {}

    def run_command(self, args, **kwargs):
        calls.append(list(args))
        key = " ".join(args[1:])
        reply = replies.get(key, replies.get("*"))
        assert reply is not None, f"unexpected command {args!r}"
        return reply

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    patch_exits(monkeypatch)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: NPU_SMI)
    monkeypatch.setattr(npu_info, "find_device_holders", lambda: [], raising=False)  # not this host's /proc
    return calls, replies


def run(args):
    with patch_module_args(args), pytest.raises((AnsibleExitJson, AnsibleFailJson)) as exc:
        npu_info.main()
    return exc.type, exc.value.args[0]


def test_a3_summary_with_detail(module_env):
    calls, replies = module_env
    replies["info"] = (0, A3, "")
    replies["*"] = (0, HEALTH_OK, "")
    for i in range(8):
        replies[f"info -t board -i {i}"] = (0, BOARD_910A.replace("0xD801", "0xD803"), "")
    kind, res = run({"set_fact": True})
    assert kind is AnsibleExitJson
    assert res["changed"] is False
    assert (res["count"], res["chip_count"], res["family"], res["chip_name"]) == (8, 16, "A3", "Ascend910")
    assert res["hbm_total_mb"] == 16 * 65536 and res["hbm_free_mb"] == 16 * 65536 - res["hbm_used_mb"]
    assert res["healthy"] is True and res["unhealthy"] == []
    assert calls[0] == [NPU_SMI, "info"]
    assert calls[1:] == [a for i in range(8) for a in (
        [NPU_SMI, "info", "-t", "board", "-i", str(i)],
        [NPU_SMI, "info", "-t", "health", "-i", str(i), "-c", "0"],
        [NPU_SMI, "info", "-t", "health", "-i", str(i), "-c", "1"])]
    assert res["npus"][0]["board"]["firmware_version"] == "7.1.0.7.220"
    assert res["npus"][0]["health_detail"]["health"] == "OK"
    assert res["ansible_facts"]["ascend_npu"]["count"] == 8
    assert res["ansible_facts"]["ascend_npu"]["npu_smi_path"] == NPU_SMI


def test_910b4_free_hbm_and_ids(module_env):
    calls, replies = module_env
    replies["info"] = (0, B4, "")
    replies["*"] = (0, HEALTH_OK, "")
    for i in (4, 5, 6, 7):
        replies[f"info -t board -i {i}"] = (0, BOARD_910A.replace("0xD801", "0xD802"), "")
    kind, res = run({})
    assert kind is AnsibleExitJson
    assert res["npu_ids"] == [4, 5, 6, 7] and res["family"] == "910B" and res["chip_name"] == "910B4"
    assert res["hbm_total_mb"] == 4 * 32768
    assert res["hbm_used_mb"] == 29096 + 29095 + 29096 + 29096
    assert res["hbm_free_mb"] == 4 * 32768 - (29096 + 29095 + 29096 + 29096)
    assert [p["pid"] for p in res["processes"]] == [498807, 499212, 499213, 499214]
    assert "ansible_facts" not in res
    assert [c[1:] for c in calls[1:3]] == [
        ["info", "-t", "board", "-i", "4"], ["info", "-t", "health", "-i", "4", "-c", "0"]]
    assert [c[5] for c in calls[1:]] == ["4", "4", "5", "5", "6", "6", "7", "7"]


def test_unhealthy_npu_with_error_codes_and_vanished_card(module_env):
    _calls, replies = module_env
    replies["info"] = (0, WARN, "")
    replies["info -t board -i 0"] = (0, BOARD_910A, "")
    replies["info -t health -i 0 -c 0"] = (0, HEALTH_ALARM, "")
    replies["info -t board -i 7"] = (255, INVALID, "")
    replies["info -t health -i 7 -c 0"] = (255, INVALID, "")
    kind, res = run({})
    assert kind is AnsibleExitJson
    assert res["family"] == "910A"  # name is 'xxx' in the capture; PCI device 0xD801 from the board detail
    assert res["healthy"] is False
    first, second = res["unhealthy"]
    assert (first["npu_id"], first["health"]) == (0, "Alarm")
    assert first["error_codes"] == ["A4025021", "8C03A000", "8C084E00"]
    assert "heart beat lost" in first["error_information"] and "Heartbeat Lost" in first["error_information"]
    assert second["npu_id"] == 7 and "Invalid card id" in second["reason"]
    assert "Invalid card id" in res["npus"][1]["detail_error"] and res["npus"][0]["detail_error"] is None
    assert res["npu_smi_warnings"] == []  # npu-smi printed no [WARNING] line


def test_detail_false_runs_only_the_summary(module_env):
    calls, replies = module_env
    replies["info"] = (0, B4, "")
    kind, res = run({"detail": False})
    assert kind is AnsibleExitJson
    assert calls == [[NPU_SMI, "info"]]
    assert res["npus"][0]["board"] is None and res["count"] == 4


def test_check_mode_still_reads(module_env):
    calls, replies = module_env
    replies["info"] = (0, B4, "")
    kind, res = run({"detail": False, "_ansible_check_mode": True})
    assert kind is AnsibleExitJson and res["changed"] is False and res["count"] == 4
    assert calls == [[NPU_SMI, "info"]]


def test_driver_warning_is_returned(module_env):
    _calls, replies = module_env
    line = ("[WARNING]The driver package may not be completely installed, which may cause function abnormal. "
            "Please reinstall it.")
    replies["info"] = (0, B4.replace("\nCANN:", "\n" + line + "\nCANN:"), "")
    _kind, res = run({"detail": False})
    assert res["npu_smi_warnings"] == [line] and res["driver_install_incomplete"] is True


@pytest.mark.parametrize("rc,out,err,kind,words", [
    (187, "dcmi module initialize failed. ret is -8005\n", "", "dcmi_init", ["reboot", "HwHiAiUser", "-8005"]),
    (172, "dcmi model initialized failed, because the device is used. ret is -8020\n", "", "device_in_use",
     ["-8020", "fuser -v /dev/davinci", "stop it", "does not help"]),
    (1, "", "open /dev/davinci_manager failed: Permission denied", "permission", ["root"]),
    (3, "", "segfault", "unknown", ["rc=3"]),
    (0, "garbage\n", "", "parse", ["could not read"]),
])
def test_summary_errors_are_actionable(module_env, rc, out, err, kind, words):
    _calls, replies = module_env
    replies["info"] = (rc, out, err)
    got, res = run({})
    assert got is AnsibleFailJson
    assert res["kind"] == kind
    for word in words:
        assert word in res["msg"]


def test_summary_errors_without_holders(module_env):
    _calls, replies = module_env
    replies["info"] = (187, "dcmi module initialize failed. ret is -8005\n", "")
    got, res = run({})
    assert got is AnsibleFailJson and res["kind"] == "dcmi_init" and res["holders"] == []


# HEALTH_CARD: 'npu-smi info -t health -i 6' without -c on a 910B build (npu_card_info.c show_ascend_card_health:
# printf("\t%-30s : %s\n") per line): the health only, no error code.
HEALTH_CARD = "\tNPU ID                         : 6\n\tChip Count                     : 1\n\n" \
              "\tHealth                         : Alarm\n\tChip ID                        : 0\n\n" \
              "\tHealth                         : OK\n\tChip Name                      : MCU\n\n"


def test_error_codes_come_from_the_chip_query(module_env):
    # a real 910B prints the error codes only with -c: asking per NPU (the old way) finds none
    _calls, replies = module_env
    replies["info"] = (0, B4, "")
    replies["*"] = (0, HEALTH_OK, "")
    for i in (4, 5, 6, 7):
        replies[f"info -t board -i {i}"] = (0, BOARD_910A.replace("0xD801", "0xD802"), "")
        replies[f"info -t health -i {i}"] = (0, HEALTH_CARD.replace(": 6", f": {i}"), "")
    replies["info -t health -i 6 -c 0"] = (0, HEALTH_ALARM, "")
    kind, res = run({})
    assert kind is AnsibleExitJson and res["healthy"] is False
    (bad,) = res["unhealthy"]
    assert (bad["npu_id"], bad["health"]) == (6, "Alarm")
    assert bad["error_codes"] == ["A4025021", "8C03A000", "8C084E00"]
    assert res["npus"][2]["health_detail"]["chips"][0]["chip_id"] == 0


def test_a3_error_code_of_the_second_die(module_env):
    calls, replies = module_env
    replies["info"] = (0, A3, "")
    replies["*"] = (0, HEALTH_OK, "")
    replies["info -t health -i 3 -c 1"] = (0, HEALTH_ALARM, "")
    kind, res = run({})
    assert kind is AnsibleExitJson
    (bad,) = res["unhealthy"]
    assert bad["npu_id"] == 3 and bad["error_codes"][0] == "A4025021"
    assert [NPU_SMI, "info", "-t", "health", "-i", "3", "-c", "1"] in calls


def test_dcmi_failure_with_a_holder_is_device_held(module_env, monkeypatch):
    holders = [{"pid": 4242, "name": "python3", "devices": ["/dev/davinci0", "/dev/davinci_manager"],
                "container": "0123456789ab" + "c" * 52}]
    monkeypatch.setattr(npu_info, "find_device_holders", lambda: holders)
    _calls, replies = module_env
    replies["info"] = (187, "dcmi module initialize failed. ret is -8005\n", "")
    got, res = run({})
    assert got is AnsibleFailJson and res["kind"] == "device_held" and res["holders"] == holders
    assert "python3 (pid 4242) in container 0123456789ab holds /dev/davinci0" in res["msg"]
    assert "do not reboot" in res["msg"]


def test_detail_dcmi_error_fails(module_env):
    _calls, replies = module_env
    replies["info"] = (0, B4, "")
    replies["*"] = (255, "dcmi module initialize failed. ret is -8005\n", "")
    got, res = run({})
    assert got is AnsibleFailJson and res["kind"] == "dcmi_init"
    assert res["cmd"] == [NPU_SMI, "info", "-t", "board", "-i", "4"]


def test_npu_smi_not_found(module_env, monkeypatch):
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: None)
    got, res = run({})
    assert got is AnsibleFailJson and res["kind"] == "not_found"
    assert "/usr/local/sbin" in res["msg"] and "driver" in res["msg"]


def test_npu_smi_path_missing(module_env, tmp_path):
    got, res = run({"npu_smi_path": str(tmp_path / "npu-smi")})
    assert got is AnsibleFailJson and res["kind"] == "not_found"
    assert str(tmp_path / "npu-smi") in res["msg"]


def test_npu_smi_path_not_executable(module_env, tmp_path):
    path = tmp_path / "npu-smi"
    path.write_text("#!/bin/sh\n")
    path.chmod(0o644)
    got, res = run({"npu_smi_path": str(path)})
    assert got is AnsibleFailJson and res["kind"] == "permission"


def test_npu_smi_path_is_used(module_env, tmp_path):
    calls, replies = module_env
    path = tmp_path / "npu-smi"
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    replies["info"] = (0, B4, "")
    got, res = run({"npu_smi_path": str(path), "detail": False})
    assert got is AnsibleExitJson and calls == [[str(path), "info"]] and res["npu_smi_path"] == str(path)
