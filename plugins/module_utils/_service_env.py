# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The vLLM service environment: the one place both deployment paths take it from.

The systemd path (role ``vllm_service``: an environment file next to the unit) and the Kubernetes path (role
``k8s_manifests``: the container's ``env``) must give vLLM the same variables for the same inputs:

* ``ASCEND_RT_VISIBLE_DEVICES``: the runtime device mask (the ``CUDA_VISIBLE_DEVICES`` analogue; vllm-ascend's
  platform declares it as its ``device_control_env_var``). Only on the systemd path: under Kubernetes the Ascend
  device plugin picks the NPUs and the Ascend container runtime injects just those (``ASCEND_VISIBLE_DEVICES``),
  renumbered from 0 inside the container, so host NPU ids there would point at devices the pod does not have.
* ``PYTORCH_NPU_ALLOC_CONF``: torch_npu's caching allocator (``expandable_segments:True`` in vllm-ascend's
  tuning guide, or ``max_split_size_mb:N``).
* ``HCCL_RDMA_TC`` / ``HCCL_RDMA_SL`` from the RoCE QoS policy (``roce_qos.hccl_env``), when the model spans
  nodes; other ``HCCL_*`` settings (``HCCL_BUFFSIZE``, ``HCCL_OP_EXPANSION_MODE``, ``HCCL_SOCKET_IFNAME`` ...).
* any other real variable (``TASK_QUEUE_ENABLE``, ``OMP_NUM_THREADS``, ``VLLM_ASCEND_*`` ...). Given the node's
  vllm-ascend release, a ``VLLM_ASCEND_*`` switch that release ignores is refused with the form it reads
  (``vllm_ascend_settings``: ``VLLM_ASCEND_BALANCE_SCHEDULING`` is gone from v0.27.1rc1).

Not here: the API key (``VLLM_API_KEY``; a secret: a 0600 file on the systemd path, a Kubernetes Secret on the
other) and the CANN toolkit's ``set_env.sh`` variables (the node's CANN install, or the container image, sets
those). Values are strings, keys sorted, so both renderings compare equal.

Pure stdlib plus the collection's own module_utils.
"""

from __future__ import annotations

import re

from ansible_collections.ascendai.vllm.plugins.module_utils._roce_qos import RoceQosError, hccl_env
from ansible_collections.ascendai.vllm.plugins.module_utils._vllm_ascend_settings import (
    SettingError,
    ascend_setting_problems,
)
from ansible_collections.ascendai.vllm.plugins.module_utils._vllm_options import FAKE_ENV

TARGETS = ("systemd", "kubernetes")
DEFAULT_NPU_ALLOC_CONF = "expandable_segments:True"

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")   # used with fullmatch: "$" would also match before a final "\n"
# Control characters (a newline above all) would add a line to the env file or the unit: KEY=x\nLD_PRELOAD=...
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ALLOC_ITEM = re.compile(r"^(expandable_segments:(True|False)|max_split_size_mb:[0-9]+|"
                         r"garbage_collection_threshold:(0(\.[0-9]+)?|1(\.0+)?))$")
# Variables that have their own input; setting them through ``hccl`` / ``extra`` would bypass its check.
_OWN_INPUT = {
    "ASCEND_RT_VISIBLE_DEVICES": "visible_devices",
    "PYTORCH_NPU_ALLOC_CONF": "npu_alloc_conf",
    "HCCL_RDMA_TC": "roce_qos (HCCL_RDMA_TC is DSCP x 4 of the RoCE QoS policy)",
    "HCCL_RDMA_SL": "roce_qos (HCCL_RDMA_SL is the PFC priority of the RoCE QoS policy)",
}
_SECRETS = {"VLLM_API_KEY": "the API key is a secret: the vllm_service role writes it to a 0600 environment file, "
                            "the k8s_manifests role takes it from a Kubernetes Secret"}


class ServiceEnvError(ValueError):
    """An input that cannot become the service environment; the message names it and the fix."""


def _scalar(name, value):
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float, str)):
        text = str(value)
        bad = _CONTROL.search(text)
        if bad:
            raise ServiceEnvError(f"{name}={value!r}: the value holds the control character {bad.group()!r} "
                                  "(a newline would add a line to the environment file); give it on one line")
        return text
    raise ServiceEnvError(f"{name}={value!r}: an environment value must be a string or a number, "
                          f"not {type(value).__name__}")


def visible_devices_value(devices):
    """``[0, 1, 2, 3]`` or ``"0,1,2,3"`` -> ``"0,1,2,3"``; None or empty -> None (no mask)."""
    if devices is None or devices == "" or devices == []:
        return None
    items = devices.split(",") if isinstance(devices, str) else devices
    if not isinstance(items, (list, tuple)):
        raise ServiceEnvError(f"visible_devices={devices!r}: give a list of NPU ids such as [0, 1, 2, 3]")
    ids = []
    for item in items:
        text = str(item).strip()
        if isinstance(item, bool) or not text.isdigit() or int(text) > 63:
            raise ServiceEnvError(f"visible_devices={devices!r}: {item!r} is not an NPU id (0..63 as npu-smi "
                                  "lists them)")
        ids.append(int(text))
    if len(set(ids)) != len(ids):
        raise ServiceEnvError(f"visible_devices={devices!r}: an NPU id is listed twice")
    return ",".join(str(i) for i in ids)


def npu_alloc_conf_value(conf):
    """Check ``PYTORCH_NPU_ALLOC_CONF`` (comma-separated ``key:value`` items torch_npu knows); None/"" -> None."""
    if conf is None or conf == "":
        return None
    if not isinstance(conf, str):
        raise ServiceEnvError(f"npu_alloc_conf={conf!r}: give a string such as 'expandable_segments:True'")
    bad = [item for item in conf.split(",") if not _ALLOC_ITEM.match(item.strip())]
    if bad:
        raise ServiceEnvError(f"npu_alloc_conf={conf!r}: {', '.join(repr(b) for b in bad)} not understood; use "
                              "'expandable_segments:True' or 'max_split_size_mb:N' "
                              "(optionally with 'garbage_collection_threshold:0.x')")
    return ",".join(item.strip() for item in conf.split(","))


def _check_name(name, where):
    if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
        raise ServiceEnvError(f"{where}: {name!r} is not an environment variable name")
    if name in FAKE_ENV:
        raise ServiceEnvError(f"{where}: {name} is {FAKE_ENV[name]}")
    if name in _SECRETS:
        raise ServiceEnvError(f"{where}: {name} must not be set here; {_SECRETS[name]}")
    if name in _OWN_INPUT:
        raise ServiceEnvError(f"{where}: set {name} through {_OWN_INPUT[name]}, not here")


def service_env(extra=None, visible_devices=None, npu_alloc_conf=DEFAULT_NPU_ALLOC_CONF, roce_qos=None,
                hccl=None, target="systemd", vllm_ascend_version=None):
    """Return the vLLM service environment as a dict of strings, keys sorted.

    ``extra``: other variables (name -> value). ``visible_devices``: NPU ids for ``ASCEND_RT_VISIBLE_DEVICES``
    (systemd only). ``npu_alloc_conf``: ``PYTORCH_NPU_ALLOC_CONF`` (None/"" leaves it out). ``roce_qos``: the
    RoCE QoS policy dict when the model spans nodes ({} = Ascend's defaults), None on a single node.
    ``hccl``: ``HCCL_*`` settings. ``target``: ``systemd`` or ``kubernetes``. ``vllm_ascend_version``: the
    vllm-ascend release that reads the environment (None: not known, not checked).
    """
    if target not in TARGETS:
        raise ServiceEnvError(f"target={target!r}: use one of {', '.join(TARGETS)}")
    env = {}
    for where, mapping in (("hccl", hccl), ("extra", extra)):
        if mapping is None:
            continue
        if not isinstance(mapping, dict):
            raise ServiceEnvError(f"{where}={mapping!r}: give a mapping of variable name to value")
        for name, value in mapping.items():
            _check_name(name, where)
            if where == "hccl" and not name.startswith("HCCL_"):
                raise ServiceEnvError(f"hccl: {name} is not an HCCL_* variable; put it in extra")
            if where == "extra" and name.startswith("HCCL_"):
                raise ServiceEnvError(f"extra: {name} is an HCCL setting; put it in hccl")
            if value is None:
                continue
            env[name] = _scalar(name, value)
    if roce_qos is not None:
        try:
            env.update(hccl_env(roce_qos))
        except RoceQosError as exc:
            raise ServiceEnvError(f"roce_qos={roce_qos!r}: {exc}") from None
    alloc = npu_alloc_conf_value(npu_alloc_conf)
    if alloc is not None:
        env["PYTORCH_NPU_ALLOC_CONF"] = alloc
    devices = visible_devices_value(visible_devices)
    if devices is not None and target == "systemd":
        env["ASCEND_RT_VISIBLE_DEVICES"] = devices
    try:
        ignored = ascend_setting_problems(vllm_ascend_version, env=env)
    except SettingError as exc:
        raise ServiceEnvError(str(exc)) from None
    if ignored:
        raise ServiceEnvError("; ".join(ignored))
    return dict(sorted(env.items()))
