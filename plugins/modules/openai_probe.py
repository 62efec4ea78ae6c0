# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: openai_probe
short_description: Probe an OpenAI-compatible server (vLLM) with streaming requests, or check its health
version_added: 0.1.0
description:
  - In O(mode=bench), sends O(requests) streaming requests to C(/v1/completions) (or C(/v1/chat/completions)
    with O(chat=true)), at most O(concurrency) at a time, and reports per request and aggregated the time to
    first token, tokens per second, end-to-end latency, time per output token and the errors (kind, HTTP status,
    body snippet).
  - "The server-sent events are read as vLLM writes them, one C(data: {json}) line per chunk, the usage in a last
    chunk with no choices (asked for with C(stream_options.include_usage)), then C(data: [DONE])."
  - Output tokens come from that usage when the server sends it (RV(token_source=usage)), otherwise every chunk
    with choices counts as one token (RV(token_source=chunks)).
  - Time to first token is measured as C(vllm bench serve) does, at the first chunk that carries choices.
  - Compares the results with the SLO thresholds O(slo_ttft_ms), O(slo_tokens_per_s) and O(slo_max_error_rate)
    and returns RV(slo_ok) and RV(violations); with O(fail_on_slo=true) a violation fails the task.
  - In O(mode=health), checks that C(GET /health) answers 200, that C(GET /v1/models) lists O(model), and that one
    real completion of O(prompt) returns non-empty text; the task fails and RV(failures) says what failed.
  - In O(mode=health) with O(answers), also asks each fixed question at temperature 0 and checks that the answer
    contains what it should; fluent text from a wrong conversion, tokenizer or chat template fails there.
  - Changes nothing. It runs in check mode too (it only sends requests), so a health gate or a benchmark also
    measures in C(--check) runs.
options:
  mode:
    description:
      - V(bench) measures; V(health) runs the health checks.
    type: str
    choices: [bench, health]
    default: bench
  base_url:
    description:
      - Root URL of the server, for example V(http://127.0.0.1:8000). A trailing C(/v1) is accepted and dropped.
    type: str
    required: true
  model:
    description:
      - The served model name to ask for.
      - When not set, the first model listed by C(/v1/models) is used in O(mode=health); O(mode=bench) needs it.
    type: str
  prompt:
    description: The prompt (or, with O(chat=true), the user message).
    type: str
    default: The capital of France is
  max_tokens:
    description: Tokens to generate per request.
    type: int
    default: 64
  input_len:
    description:
      - Send prompts of exactly this many tokens instead of O(prompt) (O(mode=bench), completions only) - the
        workload of C(vllm bench serve --dataset-name random --random-input-len N).
      - Each request gets its own sequence of token ids, C((offset + index + j) % vocab_size) with a random offset
        as vLLM's random dataset builds them, sent as a token-id C(prompt) (the completions API takes a list of
        integers), so the server sees exactly this many prompt tokens and no tokenizer is needed on the node.
      - Needs O(vocab_size).
    type: int
  vocab_size:
    description: The tokenizer's vocabulary size (token ids are drawn below it); needed with O(input_len).
    type: int
  seed:
    description: Seed of the random offsets of the O(input_len) prompts.
    type: int
    default: 0
  warmup:
    description:
      - Requests sent before the measured run and not counted (C(vllm bench serve) sends one, its initial test
        run, plus C(--num-warmups)).
    type: int
    default: 0
  requests:
    description: Number of requests to send in O(mode=bench).
    type: int
    default: 10
  concurrency:
    description: Requests in flight at the same time.
    type: int
    default: 1
  timeout:
    description:
      - Seconds one request may take, from sending it to the end of its stream; also the socket timeout.
    type: float
    default: 60
  api_key:
    description: "Sent as C(Authorization: Bearer ...) when set."
    type: str
  answers:
    description:
      - O(mode=health) only. Fixed questions and what their answers must contain, each asked at temperature 0
        (greedy, so the same model gives the same answer every time).
      - Each entry has C(prompt) (the question), C(expect) (a Python regular expression, searched
        case-insensitively in the answer), C(chat) (default V(true), one user message to C(/v1/chat/completions)
        with the model's own chat template; V(false), a C(/v1/completions) prompt) and C(max_tokens) (default 32).
      - A bad entry fails the task before anything is sent, naming the entry.
    type: list
    elements: dict
    default: []
  chat:
    description: Use C(/v1/chat/completions) with one user message instead of C(/v1/completions).
    type: bool
    default: false
  include_usage:
    description: Ask for the token usage in the last chunk (C(stream_options.include_usage)).
    type: bool
    default: true
  extra_body:
    description:
      - "Further fields merged into every request body, for example C({ignore_eos: true, temperature: 0})."
    type: dict
    default: {}
  validate_certs:
    description: Verify the server's TLS certificate for V(https://) URLs.
    type: bool
    default: true
  ca_path:
    description: CA bundle to verify the server's certificate with.
    type: path
  slo_ttft_ms:
    description: Highest acceptable time to first token in milliseconds (the O(slo_ttft_stat) statistic).
    type: float
  slo_ttft_stat:
    description: Which time-to-first-token statistic O(slo_ttft_ms) limits.
    type: str
    choices: [mean, p50, p90, p99, max]
    default: p90
  slo_tokens_per_s:
    description:
      - Lowest acceptable output throughput, all output tokens divided by the wall time of the run
        (RV(output_tokens_per_s)), comparable to the C(output_throughput) of C(vllm bench serve).
    type: float
  slo_max_error_rate:
    description: Highest acceptable share of failed requests (0 to 1).
    type: float
    default: 0.0
  fail_on_slo:
    description: Fail the task when an SLO is violated (the results are returned with the failure).
    type: bool
    default: false
  return_requests:
    description: Return the measurements of every request in RV(per_request).
    type: bool
    default: true
  unit:
    description:
      - O(mode=health) only. The systemd unit that serves O(base_url). When the gate fails, the unit's state is read
        (C(systemctl show)); when systemd gave up on it, it is not running, or it was restarted automatically more
        than O(unit_max_restarts) times since it was last started, the result has RV(unit_stopped) set, so that an
        C(until) loop can stop waiting for a service that fails at every start.
    type: str
  unit_max_restarts:
    description: O(mode=health) with O(unit). Automatic restarts of the unit tolerated while waiting.
    type: int
    default: 3
  unit_restarts_before:
    description:
      - O(mode=health) with O(unit). The unit's C(NRestarts) when the wait began; the restarts counted are those
        after it (a C(systemctl restart) does not always set the counter back to 0).
    type: int
    default: 0
extends_documentation_fragment:
  - ascendai.vllm.attributes
attributes:
  check_mode:
    support: full
    details: Read-only; it sends its requests in check mode too.
  diff_mode:
    support: none
notes:
  - The module runs on the target node; point O(base_url) at an address the node can reach (for the service on
    the same node V(http://127.0.0.1:PORT)).
  - In O(mode=bench) the task fails only when no request succeeded, or with O(fail_on_slo=true) on a violation.
  - Standard library only (C(http.client), threads); no C(openai) or C(aiohttp) is needed on the node.
seealso:
  - plugin: ascendai.vllm.bench_report
    plugin_type: filter
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: Wait until the service answers a real completion
  ascendai.vllm.openai_probe:
    mode: health
    base_url: http://127.0.0.1:8000
    model: deepseek
    api_key: "{{ vllm_service_api_key }}"
  register: vllm_health
  until: vllm_health is succeeded
  retries: 60
  delay: 10

- name: 50 streaming requests, 8 at a time, against the guide's SLOs
  ascendai.vllm.openai_probe:
    base_url: http://127.0.0.1:8000
    model: deepseek
    requests: 50
    concurrency: 8
    max_tokens: 128
    extra_body:
      ignore_eos: true
    slo_ttft_ms: 350
    slo_tokens_per_s: 1200
    fail_on_slo: true
  register: probe

- name: Show the time to first token
  ansible.builtin.debug:
    msg: "TTFT p50 {{ probe.ttft_ms.p50 }} ms, {{ probe.output_tokens_per_s }} tokens/s"
"""

RETURN = r"""
unit_stopped:
  description: The unit of O(unit) has stopped for good (failed, not running, or restarted more than
    O(unit_max_restarts) times); the message says which and where its log is.
  returned: O(mode=health) with O(unit), when the gate failed
  type: bool
  sample: true
unit_state:
  description: The unit's C(ActiveState), C(SubState), C(Result), C(NRestarts) and C(ExecMainStatus).
  returned: O(mode=health) with O(unit), when the gate failed
  type: dict
  sample: {ActiveState: activating, SubState: auto-restart, Result: exit-code, NRestarts: "4", ExecMainStatus: "1"}
mode:
  description: The mode that ran.
  returned: always
  type: str
  sample: bench
model:
  description: The model name asked for.
  returned: always
  type: str
  sample: deepseek
endpoint:
  description: The URL path the requests went to, after O(base_url).
  returned: always
  type: str
  sample: /v1/completions
requests:
  description: Requests sent.
  returned: O(mode=bench)
  type: int
  sample: 50
succeeded:
  description: "Requests whose stream ended with C(data: [DONE]) after at least one token."
  returned: O(mode=bench)
  type: int
  sample: 50
input_tokens:
  description: Prompt tokens of the succeeded requests, as the server counted them (C(usage.prompt_tokens)); null
    when the server sent no usage.
  returned: O(mode=bench)
  type: int
  sample: 6400
input_len:
  description: O(input_len) when token-id prompts were sent, else null (the O(prompt) text was sent).
  returned: O(mode=bench)
  type: int
  sample: 128
warmup_requests:
  description: Requests sent before the measured run (O(warmup)), not counted in the figures.
  returned: O(mode=bench)
  type: int
  sample: 1
warmup_failed:
  description: Warm-up requests that failed.
  returned: O(mode=bench)
  type: int
  sample: 0
failed_requests:
  description: Requests that failed (see RV(errors)).
  returned: O(mode=bench)
  type: int
  sample: 0
error_rate:
  description: RV(failed_requests) / RV(requests).
  returned: O(mode=bench)
  type: float
  sample: 0.0
errors_by_kind:
  description:
    - Failed requests per kind, C(http) (status not 200), C(connection), C(timeout), C(tls), C(protocol)
      (malformed SSE or JSON), C(stream) (an error object in the stream), C(incomplete) (no C([DONE])),
      C(empty) (no token).
  returned: O(mode=bench)
  type: dict
  sample: {http: 2}
errors:
  description: The first 20 failed requests with C(index), C(kind), C(status), C(message) and C(body) (a snippet).
  returned: O(mode=bench)
  type: list
  elements: dict
  sample:
    - index: 3
      kind: http
      status: 500
      message: "HTTP 500 Internal Server Error: {\"error\": ...}"
      body: "{\"error\": ...}"
duration_s:
  description: Wall time of the whole run in seconds.
  returned: O(mode=bench)
  type: float
  sample: 12.5
output_tokens:
  description: Output tokens of the successful requests.
  returned: O(mode=bench)
  type: int
  sample: 6400
token_source:
  description: Where the token counts come from, C(usage), C(chunks) or C(mixed).
  returned: O(mode=bench)
  type: str
  sample: usage
output_tokens_per_s:
  description: RV(output_tokens) / RV(duration_s), the run's output throughput.
  returned: O(mode=bench)
  type: float
  sample: 512.0
request_throughput:
  description: Successful requests per second.
  returned: O(mode=bench)
  type: float
  sample: 4.0
ttft_ms:
  description: Time to first token in ms over the successful requests (C(mean), C(p50), C(p90), C(p99), C(min),
    C(max), C(count)).
  returned: O(mode=bench)
  type: dict
  sample: {mean: 120.4, p50: 118.0, p90: 150.2, p99: 170.9, min: 101.0, max: 171.3, count: 50}
e2e_ms:
  description:
    - End-to-end latency in ms, from sending the request to its last token chunk (as C(vllm bench serve) counts);
      same statistics.
  returned: O(mode=bench)
  type: dict
tpot_ms:
  description: Time per output token after the first, in ms; same statistics.
  returned: O(mode=bench)
  type: dict
tokens_per_s:
  description: Per-request output tokens / end-to-end time; same statistics.
  returned: O(mode=bench)
  type: dict
per_request:
  description:
    - One entry per request with C(index), C(ok), C(status), C(ttft_ms), C(e2e_ms), C(tpot_ms),
      C(output_tokens), C(input_tokens), C(token_source), C(chunks), C(tokens_per_s), C(finish_reason),
      C(text) (first 200 characters), C(error_kind), C(error), C(body).
  returned: O(mode=bench) and O(return_requests=true)
  type: list
  elements: dict
slo:
  description: The thresholds compared (null when not set).
  returned: O(mode=bench)
  type: dict
  sample: {ttft_ms: 350.0, ttft_stat: p90, tokens_per_s: 1200.0, max_error_rate: 0.0}
slo_ok:
  description: True when no SLO is violated.
  returned: O(mode=bench)
  type: bool
violations:
  description: The violated SLOs, each with C(slo), C(limit), C(measured) and C(message).
  returned: O(mode=bench)
  type: list
  elements: dict
  sample:
    - slo: ttft_ms
      limit: 350.0
      measured: 512.3
      message: time to first token p90 512.3 ms > 350 ms
healthy:
  description: True when all three health checks passed.
  returned: O(mode=health)
  type: bool
failures:
  description: What failed in O(mode=health), one line each.
  returned: O(mode=health)
  type: list
  elements: str
  sample: ["GET /v1/models lists ['other'], not the served name 'deepseek'"]
served_models:
  description: Model ids listed by C(/v1/models).
  returned: O(mode=health)
  type: list
  elements: str
  sample: [deepseek]
checks:
  description:
    - Details of the C(health), C(models) and C(completion) checks (status, error, completion text).
    - With O(answers), C(answers) is a list with, for each question, C(prompt), C(expect), C(chat), C(ok), C(status)
      and C(text) (the answer).
  returned: O(mode=health)
  type: dict
  sample:
    answers:
      - prompt: What is the capital of France?
        expect: Paris
        chat: true
        ok: true
        status: 200
        text: The capital of France is Paris.
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ascendai.vllm.plugins.module_utils._openai_probe import (
    UNIT_PROPERTIES,
    Endpoint,
    build_payload,
    evaluate_slo,
    health_check,
    normalize_answers,
    parse_systemctl_show,
    random_token_prompts,
    run_probe,
    unit_stopped,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "choices": ["bench", "health"], "default": "bench"},
            "base_url": {"type": "str", "required": True},
            "model": {"type": "str"},
            "prompt": {"type": "str", "default": "The capital of France is"},
            "max_tokens": {"type": "int", "default": 64, "no_log": False},
            "requests": {"type": "int", "default": 10},
            "input_len": {"type": "int"},
            "vocab_size": {"type": "int"},
            "seed": {"type": "int", "default": 0},
            "warmup": {"type": "int", "default": 0},
            "concurrency": {"type": "int", "default": 1},
            "timeout": {"type": "float", "default": 60},
            "api_key": {"type": "str", "no_log": True},
            "chat": {"type": "bool", "default": False},
            "answers": {"type": "list", "elements": "dict", "default": []},
            "include_usage": {"type": "bool", "default": True},
            "extra_body": {"type": "dict", "default": {}},
            "validate_certs": {"type": "bool", "default": True},
            "ca_path": {"type": "path"},
            "slo_ttft_ms": {"type": "float"},
            "slo_ttft_stat": {"type": "str", "choices": ["mean", "p50", "p90", "p99", "max"], "default": "p90"},
            "slo_tokens_per_s": {"type": "float", "no_log": False},
            "slo_max_error_rate": {"type": "float", "default": 0.0},
            "fail_on_slo": {"type": "bool", "default": False},
            "return_requests": {"type": "bool", "default": True},
            "unit": {"type": "str"},
            "unit_max_restarts": {"type": "int", "default": 3},
            "unit_restarts_before": {"type": "int", "default": 0},
        },
        required_if=[("mode", "bench", ("model",))],
        supports_check_mode=True,
    )
    p = module.params
    for name in ("max_tokens", "requests", "concurrency"):
        if p[name] < 1:
            module.fail_json(msg=f"{name}={p[name]}: must be at least 1")
    if p["warmup"] < 0:
        module.fail_json(msg=f"warmup={p['warmup']}: must be 0 or more")
    prompts = None
    if p["input_len"] is not None and p["mode"] == "bench":
        if p["chat"]:
            module.fail_json(msg="input_len sends token-id prompts, which only the completions API takes: "
                                 "set chat=false, or leave input_len unset and give a prompt")
        try:
            prompts = random_token_prompts(p["requests"], p["input_len"], p["vocab_size"], seed=p["seed"])
        except ValueError as exc:
            module.fail_json(msg=f"input_len={p['input_len']}: {exc}")
    try:
        answers = normalize_answers(p["answers"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if answers and p["mode"] != "health":
        module.fail_json(msg="answers is checked in mode=health only: set mode=health, or leave answers empty")
    if p["timeout"] <= 0:
        module.fail_json(msg=f"timeout={p['timeout']}: must be more than 0 seconds")
    if not 0.0 <= p["slo_max_error_rate"] <= 1.0:
        module.fail_json(msg=f"slo_max_error_rate={p['slo_max_error_rate']}: must be between 0 and 1")
    try:
        endpoint = Endpoint(p["base_url"], api_key=p["api_key"], timeout=p["timeout"],
                            validate_certs=p["validate_certs"], ca_path=p["ca_path"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    path = "/v1/chat/completions" if p["chat"] else "/v1/completions"

    if p["mode"] == "health":
        res = health_check(endpoint, model=p["model"], prompt=p["prompt"], max_tokens=p["max_tokens"],
                           chat=p["chat"], extra_body=p["extra_body"], answers=answers)
        result = dict(changed=False, mode="health", model=res["model"], endpoint=path, healthy=res["ok"],
                      failures=res["failures"], served_models=res["served_models"], checks=res["checks"])
        if not res["ok"]:
            msg = "vLLM health gate at {}: {}".format(p["base_url"], "; ".join(res["failures"]))
            if p["unit"]:
                rc, out, err = module.run_command(["systemctl", "show", p["unit"]]
                                                  + [f"--property={name}" for name in UNIT_PROPERTIES])
                props = parse_systemctl_show(out) if rc == 0 else {}
                stopped = unit_stopped(props, p["unit"], p["unit_max_restarts"], p["unit_restarts_before"])
                result.update(unit_state=props, unit_stopped=bool(stopped))
                if stopped:
                    msg = f"{msg}; {stopped}"
            module.fail_json(msg=msg, **result)
        module.exit_json(**result)

    payload = build_payload(p["model"], p["prompt"], p["max_tokens"], chat=p["chat"],
                            include_usage=p["include_usage"], extra_body=p["extra_body"])
    per_request, summary = run_probe(endpoint, payload, requests=p["requests"], concurrency=p["concurrency"],
                                     chat=p["chat"], warmup=p["warmup"], prompts=prompts)
    summary["input_len"] = p["input_len"] if prompts is not None else None
    slo_ok, violations = evaluate_slo(summary, slo_ttft_ms=p["slo_ttft_ms"], slo_tokens_per_s=p["slo_tokens_per_s"],
                                      ttft_stat=p["slo_ttft_stat"], max_error_rate=p["slo_max_error_rate"])
    result = dict(changed=False, mode="bench", model=p["model"], endpoint=path, slo_ok=slo_ok, violations=violations,
                  slo={"ttft_ms": p["slo_ttft_ms"], "ttft_stat": p["slo_ttft_stat"],
                       "tokens_per_s": p["slo_tokens_per_s"], "max_error_rate": p["slo_max_error_rate"]},
                  **summary)
    if p["return_requests"]:
        result["per_request"] = per_request
    if summary["succeeded"] == 0:
        first = summary["errors"][0]
        module.fail_json(msg="all {} requests to {}{} failed; first: {}".format(
            summary["requests"], p["base_url"], path, first["message"]), **result)
    if p["fail_on_slo"] and not slo_ok:
        module.fail_json(msg="SLO violated: " + "; ".join(v["message"] for v in violations), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
