# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The preflight role's verdict per host and its table (the ``preflight_report`` and ``preflight_table`` filters).

Pure functions over what the role gathers: Ansible facts (architecture, memory), the ``df -P -B1`` line of the model
directory, ``npu_info``'s result (or its failure, or nothing before npu-smi is installed) and the plans of the
ascend_driver and ascend_cann roles (``{component: {installed, wanted, action}}``).
"""

from __future__ import annotations

import math
# One line per host: host, arch, memory GiB, free GB, NPUs, driver / firmware, CANN, problems.
ROW_FORMAT = "%-24s %-7s %7s %8s  %-26s %-42s %-32s %s"
HEADER = ("host", "arch", "mem GiB", "free GB", "NPUs", "driver / firmware", "CANN toolkit / kernels / nnal",
          "problems")

# npu_info's failure kinds (module_utils/_npu_smi.py classify_error) in the table's words.
NPU_KINDS = {
    "dcmi_init": "DCMI init failed (-8005: driver not loaded, reboot pending or devices held)",
    "device_in_use": "devices in use by another process (-8020)",
    "device_held": "devices held by another process or container",
}


class PreflightError(ValueError):
    """Input the preflight role cannot judge; the message names it."""


def free_bytes(df_output):
    """Available bytes from ``df -P -B1 DIR | tail -n 1`` (its 4th column); 0 when there is no such line.

    PreflightError when ``df_output`` is not that text (stdout_lines, say), which would read as 0 bytes free."""
    if df_output is not None and not isinstance(df_output, str):
        raise PreflightError(f"df must be the line of 'df -P -B1 DIR | tail -n 1' (its stdout, a string), got "
                             f"{df_output!r:.200}")
    fields = (df_output or "").split()
    try:
        return int(fields[3])
    except (IndexError, ValueError):
        return 0


def _number(name, value):
    if isinstance(value, bool):   # float(True) is 1.0: a boolean is no amount
        raise PreflightError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise PreflightError(f"{name} must be a number, got {value!r}") from None
    if math.isnan(number) or math.isinf(number):
        raise PreflightError(f"{name} must be a finite number, got {value!r}")
    return number


def _int(name, value):
    return int(_number(name, value))


def npu_failed(npu):
    """Whether ``npu`` is a failed ``npu_info`` result. Registered with ``failed_when: false`` its ``failed`` is
    false: the failure shows as a ``kind`` (or ``msg``) without a ``count``."""
    npu = npu or {}
    return bool(npu.get("failed")) or ("count" not in npu and ("kind" in npu or "msg" in npu))


def npu_summary(npu, npu_smi):
    """The NPUs column: ``8 Ascend910B3 healthy``, ``... UNHEALTHY 3,5``, ``npu-smi: <failure>`` or
    ``no npu-smi yet``."""
    if not npu_smi:
        return "no npu-smi yet"
    npu = npu or {}
    if npu_failed(npu):
        kind = npu.get("kind")
        return "npu-smi: " + str(NPU_KINDS.get(kind, kind))
    ids = ",".join(str(item.get("npu_id")) for item in npu.get("unhealthy") or [])
    return f"{npu.get('count')} {npu.get('chip_name')}" + (" healthy" if npu.get("healthy") else f" UNHEALTHY {ids}")


def problems(host, settings):
    """Why ``host`` cannot be deployed (an empty list when it can).

    ``host``: ``architecture``, ``memtotal_mb``, ``free_bytes``, ``npu`` (npu_info's result, ``{}`` without one),
    ``expected_npus`` (0: any count), ``driver_plan``, ``cann_plan``. ``settings``: ``architectures``,
    ``min_memory_mb``, ``model_dir``, ``model_free_gb``.
    """
    found = []
    architectures = list(settings["architectures"])
    if host["architecture"] not in architectures:
        found.append(f"CPU {host['architecture']} is not one of {', '.join(architectures)}")
    memory = _number("memtotal_mb", host["memtotal_mb"])
    minimum = _int("preflight_min_memory_mb", settings["min_memory_mb"])
    if memory < minimum:
        found.append(f"memory {host['memtotal_mb']} MB < {minimum} MB (preflight_min_memory_mb)")
    free = _int("free_bytes", host["free_bytes"])
    wanted_gb = _int("preflight_model_free_gb", settings["model_free_gb"])
    if free < wanted_gb * 1e9:
        found.append(f"{settings['model_dir']}: {round(free / 1e9, 1)} GB free < {wanted_gb} GB "
                     "(preflight_model_free_gb)")
    npu = host.get("npu") or {}
    expected = _int("ascend_driver_expected_npus", host.get("expected_npus") or 0)
    if "count" in npu and expected != 0 and npu["count"] != expected:
        found.append(f"{npu['count']} NPUs, expected {expected} (ascend_driver_expected_npus)")
    if not npu.get("healthy", True):
        found.append("unhealthy NPUs: " + ", ".join(str(item.get("npu_id")) for item in npu.get("unhealthy") or []))
    for plan in (host.get("driver_plan") or {}, host.get("cann_plan") or {}):
        found.extend(f"{name}: installed is newer than wanted (downgrade refused)"
                     for name, step in plan.items() if (step or {}).get("action") == "refuse")
    return found


def _step(step):
    step = step or {}
    return f"{step.get('action', '-')} {step.get('installed') or '-'}>{step.get('wanted', '-')}"


def _driver_column(plan):
    return " / ".join(_step(plan.get(name)) for name in ("driver", "firmware"))


def _cann_column(plan):
    steps = list(plan.values())
    installed = []
    for step in steps:
        value = step.get("installed") or "-"
        if value not in installed:
            installed.append(value)
    wanted = steps[0].get("wanted", "-") if steps else "-"
    return f"{'/'.join(str(step.get('action', '-')) for step in steps)} {','.join(installed)}>{wanted}"


def _check_shapes(host):
    """PreflightError naming the first part of ``host`` that is not what the role registers."""
    npu = host.get("npu")
    if npu is not None and not isinstance(npu, dict):
        raise PreflightError(f"npu must be npu_info's result (a mapping), got {npu!r}")
    unhealthy = (npu or {}).get("unhealthy")
    if unhealthy is not None and (not isinstance(unhealthy, list)
                                  or not all(isinstance(item, dict) for item in unhealthy)):
        raise PreflightError(f"npu.unhealthy must be a list of mappings with npu_id, got {unhealthy!r}")
    for key in ("driver_plan", "cann_plan"):
        plan = host.get(key)
        if plan is None:
            continue
        if not isinstance(plan, dict) or not all(isinstance(step, dict) for step in plan.values()):
            raise PreflightError(f"{key} must map each component to {{installed, wanted, action}}, got {plan!r}")
    if not isinstance(host["name"], str) or not host["name"]:
        raise PreflightError(f"name must be the host's name (a string), got {host['name']!r:.200}")
    if not isinstance(host["architecture"], str):
        raise PreflightError(f"architecture must be a string, got {host['architecture']!r}")
    if isinstance(host["free_bytes"], bool) or not isinstance(host["free_bytes"], (int, float)):
        raise PreflightError(f"free_bytes must be a number, got {host['free_bytes']!r}")


def report(host, settings):
    """``{problems, row, npus, free_gb}`` of one host (see ``problems``; ``host`` also has ``name`` and
    ``npu_smi``, whether npu-smi is installed)."""
    for key in ("name", "architecture", "memtotal_mb", "free_bytes"):
        if key not in host:
            raise PreflightError(f"the host's {key} is missing (give name, architecture, memtotal_mb, free_bytes, "
                                 "npu, npu_smi, expected_npus, driver_plan, cann_plan)")
    _check_shapes(host)
    found = problems(host, settings)
    npus = npu_summary(host.get("npu"), host.get("npu_smi"))
    free_gb = round(_int("free_bytes", host["free_bytes"]) / 1e9, 1)
    memory_gib = round(_number("memtotal_mb", host["memtotal_mb"]) / 1024, 1)
    row = ROW_FORMAT % (host["name"], host["architecture"], memory_gib, free_gb, npus,
                        _driver_column(host.get("driver_plan") or {}), _cann_column(host.get("cann_plan") or {}),
                        "; ".join(found) or "none")
    return {"problems": found, "row": row, "npus": npus, "free_gb": free_gb}


def table(rows):
    """The header line followed by ``rows`` (the ``row`` strings of :func:`report`); PreflightError naming the
    first item that is not a string."""
    rows = list(rows)
    for row in rows:
        if not isinstance(row, str):
            raise PreflightError(f"line {row!r:.200} is not a host line (a string); pass the row of each host's "
                                 "preflight_report, e.g. map('extract', hostvars, ['_preflight_report', 'row'])")
    return [ROW_FORMAT % HEADER] + rows
