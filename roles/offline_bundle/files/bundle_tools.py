# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Helpers of the offline_bundle role (run on the download machine, stdlib only).

    bundle_tools.py sdist-requirements SDIST.tar.gz   runtime requirements of a vLLM sdist, one a line
    bundle_tools.py sdist-build-requirements SDIST    any sdist's [build-system] requires (resolved apart: vLLM
                                                      0.23.0 builds against torch 2.11.0, vllm-ascend runs 2.10.0)
    bundle_tools.py manifest DIR                      "sha256  relative/path" of every file under DIR (no dot folders)
    bundle_tools.py write-manifest DIR                write DIR/MANIFEST.sha256 of every file under DIR (stale lines go)
    bundle_tools.py update-manifest DIR [--path FILE]... [--prefix FOLDER]...
                                                      merge the lines of these files and folders (relative to DIR) into
                                                      DIR/MANIFEST.sha256, replacing their old lines; keep every other

The manifest is read and written by the collection's one implementation, plugins/module_utils/_bundle.py (imported
by path: it is standard library only), under its lock DIR/.work/manifest.lock, so the role, tools/sandbox/bundle.sh
and tools/sandbox/model.sh cannot lose each other's lines.
"""

from __future__ import annotations

import importlib.util
import os
import posixpath
import re
import sys
import tarfile

try:
    import tomllib
except ImportError:  # Python < 3.11
    tomllib = None

MANIFEST = "MANIFEST.sha256"
# roles/offline_bundle/files/ -> the collection's plugins/module_utils/_bundle.py (a checkout or an installed one)
BUNDLE_PY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "plugins", "module_utils",
                         "_bundle.py")
_BUNDLE = []


def bundle_module():
    """plugins/module_utils/_bundle.py, imported by path (this script runs outside Ansible)."""
    if not _BUNDLE:
        path = os.path.normpath(BUNDLE_PY)
        if not os.path.isfile(path):
            raise SystemExit(f"bundle_tools.py: {path} is missing; run this script from the ascendai.vllm collection "
                             f"(a checkout or ansible-galaxy collection install), not a copy of roles/offline_bundle")
        spec = importlib.util.spec_from_file_location("ascendai_vllm_bundle", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _BUNDLE.append(module)
    return _BUNDLE[0]


# Requirement files of the sdist that hold vLLM's runtime dependencies (vLLM >= 0.9: requirements/common.txt).
RUNTIME_FILES = ("requirements/common.txt", "requirements-common.txt")


def _read_member(tar, root, relpath):
    try:
        member = tar.getmember(posixpath.join(root, relpath))
    except KeyError:
        return None
    return tar.extractfile(member).read().decode("utf-8")


def requirement_lines(text, read_include, seen=None):
    """Requirement strings of a requirements file: comments, options and blanks dropped, ``-r`` followed."""
    seen = set() if seen is None else seen
    out = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        include = re.match(r"^(?:-r|--requirement)\s*=?\s*(\S+)$", line)
        if include:
            name = include.group(1)
            if name not in seen:
                seen.add(name)
                nested = read_include(name)
                if nested is not None:
                    out.extend(requirement_lines(nested, read_include, seen))
            continue
        if line.startswith("-"):
            continue
        out.append(line)
    return out


def build_requires(pyproject_text):
    """``[build-system] requires`` of a pyproject.toml."""
    if tomllib is not None:
        return list(tomllib.loads(pyproject_text).get("build-system", {}).get("requires", []))
    block = re.search(r"\[build-system\](.*?)(?:^\[|\Z)", pyproject_text, re.S | re.M)
    found = re.search(r"requires\s*=\s*\[(.*?)\]", block.group(1), re.S) if block else None
    return re.findall(r"[\"']([^\"']+)[\"']", found.group(1)) if found else []


# What pip builds an sdist with when its pyproject.toml names no [build-system] (PEP 517 fallback).
LEGACY_BUILD_REQUIRES = ["setuptools>=40.8.0", "wheel"]


def sdist_requirements(path, build=False):
    """Runtime requirements (requirements/common.txt and its includes) of a vLLM sdist, or with ``build`` the
    ``[build-system] requires`` of any sdist (pip's fallback set when it names none)."""
    with tarfile.open(path, "r:*") as tar:
        names = tar.getnames()
        roots = sorted({name.split("/", 1)[0] for name in names if "/" in name})
        if len(roots) != 1:
            raise ValueError(f"{path}: expected one top-level directory, found {roots}")
        root = roots[0]
        if build:
            pyproject = _read_member(tar, root, "pyproject.toml")
            has_system = pyproject is not None and re.search(r"(?m)^\[build-system\]", pyproject)
            lines = build_requires(pyproject) if has_system else list(LEGACY_BUILD_REQUIRES)
        else:
            runtime_file = next((f for f in RUNTIME_FILES if posixpath.join(root, f) in names), None)
            if runtime_file is None:
                raise ValueError(f"{path}: none of {', '.join(RUNTIME_FILES)} in the sdist")
            base = posixpath.dirname(runtime_file)

            def read_include(name):
                return _read_member(tar, root, posixpath.normpath(posixpath.join(base, name)))

            seen = {posixpath.basename(runtime_file)}
            lines = requirement_lines(_read_member(tar, root, runtime_file), read_include, seen)
    unique = []
    for line in lines:
        if line not in unique:
            unique.append(line)
    return unique


def manifest(directory):
    """Sorted ``sha256  path`` lines (sha256sum format) of every file under ``directory`` except the manifest and
    dot files and folders."""
    bundle = bundle_module()
    return bundle.format_manifest(bundle.tree_entries(directory)).splitlines()


def write_manifest(directory):
    """Write ``directory``/MANIFEST.sha256 from the files there (every file hashed again, stale lines dropped),
    under the manifest lock. One line: ``changed`` or ``unchanged``, and the number of files."""
    bundle = bundle_module()
    with bundle.manifest_lock(directory):
        entries = bundle.tree_entries(directory)
        changed = bundle.write_manifest(directory, entries)
    return [f"{'changed' if changed else 'unchanged'} {MANIFEST} ({len(entries)} files)"]


def update_manifest(directory, args):
    """Merge the lines of ``--path FILE`` and ``--prefix FOLDER`` (relative to ``directory``) into its manifest,
    under the manifest lock. One line: ``changed`` or ``unchanged``, this update's lines and the manifest's."""
    paths, prefixes = [], []
    if len(args) % 2 or not args:
        raise SystemExit("update-manifest DIR needs --path FILE or --prefix FOLDER pairs")
    for flag, value in zip(args[::2], args[1::2]):
        if flag not in ("--path", "--prefix"):
            raise SystemExit(f"update-manifest: unknown option {flag} (use --path FILE or --prefix FOLDER)")
        (paths if flag == "--path" else prefixes).append(value)
    bundle = bundle_module()
    try:
        result = bundle.update_manifest(directory, paths=paths, prefixes=prefixes)
    except bundle.BundleError as exc:
        raise SystemExit(f"update-manifest: {exc}") from None
    what = ", ".join([f"{len(paths)} files"] * bool(paths) + [f"{prefix}/" for prefix in prefixes])
    return [f"{'changed' if result['changed'] else 'unchanged'} {MANIFEST} ({len(result['entries'])} lines for "
            f"{what}; {result['lines']} in all)"]


def main(argv):
    commands = {"sdist-requirements": sdist_requirements,
                "sdist-build-requirements": lambda path: sdist_requirements(path, build=True),
                "manifest": manifest,
                "write-manifest": write_manifest}
    if len(argv) >= 3 and argv[1] == "update-manifest":
        lines = update_manifest(argv[2], argv[3:])
    elif len(argv) != 3 or argv[1] not in commands:
        sys.stderr.write(__doc__)
        return 2
    else:
        lines = commands[argv[1]](argv[2])
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
