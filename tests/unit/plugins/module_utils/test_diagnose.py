"""Tests for plugins/module_utils/_diagnose.py: failure signatures on real error texts, and redaction.

The log lines carry the exact error texts that vLLM, torch_npu, CANN, HCCL, uvicorn, npu-smi and hccn_tool
print (as reported in vllm-project/vllm, vllm-project/vllm-ascend, Ascend/pytorch and gpustack issues);
the surrounding prefixes (timestamps, pids) are ours.
"""

from __future__ import annotations

import os

import pytest
from ansible_collections.ascendai.vllm.plugins.module_utils._diagnose import (
    SIGNATURES,
    DiagnoseError,
    format_findings,
    is_secret_key,
    match,
    redact,
)
from hypothesis import given, settings
from hypothesis import strategies as st

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")


def _fixture(*parts):
    with open(os.path.join(FIXTURES, *parts)) as handle:
        text = handle.read()
    return text.split("\n", 1)[1]  # the first line names the source


def ids(findings):
    return [f["id"] for f in findings]


# (log text, signature id expected, a detail expected or None)
CASES = [
    ("(VllmWorker rank=0 pid=2001) ERROR 03-06 10:01:02 [worker.py:88] RuntimeError: NPU out of memory. "
     "Tried to allocate 3.47 GiB (NPU 0; 60.97 GiB total capacity; 58.92 GiB already allocated; 58.92 GiB "
     "current active; 1.66 GiB free; 58.95 GiB reserved in total by PyTorch) If reserved memory is >> allocated "
     "memory try setting max_split_size_mb to avoid fragmentation.",
     "npu_oom", "tried to allocate 3.47 GiB"),
    ("ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored "
     "in KV cache (7344). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
     "initializing the engine.",
     "kv_cache_overflow", None),
    ("(EngineCore_DP0 pid=311) ERROR 09-21 08:00:01 [core.py:708] ValueError: To serve at least one request with "
     "the models's max seq len (221000), (10.12 GiB KV cache is needed, which is larger than the available KV "
     "cache memory (5.59 GiB). Based on the available memory, the estimated maximum model length is 122080. "
     "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
     "kv_cache_overflow", None),
    ("ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the cache blocks. Try increasing "
     "`gpu_memory_utilization` when initializing the engine.",
     "kv_cache_overflow", None),
    ("[rank1]:[E324 13:00:25.428029551 compiler_depend.ts:574] [Rank 1] Watchdog caught collective operation "
     "timeout: WorkHCCL(SeqNum=196, OpType=ALLREDUCE, Timeout(ms)=3600000) ran for 3600185 milliseconds before "
     "timing out.",
     "hccl_timeout", None),
    ("[rank1]: EI0006: [PID: 1292363] 2025-04-08-18:07:20.444.436 Getting socket times out. Reason: Remote Rank "
     "did not send the data in time.",
     "hccl_timeout", None),
    ("EE9999: Inner Error!\nEE9999[PID: 15252] 2026-08-24-11:45:01.740.629 (EE9999):  rtEventSynchronize "
     "execution failed, reason=vector core timeout[FUNC:FuncErrorReason][FILE:error_message_manage.cc][LINE:69]",
     "device_exec_timeout", "EE9999"),
    ("[Error]: The aicore execution times out.\n        Rectify the fault based on the error information in the "
     "ascend log.\nEH9999: Inner Error!",
     "device_exec_timeout", "EH9999"),
    ("ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): address already in use",
     "port_in_use", None),
    ("    s.bind((\"\", 0))\nOSError: [Errno 98] Address already in use",
     "port_in_use", None),
    ("[ERROR] HCCL(2717288,python3):2025-07-23-03:47:57.070.463 [hccl_socket.cc:100] [2717288][HcclSocket]"
     "[Listen] socket type[1], listen on ip[192.168.20.160] and specific port[16666] fail. Please check the port "
     "status and whether the port is been using by other process.",
     "port_in_use", None),
    ("RuntimeError: init:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:292 NPU function error: "
     "aclrtGetDeviceCount(&device_count), error code is 207004\n[Error]: The device is unavailable.\n"
     "EE1001: The argument is invalid.Reason: set ASCEND_RT_VISIBLE_DEVICES:4 error, input data rang[0-2)",
     "device_not_found", None),
    ("RuntimeError: Failed to infer device type",
     "device_not_found", None),
    ("dcmi module initialize failed. ret is -8005",
     "dcmi_init_failed", "DCMI init failed, ret -8005"),
    # npu_smi.c handle_dcmi_initialization, ret -8020 = DCMI_ERR_CODE_RESOURCE_OCCUPIED (dcmi_interface_api.h)
    ("dcmi model initialized failed, because the device is used. ret is -8020",
     "dcmi_device_in_use", "DCMI init failed, device used, ret -8020"),
    # the diagnostics role's holder probe (run only when npu-smi cannot initialise DCMI)
    ("NPU device held: pid 4242 (python3) /dev/davinci0 container " + "3f" * 32,
     "npu_device_held", "pid 4242 (python3)"),
    # print_diagnosis_info prints every code with " %04X"
    ("\tHealth Status                  : Alarm\n\tError Code                     : 8C03A000 1A2B\n",
     "npu_error_code", "error code 8C03A000 1A2B"),
    ("link status: DOWN", "nic_link_down", None),
    ("net health status: Receive timeout", "nic_net_health", "net health Receive timeout"),
    ("ImportError: libascend_hal.so: cannot open shared object file: No such file or directory",
     "driver_libs_missing", None),
]


@pytest.mark.parametrize("text, sig_id, detail", CASES, ids=[c[1] + "-" + str(i) for i, c in enumerate(CASES)])
def test_real_error_texts_name_their_fault(text, sig_id, detail):
    findings = match({"journal vllm.service": text})
    assert sig_id in ids(findings)
    finding = next(f for f in findings if f["id"] == sig_id)
    assert finding["sources"] == ["journal vllm.service"]
    assert finding["remediation"]
    if detail is not None:
        assert detail in finding["details"]


def test_healthy_outputs_match_nothing():
    healthy = {
        "npu-smi info": _fixture("npu-smi", "npu-smi-info-910b2-8card-idle-vllm-ascend-issue3906.txt"),
        "hccn_tool -i 0 -link -g": "link status: UP\n",
        "hccn_tool -i 0 -net_health -g": "net health status: Success\n",
        "hccn_tool -i 1 -net_health -g": "net health status: Init\n",
        "npu-smi info -t health -i 0": "\tHealth Status                  : OK\n\tError Code                     : NA\n"
                                       "\tError Information              : NA\n",
        "vllm log": "INFO 09-01 10:00:00 [api_server.py:1] vLLM API server version 0.11.0\n"
                    "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)\n",
    }
    assert match(healthy) == []
    assert format_findings([], host="node1") == ["node1: no known failure signature found"]


def test_faultdiag_capture_names_alarm_codes_and_missing_card():
    text = _fixture("npu-smi", "npu_info_after-health-alarm-errorcodes-910a-faultdiag-fixture-mindcluster.txt")
    findings = match({"faultdiag": text})
    assert ids(findings)[:3] == ["npu_unhealthy", "npu_error_code", "npu_missing"]
    by_id = {f["id"]: f for f in findings}
    assert by_id["npu_unhealthy"]["details"] == ["health Alarm"]  # '-t health' output names no NPU
    assert by_id["npu_error_code"]["details"] == ["error code A4025021 8C03A000 8C084E00"]
    assert by_id["npu_missing"]["count"] == 2  # 'Invalid card id.' and 'Error parameter of -i'


def test_table_row_names_the_npu():
    table = (
        "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|\n"
        "| 2     910B3               | Alarm         | 93.1        41                0    / 0             |\n"
        "| 0                         | 0000:01:00.0  | 0           0    / 0          3395 / 65536         |\n"
    )
    findings = match({"npu-smi info": table})
    assert ids(findings) == ["npu_unhealthy"]
    assert findings[0]["details"] == ["NPU 2 health Alarm"]
    assert findings[0]["examples"][0]["line"].startswith("| 2     910B3")


def test_worst_first_and_sources_in_order():
    texts = [
        {"source": "vllm log", "text": "OSError: [Errno 98] Address already in use"},
        {"source": "hccn_tool -i 3 -link -g", "text": "link status: DOWN"},
        {"source": "hccn_tool -i 1 -link -g", "text": "link status: DOWN"},
    ]
    findings = match(texts)
    assert ids(findings) == ["nic_link_down", "port_in_use"]
    assert findings[0]["severity"] == "critical"
    assert findings[0]["sources"] == ["hccn_tool -i 3 -link -g", "hccn_tool -i 1 -link -g"]
    lines = format_findings(findings, host="n1")
    assert lines[0] == "n1: [critical] nic_link_down: An NPU NIC link is DOWN"
    assert lines[1] == "    seen in: hccn_tool -i 3 -link -g, hccn_tool -i 1 -link -g"


def test_lists_of_lines_and_null_texts():
    findings = match({"journal": ["line one", "NPU out of memory. Tried to allocate 30.00 MiB (NPU 3; x)"],
                      "dmesg": None})
    assert ids(findings) == ["npu_oom"]
    assert findings[0]["examples"][0]["groups"] == {"size": "30.00 MiB", "npu": "3"}


def test_custom_signatures_and_errors():
    custom = [{"id": "mine", "title": "Mine", "patterns": "boom (?P<n>\\d+)", "remediation": "fix it",
               "detail": "n={n}", "severity": "warning"}]
    found = match({"a": "boom 7"}, signatures=custom)
    assert found[0]["details"] == ["n=7"] and found[0]["severity"] == "warning"
    with pytest.raises(DiagnoseError, match="lacks remediation"):
        match({"a": "x"}, signatures=[{"id": "x", "title": "t", "patterns": ["x"]}])
    with pytest.raises(DiagnoseError, match="severity 'fatal'"):
        match({"a": "x"}, signatures=[dict(custom[0], severity="fatal")])
    with pytest.raises(DiagnoseError, match="bad pattern"):
        match({"a": "x"}, signatures=[dict(custom[0], id="bad", patterns=["("])])
    with pytest.raises(DiagnoseError, match="mapping of source name to text"):
        match("just text")
    with pytest.raises(DiagnoseError, match="must be a string"):
        match({"a": 3})


def test_every_signature_has_unique_id_and_text():
    seen = set()
    for sig in SIGNATURES:
        assert sig["id"] not in seen
        seen.add(sig["id"])
        assert sig["title"] and len(sig["remediation"]) > 40


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=400))
def test_random_text_never_raises(text):
    for finding in match({"x": text}):
        assert finding["count"] >= 1


# --------------------------------------------------------------------------- redaction


def test_redact_service_environment_and_config():
    text = (
        "VLLM_API_KEY=sk-live-0123456789\n"
        "export HF_TOKEN=\"hf_AbCdEfGhIjKlMnOpQrStUvWx\"\n"
        "HCCL_BUFFSIZE=200\n"
        "tokenizer: /models/qwen\n"
        "max_num_batched_tokens: 8192\n"
        "api-key: 'abc'\n"
        "ExecStart=/opt/venv/bin/python -m vllm.entrypoints.openai.api_server --api-key s3cr3t --port 8000\n"
        "curl -H 'Authorization: Bearer eyJhbGciOi.x.y' http://admin:pa55@10.0.0.1:8000/v1/models\n"
    )
    out = redact(text).splitlines()
    assert out[0] == "VLLM_API_KEY=<redacted>"
    assert out[1] == "export HF_TOKEN=\"<redacted>\""
    assert out[2] == "HCCL_BUFFSIZE=200"
    assert out[3] == "tokenizer: /models/qwen"
    assert out[4] == "max_num_batched_tokens: 8192"
    assert out[5] == "api-key: '<redacted>'"
    assert "--api-key <redacted> --port 8000" in out[6]
    assert "Bearer <redacted>" in out[7] and "admin:<redacted>@10.0.0.1" in out[7]
    assert "s3cr3t" not in redact(text) and "pa55" not in redact(text) and "sk-live" not in redact(text)


def test_redact_hf_token_anywhere_and_none():
    assert redact("token in a log: hf_AbCdEfGhIjKlMnOpQrStUvWx done") == "token in a log: hf_<redacted> done"
    assert redact(None) is None
    with pytest.raises(DiagnoseError):
        redact(3)


@pytest.mark.parametrize("key, secret", [
    ("VLLM_API_KEY", True), ("hf_token", True), ("HUGGING_FACE_HUB_TOKEN", True), ("db.password", True),
    ("AWS_SECRET_ACCESS_KEY", True), ("tokenizer", False), ("max_num_batched_tokens", False),
    ("HCCL_BUFFSIZE", False), ("author", False), ("keyfile", False),
])
def test_is_secret_key(key, secret):
    assert is_secret_key(key) is secret


@settings(max_examples=200, deadline=None)
@given(st.from_regex(r"([A-Z]{1,6}_)?(TOKEN|PASSWORD|API_KEY|SECRET)(_[A-Z]{1,6})?", fullmatch=True),
       st.from_regex(r"[A-Za-z0-9]{6,30}", fullmatch=True))
def test_secret_values_never_survive(key, value):
    out = redact(f"{key}={value}\n--{key.lower().replace('_', '-')} {value}\n").splitlines()
    assert out == [f"{key}=<redacted>", f"--{key.lower().replace('_', '-')} <redacted>"]


def test_dcmi_8005_is_not_read_as_a_pending_reboot():
    (finding,) = match({"npu-smi info": "dcmi module initialize failed. ret is -8005\n"})
    assert "not proof that a reboot is pending" in finding["remediation"]
    assert "fuser -v /dev/davinci*" in finding["remediation"]
    (used,) = match({"npu-smi info": "dcmi model initialized failed, because the device is used. ret is -8020\n"})
    assert used["id"] == "dcmi_device_in_use" and "stop it" in used["remediation"]


@pytest.mark.parametrize("text, secret, keep", [
    ('ExecStart=/v/bin/vllm serve /m --api-key "s3cr3t-1" --port 8000', "s3cr3t-1", '--api-key "<redacted>" --port'),
    ("vllm serve /m --api-key='s3cr3t-2'", "s3cr3t-2", "--api-key='<redacted>'"),
    ('{"api_key": "s3cr3t-3", "port": 8000}', "s3cr3t-3", '"port": 8000'),
    ("Environment=VLLM_API_KEY=s3cr3t-4", "s3cr3t-4", "Environment=VLLM_API_KEY=<redacted>"),
    ('Environment="VLLM_API_KEY=s3cr3t-5" "HCCL_BUFFSIZE=200"', "s3cr3t-5", '"HCCL_BUFFSIZE=200"'),
    ("docker run -e VLLM_API_KEY=s3cr3t-6 --net=host img", "s3cr3t-6", "--net=host img"),
    ("curl -H 'Authorization: Basic czNjcjN0LTc=' http://x", "czNjcjN0LTc=", "Authorization: Basic <redacted>'"),
    ("git clone https://s3cr3t-8@git.example/r.git", "s3cr3t-8", "https://<redacted>@git.example/r.git"),
    ("pip -i http://ops:p@ss-s3cr3t-9@mirror:8080/simple", "p@ss-s3cr3t-9", "http://ops:<redacted>@mirror:8080/simple"),
    ("api_key: |\n  s3cr3t-10\n  more\nport: 8000\n", "s3cr3t-10", "port: 8000"),
    ("INFO 12-03 08:00:00 [utils.py:233] non-default args: {'model': '/m', 'api_key': ['s3cr3t-11'], 'port': 8000}",
     "s3cr3t-11", "'api_key': [<redacted>], 'port': 8000"),
])
def test_redact_the_forms_secrets_take(text, secret, keep):
    out = redact(text)
    assert secret not in out and keep in out
    assert redact(out) == out


def test_redact_block_scalar_stops_at_the_next_key():
    out = redact("hf_token: >-\n    s3cr3t-a\n    s3cr3t-b\n\nmodel: /m\n").splitlines()
    assert out == ["hf_token: >-", "    <redacted>", "    <redacted>", "", "model: /m"]


@pytest.mark.parametrize("hostile", [
    "a" * 200_000, "-" * 200_000, "api_key=" * 25_000, "api_key=[" * 20_000, "x://" * 50_000,
    "--api-key " * 20_000, "token: " * 28_000 + "\n", ("a=" * 100_000)[:200_000], "hf_" * 66_000,
])
def test_redact_is_linear_on_hostile_text(hostile):
    import time
    started = time.monotonic()
    redact(hostile)
    # a quadratic pattern takes minutes here (160 KB took 227 s before); a linear one well under a second
    assert time.monotonic() - started < 5
