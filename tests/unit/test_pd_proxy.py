"""The P/D proxy (roles/pd_proxy/files/ascendai_pd_proxy.py) over real HTTP, against stand-in prefill and decode
servers running in threads of this process."""

from __future__ import annotations

import http.client
import importlib.util
import json
import logging
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROGRAM = os.path.join(ROOT, "roles", "pd_proxy", "files", "ascendai_pd_proxy.py")
KEY = "sk-pd-proxy-test-key-5b1f"
RANK_KEY = KEY


def _load():
    spec = importlib.util.spec_from_file_location("ascendai_pd_proxy", PROGRAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


proxy = _load()


class StandIn:
    """A vLLM rank: records every request; answers with kv_transfer_params (prefill) or a completion, streamed as
    server-sent events when asked."""

    def __init__(self, role, name, status=200, delay=0.0, on_request=None, stall=0.0):
        self.role, self.name, self.status, self.delay, self.on_request = role, name, status, delay, on_request
        self.stall = stall
        self.requests = []
        self.log = None
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                body = json.dumps({"data": [{"id": "m"}], "rank": outer.name}).encode()
                outer.requests.append({"path": self.path, "headers": dict(self.headers), "body": None})
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if outer.log is not None:
                    outer.log.append(outer.role)
                if outer.on_request:
                    outer.on_request(self, body)
                if outer.delay:
                    time.sleep(outer.delay)
                if outer.status != 200:
                    answer = json.dumps({"error": {"message": "refused by the rank"}}).encode()
                    self.send_response(outer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                    return
                if outer.role == "prefill":
                    answer = {"id": "p", "choices": [{"text": "x"}],
                              "kv_transfer_params": {"remote_engine_id": outer.name, "remote_block_ids": [1, 2],
                                                     "remote_host": "10.0.0.1", "remote_port": 7000,
                                                     "do_remote_prefill": True, "do_remote_decode": False}}
                    self.reply(json.dumps(answer).encode())
                elif body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for index in range(3):
                        event = f"data: {json.dumps({'token': index})}\n\n".encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                        self.wfile.flush()
                        time.sleep(outer.stall or 0.05)
                    event = b"data: [DONE]\n\n"
                    self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(event), event))
                else:
                    self.reply(json.dumps({"id": "d", "rank": outer.name, "choices": [{"text": "hello"}]}).encode())

            def reply(self, data):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _dead_url():
    return f"http://127.0.0.1:{_free_port()}"


@pytest.fixture
def cluster():
    made, servers = [], []

    def start(connector="MooncakeConnectorV1", order="prefill_first", prefill=None, decode=None, **overrides):
        prefill = prefill if prefill is not None else [StandIn("prefill", "p0")]
        decode = decode if decode is not None else [StandIn("decode", "d0")]
        made.extend(s for s in prefill + decode if isinstance(s, StandIn))
        config = {"listen_port": _free_port(), "connector": connector, "order": order,
                  "prefill": [s.url if isinstance(s, StandIn) else s for s in prefill],
                  "decode": [s.url if isinstance(s, StandIn) else s for s in decode],
                  "api_keys_file": "keys", "retry_delay": 0.01, "connect_timeout": 1.0, "read_timeout": 5.0}
        if order == "decode_first":
            port = _free_port()
            config.update(metaserver_host="127.0.0.1", metaserver_port=port, metaserver_clients=["127.0.0.1"],
                          metaserver_url=f"http://127.0.0.1:{port}/v1/metaserver")
        config.update(overrides)
        state, listeners = proxy.make_servers(proxy.load_config(config, f"{KEY}\nsk-second-key\n"))
        for server in listeners:
            threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
        servers.extend(listeners)
        return state, config, prefill, decode

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()
    for stand_in in made:
        stand_in.close()


def call(config, path, body=None, key=KEY, method=None, port=None):
    conn = http.client.HTTPConnection("127.0.0.1", port or config["listen_port"], timeout=10)
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    data = None if body is None else json.dumps(body).encode()
    conn.request(method or ("GET" if body is None else "POST"), path, body=data, headers=headers)
    response = conn.getresponse()
    payload = response.read()
    conn.close()
    return response, payload


def settled_metrics(config, *expected):
    """/metrics once the counters of the requests just answered are in (bounded): the proxy counts a request as
    its handler ends, which can be just after the client has read the answer."""
    deadline = time.monotonic() + 10
    while True:
        response, payload = call(config, "/metrics")
        if all(item in payload for item in expected) or time.monotonic() > deadline:
            return response, payload
        time.sleep(0.02)


COMPLETION = {"model": "m", "prompt": "hi", "max_tokens": 7, "min_tokens": 2, "stream_options": {"x": 1}}


# ---------------------------------------------------------------- the key


@pytest.mark.parametrize("path,method", [("/v1/completions", "POST"), ("/v1/chat/completions", "POST"),
                                         ("/metrics", "GET"), ("/v1/models", "GET"), ("/instances/add", "POST"),
                                         ("/instances/remove", "POST"), ("/v1/metaserver", "POST"),
                                         ("/anything", "GET"), ("/v1/completions", "DELETE")])
@pytest.mark.parametrize("key", [None, "wrong", KEY.upper(), KEY + "x"])
def test_key_refused_on_every_route_but_health(cluster, path, method, key):
    state, config, prefill, decode = cluster()
    response, payload = call(config, path, body=COMPLETION if method == "POST" else None, key=key, method=method)
    assert response.status == 401, (path, key, payload)
    assert json.loads(payload)["error"]["type"] == "authentication_error"
    assert prefill[0].requests == [] and decode[0].requests == []


def test_health_is_open_and_second_key_accepted(cluster):
    state, config, prefill, decode = cluster()
    response, payload = call(config, "/health", key=None)
    assert response.status == 200 and json.loads(payload)["status"] == "ok"
    response, _body = call(config, "/metrics", key="sk-second-key")
    assert response.status == 200


def test_key_is_never_logged(cluster, caplog):
    state, config, prefill, decode = cluster()
    with caplog.at_level(logging.DEBUG):
        call(config, "/v1/completions?api_key=" + KEY, COMPLETION)
        call(config, "/v1/completions", COMPLETION, key=KEY + "-wrong")
        call(config, "/v1/completions", COMPLETION, key=None)
    text = caplog.text
    assert "/v1/completions" in text
    assert KEY not in text


# ---------------------------------------------------------------- no management routes


@pytest.mark.parametrize("path", ["/instances/add", "/instances/remove", "/v1/metaserver", "/reset_prefix_cache"])
def test_no_management_routes(cluster, path):
    state, config, prefill, decode = cluster()
    response, payload = call(config, path, {"type": "prefill", "instances": ["127.0.0.1:1"]})
    assert response.status == 404, payload
    assert len(state.prefill.ranks) == 1 and prefill[0].requests == []


# ---------------------------------------------------------------- order and hand-off per connector


@pytest.mark.parametrize("connector", ["MooncakeConnectorV1", "NixlConnector"])
def test_prefill_first_order_and_kv_hand_off(cluster, connector):
    log = []
    state, config, prefill, decode = cluster(connector=connector)
    prefill[0].log = decode[0].log = log
    response, payload = call(config, "/v1/completions", COMPLETION)
    assert response.status == 200, payload
    assert json.loads(payload)["choices"][0]["text"] == "hello"
    assert log == ["prefill", "decode"]
    sent_p = prefill[0].requests[0]
    sent_d = decode[0].requests[0]
    assert sent_p["path"] == sent_d["path"] == "/v1/completions"
    assert sent_p["body"]["kv_transfer_params"]["do_remote_decode"] is True
    assert sent_p["body"]["kv_transfer_params"]["do_remote_prefill"] is False
    assert sent_p["body"]["max_tokens"] == 1 and sent_p["body"]["stream"] is False
    assert "stream_options" not in sent_p["body"]
    if connector == "NixlConnector":
        assert "min_tokens" not in sent_p["body"]
    else:
        assert sent_p["body"]["min_tokens"] == 1
    # The decode gets the client's request with the prefill rank's kv_transfer_params.
    assert sent_d["body"]["kv_transfer_params"] == {
        "remote_engine_id": "p0", "remote_block_ids": [1, 2], "remote_host": "10.0.0.1", "remote_port": 7000,
        "do_remote_prefill": True, "do_remote_decode": False}
    assert sent_d["body"]["max_tokens"] == 7 and sent_d["body"]["min_tokens"] == 2
    assert sent_d["body"]["stream_options"] == {"x": 1}
    # The same request id on both steps, and the service key forwarded to the ranks.
    assert sent_p["headers"]["X-Request-Id"] == sent_d["headers"]["X-Request-Id"]
    assert sent_p["headers"]["Authorization"] == sent_d["headers"]["Authorization"] == f"Bearer {RANK_KEY}"


def test_decode_first_layerwise_metaserver(cluster):
    log = []
    holder = {}

    def post_metaserver(handler, body):
        params = body["kv_transfer_params"]
        holder["decode_params"] = params
        rid = "cmpl-" + handler.headers["X-Request-Id"] + "-0"
        url = params["metaserver"].split("/", 3)
        conn = http.client.HTTPConnection(url[2], timeout=10)
        body = {"request_id": rid, "remote_engine_id": "d0", "remote_block_ids": [9], "do_remote_decode": True,
                "do_remote_prefill": False}
        conn.request("POST", "/" + url[3], body=json.dumps(body), headers={"Content-Type": "application/json"})
        holder["metaserver_status"] = conn.getresponse().status
        conn.close()

    decode = [StandIn("decode", "d0", on_request=post_metaserver)]
    state, config, prefill, _dec = cluster(connector="MooncakeLayerwiseConnector", order="decode_first", decode=decode)
    prefill[0].log = decode[0].log = log
    response, payload = call(config, "/v1/completions", COMPLETION)
    assert response.status == 200, payload
    assert log == ["decode", "prefill"]
    assert holder["metaserver_status"] == 200
    assert holder["decode_params"] == {"do_remote_decode": False, "do_remote_prefill": True,
                                       "metaserver": config["metaserver_url"]}
    sent_p = prefill[0].requests[0]["body"]
    assert sent_p["kv_transfer_params"]["remote_block_ids"] == [9]
    assert sent_p["max_tokens"] == 1 and sent_p["min_tokens"] == 1 and sent_p["stream"] is False
    # The handler forgets the request after the client has its answer: wait for that, bounded.
    deadline = time.monotonic() + 10
    while state.pending and time.monotonic() < deadline:
        time.sleep(0.01)
    assert state.pending == {}
    # The metaserver is not on the client listener, refuses unknown ids, and refuses other addresses.
    response, _body = call(config, "/v1/metaserver", {"request_id": "cmpl-nothing-0"}, key=None,
                           port=config["metaserver_port"])
    assert response.status == 404
    state.config["metaserver_clients"] = ["10.9.9.9"]
    response, _body = call(config, "/v1/metaserver", {"request_id": "x"}, key=None, port=config["metaserver_port"])
    assert response.status == 403
    response, _body = call(config, "/v1/completions", COMPLETION, port=config["metaserver_port"])
    assert response.status == 404
    assert len(prefill[0].requests) == 1


# ---------------------------------------------------------------- retries and timeouts


def test_prefill_connection_error_retried_on_another_rank(cluster):
    good = StandIn("prefill", "p1")
    state, config, prefill, decode = cluster(prefill=[_dead_url(), good], prefill_retries=2)
    state.prefill.turn = iter([0, 0, 0])  # the dead rank first
    response, payload = call(config, "/v1/completions", COMPLETION)
    assert response.status == 200, payload
    assert len(good.requests) == 1 and len(decode[0].requests) == 1
    response, metrics = settled_metrics(config, b"ascendai_pd_proxy_prefill_retries_total 1",
                                        b'ascendai_pd_proxy_upstream_errors_total{role="prefill",kind="connect"} 1')
    assert b"ascendai_pd_proxy_prefill_retries_total 1" in metrics
    assert b'ascendai_pd_proxy_upstream_errors_total{role="prefill",kind="connect"} 1' in metrics


def test_prefill_retries_bounded(cluster):
    dead = [_dead_url() for _index in range(4)]
    state, config, prefill, decode = cluster(prefill=dead, prefill_retries=1)
    response, payload = call(config, "/v1/completions", COMPLETION)
    assert response.status == 502, payload
    _response, metrics = settled_metrics(config,
                                         b'ascendai_pd_proxy_upstream_errors_total{role="prefill",kind="connect"} 2')
    assert b'ascendai_pd_proxy_upstream_errors_total{role="prefill",kind="connect"} 2' in metrics
    assert decode[0].requests == []


def test_decode_never_replayed(cluster):
    decode = [StandIn("decode", "d0", status=500), StandIn("decode", "d1", status=500)]
    state, config, prefill, _decode = cluster(decode=decode)
    response, payload = call(config, "/v1/completions", COMPLETION)
    assert response.status == 500
    assert len(decode[0].requests) + len(decode[1].requests) == 1
    assert len(prefill[0].requests) == 1


def test_decode_connection_error_not_replayed(cluster):
    other = StandIn("decode", "d1")
    state, config, prefill, _decode = cluster(decode=[_dead_url(), other])
    state.decode.turn = iter([0])
    response, payload = call(config, "/v1/completions", COMPLETION)
    assert response.status == 502, payload
    assert json.loads(payload)["error"]["type"] == "decode_connect_error"
    assert other.requests == []


def test_read_timeout_bounded_and_not_retried(cluster):
    slow = StandIn("prefill", "p0", delay=6.0)
    state, config, prefill, decode = cluster(prefill=[slow, StandIn("prefill", "p1")], read_timeout=0.5,
                                             connect_timeout=8.0)
    state.prefill.turn = iter([0])
    started = time.monotonic()
    response, payload = call(config, "/v1/completions", COMPLETION)
    assert response.status == 504, payload
    # Well under the stall (6 s) and the connect timeout (8 s): the read timeout (0.5 s) is what ended it. The
    # margins are wide so that a loaded machine does not fail it.
    assert time.monotonic() - started < 4.0
    assert prefill[1].requests == [] and decode[0].requests == []


def test_no_healthy_rank_is_503(cluster):
    state, config, prefill, decode = cluster(prefill=[_dead_url()], prefill_retries=0)
    response, payload = call(config, "/v1/completions", COMPLETION)
    assert response.status == 502
    response, payload = call(config, "/v1/completions", COMPLETION)
    assert response.status == 503
    assert json.loads(payload)["error"]["type"] == "no_healthy_rank"
    assert decode[0].requests == []


def test_prefill_client_error_passes_through(cluster):
    state, config, prefill, decode = cluster(prefill=[StandIn("prefill", "p0", status=400)])
    response, payload = call(config, "/v1/completions", COMPLETION)
    assert response.status == 400 and json.loads(payload)["error"]["message"] == "refused by the rank"
    assert len(prefill[0].requests) == 1 and decode[0].requests == []


def test_in_flight_bounded(cluster):
    state, config, prefill, decode = cluster(decode=[StandIn("decode", "d0", delay=0.5)], max_in_flight=1)
    results = []
    worker = threading.Thread(target=lambda: results.append(call(config, "/v1/completions", COMPLETION)[0].status))
    worker.start()
    time.sleep(0.2)
    response, payload = call(config, "/v1/completions", COMPLETION)
    worker.join()
    assert response.status == 503 and json.loads(payload)["error"]["type"] == "overloaded"
    assert results == [200]


# ---------------------------------------------------------------- streaming, models, metrics


def test_streaming_passes_through(cluster):
    state, config, prefill, decode = cluster()
    conn = http.client.HTTPConnection("127.0.0.1", config["listen_port"], timeout=10)
    conn.request("POST", "/v1/completions", body=json.dumps(dict(COMPLETION, stream=True)),
                 headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    assert response.getheader("Content-Type") == "text/event-stream"
    first = response.read1(65536)
    assert first.startswith(b"data: {")
    rest = response.read()
    conn.close()
    events = (first + rest).decode().strip().split("\n\n")
    assert events == ['data: {"token": 0}', 'data: {"token": 1}', 'data: {"token": 2}', "data: [DONE]"]
    assert prefill[0].requests[0]["body"]["stream"] is False
    assert decode[0].requests[0]["body"]["stream"] is True


def test_models_from_a_decode_rank(cluster):
    state, config, prefill, decode = cluster()
    response, payload = call(config, "/v1/models")
    assert response.status == 200 and json.loads(payload)["rank"] == "d0"
    assert decode[0].requests[0]["headers"]["Authorization"] == f"Bearer {RANK_KEY}"


def test_metrics_exposed(cluster):
    state, config, prefill, decode = cluster()
    call(config, "/v1/completions", COMPLETION)
    call(config, "/v1/completions", COMPLETION, key="wrong")
    response, metrics = settled_metrics(
        config, b'ascendai_pd_proxy_requests_total{route="/v1/completions",status="200"} 1',
        b'ascendai_pd_proxy_requests_total{route="/v1/completions",status="401"} 1',
        b"ascendai_pd_proxy_prefill_seconds_count 1", b"ascendai_pd_proxy_decode_seconds_count 1",
        b"ascendai_pd_proxy_in_flight 0")
    assert response.getheader("Content-Type").startswith("text/plain; version=0.0.4")
    text = metrics.decode()
    assert 'ascendai_pd_proxy_requests_total{route="/v1/completions",status="200"} 1' in text
    assert 'ascendai_pd_proxy_requests_total{route="/v1/completions",status="401"} 1' in text
    assert 'ascendai_pd_proxy_prefill_seconds_count 1' in text
    assert 'ascendai_pd_proxy_decode_seconds_count 1' in text
    assert 'ascendai_pd_proxy_in_flight 0' in text
    assert f'ascendai_pd_proxy_rank_up{{role="prefill",url="{prefill[0].url}"}} 1' in text


# ---------------------------------------------------------------- configuration


@pytest.mark.parametrize("change,message", [
    ({"order": "sideways"}, "order='sideways'"),
    ({"connector": "P2pNcclConnector"}, "connector='P2pNcclConnector'"),
    ({"prefill": []}, "prefill=[]"),
    ({"decode": ["10.0.0.1:8000"]}, "is not http://HOST:PORT"),
    ({"read_timeout": 0}, "read_timeout=0"),
    ({"prefill_retries": 11}, "prefill_retries=11"),
    ({"order": "decode_first"}, "needs metaserver_url"),
    ({"instances": []}, "unknown configuration keys"),
])
def test_config_refused(change, message):
    config = dict({"prefill": ["http://127.0.0.1:1"], "decode": ["http://127.0.0.1:2"]}, **change)
    with pytest.raises(proxy.ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        proxy.load_config(config, KEY)


def test_config_needs_a_key():
    with pytest.raises(proxy.ConfigError, match="holds no key"):
        proxy.load_config({"prefill": ["http://127.0.0.1:1"], "decode": ["http://127.0.0.1:2"]}, "\n# none\n")


def test_decode_first_loopback_plan_shares_the_listener(cluster):
    def post_metaserver(handler, body):
        url = body["kv_transfer_params"]["metaserver"].split("/", 3)
        conn = http.client.HTTPConnection(url[2], timeout=10)
        body = {"request_id": "chatcmpl-" + handler.headers["X-Request-Id"], "remote_block_ids": [4]}
        conn.request("POST", "/" + url[3], body=json.dumps(body))
        assert conn.getresponse().status == 200
        conn.close()

    port = _free_port()
    decode = [StandIn("decode", "d0", on_request=post_metaserver)]
    state, config, prefill, _dec = cluster(connector="MooncakeLayerwiseConnector", order="decode_first", decode=decode,
                                           listen_port=port, metaserver_port=port,
                                           metaserver_url=f"http://127.0.0.1:{port}/v1/metaserver")
    response, payload = call(config, "/v1/chat/completions", {"model": "m", "messages": [{"role": "user"}]})
    assert response.status == 200, payload
    assert prefill[0].requests[0]["body"]["kv_transfer_params"] == {"request_id": prefill[0].requests[0]["headers"][
        "X-Request-Id"].join(["chatcmpl-", ""]), "remote_block_ids": [4]}
    # Still the decode ranks' addresses only.
    state.config["metaserver_clients"] = ["10.9.9.9"]
    response, _body = call(config, "/v1/metaserver", {"request_id": "x"}, key=None)
    assert response.status == 403


def test_stalled_decode_stream_is_cut_within_the_read_timeout(cluster):
    state, config, prefill, decode = cluster(decode=[StandIn("decode", "d0", stall=6.0)], read_timeout=0.5,
                                             connect_timeout=8.0)
    conn = http.client.HTTPConnection("127.0.0.1", config["listen_port"], timeout=10)
    started = time.monotonic()
    conn.request("POST", "/v1/completions", body=json.dumps(dict(COMPLETION, stream=True)),
                 headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    response = conn.getresponse()
    assert response.status == 200
    with pytest.raises(http.client.IncompleteRead) as cut:
        response.read()
    # Well under the stall (6 s) and the connect timeout (8 s): the read timeout (0.5 s) is what cut it.
    assert time.monotonic() - started < 4.0
    assert cut.value.partial.startswith(b"data: {")
    conn.close()
    _response, metrics = settled_metrics(
        config, b'ascendai_pd_proxy_upstream_errors_total{role="decode",kind="timeout"} 1',
        b'ascendai_pd_proxy_requests_total{route="/v1/completions",status="504"} 1')
    assert b'ascendai_pd_proxy_upstream_errors_total{role="decode",kind="timeout"} 1' in metrics
    assert b'ascendai_pd_proxy_requests_total{route="/v1/completions",status="504"} 1' in metrics
