# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Ascend package versions: ordering, the ``compatible_version*`` ranges, and what to do with a ``.run`` package.

Pure functions (stdlib only): the ``ascend_version_compare`` / ``ascend_version_in_ranges`` filters run them on
the controller and the ``ascend_package_info`` module runs them on the node.

Version strings (``shared/research/ascend-facts.md`` sections 5 and 6): driver ``24.1.rc3``, ``24.1.0``,
``25.0.rc1.1``, ``25.2.0``; firmware ``7.5.0.1.129``; CANN ``8.2.RC1``, ``8.3.RC2``, ``9.1.0``.  A part ``rcN``
(any case; also ``tN``/``bN`` test and beta builds) sorts *before* a number at the same position, so
``24.1.rc3`` < ``24.1.0`` < ``25.2.0`` and ``8.2.RC1`` < ``8.2.0``.  Missing trailing parts count as ``0``.

Ranges as printed in ``version.info``: ``compatible_version_fw=[7.0.0,7.2.99]`` (driver -> firmware),
``compatible_version_drv=[23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.]`` (firmware -> driver): ``[low,high]`` inclusive;
a trailing dot on ``high`` means "``high`` and every version that extends it" (``23.0.rc3.`` holds
``23.0.rc3.1``); a shorter ``high`` compares only that many parts (``7.2.99`` holds ``7.2.99.5``).
Release families: ``compatible_version=[V100R001C15],[V100R001C17]`` lists the ``Innerversion`` families
(``V100R001C23SPC002B210`` -> ``V100R001C23``) a package works with.
"""

from __future__ import annotations

import re

KINDS = ("driver", "firmware", "toolkit", "kernels", "nnal")
ACTIONS = ("full", "upgrade", "none", "downgrade", "refuse")

_PART = re.compile(r"^(?:(\d+)|(rc|t|b|alpha|beta)(\d*))$", re.IGNORECASE)
_PRE_RANK = {"alpha": 0, "t": 0, "b": 1, "beta": 1, "rc": 2}
_PAD = (1, 0)


class AscendVersionError(ValueError):
    """A text that is not an Ascend version."""


def version_key(version):
    """Sort key of an Ascend version; raises :class:`AscendVersionError` for anything else."""
    if version is None or isinstance(version, bool):
        raise AscendVersionError(f"not an Ascend version: {version!r}")
    text = str(version).strip()
    if text[:1] in ("v", "V") and text[1:2].isdigit():
        text = text[1:]
    if not text or not text[0].isdigit():
        raise AscendVersionError(f"not an Ascend version: {version!r} (expected e.g. 25.2.0, 24.1.rc3, 8.2.RC1, "
                                 f"7.7.0.1.231)")
    parts = []
    for raw in text.strip(".").split("."):
        match = _PART.match(raw)
        if not match:
            raise AscendVersionError(f"not an Ascend version: {version!r} (part {raw!r}; expected numbers and "
                                     f"rcN, e.g. 25.2.0, 24.1.rc3, 8.2.RC1, 7.7.0.1.231)")
        if match.group(1) is not None:
            parts.append((1, int(match.group(1))))
        else:
            # a pre-release part sorts below every number: rank 0, then its kind and its number
            parts.append((0, _PRE_RANK[match.group(2).lower()] * 1000000 + int(match.group(3) or 0)))
    return tuple(parts)


def compare_versions(a, b):
    """-1, 0 or 1 as Ascend version ``a`` is older than, equal to or newer than ``b``."""
    ka, kb = version_key(a), version_key(b)
    width = max(len(ka), len(kb))
    ka += (_PAD,) * (width - len(ka))
    kb += (_PAD,) * (width - len(kb))
    return (ka > kb) - (ka < kb)


def parse_ranges(text):
    """``[7.0.0,7.2.99],[8.0.0,8.0.0.]`` -> ``[("7.0.0", "7.2.99"), ...]``; ``[V100R001C15]`` -> ``[("V100R001C15",)]``.
    """
    out = []
    for item in re.findall(r"\[([^\]]*)\]", text or ""):
        out.append(tuple(part.strip() for part in item.split(",") if part.strip()))
    return out


def in_range(version, low, high):
    """True when ``low <= version <= high`` with the rules of the module doc (trailing dot, shorter high)."""
    if compare_versions(version, low) < 0:
        return False
    khigh = version_key(high)
    kver = version_key(version)
    if high.strip().endswith("."):
        return kver[:len(khigh)] <= khigh
    width = len(khigh)
    return (kver + (_PAD,) * width)[:width] <= khigh


def version_in_ranges(version, text):
    """True when ``version`` lies in one of the ``[low,high]`` ranges of ``text``."""
    return any(len(r) == 2 and in_range(version, r[0], r[1]) for r in parse_ranges(text))


def family(innerversion):
    """``V100R001C23SPC002B210`` -> ``V100R001C23``; empty string when it is not an Innerversion."""
    match = re.match(r"^\s*(V\d+R\d+C\d+)", innerversion or "")
    return match.group(1) if match else ""


def family_listed(innerversion, text):
    """True when the family of ``innerversion`` is one of the ``[family]`` entries of ``text``."""
    fam = family(innerversion)
    return bool(fam) and any(fam in r for r in parse_ranges(text))


def parse_kv(text):
    """``key=value`` lines (version.info, *install.info) -> dict; other lines are ignored."""
    out = {}
    for line in (text or "").splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def kv_get(info, *keys):
    """The first of ``keys`` in ``info``, compared without letter case; None when absent or empty."""
    lowered = {k.lower(): v for k, v in (info or {}).items()}
    for key in keys:
        value = lowered.get(key.lower())
        if value:
            return value
    return None


def info_version(info):
    """The package version of a parsed version.info / ascend_toolkit_install.info / NNAL version.info."""
    return kv_get(info, "Version", "package_version", "Ascend-cann-atb")


def installed_files(kind, install_path, arch):
    """Where an installed package records its version, most specific first."""
    path = install_path.rstrip("/") or "/"
    toolkit = f"{path}/ascend-toolkit/latest"
    return {
        "driver": [f"{path}/driver/version.info"],
        "firmware": [f"{path}/firmware/version.info"],
        # CANN <= 8.3 layout, then the CANN 8.5+ layout (/usr/local/Ascend/cann/<arch>-linux)
        "toolkit": [f"{toolkit}/{arch}-linux/ascend_toolkit_install.info",
                    f"{path}/cann/{arch}-linux/ascend_toolkit_install.info"],
        "kernels": [f"{toolkit}/opp_kernel/version.info", f"{path}/cann/opp_kernel/version.info"],
        "nnal": [f"{path}/nnal/atb/latest/version.info"],
    }[kind]


def package_info_file(kind):
    """Relative paths, most likely first, of the version file inside an extracted (``--noexec --extract``) package."""
    return {
        "driver": ["driver/version.info"],
        "firmware": ["firmware/version.info"],
        "toolkit": ["version.info", "ascend_toolkit_install.info"],
        "kernels": ["version.info", "opp_kernel/version.info"],
        "nnal": ["version.info", "atb/version.info"],
    }[kind]


def plan_action(installed, wanted, allow_downgrade=False):
    """What to do to go from ``installed`` (None: absent) to ``wanted``.

    ``full`` (absent), ``upgrade`` (older), ``none`` (equal), ``downgrade`` (newer and allowed) or ``refuse``
    (newer and not allowed).
    """
    if not installed:
        return "full"
    order = compare_versions(installed, wanted)
    if order < 0:
        return "upgrade"
    if order == 0:
        return "none"
    return "downgrade" if allow_downgrade else "refuse"


def driver_firmware_problems(driver, firmware):
    """Why a driver and a firmware do not go together (empty list: they do).

    ``driver`` and ``firmware`` are dicts with ``version`` and the ``compatible_version_fw`` /
    ``compatible_version_drv`` text of their version.info; a range that is absent is not checked.
    """
    problems = []
    fw_ranges = kv_get(driver, "compatible_version_fw")
    drv_ranges = kv_get(firmware, "compatible_version_drv")
    if fw_ranges and not version_in_ranges(firmware["version"], fw_ranges):
        problems.append(f"driver {driver['version']} accepts firmware {fw_ranges} (compatible_version_fw), "
                        f"not firmware {firmware['version']}")
    if drv_ranges and not version_in_ranges(driver["version"], drv_ranges):
        problems.append(f"firmware {firmware['version']} accepts driver {drv_ranges} (compatible_version_drv), "
                        f"not driver {driver['version']}")
    return problems


def cann_driver_problems(cann, driver):
    """Why a CANN package and a driver do not go together, from the families their version.info list."""
    problems = []
    cann_lists = kv_get(cann, "compatible_version")
    drv_inner = kv_get(driver, "Innerversion")
    if cann_lists and drv_inner and not family_listed(drv_inner, cann_lists):
        problems.append(f"CANN {cann.get('version')} works with the driver families {cann_lists} "
                        f"(compatible_version), not with driver {driver.get('version')} ({drv_inner}, family "
                        f"{family(drv_inner)})")
    drv_lists = kv_get(driver, "compatible_version")
    cann_inner = kv_get(cann, "innerversion")
    if drv_lists and cann_inner and not family_listed(cann_inner, drv_lists):
        problems.append(f"driver {driver.get('version')} works with the CANN families {drv_lists} "
                        f"(compatible_version), not with CANN {cann.get('version')} ({cann_inner})")
    return problems
