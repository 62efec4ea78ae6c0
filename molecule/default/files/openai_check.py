"""Exercise the sandbox endpoint as a user would, with the real openai client, and read /metrics.

Usage: OPENAI_API_KEY=KEY openai_check.py BASE_URL MODEL   (BASE_URL without /v1)
With a key (the environment, never argv), a request without it must get 401 first (secure by default);
/metrics and /health stay open, as vLLM guards only /v1, /v2, /inference and /cohere.
Exits non-zero, with the reason, on anything unexpected.
"""

import os
import re
import sys
import urllib.error
import urllib.request

import openai


def refused_without_key(base):
    """The status /v1/models answers without a key, and with a wrong one."""
    statuses = []
    for headers in ({}, {"Authorization": "Bearer not-the-key"}):
        try:
            urllib.request.urlopen(urllib.request.Request(base + "/v1/models", headers=headers), timeout=30)
            statuses.append(200)
        except urllib.error.HTTPError as exc:
            statuses.append(exc.code)
    return statuses


def main(base, model):
    key = os.environ.get("OPENAI_API_KEY", "")
    if key:
        statuses = refused_without_key(base)
        assert statuses == [401, 401], "without the key /v1/models answered %r, not 401" % statuses
        print("without the key: 401; with a wrong key: 401")
    client = openai.OpenAI(base_url=base + "/v1", api_key=key or "EMPTY", timeout=120)
    ids = [m.id for m in client.models.list().data]
    assert model in ids, "models lists %r, not %r" % (ids, model)
    print("models:", ids)

    # The sandbox serves a real model (SmolLM2-135M-Instruct): at temperature 0 it knows these. A broken
    # conversion, tokenizer or chat template still writes text, not these answers.
    done = client.completions.create(model=model, prompt="The capital of France is", max_tokens=12, temperature=0)
    assert done.usage.completion_tokens > 0, done
    assert re.search(r"\bParis\b", done.choices[0].text), "completion: %r has no Paris" % done.choices[0].text
    print("completion:", repr(done.choices[0].text))

    for question, expect in (("What is the capital of France?", r"\bParis\b"), ("What is 2+2?", r"\b4\b")):
        chat = client.chat.completions.create(model=model, messages=[{"role": "user", "content": question}],
                                              max_tokens=32, temperature=0)
        answer = chat.choices[0].message.content or ""
        assert re.search(expect, answer), "chat %r answered %r, without %s" % (question, answer, expect)
        print("chat:", repr(question), "->", repr(answer))

    pieces = []
    for chunk in client.completions.create(model=model, prompt="Once upon a time", max_tokens=12, stream=True):
        if chunk.choices:
            pieces.append(chunk.choices[0].text)
    assert len(pieces) > 1, "streaming gave %d chunks" % len(pieces)
    print("stream: %d chunks %r" % (len(pieces), "".join(pieces)))

    metrics = urllib.request.urlopen(base + "/metrics", timeout=30).read().decode()   # no key: not guarded
    tokens = [line for line in metrics.splitlines()
              if line.startswith("vllm:generation_tokens_total") and not line.startswith("#")]
    assert tokens and float(tokens[0].rsplit(" ", 1)[1]) > 0, "no generated tokens in /metrics"
    print("metrics:", tokens[0])


if __name__ == "__main__":
    main(sys.argv[1].rstrip("/"), sys.argv[2])
