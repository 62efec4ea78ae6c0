"""Ascend version strings and the ``compatible_version`` ranges of the real packages.

Versions look like ``24.1.rc3``, ``25.2.0``, ``7.7.0.1.231``, ``8.3.RC2``.  A part ``rcN`` sorts before the
release ``0`` at the same position (``24.1.rc3`` < ``24.1.0``).  In a range ``[lo,hi]`` a trailing dot on
``hi`` (``[23.0.rc3,23.0.rc3.]``, as printed in the real firmware ``version.info``) means "``hi`` and every
version that extends it"; a shorter ``hi`` (``7.2.99``) compares only that many parts.
"""

import re

_PART = re.compile(r"^(?:(\d+)|(rc|RC|t|T|b|B)(\d*))$")
# Huawei's pre-release and dated builds: 9.1.0-beta.3 (CANN images), 9.2.0_20260930220649; the same order as the
# collection's ascend_version_compare: alpha < beta < rc < dated build < release
_PRE_SUFFIX = re.compile(r"^(.+)-(alpha|beta|rc)(?:\.?(\d+))?$", re.IGNORECASE)
_DATED_SUFFIX = re.compile(r"^(.+)_(\d{8,14})$")
_RANK = {"alpha": 0, "t": 0, "b": 1, "beta": 1, "rc": 2}
_PAD = (1, 0, 0, "")


def key(version):
    text = str(version).strip()
    tail = []
    dated = _DATED_SUFFIX.match(text)
    if dated:
        text, tail = dated.group(1), [(0, 3, int(dated.group(2)), "")]
    pre = _PRE_SUFFIX.match(text)
    if pre:
        text = pre.group(1)
        tail.insert(0, (0, _RANK[pre.group(2).lower()], int(pre.group(3) or 0), ""))
    parts = []
    for raw in text.strip(".").split("."):
        match = _PART.match(raw)
        if not match:
            parts.append((2, 0, 0, raw))
        elif match.group(1) is not None:
            parts.append((1, 0, int(match.group(1)), ""))
        else:
            parts.append((0, _RANK[match.group(2).lower()], int(match.group(3) or 0), ""))
    return tuple(parts + tail)


def compare(a, b):
    ka, kb = key(a), key(b)
    width = max(len(ka), len(kb))
    pad = _PAD
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
    kver = kver + (_PAD,) * (len(khigh) - len(kver))
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
