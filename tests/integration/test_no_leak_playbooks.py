# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The -vvv no-leak run (tests/tools/no_leak_run.py) against this machine: ansible-runner as AWX runs it, with an
API key, a bundle password (in ascendai_bundle_url) and an HF token planted. Molecule default runs it against a
deployed sandbox node; here the playbooks that can run on a machine that is no Ascend node run against localhost
(bench.yml with a stand-in vllm bench serve, so the key really reaches it; pd.yml up to its ranks, on two local
nodes), and a playbook that prints every secret on purpose shows that each one would be found."""

from __future__ import annotations

import json
import os
import re
import socket
import sys

import pytest
import yaml

from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.fake_vllm import FakeVllm

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
import no_leak_run  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PLANTED = {"API key": "sk-noleak-" + "a1" * 16, "bundle password": "bundlepw-noleak-" + "b2" * 16,
           "HF token": "hf_noleak" + "c3" * 16}
BUNDLE = "http://127.0.0.1:9/bundle"

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(os.path.dirname(sys.executable), "ansible-playbook")),
                                reason="the toolchain venv has no ansible-playbook")

# vllm bench serve as the bench role runs it: the detection answers with the flags of a 0.11-like release; the
# benchmark writes down the OPENAI_API_KEY it got and a small result.
FAKE_PYTHON = """#!%(python)s
import json, os, sys
args = sys.argv[1:]
if args[:1] == ["-c"] and "BENCH-DETECT" in args[1]:
    options = {o: None for o in %(options)r}
    options["--backend"] = ["openai"]
    print("BENCH-DETECT " + json.dumps({"vllm": "0.11.0", "module": True, "options": options, "error": None,
                                        "vocab_size": None}))
    sys.exit(0)
with open(%(seen)r, "w") as handle:
    handle.write(os.environ.get("OPENAI_API_KEY", "<unset>"))
result = os.path.join(args[args.index("--result-dir") + 1], args[args.index("--result-filename") + 1])
with open(result, "w") as handle:
    json.dump({"completed": 2, "failed": 0, "num_prompts": 2, "max_concurrency": 1, "duration": 1.0,
               "total_input_tokens": 8, "total_output_tokens": 8, "output_throughput": 8.0,
               "mean_ttft_ms": 1.0, "median_ttft_ms": 1.0, "p90_ttft_ms": 1.0, "p99_ttft_ms": 1.0}, handle)
"""


@pytest.fixture(name="env")
def _env(tmp_path, monkeypatch):
    monkeypatch.setattr(no_leak_run, "planted_secrets", lambda: dict(PLANTED))
    monkeypatch.setenv("ANSIBLE_COLLECTIONS_PATH", os.path.join(ROOT, ".cache", "collections"))
    monkeypatch.setenv("ANSIBLE_NOCOLOR", "1")
    monkeypatch.setenv("ANSIBLE_LOCALHOST_WARNING", "0")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    # ansible-runner starts ansible-playbook from PATH: this venv's
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"ascend": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        # as root without sudo on the test machine; a real node uses the inventory's become method
        "ansible_become_method": "ansible.builtin.su"}}}}))
    return inventory


def _vars(tmp_path, values):
    path = tmp_path / "more.json"
    path.write_text(json.dumps(values))
    return str(path)


def test_bench_at_vvv_hands_the_key_to_vllm_bench_and_shows_it_nowhere(tmp_path, env, capsys):
    seen = tmp_path / "seen-key"
    fake_python = tmp_path / "python"
    fake_python.write_text(FAKE_PYTHON % {"python": sys.executable, "options": list(no_leak_run_options()),
                                          "seen": str(seen)})
    fake_python.chmod(0o755)
    with FakeVllm() as fake:
        more = {"bench_base_url": fake.base_url, "bench_model": "tiny", "bench_requests": 2, "bench_concurrency": 1,
                "bench_output_len": 4, "bench_input_len": 4, "bench_timeout": 30, "bench_vllm_python": str(fake_python),
                "bench_tokenizer": str(tmp_path), "bench_report_dir": str(tmp_path / "reports"),
                # the bench role's own input: no service was deployed here, so there is no key file of the
                # service for it to read (what it does after site.yml)
                "bench_api_key": PLANTED["API key"]}
        rc = no_leak_run.main(["--inventory", str(env), "--playbook", "bench.yml", "--bundle-url", BUNDLE,
                               "--extra-vars-file", _vars(tmp_path, more)])
        sent = list(fake.headers)
    out = capsys.readouterr()
    assert rc == 0, out.out + out.err
    assert seen.read_text() == PLANTED["API key"], "vllm bench serve did not get the key"
    assert any(h.get("Authorization") == "Bearer " + PLANTED["API key"] for h in sent if h), sent[:3]
    assert not list(tmp_path.rglob("api-key")), "the key file outlived the run"


def no_leak_run_options():
    from ansible_collections.ascendai.vllm.plugins.module_utils._bench_report import REQUIRED_OPTIONS

    return REQUIRED_OPTIONS


def test_playbooks_that_run_on_any_machine_leak_nothing_at_vvv(tmp_path, env, capsys):
    """Multinode (one host: the bootstrap probe, then nothing), the Kubernetes job template (rendering only) and
    preflight, which refuses this machine (no Kunpeng, no NPU) after it has gathered and compared everything."""
    rc = no_leak_run.main(["--inventory", str(env), "--bundle-url", BUNDLE,
                           "--playbook", "multinode.yml", "--playbook", "awx/deploy_k8s.yml",
                           "--playbook", "preflight.yml", "--check", "preflight.yml", "--may-fail", "preflight.yml"])
    out = capsys.readouterr()
    assert rc == 0, out.out + out.err
    assert "AWX ascendai.vllm 3 deploy the model (Kubernetes) (awx/deploy_k8s.yml) -vvv: rc=0" in out.out, out.out


def test_pd_up_to_its_ranks_leaks_nothing_at_vvv(tmp_path, env, capsys, monkeypatch):
    """playbooks/pd.yml. no_leak_run.py plans only what a single-node inventory can run, so it leaves pd.yml out
    (tests/tools/no_leak_run.py, and its unit test); here pd.yml runs under the name site.yml from a playbook
    directory of its own, in check mode, on two local nodes (the prefill and the decode node are both this machine),
    with the planted API key as the ranks' key (vllm_pd_api_key) and the stack plays skipped (ANSIBLE_SKIP_TAGS: this
    machine is no Ascend node). What runs: the preflight play (kv ports; the NPU checks are skipped for
    NixlConnector), then the ranks' play, which takes the key and stops where it needs the installed vLLM (its venv
    check: --may-fail); the proxy's play then has no host. The ranks' units, their env files and the proxy are the
    Molecule pd scenario's (it deploys them and checks the key on every route)."""
    playbooks = tmp_path / "pd-playbooks"
    (playbooks / "awx").mkdir(parents=True)
    (playbooks / "awx" / "job_templates.yml").write_text("awx_job_templates: []\n")
    (playbooks / "site.yml").write_text(yaml.safe_dump([{"ansible.builtin.import_playbook": os.path.join(
        ROOT, "playbooks", "pd.yml")}]))
    node = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "ansible_become_method": "ansible.builtin.su"}
    inventory = tmp_path / "pd-hosts.yml"
    inventory.write_text(yaml.safe_dump({"pd_prefill": {"hosts": {"pd-p1": node}},
                                         "pd_decode": {"hosts": {"pd-d1": node}},
                                         "pd_proxy": {"hosts": {"pd-p1": None}}}))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        kv = sock.getsockname()[1]
    layout = {"connector": "NixlConnector",
              "prefill": {"dp": 1, "tp": 1, "hosts": [{"host": "pd-p1", "address": "127.0.0.1", "dp_ranks": [0]}]},
              "decode": {"dp": 1, "tp": 1, "hosts": [{"host": "pd-d1", "address": "127.0.0.1", "dp_ranks": [0]}]},
              "api_port": {"prefill": 18100, "decode": 18200}, "kv_port": {"prefill": kv, "decode": kv - 1},
              "proxy": {"host": "127.0.0.1", "port": 18000}}
    more = {"pd_layout": layout, "preflight_pd_kv_timeout": 3, "vllm_pd_model_path": str(tmp_path),
            "vllm_pd_served_model_name": "tiny", "vllm_pd_api_key": "{{ vllm_service_api_key }}"}
    monkeypatch.setenv("ANSIBLE_SKIP_TAGS", "pd_stack")
    rc = no_leak_run.main(["--inventory", str(inventory), "--bundle-url", BUNDLE, "--playbook-dir", str(playbooks),
                           "--playbook", "site.yml", "--check", "site.yml", "--may-fail", "site.yml", "--keep",
                           "--extra-vars-file", _vars(tmp_path, more)])
    out = capsys.readouterr()
    assert rc == 0, out.out + out.err
    kept = re.search(r"runner directory kept: (\S+)", out.out).group(1)
    stdout = "".join(open(os.path.join(folder, "stdout"), encoding="utf-8").read()
                     for folder in (os.path.join(kept, "runner", "artifacts", d)
                                    for d in os.listdir(os.path.join(kept, "runner", "artifacts")))
                     if os.path.exists(os.path.join(folder, "stdout")))
    # the preflight passed, and the ranks' play got past its key check (it stops at the venv this machine lacks)
    assert "pd-d1 reaches 1 kv port(s) of the other role" in stdout, stdout[-4000:]
    assert "Check the model, its served name and the API key" in stdout, stdout[-4000:]
    assert "is missing: install vLLM first" in stdout, stdout[-4000:]


def test_a_playbook_that_prints_the_secrets_is_caught(tmp_path, env, capsys):
    """The control: a site.yml that leaks each secret (in a URL, in base64, in an environment: at -vvv) must fail
    the run with each kind named. Without this, a search that sees nothing would pass everything."""
    playbooks = tmp_path / "playbooks"
    (playbooks / "awx").mkdir(parents=True)
    (playbooks / "awx" / "job_templates.yml").write_text("awx_job_templates: []\n")
    (playbooks / "site.yml").write_text(yaml.safe_dump([{
        "name": "Leak", "hosts": "ascend", "gather_facts": False, "tasks": [
            {"name": "The key through environment:, as the bench role did",
             "ansible.builtin.command": {"argv": ["true"]},
             "environment": {"OPENAI_API_KEY": "{{ vllm_service_api_key }}"},
             "no_log": True, "changed_when": False},
            {"name": "The bundle URL", "ansible.builtin.set_fact": {"leaked_url": "{{ ascendai_bundle_url }}"}},
            {"name": "The HF token in base64", "ansible.builtin.debug": {"msg": "{{ hf_token | b64encode }}"}}]}]))
    rc = no_leak_run.main(["--inventory", str(env), "--bundle-url", BUNDLE, "--playbook-dir", str(playbooks),
                           "--playbook", "site.yml"])
    err = capsys.readouterr().err
    assert rc == 1
    for kind in PLANTED:
        assert "the %s is in " % kind in err, err
    assert "control" not in err, err
