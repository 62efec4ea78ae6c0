# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Ascend package versions: ordering, the ``compatible_version*`` ranges, and what to do with a ``.run`` package.

Pure functions (stdlib only): the ``ascend_version_compare`` / ``ascend_version_in_ranges`` filters run them on
the controller and the ``ascend_package_info`` module runs them on the node.

Version strings (docs/sources.md, the driver, firmware and CANN sources): driver ``24.1.rc3``, ``24.1.0``,
``25.0.rc1.1``, ``25.2.0``; firmware ``7.5.0.1.129``; CANN ``8.2.RC1``, ``8.3.RC2``, ``9.1.0``; Huawei's CANN
images name pre-releases ``9.1.0-beta.3`` and dated builds carry a timestamp, ``9.2.0_20260930220649``.
A part ``rcN`` (any case; also ``tN``/``bN`` test and beta builds) sorts *before* a number at the same position,
so ``24.1.rc3`` < ``24.1.0`` < ``25.2.0`` and ``8.2.RC1`` < ``8.2.0``.  Missing trailing parts count as ``0``.
A suffix ``-alpha.N``, ``-beta.N`` or ``-rc.N`` is that pre-release part (``9.1.0-beta.3`` equals
``9.1.0.beta3``); a suffix ``_<8 to 14 digits>`` is a dated build of the version before it, newer than its
alpha, beta and rc builds and older than the release: ``9.1.0-beta.3`` < ``9.1.0-rc.1`` <
``9.1.0_20260930220649`` < ``9.1.0``, dated builds of one version in the order of their timestamps.

Ranges as printed in ``version.info``: ``compatible_version_fw=[7.0.0,7.2.99]`` (driver -> firmware),
``compatible_version_drv=[23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.]`` (firmware -> driver): ``[low,high]`` inclusive;
a trailing dot on ``high`` means "``high`` and every version that extends it" (``23.0.rc3.`` holds
``23.0.rc3.1``); a shorter ``high`` compares only that many parts (``7.2.99`` holds ``7.2.99.5``).
Release families: ``compatible_version=[V100R001C15],[V100R001C17]`` lists the ``Innerversion`` families
(``V100R001C23SPC002B210`` -> ``V100R001C23``) a package works with.
"""

from __future__ import annotations

import functools
import re

KINDS = ("driver", "firmware", "toolkit", "kernels", "nnal")
ACTIONS = ("full", "upgrade", "none", "downgrade", "refuse")

_PART = re.compile(r"^(?:(\d+)|(rc|t|b|alpha|beta)(\d*))$", re.IGNORECASE)
_PRE_SUFFIX = re.compile(r"^(?P<base>.+)-(?P<word>alpha|beta|rc)(?:\.?(?P<num>\d+))?$", re.IGNORECASE)
_DATED_SUFFIX = re.compile(r"^(?P<base>.+)_(?P<stamp>\d{8,14})$")
_PRE_RANK = {"alpha": 0, "t": 0, "b": 1, "beta": 1, "rc": 2}
# rank of a dated build among the pre-release parts: after rc, before the release itself
_DATED_RANK = 3
# a number is (1, n, 0), a pre-release part (0, rank, n); a missing part counts as the number 0
_PAD = (1, 0, 0)


class AscendVersionError(ValueError):
    """A text that is not an Ascend version."""


def _not_a_version(version, detail=""):
    return AscendVersionError(f"not an Ascend version: {version!r}{detail} (expected e.g. 25.2.0, 24.1.rc3, "
                              f"8.2.RC1, 7.7.0.1.231, 9.1.0-beta.3, 9.2.0_20260930220649)")


def version_key(version):
    """The parts of an Ascend version; raises :class:`AscendVersionError` for anything else.

    Keys of different lengths compare as :func:`compare_versions` does only once padded: sort with
    :data:`sort_key`.
    """
    if version is None or isinstance(version, bool):
        raise _not_a_version(version)
    text = str(version).strip()
    if text[:1] in ("v", "V") and text[1:2].isdigit():
        text = text[1:]
    tail = []
    dated = _DATED_SUFFIX.match(text)
    if dated:
        text, tail = dated.group("base"), [(0, _DATED_RANK, int(dated.group("stamp")))]
    pre = _PRE_SUFFIX.match(text)
    if pre:
        text = pre.group("base")
        tail.insert(0, (0, _PRE_RANK[pre.group("word").lower()], int(pre.group("num") or 0)))
    if not text or not text[0].isdigit():
        raise _not_a_version(version)
    parts = []
    for raw in text.strip(".").split("."):
        match = _PART.match(raw)
        if not match:
            raise _not_a_version(version, f" (part {raw!r})")
        if match.group(1) is not None:
            parts.append((1, int(match.group(1)), 0))
        else:
            # a pre-release part sorts below every number: rank 0, then its kind and its number
            parts.append((0, _PRE_RANK[match.group(2).lower()], int(match.group(3) or 0)))
    return tuple(parts + tail)


def compare_versions(a, b):
    """-1, 0 or 1 as Ascend version ``a`` is older than, equal to or newer than ``b``."""
    ka, kb = version_key(a), version_key(b)
    width = max(len(ka), len(kb))
    ka += (_PAD,) * (width - len(ka))
    kb += (_PAD,) * (width - len(kb))
    return (ka > kb) - (ka < kb)


sort_key = functools.cmp_to_key(compare_versions)
"""``sorted(versions, key=sort_key)``: oldest first, in the order of :func:`compare_versions`."""


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
    """A version / install file -> dict; lines that are neither form are ignored.

    Two forms are real: ``key=value`` (driver and firmware ``version.info``, ``ascend_toolkit_install.info``) and
    ``key : value``, indented, as NNAL writes its ``nnal/atb/<version>/version.info``::

            Ascend-cann-atb : 8.0.0
            Ascend-cann-atb Version : 8.0.0.B100
            Platform : aarch64

    (https://github.com/vllm-project/vllm-ascend/issues/451). ``=`` wins when a line holds both
    (``runtime_running_version=[7.6.0.1.220:8.0.0]``).
    """
    out = {}
    for line in (text or "").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        sep = "=" if "=" in stripped else (":" if ":" in stripped else None)
        if sep:
            key, value = stripped.split(sep, 1)
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
    """The package version of a parsed version.info / ascend_toolkit_install.info / NNAL version.info.

    A kernels package's ``opp_kernel/version.info`` may carry the inner build in ``Version`` (``8.3.T5.0.B028``)
    and the release in ``version_dir`` (``8.3.RC2``); the release is what the role compares, so ``version_dir``
    wins where it is given (seen in a public install note, no stable source: docs/sources.md, "CANN").
    """
    return kv_get(info, "version_dir", "Version", "package_version", "Ascend-cann-atb")


# Each CANN generation's layout, once (docs/sources.md, the CANN sources). ``since`` is the first release of the row.
#  - <= 8.3: ``<root>/ascend-toolkit/<version>`` and its link ``ascend-toolkit/latest``; set_env.sh sets
#    ASCEND_TOOLKIT_HOME=<root>/ascend-toolkit/latest (Huawei's image
#    https://github.com/Ascend/cann-container-image/blob/c5a67b3/cann/8.3.rc2-910b-ubuntu22.04-py3.11/Dockerfile#L110);
#    kernels package ``Ascend-cann-kernels-<npu>_<version>_linux-<arch>.run`` (vllm-ascend v0.11.0 installation.md).
#  - >= 8.5 (8.5.x and 9.x alike): ``<root>/cann-<version>``; ``<root>/ascend-toolkit/set_env.sh`` is still there
#    and sets ASCEND_TOOLKIT_HOME=ASCEND_HOME_PATH=<root>/cann-<version> (Huawei's images for 8.5.1, 9.0.0 and
#    9.1.0-beta.3, .../cann/8.5.1-910b-ubuntu22.04-py3.11/Dockerfile#L106; vllm-ascend issue #6271 with 8.5.0);
#    the install record is ``<root>/cann/<arch>-linux/ascend_toolkit_install.info`` (hiascend CANN 8.5.0
#    installation guide, "File Paths"); the kernels package became ``Ascend-cann-<npu>-ops_<version>_linux-<arch>.run``
#    with 8.5.0 (vllm-ascend v0.14.0rc1 .. v0.23.0 installation.md) and records its version beside the toolkit's,
#    in ``<root>/cann/<arch>-linux/ascend_ops_install.info`` (hicann/ops-math docs/zh/install/quick_install.md,
#    "环境验证": ``cat /usr/local/Ascend/cann/${arch}-linux/ascend_ops_install.info``).
# NNAL is ``<root>/nnal/atb/<version>`` + ``latest`` + ``nnal/atb/set_env.sh`` in every generation
# (https://github.com/hicann/ascend-transformer-boost/blob/ddcc8b6/scripts/install.sh#L387-L401).
CANN_GENERATIONS = (
    {"name": "ascend-toolkit", "since": None,
     "kernels_file": "Ascend-cann-kernels-{npu}_{version}_linux-{arch}.run",
     "home": "{root}/ascend-toolkit/latest",
     "toolkit_info": "{root}/ascend-toolkit/latest/{arch}-linux/ascend_toolkit_install.info",
     "kernels_info": "{root}/ascend-toolkit/latest/opp_kernel/version.info",
     # One version's own directory: what ascend-toolkit/latest points at when that version is the latest.
     "pinned_home": "{root}/ascend-toolkit/{version}"},
    {"name": "cann", "since": "8.5.0",
     "kernels_file": "Ascend-cann-{npu}-ops_{version}_linux-{arch}.run",
     "home": "{root}/cann-{version}",
     "toolkit_info": "{root}/cann/{arch}-linux/ascend_toolkit_install.info",
     "kernels_info": "{root}/cann/{arch}-linux/ascend_ops_install.info",
     # cann -> cann-<version> (the records above are read through that link)
     "pinned_home": "{root}/cann-{version}"},
)
CANN_TOOLKIT_FILE = "Ascend-cann-toolkit_{version}_linux-{arch}.run"
CANN_NNAL_FILE = "Ascend-cann-nnal_{version}_linux-{arch}.run"


def cann_generation(version):
    """The row of :data:`CANN_GENERATIONS` that CANN ``version`` belongs to."""
    version_key(version)   # raises AscendVersionError for anything else
    chosen = CANN_GENERATIONS[0]
    for row in CANN_GENERATIONS:
        if row["since"] is None or compare_versions(version, row["since"]) >= 0:
            chosen = row
    return chosen


def cann_layout(version, arch, install_path="/usr/local/Ascend", npu_type="910b"):
    """Everything the collection needs to know about CANN ``version`` on ``arch``, from its generation's row.

    ``files``: the three ``.run`` names (toolkit, kernels/ops, nnal); ``toolkit_set_env`` / ``nnal_set_env``: the
    scripts to source; ``home``: the ASCEND_TOOLKIT_HOME (and ASCEND_HOME_PATH) the toolkit's set_env.sh sets;
    ``atb_home``: ATB_HOME_PATH without its ``cxx_abi_N`` directory; ``info``: the installed version files.
    """
    row = cann_generation(version)
    root = str(install_path).rstrip("/") or "/"
    fields = {"version": str(version).strip(), "arch": arch, "npu": npu_type, "root": root}
    return {
        "generation": row["name"],
        "files": {"toolkit": CANN_TOOLKIT_FILE.format(**fields),
                  "kernels": row["kernels_file"].format(**fields),
                  "nnal": CANN_NNAL_FILE.format(**fields)},
        "toolkit_set_env": f"{root}/ascend-toolkit/set_env.sh",
        "nnal_set_env": f"{root}/nnal/atb/set_env.sh",
        "home": row["home"].format(**fields),
        "atb_home": f"{root}/nnal/atb/latest/atb",
        "info": {"toolkit": row["toolkit_info"].format(**fields), "kernels": row["kernels_info"].format(**fields),
                 "nnal": f"{root}/nnal/atb/latest/version.info"},
        # This version alone, whichever version latest (or cann) names: for versions side by side (generations)
        "pinned": pinned_layout(version, arch, install_path),
    }


def pinned_layout(version, arch, install_path="/usr/local/Ascend"):
    """CANN ``version``'s own directories and records, side by side with other versions.

    Every CANN package installs into a version directory under one root and moves a shared link to it (the package
    framework's ``multi_version_install`` and its latest manager, docs/sources.md "CANN: versions side by side"):
    ``ascend-toolkit/latest`` -> ``<version>`` up to 8.3, ``cann`` -> ``cann-<version>`` from 8.5, and
    ``nnal/atb/latest`` -> ``<version>``. The shared records (:func:`cann_layout`'s ``info``) are read through those
    links; these are the same files under the version's own directory, so they answer for that version only.
    ``home``: its ASCEND_TOOLKIT_HOME; ``atb_home``: its ATB_HOME_PATH without ``cxx_abi_N``.
    """
    row = cann_generation(version)
    root = str(install_path).rstrip("/") or "/"
    fields = {"version": str(version).strip(), "arch": arch, "root": root}
    home = row["pinned_home"].format(**fields)
    if row["name"] == "cann":
        kernels = f"{home}/{arch}-linux/ascend_ops_install.info"
    else:
        kernels = f"{home}/opp_kernel/version.info"
    return {
        "home": home,
        "atb_home": f"{root}/nnal/atb/{fields['version']}/atb",
        "info": {"toolkit": f"{home}/{arch}-linux/ascend_toolkit_install.info", "kernels": kernels,
                 "nnal": f"{root}/nnal/atb/{fields['version']}/version.info"},
    }


def installed_files(kind, install_path, arch):
    """Where an installed package records its version, newest CANN generation first."""
    path = install_path.rstrip("/") or "/"
    if kind in ("driver", "firmware"):
        return [f"{path}/{kind}/version.info"]
    fields = {"root": path, "arch": arch}
    out = []
    for row in reversed(CANN_GENERATIONS):
        candidate = f"{path}/nnal/atb/latest/version.info" if kind == "nnal" else row[f"{kind}_info"].format(**fields)
        if candidate not in out:
            out.append(candidate)
    return out


def package_info_file(kind):
    """Relative paths, most likely first, of the version file inside a package's archive.

    The driver's installer reads ``./version.info`` at the top of its extracted archive (env_check.sh
    getVersionInRunFile, ver_check.sh; https://github.com/verylucky01/driver/blob/e29d066/scripts/package/custom/
    driver/common/scripts/env_check.sh#L366-L372); ``driver/version.info`` and ``firmware/version.info`` are what the
    installs leave under the install path, kept first for packages laid out that way.
    """
    return {
        "driver": ["driver/version.info", "version.info"],
        "firmware": ["firmware/version.info", "version.info"],
        "toolkit": ["version.info", "ascend_toolkit_install.info"],
        "kernels": ["version.info", "opp_kernel/version.info"],
        "nnal": ["version.info", "atb/version.info"],
    }[kind]


# The version in a package's file name, per kind (the names of docs/sources.md, "Package names").
_NAME_VERSION = {
    "driver": re.compile(r"^Ascend-hdk-[^_]+-npu-driver_(?P<v>[^_]+(?:_\d{8,14})?)_linux-[^_]+\.run$"),
    "firmware": re.compile(r"^Ascend-hdk-[^_]+-npu-firmware_(?P<v>.+)\.run$"),
    "toolkit": re.compile(r"^Ascend-cann-toolkit_(?P<v>.+)_linux-[^_]+\.run$"),
    "kernels": re.compile(r"^Ascend-cann-(?:kernels-[^_]+|[^_]+-ops)_(?P<v>.+)_linux-[^_]+\.run$"),
    "nnal": re.compile(r"^Ascend-cann-nnal_(?P<v>.+)_linux-[^_]+\.run$"),
}
_PACKAGE_NAME_KIND = (("toolkit", "Ascend-cann-toolkit"), ("nnal", "Ascend-cann-nnal"),
                      ("kernels", "Ascend-cann-kernels"), ("kernels", "-ops"))


def name_version(kind, filename):
    """The version in ``filename`` when it is a ``kind`` package's name, else None."""
    match = _NAME_VERSION[kind].match(filename.rsplit("/", 1)[-1])
    if not match:
        return None
    try:
        version_key(match.group("v"))
    except AscendVersionError:
        return None
    return match.group("v")


def info_kind(info):
    """The kind a version file's ``package_name`` names (CANN packages), else None."""
    name = kv_get(info, "package_name") or ""
    for kind, marker in _PACKAGE_NAME_KIND:
        if marker in name:
            return kind
    return None


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
    """Why a CANN package and a driver do not go together: the toolkit's ``compatible_version`` lists the driver
    release families it runs on (CANN 8.5.0: ``[V100R001C15],...,[V100R001C23]``, vllm-ascend issue #6271).

    A driver's own ``compatible_version`` is not a list of CANN families: driver 24.1.rc3 lists
    ``[V100R001C13]..[V100R001C19]`` yet runs CANN 8.0.0 (vllm-ascend issue #451), so it is not checked.
    """
    problems = []
    cann_lists = kv_get(cann, "compatible_version")
    drv_inner = kv_get(driver, "Innerversion")
    if cann_lists and drv_inner and not family_listed(drv_inner, cann_lists):
        problems.append(f"CANN {cann.get('version')} works with the driver families {cann_lists} "
                        f"(compatible_version), not with driver {driver.get('version')} ({drv_inner}, family "
                        f"{family(drv_inner)})")
    return problems
