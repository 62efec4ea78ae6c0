#!/usr/bin/env python3
# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""vLLM's KV cache failure messages, release by release, made by running each release's own code.

For every vLLM release the compatibility matrix names (``tools/generate/vllm_release_facts.py``'s
``matrix_versions``) and the sandbox's 0.32.0, it takes from the release's PyPI sdist (a wheel where PyPI has no sdist):

* ``check_enough_kv_cache_memory`` (and from 0.32 its helper ``_check_enough_kv_cache_memory``) of
  ``vllm/v1/core/kv_cache_utils.py`` (V1 engine), called with max_model_len 32768, 6 GiB needed and 2.5 GiB
  available (``v1_needed``), then with no memory left (``v1_no_memory``);
* ``raise_if_cache_size_invalid`` of ``vllm/worker/worker.py`` (V0 engine, up to 0.10.2), with 1024 blocks of 16
  tokens (``v0_max_seq_len``);

runs them (:mod:`ast` cuts them out; stubs stand for the rest of vLLM: an estimate of 13648 tokens) and writes
the ``ValueError`` texts with the line that raises each to ``plugins/module_utils/_generated/vllm_kv_messages.py``
(``MESSAGES``). The diagnose tests match them against ``plugins/module_utils/_diagnose.py``.

Usage (network to PyPI)::

    python tools/generate/vllm_kv_messages.py            # rewrite the module
    python tools/generate/vllm_kv_messages.py --check    # exit 1 when the committed module differs

Rerun when the matrix names a new vLLM release.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import io
import json
import os
import re
import sys
import tarfile
import types
import urllib.request
import zipfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
OUTPUT = os.path.join(ROOT, "plugins", "module_utils", "_generated", "vllm_kv_messages.py")
SIMPLE_URL = "https://pypi.org/simple/vllm/"
EXTRA = ("0.32.0",)
V1 = "vllm/v1/core/kv_cache_utils.py"
V0 = "vllm/worker/worker.py"
GIB = 1 << 30
NEEDED, AVAILABLE, MAX_MODEL_LEN, ESTIMATE = 6 * GIB, int(2.5 * GIB), 32768, 13648


def versions():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        import vllm_release_facts  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    names = set(vllm_release_facts.matrix_versions()) | set(EXTRA)
    return sorted(names, key=vllm_release_facts.version_key)


def sources(version, files):
    """{path: text} of V0 and V1 for a release, from its sdist (or first wheel) on PyPI, sha256 checked."""
    item = files.get(f"vllm-{version}.tar.gz")
    if item is None:
        wheels = sorted(n for n in files if n.startswith(f"vllm-{version}-") and n.endswith(".whl"))
        if not wheels:
            raise SystemExit(f"vllm {version}: not on PyPI")
        item = files[wheels[0]]
    with urllib.request.urlopen(item["url"].split("#")[0], timeout=900) as answer:  # noqa: S310 - PyPI URL
        data = answer.read()
    if hashlib.sha256(data).hexdigest() != item["hashes"]["sha256"]:
        raise SystemExit(f"vllm {version}: sha256 differs from PyPI's")
    out = {}
    if item["filename"].endswith(".whl"):
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for name in (V0, V1):
                if name in archive.namelist():
                    out[name] = archive.read(name).decode()
    else:
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            for member in archive.getmembers():
                rel = member.name.split("/", 1)[-1]
                if rel in (V0, V1) and member.isfile():
                    out[rel] = archive.extractfile(member).read().decode()
    return out


def _functions(text, names):
    tree = ast.parse(text)
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in names}


def _raise_lines(nodes):
    return sorted(n.lineno for node in nodes for n in ast.walk(node) if isinstance(n, ast.Raise))


class _Spec:
    def max_memory_usage_bytes(self, _config):
        return NEEDED

    def bytes_for_tokens(self, _tokens):
        return NEEDED


def messages(version, texts):
    """The release's messages: [{vllm, kind, source, text}]."""
    out = []
    url = "https://github.com/vllm-project/vllm/blob/v{version}/{path}#L{line}"
    if V1 in texts:
        funcs = _functions(texts[V1], {"check_enough_kv_cache_memory", "_check_enough_kv_cache_memory"})
        scope = {"GiB_bytes": GIB, "format_gib": lambda b: f"{round(b / GIB, 2)}",
                 "max_memory_usage_bytes": lambda cfg, specs: sum(s.max_memory_usage_bytes(cfg) for s in specs),
                 "estimate_max_model_len": lambda *_a: ESTIMATE, "get_kv_cache_groups": lambda *_a: [],
                 "_pool_bytes_per_block": lambda *_a: 0}
        for node in funcs.values():
            node.decorator_list = []
            code = ast.unparse(ast.Module(body=[node], type_ignores=[]))
            exec(compile("from __future__ import annotations\n" + code, V1, "exec"), scope)  # noqa: S102
        lines = _raise_lines(funcs.values())
        config = types.SimpleNamespace(model_config=types.SimpleNamespace(max_model_len=MAX_MODEL_LEN))
        for kind, available, line in (("v1_needed", AVAILABLE, lines[-1]), ("v1_no_memory", 0, lines[0])):
            try:
                scope["check_enough_kv_cache_memory"](config, {"layer": _Spec()}, available)
            except ValueError as exc:
                out.append({"vllm": version, "kind": kind, "source": url.format(version=version, path=V1, line=line),
                            "text": str(exc)})
    if V0 in texts:
        funcs = _functions(texts[V0], {"raise_if_cache_size_invalid"})
        if funcs:
            node = funcs["raise_if_cache_size_invalid"]
            scope = {}
            exec(compile(ast.unparse(ast.Module(body=[node], type_ignores=[])), V0, "exec"), scope)  # noqa: S102
            given = {"num_gpu_blocks": 1024, "block_size": 16, "is_attention_free": False,
                     "max_model_len": MAX_MODEL_LEN, "pipeline_parallel_size": 1}
            try:
                scope["raise_if_cache_size_invalid"](**{a.arg: given[a.arg] for a in node.args.args})
            except ValueError as exc:
                out.append({"vllm": version, "kind": "v0_max_seq_len",
                            "source": url.format(version=version, path=V0, line=_raise_lines([node])[-1]),
                            "text": str(exc)})
    return out


# ----------------------------------------------------------------------------------------------------- output
HEADER = """\
# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
# Generated by: python tools/generate/vllm_kv_messages.py -- do not edit by hand.
# Sources: https://pypi.org/simple/vllm/ (each release's sdist, sha256 checked, or its first wheel where PyPI has no
# sdist): check_enough_kv_cache_memory of vllm/v1/core/kv_cache_utils.py and raise_if_cache_size_invalid of
# vllm/worker/worker.py, run with max_model_len 32768, 6 GiB needed and 2.5 GiB (then 0) available, 1024 blocks of 16.
# MESSAGES: one entry per release and kind (v1_needed, v1_no_memory, v0_max_seq_len): the ValueError text and the
# line that raises it. Test data of the diagnose rules (tests/unit/plugins/module_utils/test_diagnose_releases.py).

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


def render_module(messages):
    """The generated module's text: the header, then ``MESSAGES`` (plain literals, ruff-clean)."""
    return HEADER + "MESSAGES = " + literal(messages) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed fixture differs")
    args = parser.parse_args(argv)
    request = urllib.request.Request(SIMPLE_URL, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 - fixed https URL
        files = {item["filename"]: item for item in json.load(answer)["files"]}
    result = []
    for version in versions():
        result.extend(messages(version, sources(version, files)))
        print(f"vllm {version}: done", file=sys.stderr)
    text = render_module(result)
    if args.check:
        with open(OUTPUT) as handle:
            same = handle.read() == text
        print("up to date" if same else f"{OUTPUT} differs: rerun without --check")
        return 0 if same else 1
    with open(OUTPUT, "w") as handle:
        handle.write(text)
    print(f"{len(result)} messages -> {os.path.relpath(OUTPUT, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
