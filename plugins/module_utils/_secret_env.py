# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The service's secret environment file, ``<vllm_service_config_dir>/<name>.secret.env``.

vllm_service writes one unquoted line, ``VLLM_API_KEY=<key>``, that systemd reads as the unit's EnvironmentFile
(the key passes systemd_quote's ``env_plain`` check first: printable ASCII without a space or a quote). This is the
one reader of that file: the service role keeps a generated key from it, the bench role and the sandbox tools read
the key from it, the Molecule checks too.
"""

from __future__ import annotations

import re

API_KEY_VARIABLE = "VLLM_API_KEY"
# printable ASCII without a space (the writer's own check refuses the rest), on a line of its own
_KEY_LINE = re.compile(r"^" + API_KEY_VARIABLE + r"=([!-~]+)$", re.M)


def secret_env_line(key):
    """The file's text for ``key``, as the service role writes it."""
    return f"{API_KEY_VARIABLE}={key}\n"


def api_key_from_secret_env(text):
    """The key of the file's first ``VLLM_API_KEY=`` line; ``''`` when there is none (a missing or emptied file)."""
    match = _KEY_LINE.search(text.replace("\r\n", "\n"))
    return match.group(1) if match else ""
