"""The nginx_bearer_regex filter: the pattern matches exactly "Authorization: Bearer KEY" (scheme in any case, the
key in its own case), holds only characters nginx cannot misread, and errors never show the key."""

from __future__ import annotations

import re
import string

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.nginx_bearer_regex import FilterModule

nginx_bearer_regex = FilterModule().filters()["nginx_bearer_regex"]

KEYS = ["sk-123", "token", "AbC123xyz", "a.b*c$d^e", "x/y+z=", "(){}[]|?\\", "semi;colon'quote\"#", "~tilde",
        string.punctuation, "k" * 200]


def test_documented_example():
    assert nginx_bearer_regex("sk-123") == r"~^[Bb][Ee][Aa][Rr][Ee][Rr]\x20sk\x2d123$"


@pytest.mark.parametrize("key", KEYS)
def test_pattern_matches_exactly_the_header_of_that_key(key):
    pattern = nginx_bearer_regex(key)
    assert pattern.startswith("~")
    # only letters, digits, \ ^ $ [ ] and ~: nothing that ends the directive or names a variable
    assert set(pattern) <= set(string.ascii_letters + string.digits + "\\^$[]~")
    regex = re.compile(pattern[1:])          # PCRE and Python read [Bb] and \xHH the same way
    for scheme in ("Bearer", "bearer", "BEARER", "bEaReR"):
        assert regex.fullmatch(f"{scheme} {key}")
    # (no case with a final newline: PCRE's $, like Python's, matches before one, and nginx's header parser
    # never passes one in a header value)
    for other in (f"Bearer {key}x", f"Bearer x{key}", f"Bearer  {key}", f"Basic {key}", f"Bearer {key[:-1]}",
                  f"Bearer\t{key}", f"xBearer {key}"):
        assert not regex.search(other), other
    if key.swapcase() != key:
        assert not regex.fullmatch(f"Bearer {key.swapcase()}")   # the key is case-sensitive


@pytest.mark.parametrize("key", ["", "has space", "tab\tkey", "new\nline", "ключ", "caf\u00e9", 12345, None,
                                 ["sk-123"]])
def test_bad_key_names_the_variable_not_the_key(key):
    with pytest.raises(AnsibleFilterError) as info:
        nginx_bearer_regex(key, name="vllm_api_front_keys")
    message = str(info.value)
    assert message.startswith("nginx_bearer_regex: a key in vllm_api_front_keys is empty, not a string, or holds")
    assert "(the key is not shown)" in message
    if isinstance(key, str) and key:
        assert key not in message


def test_default_variable_name():
    with pytest.raises(AnsibleFilterError, match="a key in api_front_api_keys is empty"):
        nginx_bearer_regex("")
