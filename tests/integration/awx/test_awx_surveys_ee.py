"""AWX as code: survey specs against the roles' argument specs, the job-template data and playbooks, and the
execution environment built into a context by ``ansible-builder create``."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
AWX = os.path.join(ROOT, "playbooks", "awx")
BIN = os.path.dirname(sys.executable)

# AWX survey question types -> the argument-spec types a role variable may have for them.
SURVEY_TYPES = {"text": {"str", "path"}, "textarea": {"str", "path"}, "password": {"str"}, "integer": {"int"},
                "float": {"float"}, "multiplechoice": {"str"}, "multiselect": {"list"}}
QUESTION_KEYS = {"question_name", "question_description", "variable", "type", "required", "default", "min", "max",
                 "choices", "new_question"}
STAGES = ["preflight", "install", "deploy", "diagnose", "bench", "upgrade", "rollback"]


def _load(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _role_options():
    """variable -> (role, option spec) from every role's meta/argument_specs.yml (entry point main; every entry
    point of the internal role _common, which describes the collection-wide inputs once: other roles list them
    without a default, pointing there)."""
    options = {}
    for path in sorted(glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml"))):
        role = path.split(os.sep)[-3]
        specs = _load(path)["argument_specs"]
        entries = specs.values() if role == "_common" else [specs["main"]]
        for entry in entries:
            for name, spec in (entry.get("options") or {}).items():
                if name not in options or role == "_common":
                    options[name] = (role, spec)
    return options


def _surveys():
    return sorted(glob.glob(os.path.join(AWX, "surveys", "*.yml")))


def _questions():
    return [(os.path.basename(path), q) for path in _surveys() for q in _load(path)["spec"]]


def _question_id(item):
    return f"{item[0]}:{item[1]['variable']}"


def test_there_is_a_survey_per_stage_and_some_questions():
    assert sorted(os.path.basename(p)[:-4] for p in _surveys()) == sorted(STAGES)
    types = {q["type"] for _unused, q in _questions()}
    assert {"text", "integer", "float", "multiplechoice", "password"} <= types


@pytest.mark.parametrize("item", _questions(), ids=_question_id)
def test_survey_question_maps_to_a_role_variable_of_the_same_type(item):
    survey, question = item
    assert set(question) <= QUESTION_KEYS, set(question) - QUESTION_KEYS
    for key in ("question_name", "variable", "type", "required"):
        assert key in question, f"{survey}: {question.get('variable')} lacks {key}"
    options = _role_options()
    variable = question["variable"]
    assert variable in options, f"{survey}: {variable} is no role's input (roles/*/meta/argument_specs.yml)"
    role, spec = options[variable]
    spec_type = spec.get("type", "str")
    assert spec_type in SURVEY_TYPES[question["type"]], \
        f"{survey}: {variable} is a {question['type']} question but role {role} declares type {spec_type}"
    if spec.get("no_log"):
        assert question["type"] == "password", f"{survey}: {variable} is a secret; make it a password question"
    if question["type"] == "multiplechoice":
        assert spec.get("choices"), f"{survey}: {variable} has no choices in role {role}"
        assert question["choices"] and set(question["choices"]) <= {str(c) for c in spec["choices"]}, \
            f"{survey}: choices {question['choices']} of {variable} are not among role {role}'s {spec['choices']}"
    if "default" in question:
        default = question["default"]
        assert default == spec.get("default"), \
            f"{survey}: default {default!r} of {variable} differs from role {role}'s {spec.get('default')!r}"
        if question["type"] == "multiplechoice":
            assert default in question["choices"]
        if question["type"] in ("integer", "float"):
            assert question["min"] <= default <= question["max"]
        if question["type"] in ("text", "password") and "min" in question:
            assert question["min"] <= len(default) <= question["max"]


def test_no_variable_is_asked_twice_in_one_survey():
    for path in _surveys():
        variables = [q["variable"] for q in _load(path)["spec"]]
        assert len(variables) == len(set(variables)), path


def test_job_templates_one_per_stage_with_their_survey():
    templates = _load(os.path.join(AWX, "job_templates.yml"))["awx_job_templates"]
    assert [t["stage"] for t in templates] == STAGES
    for template in templates:
        assert os.path.isfile(os.path.join(AWX, "surveys", template["survey"] + ".yml")), template["name"]
        assert template["credential"] in ("machine", "kubernetes")
        assert template["playbook"].startswith("playbooks/")
        options = _role_options()
        for variable in template["extra_vars"]:
            assert variable in options, f"{template['name']}: extra var {variable} is no role's input"
    present = [t["stage"] for t in templates if os.path.isfile(os.path.join(ROOT, t["playbook"]))]
    assert {"preflight", "install", "deploy", "diagnose", "upgrade", "rollback"} <= set(present)


def _awx_collection_path(tmp_path):
    """Where awx.awx is: the ansible package up to 13.x bundles it; from 14 on, the offline bundle's artifact
    (roles/offline_bundle, tools/ci/awx-collection.sh: .cache/awx/, or $ASCENDAI_AWX_ARTIFACTS) installed here."""
    import ansible  # pylint: disable=import-outside-toplevel

    bundled = os.path.join(os.path.dirname(os.path.dirname(ansible.__file__)), "ansible_collections", "awx", "awx")
    if os.path.isdir(bundled):
        return []
    artifacts = sorted(glob.glob(os.path.join(ROOT, ".cache", "awx", "awx-awx-*.tar.gz")) +
                       glob.glob(os.path.join(os.environ.get("ASCENDAI_AWX_ARTIFACTS", "/nonexistent"),
                                              "awx-awx-*.tar.gz")))
    if not artifacts:
        pytest.skip("this ansible lacks awx.awx and no awx.awx artifact is here (run tools/ci/awx-collection.sh)")
    dest = tmp_path / "awx-collections"
    # --force: an awx.awx already on the configured collections path would make this a no-op.
    result = subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--offline", "--no-deps",
                             "--force", "-p", str(dest), artifacts[-1]], capture_output=True, text=True,
                            check=False, cwd=str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    return [str(dest)]


def test_awx_playbooks_pass_the_syntax_check(tmp_path):
    playbooks = sorted(p for p in glob.glob(os.path.join(AWX, "*.yml")) if not p.endswith("job_templates.yml"))
    paths = [os.path.join(ROOT, ".cache", "collections"), *_awx_collection_path(tmp_path)]
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.pathsep.join(paths), ANSIBLE_NOCOLOR="1")
    result = subprocess.run([os.path.join(BIN, "ansible-playbook"), "--syntax-check", "-i", "inventories/sandbox",
                             *playbooks], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    for playbook in playbooks:
        assert f"playbook: {playbook}" in result.stdout


def test_collection_requirements_pin_only_what_shipped_content_uses():
    """AWX's project sync installs collections/requirements.yml: no git (the EE build stage has none), no
    collection that no shipped role or playbook uses, and not awx.awx (configure.yml runs outside AWX)."""
    reqs = {c["name"]: c for c in _load(os.path.join(ROOT, "collections", "requirements.yml"))["collections"]}
    assert sorted(reqs) == ["community.general", "kubernetes.core"]
    for name, item in reqs.items():
        assert item["version"].count(".") == 2, f"{name} is not pinned to one release"
        assert item.get("type", "galaxy") == "galaxy", f"{name}: {item.get('type')}"
    shipped = []
    for pattern in ("roles/**/*.yml", "playbooks/**/*.yml", "plugins/**/*.py", "site.yml"):
        for path in glob.glob(os.path.join(ROOT, pattern), recursive=True):
            with open(path, encoding="utf-8") as handle:
                shipped.append(handle.read())
    text = "\n".join(shipped)
    for name in reqs:
        assert f"{name}." in text, f"{name} is pinned but no shipped file uses it"


def test_collection_ee_metadata_points_at_existing_files():
    meta = _load(os.path.join(ROOT, "meta", "execution-environment.yml"))
    for kind in ("python", "system"):
        assert os.path.isfile(os.path.join(ROOT, "meta", meta["dependencies"][kind]))
    with open(os.path.join(ROOT, "meta", "ee-requirements.txt"), encoding="utf-8") as handle:
        lines = [line.split()[0] for line in handle if line.strip() and not line.startswith("#")]
    assert "kubernetes>=24.2.0" in lines  # kubernetes.core.k8s, for k8s_manifests_apply


@pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-builder")),
                    reason="ansible-builder is not installed (requirements-test.txt has it)")
def test_ansible_builder_creates_an_offline_complete_context(tmp_path):
    """The EE builds from the collection's tarball and the context's wheels (tools/ci/ee-context.sh puts them into
    build/ee-files/; here a stand-in wheel and tarball): every file a step needs is in the context and nothing
    reaches an index, Galaxy, git or a public registry (tests/tools/ee_context.py)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
    import ee_context  # pylint: disable=import-outside-toplevel

    project = tmp_path / "project"
    for rel in ("execution-environment.yml", "collections/ee-requirements.yml", "meta/ee-requirements.txt",
                "meta/ee-bindep.txt"):
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_bytes(open(os.path.join(ROOT, rel), "rb").read())
    (project / "build" / "ee-files" / "wheels").mkdir(parents=True)
    (project / "build" / "ee-files" / "wheels" / "ansible-14.5.0-py3-none-any.whl").write_bytes(b"PK")
    (project / "build" / "ee-files" / "collections").mkdir(parents=True)
    (project / "build" / "ee-files" / "collections" / "ascendai-vllm.tar.gz").write_bytes(b"\x1f\x8b")
    context = tmp_path / "context"
    result = subprocess.run([os.path.join(BIN, "ansible-builder"), "create", "-f", "execution-environment.yml",
                             "--context", str(context), "--output-filename", "Containerfile"],
                            cwd=str(project), capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ee_context.check_context(str(context)) == []
    containerfile = (context / "Containerfile").read_text()
    definition = _load(os.path.join(ROOT, "execution-environment.yml"))
    base = definition["images"]["base_image"]["name"]
    # a placeholder for the site's registry (podman build --build-arg EE_BASE_IMAGE=...), no public one
    assert base.startswith("localhost/"), base
    assert f'ARG EE_BASE_IMAGE="{base}"' in containerfile
    assert 'ARG PYCMD="/usr/bin/python3.12"' in containerfile
    # the ansible this project tests on its newest controller (tools/ci/controller14-requirements.txt)
    with open(os.path.join(ROOT, "tools", "ci", "controller14-requirements.txt"), encoding="utf-8") as handle:
        tested = [line.strip() for line in handle if line.startswith(("ansible==", "ansible-runner=="))]
    assert f'ARG ANSIBLE_INSTALL_REFS="{" ".join(tested)}"' in containerfile
    build = context / "_build"
    for built, ours in (("requirements.txt", "ee-requirements.txt"), ("bindep.txt", "ee-bindep.txt")):
        with open(os.path.join(ROOT, "meta", ours), encoding="utf-8") as handle:
            assert (build / built).read_text() == handle.read(), built

    # Without the tarball or the wheels the context is incomplete, and the check says so.
    (project / "build" / "ee-files" / "collections" / "ascendai-vllm.tar.gz").unlink()
    broken = tmp_path / "broken"
    subprocess.run([os.path.join(BIN, "ansible-builder"), "create", "-f", "execution-environment.yml", "--context",
                    str(broken), "--output-filename", "Containerfile"], cwd=str(project), capture_output=True,
                   check=False)
    assert any("ascendai-vllm.tar.gz: no such file" in p for p in ee_context.check_context(str(broken)))


def test_the_old_git_and_index_context_is_refused(tmp_path):
    """The check itself: a context like the one a git URL and a plain pip step give is not offline."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "tools"))
    import ee_context  # pylint: disable=import-outside-toplevel

    (tmp_path / "_build").mkdir()
    (tmp_path / "_build" / "requirements.yml").write_text(
        "collections:\n  - name: https://github.com/ascendai/ascendai.vllm.git\n    type: git\n    version: main\n")
    (tmp_path / "Containerfile").write_text(
        'ARG ANSIBLE_GALAXY_CLI_COLLECTION_OPTS=""\nFROM base AS galaxy\nCOPY _build /build\n'
        "RUN $PYCMD -m pip install --no-cache-dir $ANSIBLE_INSTALL_REFS\n")
    problems = ee_context.check_context(str(tmp_path))
    assert any("type git" in p for p in problems)
    assert any("--offline" in p for p in problems)
    assert any("PIP_NO_INDEX" in p for p in problems)
