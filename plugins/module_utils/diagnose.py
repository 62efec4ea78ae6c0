# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Known failure signatures of an Ascend vLLM node, the matcher that finds them, and secret redaction.

Pure functions, stdlib only. Used by the ``ascendai.vllm.diagnose_match`` and ``ascendai.vllm.diagnose_redact``
filters on the controller, over the texts the ``diagnostics`` role gathers (npu-smi, hccn_tool, dmesg, the
service's journal, the vLLM log).

The patterns are the texts the tools print (vLLM, torch_npu, CANN runtime, HCCL, npu-smi, hccn_tool, uvicorn),
as seen in public bug reports; every signature carries the remediation an operator applies first.
"""

from __future__ import annotations

import re

__all__ = ["SEVERITIES", "SIGNATURES", "DiagnoseError", "format_findings", "is_secret_key", "match", "redact"]

SEVERITIES = ("critical", "error", "warning")


class DiagnoseError(ValueError):
    """The input is not what the matcher or the redactor takes."""


def _sig(sig_id, title, severity, patterns, remediation, detail=None):
    return {
        "id": sig_id,
        "title": title,
        "severity": severity,
        "patterns": tuple(patterns),
        "remediation": remediation,
        "detail": detail,
    }


# Order matters only for the report: findings are sorted by severity, then by this order.
SIGNATURES = (
    _sig(
        "dcmi_device_in_use", "npu-smi cannot initialise DCMI: the device is used (ret -8020)", "critical",
        [r"dcmi model initialized failed, because the device is used\. ret is (?P<ret>-?\d+)"],
        "Another process or container holds the NPUs (DCMI_ERR_CODE_RESOURCE_OCCUPIED): find it with "
        "'fuser -v /dev/davinci* /dev/davinci_manager' (a container started with --device /dev/davinciN shows in "
        "'docker ps' / 'crictl ps'), stop it, then run again. A reboot does not help unless a driver or firmware "
        "install is also pending.",
        "DCMI init failed, device used, ret {ret}",
    ),
    _sig(
        "npu_device_held", "Processes hold the NPU devices while DCMI cannot initialise", "critical",
        [r"^NPU device held: pid (?P<pid>\d{1,10}) \((?P<name>[^)\n]{0,64})\)"],
        "The DCMI failure (-8005 is DCMI_ERR_CODE_INNER_ERR, a generic inner error) comes with these processes "
        "holding /dev/davinci*: stop them (docker stop / crictl stop for a container, or end the process) and run "
        "npu-smi again before thinking of a reboot.",
        "pid {pid} ({name})",
    ),
    _sig(
        "dcmi_init_failed", "npu-smi cannot initialise DCMI (driver not usable)", "critical",
        [r"dcmi module initialize failed\. ret is (?P<ret>-?\d+)"],
        "-8005 is DCMI_ERR_CODE_INNER_ERR, a generic inner error, not proof that a reboot is pending. Reboot only "
        "when a driver or firmware install or upgrade is waiting for it (its installer said so, or the loaded "
        "driver differs from /usr/local/Ascend/driver/version.info). Otherwise: stop the process or container "
        "that holds /dev/davinci* ('fuser -v /dev/davinci*'); run npu-smi as root or as a member of HwHiAiUser; "
        "in a container mount /dev/davinci*, /dev/davinci_manager, /dev/devmm_svm, /dev/hisi_hdc, "
        "/usr/local/Ascend/driver and /usr/local/dcmi.",
        "DCMI init failed, ret {ret}",
    ),
    _sig(
        "npu_unhealthy", "An NPU reports Warning, Alarm or Critical health", "critical",
        [r"^\|\s*(?P<npu>\d+)\s+\S+\s*\|\s*(?P<state>Warning|Alarm|Critical)\s*\|",
         r"Health(?: Status)?\s*:\s*(?P<state>Warning|Alarm|Critical)\b"],
        "Read the error codes with 'npu-smi info -t health -i <npu> -c <chip>' (without -c npu-smi prints no "
        "error code) and look them up in Huawei's health code "
        "list for the driver version; stop the service on that NPU, collect /var/log/npu/slog and the device "
        "logs (msnpureport), then try 'npu-smi set -t reset -i <npu> -c 0' (offline reset) or replace the card.",
        ["NPU {npu} health {state}", "health {state}"],
    ),
    _sig(
        "npu_error_code", "An NPU carries a health error code", "critical",
        # npu_info_print.c print_diagnosis_info prints each code with " %04X": 4 to 8 hex digits
        [r"Error Code[ \t]*:[ \t]*(?P<code>[0-9A-Fa-f]{4,8}(?:[ \t]+[0-9A-Fa-f]{4,8})*)"],
        "Look the code up in Huawei's health code list (e.g. 80E01801 is a hardware alarm on the card); keep "
        "the device logs (msnpureport) for the support case before any reset.",
        "error code {code}",
    ),
    _sig(
        "npu_missing", "An NPU card is missing or its id is invalid", "critical",
        [r"Invalid card id\.", r"Error parameter of -i", r"There is no npu card"],
        "Compare 'npu-smi info -l' with 'lspci | grep -i d80' and the server's card count; a card that dropped "
        "off the PCIe bus needs a power cycle (not only a reboot) or hardware service.",
    ),
    _sig(
        "driver_incomplete", "The driver package is not completely installed", "error",
        [r"The driver package may not be completely installed"],
        "Re-run the driver .run package with --full --install-for-all and reboot; check "
        "/var/log/ascend_seclog/ascend_install.log for the step that failed.",
    ),
    _sig(
        "driver_libs_missing", "The Ascend driver libraries cannot be loaded", "error",
        [r"libascend_hal\.so: cannot open shared object file"],
        "The driver is not installed or /usr/local/Ascend/driver/lib64 is not on LD_LIBRARY_PATH: install the "
        "driver, then source /usr/local/Ascend/ascend-toolkit/set_env.sh in the service's environment.",
    ),
    _sig(
        "device_not_found", "torch_npu finds no usable NPU (device not found)", "critical",
        [r"The device is unavailable",
         r"no valid device",
         r"set ASCEND_RT_VISIBLE_DEVICES:(?P<visible>\S+) error",
         r"aclrtGetDeviceCount\(&device_count\), error code is (?P<code>\d+)",
         r"SetDevice\(device_id_\), error code is (?P<code>\d+)",
         r"Failed to infer device type"],
        "Check 'npu-smi info' on the node, that ASCEND_RT_VISIBLE_DEVICES lists existing ids in ascending "
        "order and that the service user is in HwHiAiUser; 'Failed to infer device type' means vllm-ascend or "
        "torch_npu is missing from the venv or cannot load CANN (source set_env.sh).",
    ),
    _sig(
        "npu_oom", "NPU out of memory", "error",
        [r"NPU out of memory\. Tried to allocate (?P<size>[\d.]+ [KMG]iB)(?: \(NPU (?P<npu>\d+))?"],
        "Lower --gpu-memory-utilization (0.9 -> 0.85) or --max-num-seqs/--max-num-batched-tokens, raise "
        "--tensor-parallel-size, or use a quantized (W8A8) model; set "
        "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True against fragmentation.",
        "tried to allocate {size}",
    ),
    _sig(
        "kv_cache_overflow", "The KV cache cannot hold the model's max length", "error",
        [r"max seq len \((?P<max_len>\d+)\) is larger than the maximum number of tokens that can be stored in "
         r"KV cache \((?P<tokens>\d+)\)",
         r"KV cache is needed, which is larger than the available KV cache memory",
         r"estimated maximum model length is (?P<estimate>\d+)",
         r"No available memory for the cache blocks",
         r"Available KV cache memory: -"],
        "Lower --max-model-len (vLLM prints the estimated maximum it can hold), raise --gpu-memory-utilization, "
        "or spread the model over more NPUs with --tensor-parallel-size; the kv_cache_plan filter estimates it.",
    ),
    _sig(
        "hccl_timeout", "HCCL collective or connection timeout", "error",
        [r"Watchdog caught collective operation timeout",
         r"HCCL watchdog thread terminated",
         r"EI0006",
         r"Getting socket times out",
         r"wait socket establish timeout",
         r"hccl fftsplus task timeout",
         r"Transport init error"],
        "Check every NPU NIC ('hccn_tool -i N -link -g' UP, '-net_health -g' Success, '-tls -g' the same on all "
        "nodes), that all ranks started, and raise HCCL_CONNECT_TIMEOUT (default 120 s) and HCCL_EXEC_TIMEOUT "
        "for slow starts; the first rank that failed holds the real cause.",
    ),
    _sig(
        "device_exec_timeout", "The NPU timed out executing a kernel (EE9999/EH9999 inner error)", "error",
        [r"(?P<code>E[EH]9999): Inner Error",
         r"The aicore execution times out",
         r"Vector core execution timed out",
         r"reason=\[?(?:aicore|vector core) timeout"],
        "Collect the plog (~/ascend/log) of the failing device, check 'npu-smi info -t health -i N -c C', and that the "
        "driver, CANN and torch_npu versions match the vllm-ascend compatibility matrix (compat_check filter).",
        "{code}",
    ),
    _sig(
        "nic_link_down", "An NPU NIC link is DOWN", "critical",
        [r"link status\s*:\s*DOWN"],
        "Check the cable/optical module and the switch port ('hccn_tool -i N -optical -g', '-link_stat -g'); "
        "bring it up with 'hccn_tool -i N -link -s up' once the physical layer is fixed.",
    ),
    _sig(
        "nic_net_health", "An NPU NIC fails its network health check", "error",
        [r"net health status\s*:\s*(?P<status>Socket fail(?:ed)?|Receive timeout|Unreachable|Time exceeded|Fault|"
         r"Thread error|Unknown)"],
        "The NIC cannot reach its netdetect address: check 'hccn_tool -i N -netdetect -g', '-gateway -g', "
        "'-ip -g' against /etc/hccn.conf and the switch; ping the peer with 'hccn_tool -i N -ping -g address X'.",
        "net health {status}",
    ),
    _sig(
        "port_in_use", "The service port is already in use", "error",
        [r"\[Errno 98\] (?:error while attempting to bind on address \('(?P<addr>[^']*)', (?P<port>\d+)\): )?"
         r"[Aa]ddress already in use",
         r"EADDRINUSE",
         r"listen on ip\[(?P<ip>[^\]]*)\] and specific port\[(?P<hccl_port>\d+)\] fail"],
        "Another process holds the port: find it with 'ss -ltnp', stop the stale vLLM (systemctl stop, or kill "
        "the leftover EngineCore/worker processes) or change the service port.",
    ),
)

_SEVERITY_RANK = {name: index for index, name in enumerate(SEVERITIES)}
_COMPILED = {}


def _compiled(signature):
    key = signature["id"], signature["patterns"]
    if key not in _COMPILED:
        try:
            _COMPILED[key] = [re.compile(p, re.MULTILINE) for p in signature["patterns"]]
        except re.error as exc:
            raise DiagnoseError(f"signature {signature['id']!r}: bad pattern: {exc}") from exc
    return _COMPILED[key]


def _check_signatures(signatures):
    out = []
    for index, sig in enumerate(signatures):
        if not isinstance(sig, dict):
            raise DiagnoseError(f"signature #{index} must be a mapping, got {type(sig).__name__}")
        missing = [k for k in ("id", "title", "patterns", "remediation") if not sig.get(k)]
        if missing:
            raise DiagnoseError(f"signature #{index} ({sig.get('id')!r}) lacks {', '.join(missing)}")
        patterns = sig["patterns"]
        if isinstance(patterns, str):
            patterns = [patterns]
        severity = sig.get("severity") or "error"
        if severity not in _SEVERITY_RANK:
            raise DiagnoseError(
                f"signature {sig['id']!r}: severity {severity!r} is not one of {', '.join(SEVERITIES)}"
            )
        item = dict(sig, patterns=tuple(patterns), severity=severity)
        item.setdefault("detail", None)
        out.append(item)
    return out


def _texts(texts):
    if isinstance(texts, dict):
        items = list(texts.items())
    elif isinstance(texts, (list, tuple)):
        items = []
        for index, entry in enumerate(texts):
            if not isinstance(entry, dict) or "source" not in entry:
                raise DiagnoseError(
                    f"entry #{index} must be a mapping with 'source' and 'text', got {entry!r:.80}"
                )
            items.append((entry["source"], entry.get("text")))
    else:
        raise DiagnoseError(
            f"expected a mapping of source name to text, or a list of {{source, text}}, got {type(texts).__name__}"
        )
    out = []
    for source, text in items:
        if text is None:
            continue
        if isinstance(text, (list, tuple)):
            text = "\n".join(str(x) for x in text)
        if not isinstance(text, str):
            raise DiagnoseError(f"text of {source!r} must be a string, got {type(text).__name__}")
        out.append((str(source), text))
    return out


def _detail(templates, groups):
    """The first template (a string or a list of them) whose fields the groups all fill."""
    if not templates:
        return None
    for template in [templates] if isinstance(templates, str) else templates:
        try:
            return template.format(**groups)
        except (KeyError, IndexError):
            continue
    return None


def _line_at(text, pos):
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return text[start:end if end != -1 else len(text)].strip()


def match(texts, signatures=None, max_examples=3):
    """Find the known failure signatures in gathered texts.

    ``texts``: ``{source: text}`` or ``[{source, text}]`` (a list of lines counts as one text).
    Returns one finding per signature seen, worst first::

        {id, title, severity, remediation, count, sources, examples: [{source, line, groups}], details}

    ``details`` are the signature's ``detail`` template (or the first of a list that fits) filled from the
    named groups of each hit (unique, in order of appearance), e.g. ``NPU 2 health Alarm``.
    """
    sigs = _check_signatures(SIGNATURES if signatures is None else signatures)
    items = _texts(texts)
    findings = []
    for order, sig in enumerate(sigs):
        hits = []
        for source, text in items:
            for regex in _compiled(sig):
                for m in regex.finditer(text):
                    groups = {k: v for k, v in m.groupdict().items() if v is not None}
                    hits.append((source, m.start(), _line_at(text, m.start()), groups))
        if not hits:
            continue
        hits.sort(key=lambda h: ([s for s, _t in items].index(h[0]), h[1]))
        sources = []
        details = []
        examples = []
        seen_lines = set()
        for source, _pos, line, groups in hits:
            if source not in sources:
                sources.append(source)
            text = _detail(sig["detail"], groups)
            if text and text not in details:
                details.append(text)
            if (source, line) not in seen_lines and len(examples) < max_examples:
                seen_lines.add((source, line))
                examples.append({"source": source, "line": line[:300], "groups": groups})
        findings.append({
            "id": sig["id"],
            "title": sig["title"],
            "severity": sig["severity"],
            "remediation": sig["remediation"],
            "count": len(hits),
            "sources": sources,
            "details": details,
            "examples": examples,
            "_order": order,
        })
    findings.sort(key=lambda f: (_SEVERITY_RANK[f["severity"]], f["_order"]))
    for finding in findings:
        del finding["_order"]
    return findings


def format_findings(findings, host=None):
    """One human-readable block per finding (what the playbook prints at the end)."""
    prefix = f"{host}: " if host else ""
    if not findings:
        return [f"{prefix}no known failure signature found"]
    lines = []
    for f in findings:
        what = f["title"]
        if f["details"]:
            what += " (" + "; ".join(f["details"][:5]) + ")"
        lines.append(f"{prefix}[{f['severity']}] {f['id']}: {what}")
        lines.append("    seen in: " + ", ".join(f["sources"][:6]))
        lines.append("    fix: " + f["remediation"])
    return lines


# --------------------------------------------------------------------------- redaction

REDACTED = "<redacted>"
_SECRET_SEGMENTS = frozenset(("token", "secret", "password", "passwd", "passphrase", "credential", "credentials",
                              "authorization", "apikey"))
_SECRET_PAIRS = frozenset((("api", "key"), ("access", "key"), ("private", "key"), ("secret", "key")))
_KEY = r"[A-Za-z0-9_.-]+"
_ENV_RE = re.compile(r"^(?P<pre>\s*(?:export\s+)?(?:-\s+)?[\"']?(?P<key>" + _KEY + r")[\"']?\s*[=:]\s*)"
                     r"(?P<val>\S.*?)\s*$", re.MULTILINE)
_OPT_RE = re.compile(r"(?P<pre>--(?P<key>[A-Za-z0-9-]+)(?:=|\s+))(?P<val>[^\s\"']+)")
_BEARER_RE = re.compile(r"(?P<pre>\bBearer\s+)(?P<val>[A-Za-z0-9._~+/=-]+)", re.IGNORECASE)
_HF_RE = re.compile(r"\bhf_[A-Za-z0-9]{20,}\b")
_URL_RE = re.compile(r"(?P<pre>[a-z][a-z0-9+.-]*://[^/\s:@]+:)(?P<val>[^@\s/]+)(?=@)", re.IGNORECASE)


def is_secret_key(key):
    """True for names like ``VLLM_API_KEY``, ``hf_token``, ``--api-key``, ``db.password`` (not ``tokenizer``)."""
    parts = [p for p in re.split(r"[^a-z0-9]+", str(key).lower()) if p]
    if any(p in _SECRET_SEGMENTS for p in parts):
        return True
    return any(pair in _SECRET_PAIRS for pair in zip(parts, parts[1:]))


def redact(text):
    """Remove secrets from configuration or log text.

    Values of keys and options named like a token, a password, an API key or a credential (``KEY=v``,
    ``key: v``, ``--api-key v``), bearer tokens, Hugging Face tokens and passwords in URLs become ``<redacted>``.
    """
    if text is None:
        return None
    if not isinstance(text, str):
        raise DiagnoseError(f"redact takes text, got {type(text).__name__}")

    def env(m):
        if not is_secret_key(m.group("key")):
            return m.group(0)
        val = m.group("val")
        quote = val[0] if len(val) > 1 and val[:1] in ("'", '"') and val[-1:] == val[:1] else ""
        return m.group("pre") + quote + REDACTED + quote

    def opt(m):
        return m.group("pre") + REDACTED if is_secret_key(m.group("key")) else m.group(0)

    text = _ENV_RE.sub(env, text)
    text = _OPT_RE.sub(opt, text)
    text = _BEARER_RE.sub(lambda m: m.group("pre") + REDACTED, text)
    text = _HF_RE.sub("hf_" + REDACTED, text)
    text = _URL_RE.sub(lambda m: m.group("pre") + REDACTED, text)
    return text
