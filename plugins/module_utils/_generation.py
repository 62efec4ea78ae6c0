# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Which venv and which CANN environment serve on a node: the current generation's (role
ascendai.vllm.generation), or site.yml's.

The generation role records the node's generations in the local fact ``ascendai_generation``
(``/etc/ansible/facts.d/ascendai_generation.fact``): ``root`` (the generations' directory), ``current`` (the name the
``<root>/current`` link points at), ``history``, ``failed`` and ``cann`` (generation -> the CANN release its env.sh
names). Every role that runs the serving stack's Python, or sources CANN for it, asks here, so that all of them follow
one link.
"""

from __future__ import annotations

import posixpath

# The venv site.yml makes (python_runtime's python_runtime_venv_prefix / the vllm venv), and the first generation.
SITE_VENV = "/opt/ascendai/venvs/vllm"
# The environment script site.yml's CANN role writes (ascend_cann_env_script).
SITE_ENV_SCRIPT = "/usr/local/Ascend/ascendai-env.sh"


class GenerationError(ValueError):
    """The local fact is not what the generation role writes."""


def _record(local_facts):
    """The generation record of ``local_facts`` (None without one), checked."""
    if local_facts is None:
        local_facts = {}
    if not isinstance(local_facts, dict):
        raise GenerationError(f"expected the host's ansible_local (a mapping), got a {type(local_facts).__name__}")
    record = local_facts.get("ascendai_generation")
    if record is None:
        return None
    if not isinstance(record, dict):
        raise GenerationError("ansible_local.ascendai_generation is not a mapping (/etc/ansible/facts.d/"
                              f"ascendai_generation.fact holds {record!r:.120}): remove the file, or run the "
                              "generation role's adopt entry point to write it again")
    current = record.get("current") or ""
    if not current:
        return None
    root = record.get("root") or ""
    if not isinstance(root, str) or not posixpath.isabs(root) or not isinstance(current, str):
        raise GenerationError(f"ansible_local.ascendai_generation names current {current!r:.80} under root "
                              f"{root!r:.120}: root must be an absolute path (the generation role's generation_root)")
    return record


def serving_env_script(local_facts, fallback=SITE_ENV_SCRIPT):
    """``<root>/current/env.sh`` when the current generation has its own CANN environment (the record's ``cann``
    names a CANN release for it: playbooks/upgrade.yml wrote its env.sh), else ``fallback`` (site.yml's script).

    Like :func:`serving_venv`, the path goes through the ``current`` link.
    """
    record = _record(local_facts)
    if record is None:
        return fallback
    cann = record.get("cann") or {}
    if not isinstance(cann, dict):
        raise GenerationError(f"ansible_local.ascendai_generation.cann is not a mapping ({cann!r:.120}): the "
                              "generation role writes {generation: CANN release}")
    if not cann.get(record["current"]):
        return fallback
    return posixpath.join(record["root"].rstrip("/") or "/", "current", "env.sh")


def serving_venv(local_facts, fallback=SITE_VENV):
    """``<root>/current/venv`` when the node has a current generation, else ``fallback``.

    ``local_facts`` is the host's ``ansible_local`` (a mapping; None or empty without local facts). The path goes
    through the ``current`` link, not the directory it names now: a process started later follows a switch.
    """
    record = _record(local_facts)
    if record is None:
        return fallback
    return posixpath.join(record["root"].rstrip("/") or "/", "current", "venv")
