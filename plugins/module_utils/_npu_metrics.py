# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""NPU metrics in the Prometheus text format, from npu-smi and hccn_tool, for node_exporter's textfile collector.

Pure stdlib. The monitoring role copies this file next to ``npu_smi.py`` and ``hccn.py`` (the collection's
parsers, unchanged) and a small runner script on the node, where a systemd timer runs it; the parsers are
passed in as modules so this file imports nothing of the collection.

Metric names, labels and values follow Huawei's NPU Exporter (MindCluster ``npu-exporter``,
component/npu-exporter/collector/metrics/collector_for_npu.go and common_utils.go) where they overlap, so
dashboards and alerts work with either source:

- labels ``id`` = the chip's physical id (``collectCardLabelValue`` puts ``chip.PhyId`` there; npu-smi prints it
  as ``Chip Phy-ID`` in ``-m`` and ``Phy-ID`` in the A3 table; where it prints none, as on a 910B, the logic id,
  which equals it on a host), ``model_name`` = ``<Chip Name>-<Chip Type>-<Chip Version>`` as
  ``npu-smi info -t board -i N -c C`` prints them (``GetNpuName``: e.g. ``910B3-Ascend-V1``), ``vdie_id`` (the
  VDie ID with dashes), ``pcie_bus_info``;
- ``npu_chip_info_health_status``: 1 healthy (``OK`` and no error code set), 0 otherwise (any other word, an
  empty one, or an error code beside ``OK``: ``npu_smi.health_verdict``, which fails closed), -1 the query failed;
- ``npu_chip_info_error_code`` (first code), ``npu_chip_info_error_code_1`` .. ``_9`` (the next ones): only for a
  chip that has error codes (``updateErrorCodesInfo``); the codes come from ``-t health -i N -c C`` (without
  ``-c`` a 910B/A3 npu-smi prints none);
- ``npu_chip_info_network_status``: 1 when hccn_tool's net health is ``Success`` or ``Init`` (``getNetworkHealthy``:
  NetworkInit or NetworkSuccess), 0 otherwise, -1 the query failed;
- ``machine_npu_nums``, ``machine_card_nums``, ``npu_chip_info_utilization``, ``npu_chip_info_temperature``,
  ``npu_chip_info_power``, ``npu_chip_info_hbm_total_memory`` / ``npu_chip_info_hbm_used_memory`` (MB),
  ``npu_chip_info_hbm_utilization``, ``npu_chip_info_link_status`` (1 UP, 0 DOWN, -1 failed).

Added here: ``npu_chip_info_health_state`` (the printed state as a label), ``ascendai_npu_net_health_info`` (the
printed net health as a label), ``ascendai_npu_metrics_up``, ``ascendai_npu_metrics_errors``,
``ascendai_npu_metrics_timestamp_seconds``.
"""

from __future__ import annotations

import math

__all__ = ["METRICS", "collect", "render"]

DEFAULT_NPU_SMI = "npu-smi"
DEFAULT_HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"

# name -> (help, chip key); all gauges. The error codes have their own families (see render).
METRICS = (
    ("npu_chip_info_health_status", "NPU chip health: 1 healthy (OK, no error code), 0 otherwise, -1 the query failed",
     "health"),
    ("npu_chip_info_utilization", "AI Core utilization of the NPU chip, unit is '%'", "aicore_util_pct"),
    ("npu_chip_info_temperature", "NPU chip temperature, unit is 'C'", "temp_c"),
    ("npu_chip_info_power", "NPU chip power, unit is 'W'", "power_w"),
    ("npu_chip_info_hbm_total_memory", "Total HBM of the NPU chip, unit is 'MB'", "hbm_total_mb"),
    ("npu_chip_info_hbm_used_memory", "Used HBM of the NPU chip, unit is 'MB'", "hbm_used_mb"),
    ("npu_chip_info_hbm_utilization", "HBM used of the NPU chip, unit is '%'", "hbm_util_pct"),
    ("npu_chip_info_link_status", "NPU NIC link: 1 UP, 0 DOWN, -1 the query failed", "link"),
    ("npu_chip_info_network_status", "NPU NIC net health: 1 Success or Init, 0 other, -1 the query failed",
     "network"),
)
# npu-exporter reports the first ten codes (common.MaxErrorCodeLen): npu_chip_info_error_code, then _1 .. _9.
MAX_ERROR_CODES = 10
# hccn_tool -net_health -g texts npu-exporter counts as healthy: NetworkSuccess (0) and NetworkInit (6), compared
# exactly as hccn_tool prints them (tool_ops.c g_net_health_status): another spelling is not known to be healthy.
_NET_OK = ("Success", "Init")


def _escape(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels):
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}" if labels else ""


def _num(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return repr(value) if not value.is_integer() else str(int(value))
    raise TypeError(f"metric value must be a number, got {value!r}")


def _run(run, argv):
    try:
        result = run(argv)
    except OSError as exc:
        return 127, "", str(exc)
    rc, out, err = result
    return rc, out or "", err or ""


def _code_value(code):
    if not isinstance(code, str) or len(code) > 16:
        return None  # npu-smi prints at most 8 hex digits: anything longer is no code of its
    try:
        return int(code, 16)
    except (TypeError, ValueError):
        return None


def model_name(board):
    """``<Chip Name>-<Chip Type>-<Chip Version>`` from ``npu-smi info -t board -i N -c C`` (npu-exporter's
    ``GetNpuName``), e.g. ``910B3-Ascend-V1``; None without a chip name. An Atlas A3 build prints no ``Chip Type``
    (npu_info_print.c print_ascend_chip_info): ``Ascend`` is assumed there."""
    name = (board or {}).get("chip_name")
    if name is None or str(name).strip() == "":
        return None
    ctype = board.get("chip_type")
    version = board.get("chip_version")
    return "{}-{}-{}".format(name, ctype if ctype not in (None, "") else "Ascend",
                             version if version not in (None, "") else "V1")


def _identity(run, npu_smi, npu_smi_bin, npu_id, chip_id, errors):
    """model_name and vdie_id of one chip (its ``-t board -c`` output)."""
    argv = [npu_smi_bin, "info", "-t", "board", "-i", str(npu_id), "-c", str(chip_id)]
    rc, out, err = _run(run, argv)
    if rc != 0:
        errors.append(f"npu-smi info -t board -i {npu_id} -c {chip_id} failed with rc={rc}: "
                      f"{(err or out).strip()[:200]}")
        return {}
    try:
        board = npu_smi.parse_board(out)
    except npu_smi.NpuSmiParseError as exc:
        errors.append(f"npu-smi info -t board -i {npu_id} -c {chip_id}: {exc}")
        return {}
    vdie = board.get("vdie_id")
    return {"model_name": model_name(board), "vdie_id": "-".join(str(vdie).split()) if vdie else None}


def collect(run, npu_smi, hccn, npu_smi_bin=DEFAULT_NPU_SMI, hccn_tool_bin=DEFAULT_HCCN_TOOL, nics=True,
            identity=None):
    """Query npu-smi (and hccn_tool) through ``run(argv) -> (rc, stdout, stderr)``.

    ``npu_smi`` and ``hccn`` are the collection's parser modules. ``identity``: the ``identity`` of an earlier
    snapshot (model name and VDie ID per chip do not change while the bus id stays), to skip the board queries.
    Returns a snapshot dict: ``{up, error, cards, chips: [...], errors: [...], identity}``; ``up`` is False when
    ``npu-smi info`` failed.
    """
    snap = {"up": False, "error": None, "cards": 0, "chips": [], "errors": [], "identity": {}}
    rc, out, err = _run(run, [npu_smi_bin, "info"])
    kind, message = npu_smi.classify_error(out, err, rc)
    if kind not in ("ok", "unknown") or rc != 0:
        snap["error"] = message or f"npu-smi info failed with rc={rc}"
        return snap
    try:
        info = npu_smi.parse_info(out)
    except npu_smi.NpuSmiParseError as exc:
        snap["error"] = f"npu-smi info: {exc}"
        return snap
    snap["up"] = True
    logic, phy = {}, {}
    rc, out, err = _run(run, [npu_smi_bin, "info", "-m"])
    if rc == 0:
        try:
            for row in npu_smi.parse_info_m(out):
                if row.get("chip_logic_id") is not None:
                    logic[(row["npu_id"], row["chip_id"])] = row["chip_logic_id"]
                if row.get("chip_phy_id") is not None:
                    phy[(row["npu_id"], row["chip_id"])] = row["chip_phy_id"]
        except npu_smi.NpuSmiParseError as exc:
            snap["errors"].append(f"npu-smi info -m: {exc}")
    else:
        snap["errors"].append(f"npu-smi info -m failed with rc={rc}: {(err or out).strip()[:200]}")
    snap["cards"] = len(info["npus"])
    known = identity or {}
    next_id = 0
    for npu in info["npus"]:
        for index, chip in enumerate(npu["chips"]):
            chip_id = chip.get("chip_id") if chip.get("chip_id") is not None else index
            logic_id = logic.get((npu["npu_id"], chip_id))
            if logic_id is None:
                logic_id = chip.get("device_id") if chip.get("device_id") is not None else next_id
            next_id = max(next_id, logic_id) + 1
            phy_id = phy.get((npu["npu_id"], chip_id), chip.get("phy_id"))
            health_detail = {}
            argv = [npu_smi_bin, "info", "-t", "health", "-i", str(npu["npu_id"]), "-c", str(chip_id)]
            rc, out, err = _run(run, argv)
            if rc == 0:
                try:
                    health_detail = npu_smi.parse_health(out)
                except npu_smi.NpuSmiParseError as exc:
                    snap["errors"].append(f"{' '.join(argv[1:])}: {exc}")
            else:
                snap["errors"].append(f"{' '.join(argv[1:])} failed with rc={rc}: {(err or out).strip()[:200]}")
            key = f"{npu['npu_id']}/{chip_id}/{chip.get('bus_id') or ''}"
            ident = known.get(key) or {}
            if not ident.get("model_name"):
                ident = _identity(run, npu_smi, npu_smi_bin, npu["npu_id"], chip_id, snap["errors"])
            if ident.get("model_name"):
                snap["identity"][key] = ident
            states = [chip.get("health")] + ([health_detail.get("health")] if health_detail else [])
            state = npu_smi.worst_health(states)
            verdict, _why = npu_smi.health_verdict(states, health_detail.get("error_codes") or [])
            codes = [c for c in (_code_value(x) for x in health_detail.get("error_codes") or []) if c is not None]
            used, total = chip.get("hbm_used_mb"), chip.get("hbm_total_mb")
            snap["chips"].append({
                "id": phy_id if phy_id is not None else logic_id,
                "logic_id": logic_id,
                "npu_id": npu["npu_id"],
                "chip_id": chip_id,
                "model_name": ident.get("model_name") or chip.get("name") or npu.get("name") or "",
                "vdie_id": ident.get("vdie_id") or "",
                "pcie_bus_info": chip.get("bus_id") or "",
                "health_state": state,
                "health": 1 if verdict == "healthy" else 0,
                "error_codes": codes,
                "aicore_util_pct": chip.get("aicore_util_pct"),
                "temp_c": chip.get("temp_c"),
                "power_w": chip.get("power_w"),
                "hbm_total_mb": total,
                "hbm_used_mb": used,
                "hbm_util_pct": (round(100.0 * used / total, 2) if used is not None and total else None),
                "link": None,
                "link_state": None,
                "network": None,
                "net_health": None,
            })
    if nics:
        for chip in snap["chips"]:
            dev = str(chip["logic_id"])  # hccn_tool -i takes the device (logic) id
            rc, out, err = _run(run, [hccn_tool_bin, "-i", dev, "-link", "-g"])
            try:
                chip["link_state"] = hccn.parse_link(out) if rc == 0 else None
            except hccn.HccnError:
                chip["link_state"] = None
            chip["link"] = -1 if chip["link_state"] is None else (1 if chip["link_state"] == "UP" else 0)
            if rc != 0 or chip["link_state"] is None:
                snap["errors"].append(f"hccn_tool -i {dev} -link -g failed with rc={rc}: {(err or out).strip()[:200]}")
            rc, out, err = _run(run, [hccn_tool_bin, "-i", dev, "-net_health", "-g"])
            try:
                chip["net_health"] = hccn.parse_net_health(out) if rc == 0 else None
            except hccn.HccnError:
                chip["net_health"] = None
            if chip["net_health"] is None:
                chip["network"] = -1
                snap["errors"].append(f"hccn_tool -i {dev} -net_health -g failed with rc={rc}: "
                                      f"{(err or out).strip()[:200]}")
            else:
                chip["network"] = 1 if chip["net_health"] in _NET_OK else 0
    return snap


def render(snap, now=None):
    """The snapshot of :func:`collect` as Prometheus text exposition (ends with a newline)."""
    lines = []

    def family(name, helptext, samples):
        samples = [(labels, value) for labels, value in samples if value is not None]
        if not samples:
            return
        lines.append(f"# HELP {name} {helptext}")
        lines.append(f"# TYPE {name} gauge")
        for labels, value in samples:
            lines.append(f"{name}{_labels(labels)} {_num(value)}")

    family("ascendai_npu_metrics_up", "1 when npu-smi info answered on the last run", [((), 1 if snap["up"] else 0)])
    if now is not None:
        family("ascendai_npu_metrics_timestamp_seconds", "Unix time of the last run", [((), float(now))])
    family("ascendai_npu_metrics_errors", "Queries that failed on the last run", [((), len(snap["errors"]))])
    if snap["up"]:
        family("machine_npu_nums", "Amount of npu installed on the machine.", [((), len(snap["chips"]))])
        family("machine_card_nums", "Amount of card installed on the machine.", [((), snap["cards"])])
    chips = sorted(snap["chips"], key=lambda c: c["id"])

    def base(chip):
        labels = [("id", chip["id"]), ("model_name", chip["model_name"])]
        if chip.get("vdie_id"):
            labels.append(("vdie_id", chip["vdie_id"]))
        return tuple(labels + [("pcie_bus_info", chip["pcie_bus_info"])])

    for name, helptext, key in METRICS:
        family(name, helptext, [(base(c), c.get(key)) for c in chips])
    for index in range(MAX_ERROR_CODES):
        name = "npu_chip_info_error_code" + (f"_{index}" if index else "")
        family(name, "the npu error code" + ("" if index else " (the first one; none when the chip has none)"),
               [(base(c), c["error_codes"][index]) for c in chips if len(c.get("error_codes") or []) > index])
    family("npu_chip_info_health_state", "NPU chip health as npu-smi prints it (OK, Warning, Alarm, Critical...)",
           [(base(c) + (("state", c["health_state"]),), 1) for c in chips if c.get("health_state")])
    family("ascendai_npu_net_health_info", "NPU NIC net health as hccn_tool prints it (Success, Init, Fault...)",
           [(base(c) + (("status", c["net_health"]),), 1) for c in chips if c.get("net_health")])
    return "\n".join(lines) + "\n"
