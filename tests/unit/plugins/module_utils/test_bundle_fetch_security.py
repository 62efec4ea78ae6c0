"""The fetch path against a hostile server or a hostile URL: credentials stay with their origin, every request has a
deadline, the bundle password never reaches a result or a message, and what the network sends never raises a raw
traceback (a huge number, a Unicode digit, a NUL byte)."""

from __future__ import annotations

import base64
import http.server
import json
import socketserver
import threading
import time
import urllib.request

import pytest
from ansible.module_utils.testing import patch_module_args
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.ascendai.vllm.plugins.module_utils import _bundle as bundle_utils
from ansible_collections.ascendai.vllm.plugins.module_utils import _model_fetch as mf
from ansible_collections.ascendai.vllm.plugins.modules import bundle_fetch, model_fetch
from ansible_collections.ascendai.vllm.tests.unit.plugins.module_utils import test_model_fetch as helpers
from ansible_collections.ascendai.vllm.tests.unit.plugins.module_utils.test_model_fetch import (
    MODEL,
    RangeHandler,
    make_bundle,
    model_files,
)
from ansible_collections.ascendai.vllm.tests.unit.plugins.module_utils.test_model_fetch_hostile import run_bounded

server = helpers.server

PASSWORD = "Zq7pWx3kV"


# --------------------------------------------------------------------------- redirects


class RecordingHandler(RangeHandler):
    """RangeHandler that records each request's Authorization header in ``server.auth_seen``."""

    def do_HEAD(self):
        self.server.auth_seen.append(("HEAD", self.headers.get("Authorization")))
        super().do_HEAD()

    def do_GET(self):
        self.server.auth_seen.append(("GET", self.headers.get("Authorization")))
        super().do_GET()


class RedirectHandler(http.server.BaseHTTPRequestHandler):
    """Answers every request with 302 to ``server.target`` + the same path (another origin: another port)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _redirect(self):
        self.server.auth_seen.append((self.command, self.headers.get("Authorization")))
        self.send_response(302)
        self.send_header("Location", self.server.target + self.path.lstrip("/"))
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_HEAD = _redirect


def _serve(handler, root=None):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    srv.root = root
    srv.ignore_range = False
    srv.cut_after, srv.hold, srv.log, srv.auth_seen = {}, {}, [], []
    srv.delay = 0.0
    srv.lock = threading.Lock()
    srv.active = srv.max_active = 0
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}/"
    return srv


@pytest.fixture
def two_origins(tmp_path):
    """``(a, b)``: a redirects everything to b (another port, so another origin); b serves the bundle."""
    root = tmp_path / "bundle"
    root.mkdir()
    b = _serve(RecordingHandler, str(root))
    a = _serve(RedirectHandler)
    a.target = b.url
    yield a, b
    for srv in (a, b):
        srv.shutdown()
        srv.server_close()


def test_a_redirect_to_another_origin_gets_no_credentials(two_origins, tmp_path):
    a, b = two_origins
    make_bundle(b.root, model_files())
    src = a.url.replace("http://", f"http://ops:{PASSWORD}@")
    result = mf.fetch_model(str(tmp_path / "dest"), MODEL, src=src, retries=0)
    assert sorted(result["fetched"]) == sorted(model_files())
    expected = "Basic " + base64.b64encode(f"ops:{PASSWORD}".encode()).decode()
    assert {auth for _m, auth in a.auth_seen} == {expected}, "the origin the URL names gets the credentials"
    methods = {m for m, _auth in b.auth_seen}
    assert methods == {"HEAD", "GET"}
    assert [auth for _m, auth in b.auth_seen if auth] == [], "the other origin received the bundle's credentials"


def test_a_redirect_on_the_same_origin_keeps_the_credentials(server, tmp_path):
    make_bundle(server.root, model_files())
    seen = []

    class SameOrigin(RangeHandler):
        def _maybe_redirect(self):
            seen.append((self.command, self.path, self.headers.get("Authorization")))
            if self.path.startswith("/moved/"):
                self.send_response(301)
                self.send_header("Location", "/" + self.path[len("/moved/"):])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return True
            return False

        def do_HEAD(self):
            if not self._maybe_redirect():
                super().do_HEAD()

        def do_GET(self):
            if not self._maybe_redirect():
                super().do_GET()

    server.RequestHandlerClass = SameOrigin
    src = server.url.replace("http://", f"http://ops:{PASSWORD}@") + "moved/"
    mf.fetch_model(str(tmp_path / "dest"), MODEL, src=src, retries=0)
    assert seen and all(auth for _c, _p, auth in seen), seen
    assert any(not p.startswith("/moved/") for _c, p, _a in seen)


@pytest.mark.parametrize("old, new, allowed, keep", [
    ("http://h:80/a", "http://h/b", True, True),          # the default port is the same port
    ("https://h/a", "https://h:443/b", True, True),
    ("http://h/a", "http://h:8080/b", True, False),       # another port: another origin
    ("http://h/a", "http://other/b", True, False),
    ("http://h/a", "https://h/b", True, False),           # upgrade: another origin, no credentials
    ("http://H/a", "http://h/b", True, True),             # host names are case-insensitive
    ("https://h/a", "http://h/b", False, False),          # never https -> http
    ("https://h/a", "ftp://h/b", False, False),
    ("http://h/a", "file:///etc/passwd", False, False),
])
def test_redirect_policy(old, new, allowed, keep):
    assert bundle_utils.redirect_policy(old, new) == (allowed, keep)


def test_https_to_http_redirect_is_refused_naming_both_without_credentials():
    handler = bundle_utils.OriginRedirectHandler()
    req = urllib.request.Request("https://bundle.example/b/MANIFEST.sha256")
    req.add_unredirected_header("Authorization", "Basic c2VjcmV0")
    with pytest.raises(bundle_utils.BundleError, match="https to http") as exc:
        handler.redirect_request(req, None, 302, "Found", {}, "http://bundle.example/b/MANIFEST.sha256")
    assert "c2VjcmV0" not in str(exc.value)


def test_a_redirect_loses_credentials_in_the_urllib_handler_itself():
    handler = bundle_utils.OriginRedirectHandler()
    req = urllib.request.Request("http://bundle.example/b/x")
    req.add_unredirected_header("Authorization", "Basic c2VjcmV0")
    other = handler.redirect_request(req, None, 302, "Found", {}, "http://evil.example:81/x")
    assert other.get_header("Authorization") is None and "Authorization" not in other.headers
    same = handler.redirect_request(req, None, 302, "Found", {}, "http://bundle.example/c/x")
    assert same.get_header("Authorization") == "Basic c2VjcmV0"


# --------------------------------------------------------------------------- deadlines


class TrickleHeaders(socketserver.BaseRequestHandler):
    """Reads the request, sends a status line, then one header byte every 0.05 s for up to 20 s."""

    def handle(self):
        self.request.recv(65536)
        until = time.monotonic() + 20
        try:
            self.request.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            while time.monotonic() < until and not self.server.done.is_set():
                self.request.sendall(b"a")
                time.sleep(0.05)
        except OSError:
            pass


@pytest.fixture
def trickle_server():
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), TrickleHeaders)
    srv.daemon_threads = True
    srv.done = threading.Event()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}/"
    yield srv
    srv.done.set()
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("call", ["head", "get", "fetch"])
def test_headers_sent_one_byte_at_a_time_end_within_the_timeout(trickle_server, tmp_path, call):
    source = bundle_utils.HttpSource(trickle_server.url, timeout=1)
    work = {
        "head": lambda: source.size("x"),
        "get": lambda: source.read_text(bundle_utils.MANIFEST_NAME),
        "fetch": lambda: mf.fetch_model(str(tmp_path / "d"), MODEL, src=trickle_server.url, timeout=1, retries=0),
    }[call]
    started = time.monotonic()
    finished, error = run_bounded(work, 8)
    elapsed = time.monotonic() - started
    assert finished, f"{call}: still waiting for headers sent one byte at a time"
    assert isinstance(error, bundle_utils.BundleError), repr(error)
    assert "1 s" in str(error) and "headers" in str(error)
    assert elapsed < 3, f"{call} took {elapsed:.1f} s with timeout=1"


def test_the_deadline_does_not_cut_a_steady_download(server, tmp_path):
    make_bundle(server.root, model_files(big=3_000_000))
    server.delay = 0.3  # each GET waits before its body; well inside timeout=1
    result = mf.fetch_model(str(tmp_path / "d"), MODEL, src=server.url, timeout=1, retries=0)
    assert result["fetched"]


# --------------------------------------------------------------------------- secrets in results and messages


def _run(capsys, module, args):
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    return capsys.readouterr().out


@pytest.mark.parametrize("module", [model_fetch, bundle_fetch])
def test_the_password_is_in_no_result_and_no_invocation(server, tmp_path, capsys, module):
    make_bundle(server.root, model_files())
    src = server.url.replace("http://", f"http://ops:{PASSWORD}@")
    args = {"src": src, "dest": str(tmp_path / "d")}
    args.update({"model": MODEL} if module is model_fetch else {"prefix": f"models/{MODEL}"})
    out = _run(capsys, module, args)
    result = json.loads(out)
    assert not result.get("failed"), result
    assert PASSWORD not in out
    assert result["src"] == server.url.replace("http://", "http://***@")


@pytest.mark.parametrize("password", ["Zq7/pWx3", "Zq7#pWx3", "Zq7?pWx3", "Zq7/p#W?x3"])
@pytest.mark.parametrize("module", [model_fetch, bundle_fetch])
def test_a_password_with_an_unencoded_delimiter_never_reaches_the_output(server, tmp_path, capsys, module, password):
    make_bundle(server.root, model_files())
    src = server.url.replace("http://", f"http://ops:{password}@")
    args = {"src": src, "dest": str(tmp_path / "d")}
    args.update({"model": MODEL} if module is model_fetch else {"prefix": f"models/{MODEL}"})
    out = _run(capsys, module, args)
    result = json.loads(out)
    assert result.get("failed"), result
    for piece in ("Zq7", "pWx3", "x3", password):
        assert piece not in out, f"{piece!r} of the password is in the output: {out}"
    assert "src" in result["msg"] and "percent-encode" in result["msg"]
    assert "Traceback" not in out


@pytest.mark.parametrize("url", [
    "http://ops:Zq7/pWx3@bundle/b/", "http://ops:Zq7#pWx3@bundle/b/", "https://Zq7pWx3@bundle:8443/x",
    "http://ops:Zq7?pWx3@bundle/", "http://ops:Zq7@pWx3@bundle/",
])
def test_redact_url_hides_a_password_with_unencoded_delimiters(url):
    redacted = bundle_utils.redact_url(url)
    assert "Zq7" not in redacted and "pWx3" not in redacted, redacted
    assert "bundle" in redacted


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=30), st.sampled_from(["http", "https"]))
def test_hypothesis_no_part_of_a_password_survives_redaction_or_a_source_error(password, scheme):
    secret = "S3" + password + "Q9"
    url = f"{scheme}://ops:{secret}@bundle.invalid:8080/b/"
    redacted = bundle_utils.redact_url(url)
    assert secret not in redacted
    try:
        source = bundle_utils.make_source(url, timeout=1)
    except bundle_utils.BundleError as exc:
        assert secret not in str(exc)
        return
    for text in (source.describe("x"), source.public_url("MANIFEST.sha256"), source.base):
        assert secret not in text


# --------------------------------------------------------------------------- tracebacks


def test_a_nul_byte_in_a_manifest_path_is_refused_naming_the_line():
    text = "0" * 64 + "  models/tiny/a\0b\n"
    with pytest.raises(bundle_utils.BundleError, match="line 1"):
        bundle_utils.parse_manifest(text)


@pytest.mark.parametrize("char", ["\x7f", "\x1b", "\t", "\x01", "\x00"])
def test_control_characters_in_a_manifest_path_are_refused(char):
    with pytest.raises(bundle_utils.BundleError, match="line 1"):
        bundle_utils.parse_manifest("0" * 64 + f"  a{char}b")


@pytest.mark.parametrize("value, expected", [
    ("123", 123), (" 123 ", 123), ("", None), (None, None), ("9" * 5000, None), ("\u00b2", None), ("\u0661", None),
    ("-1", None), ("1e3", None), ("12345678901234567890123", None),
])
def test_content_length_parsing(value, expected):
    assert bundle_utils.parse_content_length(value) == expected


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=40), st.text(alphabet="0123456789", min_size=4290, max_size=4400)))
def test_hypothesis_content_length_and_range_never_raise(text):
    got = bundle_utils.parse_content_length(text)
    assert got is None or (isinstance(got, int) and got >= 0)
    rng = bundle_utils.parse_content_range(text)
    assert rng is None or isinstance(rng, tuple)


class HugeNumbers(RangeHandler):
    def do_HEAD(self):
        self.send_response(200)
        self.send_header("Content-Length", "9" * 5000)
        self.end_headers()

    def do_GET(self):
        rel, _path = self._target()
        if rel == bundle_utils.MANIFEST_NAME:
            return super().do_GET()
        self.send_response(206)
        self.send_header("Content-Range", "bytes " + "1" * 5000 + "-2/3")
        self.send_header("Content-Length", "1")
        self.end_headers()
        self.wfile.write(b"x")


def test_numbers_of_more_than_4300_digits_from_the_server_raise_no_traceback(server, tmp_path):
    make_bundle(server.root, model_files())
    server.RequestHandlerClass = HugeNumbers
    dest = tmp_path / "d"
    part = dest / bundle_utils.STATE_DIR / "config.json.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"{")  # resume: the GET asks for a Range and reads Content-Range
    with pytest.raises(bundle_utils.BundleError) as exc:
        mf.fetch_model(str(dest), MODEL, src=server.url, retries=0)
    assert "Content-Range" in str(exc.value)
    source = bundle_utils.HttpSource(server.url, timeout=2)
    assert source.size("x") is None
