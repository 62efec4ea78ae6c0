"""One stack decision: vllm_ascend_version takes one path, the input, ascendai._common's stack entry point, the fact
ascendai_stack, its consumers (ascend_cann, vllm, k8s_manifests, preflight through vllm's compat entry point, the
AWX preflight); and no role reads another role's inputs or private variables."""

from __future__ import annotations

import os
import re

import pytest
import yaml
from ansible_collections.ascendai.vllm.plugins.filter.compat_stack import compat_stack
from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import run_playbook

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLES = sorted(d for d in os.listdir(os.path.join(ROOT, "roles")) if os.path.isdir(os.path.join(ROOT, "roles", d)))


def _inputs(role):
    """The variables a role declares: its defaults and the options of every entry point of its argument spec."""
    names = set()
    path = os.path.join(ROOT, "roles", role, "defaults", "main.yml")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            names |= set((yaml.safe_load(handle) or {}).keys())
    path = os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            for entry in (yaml.safe_load(handle)["argument_specs"] or {}).values():
                names |= set((entry.get("options") or {}).keys())
    return names


_JINJA = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.S)
_STRING = re.compile(r"'[^']*'|\"[^\"]*\"")
# a name read in an expression: not an attribute (.name) and not a keyword argument (name=...)
_NAME = re.compile(r"(?<![.\w])_?[a-z][a-z0-9_]*\b(?!\s*=[^=])")
_BARE = ("when", "that", "failed_when", "changed_when", "until", "loop")


def _expressions(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _BARE:
                yield from (x for x in (value if isinstance(value, list) else [value]) if isinstance(x, str))
            else:
                yield from _expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from _expressions(item)
    elif isinstance(node, str):
        yield from (m.group(1) or m.group(2) for m in _JINJA.finditer(node))


def _reads(role):
    """(file, name) for every variable name a role's tasks, vars, defaults, handlers and templates read."""
    for sub in ("tasks", "vars", "defaults", "handlers", "templates"):
        top = os.path.join(ROOT, "roles", role, sub)
        for folder, _dirs, files in os.walk(top):
            for name in files:
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8", errors="replace") as handle:
                    text = handle.read()
                if sub != "templates" and name.endswith((".yml", ".yaml")):
                    exprs = list(_expressions(yaml.safe_load(text)))
                else:
                    exprs = [m.group(1) or m.group(2) for m in _JINJA.finditer(text)]
                for expr in exprs:
                    for var in _NAME.findall(_STRING.sub("", expr)):
                        yield os.path.relpath(path, ROOT), var


# Reads of another role's input that remain, each on purpose: a default that follows the same setting of the role
# it works beside, so that one inventory for site.yml configures both (the role runs without that role too).
FOLLOWS = {
    ("ascend_driver", "vllm_service_name"): "stops the service that holds the NPUs before a driver upgrade",
    ("bench", "vllm_service_api_key"): "benchmarks the service as the inventory configures it",
    ("bench", "vllm_service_config_dir"): "reads the key file where the service writes it",
    ("bench", "vllm_service_model_path"): "the tokenizer of the model the service serves",
    ("bench", "vllm_service_name"): "the key file's name",
    ("bench", "vllm_service_port"): "the service's port",
    ("bench", "vllm_service_served_model_name"): "the served model name",
    ("bench", "vllm_service_venv"): "vllm bench from the service's venv",
    ("model", "vllm_flavour"): "the model checks that apply to the CPU build only",
    ("monitoring", "api_front_tls_certificate"): "scrapes the front over https when it has a certificate",
    ("vllm_service", "api_front_tls_certificate"): "its health gate speaks https to a front with a certificate",
    ("preflight", "model_dir"): "the free space where the model goes",
    ("preflight", "ascend_driver_expected_npus"): "the NPU count the driver role expects",
}
STACK = {"vllm_ascend_version", "ascendai_bundle_url", "ascendai_bundle_dir"}


def test_no_role_reads_another_roles_inputs_or_private_variables():
    inputs = {role: _inputs(role) for role in ROLES}
    found = set()
    for role in ROLES:
        for path, var in _reads(role):
            for other in ROLES:
                if other in (role, "_common") or var in inputs[role] or var in STACK:
                    continue
                private = var.startswith(f"_{other}_") and not var.startswith(f"_{role}_") and not any(
                    var.startswith(f"_{longer}_") for longer in ROLES if len(longer) > len(other))
                if (var in inputs[other] and (role, var) not in FOLLOWS) or private:
                    found.add(f"{path} reads {var} of {other}")
    assert not found, "\n".join(sorted(found))


def _options(role):
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        entries = yaml.safe_load(handle)["argument_specs"].values()
    return {name: spec for entry in entries for name, spec in (entry.get("options") or {}).items()}


@pytest.mark.parametrize("name", sorted(STACK))
def test_the_collection_wide_inputs_are_described_once(name):
    """_common describes them; a role that takes them as role parameters (its argument spec must list them, or
    ansible refuses the parameter) points there instead of carrying a copy of the text."""
    described = []
    for role in ROLES:
        spec = _options(role).get(name)
        if spec is None:
            continue
        text = " ".join(spec["description"]) if isinstance(spec["description"], list) else spec["description"]
        if role == "_common":
            assert len(text) > 200, text
        else:
            assert "described once in the internal role ascendai.vllm._common" in text, role
            assert "default" not in spec, role
            described.append(role)
    assert described, name


def test_the_scanner_sees_a_read_of_another_roles_input():
    """The check above cannot pass by seeing nothing: the old vllm release choice read ascend_cann's output by
    name and the CANN role read vllm_ascend_version; a read of a declared input is found, a kwarg is not."""
    exprs = list(_expressions({"when": ["ascend_cann_version | length > 0"],
                               "msg": "{{ x | f(vllm_version=1) }} {{ ascend_driver_version }}"}))
    names = {v for e in exprs for v in _NAME.findall(_STRING.sub("", e))}
    assert {"ascend_cann_version", "ascend_driver_version"} <= names and "vllm_version" not in names


def _stack_play(tasks, pre=None):
    return [{"hosts": "localhost", "gather_facts": True, "tasks": (pre or []) + tasks}]


# A stack decided before the roles run (v0.11.0's row: CANN 8.3.RC2, vLLM 0.11.0), asked for with an empty
# vllm_ascend_version: the default would be another release, so a role that decides its own shows it.
_PRESET = [{"name": "preset", "ansible.builtin.set_fact": {
    "ascendai_stack": "{{ '0.11.0' | ascendai.vllm.compat_stack | combine({'asked': ''}) }}"}}]


def _show(expr):
    return {"name": "show", "ansible.builtin.debug": {"msg": "SHOW={{ " + expr + " }}="}}


def _shown(proc):
    return re.findall(r"SHOW=(.*?)=", proc.stdout)


@pytest.mark.parametrize(("role", "entry", "expr", "want"), [
    ("ascend_cann", "release", "ascend_cann_release_version", "8.3.RC2"),
    ("vllm", "compat", "_vllm_ascend_release", "0.11.0"),
])
def test_each_consumer_reads_the_fact(tmp_path, role, entry, expr, want):
    tasks = [{"ansible.builtin.include_role": {"name": f"ascendai.vllm.{role}", "tasks_from": entry, "public": True},
              "vars": {"vllm_flavour": "ascend"}}, _show(expr)]
    proc = run_playbook(tmp_path, _stack_play(tasks, _PRESET), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert _shown(proc) == [want], proc.stdout[-3000:]
    assert "Set ascendai_stack" in proc.stdout and not re.search(r"Set ascendai_stack\] \*+\nok:", proc.stdout)


def test_the_stack_is_decided_once_per_host(tmp_path):
    """ascend_cann, then vllm in the same play: one glibc probe, one decision (getconf counts its calls)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    calls = tmp_path / "calls"
    (fake / "getconf").write_text(f"#!/bin/sh\necho x >> {calls}\necho 'glibc 2.28'\n")
    (fake / "getconf").chmod(0o755)
    tasks = [{"ansible.builtin.include_role": {"name": "ascendai.vllm.ascend_cann", "tasks_from": "release"}},
             {"ansible.builtin.include_role": {"name": "ascendai.vllm.vllm", "tasks_from": "compat", "public": True},
              "vars": {"vllm_flavour": "ascend"}},
             _show("ascendai_stack.vllm_ascend ~ '/' ~ ascend_cann_release_version ~ '/' ~ _vllm_ascend_release")]
    play = [{"hosts": "localhost", "gather_facts": True, "environment": {"PATH": f"{fake}:{os.environ['PATH']}"},
             "tasks": tasks}]
    proc = run_playbook(tmp_path, play, extra_vars={"_common_stack_arch": "aarch64"}, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    # Kylin V10's glibc 2.28: v0.18.0 and CANN 8.5.1 (compat_matrix.default_release)
    assert _shown(proc) == ["0.18.0/8.5.1/0.18.0"], proc.stdout[-3000:]
    assert calls.read_text().count("x") == 1


def test_a_changed_input_decides_again(tmp_path):
    tasks = [{"ansible.builtin.include_role": {"name": "ascendai.vllm.ascend_cann", "tasks_from": "release"},
              "vars": {"vllm_ascend_version": "0.9.1"}}, _show("ascend_cann_release_version")]
    proc = run_playbook(tmp_path, _stack_play(tasks, _PRESET), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert _shown(proc) == ["8.2.RC1"]


def _cann_choice(tmp_path, **role_vars):
    tasks = [{"ansible.builtin.include_role": {"name": "ascendai.vllm.ascend_cann", "tasks_from": "release"},
              "vars": role_vars}, _show("ascend_cann_release_version")]
    proc = run_playbook(tmp_path, _stack_play(tasks), timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return _shown(proc)[0], " ".join(proc.stdout.split())


def test_cann_follows_the_release(tmp_path):
    bundle = tmp_path / "bundle"
    wheels = bundle / "wheels" / os.uname().machine
    wheels.mkdir(parents=True)
    common = {"ascendai_bundle_dir": str(bundle)}
    # a pinned release: its row's CANN (v0.11.0: 8.3.RC2)
    assert _cann_choice(tmp_path, vllm_ascend_version="0.11.0", **common)[0] == "8.3.RC2"
    # nothing pinned, nothing bundled: the default release's CANN
    assert _cann_choice(tmp_path, **common)[0] == compat_stack("")["cann"]
    # nothing pinned: the newest final release among the bundled ones (v0.18.0: CANN 8.5.1)
    (wheels / "vllm_ascend-0.18.0-cp311-cp311-manylinux_2_24_aarch64.whl").write_bytes(b"")
    chosen, out = _cann_choice(tmp_path, **common)
    assert chosen == "8.5.1"
    assert "among the bundled releases (0.18.0)" in out
    # a bundle URL cannot be listed: any release
    assert _cann_choice(tmp_path, ascendai_bundle_url="http://192.0.2.1:1", **common)[0] == compat_stack("")["cann"]
    # asked for: kept, and said to be outside the row
    chosen, out = _cann_choice(tmp_path, vllm_ascend_version="0.11.0", ascend_cann_version="8.2.RC1", **common)
    assert chosen == "8.2.RC1"
    assert "not the CANN of vllm-ascend 0.11.0's row (8.3.RC2)" in out


def test_the_bundle_decides_through_the_same_filter():
    with open(os.path.join(ROOT, "roles", "offline_bundle", "tasks", "preflight.yml"), encoding="utf-8") as handle:
        text = handle.read()
    assert "ascendai.vllm.compat_stack(" in text and "'latest' | ascendai.vllm.compat_row" not in text
    for role in ROLES:
        for path, var in _reads(role):
            assert var != "_vllm_ascend_release" or role == "vllm", path
    # the AWX preflight read the vllm role's private choice; the playbooks read the fact
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "playbooks")):
        for name in files:
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                assert "_vllm_ascend_release" not in handle.read(), name


def test_one_release_decides_the_stack_by_default():
    with open(os.path.join(ROOT, "roles", "ascend_cann", "defaults", "main.yml"), encoding="utf-8") as handle:
        assert yaml.safe_load(handle)["ascend_cann_version"] == ""
    with open(os.path.join(ROOT, "roles", "k8s_manifests", "defaults", "main.yml"), encoding="utf-8") as handle:
        assert yaml.safe_load(handle)["k8s_manifests_image"] == ""
    with open(os.path.join(ROOT, "roles", "offline_bundle", "defaults", "main.yml"), encoding="utf-8") as handle:
        assert yaml.safe_load(handle)["offline_bundle_vllm_ascend_version"] == ""
