# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Streaming probe for OpenAI-compatible servers (vLLM): time to first token, tokens/s, errors.

Standard library only (http.client, threads): it runs on the target node.

The SSE stream is read the way vLLM writes it (``vllm/entrypoints/openai/completion/serving.py``):
one ``data: {json}`` line and a blank line per chunk, a last chunk with ``"choices": []`` and the
``usage`` when the request asked for ``stream_options: {include_usage: true}``, then ``data: [DONE]``.
Time to first token follows ``vllm bench serve``: the first chunk that carries choices.
"""

from __future__ import annotations

import http.client
import json
import math
import random
import re
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

BODY_SNIPPET = 512
TEXT_KEEP = 200
MAX_ERRORS_KEPT = 20
STATS = ("mean", "p50", "p90", "p99", "min", "max")
TTFT_STATS = ("mean", "p50", "p90", "p99", "max")


class ProbeError(Exception):
    """A request failed; ``kind`` names how (http, connection, timeout, tls, protocol, stream, incomplete, empty)."""

    def __init__(self, kind, message, status=None, body=None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.body = body


class SSEDecoder:
    """Incremental Server-Sent Events decoder: feed bytes, get the ``data`` payload of each complete event.

    Lines end with LF, CRLF or CR; ``:`` starts a comment; ``event``, ``id`` and ``retry`` fields are read
    and ignored; several ``data`` lines of one event are joined with LF (the WHATWG rules).  Lines that are
    not fields (no colon, unknown name) are counted in ``ignored`` and kept in ``ignored_lines``.
    """

    def __init__(self):
        self._buf = b""
        self._data = []
        self.ignored = 0
        self.ignored_lines = []

    def _line(self, line, events):
        if not line:
            if self._data:
                events.append("\n".join(self._data))
                self._data = []
            return
        if line.startswith(b":"):
            return
        field, sep, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if sep and field == b"data":
            try:
                self._data.append(value.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise ProbeError("protocol", f"SSE data line is not UTF-8: {line[:80]!r} ({exc})") from exc
        elif sep and field in (b"event", b"id", b"retry"):
            return
        else:
            self.ignored += 1
            if len(self.ignored_lines) < 5:
                self.ignored_lines.append(line[:120].decode("utf-8", "replace"))

    def feed(self, chunk):
        """Add bytes; return the data payloads of the events they complete."""
        self._buf += chunk
        events = []
        while True:
            lf = self._buf.find(b"\n")
            cr = self._buf.find(b"\r")
            if lf < 0 and cr < 0:
                break
            if cr >= 0 and (lf < 0 or cr < lf):
                if cr == len(self._buf) - 1:
                    break  # a CR at the end may be half of a CRLF still in flight
                end, skip = cr, 2 if self._buf[cr + 1:cr + 2] == b"\n" else 1
            else:
                end, skip = lf, 1
            line, self._buf = self._buf[:end], self._buf[end + skip:]
            self._line(line, events)
        return events

    def close(self):
        """End of stream: the last line and an event not closed by a blank line still count."""
        events = []
        if self._buf:
            line, self._buf = self._buf.rstrip(b"\r"), b""
            self._line(line, events)
        self._line(b"", events)
        return events


def interpret_event(data, chat=False):
    """Read one SSE data payload.

    Returns ``{done, has_choices, role_only, text, finish_reason, usage}``; raises ProbeError(protocol) when
    it is not JSON, ProbeError(stream) when the server sent an error object in the stream.
    """
    if data.strip() == "[DONE]":
        return {"done": True, "has_choices": False, "role_only": False, "text": "", "finish_reason": None,
                "usage": None}
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise ProbeError("protocol", f"malformed SSE data line (not JSON): {snippet(data, 120)!r}: {exc}") from exc
    if not isinstance(obj, dict):
        raise ProbeError("protocol", f"SSE data is JSON but not an object: {snippet(data, 120)!r}")
    if obj.get("error"):
        err = obj["error"]
        message = err.get("message") if isinstance(err, dict) else err
        code = err.get("code") if isinstance(err, dict) else None
        raise ProbeError("stream", f"error in the stream: {message}", status=code, body=snippet(data))
    choices = obj.get("choices") or []
    if not isinstance(choices, list):
        raise ProbeError("protocol", f"'choices' is not a list: {snippet(data, 120)!r}")
    text = []
    finish_reason = None
    role_only = bool(chat and choices)
    for choice in choices:
        if not isinstance(choice, dict):
            raise ProbeError("protocol", f"a choice is not an object: {snippet(data, 120)!r}")
        if chat:
            delta = choice.get("delta") or {}
            piece = (delta.get("reasoning") or delta.get("reasoning_content") or "") + (delta.get("content") or "")
            if piece or "role" not in delta or set(delta) - {"role", "content"}:
                role_only = False
        else:
            piece = choice.get("text") or ""
        text.append(piece)
        finish_reason = finish_reason or choice.get("finish_reason")
    usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
    return {"done": False, "has_choices": bool(choices), "role_only": role_only, "text": "".join(text),
            "finish_reason": finish_reason, "usage": usage}


def snippet(text, limit=BODY_SNIPPET):
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "..."


def split_base_url(base_url):
    """``http://host:8000[/prefix][/v1]`` -> (scheme, host, port, prefix). A trailing ``/v1`` is dropped."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"base_url={base_url!r} is not an http:// or https:// URL with a host "
                         "(for example http://127.0.0.1:8000)")
    prefix = parts.path.rstrip("/")
    if prefix.endswith("/v1"):
        prefix = prefix[:-3]
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.scheme, parts.hostname, port, prefix


class Endpoint:
    """Where and how to connect: base URL, key, TLS verification, timeout (seconds)."""

    def __init__(self, base_url, api_key=None, timeout=60.0, validate_certs=True, ca_path=None):
        self.base_url = base_url
        self.scheme, self.host, self.port, self.prefix = split_base_url(base_url)
        self.api_key = api_key or None
        self.timeout = float(timeout)
        self.validate_certs = validate_certs
        self.ca_path = ca_path

    def connect(self):
        if self.scheme == "https":
            if self.validate_certs:
                ctx = ssl.create_default_context(cafile=self.ca_path)
            else:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=ctx)
        return http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)

    def headers(self, extra=None):
        headers = {"Accept": "application/json, text/event-stream", "User-Agent": "ascendai.vllm.openai_probe"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        headers.update(extra or {})
        return headers


def _classify(exc, endpoint, path):
    """Map a transport exception to (kind, message)."""
    where = f"{endpoint.scheme}://{endpoint.host}:{endpoint.port}{endpoint.prefix}{path}"
    if isinstance(exc, ProbeError):
        return exc.kind, exc.message
    if isinstance(exc, socket.timeout):
        return "timeout", f"{where}: no answer within timeout={endpoint.timeout:g}s"
    if isinstance(exc, (ssl.SSLError, ssl.CertificateError)):
        return "tls", f"{where}: TLS error: {exc} (set validate_certs=false or ca_path for a private CA)"
    if isinstance(exc, ConnectionRefusedError):
        return "connection", f"{where}: connection refused (is the server running and listening there?)"
    if isinstance(exc, OSError):
        return "connection", f"{where}: {exc.__class__.__name__}: {exc}"
    if isinstance(exc, http.client.HTTPException):
        return "protocol", f"{where}: bad HTTP response: {exc.__class__.__name__}: {exc}"
    return "unknown", f"{where}: {exc.__class__.__name__}: {exc}"


def http_get(endpoint, path):
    """GET path; returns (status, body bytes). Raises ProbeError for transport errors."""
    conn = endpoint.connect()
    try:
        conn.request("GET", endpoint.prefix + path, headers=endpoint.headers())
        resp = conn.getresponse()
        return resp.status, resp.read()
    except Exception as exc:  # pylint: disable=broad-except
        kind, message = _classify(exc, endpoint, path)
        raise ProbeError(kind, message) from exc
    finally:
        conn.close()


def build_payload(model, prompt, max_tokens, chat=False, include_usage=True, extra_body=None):
    payload = {"model": model, "max_tokens": int(max_tokens), "stream": True}
    if chat:
        payload["messages"] = [{"role": "user", "content": prompt}]
    else:
        payload["prompt"] = prompt
    if include_usage:
        payload["stream_options"] = {"include_usage": True}
    payload.update(extra_body or {})
    return payload


def random_token_prompts(count, input_len, vocab_size, seed=0):
    """``count`` prompts of exactly ``input_len`` token ids, built the way ``vllm bench serve --dataset-name random``
    builds its token sequences: ``(offset + index + arange(input_len)) % vocab_size`` with a random offset per
    request (https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/benchmarks/datasets.py#L374-L384).

    vllm bench decodes them to text and re-encodes; the completions API takes the token ids as they are (a
    ``prompt`` that is a list of integers), so the server sees exactly ``input_len`` prompt tokens and no
    tokenizer is needed here. Every prompt differs, so the prefix cache does not shorten the prefill.
    """
    if count < 1 or input_len < 1:
        raise ValueError(f"count={count}, input_len={input_len}: both must be at least 1")
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < 2:
        raise ValueError(f"vocab_size={vocab_size!r}: give the tokenizer's vocab_size (an integer of at least 2)")
    rng = random.Random(seed)
    prompts = []
    for index in range(count):
        offset = rng.randrange(vocab_size)
        prompts.append([(offset + index + j) % vocab_size for j in range(input_len)])
    return prompts


def stream_request(endpoint, payload, chat=False, clock=time.perf_counter):
    """Send one streaming request; return its measurements (never raises for request errors).

    Keys: ok, status, ttft_ms, e2e_ms, tpot_ms, output_tokens, input_tokens (the server's usage.prompt_tokens,
    None without usage), token_source (usage|chunks), chunks, tokens_per_s, finish_reason, text (first 200
    characters), error_kind, error, body.
    """
    path = "/v1/chat/completions" if chat else "/v1/completions"
    result = {"ok": False, "status": None, "ttft_ms": None, "e2e_ms": None, "tpot_ms": None, "output_tokens": 0,
              "input_tokens": None, "token_source": None, "chunks": 0, "tokens_per_s": None, "finish_reason": None,
              "text": "", "error_kind": None, "error": None, "body": None}
    text = []
    usage = None
    done = False
    start = clock()
    first = last = None
    conn = endpoint.connect()
    try:
        body = json.dumps(payload).encode("utf-8")
        conn.request("POST", endpoint.prefix + path, body=body,
                     headers=endpoint.headers({"Content-Type": "application/json"}))
        resp = conn.getresponse()
        result["status"] = resp.status
        if resp.status != 200:
            raw = resp.read(4096)
            raise ProbeError("http", f"HTTP {resp.status} {resp.reason}: {snippet(raw, 200)}",
                             status=resp.status, body=snippet(raw))
        decoder = SSEDecoder()
        eof = False
        while not eof and not done:
            if clock() - start > endpoint.timeout:
                if first is not None:   # it answers, but does not stop: not "no answer"
                    raise ProbeError("timeout", f"the stream was still sending after timeout={endpoint.timeout:g}s "
                                                f"({result['chunks']} chunks, no [DONE])")
                raise socket.timeout()
            chunk = resp.read1(65536)
            now = clock()
            if chunk:
                events = decoder.feed(chunk)
            else:
                eof = True
                events = decoder.close()
            for data in events:
                event = interpret_event(data, chat)
                if event["done"]:
                    done = True
                    break
                if event["has_choices"]:
                    if first is None:
                        first = now
                    last = now
                    if not event["role_only"]:
                        result["chunks"] += 1
                    text.append(event["text"])
                    result["finish_reason"] = event["finish_reason"] or result["finish_reason"]
                if event["usage"] is not None:
                    usage = event["usage"]
        if not done:
            raise ProbeError("incomplete", "the stream ended before 'data: [DONE]'"
                             + (f" ({decoder.ignored} lines were not SSE fields, first: "
                                f"{decoder.ignored_lines[0]!r})" if decoder.ignored else ""))
        if first is None:
            raise ProbeError("empty", "the stream carried no token (no chunk with choices before [DONE])")
    except Exception as exc:  # pylint: disable=broad-except
        kind, message = _classify(exc, endpoint, path)
        result.update(error_kind=kind, error=message)
        if isinstance(exc, ProbeError):
            result["body"] = exc.body
            if exc.status is not None and result["status"] in (None, 200):
                result["status"] = exc.status
        result["text"] = "".join(text)[:TEXT_KEEP]
        if first is not None:
            result["ttft_ms"] = round((first - start) * 1000.0, 3)
        result["e2e_ms"] = round((clock() - start) * 1000.0, 3)
        return result
    finally:
        conn.close()

    prompt_tokens = usage.get("prompt_tokens") if usage is not None else None
    if isinstance(prompt_tokens, int) and not isinstance(prompt_tokens, bool) and prompt_tokens >= 0:
        result["input_tokens"] = prompt_tokens
    reported = usage.get("completion_tokens") if usage is not None else None
    if isinstance(reported, int) and not isinstance(reported, bool):
        limit = payload.get("max_tokens") if isinstance(payload, dict) else None
        if reported < 0 or (isinstance(limit, int) and reported > limit):
            result.update(ok=False, error_kind="protocol", text="".join(text)[:TEXT_KEEP],
                          ttft_ms=round((first - start) * 1000.0, 3), e2e_ms=round((last - start) * 1000.0, 3),
                          error=f"{endpoint.prefix + path}: usage.completion_tokens={reported} cannot be right "
                                f"({result['chunks']} token chunks streamed, max_tokens={limit}); the server's "
                                "usage report is wrong, so no tokens/s is computed")
            return result
        tokens, source = reported, "usage"
    else:
        tokens, source = result["chunks"], "chunks"
    # as vllm bench serve: the request ends with its last token chunk (the usage chunk and [DONE] follow at once)
    e2e = last - start
    result.update(
        ok=True,
        ttft_ms=round((first - start) * 1000.0, 3),
        e2e_ms=round(e2e * 1000.0, 3),
        output_tokens=tokens,
        token_source=source,
        tokens_per_s=round(tokens / e2e, 3) if e2e > 0 else None,
        tpot_ms=round((last - first) * 1000.0 / (tokens - 1), 3) if tokens > 1 else None,
        text="".join(text)[:TEXT_KEEP],
    )
    return result


def percentile(values, pct):
    """Linear-interpolation percentile (numpy's default, as ``vllm bench serve`` uses)."""
    data = sorted(values)
    if not data:
        return None
    rank = (len(data) - 1) * pct / 100.0
    low, high = int(math.floor(rank)), int(math.ceil(rank))
    return data[low] + (data[high] - data[low]) * (rank - low)


def stats(values):
    """``{mean, p50, p90, p99, min, max, count}`` of the non-null values; nulls when there are none."""
    data = [float(v) for v in values if v is not None]
    if not data:
        return dict({key: None for key in STATS}, count=0)
    out = {"mean": sum(data) / len(data), "p50": percentile(data, 50), "p90": percentile(data, 90),
           "p99": percentile(data, 99), "min": min(data), "max": max(data)}
    out = {key: round(value, 3) for key, value in out.items()}
    out["count"] = len(data)
    return out


def summarize(results, duration_s):
    """Aggregate per-request results (as from stream_request, each with ``index``) over a run of duration_s."""
    good = [r for r in results if r["ok"]]
    bad = [r for r in results if not r["ok"]]
    tokens = sum(r["output_tokens"] for r in good)
    prompt_counts = [r.get("input_tokens") for r in good]
    input_tokens = sum(prompt_counts) if good and all(isinstance(n, int) for n in prompt_counts) else None
    sources = sorted({r["token_source"] for r in good})
    by_kind = {}
    for r in bad:
        by_kind[r["error_kind"]] = by_kind.get(r["error_kind"], 0) + 1
    errors = [{"index": r.get("index"), "kind": r["error_kind"], "status": r["status"], "message": r["error"],
               "body": r["body"]} for r in bad[:MAX_ERRORS_KEPT]]
    return {
        "requests": len(results),
        "succeeded": len(good),
        "failed_requests": len(bad),
        "error_rate": round(len(bad) / len(results), 4) if results else 0.0,
        "errors_by_kind": by_kind,
        "errors": errors,
        "duration_s": round(duration_s, 3),
        "output_tokens": tokens,
        "input_tokens": input_tokens,
        "token_source": sources[0] if len(sources) == 1 else ("mixed" if sources else None),
        "output_tokens_per_s": round(tokens / duration_s, 3) if duration_s > 0 and good else None,
        "request_throughput": round(len(good) / duration_s, 3) if duration_s > 0 else None,
        "ttft_ms": stats(r["ttft_ms"] for r in good),
        "e2e_ms": stats(r["e2e_ms"] for r in good),
        "tpot_ms": stats(r["tpot_ms"] for r in good),
        "tokens_per_s": stats(r["tokens_per_s"] for r in good),
    }


def run_probe(endpoint, payload, requests=10, concurrency=1, chat=False, clock=time.perf_counter, warmup=0,
              prompts=None):
    """Send ``requests`` streaming requests, at most ``concurrency`` at a time; return (per_request, summary).

    ``prompts``: one prompt per request (a string or a list of token ids) that replaces the payload's; ``warmup``
    requests (the first prompt, as vllm bench serve's initial test run) go first and are not measured; the
    summary counts them in ``warmup_requests`` and ``warmup_failed``.
    """
    if requests < 1:
        raise ValueError(f"requests={requests}: send at least one request")
    if concurrency < 1:
        raise ValueError(f"concurrency={concurrency}: must be at least 1")
    if warmup < 0:
        raise ValueError(f"warmup={warmup}: must be 0 or more")
    if prompts is not None and len(prompts) < requests:
        raise ValueError(f"{len(prompts)} prompts for {requests} requests: give one prompt per request")
    lock = threading.Lock()
    results = [None] * requests

    def payload_for(index):
        if prompts is None:
            return payload
        out = dict(payload)
        out.pop("messages" if chat else "prompt", None)
        if chat:
            out["messages"] = [{"role": "user", "content": prompts[index]}]
        else:
            out["prompt"] = prompts[index]
        return out

    def one(index):
        res = stream_request(endpoint, payload_for(index), chat=chat, clock=clock)
        res["index"] = index
        with lock:
            results[index] = res

    warm = []
    if warmup:
        with ThreadPoolExecutor(max_workers=min(concurrency, warmup)) as pool:
            warm = [f.result() for f in [pool.submit(stream_request, endpoint, payload_for(0), chat, clock)
                                         for _warm in range(warmup)]]
    start = clock()
    with ThreadPoolExecutor(max_workers=min(concurrency, requests)) as pool:
        for future in [pool.submit(one, i) for i in range(requests)]:
            future.result()
    duration = clock() - start
    summary = summarize(results, duration)
    summary["warmup_requests"] = warmup
    summary["warmup_failed"] = sum(1 for r in warm if not r["ok"])
    return results, summary


def evaluate_slo(summary, slo_ttft_ms=None, slo_tokens_per_s=None, ttft_stat="p90", max_error_rate=0.0):
    """Compare a summary with the SLOs; returns (slo_ok, violations). Unset thresholds are not checked.

    TTFT: the ``ttft_stat`` statistic (mean, p50, p90, p99, max) must be at most ``slo_ttft_ms``.
    Throughput: ``output_tokens_per_s`` (all output tokens / wall time of the run) at least ``slo_tokens_per_s``.
    Errors: the share of failed requests at most ``max_error_rate`` (None: not checked).
    """
    if ttft_stat not in TTFT_STATS:
        raise ValueError(f"ttft_stat={ttft_stat!r}: use one of {', '.join(TTFT_STATS)}")
    violations = []
    if max_error_rate is not None and summary["error_rate"] > max_error_rate:
        violations.append({"slo": "error_rate", "limit": max_error_rate, "measured": summary["error_rate"],
                           "message": f"{summary['failed_requests']} of {summary['requests']} requests failed "
                                      f"(error rate {summary['error_rate']:.2%} > {max_error_rate:.2%})"})
    if slo_ttft_ms is not None:
        measured = summary["ttft_ms"].get(ttft_stat)
        if measured is None or measured > slo_ttft_ms:
            violations.append({"slo": "ttft_ms", "limit": slo_ttft_ms, "measured": measured,
                               "message": f"time to first token {ttft_stat} "
                                          + ("unmeasured (no request succeeded)" if measured is None
                                             else f"{measured:.1f} ms > {slo_ttft_ms:g} ms")})
    if slo_tokens_per_s is not None:
        measured = summary["output_tokens_per_s"]
        if measured is None or measured < slo_tokens_per_s:
            violations.append({"slo": "tokens_per_s", "limit": slo_tokens_per_s, "measured": measured,
                               "message": "output throughput "
                                          + ("unmeasured (no request succeeded)" if measured is None
                                             else f"{measured:.1f} tokens/s < {slo_tokens_per_s:g} tokens/s")})
    return not violations, violations


def served_model_ids(body):
    """The model ids listed by a ``/v1/models`` body (bytes or str); raises ValueError when unreadable."""
    try:
        obj = json.loads(body)
    except (ValueError, TypeError, RecursionError) as exc:  # RecursionError: '[[[[...' nested past the limit
        raise ValueError(f"/v1/models did not answer JSON: {snippet(body, 120)!r}") from exc
    data = obj.get("data") if isinstance(obj, dict) else None
    if not isinstance(data, list):
        raise ValueError(f"/v1/models answer has no 'data' list: {snippet(body, 120)!r}")
    return [m.get("id") for m in data if isinstance(m, dict) and m.get("id")]


def normalize_answers(answers):
    """Check the ``answers`` option: a list of ``{prompt, expect, chat, max_tokens}``.

    ``prompt`` (str) is asked at temperature 0, as a user message when ``chat`` (default true), as a completion
    prompt otherwise; ``expect`` (a Python regular expression, searched case-insensitively) must occur in the
    answer; ``max_tokens`` defaults to 32. Returns the list with the defaults filled in, or raises ValueError
    naming the entry and the fix.
    """
    out = []
    if not isinstance(answers, list):
        raise ValueError(f"answers must be a list of {{prompt, expect}} entries, not {type(answers).__name__}")
    for index, entry in enumerate(answers):
        where = f"answers[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} is {entry!r}: each entry is a dict with prompt and expect")
        unknown = sorted(set(entry) - {"prompt", "expect", "chat", "max_tokens"})
        if unknown:
            raise ValueError(f"{where} has unknown keys {unknown}: only prompt, expect, chat, max_tokens")
        prompt, expect = entry.get("prompt"), entry.get("expect")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"{where}.prompt is {prompt!r}: give the question to ask, a non-empty string")
        if not isinstance(expect, str) or not expect:
            raise ValueError(f"{where}.expect is {expect!r}: give a regular expression the answer must contain")
        try:
            pattern = re.compile(expect, re.IGNORECASE)
        except re.error as exc:
            raise ValueError(f"{where}.expect {expect!r} is not a regular expression ({exc}): "
                             "escape its special characters, e.g. \\. for a dot") from None
        chat = entry.get("chat", True)
        if not isinstance(chat, bool):
            raise ValueError(f"{where}.chat is {chat!r}: true (a chat message) or false (a completion prompt)")
        max_tokens = entry.get("max_tokens", 32)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"{where}.max_tokens is {max_tokens!r}: a whole number of at least 1")
        out.append({"prompt": prompt, "expect": expect, "pattern": pattern, "chat": chat, "max_tokens": max_tokens})
    return out


def check_answer(entry, res):
    """One fixed question's result -> ``(check, failure or None)``. The answer must contain ``expect``."""
    check = {"prompt": entry["prompt"], "expect": entry["expect"], "chat": entry["chat"],
             "ok": False, "text": res.get("text", ""), "status": res.get("status")}
    kind = "chat" if entry["chat"] else "completion"
    if not res.get("ok"):
        return check, f"{kind} {entry['prompt']!r}: {res.get('error')}"
    if entry["pattern"].search(res.get("text") or ""):
        check["ok"] = True
        return check, None
    return check, (f"{kind} {entry['prompt']!r} at temperature 0 answered {snippet(res.get('text') or '', 160)!r}, "
                   f"which does not match /{entry['expect']}/")


WRONG_ANSWER_HINT = ("the model is served but does not answer as it should: a wrong conversion, tokenizer or chat "
                     "template still writes fluent (or empty) text; or an expect does not fit this model")


def health_check(endpoint, model=None, prompt="The capital of France is", max_tokens=16, chat=False,
                 extra_body=None, clock=time.perf_counter, answers=()):
    """GET /health is 200, GET /v1/models lists ``model``, one real completion returns non-empty text, and each of
    ``answers`` (normalize_answers()) gets an answer containing its ``expect``, at temperature 0.

    Returns ``{ok, failures: [str], served_models, model, checks: {health, models, completion, answers: [...]}}``.
    When /health cannot be reached at all, the other checks are skipped (same cause).
    """
    checks = {"health": {"ok": False}, "models": {"ok": False}, "completion": {"ok": False}}
    failures = []
    served = []
    try:
        status, body = http_get(endpoint, "/health")
        checks["health"].update(status=status, ok=status == 200)
        if status != 200:
            failures.append(f"GET /health answered HTTP {status}: {snippet(body, 200) or '(empty body)'}")
    except ProbeError as exc:
        checks["health"].update(error_kind=exc.kind, error=exc.message)
        failures.append(f"GET /health: {exc.message}")
        for name in ("models", "completion"):
            checks[name].update(skipped=True, error="skipped: /health could not be reached")
        return {"ok": False, "failures": failures, "served_models": served, "model": model, "checks": checks}

    try:
        status, body = http_get(endpoint, "/v1/models")
        checks["models"]["status"] = status
        if status != 200:
            failures.append(f"GET /v1/models answered HTTP {status}: {snippet(body, 200)}")
        else:
            served = served_model_ids(body)
            if model is None:
                model = served[0] if served else None
            checks["models"]["ok"] = model is not None and model in served
            if not checks["models"]["ok"]:
                failures.append(f"GET /v1/models lists {served}, not the served name {model!r}"
                                if model else "GET /v1/models lists no model")
    except (ProbeError, ValueError) as exc:
        checks["models"]["error"] = getattr(exc, "message", str(exc))
        failures.append(f"GET /v1/models: {checks['models']['error']}")

    if model is None:
        checks["completion"].update(skipped=True, error="skipped: no model name to ask for")
        failures.append("completion skipped: no model name (set model, or let /v1/models list one)")
    else:
        res = stream_request(endpoint, build_payload(model, prompt, max_tokens, chat=chat, extra_body=extra_body),
                             chat=chat, clock=clock)
        checks["completion"] = {key: res[key] for key in ("ok", "status", "ttft_ms", "e2e_ms", "output_tokens",
                                                          "text", "error_kind", "error", "body")}
        if not res["ok"]:
            failures.append(f"completion: {res['error']}")
        elif not res["text"]:
            checks["completion"]["ok"] = False
            failures.append(f"completion: the answer to {prompt!r} has empty text "
                            f"({res['output_tokens']} tokens, finish_reason {res['finish_reason']})")
        if answers:
            checks["answers"] = []
            for entry in answers:
                body = dict(extra_body or {}, temperature=0)
                res = stream_request(endpoint, build_payload(model, entry["prompt"], entry["max_tokens"],
                                                             chat=entry["chat"], extra_body=body),
                                     chat=entry["chat"], clock=clock)
                check, failure = check_answer(entry, res)
                checks["answers"].append(check)
                if failure:
                    failures.append(failure)
            if any(a["status"] == 200 and not a["ok"] for a in checks["answers"]):
                failures.append(WRONG_ANSWER_HINT)
    return {"ok": not failures, "failures": failures, "served_models": served, "model": model, "checks": checks}


# The unit's properties the health gate reads (`systemctl show UNIT -p ... `: one KEY=VALUE line each).
UNIT_PROPERTIES = ("ActiveState", "SubState", "Result", "NRestarts", "ExecMainStatus")


def parse_systemctl_show(text):
    """``systemctl show``'s ``KEY=VALUE`` lines as a dict (a value may hold ``=``; other lines are skipped)."""
    props = {}
    for line in (text or "").splitlines():
        key, sep, value = line.partition("=")
        if sep and key and key.strip() == key and " " not in key:
            props[key] = value
    return props


def unit_stopped(props, unit, max_restarts, restarts_before=0):
    """Why waiting longer for ``unit`` is pointless, or None while it may still come up.

    ``props`` is :func:`parse_systemctl_show` of the unit. It has stopped for good when systemd gave up on it
    (``ActiveState=failed``, e.g. its start limit was hit), when it is ``inactive`` (nobody restarts it), or when
    systemd restarted it automatically more than ``max_restarts`` times since the gate began. A service that
    crashes on every start under ``Restart=on-failure`` never reaches ``failed``, so the counter is what ends the
    wait. ``NRestarts`` counts automatic restarts; a stop sets it back to 0, but a ``systemctl restart`` of a unit
    waiting in ``auto-restart`` kept it (systemd 252, captured): so the restarts counted are those after
    ``restarts_before`` (read when the gate began), or all of them when the counter went back below it.
    """
    state = props.get("ActiveState", "")
    if not state:
        return None  # systemctl said nothing usable: keep waiting on the endpoint alone
    try:
        restarts = int(props.get("NRestarts", "0") or 0)
    except ValueError:
        restarts = 0
    if restarts >= restarts_before:
        restarts -= restarts_before
    detail = "result {}, last exit status {}".format(props.get("Result") or "?", props.get("ExecMainStatus") or "?")
    fix = f"see journalctl -u {unit} for its output"
    if state == "failed":
        return f"{unit} has failed ({detail}, {restarts} automatic restarts): {fix}"
    if state == "inactive":
        return f"{unit} is not running ({detail}): {fix}"
    if restarts > max_restarts:
        return (f"{unit} stopped and was restarted {restarts} times (more than {max_restarts}) while the gate waited "
                f"({detail}): it fails at start; {fix}")
    return None
