# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The W8A8 quantization tool each vllm-ascend release prescribes, and the command that runs it.

Pure functions, stdlib only; used by the ``ascendai.vllm.quant_plan`` filter (role ``model``).

One row per range of vllm-ascend releases, read from that release's own quantization guide
(``docs/source/user_guide/feature_guide/quantization.md``; before v0.9.1rc1 the tutorial
``docs/source/tutorials/multi_npu_quantization.md``) at every release tag (the lines of each tag's guide are kept
in ``_generated/quant_guides.py``, made by ``tools/generate/quant_tool_facts.py``): the repository and the branch,
tag or commit to clone, the install steps, and the guide's quantization command (its example script, relative to
the tool's ``msmodelslim`` directory, and its arguments). The guide's command is for the model family of its
example (DeepSeek, Qwen, Qwen3-MoE); another family takes its own script of the same checkout
(``model_quant_script``, ``model_quant_args``).
"""

from __future__ import annotations

import re

__all__ = ["GUIDES_READ_UP_TO", "ROWS", "QuantToolError", "find_row", "quant_plan"]

# The newest vllm-ascend tag whose guide was read (_generated/quant_guides.py).
GUIDES_READ_UP_TO = "0.25.1rc1"

_GUIDE = "https://github.com/vllm-project/vllm-ascend/blob/{tag}/docs/source/{path}#L{line}"
_TUTORIAL = "tutorials/multi_npu_quantization.md"
_USER_GUIDE = "user_guide/feature_guide/quantization.md"

_W8A8_ENV = {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:False"}
_QWEN_MOE_ARGS = ("--anti_dataset", "../common/qwen3-moe_anti_prompt_50.json",
                  "--calib_dataset", "../common/qwen3-moe_calib_prompt_50.json", "--trust_remote_code", "True")


def _row(first, last, **facts):
    facts.update(first=first, last=last)
    facts.setdefault("env", {})
    facts.setdefault("data_files", ())
    return facts


# (first, last) vllm-ascend releases, inclusive; last None is open (the newest guide still says so).
ROWS = (
    _row("0.7.3", "0.8.4rc1", tool=None,
         why="vllm-ascend {version} documents no quantization tool: its W8A8 path loads MindIE Turbo "
             "(vllm_ascend/quantization/quantizer.py) and the msModelSlim guide starts with v0.8.4rc2",
         sources=("https://github.com/vllm-project/vllm-ascend/blob/v0.7.3/vllm_ascend/quantization/quantizer.py#L40",)),
    _row("0.8.4rc2", "0.8.5rc1", tool="msit", repo="https://gitee.com/ascend/msit", ref="master",
         commit="a396750f930e3bd2b8aa13730401dcbb4bc684ca", accelerate=True,
         script="example/DeepSeek/quant_deepseek.py", save_option="--save_directory",
         args=("--device_type", "npu", "--act_method", "2", "--w_bit", "8", "--a_bit", "8", "--is_dynamic", "True"),
         sources=(_GUIDE.format(tag="v0.8.4rc2", path=_TUTORIAL, line=38),
                  _GUIDE.format(tag="v0.8.4rc2", path=_TUTORIAL, line=54))),
    _row("0.9.0rc1", "0.9.0rc2", tool="msit", repo="https://gitee.com/ascend/msit",
         ref="modelslim-VLLM-8.1.RC1.b020_001", accelerate=True,
         script="example/Qwen/quant_qwen.py", save_option="--save_directory",
         args=("--calib_file", "../common/boolq.jsonl", "--w_bit", "8", "--a_bit", "8", "--device_type", "npu",
               "--anti_method", "m1", "--trust_remote_code", "True"),
         data_files=("../common/boolq.jsonl",),
         sources=(_GUIDE.format(tag="v0.9.0rc1", path=_TUTORIAL, line=39),
                  _GUIDE.format(tag="v0.9.0rc1", path=_TUTORIAL, line=53))),
    _row("0.9.1rc1", "0.9.2rc1", tool="msit", repo="https://gitee.com/ascend/msit",
         ref="modelslim-VLLM-8.1.RC1.b020_001", accelerate=True,
         script="example/DeepSeek/quant_deepseek.py", save_option="--save_directory",
         args=("--device_type", "cpu", "--act_method", "2", "--w_bit", "8", "--a_bit", "8", "--is_dynamic", "True"),
         sources=(_GUIDE.format(tag="v0.9.1", path=_USER_GUIDE, line=16),
                  _GUIDE.format(tag="v0.9.1", path=_USER_GUIDE, line=28))),
    _row("0.10.0rc1", "0.10.0rc1", tool="msit", repo="https://gitee.com/ascend/msit", ref="master",
         commit="f8ab35a772a6c1ee7675368a2aa4bafba3bedd1a", accelerate=True,
         script="example/DeepSeek/quant_deepseek_w8a8.py", save_option="--save_path", args=("--batch_size", "4"),
         env=_W8A8_ENV,
         sources=(_GUIDE.format(tag="v0.10.0rc1", path=_USER_GUIDE, line=14),
                  _GUIDE.format(tag="v0.10.0rc1", path=_USER_GUIDE, line=45))),
    _row("0.10.1rc1", "0.11.0", tool="msit", repo="https://gitee.com/ascend/msit",
         ref="br_release_MindStudio_8.1.RC2_TR5_20260624", accelerate=True,
         script="example/DeepSeek/quant_deepseek_w8a8.py", save_option="--save_path", args=("--batch_size", "4"),
         env=_W8A8_ENV,
         sources=(_GUIDE.format(tag="v0.11.0", path=_USER_GUIDE, line=15),
                  _GUIDE.format(tag="v0.11.0", path=_USER_GUIDE, line=45))),
    # the guide's URL (https://gitcode.com/Ascend/msit/tree/master) is a web page, not a repository: the
    # repository it shows is https://gitcode.com/Ascend/msit.git (as the guide from v0.13.0rc2 writes it)
    _row("0.12.0rc1", "0.13.0rc1", tool="msit", repo="https://gitcode.com/Ascend/msit.git",
         ref="br_release_MindStudio_8.1.RC2_TR5_20260624", accelerate=True,
         script="example/DeepSeek/quant_deepseek_w8a8.py", save_option="--save_path", args=("--batch_size", "4"),
         env=_W8A8_ENV,
         sources=(_GUIDE.format(tag="v0.12.0rc1", path=_USER_GUIDE, line=15),
                  _GUIDE.format(tag="v0.12.0rc1", path=_USER_GUIDE, line=45))),
    _row("0.13.0rc2", "0.20.2rc1", tool="msit", repo="https://gitcode.com/Ascend/msit.git",
         ref="br_release_MindStudio_8.3.0_20261231", accelerate=False,
         script="example/Qwen3-MOE/quant_qwen_moe_w8a8.py", save_option="--save_path", args=_QWEN_MOE_ARGS,
         env=_W8A8_ENV, data_files=(_QWEN_MOE_ARGS[1], _QWEN_MOE_ARGS[3]),
         sources=(_GUIDE.format(tag="v0.13.0", path=_USER_GUIDE, line=27),
                  _GUIDE.format(tag="v0.13.0", path=_USER_GUIDE, line=52))),
    _row("0.21.0rc1", None, tool="msmodelslim", repo="https://gitcode.com/Ascend/msmodelslim.git", ref="26.0.0",
         accelerate=False,
         script="example/Qwen3-MOE/quant_qwen_moe_w8a8.py", save_option="--save_path", args=_QWEN_MOE_ARGS,
         env=_W8A8_ENV, data_files=(_QWEN_MOE_ARGS[1], _QWEN_MOE_ARGS[3]),
         sources=(_GUIDE.format(tag="v0.21.0rc1", path=_USER_GUIDE, line=27),
                  _GUIDE.format(tag="v0.21.0rc1", path=_USER_GUIDE, line=52))),
)


# DeepSeek-V3-class models (config.json model_type deepseek_v3: DeepSeek-V3, R1, V3.1) with msModelSlim: the
# DeepSeek example of the same checkout, as that tool's own README at the row's ref prescribes for "DeepSeek-V3 W8A8
# mixed quantization (MLA w8a8, MoE w8a8 dynamic)" and "DeepSeek-R1 W8A8 mixed quantization"; its data sets are the
# script's defaults. It writes quant_model_description.json, quant_model_weight_w8a8_dynamic*.safetensors (4 GB parts)
# and the model's config files (the script's calibrator.save and copy_config_files).
_MSMODELSLIM = "https://github.com/Ascend/msmodelslim/blob/{ref}/example/DeepSeek/{path}#L{lines}"
FAMILIES = {
    "deepseek_v3": {
        "tools": ("msmodelslim",),
        "script": "example/DeepSeek/quant_deepseek_w8a8.py",
        "save_option": "--save_path",
        "args": ("--batch_size", "4", "--trust_remote_code", "True"),
        "data_files": ("../common/deepseek_anti_prompt.json", "../common/deepseek_calib_prompt.json"),
        "prerequisites": (
            "transformers 4.48.2 in the tool's venv",
            "the model directory's modeling_deepseek.py with its flash_attn import commented out (Ascend has no "
            "flash_attn)",
            "no quantization_config (the FP8 fields) in the model's config.json, since transformers cannot load "
            "the FP8 format (the script dequantizes FP8 itself; --from_fp8 or --from_bf16 names the input)",
        ),
        "output": ("quant_model_description.json", "quant_model_weight_w8a8_dynamic*.safetensors", "config.json"),
    },
}
_FAMILY_SOURCES = {
    "deepseek_v3": (("README.md", "179-L189"), ("README.md", "199-L203"), ("README.md", "318-L324"),
                    ("quant_deepseek_w8a8.py", "53-L73"), ("quant_deepseek_w8a8.py", "297-L306")),
}


class QuantToolError(ValueError):
    """No tool for this release, or arguments the plan cannot use."""


_VERSION_RE = re.compile(r"^\s*v?(?P<release>\d+(?:\.\d+){0,3})(?:[._-]?(?P<pre>rc|a|b)[._-]?(?P<pre_n>\d*))?"
                         r"(?:[._-]?post[._-]?(?P<post>\d*))?(?:\+[\w.]+)?\s*$", re.IGNORECASE)


def _key(version):
    """PEP 440 order for the versions vllm-ascend uses: 0.11.0rc0 < 0.11.0rc3 < 0.11.0 < 0.11.0.post1."""
    m = _VERSION_RE.match(str(version))
    if not m:
        raise QuantToolError(
            f"{version!r} is not a vllm-ascend version (for example 0.11.0 or 0.13.0rc2): set "
            "model_vllm_ascend_version or install vllm-ascend in the venv of model_quant_python"
        )
    release = tuple(int(x) for x in m.group("release").split("."))
    release += (0,) * (3 - len(release))
    pre = (0, m.group("pre").lower(), int(m.group("pre_n") or 0)) if m.group("pre") else (1, "", 0)
    return release[:3], pre, int(m.group("post") or 0) if m.group("post") is not None else -1


def find_row(vllm_ascend_version):
    """The row of a vllm-ascend release (a post release belongs to its base release's row)."""
    release, pre, _post = _key(vllm_ascend_version)
    key = (release, pre)
    for row in ROWS:
        if _key(row["first"])[:2] <= key and (row["last"] is None or key <= _key(row["last"])[:2]):
            return row
    raise QuantToolError(
        f"vllm-ascend {vllm_ascend_version} is older than every release with a quantization guide "
        f"(first {ROWS[0]['first']})"
    )


def _checkout_name(row):
    name = row["repo"].rstrip("/").rsplit("/", 1)[-1]
    return name[:-4] if name.endswith(".git") else name


def _install_steps(row, clone_dir):
    name = _checkout_name(row)
    steps = [f"cd {clone_dir}"]
    if row.get("commit"):
        steps += [f"git clone {row['repo']}", f"git -C {name} checkout {row['commit']}"]
    else:
        steps.append(f"git clone {row['repo']} -b {row['ref']}")
    steps.append(f"cd {name}/msmodelslim" if row["tool"] == "msit" else f"cd {name}")
    steps.append("bash install.sh")
    if row["accelerate"]:
        steps.append("pip install accelerate")
    return steps


def quant_plan(vllm_ascend_version, python, tool_dir, model_path, save_path, script="", args=None, save_option="",
               env=None, clone_dir="/opt/ascendai", model_type=""):
    """What the model role runs to quantize to W8A8 on a node with this vllm-ascend release.

    ``tool_dir``: the tool's ``msmodelslim`` directory on the node; empty: where the install steps, run in
    ``clone_dir``, put it (``<clone_dir>/msit/msmodelslim`` for msit, ``<clone_dir>/msmodelslim`` for msModelSlim).
    ``script``/``args``/``save_option``: empty take the guide's.
    ``model_type``: the model's config.json ``model_type``; a family of FAMILIES (``deepseek_v3``) takes that family's
    script, arguments and data sets of the same tool instead of the guide's example when the row's tool has it.
    Returns ``{vllm_ascend, tool, tool_name, repo, ref, commit, install, tool_dir, script, chdir, argv, environment,
    data_files, sources, release_range, family, prerequisites, output}``; ``data_files`` are absolute (the guide's
    or family's data sets, only with its own script). Raises QuantToolError when the release has no tool.
    """
    if not isinstance(vllm_ascend_version, str):
        raise QuantToolError(
            f"vllm_ascend_version={vllm_ascend_version!r:.200} is not a version string: set "
            "model_vllm_ascend_version quoted in YAML, e.g. '0.11.0' (an unquoted 0.10 is the number 0.1), or "
            "install vllm-ascend in the venv of model_quant_python")
    if model_type is not None and not isinstance(model_type, str):
        raise QuantToolError(f"model_type={model_type!r:.200} must be the model_type of the model's config.json "
                             "(a string) or empty")
    row = find_row(vllm_ascend_version)
    family = FAMILIES.get((model_type or "").strip().lower())
    if family is not None and row["tool"] in family["tools"]:
        family_name = model_type.strip().lower()
        sources = row["sources"] + tuple(_MSMODELSLIM.format(ref=row["ref"], path=path, lines=lines)
                                         for path, lines in _FAMILY_SOURCES[family_name])
        row = dict(row, script=family["script"], save_option=family["save_option"], args=family["args"],
                   data_files=family["data_files"], sources=sources)
    else:
        family_name, family = None, None
    if row["tool"] is None:
        raise QuantToolError(row["why"].format(version=vllm_ascend_version) + " (" + row["sources"][0] + ")")
    if not isinstance(clone_dir, str) or not clone_dir.startswith("/"):
        raise QuantToolError(f"clone_dir must be an absolute path, got {clone_dir!r}")
    clone_dir = clone_dir.rstrip("/") or "/"
    checkout = _checkout_name(row)
    tool_dir = tool_dir or (f"{clone_dir}/{checkout}/msmodelslim" if row["tool"] == "msit"
                            else f"{clone_dir}/{checkout}")
    for name, value in (("python", python), ("tool_dir", tool_dir), ("model_path", model_path),
                        ("save_path", save_path)):
        if not isinstance(value, str) or not value.strip():
            raise QuantToolError(f"{name} must be a non-empty path, got {value!r}")
    if args is not None and (isinstance(args, str) or not all(isinstance(a, (str, int, float)) for a in args)):
        raise QuantToolError(f"args must be a list of strings, got {args!r:.100}")
    if env is not None and not isinstance(env, dict):
        raise QuantToolError(f"env must be a mapping of names to values, got {env!r:.100}")
    tool_dir = tool_dir.rstrip("/") or "/"
    own_script = not script
    script_path = f"{tool_dir}/{row['script']}" if own_script else script
    chdir = script_path.rsplit("/", 1)[0] or "/"
    extra = list(row["args"]) if not args else [str(a) for a in args]
    argv = [python, script_path, "--model_path", model_path, save_option or row["save_option"], save_path] + extra
    environment = dict(row["env"])
    environment.update({str(k): str(v) for k, v in (env or {}).items()})
    data_files = [_join(chdir, f) for f in row["data_files"]] if own_script and not args else []
    return {
        "vllm_ascend": str(vllm_ascend_version).strip().lstrip("v"),
        "tool": row["tool"],
        "tool_name": ("msModelSlim " + row["ref"]) if row["tool"] == "msmodelslim"
        else f"msModelSlim of msit {row['ref']}" + (f" at {row['commit']}" if row.get("commit") else ""),
        "repo": row["repo"],
        "ref": row["ref"],
        "commit": row.get("commit"),
        "install": _install_steps(row, clone_dir),
        "tool_dir": tool_dir,
        "script": script_path,
        "chdir": chdir,
        "argv": argv,
        "environment": environment,
        "data_files": data_files,
        "sources": list(row["sources"]),
        "release_range": f"v{row['first']} to v{row['last']}" if row["last"]
        else f"v{row['first']} and later (guides read up to v{GUIDES_READ_UP_TO})",
        "family": family_name,
        "prerequisites": list(family["prerequisites"]) if family else [],
        "output": list(family["output"]) if family else ["quant_model_description.json"],
    }


def _join(directory, relative):
    parts = directory.rstrip("/").split("/")
    for piece in relative.split("/"):
        if piece == "..":
            if len(parts) > 1:
                parts.pop()
        elif piece not in ("", "."):
            parts.append(piece)
    return "/".join(parts) or "/"
