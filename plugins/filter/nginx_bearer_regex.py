# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: nginx_bearer_regex
short_description: "The nginx map pattern that matches C(Authorization: Bearer KEY) for one API key, exactly"
version_added: 0.5.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Returns a case-sensitive regular expression for a source line of an nginx C(map) on C($http_authorization),
    C(~^[Bb][Ee][Aa][Rr][Ee][Rr]\x20KEY$), where every character of the key other than a letter or a digit is
    written as a PCRE hex escape (C(\xHH)). The pattern holds only letters, digits, C(\), C(^), C($), C([), C(])
    and C(~), so it cannot end the directive, open a block, name a variable or be changed by nginx's quoting.
  - A regular expression, not a plain map string, because nginx lower-cases plain map strings on both sides
    (ngx_http_map_find), which would accept a key in another case. The scheme is matched in any case, as
    vLLM's own check does (its AuthenticationMiddleware compares C(scheme.lower()) with C(bearer)).
  - nginx matches it character by character and stops at the first difference, not a constant-time comparison
    (nginx has none for this). vLLM behind the front compares in constant time where it checks the key itself.
  - Fails, without showing the key, on an empty key or one with a character outside printable ASCII or a space.
options:
  _input:
    description: The API key.
    type: str
    required: true
  name:
    description: The variable the key comes from, named in the error message.
    type: str
    default: api_front_api_keys
"""

EXAMPLES = r"""
- name: A map of the accepted keys
  ansible.builtin.debug:
    msg: "{{ 'sk-123' | ascendai.vllm.nginx_bearer_regex }} 1;"
  # ~^[Bb][Ee][Aa][Rr][Ee][Rr]\x20sk\x2d123$ 1;
"""

RETURN = r"""
_value:
  description: The pattern, starting with C(~).
  type: str
"""

import re

from ansible.errors import AnsibleFilterError

_PRINTABLE = re.compile(r"[!-~]+")
_PLAIN = re.compile(r"[A-Za-z0-9]")


def nginx_bearer_regex(key, name="api_front_api_keys"):
    """``~^[Bb][Ee][Aa][Rr][Ee][Rr]\\x20<key, hex-escaped>$``, or AnsibleFilterError naming ``name``."""
    if not isinstance(key, str) or not _PRINTABLE.fullmatch(key):
        raise AnsibleFilterError(
            f"nginx_bearer_regex: a key in {name} is empty, not a string, or holds a space, a control character or "
            "a non-ASCII character (the key is not shown). Use printable ASCII without spaces. Nothing was written.")
    escaped = "".join(char if _PLAIN.match(char) else f"\\x{ord(char):02x}" for char in key)
    return f"~^[Bb][Ee][Aa][Rr][Ee][Rr]\\x20{escaped}$"


class FilterModule:
    """ascendai.vllm.nginx_bearer_regex"""

    def filters(self):
        return {"nginx_bearer_regex": nginx_bearer_regex}
