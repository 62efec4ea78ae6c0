# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import annotations

DOCUMENTATION = r"""
name: pd_plan
short_description: Plan a prefill/decode disaggregated layout - every DP rank's ports, NPUs and kv-transfer-config
version_added: 0.5.0
author:
  - ascendai.vllm contributors (@ascendai)
description:
  - Takes the inventory's prefill/decode (P/D) layout and returns one entry per DP rank (each rank is its own
    C(vllm serve), as vllm-ascend's C(examples/external_online_dp/launch_online_dp.py) starts them) and the proxy's
    upstream lists in the order the connector needs.
  - Per rank, the i-th rank on a node serves on C(api_port + i) with NPUs i x tp to i x tp + tp - 1 of that node (the
    next free ones when roles share a node), and C(--data-parallel-address) is the node holding DP rank 0 of its
    instance. Engine ids are unique per rank.
  - Kv ports, as the connectors bind them from C(--data-parallel-rank) (global under an external load balancer) -
    Mooncake connectors C(kv_port + dp_rank * tp) to C(+ tp - 1); C(LLMDataDistCMgrConnector) the same from
    C(VLLM_ASCEND_LLMDD_RPC_PORT); C(NixlConnector) C(VLLM_NIXL_SIDE_CHANNEL_PORT + dp_rank). Each role instance gets
    its own block from O(_input.kv_port); one integer stacks the prefill instances first, then the decode ones.
  - Refuses, naming the setting, the value and the fix - a connector the vllm-ascend release lacks
    (C(MooncakeConnectorV1) from v0.10.1rc1 and C(MooncakeLayerwiseConnector) from v0.11.0rc1, both planned from
    v0.11.0rc1 where AscendDirectTransport is the default; C(LLMDataDistCMgrConnector) in v0.9.1rc2-v0.9.1 and
    v0.10.0rc1-v0.11.0, planned in v0.11.0rc1-v0.11.0); kv ports inside AscendDirectTransport's random ports,
    20000 up to but not including 20000 + NPUs per node x 1000 (Mooncake connectors); two port ranges of one node
    that overlap (kv ranges, API ports, backend ports, DP RPC ports, the proxy, O(_input.ports_in_use)); a backend
    port (API port + O(_input.backend_port_offset)) beyond 65535 or inside AscendDirectTransport's random ports
    (Mooncake connectors); ranks x TP beyond a
    node's NPUs; DP ranks the hosts do not hold exactly once; for Mooncake a prefill TP that is not a multiple of
    the decode TP (equal or larger); for the layerwise connector a wildcard proxy host (decode ranks call its
    C(/v1/metaserver)).
  - Each rule's source (vllm-ascend file at its tag, vLLM 0.11.0/0.32.0, Mooncake) is in the module
    C(plugins/module_utils/_pd_layout.py) and in docs/sources.md, "Prefill/decode disaggregation plan".
  - Per role, the environment and vLLM options of vllm-ascend's multi-node P/D tutorial at the release's tag
    (C(HCCL_BUFFSIZE) 256 on prefill and 600 on decode, C(enforce_eager) and 16384 batched tokens on prefill,
    C(FULL_DECODE_ONLY) graph capture on decode, ...), each value with its file, tag and line in the role's
    C(sources); the role's own O(_input.prefill) C(options) and C(env) go on top. Only the tutorials that were
    read are in the table (C(MooncakeConnectorV1) in v0.13.0rc1 to v0.25.1rc1); for another release or connector the
    ranks get no tutorial settings and the plan warns (not refuses, since the ports and connector settings do not
    depend on them). Every option name is checked against that release's vLLM serve parser (the collection's generated
    option table); a name it lacks is refused.
  - Memory per role, when O(_input.model) gives the model's C(config.json), through the KV-cache capacity plan of
    P(ascendai.vllm.kv_cache_plan#filter) - weights per NPU at the role's TP (routed experts over DP x TP ranks with
    C(enable_expert_parallel)) and the KV cache left at C(gpu_memory_utilization) of C(hbm_gib_per_npu) (64, an
    Atlas 800 A2 NPU). Refused - weights that do not fit, a KV cache smaller than one C(max_model_len) sequence.
    Warned about - C(max_num_seqs) x C(max_model_len) beyond the KV cache (vLLM preempts; the tutorial's own A3
    layout does so). Without O(_input.model) memory is not checked and the plan says so in its warnings.
options:
  _input:
    description: The layout.
    type: dict
    required: true
    suboptions:
      connector:
        description: The KV connector. C(NixlConnector) is vLLM's own, for the CPU sandbox (vLLM 0.32).
        type: str
        required: true
        choices: [MooncakeConnectorV1, MooncakeLayerwiseConnector, LLMDataDistCMgrConnector, NixlConnector]
      vllm_ascend_version:
        description:
          - The nodes' vllm-ascend release (C(ascendai_stack.vllm_ascend)), a quoted string; a release of the
            collection's compatibility table. Not read for C(NixlConnector).
        type: str
      prefill:
        description:
          - The prefill role. C(dp) and C(tp) are those of one instance (what C(kv_connector_extra_config) names);
            several prefill instances (vllm-ascend's 2P1D) are hosts with C(instance) 1, 2, ...
          - Each host entry has C(host) (the inventory name), C(dp_ranks) (the DP ranks it serves), C(npus) (NPUs
            of the node; may be left out for C(NixlConnector)), optional C(devices) (the NPU ids to use), optional
            C(address) (what the proxy and the other ranks dial; default C(host)) and optional C(instance)
            (default 0). Every instance's ranks C(0 .. dp-1) must be held exactly once.
          - Optional C(options) (vLLM options in snake_case, over the tutorial's; not those the layout sets per rank)
            and C(env) (environment variables, over the tutorial's).
        type: dict
        required: true
      decode:
        description: The decode role, as O(_input.prefill).
        type: dict
        required: true
      api_port:
        description:
          - First API port on a node. One integer numbers the ranks of a node across both roles; a mapping
            with the keys C(prefill) and C(decode) numbers each role's ranks from its own base.
        type: raw
        required: true
      kv_port:
        description:
          - First kv port. One integer stacks every role instance's block (C(dp x tp) ports, C(dp) for Nixl), prefill
            first; a mapping with the keys C(prefill) and C(decode) starts each role at its own base. For Mooncake on
            a node with 8 NPUs use 28000 or more, with 16 NPUs 36000 or more.
        type: raw
        required: true
      dp_rpc_port:
        description:
          - C(--data-parallel-rpc-port), one per role instance (on its rank-0 node); an integer is stacked like
            O(_input.kv_port).
        type: raw
        default: 12345
      backend_port_offset:
        description:
          - Where vLLM of each rank listens behind its API front (role ascendai.vllm.vllm_pd puts an nginx front on
            the rank's API port) - 127.0.0.1 at the API port plus this. The plan reserves these ports on the node
            like the others.
        type: int
        default: 10000
      proxy:
        description:
          - The proxy's C(host) and C(port). The host is matched to a rank's C(host) or C(address) to find its node.
        type: dict
        required: true
      ports_in_use:
        description:
          - Other ports of the nodes (the single-node service's 8000, Ray's 6379, exporters), as ports or ranges
            (C(10002-19999) or C([10002, 19999])). A list applies to every node; a mapping gives each host's.
        type: raw
      model:
        description:
          - The model, for the memory check. C(config) (the model's C(config.json) mapping), optional C(quantization)
            (C(ascend) for vllm-ascend's W8A8; default the role's C(quantization) option), C(dtype), C(kv_cache_dtype),
            C(block_size), C(reserved_gib) (default 2) and C(hbm_gib_per_npu) (default 64).
        type: dict
"""

EXAMPLES = r"""
- name: Plan vllm-ascend's 2P1D DeepSeek-R1 layout (two prefill instances of DP2 TP8, one decode DP32 TP1)
  ansible.builtin.set_fact:
    pd: "{{ pd_layout | ascendai.vllm.pd_plan }}"
  vars:
    pd_layout:
      connector: MooncakeConnectorV1
      vllm_ascend_version: "{{ ascendai_stack.vllm_ascend }}"
      prefill:
        dp: 2
        tp: 8
        hosts:
          - {host: p1, address: 192.0.0.1, dp_ranks: [0, 1], npus: 16}
          - {host: p2, address: 192.0.0.2, dp_ranks: [0, 1], npus: 16, instance: 1}
      decode:
        dp: 32
        tp: 1
        hosts:
          - {host: d1, address: 192.0.0.3, dp_ranks: "{{ range(0, 16) | list }}", npus: 16}
          - {host: d2, address: 192.0.0.4, dp_ranks: "{{ range(16, 32) | list }}", npus: 16}
      api_port: 7100
      kv_port: 36000
      proxy: {host: 192.0.0.1, port: 1999}
      ports_in_use: [8000, 6379, 9100]

- name: The ranks of this host
  ansible.builtin.debug:
    msg: "{{ pd.ranks | selectattr('host', 'equalto', inventory_hostname) | list }}"
"""

RETURN = r"""
_value:
  description: The plan.
  type: dict
  contains:
    connector: {description: The connector., type: str}
    vllm_ascend_version: {description: The release planned for (its table row's; empty for NixlConnector)., type: str}
    roles:
      description:
        - Per role C(dp), C(tp), C(instances) and C(kv_role) (C(kv_producer) / C(kv_consumer)).
        - C(env) and C(options) (the tutorial's and the role's), C(sources) (per C(env.NAME) / C(options.NAME) the
          tutorial file at its tag and line, or the role setting), C(profile) (the tutorial read, or empty),
          C(vllm_options_release) (the vLLM option table checked) and C(memory) (weights and KV tokens per NPU, or
          none without O(_input.model)).
      type: dict
    ranks:
      description:
        - One entry per DP rank, prefill first, by instance and rank - C(role), C(instance), C(host), C(address),
          C(dp_rank), C(local_index), C(api_port), C(backend_port) (C(api_port) +
          O(_input.backend_port_offset), where vLLM listens behind the rank's API front), C(url), C(visible_devices),
          C(kv_port) (the value the connector reads), C(kv_ports) (C(first) and C(last) port it binds), C(engine_id),
          C(kv_rank) (0 prefill, 1 decode), C(dp_address), C(dp_rpc_port).
        - C(kv_transfer_config) (a mapping) and C(kv_transfer_config_json) - C(kv_connector), C(kv_role),
          C(kv_port), Mooncake's C(kv_connector_extra_config) with both roles' C(dp_size)/C(tp_size), and
          C(engine_id), C(kv_connector_module_path), C(kv_buffer_device), C(kv_parallel_size) where that
          release's tutorial passes them.
        - C(env) - the role's C(env), C(ASCEND_RT_VISIBLE_DEVICES), and the connector's port variable
          (C(VLLM_ASCEND_LLMDD_RPC_PORT), C(VLLM_NIXL_SIDE_CHANNEL_PORT) with C(VLLM_NIXL_SIDE_CHANNEL_HOST)).
        - C(serve_options) - the role's C(options) and the vLLM options of the rank (C(port), C(data_parallel_size),
          C(data_parallel_rank), C(data_parallel_address), C(data_parallel_rpc_port), C(tensor_parallel_size),
          C(kv_transfer_config)) for P(ascendai.vllm.vllm_config#filter). A role of one DP rank gets no
          C(data_parallel_*) option - C(--data-parallel-rank) turns on vLLM's external load-balancer mode, which
          vLLM refuses for a C(data_parallel_size) of 1. C(port) is the API port; a server behind a front listens
          on C(backend_port) instead.
      type: list
      elements: dict
    proxy:
      description:
        - C(host), C(node), C(port), C(order) (C(prefill_first), or C(decode_first) for the layerwise connector),
          C(first), C(prefill) and C(decode) (upstream URLs), C(prefiller_hosts)/C(prefiller_ports) and
          C(decoder_hosts)/C(decoder_ports) (vllm-ascend's example proxy's arguments), C(metaserver) (layerwise).
      type: dict
    hosts:
      description: Per node C(npus), C(devices), C(ports) (every port range and its owner), C(kv_ports) and
        C(transport_reserved) (AscendDirectTransport's random range; none without Mooncake).
      type: dict
    warnings:
      description: Ports that are not kv ports but inside the transport's random range; a loopback layerwise proxy;
        no tutorial read for the release or connector; no model config (memory not checked); the memory plan's own
        warnings per role.
      type: list
      elements: str
"""

from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.module_utils._pd_layout import PdLayoutError, plan_pd


def pd_plan(layout):
    """Return the P/D plan of ``layout`` (see DOCUMENTATION), or raise AnsibleFilterError naming the setting."""
    try:
        return plan_pd(layout)
    except PdLayoutError as exc:
        raise AnsibleFilterError(f"pd_plan: {exc}") from exc


class FilterModule:
    """ascendai.vllm.pd_plan"""

    def filters(self):
        return {"pd_plan": pd_plan}
