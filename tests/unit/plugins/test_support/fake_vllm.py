"""A real local HTTP server that answers like vLLM 0.32's OpenAI API server, for the openai_probe tests.

The SSE chunks are byte-for-byte what vLLM writes (checked against its pydantic models with
``model_dump_json(exclude_unset=True)``; see vllm/entrypoints/openai/completion/serving.py):

    data: {"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"tiny","choices":[{"index":0,
           "text":" Paris","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":null,
           "token_ids":null}]}
    ...
    data: {"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"tiny","choices":[],
           "usage":{"prompt_tokens":5,"total_tokens":21,"completion_tokens":16}}      (with include_usage)
    data: [DONE]

sent with chunked transfer encoding (as uvicorn does), one HTTP chunk per SSE message.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKENS = [" Paris", ".", " It", " is", " the", " capital", " of", " France", ",", " a"]


def dumps(obj):
    return json.dumps(obj, separators=(",", ":"))


def completion_chunk(rid, model, text, finish_reason=None):
    return {"id": rid, "object": "text_completion", "created": 1700000000, "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason,
                         "stop_reason": None, "prompt_token_ids": None, "token_ids": None}]}


def chat_chunk(rid, model, delta, finish_reason=None, first=False):
    chunk = {"id": rid, "object": "chat.completion.chunk", "created": 1700000000, "model": model,
             "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
    if first:
        chunk.update(prompt_token_ids=None, prompt_text=None)
    return chunk


def usage_chunk(rid, model, obj, prompt_tokens, completion_tokens):
    return {"id": rid, "object": obj, "created": 1700000000, "model": model, "choices": [],
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
                      "completion_tokens": completion_tokens}}


class FakeVllm:
    """Behaviour switches (attributes, change them between requests):

    behaviour: ok | http500 | malformed | stall | endless | no_done | stream_error | empty_text | split
    first_token_delay / token_delay: seconds before the first token / between tokens
    health_status: status of GET /health; served: names listed by /v1/models; api_key: required key
    """

    def __init__(self, served=("tiny",), api_key=None):
        self.served = list(served)
        self.api_key = api_key
        self.behaviour = "ok"
        self.first_token_delay = 0.0
        self.token_delay = 0.0
        self.health_status = 200
        self.usage_tokens = None     # completion_tokens the usage chunk reports (None: the true count)
        self.bodies = []
        self.headers = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.counter = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self.server.shutdown()
        self.server.server_close()

    def sleep(self, seconds):
        self._stop.wait(seconds)

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            def send_json(self, status, obj):
                body = dumps(obj).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def authorized(self):
                fake.headers.append(dict(self.headers))
                if fake.api_key and self.headers.get("Authorization") != f"Bearer {fake.api_key}":
                    self.send_json(401, {"error": "Unauthorized"})
                    return False
                return True

            def do_GET(self):
                if self.path == "/health":
                    self.send_response(fake.health_status)
                    self.send_header("content-length", "0")
                    self.end_headers()
                elif self.path == "/v1/models":
                    if self.authorized():
                        self.send_json(200, {"object": "list", "data": [
                            {"id": name, "object": "model", "created": 1700000000, "owned_by": "vllm",
                             "root": "/models/" + name, "parent": None, "max_model_len": 512, "permission": []}
                            for name in fake.served]})
                else:
                    self.send_json(404, {"detail": "Not Found"})

            def chunk(self, data):
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                req = json.loads(self.rfile.read(length))
                chat = self.path == "/v1/chat/completions"
                with fake._lock:
                    fake.bodies.append(req)
                    fake.counter += 1
                    rid = f"{'chatcmpl' if chat else 'cmpl'}-{fake.counter}"
                if not self.authorized():
                    return
                if self.path not in ("/v1/completions", "/v1/chat/completions"):
                    self.send_json(404, {"detail": "Not Found"})
                    return
                if req.get("model") not in fake.served:
                    self.send_json(404, {"error": {"message": f"The model `{req.get('model')}` does not exist.",
                                                   "type": "NotFoundError", "param": "model", "code": 404}})
                    return
                if fake.behaviour == "http500":
                    self.send_json(500, {"error": {"message": "EngineCore encountered an issue.",
                                                   "type": "InternalServerError", "param": None, "code": 500}})
                    return
                with fake._lock:
                    fake.in_flight += 1
                    fake.max_in_flight = max(fake.max_in_flight, fake.in_flight)
                self.counted = True
                try:
                    self.stream(req, chat, rid)
                finally:
                    self.leave()

            def leave(self):
                # A request stops counting before its last bytes go out: once the client has read them it may
                # send its next request, which a loaded machine can start handling before this thread resumes.
                if getattr(self, "counted", False):
                    self.counted = False
                    with fake._lock:
                        fake.in_flight -= 1

            def stream(self, req, chat, rid):
                self.send_response(200)
                self.send_header("content-type", "text/event-stream; charset=utf-8")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                model = req["model"]
                n = int(req.get("max_tokens") or 16)
                messages = []
                if fake.behaviour == "stall":
                    fake.sleep(30)
                    return
                if fake.behaviour == "endless":   # answers, and never stops (up to 30 s)
                    for i in range(3000):
                        self.chunk(f"data: {dumps(completion_chunk(rid, model, TOKENS[i % len(TOKENS)]))}\n\n".encode())
                        fake.sleep(0.01)
                    return
                fake.sleep(fake.first_token_delay)
                if chat:
                    messages.append(chat_chunk(rid, model, {"role": "assistant", "content": ""}, first=True))
                for i in range(n):
                    text = "" if fake.behaviour == "empty_text" else TOKENS[i % len(TOKENS)]
                    finish = "length" if i == n - 1 else None
                    if chat:
                        messages.append(chat_chunk(rid, model, {"content": text}, finish))
                    else:
                        messages.append(completion_chunk(rid, model, text, finish))
                if (req.get("stream_options") or {}).get("include_usage"):
                    obj = "chat.completion.chunk" if chat else "text_completion"
                    told = n if fake.usage_tokens is None else fake.usage_tokens
                    # a token-id prompt counts its ids, as vLLM does; the text prompts here are 5 tokens
                    prompt = req.get("prompt")
                    prompt_tokens = len(prompt) if isinstance(prompt, list) else 5
                    messages.append(usage_chunk(rid, model, obj, prompt_tokens, told))
                wire = [f"data: {dumps(m)}\n\n".encode() for m in messages]
                if fake.behaviour == "malformed":
                    wire.insert(2, b'data: {"id":"cmpl-x","object":"text_completion","choices":[{"text": "tru\n\n')
                if fake.behaviour == "stream_error":
                    err = {"error": {"message": "Internal server error", "type": "InternalServerError",
                                     "param": None, "code": 500}}
                    wire = wire[:1] + [f"data: {dumps(err)}\n\n".encode()]
                if fake.behaviour != "no_done":
                    wire.append(b"data: [DONE]\n\n")
                for i, data in enumerate(wire):
                    if i and fake.token_delay:
                        fake.sleep(fake.token_delay)
                    if i == len(wire) - 1:
                        self.leave()
                    if fake.behaviour == "split":
                        # SSE messages cut across HTTP chunks, CRLF line ends: the decoder must reassemble them
                        data = data.replace(b"\n", b"\r\n")
                        for piece in (data[:7], data[7:-1], data[-1:]):
                            self.chunk(piece)
                    else:
                        self.chunk(data)
                self.leave()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        return Handler
