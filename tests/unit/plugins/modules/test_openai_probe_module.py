"""Drive ascendai.vllm.openai_probe main() against the fake vLLM server (a real local HTTP server)."""

from __future__ import annotations

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.ascendai.vllm.plugins.modules import openai_probe

from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.fake_vllm import TOKENS, FakeVllm
from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.module_harness import (
    AnsibleExitJson, AnsibleFailJson, patch_exits)


@pytest.fixture(autouse=True)
def exits(monkeypatch):
    patch_exits(monkeypatch, keep_no_log=True)


@pytest.fixture
def server():
    with FakeVllm(served=["tiny"]) as fake:
        yield fake


def run(args):
    with patch_module_args(args), pytest.raises((AnsibleExitJson, AnsibleFailJson)) as exc:
        openai_probe.main()
    return exc.type, exc.value.args[0]


def test_bench_reports_and_passes_slo(server):
    server.first_token_delay = 0.1  # keep two requests in flight together
    kind, res = run({"base_url": server.base_url, "model": "tiny", "requests": 4, "concurrency": 2,
                     "max_tokens": 3, "slo_ttft_ms": 5000, "slo_tokens_per_s": 1, "extra_body": {"ignore_eos": True}})
    assert kind is AnsibleExitJson, res
    assert res["changed"] is False and res["mode"] == "bench" and res["endpoint"] == "/v1/completions"
    assert res["requests"] == 4 and res["succeeded"] == 4 and res["failed_requests"] == 0
    assert res["output_tokens"] == 12 and res["token_source"] == "usage"
    assert res["slo_ok"] is True and res["violations"] == []
    assert res["slo"] == {"ttft_ms": 5000.0, "ttft_stat": "p90", "tokens_per_s": 1.0, "max_error_rate": 0.0}
    assert len(res["per_request"]) == 4 and res["per_request"][0]["text"] == "".join(TOKENS[:3])
    assert all(body["ignore_eos"] is True for body in server.bodies)
    assert server.max_in_flight == 2


def test_slo_violation_fails_only_with_fail_on_slo(server):
    server.first_token_delay = 0.05
    args = {"base_url": server.base_url, "model": "tiny", "requests": 2, "max_tokens": 2, "slo_ttft_ms": 1,
            "return_requests": False}
    kind, res = run(args)
    assert kind is AnsibleExitJson and res["slo_ok"] is False
    assert res["violations"][0]["slo"] == "ttft_ms" and res["violations"][0]["measured"] >= 50
    assert "per_request" not in res
    kind, res = run(dict(args, fail_on_slo=True))
    assert kind is AnsibleFailJson
    assert res["msg"].startswith("SLO violated: time to first token p90 ") and res["msg"].endswith("ms > 1 ms")


def test_all_requests_failing_fails_with_the_first_error(server):
    server.behaviour = "http500"
    kind, res = run({"base_url": server.base_url, "model": "tiny", "requests": 3})
    assert kind is AnsibleFailJson
    assert res["failed_requests"] == 3 and res["errors_by_kind"] == {"http": 3}
    assert res["errors"][0]["status"] == 500
    assert "all 3 requests" in res["msg"] and "HTTP 500" in res["msg"]


def test_check_mode_still_measures(server):
    kind, res = run({"base_url": server.base_url, "model": "tiny", "requests": 2, "max_tokens": 2,
                     "_ansible_check_mode": True})
    assert kind is AnsibleExitJson and res["succeeded"] == 2 and res["changed"] is False
    assert len(server.bodies) == 2


def test_health_mode_ok_and_failure(server):
    kind, res = run({"mode": "health", "base_url": server.base_url + "/v1", "model": "tiny", "max_tokens": 3})
    assert kind is AnsibleExitJson and res["healthy"] is True and res["served_models"] == ["tiny"]
    assert res["checks"]["completion"]["text"] == "".join(TOKENS[:3])
    kind, res = run({"mode": "health", "base_url": server.base_url, "model": "deepseek"})
    assert kind is AnsibleFailJson and res["healthy"] is False
    assert "GET /v1/models lists ['tiny'], not the served name 'deepseek'" in res["msg"]


def test_api_key_is_sent_and_marked_no_log():
    with FakeVllm(api_key="k-123") as fake:
        kind, res = run({"mode": "health", "base_url": fake.base_url, "model": "tiny", "api_key": "k-123"})
        assert kind is AnsibleExitJson and fake.headers[-1]["Authorization"] == "Bearer k-123"
    assert "k-123" in res["_no_log_values"]  # Ansible masks it in every output


def test_bench_needs_model_and_sane_numbers(server):
    kind, res = run({"base_url": server.base_url})
    assert kind is AnsibleFailJson and "model" in res["msg"]
    kind, res = run({"base_url": server.base_url, "model": "tiny", "concurrency": 0})
    assert kind is AnsibleFailJson and res["msg"] == "concurrency=0: must be at least 1"
    kind, res = run({"base_url": "localhost:8000", "model": "tiny"})
    assert kind is AnsibleFailJson and "not an http:// or https:// URL" in res["msg"]


def test_input_len_sends_token_id_prompts_after_the_warmup(server):
    kind, res = run({"base_url": server.base_url, "model": "tiny", "requests": 3, "max_tokens": 2, "input_len": 16,
                     "vocab_size": 500, "warmup": 1, "return_requests": False})
    assert kind is AnsibleExitJson, res
    assert len(server.bodies) == 4 and all(len(b["prompt"]) == 16 for b in server.bodies)
    assert res["input_len"] == 16 and res["input_tokens"] == 48 and res["warmup_requests"] == 1


def test_input_len_needs_completions_and_a_vocab_size(server):
    kind, res = run({"base_url": server.base_url, "model": "tiny", "input_len": 16, "vocab_size": 500, "chat": True})
    assert kind is AnsibleFailJson and "only the completions API" in res["msg"]
    kind, res = run({"base_url": server.base_url, "model": "tiny", "input_len": 16})
    assert kind is AnsibleFailJson and "vocab_size" in res["msg"]
    assert server.bodies == []


def test_health_answers_fail_the_gate_with_the_answer(server):
    args = {"mode": "health", "base_url": server.base_url, "model": "tiny", "max_tokens": 2,
            "answers": [{"prompt": "What is the capital of France?", "expect": "Paris"}]}
    kind, res = run(args)
    assert kind is AnsibleExitJson, res
    assert res["checks"]["answers"][0]["ok"] is True and "pattern" not in res["checks"]["answers"][0]
    kind, res = run(dict(args, answers=[{"prompt": "What is 2+2?", "expect": r"\b4\b"}]))
    assert kind is AnsibleFailJson
    assert "chat 'What is 2+2?' at temperature 0 answered 'Paris." in res["msg"]


def test_bad_answers_fail_before_any_request(server):
    kind, res = run({"mode": "health", "base_url": server.base_url, "answers": [{"prompt": "x", "expect": "["}]})
    assert kind is AnsibleFailJson and res["msg"].startswith("answers[0].expect '[' is not a regular expression")
    assert server.bodies == []
    kind, res = run({"base_url": server.base_url, "model": "tiny", "answers": [{"prompt": "x", "expect": "y"}]})
    assert kind is AnsibleFailJson and res["msg"].startswith("answers is checked in mode=health only")


def _systemctl(monkeypatch, text, rc=0):
    """systemctl show answers text; the argv it was called with is kept."""
    calls = []

    def fake(self, argv, **kwargs):
        calls.append(argv)
        return rc, text, ""
    monkeypatch.setattr(openai_probe.AnsibleModule, "run_command", fake)
    return calls


CRASHING = "ActiveState=activating\nSubState=auto-restart\nResult=exit-code\nNRestarts=4\nExecMainStatus=1\n"


def test_health_gate_names_a_unit_that_fails_at_every_start(monkeypatch, server):
    calls = _systemctl(monkeypatch, CRASHING)
    kind, res = run({"mode": "health", "base_url": server.base_url, "model": "deepseek", "unit": "vllm.service"})
    assert kind is AnsibleFailJson and res["unit_stopped"] is True
    assert "vllm.service stopped and was restarted 4 times (more than 3)" in res["msg"]
    assert "journalctl -u vllm.service" in res["msg"] and res["unit_state"]["SubState"] == "auto-restart"
    assert calls[0][:3] == ["systemctl", "show", "vllm.service"] and "--property=NRestarts" in calls[0]


def test_health_gate_keeps_waiting_on_a_unit_that_is_starting(monkeypatch, server):
    _systemctl(monkeypatch, CRASHING.replace("NRestarts=4", "NRestarts=1"))
    kind, res = run({"mode": "health", "base_url": server.base_url, "model": "deepseek", "unit": "vllm.service"})
    assert kind is AnsibleFailJson and res["unit_stopped"] is False
    # systemctl failing (no systemd) is no reason to stop waiting either
    _systemctl(monkeypatch, "", rc=1)
    kind, res = run({"mode": "health", "base_url": server.base_url, "model": "deepseek", "unit": "vllm.service",
                     "unit_max_restarts": 0})
    assert kind is AnsibleFailJson and res["unit_stopped"] is False


def test_a_healthy_gate_does_not_ask_systemd(monkeypatch, server):
    calls = _systemctl(monkeypatch, CRASHING)
    kind, res = run({"mode": "health", "base_url": server.base_url, "model": "tiny", "max_tokens": 2,
                     "unit": "vllm.service"})
    assert kind is AnsibleExitJson and calls == [] and "unit_stopped" not in res
