# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The transfer options that ``bundle_fetch`` and ``model_fetch`` share (one fetch code, ``module_utils/_bundle.py``).

Their argument spec is ``bundle.TRANSFER_ARGUMENT_SPEC``; a module adds its own options on top::

    extends_documentation_fragment:
      - ascendai.vllm.bundle_transfer
"""

from __future__ import annotations


class ModuleDocFragment:  # pylint: disable=too-few-public-methods
    """Documentation fragment: the transfer, check and file-attribute options of the bundle's fetch modules."""

    DOCUMENTATION = r"""
options:
  parallel:
    description: Files transferred at once.
    type: int
    default: 4
  retries:
    description: Retries of one file after a network error (each resumes where the last stopped).
    type: int
    default: 3
  timeout:
    description:
      - Seconds an HTTP connection may stay silent; a transfer slower than 1 KiB/s over this many seconds is given
        up and retried.
    type: int
    default: 60
  validate_certs:
    description: Verify the server's TLS certificate for C(https://) sources.
    type: bool
    default: true
  ca_path:
    description: PEM file of the CA that signed the bundle server's certificate.
    type: path
  rehash:
    description: Read every present file again instead of trusting the cached sha256 (size and mtime unchanged).
    type: bool
    default: false
  status_file:
    description: JSON file receiving the progress every second; default C(<dest>/.ascendai_fetch/status.json).
    type: path
  owner:
    description: Owner of O(dest), its directories and files.
    type: str
  group:
    description: Group of O(dest), its directories and files.
    type: str
  mode:
    description: Mode of the fetched files, for example C('0640').
    type: raw
  directory_mode:
    description: Mode of O(dest) and the directories below it, for example C('0750').
    type: raw
"""
