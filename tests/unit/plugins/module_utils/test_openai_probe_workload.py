"""openai_probe runs vllm bench serve's workload: token-id prompts of input_len, warm-up not measured,
prompt tokens as the server counted them."""

from __future__ import annotations

import pytest
from ansible_collections.ascendai.vllm.plugins.module_utils._openai_probe import (
    Endpoint,
    build_payload,
    random_token_prompts,
    run_probe,
)
from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.fake_vllm import FakeVllm


@pytest.fixture
def server():
    with FakeVllm(served=["tiny"]) as fake:
        yield fake


def test_each_request_sends_its_own_token_id_prompt_and_counts_prompt_tokens(server):
    prompts = random_token_prompts(4, 32, 1000, seed=0)
    payload = build_payload("tiny", "ignored", 8, extra_body={"ignore_eos": True, "temperature": 0.0})
    per_request, summary = run_probe(Endpoint(server.base_url, timeout=10), payload, requests=4, concurrency=2,
                                     prompts=prompts)
    sent = sorted((b["prompt"] for b in server.bodies), key=prompts.index)
    assert sent == prompts
    assert all(b["temperature"] == 0.0 and b["ignore_eos"] is True for b in server.bodies)
    assert [r["input_tokens"] for r in per_request] == [32] * 4
    assert summary["input_tokens"] == 128 and summary["output_tokens"] == 32


def test_warmup_requests_are_sent_first_and_not_counted(server):
    payload = build_payload("tiny", "The capital of France is", 4)
    _per, summary = run_probe(Endpoint(server.base_url, timeout=10), payload, requests=3, concurrency=1, warmup=2)
    assert len(server.bodies) == 5
    assert summary["requests"] == 3 and summary["succeeded"] == 3 and summary["output_tokens"] == 12
    assert summary["warmup_requests"] == 2 and summary["warmup_failed"] == 0


def test_text_prompt_reports_the_server_count(server):
    _per, summary = run_probe(Endpoint(server.base_url, timeout=10), build_payload("tiny", "Hi", 4), requests=2)
    assert summary["input_tokens"] == 10 and summary["warmup_requests"] == 0


def test_too_few_prompts_is_refused(server):
    with pytest.raises(ValueError, match="one prompt per request"):
        run_probe(Endpoint(server.base_url, timeout=10), build_payload("tiny", "x", 4), requests=3,
                  prompts=[[1, 2]])
