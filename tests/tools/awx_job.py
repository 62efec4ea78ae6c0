#!/usr/bin/env python3
# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Run one AWX job template of playbooks/awx/job_templates.yml the way AWX runs it, with ansible-runner.

AWX launches a job as an ansible-runner private_data_dir (https://ansible.readthedocs.io/projects/runner/en/
stable/intro/#runner-input-directory-hierarchy):

- ``project/``: the synced project (this repository), the playbook's working directory, so its ansible.cfg
  applies (pipelining on);
- ``inventory/``: the job's inventory (hosts and group variables);
- ``env/extravars``: the template's extra variables with the survey answers on top (a file, not the command
  line), after AWX checked every answer against the survey spec (required, type, min/max, choices);
- ``env/ssh_key``: the Machine credential's private key, which ansible-runner loads into an ssh-agent;
- ``env/envvars``: the collections path where the project sync installed the collections;
- ``env/cmdline``: the credential's user (``-u``) and the template's ``--become``.

Usage (from the newest controller, tools/ci/controller14.sh)::

    python tests/tools/awx_job.py --stage install --inventory HOSTS --ssh-key KEY --user ansible \\
        --collections DIR --answers '{"vllm_flavour": "cpu"}' [--override VAR=JSON] [--expect-changed 0]
        [--json-out FILE]

Exit 0: the playbook passed (and changed exactly the expected number of tasks when --expect-changed is given).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
AWX = os.path.join(ROOT, "playbooks", "awx")
# What AWX's project sync does not bring along, and this checkout's local state.
PROJECT_IGNORE = (".git", ".venv", ".cache", "build", ".ansible", ".hypothesis", ".ruff_cache", "__pycache__",
                  "*.pyc", "tests", "benchmarks", "molecule")


class SurveyError(ValueError):
    """An answer AWX would refuse at launch."""


def _check_answer(question, value):
    """AWX's launch-time checks of one answer (awx/main/models/mixins.py SurveyJobTemplateMixin)."""
    name, kind = question["variable"], question["type"]
    low, high = question.get("min"), question.get("max")
    if kind in ("text", "textarea", "password"):
        if not isinstance(value, str):
            raise SurveyError(f"{name}: a {kind} answer must be a string, not {type(value).__name__}")
        if low is not None and len(value) < int(low):
            raise SurveyError(f"{name}: {value!r} is shorter than the survey's min {low}")
        if high is not None and len(value) > int(high):
            raise SurveyError(f"{name}: {value!r} is longer than the survey's max {high}")
    elif kind in ("integer", "float"):
        wanted = int if kind == "integer" else (int, float)
        if isinstance(value, bool) or not isinstance(value, wanted):
            raise SurveyError(f"{name}: an {kind} answer must be a number of that type, not {value!r}")
        if low is not None and value < low:
            raise SurveyError(f"{name}: {value} is below the survey's min {low}")
        if high is not None and value > high:
            raise SurveyError(f"{name}: {value} is above the survey's max {high}")
    elif kind == "multiplechoice":
        if value not in question.get("choices", []):
            raise SurveyError(f"{name}: {value!r} is not one of {question.get('choices')}")
    elif kind == "multiselect":
        if not isinstance(value, list) or not set(value) <= set(question.get("choices", [])):
            raise SurveyError(f"{name}: {value!r} is not a list of {question.get('choices')}")
    else:
        raise SurveyError(f"{name}: unknown survey question type {kind!r}")


def survey_extravars(spec, answers):
    """The extra variables a launch with these answers gets, as AWX computes them.

    An answer must pass the question's checks. An unanswered question with a default gets the default when the
    default passes them (so a text question's "" default does reach the playbook and overrides inventory
    variables of that name); a required question with neither is refused, as is an answer to no question
    (awx/main/models/mixins.py: SurveyJobTemplateMixin._update_unified_job_kwargs, _survey_element_validation).
    """
    questions = {q["variable"]: q for q in spec}
    unknown = sorted(set(answers) - set(questions))
    if unknown:
        raise SurveyError(f"answers to no survey question: {', '.join(unknown)} (questions: {', '.join(questions)})")
    result = {}
    for name, question in questions.items():
        if name in answers:
            _check_answer(question, answers[name])
            result[name] = answers[name]
            continue
        if question.get("default") is not None:
            try:
                _check_answer(question, question["default"])
                result[name] = question["default"]
                continue
            except SurveyError:
                pass
        if question.get("required"):
            raise SurveyError(f"{name}: required, and the survey's default {question.get('default')!r} is no answer")
    return result


def job_inputs(stage, answers, user, overrides=None):
    """(template, extravars, cmdline) of the job template for ``stage`` launched with ``answers``.

    ``overrides`` (variable: value) are the test's own deviations from what AWX would pass (deploy_k8s rendering
    only: no cluster here); they win over everything, as extra variables do.
    """
    with open(os.path.join(AWX, "job_templates.yml"), encoding="utf-8") as handle:
        templates = {t["stage"]: t for t in yaml.safe_load(handle)["awx_job_templates"]}
    if stage not in templates:
        raise SurveyError(f"no job template for stage {stage!r} (stages: {', '.join(templates)})")
    template = templates[stage]
    with open(os.path.join(AWX, "surveys", template["survey"] + ".yml"), encoding="utf-8") as handle:
        survey = yaml.safe_load(handle)
    extravars = dict(template.get("extra_vars") or {})
    # Survey answers win over the template's extra variables.
    extravars.update(survey_extravars(survey.get("spec") or [], answers))
    extravars.update(overrides or {})
    cmdline = []
    if template.get("credential") == "machine" and user:
        cmdline += ["-u", user]
    if template.get("become"):
        cmdline.append("--become")
    return template, extravars, cmdline


def recap(stats):
    """Per-host totals from ansible-runner's stats: {host: {ok, changed, failures, unreachable}}."""
    hosts = set()
    for key in ("ok", "changed", "failures", "dark"):
        hosts |= set((stats or {}).get(key) or {})
    return {h: {"ok": stats.get("ok", {}).get(h, 0), "changed": stats.get("changed", {}).get(h, 0),
                "failures": stats.get("failures", {}).get(h, 0), "unreachable": stats.get("dark", {}).get(h, 0)}
            for h in sorted(hosts)}


def build_private_data_dir(dest, extravars, cmdline, inventory, ssh_key, collections):
    shutil.copytree(ROOT, os.path.join(dest, "project"), symlinks=True,
                    ignore=shutil.ignore_patterns(*PROJECT_IGNORE))
    if os.path.isdir(inventory):
        shutil.copytree(inventory, os.path.join(dest, "inventory"))
    else:
        os.makedirs(os.path.join(dest, "inventory"))
        shutil.copy(inventory, os.path.join(dest, "inventory", "hosts.yml"))
    envdir = os.path.join(dest, "env")
    os.makedirs(envdir)
    with open(os.path.join(envdir, "extravars"), "w", encoding="utf-8") as handle:
        json.dump(extravars, handle)
    with open(os.path.join(envdir, "cmdline"), "w", encoding="utf-8") as handle:
        handle.write(" ".join(cmdline))
    with open(os.path.join(envdir, "envvars"), "w", encoding="utf-8") as handle:
        json.dump({"ANSIBLE_COLLECTIONS_PATH": collections, "ANSIBLE_FORCE_COLOR": "0"}, handle)
    if ssh_key:
        with open(ssh_key, encoding="utf-8") as src, open(os.path.join(envdir, "ssh_key"), "w",
                                                           encoding="utf-8") as dst:
            dst.write(src.read())
        os.chmod(os.path.join(envdir, "ssh_key"), 0o600)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stage", required=True)
    parser.add_argument("--inventory", required=True)
    parser.add_argument("--collections", required=True, help="where the project sync installed the collections")
    parser.add_argument("--ssh-key", default="")
    parser.add_argument("--user", default="")
    parser.add_argument("--answers", default="{}", help="survey answers, JSON")
    parser.add_argument("--override", action="append", default=[], metavar="VAR=JSON",
                        help="a variable the test sets beyond AWX's launch (deploy: k8s_manifests_apply=false)")
    parser.add_argument("--expect-changed", type=int, default=None)
    parser.add_argument("--json-out", default="")
    parser.add_argument("--private-data-dir", default="", help="empty: a new temporary directory")
    args = parser.parse_args(argv)

    overrides = {}
    for item in args.override:
        key, _sep, value = item.partition("=")
        overrides[key] = json.loads(value)
    template, extravars, cmdline = job_inputs(args.stage, json.loads(args.answers), args.user, overrides)
    import ansible_runner  # pylint: disable=import-outside-toplevel

    private = args.private_data_dir or tempfile.mkdtemp(prefix=f"awx-job-{args.stage}-")
    build_private_data_dir(private, extravars, cmdline, args.inventory, args.ssh_key, args.collections)
    print(f"[awx_job] {template['name']}: {template['playbook']} extravars={sorted(extravars)} cmdline={cmdline}",
          flush=True)
    result = ansible_runner.run(private_data_dir=private, playbook=template["playbook"])
    totals = recap(result.stats)
    print(f"[awx_job] {template['name']}: status {result.status}, rc {result.rc}, recap {json.dumps(totals)}")
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as handle:
            json.dump({"stage": args.stage, "status": result.status, "rc": result.rc, "recap": totals}, handle)
    if result.rc != 0 or result.status != "successful":
        return 1
    if args.expect_changed is not None:
        changed = sum(h["changed"] for h in totals.values())
        if changed != args.expect_changed:
            print(f"[awx_job] expected {args.expect_changed} changed tasks, got {changed}: not idempotent")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
