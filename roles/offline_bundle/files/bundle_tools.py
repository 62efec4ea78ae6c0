# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Helpers of the offline_bundle role (run on the download machine, stdlib only).

    bundle_tools.py sdist-requirements SDIST.tar.gz   runtime requirements of a vLLM sdist, one a line
    bundle_tools.py sdist-build-requirements SDIST    any sdist's [build-system] requires (resolved apart: vLLM
                                                      0.23.0 builds against torch 2.11.0, vllm-ascend runs 2.10.0)
    bundle_tools.py manifest DIR                      "sha256  relative/path" of every file under DIR (no dot folders)
"""

from __future__ import annotations

import hashlib
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
    """Sorted ``sha256  path`` lines (sha256sum format) of every file under ``directory`` except the manifest."""
    rows = []
    for dirpath, dirnames, filenames in os.walk(directory):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in filenames:
            full = os.path.join(dirpath, name)
            rel = os.path.relpath(full, directory).replace(os.sep, "/")
            if rel == MANIFEST or not os.path.isfile(full):
                continue
            digest = hashlib.sha256()
            with open(full, "rb") as handle:
                for chunk in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(chunk)
            rows.append(f"{digest.hexdigest()}  {rel}")
    return sorted(rows, key=lambda row: row.split("  ", 1)[1])


def main(argv):
    commands = {"sdist-requirements": sdist_requirements,
                "sdist-build-requirements": lambda path: sdist_requirements(path, build=True),
                "manifest": manifest}
    if len(argv) != 3 or argv[1] not in commands:
        sys.stderr.write(__doc__)
        return 2
    lines = commands[argv[1]](argv[2])
    sys.stdout.write("".join(line + "\n" for line in lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
