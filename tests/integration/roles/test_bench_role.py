# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""playbooks/bench.yml honours the inventory; the bench and preflight roles' argument
specs match their defaults.

The benchmark's settings were play ``vars`` of bench.yml, which outrank inventory group_vars and host_vars, so
``bench_requests: 3`` in group_vars/ascend.yml was silently replaced by the play's 50. They are now the defaults of
the ``ascendai.vllm.bench`` role, the lowest precedence: inventory wins, ``-e`` still wins over both.
The service is tests/unit/plugins/test_support/fake_vllm.py; ``bench_vllm_serve: false`` (no vLLM on this machine).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

import pytest
import yaml

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import PLAYBOOK, ROOT, run_playbook
from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.fake_vllm import FakeVllm


def _run_bench(tmp_path, group_vars, host_vars=None, extra=None):
    """Run playbooks/bench.yml against localhost in the inventory group ``ascend``; the probe's report."""
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "host_vars").mkdir()
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"ascend": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    (inventory / "group_vars" / "ascend.yml").write_text(yaml.safe_dump(group_vars))
    if host_vars:
        (inventory / "host_vars" / "localhost.yml").write_text(yaml.safe_dump(host_vars))
    proc = run_playbook(tmp_path, pathlib.Path(ROOT, "playbooks", "bench.yml"), extra, timeout=300,
                        inventory=inventory, connection=None)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    reports = list((tmp_path / "reports").rglob("openai-probe.json"))
    assert len(reports) == 1, out[-4000:]
    meta = json.loads((reports[0].parent / "report.json").read_text())["meta"]
    return json.loads(reports[0].read_text()), meta, out


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
def test_bench_settings_in_group_vars_are_honoured(tmp_path):
    with FakeVllm() as fake:
        probe, meta, out = _run_bench(tmp_path, {
            "bench_base_url": fake.base_url, "bench_model": "tiny", "bench_vllm_serve": False,
            "bench_requests": 3, "bench_concurrency": 1, "bench_output_len": 4, "bench_warmup": 0,
            "bench_timeout": 30, "bench_report_dir": str(tmp_path / "reports")})
    # before: the play's bench_requests: 50 won over group_vars
    assert probe["requests"] == 3, out[-3000:]
    assert meta["requests"] == 3, meta
    assert probe["failed_requests"] == 0, probe


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
def test_host_vars_beat_group_vars_and_extra_vars_beat_both(tmp_path):
    with FakeVllm() as fake:
        group = {"bench_base_url": fake.base_url, "bench_model": "tiny", "bench_vllm_serve": False,
                 "bench_requests": 3, "bench_concurrency": 1, "bench_output_len": 4, "bench_warmup": 0,
                 "bench_timeout": 30, "bench_report_dir": str(tmp_path / "reports")}
        probe, meta, out = _run_bench(tmp_path, group, host_vars={"bench_requests": 2},
                                      extra={"bench_concurrency": 2})
    assert probe["requests"] == 2, out[-3000:]
    assert meta["concurrency"] == 2, meta


def test_bench_playbook_is_a_thin_wrapper():
    with open(os.path.join(ROOT, "playbooks", "bench.yml"), encoding="utf-8") as handle:
        plays = yaml.safe_load(handle)
    # first the bootstrap's probe (which Python the modules run with; it installs nothing), then the role alone
    assert len(plays) == 2
    assert plays[0]["tasks"][0]["ansible.builtin.include_role"]["tasks_from"] == "bootstrap.yml"
    assert "vars" not in plays[1]
    assert [r if isinstance(r, str) else r["role"] for r in plays[1]["roles"]] == ["ascendai.vllm.bench"]


@pytest.mark.parametrize("role", ["bench", "preflight"])
def test_argument_spec_matches_the_defaults(role):
    with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml"), encoding="utf-8") as handle:
        defaults = yaml.safe_load(handle)
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml"), encoding="utf-8") as handle:
        options = yaml.safe_load(handle)["argument_specs"]["main"]["options"]
    # the collection-wide inputs a role takes as role parameters: described once in _common, no default here
    wide = {name for name in options if not name.startswith(f"{role}_")}
    assert wide <= {"vllm_ascend_version", "ascendai_bundle_url", "ascendai_bundle_dir"}, wide
    assert all("default" not in options[name] for name in wide)
    options = {name: spec for name, spec in options.items() if name not in wide}
    assert list(options) == list(defaults)
    assert all(name.startswith(f"{role}_") for name in defaults)
    assert {name: spec.get("default") for name, spec in options.items()} == defaults
