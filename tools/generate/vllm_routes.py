#!/usr/bin/env python3
# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Every HTTP route of vLLM's OpenAI-compatible API server, per release, read from each release's sdist on PyPI.

For every vLLM release the compatibility matrix allows, plus the sandbox's vLLM (the releases of
``tools/generate/vllm_release_facts.py``: ``matrix_versions()`` and ``EXTRA_VERSIONS``), it lists the routes that the
release's ``vllm/entrypoints/openai/api_server.py`` app can serve:

* the modules of ``vllm/entrypoints`` that the API server imports, directly or through other entrypoint modules
  (module-level and function-level imports alike: vLLM 0.2x registers its routers from functions);
* in each of them, read with :mod:`ast` (no vLLM, FastAPI or torch import): route decorators
  (``@router.post("/x")``, ``@app.get``, ``api_route``, ``route``, ``websocket``), ``add_api_route`` /
  ``add_route`` / ``add_websocket_route`` calls, ``Mount("/metrics", ...)`` / ``app.mount("/static", ...)``;
* FastAPI's own routes of every app (``/openapi.json``, ``/docs``, ``/docs/oauth2-redirect``, ``/redoc``), which
  vLLM leaves on unless ``--disable-fastapi-docs`` is given.

The table is a superset of what one server registers: routes that vLLM adds only for some tasks, flags or
``VLLM_SERVER_DEV_MODE`` are all listed. It does not hold routes that other packages add at start-up (vLLM 0.32's
``sagemaker_standards_bootstrap``, endpoint plugins): the sandbox's live check reads the running release's own
``app.routes`` for those.

Usage (network to PyPI only for ``fetch``)::

    python tools/generate/vllm_routes.py fetch      # download the sdists, keep the API server's entrypoint modules in
                                           # tests/unit/fixtures/vllm-routes/vllm-routes-sources.tar.xz
    python tools/generate/vllm_routes.py generate   # write plugins/module_utils/_generated/vllm_routes.py
    python tools/generate/vllm_routes.py check      # exit 1 when the committed table differs from the sources
    python tools/generate/vllm_routes.py show       # the routes of one release: --release 0.32.0
    python tools/generate/vllm_routes.py committed  # the committed table as JSON (Molecule's verify reads it)

Rerun ``fetch`` then ``generate`` whenever ``tools/generate/vllm_release_facts.py fetch`` is rerun (a vLLM release joins
the matrix); commit the archive and the table together.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import io
import json
import os
import posixpath
import re
import sys
import tarfile
import urllib.request
import zipfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "unit", "fixtures", "vllm-routes")
ARCHIVE = os.path.join(FIXTURES, "vllm-routes-sources.tar.xz")
OUTPUT = os.path.join(ROOT, "plugins", "module_utils", "_generated", "vllm_routes.py")
ENTRY = "vllm/entrypoints/openai/api_server.py"
PACKAGE = "vllm/entrypoints/"
# FastAPI(...) adds these unless the app is built with openapi_url/docs_url/redoc_url None (fastapi/applications.py).
FASTAPI_ROUTES = (("/openapi.json", "GET HEAD"), ("/docs", "GET HEAD"), ("/docs/oauth2-redirect", "GET HEAD"),
                  ("/redoc", "GET HEAD"))
# Paths given by an expression the parser does not evaluate, and what they are at run time.
KNOWN_EXPRESSIONS = {
    # FastAPI's swagger_ui_oauth2_redirect_url default (the offline-docs route of vLLM 0.2x re-registers it)
    "app.swagger_ui_oauth2_redirect_url": "/docs/oauth2-redirect",
    # vLLM 0.32 scale_out/factories.py: the paths of the render, derender and token routers again (already
    # listed from those routers), answering 403 while --enable-scale-out is off
    "route.path": None,
}
_VERBS = {"get", "post", "put", "delete", "patch", "options", "head", "trace"}


def _facts_tool():
    spec = importlib.util.spec_from_file_location("vllm_release_facts", os.path.join(os.path.dirname(__file__),
                                                                                     "vllm_release_facts.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def releases():
    """The releases of tools/generate/vllm_release_facts.py: the matrix's vLLM versions and the sandbox's (on PyPI)."""
    facts = _facts_tool()
    return sorted(set(facts.matrix_versions()) | set(facts.EXTRA_VERSIONS), key=facts.version_key)


def version_key(text):
    return tuple(int(p) for p in re.findall(r"\d+", text.split("+", maxsplit=1)[0]))


# ------------------------------------------------------------------------------------------------------ fetch
def fetch(versions, archive=ARCHIVE):
    """Download each release's sdist (sha256 checked against PyPI) and keep the API server's entrypoint modules."""
    facts = _facts_tool()
    request = urllib.request.Request(facts.SIMPLE_URL, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 - fixed https URL
        index = json.load(answer)
    files = {item["filename"]: item for item in index["files"]}
    members = {}
    for version in versions:
        item = files.get(f"vllm-{version}.tar.gz")
        if item is not None:
            with urllib.request.urlopen(item["url"].split("#")[0], timeout=600) as answer:  # noqa: S310
                data = answer.read()
            digest = hashlib.sha256(data).hexdigest()
            if digest != item["hashes"]["sha256"]:
                raise SystemExit(f"vllm {version}: sha256 {digest} differs from PyPI's {item['hashes']['sha256']}")
            sources = _sdist_sources(data)
            note = (f"vllm-{version}.tar.gz from PyPI (https://pypi.org/project/vllm/{version}/), sha256 {digest}")
        else:
            wheels = sorted(n for n in files if n.startswith(f"vllm-{version}-") and n.endswith(".whl"))
            if not wheels:
                raise SystemExit(f"vllm {version}: not on PyPI (no sdist, no wheel)")
            item = files[wheels[0]]
            sources = _wheel_sources(item)
            note = (f"{item['filename']} from PyPI (https://pypi.org/project/vllm/{version}/; the release has no "
                    f"sdist), sha256 {item['hashes']['sha256']}")
        kept = reachable(sources)
        for path in kept:
            members[f"{version}/{path}"] = sources[path].encode("utf-8")
        members[f"{version}/SOURCE"] = (note + f"; the {len(kept)} modules of vllm/entrypoints the API server "
                                        "imports are kept.\n").encode()
        print(f"vllm {version}: {len(kept)} modules")
    # releases fetched earlier and not asked for again stay
    if os.path.exists(archive):
        for name, data in _read_archive(archive).items():
            if name.split("/", 1)[0] not in versions:
                members[name] = data
    os.makedirs(os.path.dirname(archive), exist_ok=True)
    with tarfile.open(archive, mode="w:xz", preset=9) as out:
        for name in sorted(members, key=lambda n: (version_key(n.split("/", 1)[0]), n)):
            info = tarfile.TarInfo(name)
            info.size = len(members[name])
            info.mtime = 0
            info.mode = 0o644
            out.addfile(info, io.BytesIO(members[name]))


def _sdist_sources(data):
    sources = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as sdist:
        for member in sdist.getmembers():
            inner = member.name.split("/", 1)[1] if "/" in member.name else ""
            if member.isfile() and inner.startswith(PACKAGE) and inner.endswith(".py"):
                sources[inner] = sdist.extractfile(member).read().decode("utf-8")
    return sources


def _wheel_sources(item):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        from vllm_ascend_matrix import _HttpRange  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    raw = _HttpRange(item["url"].split("#")[0], item["size"])
    with zipfile.ZipFile(io.BufferedReader(raw, buffer_size=1 << 16)) as wheel:
        return {name: wheel.read(name).decode("utf-8") for name in wheel.namelist()
                if name.startswith(PACKAGE) and name.endswith(".py")}


def _read_archive(archive):
    with tarfile.open(archive, mode="r:xz") as handle:
        return {m.name: handle.extractfile(m).read() for m in handle.getmembers() if m.isfile()}


def read_releases(archive=ARCHIVE):
    """{version: {path: text}} of the kept sources (with their SOURCE note)."""
    found = {}
    for name, data in _read_archive(archive).items():
        version, path = name.split("/", 1)
        found.setdefault(version, {})[path] = data.decode("utf-8")
    return dict(sorted(found.items(), key=lambda item: version_key(item[0])))


# ------------------------------------------------------------------------------------------------ import graph
def _module_file(dotted, sources):
    base = dotted.replace(".", "/")
    for candidate in (base + ".py", base + "/__init__.py"):
        if candidate in sources:
            return candidate
    return None


def _imports(path, tree, sources):
    """Entrypoint modules a module imports (anywhere in it), with the packages whose __init__ runs first."""
    package = posixpath.dirname(path).replace("/", ".")
    if not path.endswith("__init__.py"):
        package = package  # a module's package is its directory either way
    targets = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names = [module] + [f"{module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                found = _module_file(".".join(parts[:i]), sources)
                if found:
                    targets.add(found)
    return targets


def reachable(sources, entry=ENTRY):
    """The entrypoint modules the API server module imports, transitively, sorted."""
    seen, todo = set(), [entry]
    while todo:
        path = todo.pop()
        if path in seen or path not in sources:
            continue
        seen.add(path)
        todo.extend(_imports(path, ast.parse(sources[path], filename=path), sources) - seen)
    return sorted(seen)


# ------------------------------------------------------------------------------------------------------ routes
def _path_of(node, constants):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    text = ast.unparse(node)
    if text in KNOWN_EXPRESSIONS:
        return KNOWN_EXPRESSIONS[text]
    raise ValueError(f"route path {text!r} is not a literal: add it to KNOWN_EXPRESSIONS with what it is")


def _methods(call, default):
    for keyword in call.keywords:
        if keyword.arg == "methods" and isinstance(keyword.value, (ast.List, ast.Tuple, ast.Set)):
            return sorted(e.value.upper() for e in keyword.value.elts if isinstance(e, ast.Constant))
    return default


def _arg(call, index, name):
    if len(call.args) > index:
        return call.args[index]
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    return None


def module_routes(path, text):
    """[(path, methods, kind, 'file:line')] registered in one module."""
    tree = ast.parse(text, filename=path)
    constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 for t in n.targets if isinstance(t, ast.Name)
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)}
    found = []

    def add(route_path, methods, kind, node):
        if route_path is not None:
            found.append((route_path, " ".join(methods), kind, f"{path}:{node.lineno}"))

    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute)):
                    continue
                attr = deco.func.attr
                target = _arg(deco, 0, "path")
                if attr in _VERBS and target is not None:
                    add(_path_of(target, constants), [attr.upper()], "route", deco)
                elif attr in ("api_route", "route") and target is not None:
                    add(_path_of(target, constants), _methods(deco, ["GET"]), "route", deco)
                elif attr in ("websocket", "websocket_route") and target is not None:
                    add(_path_of(target, constants), ["WEBSOCKET"], "websocket", deco)
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            target = _arg(node, 0, "path")
            if target is None:
                continue
            if name in ("add_api_route", "add_route"):
                add(_path_of(target, constants), _methods(node, ["GET"]), "route", node)
            elif name in ("add_websocket_route", "WebSocketRoute"):
                add(_path_of(target, constants), ["WEBSOCKET"], "websocket", node)
            elif name == "Route" and isinstance(func, ast.Name):
                add(_path_of(target, constants), _methods(node, ["GET"]), "route", node)
            elif name in ("mount", "Mount"):
                add(_path_of(target, constants), ["ANY"], "mount", node)
    return found


def release_routes(sources):
    """The routes of one release: {path: {'methods': ..., 'kind': ..., 'source': [file:line, ...]}}, sorted."""
    table = {}
    for path in reachable(sources):
        for route_path, methods, kind, where in module_routes(path, sources[path]):
            entry = table.setdefault(route_path, {"methods": set(), "kind": kind, "source": []})
            entry["methods"].update(methods.split())
            entry["source"].append(where)
            if kind == "mount":
                entry["kind"] = "mount"
    for route_path, methods in FASTAPI_ROUTES:
        entry = table.setdefault(route_path, {"methods": set(), "kind": "route", "source": []})
        entry["methods"].update(methods.split())
        entry["source"].append("fastapi.FastAPI defaults")
    return {p: {"methods": " ".join(sorted(e["methods"])), "kind": e["kind"], "source": sorted(set(e["source"]))}
            for p, e in sorted(table.items())}


def all_routes(archive=ARCHIVE):
    return {version: {"source": files["SOURCE"].strip(), "routes": release_routes(files)}
            for version, files in read_releases(archive).items()}


# ----------------------------------------------------------------------------------------------------- output
HEADER = """\
# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# Generated by: python tools/generate/vllm_routes.py generate -- do not edit by hand.
# Sources: tests/unit/fixtures/vllm-routes/vllm-routes-sources.tar.xz (written by the tool's fetch: the modules of
# vllm/entrypoints that each vLLM release's API server imports, from its sdist on PyPI).
# RELEASES[version]: ``source`` (the sdist) and ``routes``: every route of vLLM's OpenAI-compatible API server
# (vllm/entrypoints/openai/api_server.py and the entrypoint modules it imports): path -> methods, kind (route,
# websocket, mount: the path and everything below it), and where it is registered. A superset of one server's
# routes (task-, flag- and VLLM_SERVER_DEV_MODE-only routes included); routes other packages add at start-up are
# not here (the sandbox's live check reads those). Test data of the api_front role's key guard.

from __future__ import annotations

"""


WIDTH = 120


def _string(text, indent, room):
    """``repr(text)``, or a parenthesised run of adjacent string pieces when it is wider than ``room``."""
    if len(repr(text)) <= room:
        return repr(text)
    pad = " " * (indent + 4)
    avail = WIDTH - len(pad)
    pieces, piece = [], ""
    for token in re.findall(r"\S+\s*|\s+", text):
        while len(repr(token)) > avail:  # a token wider than a line: cut it
            cut = avail - 2
            while len(repr(token[:cut])) > avail:
                cut -= 1
            if piece:
                pieces.append(piece)
                piece = ""
            pieces.append(token[:cut])
            token = token[cut:]
        if piece and len(repr(piece + token)) > avail:
            pieces.append(piece)
            piece = ""
        piece += token
    if piece:
        pieces.append(piece)
    return "(\n" + "\n".join(pad + repr(p) for p in pieces) + "\n" + " " * indent + ")"


def _inline(value):
    """``value`` as a one-line literal."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{key!r}: {_inline(item)}" for key, item in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_inline(item) for item in value) + "]"
    return repr(value)


def literal(value, indent=0, room=WIDTH):
    """``value`` (dicts, lists, strings, numbers, None) as a Python literal that stays within WIDTH columns."""
    pad = " " * (indent + 4)
    if isinstance(value, str):
        return _string(value, indent, room)
    inline = _inline(value)
    if len(inline) <= room:
        return inline
    if isinstance(value, dict):
        if not value:
            return "{}"
        lines = []
        for key, item in value.items():
            head = f"{pad}{key!r}: "
            lines.append(head + literal(item, indent + 4, WIDTH - len(head) - 1) + ",")
        return "{\n" + "\n".join(lines) + "\n" + " " * indent + "}"
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        return "[\n" + "\n".join(pad + literal(item, indent + 4, WIDTH - len(pad) - 1) + ","
                                 for item in value) + "\n" + " " * indent + "]"
    return repr(value)


def render(table):
    """The generated module's text: the header, then ``RELEASES`` (plain literals, ruff-clean)."""
    return HEADER + "RELEASES = " + literal(table) + "\n"


def load(path=OUTPUT):
    """The committed table: {version: {'source': ..., 'routes': {path: {...}}}} (read without importing it)."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    return next(ast.literal_eval(node.value) for node in tree.body
                if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["RELEASES"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("fetch", "generate", "check", "show", "committed"))
    parser.add_argument("--version", action="append", default=[], help="fetch this vLLM release too (repeatable)")
    parser.add_argument("--release", help="show: only this release")
    parser.add_argument("--archive", default=ARCHIVE)
    parser.add_argument("--output", default=OUTPUT)
    args = parser.parse_args(argv)
    if args.action == "fetch":
        fetch(sorted(set(releases()) | set(args.version), key=version_key), args.archive)
        return 0
    if args.action == "committed":
        print(json.dumps(load(args.output)))
        return 0
    table = all_routes(args.archive)
    if args.action == "show":
        shown = {args.release: table[args.release]} if args.release else table
        print(json.dumps(shown, indent=1))
        return 0
    text = render(table)
    if args.action == "check":
        with open(args.output, encoding="utf-8") as handle:
            same = handle.read() == text
        print("up to date" if same else f"{args.output} differs from the sources: run generate")
        return 0 if same else 1
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(f"wrote {args.output}: {len(table)} releases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
