"""AWX's launch, as tests/tools/awx_job.py reproduces it for the newest controller's SSH run: survey answers
checked and defaulted as AWX does (awx/main/models/mixins.py), the template's credential user and become on the
command line, and one real ansible-runner job (the Kubernetes stage, rendering only) on this controller."""

from __future__ import annotations

import os
import sys

import pytest
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import awx_job

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.path.dirname(sys.executable)


def _spec(stage):
    with open(os.path.join(ROOT, "playbooks", "awx", "surveys", stage + ".yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)["spec"]


def test_install_answers_for_the_sandbox_and_the_defaults_awx_fills_in():
    extravars = awx_job.survey_extravars(_spec("install"), {"vllm_flavour": "cpu"})
    assert extravars["vllm_flavour"] == "cpu"
    assert extravars["os_prep_nofile_limit"] == 1048576
    # No default: AWX passes nothing, so the role's own default (from ascendai_bundle_url) holds.
    assert "vllm_wheelhouse_url" not in extravars


def test_a_text_default_of_empty_string_is_passed_and_overrides_the_inventory():
    """AWX passes a default that passes the question's checks, "" included (min 0)."""
    spec = [{"variable": "url", "type": "text", "required": False, "default": "", "min": 0, "max": 9,
             "question_name": "U"}]
    assert awx_job.survey_extravars(spec, {}) == {"url": ""}


@pytest.mark.parametrize("answers, message", [
    ({"vllm_flavour": "gpu"}, "not one of"),
    ({"os_prep_nofile_limit": 1024}, "below the survey's min"),
    ({"os_prep_nofile_limit": "1048576"}, "integer answer"),
    ({"os_prep_nofile_limit": True}, "integer answer"),
    ({"os_prep_ascend_user": "x" * 33}, "longer than the survey's max"),
    ({"os_prep_ascend_user": ""}, "shorter than the survey's min"),
    ({"vllm_service_api_key": "secret"}, "answers to no survey question"),
])
def test_answers_awx_refuses_at_launch(answers, message):
    with pytest.raises(awx_job.SurveyError, match=message):
        awx_job.survey_extravars(_spec("install"), answers)


def test_a_required_question_without_a_usable_default_needs_an_answer():
    spec = [{"variable": "x", "type": "text", "required": True, "default": "", "min": 1, "max": 8,
             "question_name": "X"}]
    with pytest.raises(awx_job.SurveyError, match="required"):
        awx_job.survey_extravars(spec, {})
    assert awx_job.survey_extravars(spec, {"x": "ok"}) == {"x": "ok"}


def test_credential_user_and_become_follow_the_template():
    template, extravars, cmdline = awx_job.job_inputs("install", {"vllm_flavour": "cpu"}, "ansible")
    assert template["playbook"] == "playbooks/site.yml"
    assert cmdline == ["-u", "ansible", "--become"]
    template, extravars, cmdline = awx_job.job_inputs("deploy", {}, "ansible")
    assert cmdline == []
    assert extravars["k8s_manifests_apply"] is True
    _t, extravars, _c = awx_job.job_inputs("deploy", {}, "", {"k8s_manifests_apply": False})
    assert extravars["k8s_manifests_apply"] is False


def test_recap_totals_per_host():
    stats = {"ok": {"n1": 10}, "changed": {"n1": 2}, "failures": {}, "dark": {"n2": 1}}
    assert awx_job.recap(stats) == {"n1": {"ok": 10, "changed": 2, "failures": 0, "unreachable": 0},
                                    "n2": {"ok": 0, "changed": 0, "failures": 0, "unreachable": 1}}


def test_deploy_job_renders_through_ansible_runner(tmp_path, monkeypatch):
    pytest.importorskip("ansible_runner")
    monkeypatch.setenv("PATH", BIN + os.pathsep + os.environ.get("PATH", ""))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                         f"      ansible_python_interpreter: {sys.executable}\n")
    private = tmp_path / "job"
    rc = awx_job.main(["--stage", "deploy", "--inventory", str(inventory),
                       "--collections", os.path.join(ROOT, ".cache", "collections"),
                       "--override", "k8s_manifests_apply=false", "--private-data-dir", str(private)])
    assert rc == 0
    rendered = list((private / "project" / "playbooks" / "awx" / "k8s-manifests").iterdir())
    assert rendered, "the Kubernetes stage rendered no manifest"
    assert (private / "env" / "extravars").exists() and not (private / "env" / "ssh_key").exists()
