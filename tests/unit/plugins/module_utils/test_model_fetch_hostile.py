"""model_fetch against a server that trickles: one byte at a time never trips a socket timeout, so a
transfer slower than LOW_SPEED_BYTES_PER_S over a whole timeout window is given up, with the file named."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from ansible_collections.ascendai.vllm.plugins.module_utils import _bundle as bundle_utils
from ansible_collections.ascendai.vllm.plugins.module_utils import _model_fetch as mf
from ansible_collections.ascendai.vllm.tests.unit.plugins.module_utils.test_model_fetch import (
    MODEL,
    RangeHandler,
    make_bundle,
    model_files,
)

SHARD = f"models/{MODEL}/model-00001-of-00002.safetensors"


class DripHandler(RangeHandler):
    """RangeHandler, except that the paths in ``server.drip`` get their headers at once and then one byte every
    ``server.drip_every`` seconds (for at most 20 s, then the connection closes)."""

    def do_GET(self):
        rel, path = self._target()
        if rel not in self.server.drip:
            return super().do_GET()
        with open(path, "rb") as f:
            body = f.read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        until = time.monotonic() + 20
        try:
            for i in range(len(body)):
                if time.monotonic() > until or self.server.done.is_set():
                    break
                self.wfile.write(body[i:i + 1])
                self.wfile.flush()
                time.sleep(self.server.drip_every)
        except OSError:
            pass
        self.close_connection = True


@pytest.fixture
def drip_server(tmp_path):
    root = tmp_path / "bundle"
    root.mkdir()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), DripHandler)
    srv.daemon_threads = True
    srv.root = str(root)
    srv.ignore_range = False
    srv.cut_after, srv.hold, srv.log = {}, {}, []
    srv.delay = 0.0
    srv.lock = threading.Lock()
    srv.active = srv.max_active = 0
    srv.drip, srv.drip_every, srv.done = set(), 0.05, threading.Event()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}/"
    yield srv
    srv.done.set()
    srv.shutdown()
    srv.server_close()


def run_bounded(fn, limit):
    """Run ``fn`` in a thread: ``(finished, exception)`` after at most ``limit`` seconds."""
    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit)
    return not thread.is_alive(), box.get("error")


def test_a_trickling_file_times_out(drip_server, tmp_path):
    make_bundle(drip_server.root, model_files())
    drip_server.drip = {SHARD}  # 20 bytes/s, each byte well inside the 1 s socket timeout
    started = time.monotonic()
    finished, error = run_bounded(
        lambda: mf.fetch_model(str(tmp_path / "dest"), MODEL, src=drip_server.url, timeout=1, retries=0), 12)
    assert finished, "still fetching a file sent one byte at a time"
    assert isinstance(error, bundle_utils.FetchError), error
    assert "model-00001-of-00002.safetensors" in str(error) and "bytes/s" in str(error)
    assert time.monotonic() - started < 10


def test_a_trickling_manifest_times_out(drip_server, tmp_path):
    make_bundle(drip_server.root, model_files())
    drip_server.drip = {bundle_utils.MANIFEST_NAME}
    finished, error = run_bounded(
        lambda: mf.fetch_model(str(tmp_path / "dest"), MODEL, src=drip_server.url, timeout=1, retries=0), 12)
    assert finished, "still reading a manifest sent one byte at a time"
    assert isinstance(error, bundle_utils.FetchError)
    assert bundle_utils.MANIFEST_NAME in str(error) and "bytes/s" in str(error)


def test_the_guard_lets_a_steady_transfer_through():
    ticks = iter(range(0, 1000, 10))  # 10 s per read, 1 MiB per read: fast enough

    class Stream:
        def read1(self, n):
            return b"x" * n

    guard = bundle_utils.SpeedGuard(Stream(), window=5, clock=lambda: next(ticks))
    for _read in range(20):
        assert len(guard.read(1 << 20)) == 1 << 20


def test_the_guard_stops_a_slow_one():
    ticks = iter(range(0, 1000, 1))

    class Stream:
        def read1(self, n):
            return b"x"

    guard = bundle_utils.SpeedGuard(Stream(), window=5, clock=lambda: next(ticks))
    with pytest.raises(bundle_utils.SlowTransfer, match="less than 1024 bytes/s"):
        for _read in range(10):
            guard.read(1 << 20)
