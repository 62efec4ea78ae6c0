# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The one compatibility table of the collection: vllm-ascend release -> vLLM, Python, CANN, torch, torch_npu.

Pure functions only (stdlib), so preflight (controller side, through the ``compat_check`` / ``compat_row``
filters) and anything running on a node can use the same data.

Source of the table: vllm-ascend ``docs/source/community/versioning_policy.md`` at HEAD 182b75e (2026-08-22),
"Release compatibility matrix" (docs/sources.md, "Compatibility matrix").
The doc's rule: pick ONE complete row; vLLM and vLLM Ascend versions must come from the same row.

Version strings are matched like this:

* a *partial* version (fewer than three numeric parts and nothing else, for example ``0.23`` or CANN ``8.1``)
  matches every version that starts with it (``8.1`` matches ``8.1.RC1``);
* a full version must be equal, ignoring a leading ``v``, letter case (``8.2.rc1`` == ``8.2.RC1``) and a local
  label (``2.10.0+cpu`` == ``2.10.0``);
* vllm-ascend post releases belong to the row of their base release (``0.23.0.post1`` -> row ``v0.23.0``);
* torch_npu matches on its release (major.minor.micro): post, dev and local labels aside, ``2.7.1`` and
  ``2.7.1.post1`` are builds of one torch_npu for one torch. The published vllm-ascend wheels pin the label
  themselves, and two of them differ from the doc's row: v0.11.0 requires ``torch-npu==2.7.1`` (row:
  2.7.1.post1), v0.18.0 ``torch-npu==2.9.0`` (row: 2.9.0.post1+git4c901a4), read from the ``Requires-Dist`` of
  the PyPI wheels (vllm_ascend-0.11.0/0.18.0-cp311-*-aarch64.whl, 2026-12-02). Installers therefore pin
  ``torch-npu==<release>.*`` (the row's ``torch_npu_pin``) and let the vllm-ascend wheel choose the build;
* vLLM must fall inside the row's vLLM range and share major.minor with the vllm-ascend release
  (every row of the table pairs the same major.minor), a vLLM post release counts as its base release;
* Python is compared on major.minor against the row's range.
"""

from __future__ import annotations

import copy
import re

# Each row: label (as printed in the doc), the vllm-ascend releases it covers (inclusive range), the vLLM
# range, Python range, CANN versions, torch, torch_npu, Triton-Ascend, and the oldest glibc the row's aarch64
# wheels install on. That last column is not in the doc: it is the highest manylinux_2_N tag among the cp311
# aarch64 wheels of vllm-ascend, torch, torch-npu and triton-ascend as PyPI publishes them (read 2026-12-02):
# 2.17 up to v0.9.x, 2.28 from v0.10 (torch and torch-npu manylinux_2_28), 2.34 from v0.20 (vllm-ascend ships
# manylinux_2_34 aarch64 wheels only). Kylin V10 has glibc 2.28, openEuler 22.03 2.34, Ubuntu 22.04 2.35.
_TABLE = (
    # (label, vllm_ascend min, max, vLLM min, max, Python min, max, CANN, torch, torch_npu, Triton-Ascend, glibc)
    ("v0.7.3 / v0.7.3.post1", "0.7.3", "0.7.3", "0.7.3", "0.7.3", "3.9", "3.11", ("8.1.RC1",), "2.5.1", "2.5.1",
     None, "2.17"),
    ("v0.8.4rc2", "0.8.4rc2", "0.8.4rc2", "0.8.4", "0.8.4", "3.9", "3.11", ("8.0.0",), "2.5.1", "2.5.1", None, "2.17"),
    ("v0.8.5rc1", "0.8.5rc1", "0.8.5rc1", "0.8.5.post1", "0.8.5.post1", "3.9", "3.11", ("8.1.RC1",), "2.5.1", "2.5.1",
     None, "2.17"),
    ("v0.9.0rc1 / v0.9.0rc2", "0.9.0rc1", "0.9.0rc2", "0.9.0", "0.9.0", "3.9", "3.11", ("8.1.RC1",), "2.5.1", "2.5.1",
     None, "2.17"),
    ("v0.9.1", "0.9.1", "0.9.1", "0.9.1", "0.9.1", "3.9", "3.11", ("8.2.RC1",), "2.5.1", "2.5.1.post1", None, "2.17"),
    ("v0.9.2rc1", "0.9.2rc1", "0.9.2rc1", "0.9.2", "0.9.2", "3.9", "3.11", ("8.1.RC1",), "2.5.1",
     "2.5.1.post1.dev20250619", None, "2.17"),
    ("v0.10.0rc1 ... v0.10.2rc1", "0.10.0rc1", "0.10.2rc1", "0.10.0", "0.10.2", "3.9", "3.11", ("8.2.RC1",), "2.7.1",
     "2.7.1.dev20250724", None, "2.28"),
    ("v0.11.0", "0.11.0", "0.11.0", "0.11.0", "0.11.0", "3.9", "3.11", ("8.3.RC2",), "2.7.1", "2.7.1.post1",
     None, "2.28"),
    ("v0.12.0rc1", "0.12.0rc1", "0.12.0rc1", "0.12.0", "0.12.0", "3.10", "3.11", ("8.3.RC2",), "2.8.0", "2.8.0",
     None, "2.28"),
    ("v0.13.0", "0.13.0", "0.13.0", "0.13.0", "0.13.0", "3.10", "3.11", ("8.5.0",), "2.8.0", "2.8.0.post2",
     "3.2.0", "2.28"),
    ("v0.14.0rc1 ... v0.17.0rc1", "0.14.0rc1", "0.17.0rc1", "0.14.1", "0.17.0", "3.10", "3.11", ("8.5.0", "8.5.1"),
     "2.9.0", "2.9.0", "3.2.0", "2.28"),
    ("v0.18.0", "0.18.0", "0.18.0", "0.18.0", "0.18.0", "3.10", "3.11", ("8.5.1",), "2.9.0", "2.9.0.post1+git4c901a4",
     "3.2.0.dev20260322", "2.28"),
    ("v0.20.2rc1 ... v0.22.1rc1", "0.20.2rc1", "0.22.1rc1", "0.20.2", "0.22.1", "3.10", "3.12", ("9.0.0",), "2.10.0",
     "2.10.0", "3.2.1", "2.34"),
    ("v0.23.0", "0.23.0", "0.23.0", "0.23.0", "0.23.0", "3.10", "3.12", ("9.1.0",), "2.10.0", "2.10.0.post4",
     "3.2.2", "2.34"),
)

_ROW_KEYS = ("label", "vllm_ascend_min", "vllm_ascend_max", "vllm_min", "vllm_max", "python_min", "python_max",
             "cann", "torch", "torch_npu", "triton_ascend", "glibc")

SOURCE = ("vllm-ascend docs/source/community/versioning_policy.md @182b75e (2026-08-22); "
          "docs/sources.md of ascendai.vllm")

_VERSION_RE = re.compile(
    r"^\s*v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[._-]?(?P<pre_l>a|b|c|rc|alpha|beta)[._-]?(?P<pre_n>\d*))?"
    r"(?:[._-]?post[._-]?(?P<post>\d*))?"
    r"(?:[._-]?dev[._-]?(?P<dev>\d*))?"
    r"(?:\+(?P<local>[a-z0-9._-]+))?\s*$",
    re.IGNORECASE,
)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2}


class Version:
    """A small PEP 440-ish version (stdlib only; ``packaging`` may be absent on a node)."""

    __slots__ = ("dev", "local", "post", "pre", "release", "text")

    def __init__(self, text):
        if not isinstance(text, str):
            text = str(text)
        match = _VERSION_RE.match(text)
        if not match:
            raise ValueError(f"not a version: {text!r}")
        self.text = text.strip()
        self.release = tuple(int(part) for part in match.group("release").split("."))
        pre_l = match.group("pre_l")
        self.pre = (_PRE_RANK[pre_l.lower()], int(match.group("pre_n") or 0)) if pre_l else None
        post = match.group("post")
        self.post = int(post or 0) if post is not None else None
        dev = match.group("dev")
        self.dev = int(dev or 0) if dev is not None else None
        self.local = match.group("local")

    @property
    def partial(self):
        """True for ``0.23`` or ``8.1``: fewer than three numeric parts and nothing after them."""
        return len(self.release) < 3 and self.pre is None and self.post is None and self.dev is None

    def exact_key(self):
        """Everything but the local label and trailing zeros of the release."""
        release = list(self.release)
        while len(release) > 1 and release[-1] == 0:
            release.pop()
        return (tuple(release), self.pre, self.post, self.dev)

    def order_key(self, width=4):
        """Sort key that ignores post/dev/local: ``0.23.0.post1`` sorts as ``0.23.0``; rc sorts before final."""
        release = (self.release + (0,) * width)[:width]
        return (release, self.pre if self.pre is not None else (9, 0))

    def __repr__(self):
        return f"Version({self.text!r})"


def parse_version(text):
    """Parse ``text`` (``v0.10.0rc1``, ``8.2.RC1``, ``2.9.0.post1+git4c901a4``) into a :class:`Version`."""
    return text if isinstance(text, Version) else Version(text)


def version_matches(wanted, actual):
    """True when version string ``actual`` satisfies ``wanted`` (partial = prefix, else exact; see module doc)."""
    want = parse_version(wanted)
    have = parse_version(actual)
    if want.partial:
        return have.release[:len(want.release)] == want.release
    if have.partial:
        return want.release[:len(have.release)] == have.release
    return want.exact_key() == have.exact_key()


def release_pin(version):
    """The PEP 440 prefix pin of a version's release: ``2.9.0.post1+git4c901a4`` -> ``2.9.0.*``."""
    release = list(parse_version(version).release[:3])
    release += [0] * (3 - len(release))
    return ".".join(str(part) for part in release) + ".*"


def same_release(wanted, actual):
    """True when ``actual`` is a build of ``wanted``'s release: ``2.7.1`` and ``2.7.1.post1`` are."""
    want = parse_version(wanted).release[:3]
    have = parse_version(actual).release[:3]
    return want + (0,) * (3 - len(want)) == have + (0,) * (3 - len(have))


def _row_dict(entry):
    row = dict(zip(_ROW_KEYS, entry))
    row["cann"] = list(row["cann"])
    same = row["vllm_min"] == row["vllm_max"]
    row["vllm"] = row["vllm_min"] if same else f"{row['vllm_min']} ... {row['vllm_max']}"
    row["python"] = f"{row['python_min']}-{row['python_max']}"
    row["torch_npu_pin"] = release_pin(row["torch_npu"])
    row["source"] = SOURCE
    return row


ROWS = tuple(_row_dict(entry) for entry in _TABLE)


def all_rows():
    """Every row, oldest first, as fresh dicts (callers may change them)."""
    return [copy.deepcopy(row) for row in ROWS]


def describe_row(row):
    """One line naming a row and its whole stack, for error messages."""
    cann = " or ".join(row["cann"])
    return (f"vllm-ascend {row['label']}: vLLM {row['vllm']}, Python {row['python']}, CANN {cann}, "
            f"torch {row['torch']}, torch_npu {row['torch_npu']}")


def _in_range(version, low, high):
    if version.partial:
        width = len(version.release)
        key = version.release
        return parse_version(low).release[:width] <= key <= parse_version(high).release[:width]
    key = version.order_key()
    return parse_version(low).order_key() <= key <= parse_version(high).order_key()


def find_rows(vllm_ascend_version):
    """All rows covering ``vllm_ascend_version`` (a partial version such as ``0.9`` can cover several)."""
    version = parse_version(vllm_ascend_version)
    return [copy.deepcopy(row) for row in ROWS
            if _in_range(version, row["vllm_ascend_min"], row["vllm_ascend_max"])]


def find_row(vllm_ascend_version):
    """The one row for ``vllm_ascend_version``, or ``None`` when the table has no row for it.

    Raises ValueError when the string is not a version, or when a partial version matches several rows.
    """
    rows = find_rows(vllm_ascend_version)
    if len(rows) > 1:
        labels = ", ".join(r["label"] for r in rows)
        raise ValueError(f"vllm-ascend {vllm_ascend_version} matches {len(rows)} rows ({labels}); give the full "
                         f"release, for example {rows[-1]['vllm_ascend_max']}")
    return rows[0] if rows else None


def known_releases():
    """The row labels, oldest first (for messages)."""
    return [row["label"] for row in ROWS]


def _python_ok(row, python):
    have = parse_version(python).release[:2]
    return parse_version(row["python_min"]).release[:2] <= have <= parse_version(row["python_max"]).release[:2]


def _vllm_ok(row, vllm, vllm_ascend):
    have = parse_version(vllm)
    if not _in_range(have, row["vllm_min"], row["vllm_max"]):
        return False
    if vllm_ascend is None:
        return True
    return parse_version(vllm_ascend).release[:2] == have.release[:2]


def _glibc_ok(row, glibc):
    return parse_version(glibc).release[:2] >= parse_version(row["glibc"]).release[:2]


def _component_problems(row, cann=None, python=None, torch=None, torch_npu=None, vllm=None, vllm_ascend=None,
                        glibc=None):
    """Human-readable mismatches between the given components and ``row``."""
    problems = []
    if glibc is not None and not _glibc_ok(row, glibc):
        problems.append(f"glibc {glibc} is older than the glibc {row['glibc']} that row's aarch64 wheels need "
                        f"(manylinux_{row['glibc'].replace('.', '_')}; Kylin V10 has 2.28, openEuler 22.03 2.34)")
    if cann is not None and not any(version_matches(cann, want) for want in row["cann"]):
        problems.append(f"CANN {cann} is not the CANN of that row ({' or '.join(row['cann'])})")
    if python is not None and not _python_ok(row, python):
        problems.append(f"Python {python} is outside that row's Python {row['python']}")
    if torch is not None and not version_matches(row["torch"], torch):
        problems.append(f"torch {torch} is not that row's torch {row['torch']}")
    if torch_npu is not None and not same_release(row["torch_npu"], torch_npu):
        problems.append(f"torch_npu {torch_npu} is not a build of that row's torch_npu {row['torch_npu']} "
                        f"({row['torch_npu_pin']})")
    if vllm is not None and not _vllm_ok(row, vllm, vllm_ascend):
        extra = " (same major.minor as vllm-ascend)" if row["vllm_min"] != row["vllm_max"] else ""
        problems.append(f"vLLM {vllm} is not that row's vLLM {row['vllm']}{extra}")
    return problems


def check_combination(vllm_ascend=None, cann=None, python=None, torch=None, torch_npu=None, vllm=None, glibc=None):
    """Check one software stack against the table.

    Every argument is a version string or ``None`` (not checked); ``glibc`` is an aarch64 node's C library
    (``getconf GNU_LIBC_VERSION``), checked against the wheels of the row. Returns a dict:

    ``ok``
        True when the stack fits one row.
    ``row``
        The row of ``vllm_ascend`` (``None`` when not given or not in the table).
    ``problems``
        Sentences, each naming a component, its value and what the row wants.
    ``working_rows``
        Rows (newest first) that accept every given component except vllm-ascend and vLLM, that is the
        vllm-ascend releases that would work with the rest of this stack.

    Raises ValueError for a string that is not a version (the caller names the input).
    """
    given = {"cann": cann, "python": python, "torch": torch, "torch_npu": torch_npu, "glibc": glibc}
    for name, value in list(given.items()) + [("vllm_ascend", vllm_ascend), ("vllm", vllm)]:
        if value is not None:
            try:
                parse_version(value)
            except ValueError:
                raise ValueError(f"{name}={value!r} is not a version string") from None

    working = [copy.deepcopy(row) for row in reversed(ROWS) if not _component_problems(row, **given)]
    result = {"ok": False, "row": None, "problems": [], "working_rows": working}

    if vllm_ascend is None:
        if vllm is not None:
            working = [row for row in working if _vllm_ok(row, vllm, None)]
            result["working_rows"] = working
        if not working:
            result["problems"].append(
                f"no row of the compatibility table accepts {_stack_text(vllm=vllm, **given)}")
        result["ok"] = bool(working)
        return result

    rows = find_rows(vllm_ascend)
    if not rows:
        result["problems"].append(f"vllm-ascend {vllm_ascend} is not in the compatibility table "
                                  f"(known: {', '.join(known_releases())})")
        return result
    if len(rows) > 1:
        labels = ", ".join(r["label"] for r in rows)
        result["problems"].append(f"vllm-ascend {vllm_ascend} matches several rows ({labels}); "
                                  "give the full release")
        return result
    row = rows[0]
    result["row"] = row
    problems = _component_problems(row, vllm=vllm, vllm_ascend=vllm_ascend, **given)
    result["problems"] = [f"vllm-ascend {vllm_ascend} needs row {row['label']}: {p}" for p in problems]
    result["ok"] = not problems
    return result


_PRETTY = {"vllm_ascend": "vllm-ascend", "vllm": "vLLM", "python": "Python", "cann": "CANN", "torch": "torch",
           "torch_npu": "torch_npu", "glibc": "glibc"}


def _stack_text(**components):
    order = ("vllm_ascend", "vllm", "python", "cann", "torch", "torch_npu", "glibc")
    parts = [f"{_PRETTY[name]} {components[name]}" for name in order if components.get(name) is not None]
    return ", ".join(parts) or "an empty stack"


def combination_error(result, **components):
    """The one message preflight shows for a failed :func:`check_combination` (empty string when ok)."""
    if result["ok"]:
        return ""
    lines = [f"Impossible combination ({_stack_text(**components)}):"]
    lines.extend("- " + problem for problem in result["problems"])
    if result["row"] is not None:
        lines.append("Either install the whole row: " + describe_row(result["row"]) + ".")
    others = {k: v for k, v in components.items() if k not in ("vllm_ascend", "vllm") and v is not None}
    if result["working_rows"] and others:
        best = result["working_rows"][0]
        lines.append(f"Or keep {_stack_text(**others)} and use the row that works with it: {describe_row(best)}.")
        if len(result["working_rows"]) > 1:
            rest = ", ".join(r["label"] for r in result["working_rows"][1:])
            lines.append(f"(other rows that also fit: {rest})")
    elif others:
        lines.append(f"No row of the table accepts {_stack_text(**others)} together.")
    glibc = components.get("glibc")
    if glibc is not None and result["row"] is not None and not _glibc_ok(result["row"], glibc):
        fits = [row for row in reversed(ROWS) if _glibc_ok(row, glibc)]
        if fits:
            lines.append(f"On glibc {glibc} the newest row whose aarch64 wheels install is {describe_row(fits[0])}; "
                         f"or move to an OS with glibc {result['row']['glibc']} or later (openEuler 22.03+, "
                         "Ubuntu 22.04).")
    lines.append(f"Source: {SOURCE}.")
    return "\n".join(lines)
