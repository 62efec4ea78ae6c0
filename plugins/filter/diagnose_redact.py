# Copyright (c) ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: diagnose_redact
short_description: Remove secrets from configuration or log text before it leaves the node
version_added: 0.1.0
description:
  - "Replaces with C(<redacted>) the values of keys and options named like a token, a password, a secret, an API
    key, an AK/SK, an auth or a cookie, in any case style (C(api_key), C(API-KEY), C(accessToken), C(ClientSecret),
    C(APIKEY), C(OBS_SK)): C(KEY=value), C(key: value), C(Environment=\"KEY=value with spaces, commas\"),
    C(--api-key value), option and value as separate list items (JSON, Python, a YAML C(args:) list), quoted values
    of any length with escaped quotes, a YAML value on the lines below its key (plain, quoted, block scalar, list),
    XML elements, Kubernetes C(env) name/value pairs, C(Authorization), C(Cookie) and C(Set-Cookie) headers."
  - "Also PEM private keys, C(.netrc) passwords, C(curl -u user:password), the values of a Kubernetes Secret's
    C(data) and C(stringData), docker C(auth), the secret columns of a CSV whose header names them, bearer tokens,
    JWTs, Hugging Face tokens (C(hf_...)) and passwords in URLs."
  - Keys merely containing such a word, like C(tokenizer) or C(max_num_batched_tokens), are kept.
  - Time grows linearly with the text, also on one line of several MiB.
  - V(None) passes through (returned as V(None)), so an output that was never captured needs no default. Any other
    input that is not a string (bytes, a list of lines, a mapping, a number) is an error; its value is not shown in
    the message, as it may hold secrets.
options:
  _input:
    description: The text; V(None) passes through as V(None).
    type: string
    required: true
seealso:
  - ref: ascendai.vllm.diagnose_match filter
    description: Names the known failures in gathered texts.
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: Keep the service's environment file without its secrets
  ansible.builtin.copy:
    content: "{{ env_file.content | b64decode | ascendai.vllm.diagnose_redact }}"
    dest: /tmp/bundle/vllm.env
    mode: "0600"
  delegate_to: localhost
"""

RETURN = r"""
_value:
  description: The text with the secret values replaced by C(<redacted>); V(None) for V(None).
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._diagnose import DiagnoseError, redact


def diagnose_redact(text):
    """Remove secrets from text."""
    try:
        return redact(text)   # None passes through (DOCUMENTATION)
    except DiagnoseError:
        # the value is bound for redaction: only its type is named
        raise AnsibleFilterError(
            f"diagnose_redact: the input must be text (a string, e.g. the decoded content of a file), got "
            f"{type(text).__name__}: its value is not shown, as it may hold secrets. Pass the text, e.g. slurp's "
            "content | b64decode, or a list of lines joined with join('\\n'); None passes through as None."
        ) from None


class FilterModule:
    def filters(self):
        return {"diagnose_redact": diagnose_redact}
