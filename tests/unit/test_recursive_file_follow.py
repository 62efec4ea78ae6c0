"""Every recursive ownership or mode change a role makes (ansible.builtin.file with recurse) runs as root in a tree
that another account owns (the model directory, a venv): with the file module's default follow=true, a link that
account put there has its target chown-ed and chmod-ed, anywhere on the host. Each such task sets follow: false."""

from __future__ import annotations

import glob
import os

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FILE_MODULES = ("ansible.builtin.file", "file", "ansible.legacy.file")


def tasks(node):
    """Every task dict under ``node`` (blocks, rescue and always included)."""
    if isinstance(node, list):
        for item in node:
            yield from tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always"):
            yield from tasks(node.get(key))


def recursive_file_tasks():
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "**", "*.yml"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
        for task in tasks(data):
            for module in FILE_MODULES:
                args = task.get(module)
                if isinstance(args, dict) and args.get("recurse") in (True, "true", "yes"):
                    found.append((os.path.relpath(path, ROOT), task.get("name"), args))
    return found


def test_there_are_recursive_file_tasks_to_check():
    names = {path for path, _name, _args in recursive_file_tasks()}
    assert {"roles/model/tasks/convert.yml", "roles/python_runtime/tasks/venvs.yml"} <= names


def test_every_recursive_file_task_follows_no_link():
    bad = [f"{path}: {name!r}" for path, name, args in recursive_file_tasks()
           if args.get("follow") not in (False, "false", "no")]
    assert not bad, "set follow: false on " + "; ".join(bad)
