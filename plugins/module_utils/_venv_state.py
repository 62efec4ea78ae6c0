# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""A venv's installed distributions against the wanted set (the ``venv_state`` module, run by the venv's own Python).

``compare`` is pure; ``installed_distributions`` and ``entry_point_value`` read the running interpreter's
environment (``importlib.metadata``), so the module must run under the venv's interpreter
(``ansible_python_interpreter: <venv>/bin/python`` on the task). Stdlib only, plus pip's vendored ``packaging``
when the venv has pip (a PEP 440 comparison; without it a plain comparison of the release numbers).
"""

from __future__ import annotations

import platform
import re
import sys

try:  # Python 3.8+ stdlib
    from importlib import metadata
except ImportError:  # pragma: no cover
    metadata = None

try:
    from pip._vendor.packaging.specifiers import SpecifierSet
    from pip._vendor.packaging.version import InvalidVersion, Version
except ImportError:  # pragma: no cover - a venv always has pip, but do without
    SpecifierSet = None
    Version = None
    InvalidVersion = ValueError


def canonical_name(name):
    """PEP 503 normalised project name: ``Torch_NPU`` -> ``torch-npu``."""
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def _release(text):
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", str(text))
    return tuple(int(part) for part in match.group(1).split(".")) if match else None


def same_version(wanted, installed):
    """True when ``installed`` is ``wanted`` (PEP 440 normal form when packaging is there).

    A wanted ``2.7.1.*`` is pip's prefix pin: any build of release 2.7.1 (``2.7.1``, ``2.7.1.post1``). A wanted
    version without a local label matches an installed one with any (``0.11.0`` and ``0.11.0+empty``), as pip's
    ``==`` does.
    """
    if str(wanted).endswith(".*"):
        if SpecifierSet is not None:
            try:
                return SpecifierSet("==" + str(wanted), prereleases=True).contains(str(installed))
            except InvalidVersion:
                pass
        want = _release(str(wanted)[:-2])
        have = _release(installed)
        return want is not None and have is not None and have[:len(want)] == want
    if Version is not None:
        try:
            want, have = Version(str(wanted)), Version(str(installed))
            if not want.local:
                # PEP 440: a pin without a local label matches any (vLLM built for no device is 0.11.0+empty)
                have = Version(have.public)
            return want == have
        except InvalidVersion:
            pass
    want = str(wanted).strip().lower().lstrip("v")
    have = str(installed).strip().lower().lstrip("v")
    if "+" not in want:
        have = have.split("+", 1)[0]
    return want == have


def compare(installed, wanted, absent=()):
    """Pure comparison. ``installed``: canonical name -> version. Returns the report without ``python``."""
    wanted = {canonical_name(k): str(v) for k, v in wanted.items()}
    absent = [canonical_name(n) for n in absent]
    missing = sorted(name for name in wanted if name not in installed)
    mismatched = {name: [version, installed[name]] for name, version in sorted(wanted.items())
                  if name in installed and not same_version(version, installed[name])}
    unwanted = sorted(name for name in absent if name in installed)
    seen = {name: installed[name] for name in sorted(set(wanted) | set(absent)) if name in installed}
    return {"installed": seen, "missing": missing, "mismatched": mismatched, "unwanted": unwanted,
            "ok": not (missing or mismatched or unwanted)}


def reported_versions(installed, names):
    """Pure. Canonical name -> installed version of ``names`` that are installed, in the order of ``names``
    (``torch_npu`` and ``torch-npu`` are one name). ``installed``: canonical name -> version."""
    found = {}
    for name in names or ():
        key = canonical_name(name)
        if key in installed and key not in found:
            found[key] = installed[key]
    return found


def installed_distributions():
    """Canonical name -> version of every distribution this interpreter sees."""
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonical_name(name), dist.version)
    return found


def entry_point_value(group, name):
    """The ``module:attr`` value of entry point ``name`` in ``group``, or None."""
    eps = metadata.entry_points()
    selected = eps.select(group=group) if hasattr(eps, "select") else eps.get(group, [])
    for ep in selected:
        if ep.name == name:
            return ep.value
    return None


def python_version():
    """``major.minor`` of the running interpreter."""
    return "%d.%d" % sys.version_info[:2]


def venv_report(wanted=None, absent=(), entry_point=None, report=()):
    """What the ``venv_state`` module returns: ``compare`` of this interpreter's distributions, plus ``reported``
    (:func:`reported_versions` of ``report``), ``python`` and ``python_version`` (``3.11.7``) and ``entry_point``
    (the value of entry point ``[group, name]``, or None)."""
    installed = installed_distributions()
    result = compare(installed, wanted or {}, absent or ())
    result["reported"] = reported_versions(installed, report)
    result["python"] = python_version()
    result["python_version"] = platform.python_version()
    result["entry_point"] = entry_point_value(entry_point[0], entry_point[1]) if entry_point else None
    return result
