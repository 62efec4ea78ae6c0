# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""vllm-ascend settings whose switch moved between releases: which release reads which form.

The one place the collection keeps these facts. Both deployment paths check against them: the service environment
(``service_env``, systemd and Kubernetes) and the vLLM options (``vllm_config``'s ``additional_config``). A form
that the node's vllm-ascend release does not read is ignored there without a word (an unknown environment
variable, an ``additional_config`` key nobody looks up), so it is refused with the form that release does read.

Balance scheduling (vllm-ascend's ``BalanceScheduler``, the DeepSeek tutorials' ``VLLM_ASCEND_BALANCE_SCHEDULING=1``),
read from vllm-ascend's sources at each tag (docs/sources.md, "Balance scheduling per vllm-ascend release"):

* ``VLLM_ASCEND_BALANCE_SCHEDULING``: defined from v0.13.0rc1 (``vllm_ascend/envs.py``; v0.12.0rc1 has no such
  variable). Up to v0.19.1rc1 ``vllm_ascend/patch/platform/__init__.py`` imports ``patch_balance_schedule`` when it
  is set, in v0.13.0rc1-v0.13.0 and v0.15.0rc1 only on vLLM 0.13.0 / 0.15.0 (their vLLM), in v0.14.0rc1 only on
  vLLM 0.14.0 (its vLLM is 0.14.1: never), in v0.16.0rc1 and v0.17.0rc1 not at all. v0.20.2rc1 to v0.22.1rc1
  always install the patch, but its ``_balance_scheduling_enabled`` reads ``additional_config`` only (vllm-ascend
  #10786, first in v0.23.0rc1: "VLLM_ASCEND_BALANCE_SCHEDULING env var not taking effect when
  --additional-config is not set"). v0.23.0rc1 to v0.26.0rc1 read it through ``AscendConfig`` after the
  ``additional_config`` key (marked DEPRECATED in ``envs.py`` since v0.20.2rc1). v0.27.1rc1 no longer defines it
  (``ascend_config.py``: "the legacy environment fallback has been removed").
* ``additional_config.enable_balance_scheduling``: read from v0.20.2rc1 (``ascend_config.py``
  ``_get_config_value``); deprecated but still read from v0.25.1rc1 (up to v0.30.0rc2 at least).
* ``additional_config.scheduler_config.enable_balance_scheduling``: read from v0.25.1rc1 (``SchedulerConfig``);
  vllm-ascend's DeepSeek-R1 tutorial uses it from v0.27.1rc1.

Pure stdlib plus the collection's own module_utils.
"""

from __future__ import annotations

import json

from ansible_collections.ascendai.vllm.plugins.module_utils._compat_matrix import all_rows, parse_version

# Each setting: its forms, each with the vllm-ascend releases that read it as [first, until) ranges (until: the
# first release that no longer does, None: every later one).
SETTINGS = (
    {
        "name": "balance scheduling",
        "forms": (
            {"env": "VLLM_ASCEND_BALANCE_SCHEDULING",
             "releases": (("0.13.0rc1", "0.14.0rc1"), ("0.15.0rc1", "0.16.0rc1"), ("0.18.0rc1", "0.20.2rc1"),
                          ("0.23.0rc1", "0.27.1rc1"))},
            {"additional_config": ("enable_balance_scheduling",),
             "releases": (("0.20.2rc1", None),)},
            {"additional_config": ("scheduler_config", "enable_balance_scheduling"),
             "releases": (("0.25.1rc1", None),)},
        ),
    },
)


class SettingError(ValueError):
    """A vllm-ascend setting in a form the node's release does not read; the message names the form it reads."""


def _key(version):
    return parse_version(version).order_key()


def reads(form, vllm_ascend_version):
    """True when vllm-ascend ``vllm_ascend_version`` reads ``form`` (an entry of a setting's ``forms``)."""
    key = _key(vllm_ascend_version)
    return any(_key(first) <= key and (until is None or key < _key(until)) for first, until in form["releases"])


def form_text(form):
    """How to write ``form`` switched on: ``VLLM_ASCEND_X=1 in the service environment`` or the mapping."""
    if "env" in form:
        return f"{form['env']}=1 in the service environment"
    path = form["additional_config"]
    inner = "true"
    for part in reversed(path):
        inner = f"{{{part}: {inner}}}"
    return f"additional_config: {inner} in the vLLM options"


def _releases_text(form):
    """The releases of the compatibility matrix that read ``form``: ``0.13.0rc1-0.13.0, 0.15.0rc1, ...``."""
    known = [row["vllm_ascend"] for row in all_rows()]
    spans = []
    for first, until in form["releases"]:
        inside = [r for r in known if _key(first) <= _key(r) and (until is None or _key(r) < _key(until))]
        if not inside:
            continue
        spans.append(inside[0] if len(inside) == 1 else f"{inside[0]}-{inside[-1]}")
        if until is None:
            spans[-1] = f"{inside[0]} and later"
    return ", ".join(spans)


def _env_on(value):
    """vllm-ascend reads these variables as ``bool(int(value))``: 0 (or empty) is off, anything else is on."""
    if value is None or isinstance(value, bool):
        return bool(value)
    text = str(value).strip()
    return text not in ("", "0") and not (text.lstrip("+-").isdigit() and int(text) == 0)


def _lookup(mapping, path):
    for part in path:
        if not isinstance(mapping, dict) or part not in mapping:
            return False, None
        mapping = mapping[part]
    return True, mapping


def ascend_setting_problems(vllm_ascend_version, env=None, additional_config=None):
    """Messages for settings switched on in a form vllm-ascend ``vllm_ascend_version`` does not read.

    ``env``: the service environment (name -> value). ``additional_config``: vLLM's ``additional_config`` (a mapping
    or its JSON text). ``vllm_ascend_version`` None or empty: nothing is checked (the release is not known).
    """
    if vllm_ascend_version is None or vllm_ascend_version == "":
        return []
    if not isinstance(vllm_ascend_version, str):
        raise SettingError(f"vllm_ascend_version={vllm_ascend_version!r:.200} is not a version string; quote it "
                           "in YAML, e.g. '0.23.0'")
    try:
        parse_version(vllm_ascend_version)
    except ValueError:
        raise SettingError(f"vllm-ascend {vllm_ascend_version!r:.200} is not a version") from None
    if isinstance(additional_config, str):
        try:
            additional_config = json.loads(additional_config)
        except ValueError:
            additional_config = None
    found = []
    for setting in SETTINGS:
        for form in setting["forms"]:
            if "env" in form:
                present = env is not None and form["env"] in env
                on = present and _env_on(env[form["env"]])
            else:
                present, value = _lookup(additional_config, form["additional_config"])
                on = present and bool(value)
            if not on or reads(form, vllm_ascend_version):
                continue
            # the newest form first: an older one a release still reads may already be deprecated there
            instead = [form_text(other) for other in reversed(setting["forms"]) if reads(other, vllm_ascend_version)]
            what = (f"vllm-ascend {vllm_ascend_version} reads {setting['name']} from "
                    f"{' or '.join(instead)}" if instead else
                    f"vllm-ascend {vllm_ascend_version} has no {setting['name']} to switch on")
            found.append(f"{form_text(form)} does not switch {setting['name']} on in vllm-ascend "
                         f"{vllm_ascend_version}: that release ignores it (read by vllm-ascend "
                         f"{_releases_text(form)}); {what}")
    return found
