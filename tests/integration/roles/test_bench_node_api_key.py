# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""playbooks/bench.yml without vllm_service_api_key uses the key vllm_service generated on the node (vllm_service
is secure by default): the service answers 401 without it, so the benchmark would measure only refusals."""

from __future__ import annotations

import json
import os
import pathlib
import sys

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import ROOT, run_playbook
from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.fake_vllm import FakeVllm

KEY = "Gen3rated0Key0On0The0Node0abcdefghijklmnopq"


def test_bench_reads_the_generated_key_from_the_node(tmp_path):
    confdir = tmp_path / "etc"
    confdir.mkdir()
    (confdir / "vllm.secret.env").write_text(f"VLLM_API_KEY={KEY}\n")
    (confdir / "vllm.secret.env").chmod(0o600)
    with FakeVllm(api_key=KEY) as fake:
        extra = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                 # as root without sudo on the test machine; a real node uses the inventory's become method
                 "ansible_become_method": "ansible.builtin.su",
                 "vllm_service_config_dir": str(confdir), "bench_base_url": fake.base_url, "bench_model": "tiny",
                 "bench_requests": 2, "bench_concurrency": 1, "bench_output_len": 4, "bench_vllm_serve": False,
                 "bench_timeout": 30, "bench_report_dir": str(tmp_path / "reports")}
        playbook = pathlib.Path(os.environ.get("ASCENDAI_TEST_BENCH", os.path.join(ROOT, "playbooks", "bench.yml")))
        proc = run_playbook(tmp_path, playbook, dict(extra, bench_hosts="localhost"), timeout=300, connection=None,
                            args=["-v"], cwd=ROOT)
        sent = list(fake.headers)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    reports = list((tmp_path / "reports").rglob("openai-probe.json"))
    assert len(reports) == 1, out
    probe = json.loads(reports[0].read_text())
    assert probe["failed_requests"] == 0, probe
    assert any(h.get("Authorization") == f"Bearer {KEY}" for h in sent if h), sent[:3]
    assert KEY not in out
