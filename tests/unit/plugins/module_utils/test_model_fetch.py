"""model_fetch: manifest parsing, HTTP with Range (resume), a server ignoring Range, sha256 refusal, disk check,
the sha256 cache, check mode, parallel transfers and the progress file. The HTTP server is a real one in a thread."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import re
import threading
import time
from collections import namedtuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.ascendai.vllm.plugins.module_utils import _bundle as bundle_utils
from ansible_collections.ascendai.vllm.plugins.module_utils import _model_fetch as mf

MODEL = "tiny"


class RangeHandler(http.server.BaseHTTPRequestHandler):
    """Serves ``server.root`` with HEAD, GET and ``Range: bytes=N-`` (206 + Content-Range).

    Knobs on the server: ``ignore_range``; ``cut_after`` {relpath: bytes} closes the connection after that many
    body bytes, once per entry; ``hold`` {relpath: (bytes, Event)} sends that many bytes then waits for the
    event; ``delay`` seconds per request; ``log`` records (method, path, Range header); ``active``/``max_active``
    count concurrent GETs."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _target(self):
        rel = self.path.lstrip("/").split("?")[0]
        from urllib.parse import unquote
        return unquote(rel), os.path.join(self.server.root, unquote(rel))

    def do_HEAD(self):
        rel, path = self._target()
        self.server.log.append(("HEAD", rel, None))
        if not os.path.isfile(path):
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(os.path.getsize(path)))
        self.end_headers()

    def do_GET(self):
        rel, path = self._target()
        rng = self.headers.get("Range")
        self.server.log.append(("GET", rel, rng))
        if not os.path.isfile(path):
            self.send_error(404)
            return
        size = os.path.getsize(path)
        grow = getattr(self.server, "grow", {}).get(rel, 0)   # GET sends this many bytes more than HEAD says
        size += grow
        start = 0
        if rng and not self.server.ignore_range:
            start = int(re.match(r"bytes=(\d+)-$", rng).group(1))
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(size - start))
        self.end_headers()
        with self.server.lock:
            self.server.active += 1
            self.server.max_active = max(self.server.max_active, self.server.active)
        try:
            time.sleep(self.server.delay)
            with open(path, "rb") as f:
                f.seek(start)
                body = f.read() + b"\0" * grow
            cut = self.server.cut_after.pop(rel, None)
            hold = self.server.hold.pop(rel, None)
            if cut is not None:
                self.wfile.write(body[:cut])
                self.wfile.flush()
                self.close_connection = True
                return
            if hold is not None:
                self.wfile.write(body[:hold[0]])
                self.wfile.flush()
                hold[1].wait(10)
                body = body[hold[0]:]
            self.wfile.write(body)
        finally:
            with self.server.lock:
                self.server.active -= 1


@pytest.fixture
def server(tmp_path):
    root = tmp_path / "bundle"
    root.mkdir()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    srv.daemon_threads = True
    srv.root = str(root)
    srv.ignore_range = False
    srv.cut_after, srv.hold, srv.log = {}, {}, []
    srv.delay = 0.0
    srv.lock = threading.Lock()
    srv.active = srv.max_active = 0
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}/"
    yield srv
    srv.shutdown()
    srv.server_close()


Bundle = namedtuple("Bundle", "root files manifest")


def make_bundle(root, files, extra_manifest=""):
    """Write ``files`` {relpath in the model: bytes} under ``root/models/tiny/`` and a sha256sum manifest."""
    lines = []
    for rel, data in sorted(files.items()):
        path = os.path.join(root, "models", MODEL, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
        lines.append(f"{hashlib.sha256(data).hexdigest()}  models/{MODEL}/{rel}")
    readme = b"# models\n"
    with open(os.path.join(root, "models", "README.md"), "wb") as f:
        f.write(readme)
    lines.append(f"{hashlib.sha256(readme).hexdigest()}  models/README.md")
    text = "\n".join(lines) + "\n" + extra_manifest
    with open(os.path.join(root, bundle_utils.MANIFEST_NAME), "w", encoding="utf-8") as f:
        f.write(text)
    return Bundle(str(root), files, text)


def model_files(seed=1, big=300_000):
    rnd = hashlib.sha256(str(seed).encode()).digest()
    blob = (rnd * (big // len(rnd) + 1))[:big]
    blob = bytes((b + i) % 256 for i, b in enumerate(blob))
    return {
        "config.json": b'{"architectures": ["LlamaForCausalLM"]}\n',
        "model-00001-of-00002.safetensors": blob,
        "model-00002-of-00002.safetensors": blob[::-1][: big // 2],
        "tokenizer.json": b'{"model": {}}\n',
        "sub/extra.txt": b"nested file\n",
    }


def read(path):
    with open(path, "rb") as f:
        return f.read()


# --------------------------------------------------------------------------- manifest


def test_parse_manifest_reads_sha256sum_output_with_binary_marker_and_comments():
    a, b = "a" * 64, "B" * 64
    text = f"# made by playbooks/download.yml\n{a}  models/x/config.json\n{b} *models/x/w.safetensors\n\n"
    assert bundle_utils.parse_manifest(text) == {"models/x/config.json": a, "models/x/w.safetensors": "b" * 64}


@pytest.mark.parametrize("line,needle", [
    ("abc  models/x/a", "sha256sum format"),
    ("a" * 64 + "  /etc/passwd", "not a plain relative path"),
    ("a" * 64 + "  models/../../etc/passwd", "not a plain relative path"),
    ("a" * 64 + "  models//x", "not a plain relative path"),
])
def test_parse_manifest_rejects_bad_lines_naming_the_line(line, needle):
    with pytest.raises(bundle_utils.FetchError, match="line 2") as exc:
        bundle_utils.parse_manifest("b" * 64 + "  ok\n" + line + "\n")
    assert needle in str(exc.value)


def test_parse_manifest_rejects_one_path_with_two_digests():
    with pytest.raises(bundle_utils.FetchError, match="listed twice"):
        bundle_utils.parse_manifest(f"{'a' * 64}  m/x\n{'b' * 64}  m/x\n")


_names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=12).filter(
    lambda s: s not in (".", ".."))


@given(st.dictionaries(st.lists(_names, min_size=1, max_size=3).map("/".join), st.binary(max_size=64), max_size=8))
@settings(max_examples=60, deadline=None)
def test_parse_manifest_round_trips_what_sha256sum_writes(files):
    text = "".join(f"{hashlib.sha256(d).hexdigest()}  {p}\n" for p, d in files.items())
    assert bundle_utils.parse_manifest(text) == {p: hashlib.sha256(d).hexdigest() for p, d in files.items()}


def test_model_entries_names_the_models_the_bundle_has():
    entries = {"models/a/config.json": "0" * 64, "models/b/x": "1" * 64, "wheels/w.whl": "2" * 64}
    assert mf.model_entries(entries, "a") == [("config.json", "models/a/config.json", "0" * 64)]
    with pytest.raises(bundle_utils.FetchError) as exc:
        mf.model_entries(entries, "deepseek")
    assert "models/deepseek/" in str(exc.value) and "models in this bundle: a, b" in str(exc.value)


# --------------------------------------------------------------------------- HTTP


def test_fetch_over_http_then_second_run_reads_nothing(server, tmp_path, monkeypatch):
    bundle = make_bundle(server.root, model_files())
    dest = str(tmp_path / "dest")
    res = mf.fetch_model(dest, MODEL, src=server.url, parallel=3)
    assert res["changed"] is True
    assert sorted(res["fetched"]) == sorted(bundle.files)
    assert res["bytes_fetched"] == sum(len(d) for d in bundle.files.values()) == res["bytes_total"]
    for rel, data in bundle.files.items():
        assert read(os.path.join(dest, rel)) == data
    assert not any(n.endswith(".part") for _d, _s, names in os.walk(dest) for n in names)
    status = json.loads(read(res["status_file"]))
    assert status["state"] == "done" and status["bytes_done"] == status["bytes_total"] == res["bytes_total"]
    assert status["files_done"] == len(bundle.files) and status["current"] == []

    hashed = []
    real = bundle_utils.file_sha256
    monkeypatch.setattr(bundle_utils, "file_sha256", lambda path, *a, **k: hashed.append(path) or real(path, *a, **k))
    server.log.clear()
    res2 = mf.fetch_model(dest, MODEL, src=server.url)
    assert res2["changed"] is False and res2["fetched"] == [] and sorted(res2["present"]) == sorted(bundle.files)
    assert hashed == []  # the sidecar cache answered
    assert [r for r in server.log if r[0] == "GET"] == [("GET", bundle_utils.MANIFEST_NAME, None)]


def test_interrupted_download_resumes_with_a_range_request(server, tmp_path):
    bundle = make_bundle(server.root, model_files())
    big = "model-00001-of-00002.safetensors"
    server.cut_after[f"models/{MODEL}/{big}"] = 123_457
    dest = str(tmp_path / "dest")
    with pytest.raises(bundle_utils.FetchError) as exc:
        mf.fetch_model(dest, MODEL, src=server.url, retries=0, backoff=0)
    msg = str(exc.value)
    assert big in msg and "re-run to resume" in msg and "120.6 KiB" in msg
    part = os.path.join(dest, bundle_utils.STATE_DIR, big + ".part")
    assert os.path.getsize(part) == 123_457
    assert not os.path.exists(os.path.join(dest, big))

    server.log.clear()
    missing = [r for r in bundle.files if not os.path.exists(os.path.join(dest, r))]
    parts = sum(os.path.getsize(os.path.join(dest, bundle_utils.STATE_DIR, r + ".part")) for r in missing
                if os.path.exists(os.path.join(dest, bundle_utils.STATE_DIR, r + ".part")))
    res = mf.fetch_model(dest, MODEL, src=server.url)
    assert sorted(res["fetched"]) == sorted(missing) and big in missing
    assert res["resumed_bytes"] == parts >= 123_457
    assert ("GET", f"models/{MODEL}/{big}", "bytes=123457-") in server.log
    assert read(os.path.join(dest, big)) == bundle.files[big]
    assert not os.path.exists(part)
    assert res["bytes_fetched"] == sum(len(bundle.files[r]) for r in missing) - parts


def test_retry_in_the_same_run_resumes(server, tmp_path):
    bundle = make_bundle(server.root, model_files())
    big = "model-00001-of-00002.safetensors"
    server.cut_after[f"models/{MODEL}/{big}"] = 50_000
    dest = str(tmp_path / "dest")
    res = mf.fetch_model(dest, MODEL, src=server.url, retries=2, backoff=0)
    assert res["changed"] is True
    gets = [r for r in server.log if r[0] == "GET" and r[1].endswith(big)]
    assert gets == [("GET", f"models/{MODEL}/{big}", None), ("GET", f"models/{MODEL}/{big}", "bytes=50000-")]
    assert read(os.path.join(dest, big)) == bundle.files[big]


def test_server_ignoring_range_restarts_the_file(server, tmp_path):
    bundle = make_bundle(server.root, model_files())
    big = "model-00001-of-00002.safetensors"
    dest = str(tmp_path / "dest")
    part = os.path.join(dest, bundle_utils.STATE_DIR, big + ".part")
    os.makedirs(os.path.dirname(part))
    with open(part, "wb") as f:
        f.write(b"\xff" * 1000)  # garbage: only a full restart gives the right bytes
    server.ignore_range = True
    res = mf.fetch_model(dest, MODEL, src=server.url)
    assert ("GET", f"models/{MODEL}/{big}", "bytes=1000-") in server.log
    assert read(os.path.join(dest, big)) == bundle.files[big]
    assert res["bytes_fetched"] == sum(len(d) for d in bundle.files.values()) - 1000


def test_complete_part_from_a_crash_before_rename_is_verified_not_downloaded(server, tmp_path):
    bundle = make_bundle(server.root, model_files())
    big = "model-00001-of-00002.safetensors"
    dest = str(tmp_path / "dest")
    part = os.path.join(dest, bundle_utils.STATE_DIR, big + ".part")
    os.makedirs(os.path.dirname(part))
    with open(part, "wb") as f:
        f.write(bundle.files[big])
    mf.fetch_model(dest, MODEL, src=server.url)
    assert [r for r in server.log if r[0] == "GET" and r[1].endswith(big)] == []
    assert read(os.path.join(dest, big)) == bundle.files[big]


def test_bad_sha256_is_refused_and_the_file_removed(server, tmp_path):
    files = model_files()
    bundle = make_bundle(server.root, files)
    bad = "model-00002-of-00002.safetensors"
    with open(os.path.join(server.root, "models", MODEL, bad), "r+b") as f:
        f.seek(1000)
        f.write(b"X")  # the bundle's copy is damaged after the manifest was made
    dest = str(tmp_path / "dest")
    with pytest.raises(bundle_utils.FetchError) as exc:
        mf.fetch_model(dest, MODEL, src=server.url)
    msg = str(exc.value)
    want = hashlib.sha256(bundle.files[bad]).hexdigest()
    got = hashlib.sha256(read(os.path.join(server.root, "models", MODEL, bad))).hexdigest()
    assert bad in msg and want in msg and got in msg and "was removed" in msg and "sha256sum -c" in msg
    assert not os.path.exists(os.path.join(dest, bad))
    assert not os.path.exists(os.path.join(dest, bundle_utils.STATE_DIR, bad + ".part"))
    assert json.loads(read(os.path.join(dest, bundle_utils.STATE_DIR, bundle_utils.STATUS_NAME)))["state"] == "failed"


def test_present_file_with_other_content_is_fetched_again(server, tmp_path):
    bundle = make_bundle(server.root, model_files())
    dest = str(tmp_path / "dest")
    mf.fetch_model(dest, MODEL, src=server.url)
    path = os.path.join(dest, "tokenizer.json")
    with open(path, "wb") as f:
        f.write(b'{"model": {"x": 1}}\n')
    res = mf.fetch_model(dest, MODEL, src=server.url)
    assert res["changed"] is True and res["mismatched"] == ["tokenizer.json"] == res["fetched"]
    assert read(path) == bundle.files["tokenizer.json"]


def test_cache_is_keyed_by_size_and_mtime(server, tmp_path):
    make_bundle(server.root, model_files())
    dest = str(tmp_path / "dest")
    mf.fetch_model(dest, MODEL, src=server.url)
    path = os.path.join(dest, "config.json")
    data = read(path)
    with open(path, "wb") as f:
        f.write(data.replace(b"Llama", b"Lxama"))  # same size, new mtime
    os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 5_000_000_000))
    res = mf.fetch_model(dest, MODEL, src=server.url)
    assert res["mismatched"] == ["config.json"] and read(path) == data


def test_not_enough_disk_is_refused_before_writing(server, tmp_path, monkeypatch):
    bundle = make_bundle(server.root, model_files())
    need = sum(len(d) for d in bundle.files.values())
    fake = namedtuple("statvfs", "f_bavail f_frsize")(f_bavail=need // 4096 - 1, f_frsize=4096)
    monkeypatch.setattr(bundle_utils.os, "statvfs", lambda path: fake)
    dest = str(tmp_path / "models" / "tiny")
    with pytest.raises(bundle_utils.FetchError) as exc:
        mf.fetch_model(dest, MODEL, src=server.url)
    msg = str(exc.value)
    assert f"need {bundle_utils.human(need)} ({need} bytes)" in msg
    assert f"the filesystem of {tmp_path} has" in msg and f"({fake.f_bavail * 4096} bytes) free" in msg
    assert dest in msg
    assert not os.path.exists(dest)


def test_disk_check_counts_only_what_is_missing(server, tmp_path, monkeypatch):
    bundle = make_bundle(server.root, model_files())
    dest = str(tmp_path / "dest")
    big = "model-00001-of-00002.safetensors"
    os.makedirs(dest)
    with open(os.path.join(dest, big), "wb") as f:
        f.write(bundle.files[big])
    res = mf.fetch_model(dest, MODEL, src=server.url, check_mode=True)
    assert res["bytes_needed"] == sum(len(d) for r, d in bundle.files.items() if r != big)


def test_check_mode_reports_and_writes_nothing(server, tmp_path):
    bundle = make_bundle(server.root, model_files())
    dest = str(tmp_path / "dest")
    res = mf.fetch_model(dest, MODEL, src=server.url, check_mode=True)
    assert res["changed"] is True and sorted(res["fetched"]) == sorted(bundle.files)
    assert res["bytes_needed"] == sum(len(d) for d in bundle.files.values())
    assert not os.path.exists(dest)
    assert not [r for r in server.log if r[0] == "GET" and r[1] != bundle_utils.MANIFEST_NAME]


def test_files_are_transferred_in_parallel(server, tmp_path):
    make_bundle(server.root, model_files())
    server.delay = 0.3
    mf.fetch_model(str(tmp_path / "dest"), MODEL, src=server.url, parallel=4)
    assert server.max_active == 4
    server.max_active = 0
    make_bundle(server.root, model_files(seed=2))
    mf.fetch_model(str(tmp_path / "dest"), MODEL, src=server.url, parallel=1)
    assert server.max_active == 1


def test_progress_file_shows_a_transfer_in_flight(server, tmp_path):
    make_bundle(server.root, model_files())
    big = "model-00001-of-00002.safetensors"
    release = threading.Event()
    server.hold[f"models/{MODEL}/{big}"] = (100_000, release)
    dest = str(tmp_path / "dest")
    status_file = str(tmp_path / "progress.json")
    out = {}
    worker = threading.Thread(target=lambda: out.update(
        mf.fetch_model(dest, MODEL, src=server.url, status_file=status_file, progress_interval=0.05)))
    worker.start()
    seen = None
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            snap = json.loads(read(status_file))
        except (OSError, ValueError):
            snap = {}
        if snap.get("current") == [big] and snap.get("bytes_done", 0) >= 100_000:
            seen = snap
            break
        time.sleep(0.02)
    release.set()
    worker.join(10)
    assert seen is not None, "no in-flight progress seen"
    assert seen["state"] == "running" and seen["files_done"] == 4 and seen["files_total"] == 5
    assert seen["bytes_total"] == out["bytes_total"] and 0 < seen["percent"] < 100
    assert json.loads(read(status_file))["state"] == "done"


def test_http_404_names_the_url(server, tmp_path):
    make_bundle(server.root, model_files())
    os.unlink(os.path.join(server.root, "models", MODEL, "tokenizer.json"))
    with pytest.raises(bundle_utils.FetchError) as exc:
        mf.fetch_model(str(tmp_path / "dest"), MODEL, src=server.url)
    assert f"{server.url}models/{MODEL}/tokenizer.json: HTTP 404" in str(exc.value)


def test_unreachable_server_is_reported(tmp_path):
    with pytest.raises(bundle_utils.FetchError) as exc:
        mf.fetch_model(str(tmp_path / "d"), MODEL, src="http://127.0.0.1:9/bundle/", timeout=2)
    assert "http://127.0.0.1:9/bundle/MANIFEST.sha256" in str(exc.value)


# --------------------------------------------------------------------------- directory source, verify only


def test_fetch_from_a_directory_on_the_node_resumes_a_part(tmp_path):
    bundle = make_bundle(str(tmp_path / "mnt"), model_files())
    dest = str(tmp_path / "dest")
    big = "model-00001-of-00002.safetensors"
    part = os.path.join(dest, bundle_utils.STATE_DIR, big + ".part")
    os.makedirs(os.path.dirname(part))
    with open(part, "wb") as f:
        f.write(bundle.files[big][:7777])
    res = mf.fetch_model(dest, MODEL, src=bundle.root)
    assert res["resumed_bytes"] == 7777
    assert res["bytes_fetched"] == sum(len(d) for d in bundle.files.values()) - 7777
    for rel, data in bundle.files.items():
        assert read(os.path.join(dest, rel)) == data


def test_verify_only_with_manifest_content(tmp_path):
    bundle = make_bundle(str(tmp_path / "b"), model_files())
    dest = os.path.join(bundle.root, "models", MODEL)
    res = mf.fetch_model(dest, MODEL, manifest_text=bundle.manifest)
    assert res["changed"] is False and sorted(res["present"]) == sorted(bundle.files)
    os.unlink(os.path.join(dest, "tokenizer.json"))
    with open(os.path.join(dest, "config.json"), "ab") as f:
        f.write(b" ")
    with pytest.raises(bundle_utils.FetchError) as exc:
        mf.fetch_model(dest, MODEL, manifest_text=bundle.manifest)
    msg = str(exc.value)
    assert "tokenizer.json: missing" in msg
    assert f"config.json: sha256 {hashlib.sha256(bundle.files['config.json'] + b' ').hexdigest()}" in msg


def test_no_source_and_no_manifest_is_refused(tmp_path):
    with pytest.raises(bundle_utils.FetchError, match="give src"):
        mf.fetch_model(str(tmp_path), MODEL)


def test_model_paths_lists_every_directory_once(tmp_path):
    dest = str(tmp_path / "m")
    dirs, files = bundle_utils.dest_paths(dest, ["a.json", "sub/x/y.bin", "sub/z.bin"])
    assert dirs == [dest, f"{dest}/sub", f"{dest}/sub/x"]
    assert files == [f"{dest}/a.json", f"{dest}/sub/x/y.bin", f"{dest}/sub/z.bin"]


# --------------------------------------------------------------------------- credentials in the bundle URL


def test_redact_url_hides_user_and_password():
    assert bundle_utils.redact_url("http://ops:s3cr@t@bundle:8080/b/") == "http://***@bundle:8080/b/"
    assert bundle_utils.redact_url("https://token@bundle/b/x?y=1") == "https://***@bundle/b/x?y=1"
    assert bundle_utils.redact_url("http://bundle/b/") == "http://bundle/b/"
    assert bundle_utils.redact_url("/mnt/bundle") == "/mnt/bundle"


def test_credentials_in_the_url_authenticate_and_never_reach_a_message(server, tmp_path):
    make_bundle(server.root, model_files())
    os.unlink(os.path.join(server.root, "models", MODEL, "tokenizer.json"))
    seen = []
    original = RangeHandler.do_GET

    def recording_get(handler):
        seen.append(handler.headers.get("Authorization"))
        original(handler)

    RangeHandler.do_GET = recording_get
    try:
        src = server.url.replace("http://", "http://ops:p%40ss@word@")
        with pytest.raises(bundle_utils.FetchError) as exc:
            mf.fetch_model(str(tmp_path / "dest"), MODEL, src=src)
    finally:
        RangeHandler.do_GET = original
    message = str(exc.value)
    assert "HTTP 404" in message and "tokenizer.json" in message
    assert "p%40ss" not in message and "p@ss" not in message and "word@" not in message and "ops" not in message
    # the server saw HTTP Basic credentials (ops : p@ss@word), not a host named after them
    import base64
    assert seen and seen[0] == "Basic " + base64.b64encode(b"ops:p@ss@word").decode()


# --------------------------------------------------------------------------- broken and hostile bundles


def test_an_empty_file_in_the_manifest_is_fetched(server, tmp_path):
    files = dict(model_files(), **{"__init__.py": b""})
    make_bundle(server.root, files)
    out = mf.fetch_model(str(tmp_path / "dest"), MODEL, src=server.url)
    assert read(str(tmp_path / "dest" / "__init__.py")) == b""
    assert sorted(out["fetched"]) == sorted(files)


def test_a_body_longer_than_announced_is_not_written(server, tmp_path):
    make_bundle(server.root, model_files())
    server.grow = {f"models/{MODEL}/model-00001-of-00002.safetensors": 5_000_000}
    with pytest.raises(bundle_utils.FetchError) as exc:
        mf.fetch_model(str(tmp_path / "dest"), MODEL, src=server.url)
    assert "more than the 300000 bytes it announced" in str(exc.value)
    part = tmp_path / "dest" / bundle_utils.STATE_DIR / "model-00001-of-00002.safetensors.part"
    assert not part.exists() or part.stat().st_size <= 300_000


@pytest.mark.parametrize("where", ["http", "dir"])
def test_a_manifest_that_is_not_utf8_is_named(server, tmp_path, where):
    root = server.root if where == "http" else str(tmp_path / "mnt")
    make_bundle(root, model_files())
    with open(os.path.join(root, bundle_utils.MANIFEST_NAME), "ab") as f:
        f.write(b"\xff\xfe  models/tiny/x\n")
    with pytest.raises(bundle_utils.FetchError) as exc:
        mf.fetch_model(str(tmp_path / "dest"), MODEL, src=server.url if where == "http" else root)
    assert "not UTF-8 text" in str(exc.value) and bundle_utils.MANIFEST_NAME in str(exc.value)


def test_model_fetch_keeps_no_copy_of_the_bundle_code():
    """The manifest, the sources, the sha256 cache and the transfer live in module_utils/_bundle.py only;
    model_fetch adds the choice of a model's rows and its result, and re-exports none of bundle's names."""
    own = {name for name, value in vars(mf).items()
           if callable(value) and getattr(value, "__module__", "") == mf.__name__}
    assert own == {"model_entries", "fetch_model"}
    for name in ("parse_manifest", "redact_url", "HttpSource", "DirSource", "local_sha256",
                 "read_cached_sha256", "download_file", "check_space", "human", "model_paths", "STATE_DIR"):
        assert not hasattr(mf, name), f"model_fetch.{name}: import it from module_utils/_bundle.py"
