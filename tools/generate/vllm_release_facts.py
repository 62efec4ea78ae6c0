#!/usr/bin/env python3
# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Per-release facts of vLLM's ``vllm serve`` options, read from each release's own sources (PyPI sdists).

For every vLLM release the compatibility matrix allows (the ``vllm`` releases of each row of
``plugins/module_utils/_generated/compat_matrix_rows.py``) plus the sandbox's vLLM and newer releases
(``--extra``, default 0.32.0, 0.33.0, 0.34.0) it writes ``plugins/module_utils/_generated/vllm_release_options.py``:

* the release's option names with their kind, read with :mod:`ast` (no vLLM, torch or network import) from
  ``EngineArgs.add_cli_args`` (``vllm/engine/arg_utils.py``) and the OpenAI server's ``make_arg_parser``
  (``vllm/entrypoints/openai/cli_args.py``, ``vllm/entrypoints/launchers/cli_args.py`` in 0.29-0.32,
  ``vllm/entrypoints/common/cli_args.py`` from 0.33) and the ``vllm serve`` sub-parser's own options
  (``vllm/entrypoints/cli/serve.py``: ``--headless``, ``--data-parallel-start-rank``, ``--api-server-count`` in
  0.9.x, ``--grpc`` in 0.18-0.19); options built
  from config dataclasses (``**get_kwargs(ModelConfig)["x"]``) take their kind from the field's annotation the
  way that release's ``get_kwargs`` does (a bool field gets ``argparse.BooleanOptionalAction``: ``--no-X``);
* the release's ``--config FILE`` semantics, found by RUNNING that release's own ``FlexibleArgumentParser``
  (class source taken from its sdist and executed with argparse/yaml/json only) on a probe YAML: what a
  ``false`` becomes (dropped, ``--no-X``), what a mapping becomes (``str(dict)`` repr or JSON), what a list
  becomes.

Kinds: ``f`` store_true flag, ``b`` BooleanOptionalAction (``--X``/``--no-X``), ``s`` StoreBoolean
(``--X true|false``, vLLM 0.7-0.9), ``j`` JSON mapping, ``l`` list (``nargs``), ``v`` one value.

Usage (network to PyPI only for ``fetch``)::

    python tools/generate/vllm_release_facts.py fetch      # download the sdists, keep the relevant sources in
                                                           # tests/unit/fixtures/vllm-releases/vllm-X.tar.xz
    python tools/generate/vllm_release_facts.py generate   # write _generated/vllm_release_options.py
    python tools/generate/vllm_release_facts.py check      # exit 1 when the committed table differs from the inputs
    python tools/generate/vllm_release_facts.py fetch --version 0.24.0   # a release the matrix does not name yet

Rerun ``fetch`` then ``generate`` when a vLLM release appears in the matrix (or when the sandbox's vLLM changes:
``--extra``); commit the new fixture archive and the regenerated module together.
"""

from __future__ import annotations

import argparse
import ast
import collections
import contextlib
import hashlib
import io
import json
import logging
import os
import re
import sys
import tarfile
import tempfile
import typing
import urllib.request

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = os.path.join(ROOT, "tests", "unit", "fixtures", "vllm-releases")
OUTPUT = os.path.join(ROOT, "plugins", "module_utils", "_generated", "vllm_release_options.py")
MATRIX_ROWS = os.path.join(ROOT, "plugins", "module_utils", "_generated", "compat_matrix_rows.py")
# Besides the matrix's: the sandbox's vLLM (0.32.0) and the newer releases whose parsers the tables follow (0.33.0
# moved the API server's options to vllm/entrypoints/common/cli_args.py).
EXTRA_VERSIONS = ("0.32.0", "0.33.0", "0.34.0")
# vLLM releases a matrix row names that PyPI never published (no sdist, no wheel): vllm-ascend v0.11.0rc0 was
# built on vLLM v0.11.0rc3 (its Dockerfile's VLLM_TAG and doc row), a git tag only. No facts for them.
NOT_ON_PYPI = ("0.11.0rc3",)
SIMPLE_URL = "https://pypi.org/simple/vllm/"

# Files of an sdist the facts are read from (paths inside the sdist, below its top directory).
# The serve options live in EngineArgs.add_cli_args plus the API server's make_arg_parser: openai/cli_args.py,
# launchers/cli_args.py in 0.3x, common/cli_args.py from 0.33. ``vllm serve``'s own sub-parser
# (entrypoints/cli/serve.py) added --headless, --data-parallel-start-rank and --api-server-count itself in 0.9.x.
_KEEP = re.compile(r"^vllm/(engine/arg_utils\.py|entrypoints/(openai|launchers|common)/cli_args\.py"
                   r"|entrypoints/cli/serve\.py"
                   r"|config\.py|config/[^/]+\.py|utils\.py|utils/__init__\.py|utils/argparse_utils\.py)$")


# --------------------------------------------------------------------------------------------------- versions
def matrix_versions():
    """vLLM versions named by the compatibility matrix (vllm_min/vllm_max of every row), sorted."""
    # The generated rows are plain literals: read them without importing the collection (not on sys.path here).
    with open(MATRIX_ROWS, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    rows = next(ast.literal_eval(node.value) for node in tree.body
                if isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["ROWS"])
    names = set()
    for row in rows:
        names.update(row["vllm"])
    return sorted(names - set(NOT_ON_PYPI), key=version_key)


def version_key(text):
    parts = re.findall(r"\d+", text.split("+", maxsplit=1)[0])
    return tuple(int(p) for p in parts)


# ------------------------------------------------------------------------------------------------------ fetch
def fetch(versions, dest=FIXTURES):
    """Download each release's sdist from PyPI (sha256 checked) and keep only the sources the facts need."""
    request = urllib.request.Request(SIMPLE_URL, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 - fixed https URL
        index = json.load(answer)
    files = {item["filename"]: item for item in index["files"]}
    os.makedirs(dest, exist_ok=True)
    missing = []
    for version in versions:
        item = files.get(f"vllm-{version}.tar.gz")
        if item is None:
            wheels = sorted(name for name in files if name.startswith(f"vllm-{version}-") and name.endswith(".whl"))
            if not wheels:
                print(f"vllm {version}: not on PyPI (no sdist, no wheel): no facts for it", file=sys.stderr)
                missing.append(version)
                continue
            trim_wheel(files[wheels[0]], os.path.join(dest, f"vllm-{version}.tar.xz"), version)
            print(f"vllm {version}: no sdist on PyPI, kept the sources of {wheels[0]}")
            continue
        with urllib.request.urlopen(item["url"].split("#")[0], timeout=600) as answer:  # noqa: S310
            data = answer.read()
        digest = hashlib.sha256(data).hexdigest()
        if digest != item["hashes"]["sha256"]:
            raise SystemExit(f"vllm {version}: sha256 {digest} differs from PyPI's {item['hashes']['sha256']}")
        trim_sdist(io.BytesIO(data), os.path.join(dest, f"vllm-{version}.tar.xz"), version, digest)
        print(f"vllm {version}: kept {os.path.join(dest, f'vllm-{version}.tar.xz')}")
    return missing


def trim_wheel(item, out_path, version):
    """Like :func:`trim_sdist` for a release PyPI has as wheels only (vLLM 0.15.0): the same .py files, read
    from the wheel with HTTP range requests (the wheel's sha256 is PyPI's; the members are not re-hashed)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        from vllm_ascend_matrix import _HttpRange  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    import zipfile  # pylint: disable=import-outside-toplevel

    members = {}
    raw = _HttpRange(item["url"].split("#")[0], item["size"])
    with zipfile.ZipFile(io.BufferedReader(raw, buffer_size=1 << 16)) as wheel:
        for name in wheel.namelist():
            if _KEEP.match(name):
                members[name] = wheel.read(name)
    members["SOURCE"] = (f"{item['filename']} from PyPI (https://pypi.org/project/vllm/{version}/; the release "
                         f"has no sdist), sha256 {item['hashes']['sha256']}; only the files "
                         "tools/generate/vllm_release_facts.py reads are kept.\n").encode()
    with tarfile.open(out_path, mode="w:xz", preset=9) as out:
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size = len(members[name])
            info.mtime = 0
            info.mode = 0o644
            out.addfile(info, io.BytesIO(members[name]))


def trim_sdist(fileobj, out_path, version, digest):
    """Copy the relevant members of an sdist into a small deterministic .tar.xz (with a SOURCE note)."""
    members = {}
    with tarfile.open(fileobj=fileobj, mode="r:gz") as sdist:
        for member in sdist.getmembers():
            inner = member.name.split("/", 1)[1] if "/" in member.name else ""
            if member.isfile() and _KEEP.match(inner):
                members[inner] = sdist.extractfile(member).read()
    note = (f"vllm-{version}.tar.gz from PyPI (https://pypi.org/project/vllm/{version}/), sha256 {digest}; "
            "only the files tools/generate/vllm_release_facts.py reads are kept.\n").encode()
    members["SOURCE"] = note
    with tarfile.open(out_path, mode="w:xz", preset=9) as out:
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size = len(members[name])
            info.mtime = 0
            info.mode = 0o644
            out.addfile(info, io.BytesIO(members[name]))


def read_release(path):
    """{path: text} of a trimmed release archive."""
    with tarfile.open(path, mode="r:xz") as archive:
        return {m.name: archive.extractfile(m).read().decode("utf-8") for m in archive.getmembers() if m.isfile()}


def fixture_versions(dest=FIXTURES):
    names = [n[len("vllm-"):-len(".tar.xz")] for n in os.listdir(dest) if n.startswith("vllm-") and
             n.endswith(".tar.xz")]
    return sorted(names, key=version_key)


# ------------------------------------------------------------------------------------------- option table (ast)
_SEQ = {"list", "List", "tuple", "Tuple", "set", "Set", "Sequence", "frozenset"}
_MAP = {"dict", "Dict", "Mapping"}


def _module_aliases(trees):
    """Module-level ``Name = <type expression>`` assignments (type aliases), by name."""
    aliases = {}
    for tree in trees:
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                aliases[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                aliases[node.target.id] = node.value
            elif sys.version_info >= (3, 12) and type(node).__name__ == "TypeAlias":
                aliases[node.name.id] = node.value
    return aliases


def _classes(trees):
    """Every class in the trees: name -> (base names, [(field, annotation node)])."""
    found = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                fields = []
                for stmt in node.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                        text = ast.unparse(stmt.annotation)
                        if "ClassVar" in text or "InitVar" in text or stmt.target.id.startswith("_"):
                            continue
                        fields.append((stmt.target.id, stmt.annotation))
                found.setdefault(node.name, (bases, fields))
    return found


def _fields(classes, name, seen=None):
    seen = seen or set()
    if name not in classes or name in seen:
        return []
    seen.add(name)
    bases, own = classes[name]
    merged = collections.OrderedDict()
    for base in bases:
        for field, ann in _fields(classes, base, seen):
            merged[field] = ann
    for field, ann in own:
        merged[field] = ann
    return list(merged.items())


def _type_names(node, aliases, depth=0):
    """The names a type annotation mentions (Literal contents become the single name 'Literal')."""
    names = set()
    if node is None or depth > 6:
        return names
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a forward reference
        try:
            return _type_names(ast.parse(node.value, mode="eval").body, aliases, depth + 1)
        except SyntaxError:
            return names
    if isinstance(node, ast.Constant) and node.value is None:
        return {"None"}
    if isinstance(node, ast.Subscript):
        outer = _type_names(node.value, aliases, depth)
        if "Literal" in outer:
            return {"Literal"}
        if "Annotated" in outer:
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            return _type_names(elts[0], aliases, depth + 1)
        names |= outer
        if outer & (_SEQ | _MAP):
            return names  # the element types do not change the kind
        names |= _type_names(node.slice, aliases, depth + 1)
        return names
    if isinstance(node, ast.Name):
        if node.id in aliases and depth < 6:
            inner = _type_names(aliases[node.id], aliases, depth + 1)
            return inner or {node.id}
        return {node.id}
    if isinstance(node, ast.Attribute):
        return {node.attr}
    for child in ast.iter_child_nodes(node):
        names |= _type_names(child, aliases, depth + 1)
    return names


def _kind_of_annotation(ann, aliases, dataclasses, bool_is_optional_action, bool_str_is_value):
    """The kind ``get_kwargs`` gives a dataclass field, from its annotation (see the module doc)."""
    names = _type_names(ann, aliases) - {"Optional", "Union"}
    plain = names - {"None", "NoneType"}
    if plain & dataclasses:
        return "j"
    if "bool" in plain:
        if bool_str_is_value and plain == {"bool", "str"}:
            return "v"
        return "b" if bool_is_optional_action else "v"
    if "Literal" in plain:
        return "v"
    if plain & _SEQ:
        return "l"
    if plain & {"int", "float"}:
        return "v"
    if plain & _MAP:
        return "j"
    return "v"


def _kind_of_call(call):
    """Kind from explicit add_argument keywords, or None when they do not say."""
    for kw in call.keywords:
        if kw.arg == "action":
            text = ast.unparse(kw.value)
            if "BooleanOptionalAction" in text:
                return "b"
            if "StoreBoolean" in text:
                return "s"
            if text in ("'store_true'", '"store_true"', "'store_false'", '"store_false"'):
                return "f"
            if "append" in text or "LoRAParserAction" in text or "PromptAdapterParserAction" in text:
                return "l"
    for kw in call.keywords:
        if kw.arg == "nargs":
            text = ast.unparse(kw.value)
            if text in ("'+'", "'*'", '"+"', '"*"'):
                return "l"
    for kw in call.keywords:
        if kw.arg == "type":
            text = ast.unparse(kw.value)
            if "json.loads" in text or "json" in text.lower() and "loads" in text:
                return "j"
    return None


def _parents(tree):
    parent = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parent[child] = node
    return parent


def extract_options(files):
    """{option (snake_case): kind} of a release's API server, from its sources ({path: text})."""
    config_paths = [p for p in files if p == "vllm/config.py" or p.startswith("vllm/config/")]
    arg_paths = [p for p in files if p.endswith(("arg_utils.py", "cli_args.py", "cli/serve.py"))]
    trees = {p: ast.parse(files[p]) for p in config_paths + arg_paths}
    aliases = _module_aliases(trees.values())
    classes = _classes(trees.values())
    dataclasses = {n for n in classes if re.search(r"Config$", n)} | {
        n for p in config_paths for n in [c.name for c in ast.walk(trees[p]) if isinstance(c, ast.ClassDef)]
        if n.endswith("Config")}
    arg_text = files.get("vllm/engine/arg_utils.py", "")
    bool_is_optional_action = "BooleanOptionalAction" in arg_text and "contains_type(type_hints, bool)" in arg_text
    bool_str_is_value = "type_hints == {bool, str, type(None)}" in arg_text
    options = collections.OrderedDict()
    for path in sorted(arg_paths):
        tree = trees[path]
        parent = _parents(tree)
        kwargs_of = {}  # variable name -> dataclass name, from  X = get_kwargs(Cls)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name) and node.value.func.id == "get_kwargs"
                    and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and node.value.args):
                arg = node.value.args[0]
                cls = arg.id if isinstance(arg, ast.Name) else ""
                if cls == "cls":
                    up = parent.get(node)
                    while up is not None and not isinstance(up, ast.ClassDef):
                        up = parent.get(up)
                    cls = up.name if up is not None else ""
                kwargs_of.setdefault(node.targets[0].id, []).append((node, cls))
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_argument"):
                continue
            names = _option_names(node, parent)
            if names is None:  # generated from a kwargs mapping in a loop
                names = _loop_names(node, parent, kwargs_of, classes)
            kind = _kind_of_call(node)
            star = [kw.value for kw in node.keywords if kw.arg is None]
            for name, field_ann in names:
                this = kind
                if this is None and field_ann is not None:
                    this = _kind_of_annotation(field_ann, aliases, dataclasses, bool_is_optional_action,
                                               bool_str_is_value)
                if this is None and star:
                    this = _kind_of_star(star[0], name, parent, node, kwargs_of, classes, aliases, dataclasses,
                                         bool_is_optional_action, bool_str_is_value)
                options.setdefault(name, this or "v")
        options.update(_customized_kinds(tree, options))
    for name in ("help", "config"):
        options.pop(name, None)
    return dict(sorted(options.items()))


def _customized_kinds(tree, options):
    """Kinds changed after get_kwargs: ``X["name"]["type"] = json.loads``, ``X["name"]["action"] = "append"``."""
    changed = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript)):
            continue
        outer = node.targets[0]
        if not (isinstance(outer.value, ast.Subscript) and isinstance(outer.slice, ast.Constant)
                and isinstance(outer.value.slice, ast.Constant)):
            continue
        name, key = outer.value.slice.value, outer.slice.value
        if name not in options:
            continue
        text = ast.unparse(node.value)
        if key == "type" and "json.loads" in text:
            changed[name] = "j"
        elif key == "action" and "append" in text:
            changed[name] = "l"
    return changed


def _option_names(call, parent):
    """[(snake name, None)] of the literal long option strings of an add_argument call, or None."""
    names = []
    for arg in call.args:
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
            if arg.value.startswith("--"):
                names.append((arg.value[2:].replace("-", "_"), None))
        elif isinstance(arg, ast.Name):  # for arg, type in [("--x", str), ...]: add_argument(arg, ...)
            up = parent.get(call)
            while up is not None:
                if isinstance(up, ast.For) and isinstance(up.iter, (ast.List, ast.Tuple)):
                    for elt in up.iter.elts:
                        first = elt.elts[0] if isinstance(elt, ast.Tuple) else elt
                        if isinstance(first, ast.Constant) and str(first.value).startswith("--"):
                            names.append((first.value[2:].replace("-", "_"), None))
                    break
                up = parent.get(up)
        else:
            return None
    if not names and any(isinstance(a, (ast.JoinedStr, ast.Starred)) for a in call.args):
        return None
    if not names and not call.args:
        return []
    # argparse's dest: the dest keyword, else the first long option (later long options are aliases)
    dest = [kw.value.value for kw in call.keywords if kw.arg == "dest" and isinstance(kw.value, ast.Constant)]
    if dest:
        return [(dest[0], None)]
    return names[:1] if len(names) > 1 and not isinstance(call.args[0], ast.Name) else names


def _loop_names(call, parent, kwargs_of, classes):
    """Options added by ``for key, value in X_kwargs.items(): group.add_argument(f"--{key...}", **value)``."""
    up = parent.get(call)
    while up is not None and not isinstance(up, ast.For):
        up = parent.get(up)
    if up is None:
        return []
    text = ast.unparse(up.iter)
    match = re.match(r"(\w+)\.items\(\)$", text)
    if not match or match.group(1) not in kwargs_of:
        return []
    cls = kwargs_of[match.group(1)][-1][1]
    names = collections.OrderedDict(_fields(classes, cls))
    # get_kwargs(cls) in a classmethod: the classes whose add_cli_args the module calls are that class or its
    # subclasses (FrontendArgs(BaseFrontendArgs) in vLLM 0.3x); their fields are options too
    root = call
    while parent.get(root) is not None:
        root = parent[root]
    for node in ast.walk(root):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_cli_args"
                and isinstance(node.func.value, ast.Name) and _is_subclass(classes, node.func.value.id, cls)):
            for field, ann in _fields(classes, node.func.value.id):
                names.setdefault(field, ann)
    return list(names.items())


def _is_subclass(classes, name, base, depth=0):
    if name == base:
        return True
    if name not in classes or depth > 8:
        return False
    return any(_is_subclass(classes, b, base, depth + 1) for b in classes[name][0])


def _kind_of_star(star, name, parent, call, kwargs_of, classes, aliases, dataclasses, boa, bsv):
    """Kind of ``**X_kwargs["field"]``: the field's annotation in the dataclass X_kwargs was made from."""
    if isinstance(star, ast.Dict):  # **{**X_kwargs["field"], "default": None}
        inner = [value for key, value in zip(star.keys, star.values) if key is None]
        if not inner:
            return None
        star = inner[0]
    if isinstance(star, ast.Subscript) and isinstance(star.value, ast.Name) and star.value.id in kwargs_of:
        field = star.slice.value if isinstance(star.slice, ast.Constant) else name
        cls = kwargs_of[star.value.id][-1][1]
        for fname, ann in _fields(classes, cls):
            if fname == field:
                return _kind_of_annotation(ann, aliases, dataclasses, boa, bsv)
    return None


# --------------------------------------------------------------------------- --config semantics (run the code)
_HELPERS = ("SortedHelpFormatter", "StoreBoolean", "_ArgumentGroup", "_json_tip", "_search_keyword",
            "human_readable_int")


def utils_path(files):
    for path in ("vllm/utils/argparse_utils.py", "vllm/utils/__init__.py", "vllm/utils.py"):
        if path in files and "class FlexibleArgumentParser" in files[path]:
            return path
    raise ValueError("no FlexibleArgumentParser in the release's sources")


def flexible_parser_class(files):
    """The release's own FlexibleArgumentParser class (and StoreBoolean when it has one), executed from its source.

    Only the class and the module-level helpers it names are executed, with argparse, json, re, sys, yaml and a
    logger: nothing of vLLM is imported. Returns ``(FlexibleArgumentParser, StoreBoolean or None)``.
    """
    import yaml  # pylint: disable=import-outside-toplevel

    source = files[utils_path(files)]
    tree = ast.parse(source)
    nodes = [tree.body[index] for index in sorted(_needed_definitions(tree))]
    namespace = {
        "__name__": "vllm_release_utils", "argparse": argparse, "json": json, "re": re, "sys": sys, "yaml": yaml,
        "os": os, "logger": logging.getLogger("vllm_release_facts"), "defaultdict": collections.defaultdict,
        "ArgumentParser": argparse.ArgumentParser, "ArgumentTypeError": argparse.ArgumentTypeError,
        "Action": argparse.Action, "Namespace": argparse.Namespace, "ArgumentDefaultsHelpFormatter":
        argparse.ArgumentDefaultsHelpFormatter, "RawDescriptionHelpFormatter": argparse.RawDescriptionHelpFormatter,
        "HelpFormatter": argparse.HelpFormatter, "deprecated": _deprecated, "textwrap": __import__("textwrap"),
        "BooleanOptionalAction": argparse.BooleanOptionalAction,
    }
    for name in ("Any", "Dict", "List", "Optional", "Union", "NoReturn", "Sequence", "Callable", "Tuple"):
        namespace[name] = getattr(typing, name)
    if "_ArgumentGroup" not in {getattr(n, "name", "") for n in nodes}:
        namespace["_ArgumentGroup"] = argparse._ArgumentGroup  # pylint: disable=protected-access
    module = ast.Module(body=nodes, type_ignores=[])
    exec(compile(module, f"<vllm {utils_path(files)}>", "exec"), namespace)  # noqa: S102 - the release's code
    return namespace["FlexibleArgumentParser"], namespace.get("StoreBoolean")


def _definitions(tree):
    """{name: index in tree.body} of the module-level classes, functions and plain assignments."""
    found = {}
    for index, node in enumerate(tree.body):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            found[node.name] = index
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found[node.targets[0].id] = index
    return found


def _needed_definitions(tree):
    """Indexes (in tree.body) of FlexibleArgumentParser, the helpers of _HELPERS and every module-level definition
    they name, transitively. A fixed list of helpers breaks when a release moves code out of the class into a new
    module-level function (vLLM 0.33's ``_register_action``, called from ``add_argument``). ``logger`` is left
    out: it is vLLM's init_logger, given as a plain logger."""
    defined = _definitions(tree)
    defined.pop("logger", None)
    todo = [name for name in ("FlexibleArgumentParser", *_HELPERS) if name in defined]
    needed = set()
    while todo:
        index = defined[todo.pop()]
        if index in needed:
            continue
        needed.add(index)
        for node in ast.walk(tree.body[index]):
            if isinstance(node, ast.Name) and node.id in defined and defined[node.id] not in needed:
                todo.append(node.id)
    return needed


def _deprecated(*_args, **_kwargs):
    def wrap(func):
        return func
    return wrap


def release_parser(files, options):
    """A FlexibleArgumentParser of the release carrying the release's option table (kinds as argparse actions)."""
    parser_cls, store_boolean = flexible_parser_class(files)
    parser = parser_cls(prog="vllm-release-probe")
    parser.add_argument("--config", type=str)
    return add_release_options(parser, store_boolean, options)


def cli_parser(files, options):
    """``(top, serve)``: vLLM's CLI as its ``main()`` builds it, the release's FlexibleArgumentParser with a
    ``serve`` sub-parser (same class) holding the model positional, ``--config`` and the release's options, each
    added through that release's own ``add_argument``. Copying finished actions into another parser would not
    do: vLLM 0.33 hides ``--no-enable-X`` from an action's option strings once the parser has registered it."""
    parser_cls, store_boolean = flexible_parser_class(files)
    top = parser_cls(prog="vllm")
    serve = top.add_subparsers(dest="subparser").add_parser("serve")
    serve.add_argument("model_tag")
    serve.add_argument("--config", type=str)
    add_release_options(serve, store_boolean, options)
    return top, serve


def add_release_options(parser, store_boolean, options):
    """Add ``options`` ({name: kind}) to ``parser`` as argparse actions of their kinds; returns the parser."""
    for name, kind in options.items():
        flag = "--" + name.replace("_", "-")
        if kind == "f":
            parser.add_argument(flag, action="store_true")
        elif kind == "b":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None)
        elif kind == "s" and store_boolean is not None:
            parser.add_argument(flag, action=store_boolean, default=False, nargs="?", const="True")
        elif kind == "j":
            parser.add_argument(flag, type=json.loads)
        elif kind == "l":
            parser.add_argument(flag, nargs="+")
        else:
            parser.add_argument(flag)
    return parser


def config_argv(files, options, config_text):
    """The argv the release's own config loader builds from a YAML text (through its parser's table)."""
    parser = release_parser(files, options)
    loader = getattr(parser, "load_config_file", None) or parser._load_config_file  # vLLM < 0.10.2
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "probe.yaml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(config_text)
        return loader(path)


_PROBE = {"f": "probe-flag", "b": "probe-bool", "s": "probe-store-boolean", "j": "probe-json", "l": "probe-list"}


def config_semantics(files):
    """How the release's ``--config`` loader turns YAML values into argv (found by running it)."""
    options = {key.replace("-", "_"): kind for kind, key in _PROBE.items()}
    _, store_boolean = flexible_parser_class(files)
    facts = {}
    argv = config_argv(files, options, "probe-bool: false\n")
    facts["false"] = "no_flag" if argv == ["--no-probe-bool"] else "dropped" if argv == [] else repr(argv)
    argv = config_argv(files, options, "probe-bool: true\n")
    facts["true"] = "flag" if argv == ["--probe-bool"] else repr(argv)
    argv = config_argv(files, options, "probe-json:\n  a: {b: true}\n")
    if argv[1:] == ['{"a": {"b": true}}']:
        facts["mapping"] = "json"
    elif argv[1:] == ["{'a': {'b': True}}"]:
        facts["mapping"] = "repr"
    else:
        facts["mapping"] = repr(argv)
    argv = config_argv(files, options, "probe-list: [x, 'y']\n")
    if argv == ["--probe-list", "x", "y"]:
        facts["list"] = "items"
    elif argv == ["--probe-list", "['x', 'y']"]:
        facts["list"] = "repr"
    else:
        facts["list"] = repr(argv)
    facts["store_boolean"] = store_boolean is not None
    # ``api_server --config FILE`` (no sub-command, --config first): up to 0.10.0 the loader keeps args[0]
    # ("--config") and drops the file name, so argparse fails; a self-contained first token (--port=N) avoids it.
    facts["config_first"] = "works" if _parses(files, options, ["--config"]) else "breaks"
    facts["config_after_option"] = "works" if _parses(files, options, ["--probe-value=1", "--config"]) else "breaks"
    return facts


def _parses(files, options, head):
    parser = release_parser(files, dict(options, probe_value="v", probe_other="v"))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "probe.yaml")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("probe-other: x\n")
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                args = parser.parse_args(head + [path])
        except (SystemExit, ValueError):
            return False
        return args.probe_other == "x"


# ----------------------------------------------------------------------------------------------------- output
def release_facts(files):
    options = extract_options(files)
    source = files.get("SOURCE", "").strip()
    return {"source": source, "config": config_semantics(files), "options": options}


def all_facts(dest=FIXTURES):
    return {version: release_facts(read_release(os.path.join(dest, f"vllm-{version}.tar.xz")))
            for version in fixture_versions(dest)}


def render_module(facts):
    """The generated module's text (ruff-clean, plain literals)."""
    lines = [
        "# Copyright: ascendai.vllm contributors",
        "# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)",
        "# Generated by: python tools/generate/vllm_release_facts.py generate -- do not edit by hand.",
        "# Sources: tests/unit/fixtures/vllm-releases/vllm-X.tar.xz (written by the tool's fetch: the files of each",
        "# vLLM release's PyPI sdist that define the ``vllm serve`` options and the ``--config`` loader).",
        "# RELEASES[version]: ``source`` (the sdist and its sha256), ``config`` (what that release's ``--config``",
        "# loader makes of a YAML ``false`` / ``true`` / mapping / list, and whether ``api_server --config FILE``",
        "# works with --config first or only after another option) and ``options``: one string of ``name:kind``",
        "# words, kinds ``f`` store_true, ``b`` --X/--no-X, ``s`` StoreBoolean, ``j`` JSON mapping, ``l`` list,",
        "# ``v`` value.",
        "",
        "from __future__ import annotations",
        "",
        "RELEASES = {",
    ]
    for version, fact in facts.items():
        lines.append(f"    {version!r}: {{")
        # hanging indent (pycodestyle E128 with a visual one): the strings start on the next line
        lines.append(f"        'source': (\n            {_wrap(fact['source'], 12)}),")
        lines.append("        'config': {")
        lines.extend(f"            {key!r}: {value!r}," for key, value in fact["config"].items())
        lines.append("        },")
        words = " ".join(f"{name}:{kind}" for name, kind in fact["options"].items())
        lines.append(f"        'options': (\n            {_wrap(words, 12)}),")
        lines.append("    },")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _wrap(text, indent, width=110):
    chunks, line = [], ""
    for word in text.split(" "):
        candidate = f"{line} {word}" if line else word
        if len(candidate) > width - indent and line:
            chunks.append(line + " ")
            line = word
        else:
            line = candidate
    chunks.append(line)
    pad = "\n" + " " * indent
    return pad.join(repr(chunk) for chunk in chunks)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=("fetch", "generate", "check", "show"))
    parser.add_argument("--version", action="append", default=[], help="fetch this vLLM release too (repeatable)")
    parser.add_argument("--extra", action="append", default=None,
                        help=f"releases fetched besides the matrix's (default: {', '.join(EXTRA_VERSIONS)})")
    parser.add_argument("--fixtures", default=FIXTURES)
    parser.add_argument("--output", default=OUTPUT)
    args = parser.parse_args(argv)
    if args.action == "fetch":
        wanted = sorted(set(matrix_versions()) | set(args.extra or EXTRA_VERSIONS) | set(args.version),
                        key=version_key)
        missing = fetch(wanted, args.fixtures)
        if missing:
            print(f"not on PyPI, so not covered: vLLM {', '.join(missing)}")
        return 0
    facts = all_facts(args.fixtures)
    text = render_module(facts)
    if args.action == "show":
        print(json.dumps(facts, indent=1))
        return 0
    if args.action == "check":
        with open(args.output, encoding="utf-8") as handle:
            same = handle.read() == text
        print("up to date" if same else f"{args.output} differs from the fixtures: run generate")
        return 0 if same else 1
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.write(text)
    print(f"wrote {args.output}: {len(facts)} releases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
