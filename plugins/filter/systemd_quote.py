# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: systemd_quote
short_description: Quote a value for a systemd unit or environment file, or refuse one systemd would misread
version_added: 0.5.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Renders a value so that systemd reads back exactly what was given, following systemd's own syntax
    (systemd.syntax(7), systemd.exec(5) C(EnvironmentFile=), systemd.service(5) command lines), or fails naming the
    variable and the fix. Control characters (a newline above all) are always refused.
  - O(kind=env_file) takes a mapping and returns the lines of an environment file, C(NAME="value"), every value
    double-quoted with the double quote, backslash, backquote and dollar sign escaped by a backslash.
  - O(kind=env_plain) checks a secret written unquoted as C(NAME=value), which must be printable ASCII without
    blanks, quotes or backslashes; its message never shows the value.
  - O(kind=path) returns an absolute path for C(EnvironmentFile=) or C(WorkingDirectory=) with C(%) doubled;
    O(kind=exec_path) the same path as one double-quoted word of C(ExecStart=), with C($) doubled too;
    O(kind=text) free text such as C(Description=) with C(%) doubled.
options:
  _input:
    description: The value (a mapping for O(kind=env_file)).
    type: raw
    required: true
  kind:
    description: Where the value goes.
    type: str
    choices: [env_file, env_plain, path, exec_path, text]
    required: true
  name:
    description: The variable the value comes from, named in the error message.
    type: str
    required: true
  secret:
    description: With O(kind=env_file), never show a value in an error message.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: The environment file of a unit
  ansible.builtin.copy:
    content: >-
      {{ {'OMP_NUM_THREADS': 8, 'HCCL_SOCKET_IFNAME': 'eth0'}
         | ascendai.vllm.systemd_quote('env_file', name='ray_cluster_env') }}
    dest: /etc/ascendai/ray/ray.env
    mode: "0640"
  # OMP_NUM_THREADS="8" and HCCL_SOCKET_IFNAME="eth0", one a line

- name: A unit line
  ansible.builtin.debug:
    msg: >-
      EnvironmentFile={{ '/etc/ascend ai/vllm.env'
                         | ascendai.vllm.systemd_quote('path', name='vllm_service_config_dir') }}
"""

RETURN = r"""
_value:
  description: The quoted value (the lines of the file for O(kind=env_file)).
  type: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._systemd_syntax import (
    SystemdSyntaxError,
    env_file,
    exec_path,
    plain_env_value,
    unit_path,
    unit_text,
)

_KINDS = {
    "env_file": None,
    "env_plain": plain_env_value,
    "path": unit_path,
    "exec_path": exec_path,
    "text": unit_text,
}


def systemd_quote(value, kind, name, secret=False):
    """Quote ``value`` for systemd, or raise AnsibleFilterError naming ``name`` and the fix."""
    if not isinstance(kind, str) or kind not in _KINDS:
        raise AnsibleFilterError(f"systemd_quote: kind={kind!r} is not one of {', '.join(_KINDS)}")
    if not isinstance(secret, bool):   # bool('false') is True
        raise AnsibleFilterError(f"systemd_quote: secret={secret!r:.200} must be true or false (whether the value may "
                                 "be shown in messages)")
    try:
        if kind == "env_file":
            return env_file(value, name, secret=secret)
        return _KINDS[kind](value, name)
    except SystemdSyntaxError as exc:
        raise AnsibleFilterError(f"systemd_quote: {exc}. Nothing was written with it.") from None


class FilterModule:
    """ascendai.vllm.systemd_quote"""

    def filters(self):
        return {"systemd_quote": systemd_quote}
