"""The diagnose_match filter on real captures: MindCluster's fault-diagnosis npu-smi output
(tests/unit/fixtures/npu-smi) and the KV cache messages of each vLLM release
(plugins/module_utils/_generated/vllm_kv_messages.py)."""

from __future__ import annotations

import os
import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.diagnose_match import FilterModule
from ansible_collections.ascendai.vllm.plugins.module_utils._generated.vllm_kv_messages import MESSAGES

diagnose_match = FilterModule().filters()["diagnose_match"]

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures")


def capture(*path):
    """A capture without its leading '# source' comment lines."""
    with open(os.path.join(FIXTURES, *path), encoding="utf-8") as handle:
        lines = handle.read().splitlines(keepends=True)
    while lines and lines[0].startswith("#"):
        lines.pop(0)
    return "".join(lines)


def kv_messages():
    return {(m["vllm"], m["kind"]): m["text"] for m in MESSAGES}


def test_health_alarm_error_codes_and_missing_card_of_a_real_node():
    text = capture("npu-smi", "npu_info_after-health-alarm-errorcodes-910a-faultdiag-fixture-mindcluster.txt")
    found = {f["id"]: f for f in diagnose_match({"npu_info_after": text})}
    assert set(found) == {"npu_unhealthy", "npu_error_code", "npu_missing"}
    # "Health Status : Alarm", "Error Code : A4025021 8C03A000 8C084E00"
    assert found["npu_unhealthy"]["details"] == ["health Alarm"]
    assert found["npu_error_code"]["details"] == ["error code A4025021 8C03A000 8C084E00"]
    # "Invalid card id." and "Error parameter of -i"
    assert [e["line"] for e in found["npu_missing"]["examples"]] == ["Invalid card id.", "Error parameter of -i"]
    assert all(f["severity"] == "critical" and f["sources"] == ["npu_info_after"] for f in found.values())
    assert all(f["remediation"] for f in found.values())


@pytest.mark.parametrize("release", ["0.9.1", "0.11.0", "0.32.0"])
def test_v1_kv_cache_message_of_each_release(release):
    text = kv_messages()[(release, "v1_needed")]
    found = diagnose_match([{"source": "journal vllm.service", "text": text}], vllm_version=release)
    assert [f["id"] for f in found] == ["kv_cache_overflow"]
    # the messages were made with max_model_len 32768, 6 GiB needed, 2.5 available, estimate 13648 (README.md)
    details = found[0]["details"]
    assert details[0].startswith("max_model_len 32768 needs 6") and "2.5" in details[0]
    assert details[1:] == ["vLLM estimates a max_model_len of at most 13648"]


def test_v0_message_is_looked_for_only_in_releases_that_print_it():
    text = kv_messages()[("0.10.2", "v0_max_seq_len")]
    found = diagnose_match({"vllm.log": text}, vllm_version="0.10.2")
    assert found[0]["details"] == ["max_model_len 32768, the KV cache holds 16384 tokens"]
    assert diagnose_match({"vllm.log": text}, vllm_version="0.11.0") == []
    assert [f["id"] for f in diagnose_match({"vllm.log": text})] == ["kv_cache_overflow"]   # empty: every release


def test_lines_none_and_own_signatures():
    found = diagnose_match({"dmesg": ["ok", "link status: DOWN", "link status: DOWN"], "skipped": None},
                           max_examples=1)
    assert found[0]["id"] == "nic_link_down" and found[0]["count"] == 2 and len(found[0]["examples"]) == 1
    own = [{"id": "disk_full", "title": "Disk full", "patterns": [r"No space left on device"],
            "remediation": "Free space", "severity": "warning"}]
    assert [f["id"] for f in diagnose_match({"log": "OSError: [Errno 28] No space left on device"},
                                            signatures=own)] == ["disk_full"]


@pytest.mark.parametrize("texts,kwargs,kind,needle", [
    (42, {}, "int", r"expected a mapping of source name to text, or a list of \{source, text\}, got int"),
    ("npu-smi says", {}, "str", "got str"),
    ({"npu-smi info": 5}, {}, "dict", "text of 'npu-smi info' must be a string, got int"),
    ([{"text": "x"}], {}, "list", "entry #0 must be a mapping with 'source' and 'text'"),
    ({"a": "x"}, {"vllm_version": "banana"}, "dict", "vllm_version 'banana' is not a vLLM version"),
    ({"a": "x"}, {"max_examples": "three"}, "dict", r"max_examples='three' must be a whole number of lines to keep "
                                                    r"per finding \(0 or more\), e\.g\. 3"),
    ({"a": "x"}, {"max_examples": 2.5}, "dict", r"max_examples=2\.5 must be a whole number of lines"),
    ({"a": "x"}, {"max_examples": True}, "dict", r"max_examples=True must be a whole number of lines"),
    ({"a": "x"}, {"max_examples": -1}, "dict", r"max_examples=-1 must be a whole number of lines"),
    # no number is read as a release (an unquoted 0.10 is the float 0.1)
    ({"a": "x"}, {"vllm_version": 0.10}, "dict", r"vllm_version 0\.1 is not a version string; quote it in YAML, "
                                                 r"e\.g\. '0\.11\.0' \(an unquoted 0\.10 is the number 0\.1\)"),
    ({"a": "x"}, {"vllm_version": ["0.11.0"]}, "dict", r"vllm_version \['0\.11\.0'\] is not a version string"),
    ({"a": "x"}, {"signatures": [{"id": "x", "title": "X", "remediation": "r",
                                  "patterns": [{"regex": "x", "vllm": [0.10, None]}]}]},
     "dict", r"signature 'x': vllm of pattern 'x': 0\.1 is not a version string; quote it in YAML"),
    ({"a": "x"}, {"signatures": [{"id": "x", "title": "X", "remediation": "r",
                                  "patterns": [{"regex": "x", "vllm": 7}]}]},
     "dict", r"signature 'x': vllm of pattern 'x' must be \[oldest, newest\] \(null for open\), got 7"),
    ({"a": "x"}, {"signatures": [{"id": "x"}]}, "dict", r"signature #0 \('x'\) lacks title, patterns, remediation"),
])
def test_bad_input_is_named(texts, kwargs, kind, needle):
    with pytest.raises(AnsibleFilterError) as info:
        diagnose_match(texts, **kwargs)
    message = str(info.value)
    assert message.startswith(f"diagnose_match: cannot match the input ({kind}): ")
    assert re.search(needle, message), message


def test_max_examples_as_digits_and_the_message_is_not_repeated():
    text = "link status: DOWN\nlink status: DOWN\n"
    assert len(diagnose_match({"dmesg": text}, max_examples="1")[0]["examples"]) == 1
    assert diagnose_match({"dmesg": text}, max_examples=0)[0]["examples"] == []
    with pytest.raises(AnsibleFilterError) as info:
        diagnose_match(42)
    assert str(info.value).count("got int") == 1, str(info.value)
