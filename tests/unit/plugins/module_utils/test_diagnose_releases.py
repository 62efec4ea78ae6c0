"""diagnose's KV cache and engine patterns follow the node's vLLM release.

plugins/module_utils/_generated/vllm_kv_messages.py holds, for each vLLM release the compatibility matrix
names (and the sandbox's 0.32.0), the messages that release raises when the KV cache cannot hold the model:
produced by running that release's own ``check_enough_kv_cache_memory`` (V1) and ``raise_if_cache_size_invalid``
(V0, up to 0.10.2) from its PyPI sdist with max_model_len 32768, 6 GiB needed, 2.5 GiB available, an estimate
of 13648 tokens and 1024 blocks of 16 (tools/generate/vllm_kv_messages.py). Each entry names the line that raises it.
"""

from __future__ import annotations

import os
import sys

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.diagnose_match import FilterModule
from ansible_collections.ascendai.vllm.plugins.module_utils._diagnose import DiagnoseError, match, release_key
from ansible_collections.ascendai.vllm.plugins.module_utils._generated.vllm_kv_messages import MESSAGES

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))

diagnose_match = FilterModule().filters()["diagnose_match"]

# vllm-ascend's NPU worker (v0.17.0rc1 on) logs the KV cache memory unclamped, "%.2f GiB":
# https://github.com/vllm-project/vllm-ascend/blob/v0.17.0rc1/vllm_ascend/worker/worker.py#L368
NEGATIVE_KV = "(EngineCore_DP0 pid=812) INFO 12-03 10:01:02 [worker.py:368] Available KV cache memory: -1.25 GiB"
# vllm-ascend v0.10.0rc1 to v0.11.0 with VLLM_USE_V1=0:
# https://github.com/vllm-project/vllm-ascend/blob/v0.11.0/vllm_ascend/platform.py#L124
V0_REFUSED = "ValueError: vLLM Ascend does not support V0 engine."


def _journal(text):
    return {"journal vllm.service": f"Dec 03 10:01:02 node1 vllm[812]: ValueError: {text}\n"}


def _kv(findings):
    return [f for f in findings if f["id"] == "kv_cache_overflow"]


def _matrix_vllm_releases():
    sys.path.insert(0, os.path.join(ROOT, "tools", "generate"))
    try:
        import vllm_release_facts  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.pop(0)
    return set(vllm_release_facts.matrix_versions())


def test_fixture_covers_both_engines_and_every_release():
    kinds = {(m["vllm"], m["kind"]) for m in MESSAGES}
    releases = {m["vllm"] for m in MESSAGES}
    # every vLLM release the compatibility matrix names, and the sandbox's: tools/generate/vllm_kv_messages.py
    missing = _matrix_vllm_releases() - releases
    assert not missing, f"rerun tools/generate/vllm_kv_messages.py: no messages of vLLM {sorted(missing)}"
    assert "0.32.0" in releases
    for release in releases:
        assert (release, "v1_needed") in kinds and (release, "v1_no_memory") in kinds
        # the V0 engine's text exists up to 0.10.2 and no later
        assert ((release, "v0_max_seq_len") in kinds) == (release_key(release) <= (0, 10, 2)), release
    for m in MESSAGES:
        assert m["source"].startswith(f"https://github.com/vllm-project/vllm/blob/v{m['vllm']}/vllm/")


@pytest.mark.parametrize("msg", [m for m in MESSAGES if m["kind"] == "v1_needed"],
                         ids=lambda m: f"v{m['vllm']}")
def test_v1_message_of_each_release_names_the_lengths(msg):
    found = _kv(match(_journal(msg["text"]), vllm_version=msg["vllm"]))
    assert len(found) == 1, msg["text"]
    needed, available = ("6.00", "2.50") if release_key(msg["vllm"]) < (0, 14, 0) else ("6.0", "2.5")
    expected = [f"max_model_len 32768 needs {needed} GiB of KV cache, {available} GiB available"]
    # 0.8.4 to 0.9.0 drop the estimate (a stray f-string statement); 0.7.3 has none
    if release_key(msg["vllm"]) >= (0, 9, 1):
        expected.append("vLLM estimates a max_model_len of at most 13648")
    assert found[0]["details"] == expected


@pytest.mark.parametrize("msg", [m for m in MESSAGES if m["kind"] == "v1_no_memory"],
                         ids=lambda m: f"v{m['vllm']}")
def test_no_memory_message_of_each_release(msg):
    assert len(_kv(match(_journal(msg["text"]), vllm_version=msg["vllm"]))) == 1


@pytest.mark.parametrize("msg", [m for m in MESSAGES if m["kind"] == "v0_max_seq_len"],
                         ids=lambda m: f"v{m['vllm']}")
def test_v0_message_only_where_the_v0_engine_exists(msg):
    found = _kv(match(_journal(msg["text"]), vllm_version=msg["vllm"]))
    assert found and found[0]["details"] == ["max_model_len 32768, the KV cache holds 16384 tokens"]
    # a release without the V0 engine cannot print it: a stale line from an old install is not this node's failure
    assert _kv(match(_journal(msg["text"]), vllm_version="0.11.0")) == []
    assert _kv(match(_journal(msg["text"]), vllm_version="0.32.0+cpu")) == []
    # release unknown: every release's texts are looked for
    assert len(_kv(match(_journal(msg["text"])))) == 1


def test_negative_kv_memory_from_0_9_1_on():
    assert _kv(match({"log": NEGATIVE_KV}, vllm_version="0.18.0"))
    assert _kv(match({"log": NEGATIVE_KV}, vllm_version="0.17.0rc1"))
    assert _kv(match({"log": NEGATIVE_KV}, vllm_version="0.9.0")) == []


def test_v0_engine_refused_by_vllm_ascend():
    for release in ("0.10.0", "0.10.2", "0.11.0", None):
        found = match({"log": V0_REFUSED}, vllm_version=release)
        assert [f["id"] for f in found] == ["v0_engine_unsupported"], release
        assert "VLLM_USE_V1=0" in found[0]["remediation"]
    assert match({"log": V0_REFUSED}, vllm_version="0.13.0") == []


def test_filter_takes_the_release():
    v0 = next(m["text"] for m in MESSAGES if m["kind"] == "v0_max_seq_len")
    assert [f["id"] for f in diagnose_match(_journal(v0), vllm_version="0.9.2")] == ["kv_cache_overflow"]
    assert diagnose_match(_journal(v0), vllm_version="0.23.0") == []
    assert [f["id"] for f in diagnose_match(_journal(v0), vllm_version="")] == ["kv_cache_overflow"]
    with pytest.raises(AnsibleFilterError, match="is not a vLLM version"):
        diagnose_match(_journal(v0), vllm_version="latest")


def test_own_signatures_may_tie_patterns_to_releases():
    sigs = [{"id": "x", "title": "X", "remediation": "fix it",
             "patterns": ["always", {"regex": "new only", "vllm": ["0.20", None]}]}]
    assert match({"l": "always new only"}, signatures=sigs, vllm_version="0.11.0")[0]["count"] == 1
    assert match({"l": "always new only"}, signatures=sigs, vllm_version="0.23.0")[0]["count"] == 2
    with pytest.raises(DiagnoseError, match=r"\[oldest, newest\]"):
        match({"l": "x"}, signatures=[dict(sigs[0], patterns=[{"regex": "x", "vllm": "0.20"}])])
    with pytest.raises(DiagnoseError, match="regular expression or"):
        match({"l": "x"}, signatures=[dict(sigs[0], patterns=[{"vllm": ["0.20", None]}])])


def test_release_key():
    assert release_key("0.10.2") == (0, 10, 2)
    assert release_key("v0.11.0rc1") == (0, 11, 0)
    assert release_key("0.8.5.post1") == (0, 8, 5)
    assert release_key("0.32.0+cpu") == (0, 32, 0)
    assert release_key("0.20") == (0, 20, 0)
    for bad in ("", "latest", None, "0"):
        with pytest.raises(DiagnoseError):
            release_key(bad)
