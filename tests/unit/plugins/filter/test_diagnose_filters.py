"""The diagnose_match and diagnose_redact filters: what a playbook gets back, and the errors it reads."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.diagnose_match import FilterModule as MatchFilters
from ansible_collections.ascendai.vllm.plugins.filter.diagnose_redact import FilterModule as RedactFilters

diagnose_match = MatchFilters().filters()["diagnose_match"]
diagnose_redact = RedactFilters().filters()["diagnose_redact"]


def test_match_names_a_link_down_and_an_alarm():
    found = diagnose_match({
        "hccn_tool -i 2 -link -g": "link status: DOWN\n",
        "npu-smi info -t health -i 2": "\tHealth Status                  : Alarm\n"
                                       "\tError Code                     : 80E01801\n",
    })
    assert [f["id"] for f in found] == ["npu_unhealthy", "npu_error_code", "nic_link_down"]
    assert found[1]["details"] == ["error code 80E01801"]
    assert found[2]["sources"] == ["hccn_tool -i 2 -link -g"]


def test_match_max_examples_and_bad_input():
    found = diagnose_match({"log": "link status: DOWN\nlink status: DOWN\n"}, max_examples=1)
    assert found[0]["count"] == 2 and len(found[0]["examples"]) == 1
    with pytest.raises(AnsibleFilterError, match="mapping of source name to text"):
        diagnose_match(42)


def test_redact():
    assert diagnose_redact("VLLM_API_KEY=abc\nVLLM_PORT=8000\n") == "VLLM_API_KEY=<redacted>\nVLLM_PORT=8000\n"
    with pytest.raises(AnsibleFilterError, match="must be text"):
        diagnose_redact(["VLLM_API_KEY=abc"])
