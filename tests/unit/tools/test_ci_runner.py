"""tools/ci/run.py: the CI's tables (stages, lanes, Molecule's lane split) are sound, --list prints the plan, and the
runner's two lanes behave as the tables say (order, needs, failure reporting, exit status) on stand-in stages."""

from __future__ import annotations

import importlib.util
import os
import sys
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_spec = importlib.util.spec_from_file_location("ci_run", os.path.join(ROOT, "tools", "ci", "run.py"))
run = importlib.util.module_from_spec(_spec)
sys.modules["ci_run"] = run  # dataclasses look their module up
_spec.loader.exec_module(run)


def _text(runner):
    runner.out.flush()
    with open(runner.out.name, encoding="utf-8") as fh:
        return fh.read()


def test_the_tables_are_sound():
    assert run.table_problems() == []


def test_every_scenario_lands_in_exactly_one_lane():
    scenarios = run.scenarios_on_disk()
    on_disk = sorted(d for d in os.listdir(os.path.join(ROOT, "molecule"))
                     if os.path.isfile(os.path.join(ROOT, "molecule", d, "molecule.yml")))
    assert scenarios == on_disk and "os_prep" in scenarios and "default" in scenarios
    lane_a, lane_b = run.molecule_lanes(scenarios)
    assert sorted(lane_a + lane_b) == scenarios
    assert not set(lane_a) & set(lane_b)
    # the scenarios that share the sandbox's host port (18770) never run side by side
    assert {"default", "controller14"} <= set(lane_a)
    # one lane: everything in lane a, in order
    assert run.molecule_lanes(scenarios, lanes=1) == (scenarios, [])


@pytest.mark.parametrize("breakage, complaint", [
    (lambda t: t["stages"].pop("kunpeng"), "'kunpeng'"),  # named in BACKGROUND_LANE and NEEDS, no body
    (lambda t: t["full_run"].remove("background-wait"), "never waits"),
    (lambda t: t["full_run"].remove("sanity"), "'sanity' is in no lane"),
    (lambda t: t["full_run"].insert(3, "bundle"), "'bundle' is in both lanes"),
    (lambda t: t["full_run"].insert(3, "unit"), "'unit', which has no body"),
    (lambda t: t["background"].remove("molecule-lane-b"), "lacks molecule-lane-b"),
    (lambda t: t["needs"].update(bundle=["kunpeng"]), "runs after it"),
    (lambda t: t["lane_a"].append("no_such_scenario"), "'no_such_scenario'"),
    (lambda t: t["stages"].update(lint=run.Stage("ruff", "  \n")), "empty body"),
])
def test_a_wrong_table_is_refused(breakage, complaint):
    tables = {"stages": dict(run.STAGES), "full_run": list(run.FULL_RUN), "background": list(run.BACKGROUND_LANE),
              "needs": {k: list(v) for k, v in run.NEEDS.items()}, "lane_a": list(run.MOLECULE_LANE_A)}
    breakage(tables)
    problems = run.table_problems(**tables)
    assert any(complaint in p for p in problems), problems


def test_list_prints_the_plan(capsys, monkeypatch):
    monkeypatch.delenv("MOLECULE_SCENARIOS", raising=False)
    monkeypatch.delenv("MOLECULE_LANES", raising=False)
    assert run.main(["--list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    # every step of the full run, in order, the background lane's stages under background-start
    heads = [line.split(":")[0].strip() for line in lines if not line.startswith("    |")]
    assert heads == run.FULL_RUN
    bg = [line.split("|")[1].split(":")[0].split(" (")[0].strip() for line in lines if line.startswith("    |")]
    assert bg == run.BACKGROUND_LANE
    lane_a, lane_b = run.molecule_lanes(run.full_run_scenarios())
    assert f"Molecule lane a: {' '.join(lane_a)}" in out and f"Molecule lane b: {' '.join(lane_b)}" in out
    # a by-name-only scenario is in neither lane of the full run, and runs when named
    for name in run.MOLECULE_BY_NAME_ONLY:
        assert name not in lane_a + lane_b and name in run.scenarios_on_disk()
    monkeypatch.setenv("MOLECULE_SCENARIOS", " ".join(run.MOLECULE_BY_NAME_ONLY))
    assert run.main(["--list", "molecule"]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in run.MOLECULE_BY_NAME_ONLY)


def test_list_of_chosen_stages_and_scenarios(capsys, monkeypatch):
    monkeypatch.setenv("MOLECULE_SCENARIOS", "os_prep default")
    assert run.main(["--list", "lint", "molecule"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "lint: ruff + yamllint",
        "molecule: molecule-prep, then Molecule lane a: default, beside lane b: os_prep"]
    assert run.main(["--list", "lnt"]) == 2


@pytest.fixture
def stand_in(monkeypatch, tmp_path):
    """The runner on stand-in stages (echo, false) and a stand-in `molecule` on PATH, logs under tmp_path."""
    def table(**bodies):
        monkeypatch.setattr(run, "STAGES", {name: run.Stage(f"{name} title", body) for name, body in bodies.items()})
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "molecule").write_text('#!/bin/sh\necho "TASK [the $3 task]"\n'
                                      '[ "$3" != broken ] || { echo "fatal: [node]: FAILED! => boom"; exit 2; }\n'
                                      '[ "$3" != slow ] || sleep 60\n'
                                      'echo "$3 ok"\n')
    (bin_dir / "molecule").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def lanes(self):
        self.lane_a, self.lane_b = run.molecule_lanes(os.environ["MOLECULE_SCENARIOS"].split(), lane_a=["first"])
        os.makedirs(self.logdir, exist_ok=True)
    monkeypatch.setattr(run.Runner, "molecule_env", lanes)

    def runner():
        r = run.Runner(out=open(tmp_path / "out.txt", "w+"))  # noqa: SIM115 (a real file: the stages write to it)
        r.bg_log_path = str(tmp_path / "background.log")
        r.logdir = str(tmp_path / "molecule-logs")
        return r
    return table, runner


def test_two_lanes_pass(stand_in, monkeypatch):
    table, runner = stand_in
    table(**{"molecule-prep": "echo prep", "bundle": "echo bundle", "kunpeng": "echo kunpeng",
             "rpm-nodes": "echo rpm", "lint": "echo linted"})
    monkeypatch.setenv("MOLECULE_SCENARIOS", "first second")
    r = runner()
    assert r.run(["background-start", "lint", "molecule", "background-wait"]) == 0
    out = _text(r)
    # lane a in the foreground, lane b's scenario in the background's output, printed at background-wait
    assert out.index("first ok") < out.index("waiting for the background lane") < out.index("second ok")
    rows = [row[0] for row in r.times]
    # the background lane's rows land when its stages end, possibly before background-start's own row
    foreground = [row for row in rows if not row.endswith("(bg)")]
    assert foreground[:1] == ["background-start"] and rows[-1] == "total"
    assert {"molecule-prep(bg)", "bundle(bg)", "kunpeng(bg)", "rpm-nodes(bg)", "lint", "molecule",
            "background-wait"} <= set(rows)
    table_part = out[out.rindex("stage     "):]
    assert "  molecule/first " in table_part and "  molecule/second " in table_part


def test_a_failed_background_stage_skips_what_needs_it_and_fails_the_run(stand_in, monkeypatch):
    table, runner = stand_in
    table(**{"molecule-prep": "echo prep", "bundle": "echo no wheels; false", "kunpeng": "echo kunpeng ran",
             "rpm-nodes": "echo rpm", "lint": "echo linted"})
    monkeypatch.setenv("MOLECULE_SCENARIOS", "first broken")
    r = runner()
    assert r.run(["background-start", "lint", "molecule", "background-wait"]) == 1
    out = _text(r)
    assert "kunpeng ran" not in out and "kunpeng: skipped, it needs bundle" in out
    assert "background lane failed: bundle, kunpeng" in out
    # lane b still ran (it needs only the preparation), and its failed task is digested at the end
    table_part = out[out.rindex("stage     "):]
    assert "bundle(bg)(failed)" in table_part and "background-wait(failed)" in table_part
    assert "molecule/broken(FAILED)" in table_part
    assert "--- molecule/broken: the failed task\nTASK [the broken task]\nfatal: [node]: FAILED!" in table_part


def test_a_failed_foreground_stage_stops_the_run(stand_in, monkeypatch):
    table, runner = stand_in
    table(**{"molecule-prep": "echo prep", "bundle": "sleep 60", "kunpeng": "echo kunpeng",
             "rpm-nodes": "echo rpm", "lint": "sleep 1; echo lint failed; exit 3", "units": "echo units ran"})
    monkeypatch.setenv("MOLECULE_SCENARIOS", "first")
    r = runner()
    start = time.monotonic()
    assert r.run(["background-start", "lint", "units", "background-wait"]) == 1
    assert time.monotonic() - start < 20  # the sleeping bundle stage was stopped, not waited for
    out = _text(r)
    assert "units ran" not in out
    assert "the background lane, stopped" in out
    assert ("lint(failed)", ) == tuple(row[0] for row in r.times if row[0].startswith("lint"))
    # the background stage it stopped is not reported as a failure of its own
    assert "stage bundle stopped: the run was aborted by a failed stage" in out
    assert "stage bundle FAILED" not in out
    assert ("bundle(bg)(stopped)", ) == tuple(row[0] for row in r.times if row[0].startswith("bundle"))
    # CI keeps the output's tail: the failed stage's last lines come again after the table, the stopped one's not
    table_part = out[out.rindex("stage     "):]
    assert "--- stage lint: its last lines\nlint failed" in table_part
    assert "--- stage bundle" not in table_part


def test_a_scenario_stopped_by_a_failed_stage_is_no_failure_of_its_own(stand_in, monkeypatch):
    table, runner = stand_in
    table(**{"molecule-prep": "echo prep", "bundle": "echo bundle", "kunpeng": "echo kunpeng",
             "rpm-nodes": "echo rpm", "lint": "sleep 3; echo lint failed; exit 3"})
    monkeypatch.setenv("MOLECULE_SCENARIOS", "slow")
    r = runner()
    assert r.run(["background-start", "lint", "background-wait"]) == 1
    out = _text(r)
    table_part = out[out.rindex("stage     "):]
    assert "molecule/slow(stopped)" in table_part and "(FAILED)" not in table_part
    assert "--- molecule/slow" not in table_part and "molecule scenario slow stopped after" in out


def test_molecule_alone_runs_both_lanes_side_by_side(stand_in, monkeypatch):
    table, runner = stand_in
    table(**{"molecule-prep": "echo prep"})
    monkeypatch.setenv("MOLECULE_SCENARIOS", "first second")
    r = runner()
    assert r.run(["molecule"]) == 0
    out = _text(r)
    assert "lane a: first; lane b: second" in out and "first ok" in out and "second ok" in out
