# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The API front (role api_front) asks for the key on every vLLM route but /health and /metrics, for every release.

vLLM's ``--api-key`` guards only some path prefixes, so its server answers ``/invocations``, ``/tokenize``,
``/load`` and more without the key. The front's nginx configuration is rendered from the role's template and run
by the real nginx binary (Debian package ``nginx``; the host stage of .ci/run installs it, the tests that need it
are skipped, saying so, where it is missing) in front of a stand-in server that answers every path. Then every route
of every release's table (plugins/module_utils/_generated/vllm_routes.py, tools/generate/vllm_routes.py) is
requested without the key: 401 with ``WWW-Authenticate``, or on the allow-list. With the key each one reaches the
server.
"""

from __future__ import annotations

import http.client
import http.server
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import threading
import time

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.nginx_bearer_regex import nginx_bearer_regex
from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import template_text

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
ROLE = os.path.join(ROOT, "roles", "api_front")
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
needs_nginx = pytest.mark.skipif(NGINX is None, reason="nginx (Debian package nginx) not installed")
KEY = "k3y-Of.The+Front/=~AbC"
OPEN = {"/health", "/metrics"}


def _load_tool():
    spec = importlib.util.spec_from_file_location("vllm_routes",
                                                  os.path.join(ROOT, "tools", "generate", "vllm_routes.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ROUTES = _load_tool().load()


def _yaml(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def role_vars(os_name="Debian", **override):
    """The role's defaults, its vars/main.yml and one OS's vars, resolved by Ansible's template engine."""
    values = dict(_yaml(os.path.join(ROLE, "defaults", "main.yml")))
    values.update(_yaml(os.path.join(ROLE, "vars", "main.yml")))
    values.update(_yaml(os.path.join(ROLE, "vars", f"{os_name}.yml")))
    values.update(override)
    for _round in range(5):  # values naming other values
        values = {k: template_text(v, values) if isinstance(v, str) and "{{" in v else v for k, v in values.items()}
    values["ansible_managed"] = "Ansible managed"
    return values


def render(template="nginx.conf.j2", **override):
    """A role template, templated as the template module does (Ansible's engine, the collection filter it names)."""
    with open(os.path.join(ROLE, "templates", template), encoding="utf-8") as handle:
        text = handle.read()
    return template_text(text, role_vars(**override), file=True,
                         filters={"ascendai.vllm.nginx_bearer_regex": nginx_bearer_regex})


# ----------------------------------------------------------------------------------------------- the filter
def test_the_key_pattern_escapes_everything_but_letters_and_digits():
    assert nginx_bearer_regex("aB3") == r"~^[Bb][Ee][Aa][Rr][Ee][Rr]\x20aB3$"
    pattern = nginx_bearer_regex('a"b;c{d}e$f\\g\'h')
    assert pattern == r"~^[Bb][Ee][Aa][Rr][Ee][Rr]\x20a\x22b\x3bc\x7bd\x7de\x24f\x5cg\x27h$"
    assert re.fullmatch(r"~\^[A-Za-z0-9\\\[\]]+\$", pattern)
    compiled = re.compile(pattern[1:])
    assert compiled.match('Bearer a"b;c{d}e$f\\g\'h')
    assert compiled.match('bearer a"b;c{d}e$f\\g\'h')
    assert not compiled.match('Bearer A"b;c{d}e$f\\g\'h')
    assert not compiled.match('Bearer a"b;c{d}e$f\\g\'hx')


@pytest.mark.parametrize("key", ["", "with space", "tab\there", "new\nline", "caf\u00e9", None, 42])
def test_the_key_pattern_refuses_what_cannot_be_matched_exactly_without_showing_the_key(key):
    with pytest.raises(AnsibleFilterError) as info:
        nginx_bearer_regex(key, name="vllm_service_api_key")
    assert "vllm_service_api_key" in str(info.value)
    if isinstance(key, str) and len(key) > 3:
        assert key not in str(info.value)


def test_the_configuration_holds_only_the_patterns_and_the_defaults_open_only_health_and_metrics():
    text = render(api_front_api_keys=[KEY, "second-key"])
    assert KEY not in text
    assert nginx_bearer_regex(KEY) in text and nginx_bearer_regex("second-key") in text
    assert re.findall(r"location = (\S+) \{", text) == ["/health", "/metrics"]
    assert "ansible_managed" not in text and "Ansible managed" in text


# ------------------------------------------------------------------------------------------ the real nginx
class _Backend(http.server.BaseHTTPRequestHandler):
    """Answers every method and path with 200 and what it received (the stand-in for vLLM)."""

    protocol_version = "HTTP/1.1"

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = f"backend {self.command} {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _answer

    def log_message(self, *_args):
        pass


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for_port(port, timeout=10):
    """Until something listens on 127.0.0.1:port (nginx after its start), at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)


def _worker_user():
    """The Debian account of the role's vars where it exists (as root nginx switches its workers to it), else
    this user's (nginx ignores the directive when it does not run as root)."""
    import pwd  # pylint: disable=import-outside-toplevel

    wanted = role_vars()["_api_front_worker_user"]
    try:
        pwd.getpwnam(wanted)
        return wanted
    except KeyError:
        return pwd.getpwuid(os.geteuid()).pw_name


@pytest.fixture(scope="module")
def front(tmp_path_factory):
    """nginx with the role's configuration on 127.0.0.1, in front of the stand-in server."""
    tmp = tmp_path_factory.mktemp("front")
    backend = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Backend)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    port = _free_port()
    conf = tmp / "front.conf"
    conf.write_text(render(api_front_api_keys=[KEY], api_front_listen_address="127.0.0.1", api_front_port=port,
                           api_front_upstreams=[f"127.0.0.1:{backend.server_address[1]}"],
                           _api_front_run_dir=str(tmp), _api_front_state_dir=str(tmp),
                           _api_front_worker_user=_worker_user()))
    check = subprocess.run([NGINX, "-t", "-q", "-c", str(conf)], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr
    log = open(tmp / "nginx.log", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([NGINX, "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT)
    _wait_for_port(port)
    try:
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()
        backend.shutdown()


_SEEN = {}


def request(port, method, path, key=None, headers=None):
    """(status, WWW-Authenticate, body) of one request; the releases share most routes, so each is sent once."""
    cache_key = (port, method, path, key, tuple(sorted((headers or {}).items())))
    if cache_key not in _SEEN:
        _SEEN[cache_key] = _request(port, method, path, key, headers)
    return _SEEN[cache_key]


def _request(port, method, path, key=None, headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    sent = dict(headers or {})
    if key is not None:
        sent["Authorization"] = key
    body = b"{}" if method in ("POST", "PUT", "PATCH") else None
    conn.request(method, path, body=body, headers=sent)
    answer = conn.getresponse()
    text = answer.read().decode("utf-8", "replace")
    result = (answer.status, answer.getheader("WWW-Authenticate"), text)
    conn.close()
    return result


def _requests_of(route_path, entry):
    """(method, path, extra headers) to try for one route of the table."""
    path = re.sub(r"\{[^}]+\}", "x", route_path)
    tries = []
    for method in entry["methods"].split():
        if method == "WEBSOCKET":
            tries.append(("GET", path, {"Connection": "Upgrade", "Upgrade": "websocket",
                                        "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZQ=="}))
        elif method in ("ANY", "HEAD"):
            tries.append(("GET", path, {}))
        else:
            tries.append((method, path, {}))
    if entry["kind"] == "mount":  # a mount answers everything below its path too
        tries.append(("GET", path.rstrip("/") + "/x", {}))
    return tries


@needs_nginx
@pytest.mark.parametrize("release", list(ROUTES))
def test_every_route_of_the_release_needs_the_key_but_health_and_metrics(front, release):
    routes = ROUTES[release]["routes"]
    assert "/v1/completions" in routes and "/health" in routes and "/metrics" in routes
    wrong = []
    for route_path, entry in routes.items():
        for method, path, headers in _requests_of(route_path, entry):
            status, challenge, text = request(front, method, path, headers=headers)
            if path in OPEN:
                if status != 200 or not text.startswith("backend"):
                    wrong.append(f"{method} {path} without the key: {status}, want the server's 200")
            elif status != 401 or challenge != 'Bearer realm="ascendai-front"' or "backend" in text:
                wrong.append(f"{method} {path} without the key: {status} {challenge!r} {text[:60]!r}")
            status, _challenge, text = request(front, method, path, key=f"Bearer {KEY}", headers=headers)
            if status != 200 or not text.startswith(f"backend {method} "):
                wrong.append(f"{method} {path} with the key: {status} {text[:60]!r}")
    assert not wrong, f"vLLM {release}:\n" + "\n".join(wrong)


@needs_nginx
@pytest.mark.parametrize("key", [None, "", "Bearer", "Bearer ", f"Basic {KEY}", f"Bearer {KEY.upper()}",
                                 f"Bearer {KEY.lower()}", f"Bearer {KEY[:-1]}", f"Bearer {KEY}x", f"Bearer  {KEY}",
                                 f"Token {KEY}", KEY, f"Bearer\t{KEY}", f"Bearer {KEY},Bearer {KEY}"])
def test_anything_but_the_exact_key_is_refused(front, key):
    status, challenge, text = request(front, "POST", "/invocations", key=key)
    assert (status, challenge) == (401, 'Bearer realm="ascendai-front"'), text
    assert "Unauthorized" in text and "backend" not in text


@needs_nginx
def test_the_scheme_is_matched_in_any_case_like_vllm(front):
    assert request(front, "POST", "/invocations", key=f"bearer {KEY}")[0] == 200
    assert request(front, "POST", "/invocations", key=f"BEARER {KEY}")[0] == 200


@needs_nginx
@pytest.mark.parametrize("path", ["/health/../invocations", "/metrics/../tokenize", "//invocations",
                                  "/%69nvocations", "/health%2f..%2finvocations", "/HEALTH", "/Health",
                                  "/health/", "/health/x", "/metrics/", "/metricsx", "/healthz", "/v1/../load",
                                  "/./scale_elastic_ep", "/health;/invocations", "/metrics%00"])
def test_other_spellings_of_the_open_paths_need_the_key(front, path):
    status, _challenge, text = request(front, "POST", path)
    assert status in (400, 401), (path, status, text)
    assert "backend" not in text


@needs_nginx
def test_the_open_paths_reach_the_server_as_exactly_themselves(front):
    assert request(front, "GET", "/health")[2] == "backend GET /health"
    assert request(front, "GET", "/metrics")[2] == "backend GET /metrics"
    assert request(front, "GET", "/%68ealth")[2] == "backend GET /health"
    assert request(front, "GET", "/x/../metrics")[2] == "backend GET /metrics"
    assert request(front, "GET", "/health?verbose=1")[2] == "backend GET /health?verbose=1"


@needs_nginx
def test_the_check_finds_the_open_routes_of_vllm_without_the_front():
    """The same check against vLLM's own rule (0.32.0: only /v1, /v2, /inference, /cohere need the key, docs/sources.md)
    finds /invocations and the others open: what the front is for."""
    guarded = ("/v1", "/v2", "/inference", "/cohere")
    routes = ROUTES["0.32.0"]["routes"]
    open_without_key = sorted(p for p in routes if p not in OPEN and not p.startswith(guarded))
    assert {"/invocations", "/tokenize", "/detokenize", "/load", "/scale_elastic_ep", "/pooling",
            "/classify", "/score", "/rerank"} <= set(open_without_key)


# --------------------------------------------------------------------------- several servers, one restarted
class _BadGateway(_Backend):
    """A node whose own front answers 502: its vLLM is restarting (the upgrade's switch)."""

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.send_response(502)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _answer


def _nginx_before(tmp, upstreams, **override):
    """Start nginx with the role's configuration before ``upstreams``; (process, port)."""
    port = _free_port()
    conf = tmp / "front.conf"
    conf.write_text(render(api_front_api_keys=[KEY], api_front_listen_address="127.0.0.1", api_front_port=port,
                           api_front_upstreams=upstreams, _api_front_run_dir=str(tmp), _api_front_state_dir=str(tmp),
                           _api_front_worker_user=_worker_user(), **override))
    check = subprocess.run([NGINX, "-t", "-q", "-c", str(conf)], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr
    proc = subprocess.Popen([NGINX, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for_port(port)
    return proc, port


@needs_nginx
@pytest.mark.parametrize("down", ["refused", "502"])
def test_a_front_before_several_nodes_sends_a_completion_to_the_one_that_serves(tmp_path, down):
    """The shared front (role shared_front: api_front_next_upstream [error, timeout, http_502, http_503,
    non_idempotent]) before two nodes, one of them down: its port closed (its own front drained) or answering 502
    (its own front up, its vLLM restarting). Every POST reaches the serving node. With nginx's own rule (the node
    fronts' setting) some POSTs fail: the test would catch a configuration that does not retry."""
    good = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Backend)
    bad = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _BadGateway) if down == "502" else None
    for server in (good, bad):
        if server:
            threading.Thread(target=server.serve_forever, daemon=True).start()
    bad_address = f"127.0.0.1:{bad.server_address[1]}" if bad else f"127.0.0.1:{_free_port()}"
    upstreams = [bad_address, f"127.0.0.1:{good.server_address[1]}"]
    results = {}
    for setting in ("retry", "default"):
        tmp = tmp_path / setting
        tmp.mkdir()
        override = ({"api_front_next_upstream": ["error", "timeout", "http_502", "http_503", "non_idempotent"],
                     "api_front_next_upstream_tries": 2} if setting == "retry" else {})
        text = render(api_front_upstreams=upstreams, **override)
        assert ("proxy_next_upstream error timeout http_502 http_503 non_idempotent;" in text) == (setting == "retry")
        assert ("proxy_request_buffering on;" in text) == (setting == "retry")
        proc, port = _nginx_before(tmp, upstreams, **override)
        try:
            results[setting] = [_request(port, "POST", "/v1/completions", key=f"Bearer {KEY}")[0]
                                for _attempt in range(12)]
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    for server in (good, bad):
        if server:
            server.shutdown()
    assert results["retry"] == [200] * 12, results
    if down == "502":
        assert 502 in results["default"], results
