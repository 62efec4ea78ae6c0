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


STACK = {"vllm_ascend_version", "ascendai_bundle_url", "ascendai_bundle_dir"}
# What a role publishes for the others: its public facts (set_fact of a name with its own prefix, the way
# ascend_driver_plan, model_plan and api_front_endpoint are read through the role's own entry point) and its Ansible
# local facts (/etc/ansible/facts.d/<name>.fact, read as ansible_local.<name> in this run and in later ones).
# (written through ascendai.vllm._common's local_facts entry point: _common_local_facts_name)
_LOCAL_FACT_FILE = re.compile(r"/etc/ansible/facts\.d/([a-z][a-z0-9_]*)\.fact"
                              r"|_common_local_facts_name:\s*([a-z][a-z0-9_]*)")
_LOCAL_FACT_READ = re.compile(r"\bansible_local\s*(?:\.\s*([a-z_][a-z0-9_]*)|\[\s*['\"]([a-z_][a-z0-9_]*)['\"]\s*\])")


def _owner(var):
    """The role whose prefix a variable carries (the longest matching role name), or None."""
    owners = [role for role in ROLES if var.lstrip("_").startswith(f"{role}_")]
    return max(owners, key=len) if owners else None


def _public_facts(role):
    """The facts a role sets for the others: set_fact keys with its own prefix (not its private _<role>_ ones)."""
    names = set()
    for folder, _dirs, files in os.walk(os.path.join(ROOT, "roles", role, "tasks")):
        for name in files:
            with open(os.path.join(folder, name), encoding="utf-8") as handle:
                stack = [yaml.safe_load(handle)]
            while stack:
                node = stack.pop()
                if isinstance(node, dict):
                    facts = node.get("ansible.builtin.set_fact")
                    if isinstance(facts, dict):
                        names |= {k for k in facts if k.startswith(f"{role}_")}
                    stack.extend(node.values())
                elif isinstance(node, list):
                    stack.extend(node)
    return names


def _local_facts_written():
    """Every Ansible local fact a role writes: {fact name: role}."""
    written = {}
    for role in ROLES:
        for folder, _dirs, files in os.walk(os.path.join(ROOT, "roles", role, "tasks")):
            for name in files:
                with open(os.path.join(folder, name), encoding="utf-8") as handle:
                    for path_name, var_name in _LOCAL_FACT_FILE.findall(handle.read()):
                        written[path_name or var_name] = role
    return written


def _local_fact_reads(role):
    """(file, fact name) for every ansible_local.<name> a role's files read."""
    for sub in ("tasks", "vars", "defaults", "handlers", "templates", "meta"):
        for folder, _dirs, files in os.walk(os.path.join(ROOT, "roles", role, sub)):
            for name in files:
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8", errors="replace") as handle:
                    for m in _LOCAL_FACT_READ.finditer(handle.read()):
                        yield os.path.relpath(path, ROOT), m.group(1) or m.group(2)


def _cross_role_reads(role, reads, inputs, public):
    """What a role reads of another role: its inputs, its private variables, or a name with its prefix that it
    neither takes nor publishes. Reading another role's published facts, and ansible_local, is allowed."""
    found = set()
    for path, var in reads:
        if var in inputs[role] or var in STACK:
            continue
        for other in ROLES:
            if other in (role, "_common"):
                continue
            private = var.startswith(f"_{other}_") and _owner(var) == other
            unknown = var.startswith(f"{other}_") and _owner(var) == other and var not in public[other]
            if var in inputs[other] or private or unknown:
                found.add(f"{path} reads {var} of {other}")
    return found


def test_no_role_reads_another_roles_inputs_or_private_variables():
    """A role takes what another role decided as that role's output: a public fact it sets (through its entry
    point) or an Ansible local fact it writes on the node. The playbooks wire the rest."""
    inputs = {role: _inputs(role) for role in ROLES}
    public = {role: _public_facts(role) for role in ROLES}
    found = set()
    for role in ROLES:
        found |= _cross_role_reads(role, _reads(role), inputs, public)
    assert not found, "\n".join(sorted(found))


def test_every_local_fact_read_is_one_a_role_writes():
    written = _local_facts_written()
    assert {"ascendai_vllm_service", "ascendai_vllm"} <= set(written), written
    found = {f"{path} reads ansible_local.{fact}, which no role writes"
             for role in ROLES for path, fact in _local_fact_reads(role) if fact not in written}
    assert not found, "\n".join(sorted(found))
    readers = {fact for role in ROLES for _path, fact in _local_fact_reads(role)}
    assert set(written) <= readers, f"written and never read: {set(written) - readers}"


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


def _scan(role, text):
    reads = [("x.yml", v) for e in _expressions(yaml.safe_load(text)) for v in _NAME.findall(_STRING.sub("", e))]
    inputs = {r: _inputs(r) for r in ROLES}
    public = {r: _public_facts(r) for r in ROLES}
    return _cross_role_reads(role, reads, inputs, public)


def test_the_scanner_allows_an_output_and_finds_a_direct_read():
    """The outputs are allowed (a local fact, a public fact another role sets through its entry point); the same
    value read from the other role's input, private variable or an unpublished prefixed name is found."""
    assert not _scan("bench", "x: \"{{ ansible_local.ascendai_vllm_service.port | default(8000) }}\"")
    assert not _scan("bench", "x: \"{{ ansible_local['ascendai_vllm_service']['port'] }}\"")
    assert not _scan("preflight", "x: \"{{ ascend_driver_plan_npus }} {{ model_plan.dir }}\"")
    assert not _scan("vllm_service", "x: \"{{ api_front_endpoint.scheme | default('http') }}\"")
    assert not _scan("bench", "x: \"{{ vllm_service_endpoint.port | default(8000) }}\"")
    assert _scan("bench", "x: \"{{ vllm_service_port | default(8000) }}\"") == {
        "x.yml reads vllm_service_port of vllm_service"}
    assert _scan("preflight", "x: \"{{ ascend_driver_expected_npus }}\"") == {
        "x.yml reads ascend_driver_expected_npus of ascend_driver"}
    assert _scan("monitoring", "when: api_front_tls_certificate | length > 0") == {
        "x.yml reads api_front_tls_certificate of api_front"}
    assert _scan("preflight", "x: \"{{ _vllm_service_front_scheme }}\"") == {
        "x.yml reads _vllm_service_front_scheme of vllm_service"}
    assert _scan("monitoring", "x: \"{{ api_front_endpoint_scheme }}\"") == {
        "x.yml reads api_front_endpoint_scheme of api_front"}
    # a role's own prefixed names are its own, not those of a role whose name is a prefix of it, and the other way
    assert not _scan("vllm_service", "x: \"{{ vllm_service_port }} {{ _vllm_service_url }}\"")
    assert _scan("vllm", "x: \"{{ vllm_service_unknown }} {{ _vllm_service_url }}\"") == {
        "x.yml reads vllm_service_unknown of vllm_service", "x.yml reads _vllm_service_url of vllm_service"}


def test_a_local_fact_read_is_matched_with_the_file_written():
    reads = [m.group(1) or m.group(2) for m in _LOCAL_FACT_READ.finditer(
        "{{ ansible_local.ascendai_nothing.x }} {{ ansible_local['ascendai_vllm'].flavour }}")]
    assert reads == ["ascendai_nothing", "ascendai_vllm"]
    assert _LOCAL_FACT_FILE.findall("dest: /etc/ansible/facts.d/ascendai_vllm.fact") == [("ascendai_vllm", "")]
    assert _LOCAL_FACT_FILE.findall("_common_local_facts_name: ascendai_vllm") == [("", "ascendai_vllm")]
    assert "ascendai_nothing" not in _local_facts_written()


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


def _defaults(role):
    with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _endpoint_play(bench, **host):
    """An inventory that sets the service's variables; playbooks/bench.yml's pre-task (vllm_service's endpoint entry
    point), then the bench role's defaults as the role itself writes them."""
    shown = "{{ bench_base_url }} {{ bench_model }} {{ bench_service_config_dir }} {{ bench_service_name }}"
    play = [{"hosts": "localhost", "gather_facts": False, "vars": {k: bench[k] for k in (
        "bench_base_url", "bench_model", "bench_service_config_dir", "bench_service_name")}, "tasks": [
        _show(f"'{shown}'".replace("{{ ", "' ~ ").replace(" }}", " ~ '")),
        {"ansible.builtin.include_role": {"name": "ascendai.vllm.vllm_service", "tasks_from": "endpoint.yml"}},
        _show(f"'{shown}'".replace("{{ ", "' ~ ").replace(" }}", " ~ '")),
        _show("vllm_service_endpoint.scheme")]}]
    inventory = {"all": {"hosts": {"localhost": dict(host, ansible_connection="local")}}}
    return play, inventory


@pytest.mark.parametrize(("host", "before", "after", "scheme"), [
    # an inventory that moved the service: the benchmark follows, with nothing else set
    ({"vllm_service_port": 8001, "vllm_service_served_model_name": "m", "vllm_service_name": "svc",
      "vllm_service_config_dir": "/etc/svc"},
     "http://127.0.0.1:8000 deepseek /etc/ascendai/vllm vllm", "http://127.0.0.1:8001 m /etc/svc svc", "http"),
    # a front with a certificate: its scheme comes from api_front's own output, api_front_endpoint
    ({"vllm_service_api_key": "k3y-abcdefghijklmnop", "api_front_tls_certificate": "/etc/pki/front.pem",
      "api_front_tls_certificate_key": "/etc/pki/front.key"},
     "http://127.0.0.1:8000 deepseek /etc/ascendai/vllm vllm", "http://127.0.0.1:8000 deepseek /etc/ascendai/vllm vllm",
     "https"),
])
def test_bench_follows_the_service_through_its_endpoint(tmp_path, host, before, after, scheme):
    play, inventory = _endpoint_play(_defaults("bench"), **host)
    proc = run_playbook(tmp_path, play, inventory=inventory, connection=None, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert _shown(proc) == [before, after, scheme], proc.stdout[-3000:]


@pytest.mark.parametrize(("local", "want"), [
    ({"ascendai_vllm_service": {"unit": "svc.service"}}, "svc.service"),
    # a fresh node, or one served by an earlier release: vllm_service's default unit (stopped only if running)
    (None, "vllm.service"),
])
def test_the_driver_stops_the_unit_the_service_recorded(tmp_path, local, want):
    units = _defaults("ascend_driver")["ascend_driver_device_units"]
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": dict({"units": units}, **({"ansible_local": local} if local else {})),
             "tasks": [_show("units | first")]}]
    proc = run_playbook(tmp_path, play, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert _shown(proc) == [want]


@pytest.mark.parametrize(("given", "want"), [("", "/srv/models"), ("/data/elsewhere", "/data/elsewhere")])
def test_preflight_measures_where_the_model_role_puts_the_model(tmp_path, given, want):
    """preflight_model_dir empty: the model role's plan (its model_dir from the inventory), else the one given."""
    with open(os.path.join(ROOT, "roles", "preflight", "vars", "main.yml"), encoding="utf-8") as handle:
        measured = yaml.safe_load(handle)["_preflight_model_dir"]
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": {"preflight_model_dir": given, "measured": measured},
             "tasks": [{"ansible.builtin.include_role": {"name": "ascendai.vllm.model", "tasks_from": "plan.yml"}},
                       _show("measured")]}]
    inventory = {"all": {"hosts": {"localhost": {"ansible_connection": "local", "model_dir": "/srv/models"}}}}
    proc = run_playbook(tmp_path, play, inventory=inventory, connection=None, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert _shown(proc) == [want], proc.stdout[-3000:]
