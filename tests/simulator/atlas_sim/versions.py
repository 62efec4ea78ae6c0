"""Ascend version strings and the ``compatible_version`` ranges of the real packages.

Versions look like ``24.1.rc3``, ``25.2.0``, ``7.7.0.1.231``, ``8.3.RC2``.  A part ``rcN`` sorts before the
release ``0`` at the same position (``24.1.rc3`` < ``24.1.0``).  In a range ``[lo,hi]`` a trailing dot on
``hi`` (``[23.0.rc3,23.0.rc3.]``, as printed in the real firmware ``version.info``) means "``hi`` and every
version that extends it"; a shorter ``hi`` (``7.2.99``) compares only that many parts.
"""

import re

_PART = re.compile(r"^(?:(\d+)|(rc|RC|t|T|b|B)(\d*))$")


def key(version):
    parts = []
    for raw in str(version).strip().strip(".").split("."):
        match = _PART.match(raw)
        if not match:
            parts.append((2, 0, raw))
        elif match.group(1) is not None:
            parts.append((1, int(match.group(1)), ""))
        else:
            parts.append((0, int(match.group(3) or 0), match.group(2).lower()))
    return tuple(parts)


def compare(a, b):
    ka, kb = key(a), key(b)
    width = max(len(ka), len(kb))
    pad = (1, 0, "")
    ka = ka + (pad,) * (width - len(ka))
    kb = kb + (pad,) * (width - len(kb))
    return (ka > kb) - (ka < kb)


def in_range(version, low, high):
    """True when ``low <= version <= high`` with the prefix rules above."""
    if compare(version, low) < 0:
        return False
    prefix = high.endswith(".")
    khigh = key(high)
    kver = key(version)[:len(khigh)]
    if prefix:
        return kver <= khigh
    kver = kver + ((1, 0, ""),) * (len(khigh) - len(kver))
    return kver <= khigh


def parse_ranges(text):
    """``[7.0.0,7.2.99],[8.0.0,8.0.0.]`` -> [("7.0.0", "7.2.99"), ...]; ``[V100R001C15]`` -> [("V100R001C15",)]."""
    out = []
    for item in re.findall(r"\[([^\]]*)\]", text or ""):
        out.append(tuple(part.strip() for part in item.split(",") if part.strip()))
    return out


def version_in_ranges(version, text):
    return any(len(r) == 2 and in_range(version, r[0], r[1]) for r in parse_ranges(text))


def family(innerversion):
    """``V100R001C23SPC002B210`` -> ``V100R001C23`` (the release family that compatible lists name)."""
    match = re.match(r"^(V\d+R\d+C\d+)", innerversion or "")
    return match.group(1) if match else ""


def family_listed(innerversion, text):
    fam = family(innerversion)
    return bool(fam) and any(fam in r for r in parse_ranges(text))
