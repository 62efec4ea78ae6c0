"""secret_env_api_key: the one reader of vllm_service's secret env file, against the line the role writes."""

from __future__ import annotations

import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.secret_env_api_key import FilterModule
from ansible_collections.ascendai.vllm.plugins.module_utils._secret_env import secret_env_line
from hypothesis import given
from hypothesis import strategies as st

secret_env_api_key = FilterModule().filters()["secret_env_api_key"]
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))

# what systemd_quote's env_plain lets through: printable ASCII without a space, a quote or a backslash
KEYS = st.text(alphabet=[chr(c) for c in range(0x21, 0x7F) if chr(c) not in "\"'\\"], min_size=1, max_size=80)


@given(KEYS)
def test_reads_back_what_the_writer_wrote(key):
    assert secret_env_api_key(secret_env_line(key)) == key


def test_the_role_writes_the_same_line():
    """vllm_service's configure.yml writes the line secret_env_line describes."""
    with open(os.path.join(ROOT, "roles", "vllm_service", "tasks", "configure.yml"), encoding="utf-8") as handle:
        tasks = yaml.safe_load(handle)
    contents = [t["ansible.builtin.copy"]["content"] for t in tasks
                if isinstance(t.get("ansible.builtin.copy"), dict) and "VLLM_API_KEY" in
                str(t["ansible.builtin.copy"].get("content", ""))]
    assert contents == ["VLLM_API_KEY={{ _vllm_service_api_key }}\n"]
    assert secret_env_line("{{ _vllm_service_api_key }}") == contents[0]


@pytest.mark.parametrize(("text", "key"), [
    ("", ""),
    ("# nothing\n", ""),
    ("VLLM_API_KEY=\n", ""),
    ("VLLM_API_KEY=abc def\n", ""),            # a space: not a line the writer makes
    ("OTHER=1\nVLLM_API_KEY=k1\nVLLM_API_KEY=k2\n", "k1"),
    ("VLLM_API_KEY=k1\r\n", "k1"),
    (" VLLM_API_KEY=k1\n", ""),
    ("XVLLM_API_KEY=k1\n", ""),
    (b"VLLM_API_KEY=k1\n", "k1"),
])
def test_lines(text, key):
    assert secret_env_api_key(text) == key


@pytest.mark.parametrize("bad", [None, 3, ["VLLM_API_KEY=x"], {"content": "x"}])
def test_refuses_what_is_not_text(bad):
    with pytest.raises(AnsibleFilterError, match="b64decode"):
        secret_env_api_key(bad)
