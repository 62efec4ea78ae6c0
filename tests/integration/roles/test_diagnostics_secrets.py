# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The diagnostics role never reads the API key file and never shows what it gathers before redaction.

At ``-v`` (and in AWX's job events) a task's result is printed: a slurp of ``vllm.secret.env`` printed its
base64 content, and the journal or a vLLM log can hold vLLM's start-up line with its arguments.
"""

import fnmatch
import os

import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLE = os.path.join(ROOT, "roles", "diagnostics")


def _load(*parts):
    with open(os.path.join(*parts)) as handle:
        return yaml.safe_load(handle)


def _tasks(name):
    return {task["name"]: task for task in _load(ROLE, "tasks", name)}


def _secret_file_name():
    """The vllm_service role's API key file, as that role names it."""
    defaults = _load(ROOT, "roles", "vllm_service", "defaults", "main.yml")
    role_vars = _load(ROOT, "roles", "vllm_service", "vars", "main.yml")
    template = os.path.basename(role_vars["_vllm_service_secretfile"])
    return template.replace("{{ vllm_service_name }}", defaults["vllm_service_name"])


def test_the_api_key_file_is_never_read():
    patterns = _load(ROLE, "defaults", "main.yml")["diagnostics_secret_files"]
    name = _secret_file_name()
    assert name == "vllm.secret.env"
    assert any(fnmatch.fnmatch(name, pattern) for pattern in patterns)
    assert not any(fnmatch.fnmatch("vllm.yaml", pattern) for pattern in patterns)
    assert not any(fnmatch.fnmatch("vllm.env", pattern) for pattern in patterns)
    finds = [t for t in _load(ROLE, "tasks", "gather.yml") if "ansible.builtin.find" in t]
    readable = [t for t in finds if t["register"] == "_diagnostics_config_found"]
    assert readable and readable[0]["ansible.builtin.find"]["excludes"] == "{{ diagnostics_secret_files }}"


def test_what_holds_unredacted_text_is_no_log():
    gather = _load(ROLE, "tasks", "gather.yml")
    report = _load(ROLE, "tasks", "report.yml")
    by_register = {t.get("register"): t for t in gather}
    for register in ("_diagnostics_config", "_diagnostics_system", "_diagnostics_logs"):
        assert by_register[register].get("no_log") is True, register
    slurps = [t for t in gather + report if "ansible.builtin.slurp" in t]
    assert slurps and all(t.get("no_log") is True for t in slurps)
    texts = [t for t in report if "_diagnostics_texts" in (t.get("ansible.builtin.set_fact") or {})]
    assert texts and texts[0].get("no_log") is True
    writes = [t for t in report if "ansible.builtin.copy" in t and "item.value" in str(t["ansible.builtin.copy"])]
    assert writes and writes[0].get("diff") is False


def test_journal_and_logs_are_redacted():
    report = _load(ROLE, "tasks", "report.yml")
    texts = [t for t in report if "_diagnostics_texts" in (t.get("ansible.builtin.set_fact") or {})][0]
    body = texts["vars"]["_diagnostics_texts_new"]
    for source in ("_diagnostics_system.results", "_diagnostics_logs.results", "_diagnostics_config.results"):
        loop = body.split(source, 1)[1].split("endfor", 1)[0]
        assert "diagnose_redact" in loop, source


def test_argument_spec_matches_defaults():
    spec = _load(ROLE, "meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    defaults = _load(ROLE, "defaults", "main.yml")
    assert spec["diagnostics_secret_files"]["default"] == defaults["diagnostics_secret_files"]
