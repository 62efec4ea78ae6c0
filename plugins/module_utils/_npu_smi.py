# Copyright (c) ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Parsers for the text output of Huawei Ascend ``npu-smi``.

Pure functions, stdlib only (this file runs on the managed node).

``npu-smi info`` prints a box-drawn table whose layout changed across driver
versions and products.  The parser does not rely on fixed character columns:
it reads the two header rows, splits every row on ``|`` into cells, maps the
labels of each header cell to the whitespace-separated values of the same cell
of each data row (``used / total`` pairs count as one value, with or without
spaces around the slash), and classifies data rows by the cell under ``Bus-Id``.

Layouts handled (see ``layout`` in the result):

- ``classic``: 910A/910B table of npu-smi 22.x-25.2 (``Chip`` / ``Bus-Id`` / ``HBM-Usage(MB)``).
- ``wide``: the same columns in the 114-character layout of npu-smi 25.5+/26.x,
  whose process table adds ``Process id in container``.
- ``a3``: Atlas A3 (910_93), second header ``Chip  Phy-ID``, two dies per NPU.
- ``310p``: Atlas 300I Pro/Duo, second header ``Chip    Device``, no HBM column.
- ``310``: the old Ascend 310 layout (npu-smi 21.x), also ``Chip    Device``.
- ``950``: ``NPU ID | Name | Health`` layout with ``NPU Util(%)`` and no chip column.
"""

from __future__ import annotations

import os
import re

__all__ = [
    "HEALTHY_STATES",
    "HEALTH_ORDER",
    "HEALTH_WORDS",
    "UNHEALTHY_STATES",
    "NpuSmiParseError",
    "chip_family",
    "classify_error",
    "find_device_holders",
    "health_verdict",
    "merge_health",
    "parse_board",
    "parse_common",
    "parse_health",
    "parse_info",
    "parse_info_m",
    "parse_memory",
    "parse_usages",
    "summarize",
    "worst_health",
]


class NpuSmiParseError(ValueError):
    """The text is not npu-smi output this parser understands."""


# The health words npu-smi prints, in its own order (npu_common.c npu_common_get_health_state_str:
# health_state_list { "OK", "Warning", "Alarm", "Critical", "UNKNOWN" }); HEALTH_ORDER ranks them best first.
HEALTH_WORDS = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")
HEALTH_ORDER = ("OK", "UNKNOWN", "Warning", "Alarm", "Critical")
# The one word that means healthy. Anything else, including a word npu-smi never prints (another case, a
# translation, colour codes, an empty cell), is not known to be healthy: the gate fails closed on it.
HEALTHY_STATES = ("OK",)
# What the driver itself counts as unhealthy (npu_chip_info.c is_unhealthy_state).
UNHEALTHY_STATES = ("Warning", "Alarm", "Critical")
# npu-smi prints each error code as printf " %04X" of an unsigned int (npu_info_print.c print_diagnosis_info):
# hexadecimal digits, no prefix, at most 8 of them (16 leaves room for a wider type).
_ERROR_CODE_RE = re.compile(r"[0-9A-Fa-f]{1,16}")
# No count, id or size npu-smi prints is wider than a 64-bit integer (20 digits). A longer run of digits is not
# npu-smi output, and Python refuses to convert more than 4300 digits at all.
_MAX_DIGITS = 20

_NULLS = frozenset(["NA", "N/A", "-", "--", ""])
_BUS_RE = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]+$")
_INT_RE = re.compile(r"^[+-]?[0-9]+$")
_FLOAT_RE = re.compile(r"^[+-]?(?:[0-9]+\.[0-9]*|\.[0-9]+)$")
_VERSION_RE = re.compile(r"npu-smi\s+(\S+)\s+Version:\s*([^\s|]+)", re.IGNORECASE)
_BORDER_RE = re.compile(r"^\+[-=+]*\+?$")
_ELISION_RE = re.compile(r"^\|?\s*(?:\.\.\.+|\u2026)\s*\|?$")
_NO_PROC_RE = re.compile(r"No running processes found in NPU\s+([0-9]{1,10})\b", re.IGNORECASE)
_WARNING_RE = re.compile(r"\[WARNING\].*")
_QUOTE_RE = re.compile(r"^\s*(?:>\s?)+")
_VALUE_RE = re.compile(r"(?P<a>[^\s/]+)\s*/\s*(?P<b>[^\s/]+)|(?P<t>\S+)")

# Header label (case-insensitive) -> (key, kind).  kind: int, num, float, str, bus, pair.
_LABELS = {
    "npu": ("npu_id", "int"),
    "npu-id": ("npu_id", "int"),
    "name": ("name", "str"),
    "health": ("health", "str"),
    "power(w)": ("power_w", "float"),
    "temp(c)": ("temp_c", "num"),
    "hugepages-usage(page)": ("hugepages", "pair"),
    "chip": ("chip_id", "int"),
    "phy-id": ("phy_id", "int"),
    "device": ("device_id", "int"),
    "bus-id": ("bus_id", "bus"),
    "aicore(%)": ("aicore_util_pct", "num"),
    "npu-util(%)": ("aicore_util_pct", "num"),
    "memory-usage(mb)": ("memory", "pair"),
    "hbm-usage(mb)": ("hbm", "pair"),
}
_PAIR_KEYS = {
    "hugepages": ("hugepages_used", "hugepages_total"),
    "memory": ("memory_used_mb", "memory_total_mb"),
    "hbm": ("hbm_used_mb", "hbm_total_mb"),
}
_MULTIWORD_LABELS = (("NPU ID", "NPU-ID"), ("NPU Util(%)", "NPU-Util(%)"))
_CHIP_KEYS = (
    "chip_id", "phy_id", "device_id", "bus_id", "aicore_util_pct",
    "memory_used_mb", "memory_total_mb", "hbm_used_mb", "hbm_total_mb",
    "hugepages_used", "hugepages_total", "name", "health", "power_w", "temp_c",
)


# --------------------------------------------------------------------------- helpers


def _short(text, limit=120):
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _to_num(value, kind, where):
    """Convert one printed value; NA and - become None."""
    value = value.strip()
    if value in _NULLS:
        return None
    _check_digits(value, where)
    if kind == "int":
        if _INT_RE.match(value):
            return int(value)
    elif kind in ("num", "float"):
        if _INT_RE.match(value):
            return float(value) if kind == "float" else int(value)
        if _FLOAT_RE.match(value):
            return float(value)
    raise NpuSmiParseError(f"{where}: expected a number, NA or -, got {value!r}")


def _check_digits(value, where):
    """Refuse a number longer than npu-smi ever prints, before int() or float() sees it."""
    digits = sum(ch.isdigit() for ch in value)
    if digits > _MAX_DIGITS:
        raise NpuSmiParseError(
            f"{where}: a number of {digits} digits ({_short(value, 40)!r}); npu-smi prints at most {_MAX_DIGITS}, "
            "so this is not npu-smi output (pass the stdout of npu-smi itself)"
        )


def _lines(text):
    if not isinstance(text, str):
        raise NpuSmiParseError(f"npu-smi output must be a string, got {type(text).__name__}")
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _cells(line):
    s = re.sub(r"^\||\|$", "", line.strip())  # one outer border on each side (str.removeprefix needs py3.9)
    return [c.strip() for c in s.split("|")]


def _header_labels(cell):
    for phrase, token in _MULTIWORD_LABELS:
        cell = re.sub(re.escape(phrase), token, cell, flags=re.IGNORECASE)
    return cell.split()


def _values(cell):
    """Split a cell into values; ``a / b``, ``a/ b``, ``a/b`` become a tuple."""
    cell = re.sub(r"(?<![^\s])N/A(?![^\s])", "NA", cell)
    out = []
    for m in _VALUE_RE.finditer(cell):
        if m.group("t") is not None:
            out.append(m.group("t"))
        else:
            out.append((m.group("a"), m.group("b")))
    return out


def worst_health(states):
    """The worst of several printed health strings (None when none are given)."""
    worst = None
    worst_rank = -1
    for state in states:
        if state is None:
            continue
        # a word npu-smi never prints ranks worst: it is shown rather than hidden behind a known one
        rank = HEALTH_ORDER.index(state) if state in HEALTH_ORDER else len(HEALTH_ORDER)
        if rank > worst_rank:
            worst, worst_rank = state, rank
    return worst


def health_verdict(states, error_codes=()):
    """Decide one NPU's health from every health word printed for it and its error codes; fails closed.

    ``states``: the words npu-smi printed (table rows of its chips, ``-t health`` detail), None where a cell or
    line was empty. ``error_codes``: the codes ``-t health -i N -c C`` printed.

    Returns ``(verdict, reason)``: ``healthy`` (every word is ``OK`` and no code is set, reason ""), ``unhealthy``
    (a word the driver counts as unhealthy, ``UNKNOWN``, or a non-zero error code, even beside ``OK``) or
    ``unknown`` (no word at all, a word npu-smi never prints, or a code that is not hexadecimal: refused, since
    nothing says the NPU is healthy).
    """
    bad, unknown = [], []

    def add(items, text):
        if text not in items:
            items.append(text)

    states = list(states or [])
    if not states:
        add(unknown, "npu-smi printed no health for it")
    for state in states:
        if state is None or state == "":
            add(unknown, "npu-smi printed no health for it (empty cell)")
        elif state in HEALTHY_STATES:
            continue
        elif state in UNHEALTHY_STATES:
            add(bad, f"health {state}")
        elif state == "UNKNOWN":
            add(bad, "health UNKNOWN (the driver could not read the chip's health)")
        else:
            add(unknown, "health {} is not a word npu-smi prints ({})".format(
                ascii(str(state)[:40]), ", ".join(HEALTH_WORDS)))
    for code in error_codes or ():
        text = str(code)
        if not _ERROR_CODE_RE.fullmatch(text):
            add(unknown, "error code {} is not a hexadecimal code as npu-smi prints them".format(ascii(text[:40])))
        elif int(text, 16):
            add(bad, f"error code {text}")
    if bad:
        return "unhealthy", "; ".join(bad + unknown)
    if unknown:
        return "unknown", "; ".join(unknown) + ": unknown, refused (only OK without an error code counts as healthy)"
    return "healthy", ""


# --------------------------------------------------------------------------- npu-smi info


class _Header:
    """Column plan derived from the two header rows of the device table."""

    def __init__(self, row1, row2, lineno):
        if len(row1) != len(row2):
            raise NpuSmiParseError(
                f"line {lineno}: the two device table header rows have {len(row1)} and {len(row2)} cells"
            )
        self.row1 = [[self._label(lbl, lineno) for lbl in _header_labels(c)] for c in row1]
        self.row2 = [[self._label(lbl, lineno) for lbl in _header_labels(c)] for c in row2]
        self.bus_cell = None
        for i, labels in enumerate(self.row2):
            if any(key == "bus_id" for key, _kind in labels):
                self.bus_cell = i
        if self.bus_cell is None:
            raise NpuSmiParseError(f"line {lineno}: second header row has no 'Bus-Id' column")
        keys1 = [k for cell in self.row1 for k, _kind in cell]
        if "npu_id" not in keys1 or "health" not in keys1:
            raise NpuSmiParseError(f"line {lineno}: first header row lacks the 'NPU' or 'Health' column")
        self.keys2 = [k for cell in self.row2 for k, _kind in cell]

    @staticmethod
    def _label(label, lineno):
        key, kind = _LABELS.get(label.lower(), (None, "str"))
        return key, kind


def _assign(labels, cell, out, where):
    """Give each header label of one cell its value from the same cell of a data row."""
    if not labels:
        return
    vals = _values(cell)
    _last_key, last_kind = labels[-1]
    if len(vals) > len(labels):
        if last_kind == "str":
            # A name may contain spaces: the last label takes the rest of the cell.
            parts = cell.split(None, len(labels) - 1)
            vals = list(vals[: len(labels) - 1]) + [parts[-1]]
        else:
            raise NpuSmiParseError(
                f"{where}: {len(vals)} values {_short(cell, 60)!r} under {len(labels)} columns "
                f"{[k for k, _kind in labels]!r}"
            )
    for idx, (key, kind) in enumerate(labels):
        raw = vals[idx] if idx < len(vals) else None
        if key is None:
            continue
        if kind == "pair":
            used_key, total_key = _PAIR_KEYS[key]
            if raw is None:
                out[used_key] = out[total_key] = None
            elif isinstance(raw, tuple):
                out[used_key] = _to_num(raw[0], "num", where)
                out[total_key] = _to_num(raw[1], "num", where)
            elif raw in _NULLS:
                out[used_key] = out[total_key] = None
            else:
                raise NpuSmiParseError(f"{where}: expected 'used / total' for {key}, got {raw!r}")
            continue
        if isinstance(raw, tuple):
            raise NpuSmiParseError("{}: unexpected 'a / b' value {!r} for {}".format(where, "/".join(raw), key))
        if raw is None:
            out[key] = None
        elif kind == "str":
            out[key] = raw if raw not in ("",) else None
        elif kind == "bus":
            out[key] = None if raw in _NULLS else raw
        else:
            out[key] = _to_num(raw, kind, where)


def _empty_info():
    return {
        "npu_smi_version": None,
        "driver_version": None,
        "layout": None,
        "npus": [],
        "processes": [],
        "warnings": [],
        # added keys
        "npus_without_processes": [],
        "process_table": False,
        "driver_install_incomplete": False,
        "elided": False,
        "notes": [],
        # what makes the NPU or chip count of this table untrustworthy (a row without its partner, an NPU that the
        # process table names but the device table lacks): npu_info fails on these
        "inconsistent": [],
    }


def parse_info(text):
    """Parse the output of ``npu-smi info``.

    Returns ``{npu_smi_version, driver_version, layout, npus, processes, warnings, ...}``;
    raises NpuSmiParseError when no device table can be read.
    """
    lines = _lines(text)
    err_kind, err_msg = classify_error(text, "", 0)
    result = _empty_info()
    header = None
    header_row1 = None
    header_width = 0
    proc_header = None
    state = "pre"
    pending = None  # (row1 dict, lineno) waiting for its second row
    npus = []
    by_id = {}

    seen = {}  # (npu_id, chip_id) or bus id -> line: a repeated row would double the chips

    def flush_pending():
        row1, at = pending
        msg = (f"line {at}: NPU {row1['npu_id']} has no second row (Chip/Bus-Id): its chip and HBM values are "
               "unknown and its chip count is a guess (rows lost or repeated in the capture)")
        result["notes"].append(msg)
        result["inconsistent"].append(msg)
        add_chip(row1, {}, at)

    def add_chip(row1, row2, at):
        npu_id = row1["npu_id"]
        # (not the bus id: the two chips of an Atlas 300I Duo card print the same one)
        key = (npu_id, row2.get("chip_id"))
        if key[1] is not None:
            if key in seen:
                raise NpuSmiParseError(
                    f"line {at}: NPU {key[0]} chip {key[1]} is listed a second time (first at line {seen[key]}): the "
                    "capture repeats rows, so its NPU, chip and HBM totals cannot be trusted"
                )
            seen[key] = at
        chip = {k: None for k in _CHIP_KEYS}
        chip.update(row2)
        for key in ("name", "health", "power_w", "temp_c", "hugepages_used", "hugepages_total"):
            chip[key] = row1.get(key)
        npu = by_id.get(npu_id)
        if npu is None:
            npu = {"npu_id": npu_id, "name": None, "health": None, "power_w": None, "temp_c": None, "chips": []}
            by_id[npu_id] = npu
            npus.append(npu)
        npu["chips"].append(chip)

    for lineno, raw_line in enumerate(lines, 1):
        line = _QUOTE_RE.sub("", raw_line).strip()
        if not line:
            continue
        warn = _WARNING_RE.search(line)
        if warn:
            result["warnings"].append(warn.group(0).strip())
            if "not be completely installed" in line:
                result["driver_install_incomplete"] = True
            continue
        if _ELISION_RE.match(line):
            if state in ("devices", "procs"):
                result["elided"] = True
                result["notes"].append(f"line {lineno}: rows elided ('...') in the capture")
            continue
        version = _VERSION_RE.search(line)
        if version:
            if state != "pre" or result["npu_smi_version"] is not None:
                result["notes"].append(f"line {lineno}: a second npu-smi output starts here; ignored")
                break
            result["npu_smi_version"], result["driver_version"] = version.group(1), version.group(2)
            continue
        if _BORDER_RE.match(line) or not line.startswith("|"):
            continue
        if (state != "pre" or header_row1 is not None) and not line.endswith("|"):
            # every table row of npu-smi ends with its border: without it the row (and the capture) was cut, and its
            # last cell (HBM-Usage) may be a prefix of the printed number
            raise NpuSmiParseError(
                f"line {lineno}: table row without its closing '|', the output was cut mid-row: {_short(line)!r}"
            )
        cells = _cells(line)
        lowered = [c.lower() for c in cells]
        if state == "pre":
            if header_row1 is None:
                if "health" in lowered and any("name" in c.split() or c.startswith("name") for c in lowered):
                    header_row1 = (cells, lineno)
                    header_width = len(line)
                continue
            header = _Header(header_row1[0], cells, lineno)
            state = "devices"
            continue
        if any(c.startswith("process id") for c in lowered):
            if state == "procs":
                result["notes"].append(f"line {lineno}: a second process table starts here; ignored")
                break
            proc_header = _proc_header(cells, lineno)
            result["process_table"] = True
            if any(k == "container_pid" for cell in proc_header for k, _kind in cell):
                result["_container_pid_column"] = True
            state = "procs"
            continue
        if state == "devices":
            if "health" in lowered and "name" in " ".join(lowered):
                result["notes"].append(f"line {lineno}: a second device table starts here; ignored")
                break
            if len(cells) != len(header.row1):
                raise NpuSmiParseError(
                    f"line {lineno}: device row has {len(cells)} cells, the header has {len(header.row1)}: "
                    f"{_short(line)!r}"
                )
            where = f"line {lineno}"
            bus_cell = cells[header.bus_cell]
            # an empty or NA bus cell marks a second row only when the first cell is all numbers (chip, phy or
            # device ids): under a name it is the first row with an empty or NA health, which must stay visible
            is_row2 = bool(_BUS_RE.match(bus_cell)) or (
                bus_cell in _NULLS and all(_INT_RE.match(v) for v in cells[0].split()))
            if not is_row2:
                if pending is not None:
                    flush_pending()
                    pending = None
                row1 = {}
                for labels, cell in zip(header.row1, cells):
                    _assign(labels, cell, row1, where)
                if row1.get("npu_id") is None:
                    raise NpuSmiParseError(f"{where}: device row without an NPU id: {_short(line)!r}")
                pending = (row1, lineno)
            else:
                row2 = {}
                for labels, cell in zip(header.row2, cells):
                    _assign(labels, cell, row2, where)
                if pending is None:
                    msg = (f"{where}: second row (Chip/Bus-Id) without its first row: an NPU whose id is unknown "
                           "is missing from the result")
                    result["notes"].append(msg)
                    result["inconsistent"].append(msg)
                    continue
                add_chip(pending[0], row2, lineno)
                pending = None
            continue
        if state == "procs":
            _parse_proc_row(line, cells, proc_header, lineno, result)
            continue

    if header is None:
        if err_kind not in ("ok", "unknown"):
            raise NpuSmiParseError(err_msg)
        if header_row1 is not None:
            raise NpuSmiParseError(f"line {header_row1[1]}: device table header has no second row")
        raise NpuSmiParseError(
            "no 'npu-smi info' device table found (expected a header row with NPU, Name and Health columns "
            "followed by one with Bus-Id); first line: {!r}".format(_short(next((x for x in lines if x.strip()), "")))
        )
    if pending is not None:
        flush_pending()
    listed = {npu["npu_id"] for npu in npus}
    named = sorted({p["npu_id"] for p in result["processes"]} | set(result["npus_without_processes"]))
    missing = [i for i in named if i not in listed]
    if missing:
        msg = "the process table names NPU {} but the device table lists only NPU {}: device rows are missing".format(
            ", ".join(str(i) for i in missing), ", ".join(str(i) for i in sorted(listed)) or "none")
        result["notes"].append(msg)
        result["inconsistent"].append(msg)
    if not result["process_table"]:
        result["notes"].append(
            "no process table after the device table (npu-smi info prints one): if the output was cut, NPUs after "
            + (f"NPU {npus[-1]['npu_id']}" if npus else "the header (none was read)") + " may be missing"
        )

    for npu in npus:
        chips = npu["chips"]
        npu["name"] = next((c["name"] for c in chips if c["name"] is not None), None)
        npu["health"] = worst_health(c["health"] for c in chips)
        npu["power_w"] = next((c["power_w"] for c in chips if c["power_w"] is not None), None)
        npu["temp_c"] = next((c["temp_c"] for c in chips if c["temp_c"] is not None), None)
    result["npus"] = npus
    result["layout"] = _layout(header, header_width, npus, result)
    result.pop("_container_pid_column", None)
    return result


def _layout(header, width, npus, result):
    keys1 = [k for cell in header.row1 for k, _kind in cell]
    if "chip_id" not in header.keys2 and "chip_id" not in keys1:
        return "950"
    if "phy_id" in header.keys2:
        return "a3"
    if "device_id" in header.keys2:
        names = [n["name"] or "" for n in npus]
        if any(n.upper().startswith("310P") for n in names):
            return "310p"
        if any(n == "310" for n in names):
            return "310"
        version = result["npu_smi_version"] or ""
        major = re.match(r"([0-9]{1,6})", version)
        if major and int(major.group(1)) <= 21:
            return "310"
        return "310p"
    if width > 104 or result.get("_container_pid_column"):
        return "wide"
    return "classic"


def _proc_header(cells, lineno):
    plan = []
    for cell in cells:
        low = " ".join(cell.lower().split())
        if low.startswith("process id in container"):
            plan.append([("container_pid", "int")])
        elif low.startswith("process id"):
            plan.append([("pid", "int")])
        elif low.startswith("process name"):
            plan.append([("name", "raw")])
        elif low.startswith("process memory"):
            plan.append([("memory_mb", "num")])
        else:
            labels = []
            for lbl in _header_labels(cell):
                key, kind = _LABELS.get(lbl.lower(), (None, "str"))
                labels.append((key, kind))
            plan.append(labels)
    flat = [k for cell in plan for k, _kind in cell]
    if "pid" not in flat:
        raise NpuSmiParseError(f"line {lineno}: process table header has no 'Process id' column")
    return plan


def _parse_proc_row(line, cells, plan, lineno, result):
    none_found = _NO_PROC_RE.search(line)
    if none_found:
        result["npus_without_processes"].append(int(none_found.group(1)))
        return
    where = f"line {lineno}"
    name_idx = next((i for i, cell in enumerate(plan) if cell and cell[0][0] == "name"), None)
    if len(cells) > len(plan) and name_idx is not None:
        extra = len(cells) - len(plan)
        cells = cells[:name_idx] + ["|".join(cells[name_idx:name_idx + extra + 1])] + cells[name_idx + extra + 1:]
    if len(cells) != len(plan):
        raise NpuSmiParseError(
            f"{where}: process row has {len(cells)} cells, the header has {len(plan)}: {_short(line)!r}"
        )
    proc = {"npu_id": None, "chip_id": None, "pid": None, "name": None, "memory_mb": None}
    has_container = False
    for labels, cell in zip(plan, cells):
        if labels and labels[0][0] == "name":
            proc["name"] = cell.strip()
            continue
        if labels and labels[0][0] == "container_pid":
            has_container = True
        _assign([(k, "int" if k in ("container_pid", "pid") else kd) for k, kd in labels], cell, proc, where)
    if proc["pid"] is None:
        raise NpuSmiParseError(f"{where}: process row without a process id: {_short(line)!r}")
    if proc["npu_id"] is None:
        raise NpuSmiParseError(f"{where}: process row without an NPU id: {_short(line)!r}")
    if has_container:
        result["_container_pid_column"] = True
    proc.setdefault("container_pid", None)
    result["processes"].append(proc)


# --------------------------------------------------------------------------- npu-smi info -m


def parse_info_m(text):
    """Parse ``npu-smi info -m`` (chip mapping) into a list of rows.

    Each row: ``{npu_id, chip_id, chip_logic_id, chip_phy_id, chip_name}`` (``-`` -> None).
    """
    lines = _lines(text)
    kind, msg = classify_error(text, "", 0)
    if kind == "no_device":
        return []
    columns = None
    rows = []
    for lineno, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        if columns is None:
            if re.search(r"NPU ID", line) and re.search(r"Chip (?:ID|Name)", line):
                columns = [_norm_key(c) for c in re.split(r"\t+|\s{2,}", line) if c.strip()]
                if "chip_name" not in columns or columns[-1] != "chip_name":
                    raise NpuSmiParseError(f"line {lineno}: 'npu-smi info -m' header must end with 'Chip Name'")
            continue
        if not re.match(r"^\d", line):
            continue  # trailing text (URLs, prompts)
        parts = line.split(None, len(columns) - 1)
        if len(parts) < len(columns):
            raise NpuSmiParseError(
                f"line {lineno}: mapping row has {len(parts)} values for {len(columns)} columns: {_short(line)!r}"
            )
        row = {"npu_id": None, "chip_id": None, "chip_logic_id": None, "chip_phy_id": None, "chip_name": None}
        for col, value in zip(columns, parts):
            if col == "chip_name":
                row[col] = value.strip()
            else:
                row[col] = _to_num(value, "int", f"line {lineno} column {col}")
        if row["npu_id"] is None:
            raise NpuSmiParseError(f"line {lineno}: mapping row without an NPU id: {_short(line)!r}")
        rows.append(row)
    if columns is None:
        if kind not in ("ok", "unknown"):
            raise NpuSmiParseError(msg)
        raise NpuSmiParseError("no 'NPU ID ... Chip Name' header found in 'npu-smi info -m' output")
    return rows


# --------------------------------------------------------------------------- key : value outputs


_KV_RE = re.compile(r"^\s*([A-Za-z][^:]*?)\s*:\s?(.*?)\s*$")
_CONT_RE = re.compile(r"^\s*:\s?(.*?)\s*$")
_KEY_ALIASES = {"health_status": "health"}


def _norm_key(key):
    key = key.strip().replace("(%)", " pct").replace("%", " pct")
    key = re.sub(r"\(([^)]*)\)", r" \1", key)
    key = re.sub(r"[^A-Za-z0-9]+", "_", key).strip("_").lower()
    return _KEY_ALIASES.get(key, key)


def _kv_value(key, value):
    value = value.strip()
    if value in _NULLS:
        return None
    if "version" in key or key in ("error_code", "serial_number"):
        return value
    if sum(ch.isdigit() for ch in value) > _MAX_DIGITS:
        return value  # not a number npu-smi prints: kept as text, never converted
    if _INT_RE.match(value):
        return int(value)
    if _FLOAT_RE.match(value):
        return float(value)
    return value


def _kv_blocks(text, what):
    """Split ``Key : value`` output into blocks (blank lines and repeated keys start a new block)."""
    kind, msg = classify_error(text, "", 0)
    if kind not in ("ok", "unknown"):
        raise NpuSmiParseError(msg)
    blocks = [[]]
    last = None
    seen = 0
    for raw in _lines(text):
        line = _QUOTE_RE.sub("", raw)
        if not line.strip():
            if blocks[-1]:
                blocks.append([])
            continue
        cont = _CONT_RE.match(line)
        if cont:
            if last is not None:
                last[2].append(cont.group(1))
            continue
        m = _KV_RE.match(line)
        if not m:
            continue
        key = _norm_key(m.group(1))
        if not key:
            continue
        if any(k == key for k, _label, _parts in blocks[-1]):
            blocks.append([])
        last = (key, m.group(1).strip(), [m.group(2)])
        blocks[-1].append(last)
        seen += 1
    if not seen:
        first = _short(next((x for x in _lines(text) if x.strip()), ""))
        raise NpuSmiParseError(f"no 'Key : value' lines found in 'npu-smi info -t {what}' output: {first!r}")
    return [b for b in blocks if b]


def _block_dict(block):
    out = {}
    for key, _label, parts in block:
        joined = "\n".join(p for p in parts if p.strip())
        out[key] = _kv_value(key, joined) if len(parts) == 1 else joined
    return out


def _kv_doc(text, what):
    blocks = [_block_dict(b) for b in _kv_blocks(text, what)]
    result = {}
    chips = []
    for block in blocks:
        if str(block.get("chip_name") or "").lower() == "mcu" and "chip_id" not in block:
            result.setdefault("mcu", block)
            continue
        for key, value in block.items():
            result.setdefault(key, value)
        if "chip_id" in block:
            chips.append({k: v for k, v in block.items() if k not in ("npu_id", "chip_count")})
    result["chips"] = chips
    return result


def parse_board(text):
    """Parse ``npu-smi info -t board -i N [-c C]`` into a flat dict (keys in snake_case).

    E.g. ``software_version``, ``firmware_version``, ``compatibility``, ``pci_device_id``,
    ``chip_count``; with ``-c``: ``chip_name``, ``chip_type``, ``chip_version``.
    """
    return _kv_doc(text, "board")


def parse_memory(text):
    """Parse ``npu-smi info -t memory -i N``: ``hbm_capacity_mb``, ``hbm_clock_speed_mhz``, ``ddr_capacity_mb``..."""
    return _kv_doc(text, "memory")


def parse_usages(text):
    """Parse ``npu-smi info -t usages -i N``: ``hbm_capacity_mb``, ``hbm_usage_rate_pct``, ``aicore_usage_rate_pct``."""
    return _kv_doc(text, "usages")


def parse_common(text):
    """Parse ``npu-smi info -t common -i N``: ``aicore_count``, ``temperature_c``, ``npu_real_time_power_w``...

    An ``mcu`` block (``Chip Name : mcu``) is returned under ``mcu``.
    """
    return _kv_doc(text, "common")


def _health_block(block):
    info = _block_dict(block)
    health = info.get("health")
    code = info.get("error_code")
    codes = [] if code is None else [c for c in re.split(r"[\s,;]+", str(code)) if c and c not in _NULLS]
    lines = []
    for key, _label, parts in block:
        if key == "error_information":
            lines = [p.strip() for p in parts if p.strip() and p.strip() not in _NULLS]
    out = {
        "health": None if health is None else str(health),
        "error_code": None if code is None else str(code),
        "error_codes": codes,
        "error_information": "; ".join(lines) if lines else None,
        "error_information_lines": lines,
        "error_codes_shown": "error_code" in info,
    }
    for key in ("npu_id", "chip_id"):
        if key in info:
            out[key] = info[key]
    return out


def merge_health(chips):
    """One NPU's health from the parsed health of its chips (``parse_health`` results, one per ``-c``).

    The worst health, every error code once, all error texts; ``chips`` keeps each chip's own result.
    """
    chips = [c for c in chips if c]
    if not chips:
        return None
    top = {k: v for k, v in chips[0].items() if k != "chips"}
    if len(chips) > 1:
        top["health"] = worst_health(c["health"] for c in chips)
        codes = []
        for c in chips:
            codes.extend(x for x in c["error_codes"] if x not in codes)
        top["error_codes"] = codes
        texts = [c["error_information"] for c in chips if c["error_information"]]
        top["error_information"] = "; ".join(texts) if texts else None
        top["error_information_lines"] = [x for c in chips for x in c["error_information_lines"]]
        top["error_code"] = " ".join(codes) if codes else None
        top["error_codes_shown"] = any(c.get("error_codes_shown") for c in chips)
    top["chips"] = [{k: v for k, v in c.items() if k != "chips"} for c in chips]
    return top


def parse_health(text):
    """Parse ``npu-smi info -t health -i N [-c C]``.

    With ``-c`` (``Health Status`` / ``Error Code`` / ``Error Information``) one chip; without ``-c`` a 910B/A3
    npu-smi prints only ``Health`` per chip (and the MCU's, which is left out here): no error codes, so
    ``error_codes_shown`` is false and ``error_codes`` empty whatever the state (query each chip with ``-c``).
    Returns ``{health, error_code, error_codes, error_codes_shown, error_information, error_information_lines,
    chips}``; with several chip blocks the top level holds the worst health and all error codes.
    """
    blocks = _kv_blocks(text, "health")
    # a new chip starts at a repeated 'health' key; keep npu_id/chip_id headers with the block that follows
    groups = []
    current = []
    for block in blocks:
        keys = [k for k, _label, _parts in block]
        if "health" in keys and any(k == "health" for b in current for k, _label, _parts in b):
            groups.append(current)
            current = []
        current.append(block)
    if current:
        groups.append(current)
    chips = []
    for group in groups:
        items = [item for b in group for item in b]
        if any(k == "chip_name" and str(_kv_value(k, parts[0])).lower() == "mcu" for k, _label, parts in items):
            continue  # the card's MCU (npu_card_info.c show_ascend_card_mcu_info), not an NPU chip
        chips.append(_health_block(items))
    chips = [c for c in chips if c["health"] is not None or c["error_codes"] or c["error_information"]]
    if not chips:
        raise NpuSmiParseError("no 'Health' or 'Health Status' line found in 'npu-smi info -t health' output")
    return merge_health(chips)


# --------------------------------------------------------------------------- errors


_GROUP_HINT = "HwHiAiUser"
# npu-smi's two dcmi_init texts (npu_smi.c handle_dcmi_initialization) and the codes of dcmi_interface_api.h.
_DCMI_INIT_TEXT = "dcmi module initialize failed"
_DCMI_USED_TEXT = "dcmi model initialized failed, because the device is used"
DCMI_ERR_CODE_INNER_ERR = -8005
DCMI_ERR_CODE_RESOURCE_OCCUPIED = -8020
_RET_RE = re.compile(r"ret is\s{0,8}(-?\d{1,10})")
_HOLDERS_HINT = (
    "find it with 'fuser -v /dev/davinci* /dev/davinci_manager' (or 'lsof /dev/davinci_manager'; a container "
    "started with --device /dev/davinciN shows in 'docker ps' / 'crictl ps'), stop it, then run again"
)


def _dcmi_failure(out):
    """``(text, ret)`` of npu-smi's dcmi_init failure in ``out`` (ret None when not printed), or None.

    Scans line by line with fixed strings and a bounded pattern: linear in the length of the output.
    """
    for line in out.splitlines():
        low = line.lower()
        for text in (_DCMI_USED_TEXT, _DCMI_INIT_TEXT):
            at = low.find(text)
            if at != -1:
                m = _RET_RE.search(low, at + len(text))
                return text, (int(m.group(1)) if m else None)
    return None


def _holders_text(holders):
    parts = []
    for h in holders[:8]:
        what = "{} (pid {})".format(h.get("name") or "?", h.get("pid"))
        if h.get("container"):
            what += " in container " + str(h["container"])[:12]
        parts.append(what + " holds " + ", ".join(h.get("devices") or []))
    more = len(holders) - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def _npu_smi_missing(low):
    """``...npu-smi: no such file or directory`` (a shell or exec error), found without backtracking."""
    for line in low.splitlines():
        at = line.find(": no such file or directory")
        if at > 0:
            before = line[:at].split()
            if before and "npu-smi" in before[-1]:
                return True
    return False


def classify_error(stdout, stderr, rc, holders=None):
    """Recognise the errors npu-smi prints and say what to do.

    Returns ``(kind, message)``; kind is one of ``ok``, ``dcmi_init``, ``device_in_use``, ``device_held``,
    ``invalid_card``, ``not_found``, ``permission``, ``no_device``, ``unknown``.

    - ``device_in_use``: ``dcmi model initialized failed, because the device is used. ret is -8020``
      (DCMI_ERR_CODE_RESOURCE_OCCUPIED): another process or container holds the NPUs. Stop it; no reboot.
    - ``device_held``: any other dcmi_init failure (usually -8005, DCMI_ERR_CODE_INNER_ERR) while ``holders``
      (from :func:`find_device_holders`) is not empty: stop the holders; no reboot.
    - ``dcmi_init``: any other dcmi_init failure. -8005 is a generic inner error: it follows a driver or
      firmware install that still needs its reboot, but also a user outside HwHiAiUser or a container without
      the driver mounts, so it alone does not prove a reboot is pending.
    """
    out = "{}\n{}".format(stdout or "", stderr or "")
    low = out.lower()
    dcmi = _dcmi_failure(out)
    if dcmi is not None:
        text, ret = dcmi
        code = "unknown" if ret is None else ret
        if text == _DCMI_USED_TEXT or ret == DCMI_ERR_CODE_RESOURCE_OCCUPIED:
            msg = (
                f"npu-smi could not initialise DCMI because the device is used (ret {code}, "
                "DCMI_ERR_CODE_RESOURCE_OCCUPIED): another process or container holds the NPUs"
                + (f" ({_holders_text(holders)})" if holders else "")
                + f": {_HOLDERS_HINT}. A reboot does not help unless a driver or firmware install is also pending."
            )
            return ("device_in_use", msg)
        if holders:
            msg = (
                f"npu-smi could not initialise DCMI (ret {code}; -8005 is DCMI_ERR_CODE_INNER_ERR, a generic inner "
                f"error) while other processes hold the NPU devices: {_holders_text(holders)}. Stop them (docker "
                "stop / crictl stop for a container, or end the process) and run again; do not reboot for this."
            )
            return ("device_held", msg)
        msg = (
            f"npu-smi could not initialise the DCMI library (ret {code}; -8005 is DCMI_ERR_CODE_INNER_ERR, a "
            "generic inner error, not proof that a reboot is pending). Usual causes: "
            "(1) a driver or firmware install or upgrade is waiting for its reboot (the installer said a reboot "
            "is needed, or the loaded driver differs from the one in /usr/local/Ascend/driver/version.info): "
            "reboot the node; "
            f"(2) a container or process holds the NPUs: {_HOLDERS_HINT}; "
            f"(3) the user running npu-smi is neither root nor in the {_GROUP_HINT} group: "
            f"run as root (become: true) or add the user to {_GROUP_HINT}; "
            "(4) inside a container the driver is not mounted: pass /dev/davinci*, /dev/davinci_manager, "
            "/dev/devmm_svm, /dev/hisi_hdc and mount /usr/local/Ascend/driver and /usr/local/dcmi."
        )
        return ("dcmi_init", msg)
    if "invalid card id" in low or "error parameter of -i" in low:
        msg = (
            "npu-smi reports 'Invalid card id.': the NPU id given with -i does not exist (or the card dropped off "
            "the PCIe bus). Take ids from 'npu-smi info -l' / 'npu-smi info' and check 'lspci | grep d80' for a "
            "missing card."
        )
        return ("invalid_card", msg)
    if "invalid chip id" in low:
        msg = (
            "npu-smi reports 'Invalid chip id.': the chip id given with -c does not exist on that NPU. Take the "
            "chip ids from 'npu-smi info -m' (an Atlas A3 NPU has chips 0 and 1, a 910B NPU only chip 0)."
        )
        return ("invalid_card", msg)
    if rc == 127 or "command not found" in low or _npu_smi_missing(low):
        msg = (
            "npu-smi was not found: the Ascend NPU driver is not installed (npu-smi comes with the driver package, "
            "in /usr/local/sbin or /usr/local/bin), or it is not mounted into this container. Install the driver "
            "or set npu_smi_path."
        )
        return ("not_found", msg)
    if rc == 126 or "permission denied" in low or "operation not permitted" in low:
        msg = (
            "npu-smi was denied access (permission denied): run it as root (become: true) or as a member of the "
            f"{_GROUP_HINT} group that owns /dev/davinci*."
        )
        return ("permission", msg)
    if "there is no npu card" in low:
        return ("no_device", "npu-smi sees no NPU card on this server: check 'lspci | grep -i huawei' and the driver.")
    if rc not in (0, None):
        text = _short(stderr or stdout or "", 300) or "(no output)"
        return ("unknown", f"npu-smi failed with rc={rc}: {text}")
    return ("ok", "")


_DEVICE_RE = re.compile(r"^/dev/(?:davinci\d{1,4}|davinci_manager|devmm_svm|hisi_hdc)$")
_CONTAINER_RE = re.compile(r"[0-9a-f]{64}")


def find_device_holders(proc="/proc", exclude_pids=None):
    """The processes that hold an NPU device open (``/dev/davinci*``, ``davinci_manager``, ``devmm_svm``,
    ``hisi_hdc``), read from ``proc``: ``[{pid, name, devices, container}]`` sorted by pid.

    ``container`` is the 64-hex container id in the process's cgroup (docker, containerd, CRI-O), else None.
    Processes this user may not inspect are skipped. Read-only.
    """
    exclude = {str(p) for p in (exclude_pids or ())} | {str(os.getpid())}
    holders = []
    try:
        pids = sorted((e for e in os.listdir(proc) if e.isdigit() and e not in exclude), key=int)
    except OSError:
        return holders
    for pid in pids:
        base = os.path.join(proc, pid)
        try:
            fds = os.listdir(os.path.join(base, "fd"))
        except OSError:
            continue
        devices = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(base, "fd", fd))
            except OSError:
                continue
            if _DEVICE_RE.match(target):
                devices.add(target)
        if not devices:
            continue
        name = container = None
        try:
            with open(os.path.join(base, "comm")) as handle:
                name = handle.read().strip() or None
        except OSError:
            pass
        try:
            with open(os.path.join(base, "cgroup")) as handle:
                m = _CONTAINER_RE.search(handle.read())
                container = m.group(0) if m else None
        except OSError:
            pass
        holders.append({"pid": int(pid), "name": name, "devices": sorted(devices), "container": container})
    return holders


# --------------------------------------------------------------------------- facts for roles


# PCI device ids (lspci / '-t board' 'PCI Device ID') -> family; used when the table prints no usable name.
# d803 = Atlas A3 (910_93): driver source scripts/package/custom/driver/common/scripts/ascend_bug_report.sh
# (PCIE_BDF_910_93="19e5:d803") and ascend910_93/scripts/specific_func.inc (device_bdf="0xd803").
_PCI_FAMILY = {"d100": "310", "d500": "310P", "d801": "910A", "d802": "910B", "d803": "A3", "d806": "950"}


def chip_family(name, layout=None, pci_device_id=None):
    """Family of a chip: ``910B``, ``A3``, ``910A``, ``310P``, ``310``, ``310B``, ``950`` or None.

    The PCI device id, when known, wins over the printed name: an Atlas A3 prints ``Ascend910`` (like a 910A
    would) in some layouts, but its device id is d803.
    """
    if layout == "a3":
        return "A3"
    if layout == "950":
        return "950"
    pci = str(pci_device_id or "").lower().replace("0x", "")
    if pci in _PCI_FAMILY:
        return _PCI_FAMILY[pci]
    n = re.sub(r"[\s_-]+", "", str(name or "")).upper()
    n = re.sub(r"^ASCEND", "", n)
    if n.startswith(("91093", "910C")):
        return "A3"
    if n.startswith("910B"):
        return "910B"
    if n.startswith("910"):
        return "910A"  # 910A, 910ProA, 910ProB, 910PremiumA
    for prefix, family in (("310P", "310P"), ("310B", "310B"), ("310", "310"), ("950", "950")):
        if n.startswith(prefix):
            return family
    return None


def _sum(values):
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def summarize(info, boards=None, healths=None, detail_errors=None):
    """Combine ``parse_info`` with per-NPU board/health detail into the facts roles use.

    ``boards``/``healths``: ``{npu_id: parse_board(...)/parse_health(...)}``;
    ``detail_errors``: ``{npu_id: message}`` for NPUs whose detail query failed (e.g. 'Invalid card id.').
    """
    boards = boards or {}
    healths = healths or {}
    detail_errors = detail_errors or {}
    npus = []
    unhealthy = []
    names = []
    families = []
    for src in info.get("npus", []):
        npu = dict(src)
        npu_id = npu["npu_id"]
        chips = npu.get("chips", [])
        npu["hbm_total_mb"] = _sum(c.get("hbm_total_mb") for c in chips)
        npu["hbm_used_mb"] = _sum(c.get("hbm_used_mb") for c in chips)
        npu["hbm_free_mb"] = (
            None if npu["hbm_total_mb"] is None else npu["hbm_total_mb"] - (npu["hbm_used_mb"] or 0)
        )
        board = boards.get(npu_id)
        health = healths.get(npu_id)
        npu["board"] = board
        npu["health_detail"] = health
        npu["detail_error"] = detail_errors.get(npu_id)
        npu["family"] = chip_family(npu.get("name"), info.get("layout"), (board or {}).get("pci_device_id"))
        if npu.get("name"):
            names.append(npu["name"])
        if npu["family"]:
            families.append(npu["family"])
        # every printed word counts, chip by chip: one chip's empty or strange cell is not hidden by another's OK
        states = [c.get("health") for c in chips] or [npu.get("health")]
        if health:
            states += [c.get("health") for c in (health.get("chips") or [health])]
        codes = list((health or {}).get("error_codes") or [])
        verdict, why = health_verdict(states, codes)
        state = worst_health(states)
        npu["verdict"] = verdict
        reasons = [why] if why else []
        if npu["detail_error"]:
            verdict = "unhealthy" if verdict == "healthy" else verdict
            reasons.append(npu["detail_error"])
        if reasons:
            unhealthy.append({
                "npu_id": npu_id,
                "name": npu.get("name"),
                "health": state,
                "verdict": verdict,
                "error_codes": codes,
                "error_information": (health or {}).get("error_information"),
                "reason": "; ".join(reasons),
            })
        npus.append(npu)
    hbm_total = _sum(n["hbm_total_mb"] for n in npus)
    hbm_used = _sum(n["hbm_used_mb"] for n in npus)
    chip_name = max(set(names), key=lambda x: (names.count(x), -names.index(x))) if names else None
    family = max(set(families), key=lambda x: (families.count(x), -families.index(x))) if families else None
    return {
        "npu_smi_version": info.get("npu_smi_version"),
        "driver_version": info.get("driver_version"),
        "layout": info.get("layout"),
        "count": len(npus),
        "npu_ids": [n["npu_id"] for n in npus],
        "chip_count": sum(len(n.get("chips", [])) for n in npus),
        "chip_name": chip_name,
        "chip_names": sorted(set(names)),
        "family": family,
        "healthy": not unhealthy,
        "unhealthy": unhealthy,
        "hbm_total_mb": hbm_total,
        "hbm_used_mb": hbm_used,
        "hbm_free_mb": None if hbm_total is None else hbm_total - (hbm_used or 0),
        "npus": npus,
        "processes": list(info.get("processes", [])),
        "warnings": list(info.get("warnings", [])),
        "driver_install_incomplete": bool(info.get("driver_install_incomplete")),
        "elided": bool(info.get("elided")),
        # what the parser noticed (rows elided, cut or unpaired, a second table ignored): npu_info warns each one
        "notes": list(info.get("notes", [])),
        # the subset that makes count, chip_count or the HBM totals untrustworthy: npu_info fails on it
        "inconsistent": list(info.get("inconsistent", [])),
    }
