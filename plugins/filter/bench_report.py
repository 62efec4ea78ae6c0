# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: bench_report
short_description: Benchmark report (SLO verdict, JSON, Markdown, SVG latency plot) from probe and vllm bench results
version_added: 0.1.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Takes the registered result of M(ascendai.vllm.openai_probe) (O(mode=bench)) and the JSON written by
    C(vllm bench serve --save-result), compares both with the SLOs, and returns the report as data, as a
    Markdown page and as an SVG plot of the latency of every request.
  - TTFT is compared through the O(slo.ttft_stat) statistic (C(p90) by default; from C(vllm bench serve) this needs
    C(--percentile-metrics ttft,... --metric-percentiles 50,90,99)), throughput through the output tokens per
    second of the whole run (the probe's C(output_tokens_per_s), vLLM's C(output_throughput)).
  - The plot is plain SVG written in Python; no matplotlib is needed.
options:
  _input:
    description:
      - The registered result of M(ascendai.vllm.openai_probe). An empty dict, null or a skipped result means
        that the probe did not run.
    type: raw
    required: true
  bench:
    description:
      - The C(vllm bench serve) result (a dict, or its JSON text). With C(--save-detailed) its per-request
        C(ttfts) and C(latencies) are plotted too.
    type: raw
  slo:
    description:
      - Thresholds; keys not given take the deployment guide's values, null disables a check.
    type: dict
    suboptions:
      ttft_ms: {description: Highest time to first token in ms., type: float, default: 350}
      ttft_stat: {description: "Statistic compared: mean, p50, p90 or p99.", type: str, default: p90}
      tokens_per_s: {description: Lowest output throughput in tokens per second., type: float, default: 1200}
      max_error_rate: {description: Highest share of failed requests., type: float, default: 0}
  meta:
    description: Free-form facts shown at the top of the report (host, model, date, options).
    type: dict
  plot_file:
    description: File name the Markdown links the plot under (next to the Markdown file).
    type: str
    default: latency.svg
"""

EXAMPLES = r"""
- name: Write the report on the controller
  vars:
    bench_out: "{{ probe | ascendai.vllm.bench_report(bench=vllm_bench_json, slo={'ttft_ms': 350,
                                                         'tokens_per_s': 1200},
                                                         meta={'host': inventory_hostname}) }}"
  ansible.builtin.copy:
    content: "{{ bench_out.markdown }}"
    dest: /tmp/bench/report.md
    mode: "0644"
  delegate_to: localhost
"""

RETURN = r"""
_value:
  description: The report in three forms.
  type: dict
  contains:
    report:
      description:
        - C(meta), C(slo) (the thresholds used), C(slo_ok), C(checks) (per source and SLO - C(limit), C(measured),
          C(ok), C(message)), C(violations) (messages), C(probe) and C(vllm_bench) (the metrics kept) and
          C(series) (per-request latencies plotted).
      type: dict
    markdown: {description: The report as a Markdown page., type: str}
    svg: {description: The latency plot as SVG text., type: str}
"""

import json

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._bench_report import (
    ReportError,
    build_report,
    render_markdown,
    render_svg,
)


def bench_report(probe, bench=None, slo=None, meta=None, plot_file="latency.svg"):
    """Return ``{report, markdown, svg}`` (see DOCUMENTATION)."""
    if probe in (None, "") or (isinstance(probe, dict) and "ttft_ms" not in probe
                               and (not probe or probe.get("skipped"))):
        probe = None
    if isinstance(bench, str):
        try:
            bench = json.loads(bench) if bench.strip() else None
        except ValueError as exc:
            raise AnsibleFilterError(f"bench_report: bench is not JSON ({exc}): {bench[:80]!r}; pass the file that "
                                     "vllm bench serve --save-result wrote, read with from_json") from None
    try:
        report = build_report(probe=probe, bench=bench, slo=slo, meta=meta)
        return {"report": report, "markdown": render_markdown(report, plot_file=plot_file), "svg": render_svg(report)}
    except ReportError as exc:
        raise AnsibleFilterError(f"bench_report: {exc}") from exc


class FilterModule:
    """ascendai.vllm.bench_report"""

    def filters(self):
        return {"bench_report": bench_report}
