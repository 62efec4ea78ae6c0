# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: secret_env_api_key
short_description: The API key in the vLLM service's secret environment file
version_added: 0.5.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Reads the key of the C(VLLM_API_KEY=<key>) line that role ascendai.vllm.vllm_service writes to
    C(<vllm_service_config_dir>/<vllm_service_name>.secret.env) (mode 0600, the service user's).
  - The one reader of that file - the service role keeps a generated key with it, the bench role uses it, and so can
    a playbook that calls the API.
  - Returns an empty string when the text holds no such line.
options:
  _input:
    description: The file's text (for example C(slurp)'s content, b64decoded).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read the service's key file
  ansible.builtin.slurp:
    src: /etc/ascendai/vllm/vllm.secret.env
  register: secret
  no_log: true

- name: Call the API with it
  ansible.builtin.uri:
    url: http://127.0.0.1:8000/v1/models
    headers:
      Authorization: "Bearer {{ secret.content | b64decode | ascendai.vllm.secret_env_api_key }}"
  no_log: true
"""

RETURN = r"""
_value:
  description: The key, or an empty string.
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._secret_env import api_key_from_secret_env


def secret_env_api_key(text):
    """Return the key of the secret env file's VLLM_API_KEY line, or ''."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not isinstance(text, str):
        raise AnsibleFilterError(f"secret_env_api_key: the input must be the file's text (slurp's content | "
                                 f"b64decode), got a {type(text).__name__}")
    return api_key_from_secret_env(text)


class FilterModule:
    """ascendai.vllm.secret_env_api_key"""

    def filters(self):
        return {"secret_env_api_key": secret_env_api_key}
