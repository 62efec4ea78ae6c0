# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The order of the driver and firmware installers, and whether the node must reboot afterwards.

Pure functions (stdlib only), run by the ``ascend_install_sequence``, ``ascend_install_outlook`` and
``ascend_reboot_plan`` filters.

Order (Huawei's install guides, e.g. https://www.hiascend.com/document/detail/zh/mindie/100/envdeployment/instg/
mindie_instg_0006.html and https://www.hiascend.com/document/detail/en/CANNCommunityEdition/900/softwareinst/instg/
instg_0005.html): a first installation (no driver on the node) goes driver, then firmware; an overwrite installation
or an upgrade (a driver is installed) goes firmware, then driver.

Reboot: only on the installers' own word or on evidence that the loaded driver is not the one on disk.  The driver's
installer prints ``Driver package installed successfully! The new version takes effect immediately.`` when its
modules were loaded (a first install, or a hot reset that worked) and ``... Reboot needed for installation/upgrade to
take effect!`` (or ``Kernel modules can not be removed, reboot needed ...``) otherwise
(https://github.com/verylucky01/driver/blob/e29d066/scripts/package/custom/driver/common/scripts/driver_install.sh#L278-L348);
the firmware's ends ``Firmware package installed successfully! Reboot now or after driver installation for the
installation/upgrade to take effect.`` (install log of llm-action's 910 guide).  Lines are printed with ANSI colours
(``drvColorEcho``: ``echo -e``), so they are matched without them.  A failing ``dcmi_init`` alone is NOT a reason to
reboot: -8005 is the generic ``DCMI_ERR_CODE_INNER_ERR`` and -8020 ``DCMI_ERR_CODE_RESOURCE_OCCUPIED``
(https://github.com/verylucky01/driver/blob/e29d066/src/custom/include/dcmi_interface_api.h#L1978-L1991): a container
holding the devices gives them as well.  The loaded driver's version is the ``Version`` in the header of
``npu-smi info``: ``dcmi_get_driver_version`` asks the running devices (``dsmi_get_version``)
(https://github.com/verylucky01/driver/blob/e29d066/src/custom/dev_prod/user/dcmi/dcmi_interface/src/dcmi_basic_info_intf.c#L666-L720).
"""

from __future__ import annotations

import base64
import binascii
import re

KINDS = ("driver", "firmware")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# "Reboot needed for installation/upgrade to take effect!", "reboot needed for ..." (ko_abort warning),
# "Reboot now or after driver installation for the installation/upgrade to take effect."
_REBOOT = re.compile(r"reboot (?:needed|now)\b", re.IGNORECASE)
_IMMEDIATE = re.compile(r"takes effect immediately", re.IGNORECASE)
# "[Driver] [2023-07-10 22:25:04] [INFO]" / "[Firmware] [...] [WARNING]" before the message
_PREFIX = re.compile(r"^\s*(?:\[[^\]]*\]\s*){1,3}")


class PlanError(ValueError):
    """An input the functions cannot use."""


def install_sequence(order, driver_installed):
    """The kinds of ``order`` in the order to run their installers.

    ``order``: the packages the role manages, in the order of a first installation (``[driver, firmware]``).
    ``driver_installed``: whether a driver is installed before this run (its version, or a bool).
    With a driver installed (overwrite or upgrade) the firmware goes first, whatever ``order`` says.
    """
    if not isinstance(order, (list, tuple)) or not order:
        raise PlanError(f"order must be a non-empty list of driver/firmware, got {order!r}")
    unknown = [kind for kind in order if kind not in KINDS]
    if unknown or len(set(order)) != len(order):
        raise PlanError(f"order must list driver and/or firmware once each, got {list(order)!r}")
    if driver_installed:
        return [kind for kind in ("firmware", "driver") if kind in order]
    return list(order)


ACTIONS_TO_RUN = ("full", "upgrade", "downgrade")


def package_results(read, kept=None):
    """The ``ascend_package_info`` results of the role's two reads, ``read``'s then ``kept``'s: both registered
    results (``{"results": [...]}``) or lists of results. ``kept`` (the packages the order leaves alone) is a skipped
    result without ``results`` when the order holds both packages."""
    out = []
    for name, value in (("read", read), ("kept", kept)):
        if value is None:
            continue
        if isinstance(value, dict):
            if value.get("skipped") and "results" not in value:
                continue
            value = value.get("results")
        if not isinstance(value, (list, tuple)) or not all(isinstance(item, dict) and item.get("kind") in KINDS
                                                           for item in value):
            raise PlanError(f"{name} must be the registered result of ascendai.vllm.ascend_package_info (results "
                            f"with kind driver/firmware), got {value!r:.200}")
        for item in value:
            for key in ("installed", "package"):
                if item.get(key) is not None and not isinstance(item.get(key), dict):
                    raise PlanError(f"{name}: the {item['kind']} result's {key}={item.get(key)!r:.200} is not the "
                                    "version info ascendai.vllm.ascend_package_info returns (a mapping or null)")
        out.extend(value)
    return out


def install_outlook(order, read, kept=None, packages=None):
    """What inspect.yml learns from its reads: ``{"installed_driver", "after", "todo"}``.

    ``installed_driver``: the driver's installed version before this run ('' when none), from either read.
    ``after``: ``{kind: info}`` of the driver and firmware as they will be after the install: the package's
    ``version.info`` where a package is staged, else the installed one.
    ``todo``: the kinds whose action (``packages[kind].action``) installs something, in the order to run their
    installers (:func:`install_sequence`)."""
    results = package_results(read, kept)
    installed = ""
    for item in results:
        version = (item.get("installed") or {}).get("version")
        if item["kind"] == "driver" and version:
            installed = str(version)
            break
    after = {item["kind"]: item.get("package") or item.get("installed") for item in results}
    if packages is not None and not isinstance(packages, dict):
        raise PlanError(f"packages must map each kind to what its package would do (ascend_driver_packages), got "
                        f"{packages!r:.200}")
    run = [kind for kind, value in (packages or {}).items()
           if isinstance(value, dict) and value.get("action") in ACTIONS_TO_RUN]
    todo = [kind for kind in install_sequence(order, installed) if kind in run]
    return {"installed_driver": installed, "after": after, "todo": todo}


def registered_lines(owed):
    """The lines of the reboot marker: given as lines, or as the registered ``slurp`` of it (base64; skipped when
    there is no marker)."""
    if not isinstance(owed, dict):
        return owed
    if owed.get("skipped") or "content" not in owed:
        return []
    try:
        return base64.b64decode(owed["content"], validate=True).decode("utf-8").splitlines()
    except (binascii.Error, UnicodeDecodeError, TypeError) as exc:
        raise PlanError(f"owed={owed!r:.200} is not a slurp result of base64 UTF-8 text ({exc}); pass the registered "
                        "slurp of the reboot marker unchanged") from exc


def strip_ansi(text):
    return _ANSI.sub("", text or "")


def installer_word(output):
    """What an installer's output says about a reboot: ``(needed, line)``.

    ``needed`` is True when a line asks for a reboot, False when it says the new version takes effect immediately
    (or says nothing about it); ``line`` is that line without colours and without its ``[Driver] [date] [INFO]``
    prefix ('' when there is none).
    """
    said = ""
    for raw in strip_ansi(output).splitlines():
        line = _PREFIX.sub("", raw).strip()
        if _REBOOT.search(line):
            return True, line
        if _IMMEDIATE.search(line):
            said = line
    return False, said


def _check_reboot_inputs(outputs, owed, probe, disk_driver):
    """PlanError naming the first input of :func:`reboot_plan` that is not what the role registers (its value cut
    to 200 characters), before anything is read from them."""
    if outputs is not None and not isinstance(outputs, dict):
        raise PlanError(f"outputs must map driver/firmware to the installer's stdout, got {type(outputs).__name__} "
                        f"{outputs!r:.200}; pass {{'driver': <the driver installer's stdout>}} (or firmware)")
    unknown = sorted(map(repr, set(outputs or {}) - set(KINDS)))
    if unknown:
        raise PlanError(f"outputs has unknown kinds [{', '.join(unknown)}]; use driver and/or firmware")
    for kind, text in (outputs or {}).items():
        if text is not None and not isinstance(text, str):
            raise PlanError(f"outputs[{kind!r}]={text!r:.200} is not the installer's stdout (a string); pass the "
                            f"stdout of the registered run, e.g. {{{kind!r}: run.stdout}}")
    if owed is not None and (isinstance(owed, str) or not isinstance(owed, (list, tuple))
                             or not all(isinstance(line, str) for line in owed)):
        raise PlanError(f"owed={owed!r:.200} must be a list of lines (strings); pass the lines of the reboot "
                        "marker, e.g. (content | b64decode).splitlines()")
    if probe is not None and not isinstance(probe, dict):
        raise PlanError(f"probe={probe!r:.200} must be the registered result of ascendai.vllm.npu_info (a mapping), "
                        "or {} when it was skipped")
    loaded = (probe or {}).get("driver_version")
    if loaded is not None and not isinstance(loaded, str):
        raise PlanError(f"probe['driver_version']={loaded!r:.200} is not a version string; pass the registered "
                        "result of ascendai.vllm.npu_info unchanged")
    if disk_driver is not None and not isinstance(disk_driver, str):
        raise PlanError(f"disk_driver={disk_driver!r:.200} is not a version string; pass the Version of "
                        "driver/version.info as a string, e.g. '25.2.0' (empty when there is none)")


def reboot_plan(outputs, owed=None, probe=None, disk_driver=None):
    """Whether the node must reboot now, and why.

    ``outputs``: ``{kind: stdout}`` of the installers run in this play.
    ``owed``: lines recorded by an earlier run whose reboot has not happened yet (the role keeps them under
    ``/run``, which a boot empties), or the registered ``slurp`` of that file (skipped: none).
    ``probe``: what ``ascendai.vllm.npu_info`` returned (``failed``, ``kind``, ``msg``, ``driver_version``); a
    skipped result is no probe.
    ``disk_driver``: the ``Version`` of ``driver/version.info`` on disk.

    Returns ``{reboot, reasons, said, probe_error}``: ``said`` maps each kind to the installer's line about it;
    ``probe_error`` is npu-smi's classified failure when it failed (it is reported, never a reason to reboot).
    """
    owed = registered_lines(owed)
    if isinstance(probe, dict) and probe.get("skipped"):
        probe = {}
    _check_reboot_inputs(outputs, owed, probe, disk_driver)
    outputs = outputs or {}
    reasons, said = [], {}
    for kind in KINDS:
        if kind not in outputs:
            continue
        needed, line = installer_word(outputs[kind])
        said[kind] = line
        if needed:
            reasons.append(f"the {kind} installer says: {line}")
    for line in owed or []:
        line = line.strip()
        if line and line not in reasons:
            reasons.append(f"still owed from an earlier run ({line})")
    probe = probe or {}
    probe_error = ""
    if probe.get("failed"):
        probe_error = f"npu-smi fails ({probe.get('kind') or 'unknown'}): {probe.get('msg') or ''}".strip()
    else:
        loaded = str(probe.get("driver_version") or "").strip()
        disk = str(disk_driver or "").strip()
        if loaded and disk and loaded != disk:
            reasons.append(f"npu-smi reports the loaded driver {loaded}, the driver on disk is {disk}")
    return {"reboot": bool(reasons), "reasons": reasons, "said": said, "probe_error": probe_error}
