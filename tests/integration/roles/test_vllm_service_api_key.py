# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""vllm_service: secure by default. Without vllm_service_api_key a server on a non-loopback address
gets a key generated on the first run and kept from then on (read back from the node's secret file), copied to
the controller in a 0600 file, and the run says where the key is, never what it is. Anonymous serving only on a
loopback bind or with vllm_service_allow_anonymous.

The role's own task files (api_key.yml, api_key_report.yml) run against local hosts, one per case."""

from __future__ import annotations

import json
import stat
import sys
import textwrap

import pytest

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import ROOT, run_playbook

KEPT = "kept-0123456789abcdefKEPT"
GIVEN = "given-s3cr3t-GIVEN-0123"

# host -> its variables (the secret file's directory is per host, under tmp_path)
CASES = {
    "fresh": {},
    "kept": {},
    "loopback": {"vllm_service_host": "127.0.0.1"},
    "loopback6": {"vllm_service_host": "::1"},
    "anonymous": {"vllm_service_allow_anonymous": True},
    "given": {"vllm_service_api_key": GIVEN},
    "nocopy": {"vllm_service_api_key_dir": ""},
}

PLAY = textwrap.dedent("""\
    - name: The vLLM service's API key
      hosts: all
      gather_facts: false
      tasks:
        - name: Choose the key
          ansible.builtin.include_role:
            name: ascendai.vllm.vllm_service
            tasks_from: api_key.yml

        - name: Write the node's key file as configure.yml does (not in check mode)
          ansible.builtin.copy:
            content: "VLLM_API_KEY={{ _vllm_service_api_key }}\\n"
            dest: "{{ vllm_service_config_dir }}/vllm.secret.env"
            mode: "0600"
          when: _vllm_service_api_key | length > 0 and not ansible_check_mode
          no_log: true

        - name: Copy the key to the controller and say where it is
          ansible.builtin.include_role:
            name: ascendai.vllm.vllm_service
            tasks_from: api_key_report.yml

        - name: Record what the role decided
          ansible.builtin.copy:
            content: "{{ {'source': _vllm_service_key_source, 'key': _vllm_service_api_key,
                          'report': _vllm_service_api_key_report.msg} | to_json }}"
            dest: "{{ result_dir }}/{{ inventory_hostname }}.json"
            mode: "0600"
          check_mode: false
          no_log: true
    """)


def _run(tmp_path, *extra):
    inventory = {"all": {"hosts": {}}}
    for host, hostvars in CASES.items():
        confdir = tmp_path / "node" / host
        confdir.mkdir(parents=True, exist_ok=True)
        inventory["all"]["hosts"][host] = dict(
            hostvars, ansible_connection="local", ansible_python_interpreter=sys.executable,
            vllm_service_config_dir=str(confdir), result_dir=str(tmp_path / "result"))
        inventory["all"]["hosts"][host].setdefault("vllm_service_api_key_dir", str(tmp_path / "ctl" / "keys"))
    (tmp_path / "result").mkdir(exist_ok=True)
    proc = run_playbook(tmp_path, PLAY, timeout=300, inventory=inventory, connection=None, args=["-v", *extra],
                        cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = {host: json.loads((tmp_path / "result" / f"{host}.json").read_text()) for host in CASES}
    return proc.stdout + proc.stderr, results


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("api_key")
    (tmp_path / "node" / "kept").mkdir(parents=True)
    (tmp_path / "node" / "kept" / "vllm.secret.env").write_text(f"VLLM_API_KEY={KEPT}\n")
    check_out, check = _run(tmp_path, "--check")
    check_files = sorted(p.name for p in (tmp_path / "ctl").rglob("*")) if (tmp_path / "ctl").exists() else []
    first_out, first = _run(tmp_path)
    second_out, second = _run(tmp_path)
    return {"tmp": tmp_path, "check": check, "check_files": check_files, "first": first, "second": second,
            "out": check_out + first_out + second_out}


def test_no_key_on_a_public_address_generates_one(runs):
    fresh = runs["first"]["fresh"]
    assert fresh["source"] == "generated"
    assert len(fresh["key"]) == 43 and fresh["key"].isalnum()
    node = (runs["tmp"] / "node" / "fresh" / "vllm.secret.env").read_text()
    assert node == f"VLLM_API_KEY={fresh['key']}\n"


def test_the_key_is_kept_on_later_runs(runs):
    assert runs["second"]["fresh"]["key"] == runs["first"]["fresh"]["key"]
    assert "kept from an earlier run" in runs["second"]["fresh"]["report"]
    assert "generated on this run" in runs["first"]["fresh"]["report"]
    assert runs["first"]["kept"]["key"] == KEPT and runs["first"]["kept"]["source"] == "generated"


def test_the_controller_keeps_a_private_copy(runs):
    keys = runs["tmp"] / "ctl" / "keys"
    copy = keys / "fresh-vllm.key"
    assert copy.read_text() == runs["first"]["fresh"]["key"] + "\n"
    assert stat.S_IMODE(copy.stat().st_mode) == 0o600
    assert stat.S_IMODE(keys.stat().st_mode) == 0o700
    assert (keys / "kept-vllm.key").read_text() == KEPT + "\n"
    # A given (vaulted) key, a loopback bind, anonymous serving and an empty key dir leave no copy.
    assert sorted(p.name for p in keys.iterdir()) == ["fresh-vllm.key", "kept-vllm.key"]


def test_the_report_says_where_never_what(runs):
    report = runs["first"]["fresh"]["report"]
    assert str(runs["tmp"] / "node" / "fresh" / "vllm.secret.env") in report
    assert str(runs["tmp"] / "ctl" / "keys" / "fresh-vllm.key") in report
    assert "controller" not in runs["first"]["nocopy"]["report"]
    for run in ("first", "second"):
        for result in runs[run].values():
            assert not result["key"] or result["key"] not in result["report"]
    for secret in (runs["first"]["fresh"]["key"], KEPT, GIVEN):
        assert secret not in runs["out"], "a key appeared in ansible-playbook -v output"


@pytest.mark.parametrize("host, source", [("loopback", "loopback"), ("loopback6", "loopback"),
                                          ("anonymous", "anonymous"), ("given", "given")])
def test_anonymous_only_on_loopback_or_by_choice(runs, host, source):
    result = runs["first"][host]
    assert result["source"] == source
    assert result["key"] == (GIVEN if source == "given" else "")
    assert not (runs["tmp"] / "node" / host / "vllm.secret.env").exists() or source == "given"
    if source == "anonymous":
        assert "WITHOUT an API key" in result["report"]


def test_check_mode_on_a_fresh_node_works_and_writes_nothing(runs):
    assert runs["check"]["fresh"]["source"] == "generated"
    assert "would be generated (check mode)" in runs["check"]["fresh"]["report"]
    assert runs["check_files"] == []
