# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The offline bundle: its manifest, the sha256 cache, its source (a directory or a URL) and fetching from it.

The bundle (``playbooks/download.yml``, ``tools/sandbox/*.sh``) is a directory: ``huawei/`` (driver, firmware and
CANN ``.run`` packages), ``python/`` (CPython tarballs), ``wheels/<arch>/``, ``models/<name>/``, and
``MANIFEST.sha256``: ``sha256sum`` output (``<64 hex>  <path>``, paths relative to the bundle, sorted by path),
which ``cd BUNDLE && sha256sum -c MANIFEST.sha256`` checks. Dot directories (``.work/``, ``.ascendai_fetch/``)
are never listed.

Standard library only: this runs on the target node (modules ``bundle_fetch`` and ``model_fetch``), on the
controller, and from the bundle's tools (imported by path). Everything here is the one implementation of:

- manifest read, write and merge (:func:`parse_manifest`, :func:`format_manifest`, :func:`read_manifest`,
  :func:`write_manifest`, :func:`merge_manifest`, :func:`update_manifest`, :func:`tree_entries`); a merge takes
  ``<bundle>/.work/manifest.lock`` (``flock``), so two writers cannot lose each other's lines;
- the sha256 cache: a file's sha256 is kept in ``<dest>/.ascendai_fetch/<file>.sha256`` keyed by size and mtime
  (ns), so a re-run does not read 134 GB again (:func:`local_sha256`);
- the source, an ``http(s)://`` URL (timeouts, ``validate_certs``, ``user:password@`` never echoed, stalled
  transfers given up) or a directory (:func:`make_source`);
- fetching files into a directory, resumable (``.part`` + HTTP Range), parallel, checked against the manifest,
  with the free space checked first (:func:`fetch_files`).
"""

from __future__ import annotations


import base64
import contextlib
import errno
import fnmatch
import hashlib
import http.client
import json
import os
import re
import socket
import ssl
import stat
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

MANIFEST_NAME = "MANIFEST.sha256"
STATE_DIR = ".ascendai_fetch"
STATUS_NAME = "status.json"
CHUNK_BYTES = 1 << 20
CACHE_VERSION = 1
# The lock every manifest writer takes (tools/sandbox/model.sh took it before this module existed).
LOCK_REL = ".work/manifest.lock"

_MANIFEST_LINE = re.compile(r"^([0-9a-fA-F]{64}) [ *](.+)$")
_CONTENT_RANGE = re.compile(r"bytes ([0-9]{1,19})-([0-9]{1,19})/([0-9]{1,19}|\*)")
_NETWORK_ERRORS = (urllib.error.URLError, http.client.HTTPException, socket.timeout, ConnectionError, TimeoutError)


# A transfer slower than this over a whole ``timeout`` window is given up (and retried): the socket timeout alone
# waits only for the next byte, so a server sending one byte every half second never trips it (curl's
# --speed-limit/--speed-time idea).
LOW_SPEED_BYTES_PER_S = 1024
MANIFEST_MAX_BYTES = 64 << 20


class BundleError(Exception):
    """A bundle operation that cannot be done or went wrong; the message says which file, why and what to do."""


# The name model_fetch has always raised.
FetchError = BundleError


class SlowTransfer(TimeoutError):
    """Fewer than LOW_SPEED_BYTES_PER_S over a whole timeout window."""


class SpeedGuard:
    """Reads a stream in pieces as they arrive and raises :class:`SlowTransfer` when a whole ``window`` seconds
    bring fewer than ``min_rate`` bytes per second; ``window`` None (a local directory) checks nothing."""

    def __init__(self, stream, window, min_rate=LOW_SPEED_BYTES_PER_S, clock=time.monotonic):
        self.stream = stream
        self.reader = getattr(stream, "read1", None) or stream.read
        self.window = window
        self.min_rate = min_rate
        self.clock = clock
        self.start = clock()
        self.got = 0

    def read(self, n):
        block = self.reader(n)
        if self.window:
            now = self.clock()
            self.got += len(block)
            elapsed = now - self.start
            if block and elapsed >= self.window:
                if self.got < self.min_rate * elapsed:
                    raise SlowTransfer(f"the server sent {self.got} bytes in {elapsed:.0f} s, less than "
                                       f"{self.min_rate} bytes/s: given up (a stalled or trickling transfer)")
                self.start, self.got = now, 0
        return block


class Stopped(FetchError):
    """A transfer stopped because another one failed; its partial file is kept."""


def _short(value, limit=80):
    """``repr(value)`` cut to ``limit`` characters, for a message quoting untrusted text."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def human(n):
    """``1.5 GiB`` style size."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover - loop always returns


# --------------------------------------------------------------------------- manifest


def _safe_relpath(path, where):
    parts = path.split("/")
    if path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
        raise BundleError(f"{where}: path {path!r} is not a plain relative path inside the bundle; "
                          "regenerate the manifest with playbooks/download.yml")
    # A NUL byte makes every os call raise ValueError, and other control characters have no place in a file name
    # the bundle's tools write; both would also garble the messages that name the path.
    bad = next((c for c in path if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise BundleError(f"{where}: path {path!r} holds the control character {bad!r}; the bundle's files have "
                          "plain names: regenerate the manifest with playbooks/download.yml")
    return path


def parse_manifest(text, where=MANIFEST_NAME):
    """Parse sha256sum output into ``{relative path: lowercase sha256}`` (file order kept).

    Blank lines and ``#`` comments are skipped; ``*`` (sha256sum's binary mark) is accepted; a path listed twice
    with different sums, an absolute path or one with ``..`` is refused."""
    entries = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.rstrip("\r")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _MANIFEST_LINE.match(line)
        if not m:
            raise BundleError(f"{where} line {number}: {line[:120]!r} is not '<sha256>  <path>' (sha256sum format)")
        digest, path = m.group(1).lower(), _safe_relpath(m.group(2), f"{where} line {number}")
        if entries.get(path, digest) != digest:
            raise BundleError(f"{where} line {number}: {path} is listed twice with different sha256")
        entries[path] = digest
    return entries


def format_manifest(entries):
    """``entries`` ({path: sha256}) as sha256sum lines sorted by path (byte order, as ``LC_ALL=C sort``)."""
    rows = []
    for path in sorted(entries, key=lambda p: p.encode("utf-8")):
        digest = str(entries[path]).lower()
        if not re.match(r"^[0-9a-f]{64}$", digest):
            raise BundleError(f"{path}: {digest!r} is not a sha256 (64 hex digits)")
        rows.append(f"{digest}  {_safe_relpath(path, 'manifest entry')}\n")
    return "".join(rows)


def manifest_path(bundle_dir):
    return os.path.join(bundle_dir, MANIFEST_NAME)


def read_manifest(bundle_dir, missing_ok=True):
    """``{path: sha256}`` of ``<bundle_dir>/MANIFEST.sha256``; ``{}`` when there is none and ``missing_ok``."""
    path = manifest_path(bundle_dir)
    try:
        with open(path, "r", encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        if missing_ok:
            return {}
        raise BundleError(f"{path}: no such file. Build the bundle with playbooks/download.yml (it writes "
                          "MANIFEST.sha256), or set the bundle's directory (ascendai_bundle_dir)") from None
    except UnicodeDecodeError as exc:
        raise BundleError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); MANIFEST.sha256 is "
                          "sha256sum's output: rebuild it with the bundle's tools") from None
    except OSError as exc:
        raise BundleError(f"cannot read {path}: {exc.strerror}") from None
    return parse_manifest(text, path)


def write_manifest(bundle_dir, entries):
    """Write ``entries`` as ``<bundle_dir>/MANIFEST.sha256`` (mode 0644) through a temporary file and a rename,
    so a reader never sees half a manifest. Returns True when the content changed. Take :func:`manifest_lock`
    around a read-modify-write (:func:`merge_manifest` does)."""
    text = format_manifest(entries)
    path = manifest_path(bundle_dir)
    try:
        with open(path, "r", encoding="utf-8") as f:
            if f.read() == text:
                return False
    except (OSError, UnicodeDecodeError):
        pass
    tmp = f"{os.path.join(bundle_dir, '.' + MANIFEST_NAME)}.tmp{os.getpid()}-{threading.get_ident()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True


@contextlib.contextmanager
def manifest_lock(bundle_dir):
    """Hold ``<bundle_dir>/.work/manifest.lock`` (an exclusive ``flock``) for a read-modify-write of the
    manifest; every writer of the collection and its tools takes it."""
    import fcntl  # POSIX only; imported here so that the module still imports where fcntl is missing

    lock = os.path.join(bundle_dir, LOCK_REL)
    os.makedirs(os.path.dirname(lock), exist_ok=True)
    with open(lock, "a", encoding="utf-8") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield lock
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _under(path, prefix):
    prefix = prefix.strip("/")
    return not prefix or path == prefix or path.startswith(prefix + "/")


def merge_manifest(bundle_dir, entries, replace_prefixes=(), replace_paths=()):
    """Merge ``entries`` ({path: sha256}) into ``<bundle_dir>/MANIFEST.sha256`` under :func:`manifest_lock`.

    The old lines of ``entries``' paths, of ``replace_paths`` and of every path under ``replace_prefixes``
    (directories of the bundle, e.g. ``models/tiny-deepseek``) are dropped first, so files removed from those
    directories leave the manifest; every other line is kept as it is. Returns ``(changed, merged entries)``."""
    with manifest_lock(bundle_dir):
        merged = read_manifest(bundle_dir)
        drop = set(replace_paths) | set(entries)
        merged = {p: d for p, d in merged.items()
                  if p not in drop and not any(_under(p, prefix) for prefix in replace_prefixes)}
        merged.update({p: str(d).lower() for p, d in entries.items()})
        changed = write_manifest(bundle_dir, merged)
    return changed, merged


def _hidden(rel):
    return any(part.startswith(".") for part in rel.split("/"))


def tree_entries(bundle_dir, prefix="", rehash=True):
    """``{path: sha256}`` of every regular file under ``<bundle_dir>/<prefix>`` (all of it when ``prefix`` is
    empty), paths relative to ``bundle_dir``; dot files and dot directories (``.work/``, ``.ascendai_fetch/``)
    and the manifest itself are left out. ``rehash=False`` trusts the sha256 cache (size and mtime unchanged),
    writing its sidecars under ``<bundle_dir>/.ascendai_fetch/``."""
    top = os.path.join(bundle_dir, prefix.strip("/")) if prefix.strip("/") else bundle_dir
    found = {}
    if os.path.isfile(top):
        rel = os.path.relpath(top, bundle_dir).replace(os.sep, "/")
        return {rel: local_sha256(bundle_dir, rel, rehash=rehash, write_cache=not rehash)[0]}
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, bundle_dir).replace(os.sep, "/")
            if rel == MANIFEST_NAME or name.startswith(".") or not os.path.isfile(full):
                continue
            found[rel] = local_sha256(bundle_dir, rel, rehash=rehash, write_cache=not rehash)[0]
    return found


def update_manifest(bundle_dir, paths=(), prefixes=(), rehash=True):
    """Hash ``paths`` (files relative to the bundle) and every file under ``prefixes`` (directories relative to
    the bundle) and merge their lines into the manifest under the lock, replacing the old lines of those paths
    and directories. This is what a tool that adds files to a bundle calls. Returns a dict: ``changed``,
    ``entries`` (the lines written for these paths) and ``lines`` (the manifest's line count)."""
    bundle_dir = os.path.abspath(bundle_dir)
    entries = {}
    for rel in paths:
        rel = _safe_relpath(str(rel).strip("/"), "path")
        if not os.path.isfile(os.path.join(bundle_dir, rel)):
            raise BundleError(f"{os.path.join(bundle_dir, rel)}: no such file; nothing to add to {MANIFEST_NAME}")
        entries[rel] = local_sha256(bundle_dir, rel, rehash=rehash, write_cache=not rehash)[0]
    for prefix in prefixes:
        entries.update(tree_entries(bundle_dir, _safe_relpath(str(prefix).strip("/"), "prefix"), rehash=rehash))
    changed, merged = merge_manifest(bundle_dir, entries, replace_prefixes=prefixes, replace_paths=paths)
    return {"changed": changed, "entries": entries, "lines": len(merged)}


def missing_message(rel, where, hint=""):
    """The message for a file the manifest does not list: what to put where, and the line to add."""
    msg = (f"{rel} is not in the {MANIFEST_NAME} of {where}. Put the file there and add its line "
           f"(cd BUNDLE && sha256sum {rel} >> {MANIFEST_NAME}), or rebuild the bundle with playbooks/download.yml.")
    return f"{msg} {hint}".strip()


def select(entries, files=(), prefix=None, where=MANIFEST_NAME, hint=""):
    """The manifest rows to fetch: a list of ``(path in dest, path in the bundle, sha256)``.

    ``files`` are bundle paths or globs (``fnmatch``: ``huawei/*-toolkit_*.run``); each lands in dest under its
    base name, and each must match a line. ``prefix`` is a directory of the bundle: every file below it lands in
    dest under its path below the prefix. Both may be given."""
    rows, seen = [], {}
    for pattern in files or ():
        pattern = str(pattern).strip()
        if any(c in pattern for c in "*?["):
            hits = [p for p in entries if fnmatch.fnmatchcase(p, pattern)]
        else:
            hits = [pattern] if pattern in entries else []
        if not hits:
            raise BundleError(missing_message(pattern, where, hint))
        for path in sorted(hits):
            name = path.rsplit("/", 1)[-1]
            if seen.get(name, path) != path:
                raise BundleError(f"{seen[name]} and {path} would both land in dest as {name}: fetch them into "
                                  "different directories")
            if name not in seen:
                seen[name] = path
                rows.append((name, path, entries[path]))
    if prefix is not None:
        top = str(prefix).strip("/")
        if not top:
            raise BundleError("prefix must name a directory of the bundle, e.g. models/tiny-deepseek")
        below = [(p[len(top) + 1:], p, d) for p, d in entries.items() if p.startswith(top + "/")]
        if not below:
            parent = top.rsplit("/", 1)[0] + "/" if "/" in top else ""
            known = sorted({p[len(parent):].split("/", 1)[0] for p in entries
                            if p.startswith(parent) and "/" in p[len(parent):]})
            raise BundleError(f"{where} lists no files under {top}/; directories in this bundle's "
                              f"{parent or '/'}: {', '.join(known) or 'none'}. Put the files in the bundle and add "
                              f"their lines (cd BUNDLE && find {top} -type f -exec sha256sum {{}} + >> "
                              f"{MANIFEST_NAME}), or rebuild the bundle with playbooks/download.yml. {hint}".strip())
        for rel, path, digest in below:
            if seen.get(rel, path) != path:
                raise BundleError(f"{seen[rel]} and {path} would both land in dest as {rel}")
            if rel not in seen:
                seen[rel] = path
                rows.append((rel, path, digest))
    if not rows:
        raise BundleError("name the bundle's files to fetch (files) or a directory of it (prefix)")
    return rows


def verify_in_place(root, rows, where=None, hint="", said_by=MANIFEST_NAME):
    """Check the files of a bundle directory ``root`` against their sums (rows as :func:`select` returns them)
    without copying anything; the message of a damaged or missing file names it and both sums (``said_by``: where
    the expected sum comes from)."""
    bad = []
    for _rel, path, want in rows:
        full = os.path.join(root, path)
        if not os.path.isfile(full):
            bad.append(f"{full}: no such file in the bundle ({where or root}) although {said_by} lists it.")
            continue
        have = file_sha256(full)
        if have != want:
            bad.append(f"{full}: sha256 {have}, but {said_by} says {want}: the file is damaged or is not the "
                       "one the manifest was made for. Fetch it again.")
    if bad:
        raise BundleError(" ".join(bad + ([hint] if hint else [])))
    return rows

# --------------------------------------------------------------------------- sources


def is_url(src):
    return str(src).lower().startswith(("http://", "https://"))


def _authority_end(rest):
    """Index in ``rest`` (a URL after ``scheme://``) where the authority ends: the first ``/``, ``?`` or ``#``."""
    ends = [i for i in (rest.find(c) for c in "/?#") if i >= 0]
    return min(ends) if ends else len(rest)


def redact_url(url):
    """``url`` with its ``user:password@`` part replaced by ``***`` (for messages).

    A password holding an unencoded ``/``, ``?``, ``#`` or ``@`` makes a standard parser see a host, a path or a
    fragment in it; so everything from the authority's start to the last ``@`` of the URL is hidden: this may hide
    a path's ``@`` too, and never shows a piece of a password."""
    text = str(url)
    scheme, sep, rest = text.partition("://")
    if not sep or "@" not in rest:
        return text
    return f"{scheme}://***@{rest.rpartition('@')[2]}"


def split_credentials(url, name="src"):
    """``(url without credentials, userinfo or None)`` of an http(s) URL; the userinfo stays percent-encoded.

    An ``@`` after the authority (a password with an unencoded ``/``, ``?`` or ``#``, or an ``@`` in the path) is
    refused: the URL cannot be split without guessing, and a guess could send the password to a host named after
    part of it. The message names ``name`` and never the password."""
    text = str(url)
    scheme, _sep, rest = text.partition("://")
    end = _authority_end(rest)
    authority, tail = rest[:end], rest[end:]
    if "@" in tail:
        raise BundleError(
            f"{name}={redact_url(text)}: the URL has an '@' after its host part. If the password (or user) holds "
            "'/', '?', '#' or '@', percent-encode them ('/' as %2F, '?' as %3F, '#' as %23, '@' as %40); an '@' "
            "in the path must be written %40 too")
    userinfo, at, host = authority.rpartition("@")
    if not at:
        return text, None
    bad = next((c for c in host if c.isspace() or ord(c) < 32), None)
    if not host or bad is not None:
        raise BundleError(f"{name}={redact_url(text)}: no host after the credentials; write "
                          "http(s)://user:password@host[:port]/path/ with the password percent-encoded")
    try:
        port = urllib.parse.urlsplit(f"{scheme}://{host}/").port
    except ValueError:
        port = -1
    if port == -1 or (port is not None and not 0 < port < 65536):
        raise BundleError(f"{name}={redact_url(text)}: the port after the host is not a number from 1 to 65535; "
                          "if the password holds '/', '?', '#' or '@', percent-encode them (%2F, %3F, %23, %40)")
    return f"{scheme}://{host}{tail}", userinfo


def url_secrets(url):
    """The strings of ``url`` that must never be shown: its userinfo (as written and decoded) and its password.

    Works on URLs that :func:`split_credentials` refuses too (everything between ``://`` and the last ``@``), so a
    caller can mask them before anything is printed."""
    text = str(url)
    _scheme, sep, rest = text.partition("://")
    if not sep or "@" not in rest:
        return []
    userinfo = rest.rpartition("@")[0]
    found = {userinfo, urllib.parse.unquote(userinfo)}
    for info in list(found):
        user, colon, password = info.partition(":")
        if colon and password:
            found.add(password)
    return sorted((s for s in found if s), key=len, reverse=True)


_DIGITS = re.compile(r"[0-9]{1,19}")


def parse_content_length(value):
    """The byte count of a ``Content-Length`` header, or None when it is missing or not a plain decimal below
    2**63 (a server's header is untrusted: a 5000-digit or a Unicode-digit value must not raise)."""
    if value is None:
        return None
    text = str(value).strip()
    return int(text) if _DIGITS.fullmatch(text) else None


def parse_content_range(value):
    """``(first, last, total or None)`` of a ``Content-Range: bytes a-b/c`` header, or None when it is not that
    with plain decimals of at most 19 digits."""
    if value is None:
        return None
    m = _CONTENT_RANGE.fullmatch(str(value).strip())
    if not m:
        return None
    total = None if m.group(3) == "*" else int(m.group(3))
    return int(m.group(1)), int(m.group(2)), total


def _origin(url):
    """``(scheme, host, port)`` of an http(s) URL with the default port filled in; None for anything else."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or (443 if scheme == "https" else 80)


def redirect_policy(old, new):
    """``(follow, keep_credentials)`` for a redirect from ``old`` to ``new``.

    Only http(s) is followed, never https to http (the credentials and the bundle would cross the network in
    clear); credentials go only to the same scheme, host and port, as browsers and curl scope them."""
    a, b = _origin(old), _origin(new)
    if a is None or b is None or (a[0] == "https" and b[0] != "https"):
        return False, False
    return True, a == b


class OriginRedirectHandler(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, with :func:`redirect_policy`: the ``Authorization`` header is an unredirected header,
    which urllib drops on every redirect; it is put back only on a redirect to the same origin."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        follow, keep = redirect_policy(req.full_url, newurl)
        if not follow:
            old, new = redact_url(req.full_url), redact_url(newurl)
            why = ("https to http would send the bundle in clear" if newurl.lower().startswith("http://")
                   else "only http(s) redirects are followed")
            raise BundleError(f"{old}: the server redirects to {new}; refused ({why}). Point src at the "
                              "bundle's final https:// URL")
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            if req.get_method() == "HEAD":
                new.method = "HEAD"  # urllib turns it into a GET, which would start the file's whole body
            new.remove_header("Authorization")
            auth = req.unredirected_hdrs.get("Authorization")
            if keep and auth:
                new.add_unredirected_header("Authorization", auth)
        return new


def ssl_context(validate_certs=True, ca_path=None):
    if not validate_certs:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        return ctx
    return ssl.create_default_context(cafile=ca_path) if ca_path else ssl.create_default_context()


class _DeadlineMixin:
    """An ``http.client`` connection whose response must begin (status line and every header) by ``deadline_at``
    (``time.monotonic()``): the socket timeout only bounds the wait for the next byte, so a server sending one
    header byte a second would otherwise hold the request forever. At the deadline a timer shuts the socket down,
    which ends the blocked read; the request then fails with TimeoutError."""

    deadline_at = None
    deadline_hit = False
    _timer = None

    def _expire(self):
        self.deadline_hit = True
        sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def connect(self):
        if self.deadline_at is not None and self._timer is None:
            self._timer = threading.Timer(max(self.deadline_at - time.monotonic(), 0.0), self._expire)
            self._timer.daemon = True
            self._timer.start()
        super().connect()
        if self.deadline_hit:
            raise TimeoutError("the deadline passed while connecting")

    def getresponse(self):
        try:
            if self.deadline_hit:
                raise TimeoutError("the deadline passed before the response")
            response = super().getresponse()
        finally:
            if self._timer is not None:
                self._timer.cancel()
        if self.deadline_hit:
            # the shutdown can look like the end of the headers: what was read is cut, not a response
            response.close()
            raise TimeoutError("the deadline passed while reading the response headers")
        return response

    def close(self):
        if self._timer is not None:
            self._timer.cancel()
        super().close()


class _DeadlineHTTPConnection(_DeadlineMixin, http.client.HTTPConnection):
    pass


class _DeadlineHTTPSConnection(_DeadlineMixin, http.client.HTTPSConnection):
    pass


class _Deadlines(threading.local):
    """Per thread: the deadline of the request in flight and the connections opened for it (redirects open more)."""

    deadline_at = None

    def __init__(self):
        self.connections = []


def _deadline_factory(cls, state):
    def make(*args, **kwargs):
        conn = cls(*args, **kwargs)
        conn.deadline_at = state.deadline_at
        state.connections.append(conn)
        return conn
    return make


class _DeadlineHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, state):
        super().__init__()
        self.state = state

    def http_open(self, req):
        return self.do_open(_deadline_factory(_DeadlineHTTPConnection, self.state), req)


class _DeadlineHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, state, context):
        super().__init__(context=context)
        self.state = state
        self.context = context

    def https_open(self, req):
        return self.do_open(_deadline_factory(_DeadlineHTTPSConnection, self.state), req, context=self.context)


class HttpSource:
    """The bundle behind an HTTP(S) URL; Range requests resume files.

    Every request must have its response headers within ``timeout`` seconds in all (redirects included); a body
    is then read under :class:`SpeedGuard`. Credentials go only to the URL's own origin (:func:`redirect_policy`)."""

    def __init__(self, base, timeout=60, validate_certs=True, ca_path=None):
        # user:password@ in the URL becomes an Authorization header (urllib would take it for the host) and never
        # appears in a message
        self.secrets = url_secrets(base)
        base, userinfo = split_credentials(base)
        self.auth = None
        if userinfo is not None:
            self.auth = "Basic " + base64.b64encode(urllib.parse.unquote(userinfo).encode()).decode()
        self.base = base.rstrip("/") + "/"
        self.timeout = timeout
        self._deadlines = _Deadlines()
        self.opener = urllib.request.build_opener(
            _DeadlineHTTPHandler(self._deadlines),
            _DeadlineHTTPSHandler(self._deadlines, ssl_context(validate_certs, ca_path)),
            OriginRedirectHandler())

    def describe(self, rel):
        return self.public_url(rel)

    def public_url(self, rel):
        """The URL for messages: without the ``user:password@`` a bundle URL may carry."""
        return redact_url(self.url(rel))

    def url(self, rel):
        return self.base + urllib.parse.quote(rel)

    def _request(self, rel, method="GET", headers=None):
        req = urllib.request.Request(self.url(rel), method=method, headers=dict(headers or {}))
        if self.auth:
            # unredirected: urllib copies ordinary headers onto a redirect to any host
            req.add_unredirected_header("Authorization", self.auth)
        state = self._deadlines
        state.deadline_at, state.connections = time.monotonic() + self.timeout, []
        try:
            return self.opener.open(req, timeout=self.timeout)
        except (urllib.error.HTTPError, BundleError):
            raise
        except Exception:
            if any(conn.deadline_hit for conn in state.connections):
                raise TimeoutError(f"no complete response headers within the timeout of {self.timeout} s (a "
                                   "server that sends them slowly or not at all)") from None
            raise

    def read_text(self, rel):
        try:
            with self._request(rel) as resp:
                guard, parts, total = SpeedGuard(resp, self.timeout), [], 0
                while True:
                    block = guard.read(CHUNK_BYTES)
                    if not block:
                        break
                    total += len(block)
                    if total > MANIFEST_MAX_BYTES:
                        raise BundleError(f"{self.public_url(rel)}: more than {MANIFEST_MAX_BYTES} bytes; not a "
                                          "bundle's MANIFEST.sha256")
                    parts.append(block)
                return b"".join(parts).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BundleError(f"{self.public_url(rel)}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                              "MANIFEST.sha256 is sha256sum's output: rebuild it with the bundle's tools") from None
        except urllib.error.HTTPError as exc:
            raise BundleError(f"{self.public_url(rel)}: HTTP {exc.code} {exc.reason}") from None
        except _NETWORK_ERRORS + (OSError,) as exc:
            raise BundleError(f"{self.public_url(rel)}: {exc}") from None

    def size(self, rel):
        """Bytes of ``rel`` from Content-Length of a HEAD, or None when the server does not say."""
        try:
            with self._request(rel, method="HEAD") as resp:
                length = resp.headers.get("Content-Length")
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                raise BundleError(f"{self.public_url(rel)}: HTTP 404, the bundle's server does not have this file "
                                  "although MANIFEST.sha256 lists it; serve the whole bundle directory") from None
            if exc.code in (405, 501):
                return None
            raise BundleError(f"{self.public_url(rel)}: HTTP {exc.code} {exc.reason}") from None
        except _NETWORK_ERRORS as exc:
            raise BundleError(f"{self.public_url(rel)}: {exc}") from None
        return parse_content_length(length)

    def open(self, rel, offset):
        """``(stream, start)``: the data from ``start`` (``offset``, or 0 when the server ignores Range);
        ``(None, offset)`` when there is nothing after ``offset`` (HTTP 416)."""
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        try:
            resp = self._request(rel, headers=headers)
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and offset:
                return None, offset
            if 500 <= exc.code < 600:
                raise ConnectionError(f"HTTP {exc.code} {exc.reason}") from None
            raise BundleError(f"{self.public_url(rel)}: HTTP {exc.code} {exc.reason}") from None
        if offset and resp.status == 206:
            got = parse_content_range(resp.headers.get("Content-Range"))
            if not got or got[0] != offset:
                resp.close()
                raise BundleError(f"{self.public_url(rel)}: asked for bytes {offset}- and got Content-Range "
                                  f"{_short(resp.headers.get('Content-Range'))}")
            return resp, offset
        return resp, 0


class DirSource:
    """The bundle as a directory on the node."""

    def __init__(self, base):
        self.base = base

    def describe(self, rel):
        return os.path.join(self.base, rel)

    def read_text(self, rel):
        try:
            with open(os.path.join(self.base, rel), "r", encoding="utf-8") as f:
                return f.read()
        except UnicodeDecodeError as exc:
            raise BundleError(f"{os.path.join(self.base, rel)}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                              "MANIFEST.sha256 is sha256sum's output: rebuild it with the bundle's tools") from None
        except OSError as exc:
            raise BundleError(f"cannot read {os.path.join(self.base, rel)}: {exc}") from None

    def size(self, rel):
        try:
            return os.path.getsize(os.path.join(self.base, rel))
        except OSError as exc:
            raise BundleError(f"{os.path.join(self.base, rel)}: {exc.strerror}; MANIFEST.sha256 lists it but the "
                              "bundle directory lacks it") from None

    def open(self, rel, offset):
        path = os.path.join(self.base, rel)
        try:
            f = open(path, "rb")
        except OSError as exc:
            raise BundleError(f"cannot read {path}: {exc.strerror}") from None
        size = os.fstat(f.fileno()).st_size
        if offset == size:
            f.close()
            return None, offset
        f.seek(offset if offset < size else 0)
        return f, (offset if offset < size else 0)


def make_source(src, timeout=60, validate_certs=True, ca_path=None):
    if is_url(src):
        return HttpSource(src, timeout=timeout, validate_certs=validate_certs, ca_path=ca_path)
    if not os.path.isdir(src):
        raise BundleError(f"src={redact_url(src)} is neither an http(s):// URL nor a directory on this node")
    return DirSource(src)


# --------------------------------------------------------------------------- local state


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW | _CLOEXEC
# What open() with O_NOFOLLOW says of a symbolic link: ELOOP on Linux, EMLINK on FreeBSD, ENOTDIR with O_DIRECTORY
_LINK_ERRNOS = {errno.ELOOP, errno.EMLINK, errno.ENOTDIR}


class SafeTree:
    """Files under ``root`` reached without following a symbolic link below it.

    The fetch runs as root in a directory that the service account owns (the model role gives it the model
    directory): had it replaced ``sub/`` or a file by a link, a path-based open, rename or chown would act on the
    link's target, anywhere on the host. Here every component below ``root`` is opened with ``O_NOFOLLOW`` from its
    parent's descriptor (``openat``), renames and unlinks go through directory descriptors, and a link found on
    the way fails naming it. A link swapped in after a directory was opened changes nothing: the descriptor still
    names the directory that was checked. ``root`` itself is the caller's (a path the playbook chose under a
    root-owned parent) and may be a link."""

    def __init__(self, root):
        self.root = os.path.abspath(root)

    def path(self, rel):
        return os.path.join(self.root, rel) if rel else self.root

    def link_error(self, rel):
        path = self.path(rel)
        try:
            where = f" (to {os.readlink(path)})"
        except OSError:
            where = ""
        return BundleError(f"{path} is a symbolic link{where}: the fetch never writes through a link under "
                           f"{self.root}, which another account may own, as root. Remove the link (rm {path}), "
                           "find out who made it, and re-run")

    def _open_root(self):
        return os.open(self.root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)

    def open_dir(self, rel_dir, create=False, mode=0o777):
        """A descriptor of ``root/rel_dir`` (``""``: root); missing directories are made when ``create``, else
        FileNotFoundError. Close it."""
        if create:
            os.makedirs(self.root, exist_ok=True)
        fd = self._open_root()
        done = ""
        try:
            for name in [p for p in rel_dir.split("/") if p]:
                done = f"{done}/{name}" if done else name
                try:
                    nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    try:
                        os.mkdir(name, mode, dir_fd=fd)
                    except FileExistsError:
                        pass
                    nfd = self._open_child_dir(name, fd, done)
                except OSError as exc:
                    if exc.errno in _LINK_ERRNOS:
                        raise self._not_a_dir(fd, name, done) from None
                    raise
                os.close(fd)
                fd = nfd
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _open_child_dir(self, name, fd, done):
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError as exc:
            if exc.errno in _LINK_ERRNOS:
                raise self._not_a_dir(fd, name, done) from None
            raise

    def _not_a_dir(self, fd, name, done):
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            st = None
        if st is not None and stat.S_ISLNK(st.st_mode):
            return self.link_error(done)
        return BundleError(f"{self.path(done)} is not a directory; move it away and re-run")

    @contextlib.contextmanager
    def parent(self, rel, create=False):
        """``(descriptor of rel's directory, rel's base name)``, closed after the block."""
        head, _sep, name = rel.rpartition("/")
        fd = self.open_dir(head, create=create)
        try:
            yield fd, name
        finally:
            os.close(fd)

    def lstat(self, rel):
        """``os.stat_result`` of ``rel`` (never a link: a link fails), or None when it or a directory is missing."""
        try:
            with self.parent(rel) as (fd, name):
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except (FileNotFoundError, NotADirectoryError):
            return None
        if stat.S_ISLNK(st.st_mode):
            raise self.link_error(rel)
        return st

    def open_file(self, rel, flags, mode=0o666, create_dirs=False):
        """``os.open`` of ``rel`` with ``O_NOFOLLOW``: a link fails naming it."""
        with self.parent(rel, create=create_dirs) as (fd, name):
            try:
                return os.open(name, flags | _NOFOLLOW | _CLOEXEC, mode, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.EMLINK):
                    raise self.link_error(rel) from None
                raise

    def unlink(self, rel, missing_ok=True):
        try:
            with self.parent(rel) as (fd, name):
                os.unlink(name, dir_fd=fd)
        except (FileNotFoundError, NotADirectoryError):
            if not missing_ok:
                raise

    def write_atomic(self, rel, text):
        """Write ``text`` as ``rel`` through a new temporary file and a rename in the same directory."""
        with self.parent(rel, create=True) as (fd, name):
            tmp = f".{name}.tmp{os.getpid()}-{threading.get_ident()}"
            try:
                os.unlink(tmp, dir_fd=fd)
            except FileNotFoundError:
                pass
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666, dir_fd=fd)
            try:
                with os.fdopen(out, "w", encoding="utf-8") as f:
                    f.write(text)
                os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                try:
                    os.unlink(tmp, dir_fd=fd)
                except OSError:
                    pass
                raise


def file_sha256(path, chunk_bytes=CHUNK_BYTES, stop=None, tree=None):
    """sha256 of ``path``; with ``tree``, ``path`` is relative to it and no link is followed."""
    h = hashlib.sha256()
    if tree is not None:
        f = os.fdopen(tree.open_file(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb")
    else:
        f = open(path, "rb")
    with f:
        while True:
            if stop is not None and stop.is_set():
                raise BundleError("stopped")
            block = f.read(chunk_bytes)
            if not block:
                return h.hexdigest()
            h.update(block)


def cache_path(dest, rel):
    return os.path.join(dest, STATE_DIR, rel + ".sha256")


def _cache_rel(rel):
    return f"{STATE_DIR}/{rel}.sha256"


def read_cached_sha256(dest, rel, tree=None):
    """The cached sha256 of ``dest/rel`` when its size and mtime are the ones it was hashed at, else None."""
    try:
        if tree is not None:
            st = tree.lstat(rel)
            if st is None:
                return None
            with os.fdopen(tree.open_file(_cache_rel(rel), os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "r",
                           encoding="utf-8") as f:
                data = json.loads(f.read(1 << 16))
        else:
            st = os.stat(os.path.join(dest, rel))
            with open(cache_path(dest, rel), "r", encoding="utf-8") as f:
                data = json.load(f)
    except (OSError, ValueError):
        return None
    if (isinstance(data, dict) and data.get("version") == CACHE_VERSION and data.get("size") == st.st_size
            and data.get("mtime_ns") == st.st_mtime_ns and isinstance(data.get("sha256"), str)):
        return data["sha256"]
    return None


def write_cached_sha256(dest, rel, digest, tree=None):
    if tree is not None:
        st = tree.lstat(rel)
        if st is None:
            raise FileNotFoundError(tree.path(rel))
        tree.write_atomic(_cache_rel(rel), json.dumps({"version": CACHE_VERSION, "size": st.st_size,
                                                       "mtime_ns": st.st_mtime_ns, "sha256": digest}))
        return
    st = os.stat(os.path.join(dest, rel))
    path = cache_path(dest, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + f".tmp{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"version": CACHE_VERSION, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest}, f)
    os.replace(tmp, path)


def local_sha256(dest, rel, rehash=False, write_cache=True, tree=None):
    """sha256 of ``dest/rel`` through the sidecar cache; ``(digest, from_cache)``. With ``tree`` (a
    :class:`SafeTree` of dest) no link under dest is followed."""
    if not rehash:
        cached = read_cached_sha256(dest, rel, tree=tree)
        if cached is not None:
            return cached, True
    digest = file_sha256(rel, tree=tree) if tree is not None else file_sha256(os.path.join(dest, rel))
    if write_cache:
        write_cached_sha256(dest, rel, digest, tree=tree)
    return digest, False


def free_space(path):
    """``(existing directory checked, free bytes for an unprivileged writer)`` of the filesystem of ``path``."""
    probe = os.path.abspath(path)
    while not os.path.isdir(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    st = os.statvfs(probe)
    return probe, st.f_bavail * st.f_frsize


def check_space(dest, needed, reserve=0, what="the files", fix="Free space there, or fetch into a bigger filesystem"):
    """Raise when the filesystem of ``dest`` lacks ``needed`` (+ ``reserve``) bytes."""
    where, free = free_space(dest)
    if needed + reserve > free:
        extra = f" plus {human(reserve)} kept free" if reserve else ""
        raise BundleError(f"not enough free disk space for {what} in {dest}: the missing files need "
                          f"{human(needed)} ({needed} bytes){extra}, the filesystem of {where} has {human(free)} "
                          f"({free} bytes) free. {fix}")
    return where, free


# --------------------------------------------------------------------------- progress


class Progress:
    """Counters shared by the download threads; written as JSON to ``path`` about once a second."""

    def __init__(self, path, label, files_total, bytes_total, interval=1.0, tree=None):
        self.path = path
        # the status file under dest is written through the dest's SafeTree (never through a link there)
        self.tree, self.rel = None, None
        if path and tree is not None and os.path.abspath(path).startswith(tree.root + os.sep):
            self.tree, self.rel = tree, os.path.relpath(os.path.abspath(path), tree.root).replace(os.sep, "/")
        self.lock = threading.Lock()
        # "model": the key the model role's progress display has always read (roles/model/tasks/fetch_wait.yml)
        self.data = {"state": "running", "model": label, "files_total": files_total, "files_done": 0,
                     "bytes_total": bytes_total, "bytes_done": 0, "bytes_fetched": 0, "current": [],
                     "started": time.time(), "updated": time.time(), "rate_bytes_per_s": 0.0, "eta_s": None,
                     "errors": []}
        self.interval = interval
        self._stop = threading.Event()
        self._thread = None

    def add(self, n, fetched=True):
        with self.lock:
            self.data["bytes_done"] += n
            if fetched:
                self.data["bytes_fetched"] += n

    def start_file(self, rel):
        with self.lock:
            self.data["current"].append(rel)

    def end_file(self, rel, ok=True):
        with self.lock:
            if rel in self.data["current"]:
                self.data["current"].remove(rel)
            if ok:
                self.data["files_done"] += 1

    def error(self, msg):
        with self.lock:
            self.data["errors"].append(msg)

    def snapshot(self):
        with self.lock:
            snap = dict(self.data, current=sorted(self.data["current"]), errors=list(self.data["errors"]))
        now = time.time()
        elapsed = max(now - snap["started"], 1e-6)
        snap["updated"] = now
        snap["rate_bytes_per_s"] = round(snap["bytes_fetched"] / elapsed, 1)
        left = snap["bytes_total"] - snap["bytes_done"]
        snap["eta_s"] = round(left / snap["rate_bytes_per_s"], 1) if snap["rate_bytes_per_s"] > 0 else None
        snap["percent"] = round(100.0 * snap["bytes_done"] / snap["bytes_total"], 1) if snap["bytes_total"] else 100.0
        return snap

    def write(self, state=None):
        if not self.path:
            return
        if state:
            with self.lock:
                self.data["state"] = state
        snap = self.snapshot()
        try:
            if self.tree is not None:
                self.tree.write_atomic(self.rel, json.dumps(snap))
                return
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            SafeTree(os.path.dirname(self.path)).write_atomic(os.path.basename(self.path), json.dumps(snap))
        except (OSError, BundleError):
            pass  # progress is informative; a failed write must not fail the transfer (a link is named by the fetch)

    def _loop(self):
        while not self._stop.wait(self.interval):
            self.write()

    def __enter__(self):
        self.write()
        self._thread = threading.Thread(target=self._loop, name="bundle-fetch-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        self._stop.set()
        self._thread.join()
        self.write("failed" if exc_type else "done")
        return False


# --------------------------------------------------------------------------- one file


def _part_rel(rel):
    return f"{STATE_DIR}/{rel}.part"


def _size_of(tree, rel):
    st = tree.lstat(rel)
    return st.st_size if st is not None else None


def download_file(source, item, dest, progress, stop, retries=3, chunk_bytes=CHUNK_BYTES, backoff=1.0, tree=None):
    """Fetch ``item`` (dict rel, bundle_rel, sha256, size) into ``dest/rel`` through a resumable ``.part``.

    Every path under dest goes through ``tree`` (a :class:`SafeTree`): no symbolic link there is followed."""
    tree = tree or SafeTree(dest)
    rel, want, size = item["rel"], item["sha256"], item.get("size")
    part_rel = _part_rel(rel)
    part = os.path.join(dest, part_rel)
    where = source.describe(item["bundle_rel"])
    progress.start_file(rel)
    attempt = 0
    try:
        while True:
            offset = _size_of(tree, part_rel) or 0
            if size is not None and offset > size:
                tree.unlink(part_rel)
                progress.add(-offset, fetched=False)
                offset = 0
            h = hashlib.sha256()
            # the .part is written through this one descriptor, opened without following a link; its name is
            # checked to still be this file before the rename (a link or another file swapped in is refused)
            fd = tree.open_file(part_rel, os.O_RDWR | os.O_CREAT, 0o666, create_dirs=True)
            with os.fdopen(fd, "r+b") as out:
                st = os.fstat(out.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                    raise BundleError(f"{part}: not a plain file with one name (a hard link or a device?); remove "
                                      "it and re-run")
                offset = min(offset, st.st_size)
                if offset:
                    out.seek(0)
                    left = offset
                    while left:
                        block = out.read(min(chunk_bytes, left))
                        if not block:
                            break
                        h.update(block)
                        left -= len(block)
                try:
                    if size is not None and offset == size:
                        stream, start = None, offset
                    else:
                        stream, start = source.open(item["bundle_rel"], offset)
                    if stream is not None:
                        guard = SpeedGuard(stream, getattr(source, "timeout", None))
                        with stream:
                            if start != offset:  # the server ignored Range: start again
                                progress.add(-offset, fetched=False)
                                h = hashlib.sha256()
                                offset = 0
                            out.seek(offset)
                            out.truncate()
                            while True:
                                if stop.is_set():
                                    raise Stopped(f"{rel}: stopped after another file failed; "
                                                  f"{human(out.tell())} kept in {part} for the next run")
                                block = guard.read(chunk_bytes)
                                if not block:
                                    break
                                if size is not None and out.tell() + len(block) > size:
                                    raise BundleError(f"{where}: the server sends more than the {size} bytes it "
                                                      "announced; nothing more is written (the free-space check "
                                                      "counted that size). Check the bundle's server and the file")
                                out.write(block)
                                h.update(block)
                                progress.add(len(block))
                    out.flush()
                    os.fsync(out.fileno())
                    got = os.fstat(out.fileno()).st_size
                    if size is not None and got < size:
                        raise ConnectionError(f"the transfer ended after {got} of {size} bytes")
                except _NETWORK_ERRORS as exc:
                    attempt += 1
                    done = os.fstat(out.fileno()).st_size
                    if attempt > retries or stop.is_set():
                        raise BundleError(f"{where}: {exc} after {attempt} attempts; {human(done)} of "
                                          f"{human(size) if size is not None else '?'} kept in {part}: re-run to "
                                          "resume from there") from None
                    time.sleep(backoff * (2 ** (attempt - 1)))
                    continue
                got = os.fstat(out.fileno()).st_size
                digest = h.hexdigest()
                if digest != want:
                    tree.unlink(part_rel)
                    progress.add(-got, fetched=False)
                    raise BundleError(f"{where}: sha256 {digest} does not match MANIFEST.sha256 ({want}); the "
                                      f"downloaded file ({got} bytes) was removed. Re-run to download it again; if "
                                      "it fails again the bundle is damaged: check it with 'sha256sum -c "
                                      "MANIFEST.sha256' in the bundle directory")
                _replace_checked(tree, part_rel, rel, st)
            write_cached_sha256(dest, rel, digest, tree=tree)
            progress.end_file(rel)
            return {"rel": rel, "bytes": got, "resumed_from": item.get("part_bytes", 0)}
    except BaseException:
        progress.end_file(rel, ok=False)
        raise


def _replace_checked(tree, part_rel, rel, written):
    """Rename ``part_rel`` to ``rel`` when the name still holds the file that was written (``written``: its fstat):
    a link or another file put in its place during the transfer is refused, not moved into the model."""
    with tree.parent(part_rel) as (pfd, pname), tree.parent(rel, create=True) as (dfd, dname):
        try:
            now = os.stat(pname, dir_fd=pfd, follow_symlinks=False)
        except FileNotFoundError:
            raise BundleError(f"{tree.path(part_rel)} was removed during the transfer; nothing was moved into "
                              "place. Find out what deletes files there (only the fetch may write under its "
                              "destination), and re-run") from None
        if stat.S_ISLNK(now.st_mode):
            raise tree.link_error(part_rel)
        if (now.st_dev, now.st_ino) != (written.st_dev, written.st_ino):
            raise BundleError(f"{tree.path(part_rel)} was replaced by another file during the transfer; nothing "
                              "was moved into place. Find out what writes there, and re-run")
        os.replace(pname, dname, src_dir_fd=pfd, dst_dir_fd=dfd)


# --------------------------------------------------------------------------- many files


def plan_files(rows, dest, rehash=False, check_mode=False, tree=None):
    """Classify each row: present (right sha256), missing, or mismatch (present with another sha256). A symbolic
    link under dest (a directory on a file's path, the file, its ``.part``) fails naming it."""
    tree = tree or SafeTree(dest)
    plan = []
    for rel, bundle_rel, digest in rows:
        item = {"rel": rel, "bundle_rel": bundle_rel, "sha256": digest, "part_bytes": 0}
        st = tree.lstat(rel)
        if st is not None and stat.S_ISREG(st.st_mode):
            have, cached = local_sha256(dest, rel, rehash=rehash, write_cache=not check_mode, tree=tree)
            item["state"] = "present" if have == digest else "mismatch"
            item["local_sha256"] = have
            item["local_bytes"] = st.st_size
            item["from_cache"] = cached
        else:
            item["state"] = "missing"
        part = tree.lstat(_part_rel(rel))
        if item["state"] != "present" and part is not None and stat.S_ISREG(part.st_mode):
            item["part_bytes"] = part.st_size
        plan.append(item)
    return plan


def load_entries(source=None, manifest_text=None):
    """``(entries, where)``: the manifest given as text, else read from the source."""
    if manifest_text is not None:
        return parse_manifest(manifest_text, "the given manifest"), "the given manifest"
    if source is None:
        raise BundleError("give src (the bundle) or the manifest's content: without either there is nothing to "
                          "check the files against")
    where = source.describe(MANIFEST_NAME)
    return parse_manifest(source.read_text(MANIFEST_NAME), where), where


def fetch_files(dest, rows, source=None, label="bundle", parallel=4, retries=3, rehash=False, status_file=None,
                check_mode=False, reserve_bytes=0, chunk_bytes=CHUNK_BYTES, progress_interval=1.0, backoff=1.0,
                space_what=None, space_fix=None, mismatch_fix=None, manifest_label=None):
    """Bring ``dest`` to ``rows`` (``(path in dest, path in the bundle, sha256)``, see :func:`select`).

    ``source`` None only verifies ``dest`` (the files were copied there by other means) and fails on a missing
    or different file. Returns the result dict of the modules ``bundle_fetch`` and ``model_fetch``."""
    started = time.time()
    dest = os.path.abspath(dest)
    if parallel < 1:
        raise BundleError(f"parallel={parallel} must be at least 1")
    if os.path.lexists(dest) and not os.path.isdir(dest):
        raise BundleError(f"dest={dest} exists and is not a directory")

    tree = SafeTree(dest)
    plan = plan_files(rows, dest, rehash=rehash, check_mode=check_mode, tree=tree)
    todo = [i for i in plan if i["state"] != "present"]
    result = {
        "changed": bool(todo), "dest": dest,
        "files": [i["rel"] for i in plan],
        "present": [i["rel"] for i in plan if i["state"] == "present"],
        "fetched": [i["rel"] for i in todo],
        "mismatched": [i["rel"] for i in plan if i["state"] == "mismatch"],
        "sha256": {i["rel"]: i["sha256"] for i in plan},
        "bytes_present": sum(i.get("local_bytes", 0) for i in plan if i["state"] == "present"),
        "bytes_fetched": 0, "resumed_bytes": sum(i["part_bytes"] for i in todo),
        "status_file": status_file,
    }
    if source is None:
        if todo:
            lines = [f"{i['rel']}: missing" if i["state"] == "missing" else
                     f"{i['rel']}: sha256 {i['local_sha256']}, manifest {i['sha256']}" for i in todo]
            raise BundleError(f"{dest} does not match the manifest of {manifest_label or label}: "
                              + "; ".join(lines) + ". "
                              + (mismatch_fix or "Copy the files again from an intact bundle (check it there with "
                                 "'sha256sum -c MANIFEST.sha256')"))
        result.update(changed=False, fetched=[], bytes_total=result["bytes_present"],
                      seconds=round(time.time() - started, 3))
        return result

    for item in todo:
        item["size"] = source.size(item["bundle_rel"])
    unknown = [i["rel"] for i in todo if i["size"] is None]
    needed = sum(max(i["size"] - i["part_bytes"], 0) for i in todo if i["size"] is not None)
    result["bytes_needed"] = needed
    result["bytes_total"] = result["bytes_present"] + sum(i["size"] or 0 for i in todo)
    if unknown:
        result["unknown_sizes"] = unknown
    space_where, free = check_space(dest, needed, reserve_bytes, what=space_what or label,
                                    fix=space_fix or "Free space there, or fetch into a bigger filesystem")
    result["free_bytes"] = free
    result["free_checked_at"] = space_where
    if check_mode or not todo:
        result["seconds"] = round(time.time() - started, 3)
        return result

    for item in todo:
        if item["state"] == "mismatch":
            tree.unlink(item["rel"])
            tree.unlink(_cache_rel(item["rel"]))
    os.makedirs(dest, exist_ok=True)
    todo.sort(key=lambda i: -(i["size"] or 0))  # biggest first: the pool ends together
    total = sum(i["size"] or 0 for i in todo)
    status_file = status_file or os.path.join(dest, STATE_DIR, STATUS_NAME)
    result["status_file"] = status_file
    stop = threading.Event()
    errors, stopped, done = [], [], []
    progress = Progress(status_file, label, len(todo), total, interval=progress_interval, tree=tree)
    progress.add(sum(i["part_bytes"] for i in todo), fetched=False)
    with progress:
        with ThreadPoolExecutor(max_workers=min(parallel, len(todo))) as pool:
            futures = [pool.submit(download_file, source, item, dest, progress, stop, retries, chunk_bytes, backoff,
                                   tree) for item in todo]
            for fut in futures:
                try:
                    done.append(fut.result())
                except Stopped as exc:
                    stopped.append(str(exc))
                except BundleError as exc:
                    stop.set()
                    errors.append(str(exc))
                    progress.error(str(exc))
                except OSError as exc:
                    stop.set()
                    errors.append(f"writing into {dest}: {exc}")
                    progress.error(errors[-1])
        if errors or stopped:
            progress.write("failed")
            raise BundleError("; ".join(errors or stopped))
    _remove_empty_state(tree)
    result["bytes_fetched"] = sum(d["bytes"] - d["resumed_from"] for d in done)
    result["seconds"] = round(time.time() - started, 3)
    result["rate_bytes_per_s"] = round(result["bytes_fetched"] / max(result["seconds"], 1e-6), 1)
    return result


def _remove_empty_state(tree):
    """Drop empty directories left under the state directory (the .sha256 sidecars and status stay); the walk
    goes through descriptors and follows no link."""
    try:
        top = tree.open_dir(STATE_DIR)
    except (OSError, BundleError):
        return
    try:
        for _dirpath, dirnames, _filenames, dirfd in os.fwalk(".", topdown=False, dir_fd=top):
            for name in dirnames:
                try:
                    os.rmdir(name, dir_fd=dirfd)
                except OSError:
                    pass
    finally:
        os.close(top)


def dest_paths(dest, files):
    """Every directory (dest and below) and file of ``files`` (relative to dest), for ownership and modes."""
    dirs, paths = dest_rel_paths(dest, files)
    return [os.path.join(dest, d) if d else dest for d in dirs], [os.path.join(dest, f) for f in paths]


def dest_rel_paths(dest, files):
    """:func:`dest_paths` relative to dest: ``("", directories below it..., the state directory)`` and ``files``."""
    dirs, seen = [""], {""}
    for rel in files:
        parent = os.path.dirname(rel)
        chain = []
        while parent not in seen:
            chain.append(parent)
            seen.add(parent)
            parent = os.path.dirname(parent)
        dirs.extend(reversed(chain))
    try:
        state = SafeTree(dest).lstat(STATE_DIR)
    except BundleError:
        state = True  # a link there: name it when the attributes are applied
    if state is not None and (state is True or stat.S_ISDIR(state.st_mode)):
        dirs.append(STATE_DIR)
    return dirs, list(files)


_TRANSFER_ARGUMENT_SPEC = {
    "parallel": {"type": "int", "default": 4},
    "retries": {"type": "int", "default": 3},
    "timeout": {"type": "int", "default": 60},
    "validate_certs": {"type": "bool", "default": True},
    "ca_path": {"type": "path"},
    "rehash": {"type": "bool", "default": False},
    "status_file": {"type": "path"},
    "owner": {"type": "str"},
    "group": {"type": "str"},
    "mode": {"type": "raw"},
    "directory_mode": {"type": "raw"},
}


def transfer_argument_spec():
    """The options of the fetch modules (bundle_fetch, model_fetch) that :func:`fetch_files` and
    :func:`apply_file_attributes` take, a fresh copy; documented once in plugins/doc_fragments/bundle_transfer.py."""
    return {name: dict(spec) for name, spec in _TRANSFER_ARGUMENT_SPEC.items()}


def _uid(owner):
    import pwd  # POSIX only, as chown
    text = str(owner).strip()
    if text.isdigit() and text.isascii():
        return int(text)
    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        raise BundleError(f"owner={owner}: no such user on this host; create it first (the model role does with "
                          "model_owner_create), or give a numeric uid") from None


def _gid(group):
    import grp
    text = str(group).strip()
    if text.isdigit() and text.isascii():
        return int(text)
    try:
        return grp.getgrnam(text).gr_gid
    except KeyError:
        raise BundleError(f"group={group}: no such group on this host; create it first, or give a numeric "
                          "gid") from None


def wanted_mode(mode, current, name="mode", symbolic=None):
    """The permission bits that ``mode`` asks for a file whose ``st_mode`` is ``current``: an int, an octal string
    (``"0640"``) or, through ``symbolic`` (AnsibleModule._symbolic_mode_to_octal), ``u=rw,g=r``."""
    if isinstance(mode, bool):
        raise BundleError(f"{name}={mode!r} is not a file mode; write it as a quoted octal string, e.g. '0640'")
    if isinstance(mode, int):
        return stat.S_IMODE(mode)
    text = str(mode).strip()
    if re.fullmatch(r"[0-7]{1,5}", text):
        return stat.S_IMODE(int(text, 8))
    if symbolic is not None:
        try:
            return stat.S_IMODE(symbolic(os.stat_result((current,) + (0,) * 9), text))
        except Exception as exc:  # Ansible raises ValueError with its own words
            raise BundleError(f"{name}={text!r} is not a mode: {exc}; write e.g. '0640' or 'u=rw,g=r'") from None
    raise BundleError(f"{name}={text!r} is not an octal mode; write e.g. '0640'")


def set_attributes(dest, files, owner=None, group=None, mode=None, directory_mode=None, check_mode=False,
                   symbolic=None):
    """Give ``dest``, its directories and ``files`` (relative to dest) their owner, group and modes, each through a
    descriptor opened without following a link (``fchown``, ``fchmod``): a link under dest fails naming it, and a
    file with more than one hard link is refused (its other name may be outside dest). Paths not there yet (check
    mode: not fetched) are passed over. Returns True when anything was (or, in check mode, would be) changed."""
    if owner is None and group is None and mode is None and directory_mode is None:
        return False

    def resolve(lookup, name):
        if name in (None, ""):
            return -1
        try:
            return lookup(name)
        except BundleError:
            # Check mode on a fresh node: the user or group is created by an earlier task of a real run.
            if check_mode:
                return None
            raise

    uid = resolve(_uid, owner)
    gid = resolve(_gid, group)
    tree = SafeTree(dest)
    dirs, paths = dest_rel_paths(dest, files)
    changed = False
    for rel, path_mode, is_dir in [(d, directory_mode, True) for d in dirs] + [(f, mode, False) for f in paths]:
        try:
            if is_dir:
                fd = tree.open_dir(rel)
            else:
                fd = tree.open_file(rel, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        except FileNotFoundError:
            continue
        try:
            st = os.fstat(fd)
            if not is_dir and stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                raise BundleError(f"{tree.path(rel)} has {st.st_nlink} hard links: its owner and mode are left "
                                  "alone, as another of its names may lie outside the directory. Remove the other "
                                  "names (find / -samefile PATH), or delete the file and re-run to fetch it again")
            want_uid = st.st_uid if uid == -1 else uid
            want_gid = st.st_gid if gid == -1 else gid
            if None in (want_uid, want_gid) or (want_uid, want_gid) != (st.st_uid, st.st_gid):
                changed = True
                if not check_mode:
                    os.fchown(fd, uid, gid)
                    st = os.fstat(fd)  # chown may clear setuid bits
            if path_mode is not None:
                want = wanted_mode(path_mode, st.st_mode, "directory_mode" if is_dir else "mode", symbolic)
                if want != stat.S_IMODE(st.st_mode):
                    changed = True
                    if not check_mode:
                        os.fchmod(fd, want)
        finally:
            os.close(fd)
    return changed


def apply_file_attributes(module, dest, files, changed, owner=None, group=None, mode=None, directory_mode=None):
    """:func:`set_attributes` for an ``AnsibleModule`` ``module`` (its check mode and symbolic modes). Returns
    ``changed``, or True when anything was changed."""
    symbolic = getattr(module, "_symbolic_mode_to_octal", None)
    return set_attributes(dest, files, owner=owner, group=group, mode=mode, directory_mode=directory_mode,
                          check_mode=module.check_mode, symbolic=symbolic) or changed


def fetch_diff(result):
    """The ``diff`` of a fetch result: the files missing or different before, the manifest's files after."""
    return {"before": {"missing_or_different": sorted(result["fetched"])},
            "after": {"files": sorted(result["files"])}}
