#!/usr/bin/env python3
"""The one builder of an ``ansible_collections/ascendai/vllm`` tree from a checkout of this repository.

Ansible finds a collection only under ``<collections path>/ansible_collections/<namespace>/<name>``, and this
repository's root is the collection root, so every tool that runs the collection from a checkout needs such a tree.
Two kinds, one module (standard library only: it runs before the venv exists and in the controller14 container):

    collection_tree.py link [CHECKOUT]
        .cache/collections/ansible_collections/ascendai/vllm -> CHECKOUT (a symlink; nothing is copied).
        ansible-playbook, ansible-doc, ansible-lint, pytest and the benchmarks import the checkout through it.
        Prints the collections path.
    collection_tree.py copy [--sanity] [--git] SRC DEST
        The files git knows in SRC (tracked, or new and not ignored) copied into DEST/ansible_collections/ascendai/vllm:
        a writable copy of a read-only checkout (controller14). --sanity leaves out what ansible-test sanity must not
        check (SANITY_LEFT_OUT); --git makes the copy a git repository of its own, which ansible-test reads its file
        list from. Prints the collection's path.

Python callers load this file by path (tests/conftest.py, benchmarks/, tests/tools/) and call link() or copy().
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

NAMESPACE = "ascendai"
NAME = "vllm"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Left out of the sanity tree: tests/unit/fixtures holds verbatim third-party captures (vendor docs in Chinese with
# typographic quotes among them), data rather than code; the rest is the test infrastructure that galaxy.yml's
# build_ignore keeps out of the collection (simulator, the RPM-node images' recipe, test tools, benchmarks, tools/),
# which ruff checks instead.
SANITY_LEFT_OUT = ("tests/unit/fixtures", "tests/simulator", "tests/rpm_nodes", "tests/tools", "benchmarks", "tools")


def collection_dir(collections: str) -> str:
    """Where the collection lies under the collections path `collections`."""
    return os.path.join(collections, "ansible_collections", NAMESPACE, NAME)


def link(checkout: str = ROOT, collections: str | None = None) -> str:
    """Point `collections`/ansible_collections/ascendai/vllm at `checkout`; return the collections path.

    Default collections path: the checkout's .cache/collections (ansible.cfg and .config/molecule name it).
    A link that already points elsewhere is replaced: the tree always serves the checkout it was asked for.
    """
    checkout = os.path.abspath(checkout)
    collections = os.path.abspath(collections or os.path.join(checkout, ".cache", "collections"))
    dest = collection_dir(collections)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if not (os.path.islink(dest) and os.path.realpath(dest) == os.path.realpath(checkout)):
        tmp = f"{dest}.{os.getpid()}.tmp"
        os.symlink(checkout, tmp)
        # rename over the old link: pytest workers and parallel lanes never see the link missing
        os.replace(tmp, dest)
    return collections


def git_files(src: str, leave_out: tuple[str, ...] = ()) -> list[str]:
    """The files git knows in `src`: tracked, or new and not ignored, less the folders `leave_out`."""
    spec = ["--", "."] + [f":!{path}" for path in leave_out]
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z", *spec], cwd=src, check=True,
                         capture_output=True).stdout
    return sorted({name for name in out.decode().split("\0") if name})


def copy(src: str, collections: str, sanity: bool = False, git: bool = False) -> str:
    """Copy the files git knows in `src` into `collections`' ascendai/vllm tree (emptied first); return its path."""
    dest = collection_dir(os.path.abspath(collections))
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    for name in git_files(src, SANITY_LEFT_OUT if sanity else ()):
        path = os.path.join(src, name)
        if not os.path.lexists(path):  # tracked, deleted in the work tree
            continue
        target = os.path.join(dest, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.islink(path):
            os.symlink(os.readlink(path), target)
        else:
            shutil.copy2(path, target)
    if git:
        subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
        subprocess.run(["git", "add", "-A"], cwd=dest, check=True, stdout=subprocess.DEVNULL)
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="kind", required=True)
    p_link = sub.add_parser("link", help="symlink tree under CHECKOUT/.cache/collections")
    p_link.add_argument("checkout", nargs="?", default=ROOT)
    p_copy = sub.add_parser("copy", help="copy of the files git knows")
    p_copy.add_argument("--sanity", action="store_true", help="leave out what ansible-test sanity must not check")
    p_copy.add_argument("--git", action="store_true", help="make the copy a git repository")
    p_copy.add_argument("src")
    p_copy.add_argument("dest", help="the collections path to build under")
    args = parser.parse_args(argv)
    if args.kind == "link":
        print(link(args.checkout))
    else:
        print(copy(args.src, args.dest, sanity=args.sanity, git=args.git))
    return 0


if __name__ == "__main__":
    sys.exit(main())
