"""ascendai.vllm.serving_venv: the current generation's venv, else site.yml's."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.serving_venv import serving_venv
from hypothesis import given
from hypothesis import strategies as st

RECORD = {"root": "/opt/ascendai/generations", "current": "vllm-ascend-0.13.0", "history": ["vllm-ascend-0.13.0"],
          "failed": []}


def test_current_generation_through_the_link():
    assert serving_venv({"ascendai_generation": RECORD}) == "/opt/ascendai/generations/current/venv"
    assert serving_venv({"ascendai_generation": dict(RECORD, root="/srv/gens/")}) == "/srv/gens/current/venv"


@pytest.mark.parametrize("facts", [None, {}, {"other": {}}, {"ascendai_generation": dict(RECORD, current="")}])
def test_no_generation_gives_site_venv(facts):
    assert serving_venv(facts) == "/opt/ascendai/venvs/vllm"
    assert serving_venv(facts, fallback="/x/venv") == "/x/venv"


@pytest.mark.parametrize("facts, words", [
    ("text", "ansible_local (a mapping)"),
    ({"ascendai_generation": "garbled"}, "remove the file"),
    ({"ascendai_generation": dict(RECORD, root="relative")}, "absolute path"),
    ({"ascendai_generation": dict(RECORD, root=None)}, "absolute path"),
])
def test_bad_record_names_the_fix(facts, words):
    with pytest.raises(AnsibleFilterError, match="serving_venv") as exc:
        serving_venv(facts)
    assert words in str(exc.value)


@given(st.dictionaries(st.text(max_size=8), st.one_of(st.none(), st.text(max_size=8), st.dictionaries(
    st.sampled_from(["root", "current"]), st.one_of(st.none(), st.text(max_size=12))))))
def test_any_local_facts_give_a_path_or_a_filter_error(facts):
    try:
        path = serving_venv(facts)
    except AnsibleFilterError:
        return
    assert path == "/opt/ascendai/venvs/vllm" or path.endswith("/current/venv")
