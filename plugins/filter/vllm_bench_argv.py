# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: vllm_bench_argv
short_description: The command line of the node's vllm bench serve for the benchmark workload, in every vLLM release
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Builds the argument vector that runs the serve benchmark of the vLLM installed on the node with the same
    workload as M(ascendai.vllm.openai_probe) - random prompts of C(input_len) tokens,
    C(output_len) tokens out, C(requests) requests, C(concurrency) in flight.
  - The flags follow the release, read from its own parser - C(--endpoint-type openai-comp) (0.8.4 to 0.9.0),
    C(--endpoint-type openai) (0.9.1), C(--backend openai) (0.9.2 on), C(--save-detailed) (0.9.1 on),
    C(--num-warmups) (0.12 on).
  - vLLM 0.7.3 has no C(vllm.benchmarks.serve); its benchmarks/benchmark_serving.py is in the source tree only.
    With C(script) set to a copy of it on the node, that script is run with 0.7.3's flags; without it
    C(argv) is null and C(notes) say why.
options:
  _input:
    description:
      - What the node's venv offers, as the playbook's detection writes it - C(vllm) (version), C(module) (true when
        C(vllm.benchmarks.serve) imports), C(options) (option string to its choices or null), C(error).
    type: dict
    required: true
  settings:
    description:
      - C(python), C(launcher) (code for C(python -c) that runs the benchmark from its module), C(script)
        (optional), C(base_url), C(model), C(tokenizer), C(input_len), C(output_len), C(requests), C(concurrency),
        C(warmup), C(ignore_eos), C(result_dir), C(result_filename).
      - C(script), C(warmup) and C(ignore_eos) may be left out; a missing or unknown key is an error that names it.
        C(python), C(launcher), C(base_url), C(model), C(tokenizer), C(result_dir) and C(result_filename) are
        non-empty strings; C(input_len), C(output_len), C(requests) and C(concurrency) positive integers;
        C(warmup) a whole number; C(ignore_eos) a boolean.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Run vllm bench serve
  ansible.builtin.command:
    argv: "{{ (bench_vllm_info | ascendai.vllm.vllm_bench_argv(bench_settings)).argv }}"
  changed_when: false
"""

RETURN = r"""
_value:
  description:
    - C(argv) (list, or null when this vLLM has no serve benchmark), C(warmup) (requests sent before measuring)
      and C(notes) (list of strings).
  type: dict
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._bench_report import ReportError, vllm_bench_argv as _argv


def vllm_bench_argv(info, settings):
    """Return ``{argv, warmup, notes}`` (see DOCUMENTATION)."""
    try:
        return _argv(info, settings)
    except ReportError as exc:
        raise AnsibleFilterError(f"vllm_bench_argv: {exc}") from None


class FilterModule:
    """ascendai.vllm.vllm_bench_argv"""

    def filters(self):
        return {"vllm_bench_argv": vllm_bench_argv}
