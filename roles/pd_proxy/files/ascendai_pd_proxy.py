# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""ascendai.vllm P/D proxy: the front that sends each completion to a prefill rank and a decode rank.

It runs behind the collection's nginx front (ascendai.vllm.api_front: TLS and the key check) on the loopback, and
checks the key again itself, because it forwards the request, with the service key, to ranks on other nodes. It has
no management routes: the ranks come from its configuration file only (ascendai.vllm.pd_proxy renders it from the
pd_plan filter's ``proxy`` output). Python's standard library only, so it runs under any Python 3.9+ the node has,
the serving venv's included, and nothing is downloaded for it.

The order of the two requests and the fields set on each follow the connector (docs/pd.md gives each with its source
file:line at a tag):

* ``prefill_first`` (MooncakeConnectorV1, NixlConnector): prefill with ``kv_transfer_params``
  ``{do_remote_decode: true, ...}``, ``stream: false``, ``max_tokens: 1``; then decode with the
  ``kv_transfer_params`` the prefill rank answered with. The decode rank pulls the KV cache.
* ``decode_first`` (MooncakeLayerwiseConnector): decode with ``{do_remote_prefill: true, metaserver: URL}``; the
  decode rank posts its own ``kv_transfer_params`` to the metaserver URL, and the proxy then sends the prefill with
  them. The prefill rank pushes layer by layer. The metaserver route is served only on its own listener, to the
  decode ranks' addresses: vllm-ascend's connector posts to it without any key.

Bounded: a connect timeout and an idle-read timeout on every upstream call, connection errors retried on the
prefill step only (a prefill replays nothing the client has seen; a decode is never sent twice), at most
``max_in_flight`` requests at once, a body limit. Prometheus metrics of its own at /metrics.
"""

from __future__ import annotations

import argparse
import hmac
import http.client
import itertools
import json
import logging
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

LOG = logging.getLogger("ascendai_pd_proxy")

COMPLETION_ROUTES = ("/v1/completions", "/v1/chat/completions")
OPEN_ROUTES = ("/health",)
METASERVER_ROUTE = "/v1/metaserver"
ORDERS = ("prefill_first", "decode_first")
# How each connector's prefill request treats min_tokens: vllm-ascend's Mooncake proxies set it to 1, vLLM's Nixl
# toy proxy removes it (and min_completion_tokens) from the prefill request and keeps it for the decode.
PREFILL_MIN_TOKENS = {"MooncakeConnectorV1": "one", "MooncakeLayerwiseConnector": "one", "NixlConnector": "drop"}
HISTOGRAM_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-authorization",
               "proxy-authenticate", "content-length"}

DEFAULTS = {
    "listen_host": "127.0.0.1",
    "listen_port": 8000,
    "metaserver_host": "",
    "metaserver_port": 0,
    "metaserver_url": "",
    "metaserver_clients": [],
    "connector": "MooncakeConnectorV1",
    "order": "prefill_first",
    "prefill": [],
    "decode": [],
    "api_keys_file": "",
    "connect_timeout": 5.0,
    "read_timeout": 600.0,
    "prefill_retries": 2,
    "retry_delay": 0.2,
    "rank_down_seconds": 10.0,
    "max_in_flight": 512,
    "max_body_bytes": 16 * 1024 * 1024,
}


class ConfigError(ValueError):
    """The configuration file cannot run a proxy; the message names the key, the value and the fix."""


class UpstreamError(Exception):
    """An upstream call failed: kind is connect, timeout or status."""

    def __init__(self, kind, url, detail, status=None, body=b"", content_type="application/json"):
        super().__init__(f"{kind} error from {url}: {detail}")
        self.kind = kind
        self.url = url
        self.status = status
        self.body = body
        self.content_type = content_type


class NoRank(Exception):
    """No healthy rank of a role."""


# ---------------------------------------------------------------- configuration


def load_config(data, keys_text=None):
    """A checked configuration from the decoded JSON file; keys_text is the keys file's text (one key a line)."""
    if not isinstance(data, dict):
        raise ConfigError("the configuration file must hold a JSON object")
    # JSON has no comments: the file's header (Ansible's ansible_managed) is a key of its own.
    data = {k: v for k, v in data.items() if k != "_comment"}
    unknown = sorted(set(data) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"unknown configuration keys {unknown}: remove them (known: {sorted(DEFAULTS)})")
    config = dict(DEFAULTS, **data)
    if config["order"] not in ORDERS:
        raise ConfigError(f"order={config['order']!r}: use one of {', '.join(ORDERS)}")
    if config["connector"] not in PREFILL_MIN_TOKENS:
        raise ConfigError(f"connector={config['connector']!r}: use one of {', '.join(PREFILL_MIN_TOKENS)}")
    for role in ("prefill", "decode"):
        urls = config[role]
        if not isinstance(urls, list) or not urls:
            raise ConfigError(f"{role}={urls!r}: give at least one rank URL (http://HOST:PORT)")
        for url in urls:
            parts = urlsplit(url) if isinstance(url, str) else None
            if parts is None or parts.scheme != "http" or not parts.hostname or not parts.port:
                raise ConfigError(f"{role}: {url!r} is not http://HOST:PORT")
    for name in ("connect_timeout", "read_timeout", "retry_delay", "rank_down_seconds"):
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 or value > 86400:
            raise ConfigError(f"{name}={value!r}: give seconds above 0 and at most 86400")
    for name, low, high in (("prefill_retries", 0, 10), ("max_in_flight", 1, 100000),
                            ("max_body_bytes", 1, 1 << 31), ("listen_port", 1, 65535)):
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(f"{name}={value!r}: give an integer from {low} to {high}")
    if config["order"] == "decode_first":
        if not config["metaserver_url"] or not config["metaserver_host"] or not config["metaserver_port"]:
            raise ConfigError("order=decode_first needs metaserver_url, metaserver_host and metaserver_port: the "
                              "decode ranks post their kv_transfer_params there")
        if not config["metaserver_clients"]:
            raise ConfigError("metaserver_clients=[]: list the decode ranks' addresses, the only ones the "
                              "metaserver listener answers")
    keys = [line.strip() for line in (keys_text or "").splitlines() if line.strip() and not line.startswith("#")]
    if not keys:
        raise ConfigError(f"api_keys_file={config['api_keys_file']!r} holds no key: the proxy refuses to run open")
    config["api_keys"] = keys
    return config


def read_config(path):
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    keys_file = data.get("api_keys_file") if isinstance(data, dict) else None
    if not keys_file:
        raise ConfigError(f"api_keys_file is not set in {path}: give the file holding the service's API keys")
    with open(keys_file, encoding="utf-8") as handle:
        keys_text = handle.read()
    return load_config(data, keys_text)


# ---------------------------------------------------------------- pure request logic


def key_allowed(header, keys):
    """True when the Authorization header is ``Bearer KEY`` for one of keys (compared in constant time)."""
    if not header or not header.startswith("Bearer "):
        return False
    given = header[len("Bearer "):].strip().encode()
    found = False
    for key in keys:
        found |= hmac.compare_digest(given, key.encode())
    return found


def prefill_request(body, connector, kv_transfer_params=None):
    """The prefill rank's request: one token, not streamed; ``kv_transfer_params`` asks for a remote decode (or,
    decode first, is what the decode rank posted to the metaserver)."""
    payload = dict(body)
    if kv_transfer_params is None:
        kv_transfer_params = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                              "remote_block_ids": None, "remote_host": None, "remote_port": None}
    payload["kv_transfer_params"] = kv_transfer_params
    payload["stream"] = False
    payload["max_tokens"] = 1
    if "max_completion_tokens" in payload:
        payload["max_completion_tokens"] = 1
    payload.pop("stream_options", None)
    if PREFILL_MIN_TOKENS[connector] == "one":
        payload["min_tokens"] = 1
    else:
        payload.pop("min_tokens", None)
        payload.pop("min_completion_tokens", None)
    return payload


def decode_request(body, order, prefill_answer=None, metaserver_url=""):
    """The decode rank's request: the client's own, with the kv_transfer_params of the hand-off."""
    payload = dict(body)
    if order == "decode_first":
        payload["kv_transfer_params"] = {"do_remote_decode": False, "do_remote_prefill": True,
                                         "metaserver": metaserver_url}
    elif isinstance(prefill_answer, dict) and prefill_answer.get("kv_transfer_params"):
        payload["kv_transfer_params"] = prefill_answer["kv_transfer_params"]
    return payload


def engine_request_id(route, request_id):
    """The request id a vLLM server makes of X-Request-Id, which the layerwise connector posts to the metaserver
    (vllm-ascend's layerwise example proxy, get_api_request_id)."""
    return f"cmpl-{request_id}-0" if route == "/v1/completions" else f"chatcmpl-{request_id}"


def error_body(message, kind):
    return json.dumps({"error": {"message": message, "type": kind}}).encode()


# ---------------------------------------------------------------- ranks and metrics


class Rank:
    def __init__(self, role, url):
        parts = urlsplit(url)
        self.role = role
        self.url = url
        self.host = parts.hostname
        self.port = parts.port
        self.in_flight = 0
        self.down_until = 0.0


class Ranks:
    """Least in-flight choice among the ranks not marked down, ties broken round-robin."""

    def __init__(self, role, urls, down_seconds, clock=time.monotonic):
        self.role = role
        self.ranks = [Rank(role, url) for url in urls]
        self.down_seconds = down_seconds
        self.clock = clock
        self.lock = threading.Lock()
        self.turn = itertools.count()

    def acquire(self, exclude=()):
        with self.lock:
            now = self.clock()
            start = next(self.turn)
            count = len(self.ranks)
            order = [self.ranks[(start + i) % count] for i in range(count)]
            healthy = [r for r in order if r.down_until <= now and r not in exclude]
            if not healthy:
                raise NoRank(f"no healthy {self.role} rank (of {count}; a rank that refused a connection is left "
                             f"out for {self.down_seconds:g} s)")
            rank = min(healthy, key=lambda r: r.in_flight)
            rank.in_flight += 1
            return rank

    def release(self, rank):
        with self.lock:
            rank.in_flight -= 1

    def mark_down(self, rank):
        with self.lock:
            rank.down_until = self.clock() + self.down_seconds

    def up(self):
        now = self.clock()
        return [(r.url, r.down_until <= now) for r in self.ranks]


class Metrics:
    def __init__(self):
        self.lock = threading.Lock()
        self.requests = {}
        self.upstream_errors = {}
        self.retries = 0
        self.in_flight = 0
        self.histograms = {"prefill": [0] * (len(HISTOGRAM_BUCKETS) + 1), "decode": [0] * (len(HISTOGRAM_BUCKETS) + 1)}
        self.sums = {"prefill": 0.0, "decode": 0.0}

    def count_request(self, route, status):
        with self.lock:
            self.requests[(route, str(status))] = self.requests.get((route, str(status)), 0) + 1

    def count_error(self, role, kind):
        with self.lock:
            self.upstream_errors[(role, kind)] = self.upstream_errors.get((role, kind), 0) + 1

    def count_retry(self):
        with self.lock:
            self.retries += 1

    def add_in_flight(self, delta):
        with self.lock:
            self.in_flight += delta

    def observe(self, role, seconds):
        with self.lock:
            buckets = self.histograms[role]
            for i, bound in enumerate(HISTOGRAM_BUCKETS):
                if seconds <= bound:
                    buckets[i] += 1
            buckets[-1] += 1
            self.sums[role] += seconds

    def render(self, ranks):
        """Prometheus text exposition format 0.0.4."""
        out = []
        with self.lock:
            out += ["# HELP ascendai_pd_proxy_requests_total Requests answered, by route and HTTP status.",
                    "# TYPE ascendai_pd_proxy_requests_total counter"]
            for (route, status), value in sorted(self.requests.items()):
                out.append(f'ascendai_pd_proxy_requests_total{{route="{_label(route)}",status="{status}"}} {value}')
            out += ["# HELP ascendai_pd_proxy_upstream_errors_total Failed calls to ranks, by role and kind.",
                    "# TYPE ascendai_pd_proxy_upstream_errors_total counter"]
            for (role, kind), value in sorted(self.upstream_errors.items()):
                out.append(f'ascendai_pd_proxy_upstream_errors_total{{role="{role}",kind="{kind}"}} {value}')
            out += ["# HELP ascendai_pd_proxy_prefill_retries_total Prefill calls sent again after a connection error.",
                    "# TYPE ascendai_pd_proxy_prefill_retries_total counter",
                    f"ascendai_pd_proxy_prefill_retries_total {self.retries}",
                    "# HELP ascendai_pd_proxy_in_flight Completion requests being answered now.",
                    "# TYPE ascendai_pd_proxy_in_flight gauge",
                    f"ascendai_pd_proxy_in_flight {self.in_flight}"]
            for role in ("prefill", "decode"):
                name = f"ascendai_pd_proxy_{role}_seconds"
                out += [f"# HELP {name} Seconds of the {role} step (the decode: until its last byte).",
                        f"# TYPE {name} histogram"]
                buckets = self.histograms[role]
                for bound, value in zip(HISTOGRAM_BUCKETS, buckets):
                    out.append(f'{name}_bucket{{le="{bound:g}"}} {value}')
                out.append(f'{name}_bucket{{le="+Inf"}} {buckets[-1]}')
                out.append(f"{name}_sum {self.sums[role]:.6f}")
                out.append(f"{name}_count {buckets[-1]}")
        out += ["# HELP ascendai_pd_proxy_rank_up 1 when the rank is chosen, 0 while it is left out after an error.",
                "# TYPE ascendai_pd_proxy_rank_up gauge"]
        for group in ranks:
            for url, up in group.up():
                out.append(f'ascendai_pd_proxy_rank_up{{role="{group.role}",url="{_label(url)}"}} {int(up)}')
        return ("\n".join(out) + "\n").encode()


def _label(value):
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


# ---------------------------------------------------------------- upstream calls


def open_upstream(rank, path, payload, headers, connect_timeout, read_timeout):
    """POST payload as JSON; returns (connection, response) with the response's headers read. The connect timeout
    bounds the TCP connect, the read timeout every wait for bytes after it."""
    conn = http.client.HTTPConnection(rank.host, rank.port, timeout=connect_timeout)
    data = json.dumps(payload).encode()
    try:
        conn.connect()
    except socket.timeout as exc:
        conn.close()
        raise UpstreamError("connect", rank.url, f"no connection within {connect_timeout:g} s") from exc
    except OSError as exc:
        conn.close()
        raise UpstreamError("connect", rank.url, exc.strerror or type(exc).__name__) from exc
    conn.sock.settimeout(read_timeout)
    try:
        conn.request("POST", path, body=data, headers=dict(headers, **{"Content-Type": "application/json"}))
        response = conn.getresponse()
    except socket.timeout as exc:
        conn.close()
        raise UpstreamError("timeout", rank.url, f"no answer within {read_timeout:g} s") from exc
    except (OSError, http.client.HTTPException) as exc:
        conn.close()
        raise UpstreamError("connect", rank.url, type(exc).__name__) from exc
    return conn, response


def call_prefill(state, path, payload, request_id):
    """The prefill step: a connection error (nothing reached the rank's engine) is sent again to another rank, at
    most prefill_retries times; a timeout or an error status is not, and goes back to the client."""
    config = state.config
    tried = []
    attempt = 0
    while True:
        rank = state.prefill.acquire(exclude=tried)
        started = time.monotonic()
        try:
            conn, response = open_upstream(rank, path, payload, state.upstream_headers(request_id),
                                           config["connect_timeout"], config["read_timeout"])
            try:
                body = response.read()
            except socket.timeout as exc:
                raise UpstreamError("timeout", rank.url, f"no answer within {config['read_timeout']:g} s") from exc
            finally:
                conn.close()
            if response.status != 200:
                raise UpstreamError("status", rank.url, f"HTTP {response.status}", status=response.status,
                                    body=body, content_type=response.getheader("Content-Type", "application/json"))
            state.metrics.observe("prefill", time.monotonic() - started)
            try:
                return json.loads(body)
            except ValueError as exc:
                raise UpstreamError("status", rank.url, "the answer is not JSON", status=502) from exc
        except UpstreamError as exc:
            state.metrics.count_error("prefill", exc.kind)
            if exc.kind != "connect":
                raise
            state.prefill.mark_down(rank)
            tried.append(rank)
            attempt += 1
            if attempt > config["prefill_retries"]:
                raise
            state.metrics.count_retry()
            time.sleep(config["retry_delay"] * (2 ** (attempt - 1)))
        except NoRank:
            raise
        finally:
            state.prefill.release(rank)


# ---------------------------------------------------------------- the server


class ProxyState:
    def __init__(self, config):
        self.config = config
        self.prefill = Ranks("prefill", config["prefill"], config["rank_down_seconds"])
        self.decode = Ranks("decode", config["decode"], config["rank_down_seconds"])
        self.metrics = Metrics()
        self.slots = threading.BoundedSemaphore(config["max_in_flight"])
        self.pending = {}
        self.pending_lock = threading.Lock()

    def upstream_headers(self, request_id):
        # The ranks run with the service's key (vllm serve --api-key): the first key of the file.
        return {"Authorization": f"Bearer {self.config['api_keys'][0]}", "X-Request-Id": request_id}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "ascendai-pd-proxy"
    sys_version = ""

    # ------------------------------------------------------------ plumbing

    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        # The path only (no query string) and never a header: the Authorization header holds the key.
        LOG.info("%s %s %s", self.address_string(), self.command, self.path.split("?", 1)[0])

    def log_request(self, code="-", size="-"):
        LOG.info('%s "%s %s" %s', self.client_address[0], self.command, self.path.split("?", 1)[0], code)

    @property
    def state(self):
        return self.server.state

    def route(self):
        return self.path.split("?", 1)[0]

    def send_bytes(self, status, body, content_type="application/json", route=None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if status == 401:
            self.send_header("WWW-Authenticate", "Bearer")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.state.metrics.count_request(route or self.metric_route(), status)

    def send_error_json(self, status, message, kind, route=None):
        self.send_bytes(status, error_body(message, kind), route=route)

    def metric_route(self):
        route = self.route()
        known = COMPLETION_ROUTES + OPEN_ROUTES + ("/metrics", "/v1/models", METASERVER_ROUTE)
        return route if route in known else "other"

    def read_body(self):
        """The request body, Content-Length or chunked, at most max_body_bytes; None after answering an error."""
        limit = self.state.config["max_body_bytes"]
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            chunks, size = [], 0
            while True:
                line = self.rfile.readline(1024)
                try:
                    length = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    self.close_connection = True
                    self.send_error_json(400, "bad chunked body", "invalid_request_error")
                    return None
                if length == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                size += length
                if size > limit:
                    self.close_connection = True
                    self.send_error_json(413, f"the body is larger than {limit} bytes", "invalid_request_error")
                    return None
                chunks.append(self.rfile.read(length))
                self.rfile.readline(1024)
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if length < 0 or length > limit:
            self.close_connection = True
            self.send_error_json(413 if length > limit else 400, f"give a Content-Length of at most {limit} bytes",
                                 "invalid_request_error")
            return None
        return self.rfile.read(length)

    def authorized(self):
        if key_allowed(self.headers.get("Authorization", ""), self.state.config["api_keys"]):
            return True
        self.send_error_json(401, "give the service's API key: Authorization: Bearer KEY", "authentication_error")
        return False

    # ------------------------------------------------------------ routes

    def do_GET(self):
        route = self.route()
        if self.server.metaserver_only:
            self.send_error_json(404, "this listener serves the metaserver only", "not_found")
            return
        if route in OPEN_ROUTES:
            body = {"status": "ok", "connector": self.state.config["connector"], "order": self.state.config["order"],
                    "prefill_up": sum(up for _u, up in self.state.prefill.up()),
                    "decode_up": sum(up for _u, up in self.state.decode.up())}
            self.send_bytes(200, json.dumps(body).encode())
            return
        if not self.authorized():
            return
        if route == "/metrics":
            self.send_bytes(200, self.state.metrics.render([self.state.prefill, self.state.decode]),
                            "text/plain; version=0.0.4; charset=utf-8")
        elif route == "/v1/models":
            self.forward_models()
        else:
            self.send_error_json(404, f"no route {route}", "not_found", route="other")

    do_HEAD = do_GET

    def do_POST(self):
        route = self.route()
        if self.server.metaserver_only:
            if route == METASERVER_ROUTE:
                self.metaserver()
            else:
                self.send_error_json(404, "this listener serves the metaserver only", "not_found")
            return
        if route in OPEN_ROUTES:
            self.send_error_json(405, f"{route} answers GET", "invalid_request_error")
            return
        if route == METASERVER_ROUTE and self.server.metaserver:
            self.metaserver()
            return
        if not self.authorized():
            return
        if route not in COMPLETION_ROUTES:
            self.send_error_json(404, f"no route {route}", "not_found", route="other")
            return
        raw = self.read_body()
        if raw is None:
            return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError:
            self.send_error_json(400, "the body must be a JSON object", "invalid_request_error")
            return
        if not self.state.slots.acquire(blocking=False):
            self.send_error_json(503, f"the proxy has {self.state.config['max_in_flight']} requests in flight: "
                                 "try again later", "overloaded")
            return
        self.state.metrics.add_in_flight(1)
        try:
            if self.state.config["order"] == "prefill_first":
                self.prefill_then_decode(route, body)
            else:
                self.decode_then_prefill(route, body)
        finally:
            self.state.metrics.add_in_flight(-1)
            self.state.slots.release()

    def do_PUT(self):
        self.refuse_method()

    do_DELETE = do_PATCH = do_PUT

    def refuse_method(self):
        if self.server.metaserver_only or self.route() in OPEN_ROUTES or self.authorized():
            self.send_error_json(405, f"{self.command} is not served", "invalid_request_error")

    # ------------------------------------------------------------ the two steps

    def prefill_then_decode(self, route, body):
        request_id = uuid.uuid4().hex
        connector = self.state.config["connector"]
        try:
            answer = call_prefill(self.state, route, prefill_request(body, connector), request_id)
        except NoRank as exc:
            self.send_error_json(503, str(exc), "no_healthy_rank")
            return
        except UpstreamError as exc:
            self.upstream_failed("prefill", exc)
            return
        self.stream_decode(route, decode_request(body, "prefill_first", prefill_answer=answer), request_id)

    def decode_then_prefill(self, route, body):
        request_id = uuid.uuid4().hex
        entry = {"body": body, "route": route, "request_id": request_id, "done": threading.Event(), "error": None}
        key = engine_request_id(route, request_id)
        with self.state.pending_lock:
            self.state.pending[key] = entry
        try:
            payload = decode_request(body, "decode_first", metaserver_url=self.state.config["metaserver_url"])
            self.stream_decode(route, payload, request_id)
        finally:
            with self.state.pending_lock:
                self.state.pending.pop(key, None)

    def stream_decode(self, route, payload, request_id):
        """The decode step, sent once: its answer goes to the client as it comes (server-sent events stay
        events)."""
        config = self.state.config
        try:
            rank = self.state.decode.acquire()
        except NoRank as exc:
            self.send_error_json(503, str(exc), "no_healthy_rank")
            return
        started = time.monotonic()
        try:
            try:
                conn, response = open_upstream(rank, route, payload, self.state.upstream_headers(request_id),
                                               config["connect_timeout"], config["read_timeout"])
            except UpstreamError as exc:
                self.state.metrics.count_error("decode", exc.kind)
                if exc.kind == "connect":
                    self.state.decode.mark_down(rank)
                self.upstream_failed("decode", exc)
                return
            try:
                self.relay(response, rank)
            finally:
                conn.close()
                self.state.metrics.observe("decode", time.monotonic() - started)
        finally:
            self.state.decode.release(rank)

    def relay(self, response, rank):
        self.send_response(response.status)
        for name, value in response.getheaders():
            if name.lower() not in HOP_HEADERS and name.lower() not in ("server", "date"):
                self.send_header(name, value)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        status = response.status
        try:
            while True:
                chunk = response.read1(65536) if hasattr(response, "read1") else response.read(65536)
                if not chunk:
                    break
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        except socket.timeout:
            # Headers are out: the client learns of the cut from the unterminated chunked body.
            self.state.metrics.count_error("decode", "timeout")
            self.close_connection = True
            status = 504
        except OSError:
            self.close_connection = True
            status = 499
        if status != response.status or response.status >= 400:
            LOG.warning("decode %s answered %s", rank.url, response.status if status == response.status else status)
        self.state.metrics.count_request(self.route(), status)

    def upstream_failed(self, role, exc):
        if exc.kind == "status" and exc.status and exc.status < 500:
            # The rank refused the request itself (a validation error): the client sees the rank's answer.
            self.send_bytes(exc.status, exc.body, exc.content_type)
            return
        LOG.warning("%s step failed: %s", role, exc)
        status = 504 if exc.kind == "timeout" else 502
        self.send_error_json(status, f"the {role} rank failed: {exc}", f"{role}_{exc.kind}_error")

    def forward_models(self):
        config = self.state.config
        try:
            rank = self.state.decode.acquire()
        except NoRank as exc:
            self.send_error_json(503, str(exc), "no_healthy_rank")
            return
        try:
            conn = http.client.HTTPConnection(rank.host, rank.port, timeout=config["connect_timeout"])
            try:
                conn.request("GET", "/v1/models", headers=self.state.upstream_headers(uuid.uuid4().hex))
                conn.sock.settimeout(config["read_timeout"])
                response = conn.getresponse()
                body = response.read()
            finally:
                conn.close()
            self.send_bytes(response.status, body, response.getheader("Content-Type", "application/json"))
        except (OSError, http.client.HTTPException) as exc:
            self.state.metrics.count_error("decode", "connect")
            self.send_error_json(502, f"the decode rank failed: {type(exc).__name__}", "decode_connect_error")
        finally:
            self.state.decode.release(rank)

    # ------------------------------------------------------------ the layerwise metaserver

    def metaserver(self):
        if self.client_address[0] not in self.state.config["metaserver_clients"]:
            self.send_error_json(403, "the metaserver answers the decode ranks only", "permission_error")
            return
        raw = self.read_body()
        if raw is None:
            return
        try:
            params = json.loads(raw)
            key = params["request_id"]
        except (ValueError, KeyError, TypeError):
            self.send_error_json(400, "post the decode rank's kv_transfer_params with its request_id",
                                 "invalid_request_error")
            return
        with self.state.pending_lock:
            entry = self.state.pending.get(key)
        if entry is None:
            self.send_error_json(404, "no request in flight has that request_id", "not_found")
            return
        payload = prefill_request(entry["body"], self.state.config["connector"], kv_transfer_params=params)
        try:
            call_prefill(self.state, entry["route"], payload, entry["request_id"])
        except NoRank as exc:
            self.send_error_json(503, str(exc), "no_healthy_rank")
            return
        except UpstreamError as exc:
            self.upstream_failed("prefill", exc)
            return
        self.send_bytes(200, b'{"status": "ok"}')


class ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, state, metaserver_only=False, metaserver=False):
        self.state = state
        self.metaserver_only = metaserver_only
        self.metaserver = metaserver or metaserver_only
        family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.address_family = family
        super().__init__(address, Handler)


def make_servers(config):
    """The servers of a configuration: the client listener, and for decode_first the metaserver listener."""
    state = ProxyState(config)
    listen = (config["listen_host"], config["listen_port"])
    metaserver = (config["metaserver_host"], config["metaserver_port"])
    decode_first = config["order"] == "decode_first"
    # A plan whose proxy host is the loopback (every decode rank on the proxy's node) puts the metaserver on the
    # client listener's own address and port: one listener serves both.
    shared = decode_first and metaserver == listen
    servers = [ProxyServer(listen, state, metaserver=shared)]
    if decode_first and not shared:
        servers.append(ProxyServer((config["metaserver_host"], config["metaserver_port"]), state,
                                   metaserver_only=True))
    return state, servers


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the JSON configuration file")
    parser.add_argument("--check", action="store_true", help="check the configuration and exit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s", stream=sys.stderr)
    try:
        config = read_config(args.config)
    except (OSError, ValueError) as exc:
        print(f"ascendai_pd_proxy: {exc}", file=sys.stderr)
        return 2
    if args.check:
        print(f"configuration OK: {config['connector']} {config['order']}, {len(config['prefill'])} prefill and "
              f"{len(config['decode'])} decode ranks")
        return 0
    _state, servers = make_servers(config)
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers[1:]]
    for thread in threads:
        thread.start()
    LOG.info("listening on %s:%s (%s, %s)", config["listen_host"], config["listen_port"], config["connector"],
             config["order"])
    try:
        servers[0].serve_forever()
    except KeyboardInterrupt:
        pass
    for server in servers:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
