# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Which Python Ansible's modules run with on a node, decided before any module runs there.

ansible-core refuses target Pythons older than its floor: ``_PY_MIN = (3, 8)`` in ansible-core 2.18 and later
(``lib/ansible/module_utils/basic.py``; the 2.18 changelog raised it from 3.7), 3.7 in 2.17, 2.7 / 3.6 before.
Kylin V10's python3 is 3.7, so a plain ``gather_facts`` fails there before any role can run. The bootstrap play
probes the node with ``raw`` (no Python needed), and this module reads the probe and decides: keep an accepted
Python, or unpack the bundle's relocatable CPython and use that.

The probe prints one line per candidate interpreter that exists: ``<path> <major>.<minor>.<micro>``.
"""

from __future__ import annotations

import re

# ansible-core's target floor by release. The running core's own _PY_MIN wins (installed_core_floor); this table
# answers for a core named by version only. Sources: _PY_MIN in ansible/module_utils/basic.py of the wheels on PyPI,
# (3, 8) in 2.18.0-2.19.14 and (3, 9) in 2.20.0 and 2.21.5; for 2.16 and 2.17, which have no _PY_MIN, their porting
# guides ("Python 2.7 and 3.6 ... targets" / "3.7 ... targets").
_FLOOR_BY_CORE = (((2, 20), (3, 9)), ((2, 18), (3, 8)), ((2, 17), (3, 7)), ((0, 0), (3, 6)))

_LINE = re.compile(r"^(?P<path>/\S+) (?P<version>[0-9]{1,3}\.[0-9]{1,3}(?:\.[0-9]{1,3})?)\s*$")
_CORE = re.compile(r"^\s*([0-9]+)\.([0-9]+)")


class BootstrapError(ValueError):
    """Input that cannot be planned from; the message says what and how to fix it."""


def version_tuple(text):
    """'3.7.16' -> (3, 7, 16); refuses anything else."""
    if not isinstance(text, str) or not re.fullmatch(r"[0-9]{1,3}(\.[0-9]{1,3}){1,2}", text.strip()):
        raise BootstrapError("not a Python version: %r" % (text,))
    return tuple(int(part) for part in text.strip().split("."))


def core_floor(core_version, installed_floor=None):
    """The oldest target Python the controller's ansible-core accepts, as a tuple.

    installed_floor is ansible.module_utils.basic._PY_MIN of the running core where it has one: it wins."""
    if installed_floor:
        return tuple(int(v) for v in installed_floor)
    match = _CORE.match(str(core_version or ""))
    if not match:
        raise BootstrapError("not an ansible-core version: %r" % (core_version,))
    core = (int(match.group(1)), int(match.group(2)))
    for since, floor in _FLOOR_BY_CORE:
        if core >= since:
            return floor
    return _FLOOR_BY_CORE[-1][1]


def installed_core_floor():
    """_PY_MIN of the ansible-core running this code, or None where that core has none."""
    try:
        from ansible.module_utils import basic
    except Exception:  # pragma: no cover - only without ansible-core
        return None
    floor = getattr(basic, "_PY_MIN", None)
    return tuple(floor) if floor else None


def parse_probe(stdout):
    """[(path, version string)] from the probe's lines, in the probe's order; other lines are ignored."""
    found = []
    for line in str(stdout or "").splitlines():
        match = _LINE.match(line.strip())
        if match and all(match.group("path") != seen[0] for seen in found):
            found.append((match.group("path"), match.group("version")))
    return found


def plan(stdout, floor, bundled, core_version, system="/usr/bin/python3", prefer=""):
    """What the bootstrap does on one node.

    stdout: the probe's output; floor: the core's floor (tuple); bundled: the path where the bundle's CPython is
    (or will be) unpacked; system: the OS's python3; prefer: an interpreter the inventory names
    (ansible_python_interpreter), used when accepted.

    Returns action ("none": a Python is there; "install": unpack the bundle's CPython), interpreter (the one to
    use; for "install" the bundled path), version, system and system_version (the OS python3 and its version, "" when
    it has none), accepted (the system Python is new enough) and message (one line for the operator).
    """
    floor = tuple(floor)
    found = parse_probe(stdout)
    versions = dict(found)
    floor_text = ".".join(str(v) for v in floor)
    core = ".".join(_CORE.match(str(core_version)).groups()) if _CORE.match(str(core_version)) else str(core_version)

    def ok(path):
        return path in versions and version_tuple(versions[path])[:2] >= floor[:2]

    system_version = versions.get(system, "")
    if system_version:
        said = "python3 %s (%s) %s by ansible-core %s" % (
            system_version, system, "accepted" if ok(system) else "refused", core)
    else:
        said = "no python3 at %s" % system
    result = {
        "system": system,
        "system_version": system_version,
        "accepted": ok(system),
        "floor": floor_text,
    }
    for path in [p for p in (prefer, system, bundled) if p]:
        if ok(path):
            result.update(action="none", interpreter=path, version=versions[path])
            result["message"] = "%s; using %s %s" % (said, path, versions[path]) if path != system else said
            return result
    if bundled in versions:
        # There, but refused: a tarball of the wrong Python. Unpacking over it would not help.
        raise BootstrapError(
            "%s is Python %s, which ansible-core %s refuses (it needs %s or later). Remove %s and set "
            "python_runtime_tarball_version to a CPython %s+ tarball of the offline bundle." % (
                bundled, versions[bundled], core, floor_text, bundled.rsplit("/bin/", 1)[0], floor_text))
    result.update(action="install", interpreter=bundled, version="")
    result["message"] = "%s (needs %s or later); installing the bundle's CPython as %s" % (said, floor_text, bundled)
    return result
