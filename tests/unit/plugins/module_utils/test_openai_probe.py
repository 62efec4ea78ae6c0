"""openai_probe against a real local HTTP server that streams SSE exactly as vLLM 0.32 does (fake_vllm.py)."""

from __future__ import annotations

import json
import socket
import time

import pytest
from ansible_collections.ascendai.vllm.plugins.module_utils._openai_probe import (
    Endpoint,
    ProbeError,
    SSEDecoder,
    build_payload,
    evaluate_slo,
    health_check,
    interpret_event,
    percentile,
    run_probe,
    served_model_ids,
    split_base_url,
    stats,
    stream_request,
    summarize,
)
from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.fake_vllm import (
    TOKENS, FakeVllm, completion_chunk, dumps, usage_chunk)
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.fixture
def server():
    with FakeVllm(served=["tiny"]) as fake:
        yield fake


def free_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


# ---------------------------------------------------------------- SSE decoding


VLLM_STREAM = (
    "".join(f"data: {dumps(completion_chunk('cmpl-1', 'tiny', t, 'length' if i == 2 else None))}\n\n"
            for i, t in enumerate(TOKENS[:3]))
    + f"data: {dumps(usage_chunk('cmpl-1', 'tiny', 'text_completion', 5, 3))}\n\n"
    + "data: [DONE]\n\n"
).encode()


def test_decoder_reads_vllm_stream_in_one_piece():
    events = SSEDecoder().feed(VLLM_STREAM)
    assert len(events) == 5
    assert events[-1] == "[DONE]"
    texts = [interpret_event(e)["text"] for e in events[:3]]
    assert texts == [" Paris", ".", " It"]
    usage = interpret_event(events[3])
    assert usage["has_choices"] is False and usage["usage"]["completion_tokens"] == 3


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(VLLM_STREAM)), max_size=12),
       newline=st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_decoder_any_split_and_line_ending_gives_same_events(cuts, newline):
    stream = VLLM_STREAM.replace(b"\n", newline)
    bounds = sorted(set([0, len(stream)] + [min(c, len(stream)) for c in cuts]))
    decoder = SSEDecoder()
    events = []
    for a, b in zip(bounds, bounds[1:]):
        events += decoder.feed(stream[a:b])
    events += decoder.close()
    assert events == SSEDecoder().feed(VLLM_STREAM)


def test_decoder_comments_fields_multiline_and_garbage():
    decoder = SSEDecoder()
    events = decoder.feed(b": ping\nevent: message\nid: 7\ndata: {\"a\":\ndata: 1}\n\nnot a field\nfoo: bar\n\n")
    assert events == ['{"a":\n1}']
    assert json.loads(events[0]) == {"a": 1}
    assert decoder.ignored == 2
    assert decoder.ignored_lines == ["not a field", "foo: bar"]


def test_decoder_flushes_last_event_without_blank_line():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: [DONE]") == []
    assert decoder.close() == ["[DONE]"]


def test_interpret_malformed_and_stream_error():
    with pytest.raises(ProbeError) as exc:
        interpret_event('{"choices": [{"text": "tru')
    assert exc.value.kind == "protocol"
    assert "malformed SSE data line" in exc.value.message
    with pytest.raises(ProbeError) as exc:
        interpret_event('{"error": {"message": "Internal server error", "code": 500}}')
    assert exc.value.kind == "stream" and exc.value.status == 500
    assert "Internal server error" in exc.value.message


def test_interpret_chat_role_chunk_is_not_a_token():
    role = interpret_event('{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}', chat=True)
    assert role["has_choices"] and role["role_only"] and role["text"] == ""
    tok = interpret_event('{"choices":[{"index":0,"delta":{"content":" Paris"}}]}', chat=True)
    assert not tok["role_only"] and tok["text"] == " Paris"
    think = interpret_event('{"choices":[{"index":0,"delta":{"reasoning":"hmm"}}]}', chat=True)
    assert think["text"] == "hmm" and not think["role_only"]


# ---------------------------------------------------------------- statistics


def test_percentile_matches_numpy_linear_interpolation():
    # numpy.percentile([1, 2, 3, 4], 90) == 3.7 ; p50 of 1..10 == 5.5
    assert percentile([4, 1, 3, 2], 90) == pytest.approx(3.7)
    assert percentile(list(range(1, 11)), 50) == pytest.approx(5.5)
    assert percentile([7.0], 99) == 7.0
    assert percentile([], 50) is None


def test_stats_ignores_nulls():
    out = stats([100.0, None, 300.0, 200.0])
    assert out == {"mean": 200.0, "p50": 200.0, "p90": 280.0, "p99": 298.0, "min": 100.0, "max": 300.0, "count": 3}
    assert stats([None])["p50"] is None and stats([])["count"] == 0


def test_split_base_url():
    assert split_base_url("http://127.0.0.1:8000") == ("http", "127.0.0.1", 8000, "")
    assert split_base_url("https://llm.example.com/v1/") == ("https", "llm.example.com", 443, "")
    assert split_base_url("http://gw:80/vllm/v1") == ("http", "gw", 80, "/vllm")
    with pytest.raises(ValueError, match="not an http"):
        split_base_url("127.0.0.1:8000")


# ---------------------------------------------------------------- requests against the fake server


def test_stream_measures_ttft_tokens_and_latency(server):
    server.first_token_delay = 0.25
    server.token_delay = 0.02
    ep = Endpoint(server.base_url, timeout=10)
    res = stream_request(ep, build_payload("tiny", "The capital of France is", 5))
    assert res["ok"] and res["status"] == 200 and res["error"] is None
    assert res["output_tokens"] == 5 and res["token_source"] == "usage"
    assert res["text"] == "".join(TOKENS[:5])
    assert res["finish_reason"] == "length"
    assert 250 <= res["ttft_ms"] < 1000
    # ends at the 5th token chunk (as vllm bench serve counts): 4 gaps of 20 ms after the first
    assert res["ttft_ms"] + 4 * 20 * 0.9 <= res["e2e_ms"] < res["ttft_ms"] + 4 * 20 + 150
    assert res["tokens_per_s"] == pytest.approx(5 / (res["e2e_ms"] / 1000), rel=0.01)
    assert 20 * 0.9 <= res["tpot_ms"] < 20 + 40
    sent = server.bodies[-1]
    assert sent == {"model": "tiny", "max_tokens": 5, "stream": True, "prompt": "The capital of France is",
                    "stream_options": {"include_usage": True}}


def test_without_usage_counts_chunks(server):
    ep = Endpoint(server.base_url, timeout=10)
    res = stream_request(ep, build_payload("tiny", "x", 7, include_usage=False))
    assert res["ok"] and res["token_source"] == "chunks" and res["output_tokens"] == 7
    assert "stream_options" not in server.bodies[-1]


def test_chat_endpoint_and_role_chunk(server):
    ep = Endpoint(server.base_url, timeout=10)
    res = stream_request(ep, build_payload("tiny", "Hi", 3, chat=True, include_usage=False), chat=True)
    assert res["ok"] and res["output_tokens"] == 3 and res["chunks"] == 3
    assert res["text"] == "".join(TOKENS[:3])
    assert server.bodies[-1]["messages"] == [{"role": "user", "content": "Hi"}]


def test_split_chunks_and_crlf_are_reassembled(server):
    server.behaviour = "split"
    res = stream_request(Endpoint(server.base_url, timeout=10), build_payload("tiny", "x", 4))
    assert res["ok"] and res["output_tokens"] == 4 and res["text"] == "".join(TOKENS[:4])


def test_http_500_reports_status_and_body(server):
    server.behaviour = "http500"
    res = stream_request(Endpoint(server.base_url, timeout=10), build_payload("tiny", "x", 4))
    assert not res["ok"] and res["error_kind"] == "http" and res["status"] == 500
    assert "EngineCore encountered an issue." in res["body"]
    assert res["error"].startswith("HTTP 500 Internal Server Error:")


def test_unknown_model_is_http_404(server):
    res = stream_request(Endpoint(server.base_url, timeout=10), build_payload("nope", "x", 4))
    assert res["status"] == 404 and "The model `nope` does not exist." in res["body"]


def test_connection_refused():
    port = free_port()
    res = stream_request(Endpoint(f"http://127.0.0.1:{port}", timeout=5), build_payload("tiny", "x", 4))
    assert not res["ok"] and res["error_kind"] == "connection" and res["status"] is None
    assert "connection refused" in res["error"] and f":{port}/v1/completions" in res["error"]


def test_timeout_when_server_stalls(server):
    server.behaviour = "stall"
    started = time.monotonic()
    res = stream_request(Endpoint(server.base_url, timeout=0.5), build_payload("tiny", "x", 4))
    assert time.monotonic() - started < 5
    assert not res["ok"] and res["error_kind"] == "timeout" and res["status"] == 200
    assert "timeout=0.5s" in res["error"]


def test_malformed_sse_line(server):
    server.behaviour = "malformed"
    res = stream_request(Endpoint(server.base_url, timeout=10), build_payload("tiny", "x", 4))
    assert not res["ok"] and res["error_kind"] == "protocol"
    assert "malformed SSE data line" in res["error"]
    assert res["ttft_ms"] is not None  # two tokens came before the bad line


def test_error_inside_stream(server):
    server.behaviour = "stream_error"
    res = stream_request(Endpoint(server.base_url, timeout=10), build_payload("tiny", "x", 4))
    assert not res["ok"] and res["error_kind"] == "stream" and res["status"] == 500


def test_stream_without_done_is_incomplete(server):
    server.behaviour = "no_done"
    res = stream_request(Endpoint(server.base_url, timeout=10), build_payload("tiny", "x", 4))
    assert not res["ok"] and res["error_kind"] == "incomplete" and "[DONE]" in res["error"]


def test_api_key_sent_and_401_without_it():
    with FakeVllm(api_key="s3cret") as fake:
        res = stream_request(Endpoint(fake.base_url, timeout=10), build_payload("tiny", "x", 2))
        assert res["status"] == 401 and '"Unauthorized"' in res["body"]
        res = stream_request(Endpoint(fake.base_url, api_key="s3cret", timeout=10), build_payload("tiny", "x", 2))
        assert res["ok"] and fake.headers[-1]["Authorization"] == "Bearer s3cret"


# ---------------------------------------------------------------- concurrency, summary, SLO


def test_concurrency_is_honoured(server):
    server.first_token_delay = 0.2
    ep = Endpoint(server.base_url, timeout=10)
    per_request, summary = run_probe(ep, build_payload("tiny", "x", 4), requests=6, concurrency=3)
    assert server.max_in_flight == 3
    assert [r["index"] for r in per_request] == list(range(6))
    assert summary["succeeded"] == 6 and summary["failed_requests"] == 0
    assert summary["output_tokens"] == 24 and summary["token_source"] == "usage"
    # two waves of 0.2 s: well under the 1.2 s a sequential run takes
    assert 0.4 <= summary["duration_s"] < 1.2
    assert summary["output_tokens_per_s"] == pytest.approx(24 / summary["duration_s"], rel=0.01)
    assert summary["ttft_ms"]["count"] == 6 and summary["ttft_ms"]["min"] >= 200


def test_sequential_run_takes_the_sum(server):
    server.first_token_delay = 0.1
    _per, summary = run_probe(Endpoint(server.base_url, timeout=10), build_payload("tiny", "x", 2), requests=4)
    assert server.max_in_flight == 1 and summary["duration_s"] >= 0.4


def test_summary_counts_errors_by_kind():
    results = [
        {"index": 0, "ok": True, "status": 200, "ttft_ms": 100.0, "e2e_ms": 400.0, "tpot_ms": 10.0,
         "output_tokens": 30, "token_source": "usage", "tokens_per_s": 75.0, "error_kind": None, "error": None,
         "body": None},
        {"index": 1, "ok": False, "status": 500, "ttft_ms": None, "e2e_ms": 5.0, "tpot_ms": None,
         "output_tokens": 0, "token_source": None, "tokens_per_s": None, "error_kind": "http",
         "error": "HTTP 500", "body": "{}"},
    ]
    s = summarize(results, 2.0)
    assert s["requests"] == 2 and s["succeeded"] == 1 and s["failed_requests"] == 1 and s["error_rate"] == 0.5
    assert s["errors_by_kind"] == {"http": 1}
    assert s["errors"] == [{"index": 1, "kind": "http", "status": 500, "message": "HTTP 500", "body": "{}"}]
    assert s["output_tokens_per_s"] == 15.0 and s["ttft_ms"]["p50"] == 100.0 and s["e2e_ms"]["count"] == 1


def test_slo_violations():
    summary = {"requests": 10, "failed_requests": 1, "error_rate": 0.1, "output_tokens_per_s": 900.0,
               "ttft_ms": {"mean": 300.0, "p50": 280.0, "p90": 420.0, "p99": 500.0, "max": 510.0}}
    ok, violations = evaluate_slo(summary, slo_ttft_ms=350, slo_tokens_per_s=1200, ttft_stat="p90")
    assert not ok
    assert [v["slo"] for v in violations] == ["error_rate", "ttft_ms", "tokens_per_s"]
    assert violations[1]["measured"] == 420.0
    assert violations[1]["message"] == "time to first token p90 420.0 ms > 350 ms"
    assert violations[2]["message"] == "output throughput 900.0 tokens/s < 1200 tokens/s"
    ok, violations = evaluate_slo(summary, slo_ttft_ms=350, ttft_stat="p50", max_error_rate=0.2)
    assert ok and violations == []
    assert evaluate_slo(summary, max_error_rate=None) == (True, [])


# ---------------------------------------------------------------- health gate


def test_health_all_ok(server):
    res = health_check(Endpoint(server.base_url, timeout=10), model="tiny", max_tokens=4)
    assert res["ok"] and res["failures"] == [] and res["served_models"] == ["tiny"]
    assert res["checks"]["completion"]["text"] == "".join(TOKENS[:4])
    assert res["checks"]["health"]["status"] == 200


def test_health_picks_first_model_when_none_given(server):
    res = health_check(Endpoint(server.base_url, timeout=10), max_tokens=2)
    assert res["ok"] and res["model"] == "tiny"


def test_health_reports_each_failure(server):
    server.health_status = 503
    server.behaviour = "empty_text"
    res = health_check(Endpoint(server.base_url, timeout=10), model="deepseek", max_tokens=2)
    assert not res["ok"]
    assert res["failures"][0] == "GET /health answered HTTP 503: (empty body)"
    assert res["failures"][1] == "GET /v1/models lists ['tiny'], not the served name 'deepseek'"
    assert res["failures"][2].startswith("completion: HTTP 404")
    res = health_check(Endpoint(server.base_url, timeout=10), model="tiny", max_tokens=2)
    assert res["failures"][-1].startswith("completion: the answer to 'The capital of France is' has empty text")


def test_health_connection_refused_skips_the_rest():
    res = health_check(Endpoint(f"http://127.0.0.1:{free_port()}", timeout=5), model="tiny")
    assert not res["ok"] and len(res["failures"]) == 1 and "connection refused" in res["failures"][0]
    assert res["checks"]["completion"]["skipped"] and res["checks"]["models"]["skipped"]


def test_served_model_ids_rejects_non_json():
    assert served_model_ids(b'{"object":"list","data":[{"id":"a"},{"id":"b"}]}') == ["a", "b"]
    with pytest.raises(ValueError, match="did not answer JSON"):
        served_model_ids(b"<html>")


@pytest.mark.parametrize("reported", [-66366, 10 ** 33, 9])
def test_impossible_usage_is_an_error_not_a_rate(server, reported):
    server.usage_tokens = reported
    res = stream_request(Endpoint(server.base_url, timeout=10), build_payload("tiny", "x", 8))
    assert not res["ok"] and res["error_kind"] == "protocol"
    assert f"usage.completion_tokens={reported}" in res["error"] and res["tokens_per_s"] is None


def test_plausible_usage_is_used(server):
    server.usage_tokens = 6
    res = stream_request(Endpoint(server.base_url, timeout=10), build_payload("tiny", "x", 8))
    assert res["ok"] and res["output_tokens"] == 6 and res["token_source"] == "usage"


def test_stream_that_never_stops_is_not_no_answer(server):
    server.behaviour = "endless"
    started = time.monotonic()
    res = stream_request(Endpoint(server.base_url, timeout=0.5), build_payload("tiny", "x", 4))
    assert time.monotonic() - started < 5
    assert not res["ok"] and res["error_kind"] == "timeout"
    assert "still sending" in res["error"] and "no answer" not in res["error"]
    assert res["ttft_ms"] is not None


# -------------------------------------------------------------------------- fixed questions (the answer check)


def test_answers_pass_when_each_answer_contains_its_expectation(server):
    from ansible_collections.ascendai.vllm.plugins.module_utils._openai_probe import normalize_answers
    answers = normalize_answers([{"prompt": "What is the capital of France?", "expect": r"\bparis\b"},
                                 {"prompt": "The capital of France is", "expect": "Paris", "chat": False,
                                  "max_tokens": 3}])
    res = health_check(Endpoint(server.base_url, timeout=10), model="tiny", max_tokens=2, answers=answers)
    assert res["ok"], res["failures"]
    assert [a["ok"] for a in res["checks"]["answers"]] == [True, True]
    assert res["checks"]["answers"][1]["text"] == "".join(TOKENS[:3])
    asked = server.bodies[-2:]
    assert asked[0]["messages"] == [{"role": "user", "content": "What is the capital of France?"}]
    assert asked[1]["prompt"] == "The capital of France is" and asked[1]["max_tokens"] == 3
    assert all(body["temperature"] == 0 for body in asked)


def test_a_fluent_wrong_answer_fails_and_says_what_it_was(server):
    from ansible_collections.ascendai.vllm.plugins.module_utils._openai_probe import normalize_answers
    answers = normalize_answers([{"prompt": "What is the capital of Germany?", "expect": "Berlin"}])
    res = health_check(Endpoint(server.base_url, timeout=10), model="tiny", max_tokens=2, answers=answers)
    assert not res["ok"] and len(res["failures"]) == 2
    assert res["failures"][0].startswith("chat 'What is the capital of Germany?' at temperature 0 answered ")
    assert "Paris. It is the capital of France, a" in res["failures"][0]
    assert res["failures"][0].endswith("which does not match /Berlin/")
    assert res["failures"][1].startswith("the model is served but does not answer as it should")
    server.behaviour = "empty_text"
    res = health_check(Endpoint(server.base_url, timeout=10), model="tiny", max_tokens=2,
                       answers=normalize_answers([{"prompt": "What is 2+2?", "expect": "4"}]))
    assert "answered '', which does not match /4/" in res["failures"][-2]


def test_an_answer_request_that_fails_is_named(server):
    from ansible_collections.ascendai.vllm.plugins.module_utils._openai_probe import normalize_answers
    server.behaviour = "http500"
    res = health_check(Endpoint(server.base_url, timeout=10), model="tiny", max_tokens=2,
                       answers=normalize_answers([{"prompt": "What is 2+2?", "expect": "4"}]))
    assert res["failures"][-1].startswith("chat 'What is 2+2?': HTTP 500")   # no hint: it did not answer


@pytest.mark.parametrize("answers, message", [
    ({"prompt": "x"}, "answers must be a list"),
    (["x"], r"answers\[0\] is 'x': each entry is a dict"),
    ([{"prompt": "x", "expect": "y", "temperature": 1}], r"answers\[0\] has unknown keys \['temperature'\]"),
    ([{"prompt": " ", "expect": "y"}], r"answers\[0\].prompt is ' ': give the question"),
    ([{"prompt": "x"}], r"answers\[0\].expect is None"),
    ([{"prompt": "x", "expect": "("}], r"answers\[0\].expect '\(' is not a regular expression"),
    ([{"prompt": "x", "expect": "y", "chat": "yes"}], r"answers\[0\].chat is 'yes'"),
    ([{"prompt": "x", "expect": "y", "max_tokens": 0}], r"answers\[0\].max_tokens is 0"),
    ([{"prompt": "x", "expect": "y", "max_tokens": True}], r"answers\[0\].max_tokens is True"),
])
def test_bad_answer_entries_are_named(answers, message):
    from ansible_collections.ascendai.vllm.plugins.module_utils._openai_probe import normalize_answers
    with pytest.raises(ValueError, match=message):
        normalize_answers(answers)
