"""ascend_driver on a serving node: the units that hold /dev/davinci* stop before the driver installer runs and
start again afterwards. The driver installer aborts with "The davinci nodes are occupied by some processes"
while a process or container holds a device
(https://github.com/verylucky01/driver/blob/e29d066/scripts/package/custom/driver/common/scripts/driver_install.sh#L377-L420).

Runs the role's entry points holders_stop / holders_start with ansible-playbook on this machine; systemctl is a
stand-in on PATH that records what it was asked (this machine's systemd is not touched).
"""

from __future__ import annotations

import os

import yaml

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import changed_count, run_playbook

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "{log}"
case "$1" in
  is-active) grep -qx "$2" "{active}" && {{ echo active; exit 0; }}; echo inactive; exit 3 ;;
  stop) grep -vx "$2" "{active}" > "{active}.new"; mv "{active}.new" "{active}" ;;
  start) echo "$2" >> "{active}" ;;
esac
exit 0
"""


def fake_systemctl(tmp_path, monkeypatch, active):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log, state = tmp_path / "systemctl.log", tmp_path / "active"
    state.write_text("".join(unit + "\n" for unit in active))
    script = bindir / "systemctl"
    script.write_text(FAKE_SYSTEMCTL.format(log=log, active=state))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return log


def play(entry, **variables):
    return [{"hosts": "localhost", "gather_facts": False, "vars": variables, "tasks": [
        {"name": "Entry point", "ansible.builtin.include_role": {"name": "ascendai.vllm.ascend_driver",
                                                                 "tasks_from": entry}},
        {"name": "Show what was stopped", "ansible.builtin.debug": {"var": "ascend_driver_stopped_units"}}]}]


UNITS = ["vllm.service", "npu-exporter.service", "ascendai-npu-metrics.timer"]


def test_active_holders_stop_before_and_start_after(tmp_path, monkeypatch):
    log = fake_systemctl(tmp_path, monkeypatch, ["vllm.service", "npu-exporter.service", "sshd.service"])
    stop = run_playbook(tmp_path, play("holders_stop", ascend_driver_device_units=UNITS))
    assert stop.returncode == 0, stop.stdout[-3000:] + stop.stderr[-2000:]
    assert changed_count(stop) == 1
    calls = [line.split() for line in log.read_text().splitlines()]
    assert [c for c in calls if c[0] == "stop"] == [["stop", "vllm.service"], ["stop", "npu-exporter.service"]]
    log.write_text("")
    start = run_playbook(tmp_path, play("holders_start", ascend_driver_device_units=UNITS,
                                        ascend_driver_stopped_units=["vllm.service", "npu-exporter.service"]))
    assert start.returncode == 0, start.stdout[-3000:] + start.stderr[-2000:]
    calls = [line.split() for line in log.read_text().splitlines()]
    # started again in the reverse order: the exporter, then the service that serves
    assert [c for c in calls if c[0] == "start"] == [["start", "npu-exporter.service"], ["start", "vllm.service"]]


def test_nothing_active_nothing_changed(tmp_path, monkeypatch):
    log = fake_systemctl(tmp_path, monkeypatch, ["sshd.service"])
    stop = run_playbook(tmp_path, play("holders_stop", ascend_driver_device_units=UNITS))
    assert stop.returncode == 0, stop.stdout[-3000:] + stop.stderr[-2000:]
    assert changed_count(stop) == 0
    assert not [line for line in log.read_text().splitlines() if line.startswith(("stop", "start"))]


def test_main_stops_holders_before_the_installers_and_starts_them_after():
    with open(os.path.join(ROOT, "roles", "ascend_driver", "tasks", "main.yml")) as handle:
        text = handle.read()
    main = yaml.safe_load(text)
    names = [t.get("ansible.builtin.import_tasks") or t.get("ansible.builtin.include_tasks") for t in main]
    flat = []
    for t in main:
        flat.append(t.get("ansible.builtin.import_tasks"))
        for key in ("block", "always"):
            flat += [s.get("ansible.builtin.import_tasks") or s.get("ansible.builtin.include_tasks")
                     for s in t.get(key, [])]
    assert flat.index("holders_stop.yml") < flat.index("install.yml") < flat.index("holders_start.yml")
    # the start runs whatever happened to the install (an always: section)
    block = next(t for t in main if "always" in t)
    assert "holders_start.yml" in [s.get("ansible.builtin.import_tasks") or s.get("ansible.builtin.include_tasks")
                                   for s in block["always"]]
    assert names
