"""tools/generate/vllm_ascend_matrix.py: the committed matrix is what its committed inputs generate, and the rules."""

from __future__ import annotations

import importlib.util
import os

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_SPEC = importlib.util.spec_from_file_location(
    "vllm_ascend_matrix", os.path.join(ROOT, "tools", "generate", "vllm_ascend_matrix.py"))
tool = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(tool)


@pytest.fixture(scope="module")
def files():
    return tool.read_archive()


def test_committed_table_is_up_to_date(capsys):
    assert tool.main(["check"]) == 0, capsys.readouterr().out


def test_every_pypi_release_has_inputs(files):
    releases = {name.split("/")[0] for name in files if "/" in name and not name.startswith("pypi/")}
    assert len(releases) == 49
    for release in releases:
        assert f"{release}/files.json" in files
        assert f"{release}/Dockerfile" in files


def test_check_fails_when_the_table_differs(tmp_path, capsys):
    module = tmp_path / "compat_matrix.py"
    text = open(tool.OUTPUT, encoding="utf-8").read()
    module.write_text(text.replace("'cann': '8.5.0'", "'cann': '8.5.1'", 1), encoding="utf-8")
    assert tool.main(["check", "--output", str(module)]) == 1
    assert "run generate" in capsys.readouterr().out


# A real table: v0.11.0's docs/source/community/versioning_policy.md (two lines of it)
_TABLE = """\
| vLLM Ascend | vLLM         | Python           | Stable CANN | PyTorch/torch_npu  | MindIE Turbo |
|-------------|--------------|------------------|-------------|--------------------|--------------|
| v0.11.0rc0  | v0.11.0rc3      | >= 3.9, < 3.12   | 8.2.RC1     | 2.7.1 / 2.7.1.dev20250724            |              |
| v0.10.1rc1  | v0.10.1/v0.10.1.1 | >= 3.9, < 3.12   | 8.2.RC1     | 2.7.1 / 2.7.1.dev20250724            |              |
"""  # noqa: E501


def test_doc_table_parsing():
    rows = tool.parse_doc_table(_TABLE)
    assert set(rows) == {"0.11.0rc0", "0.10.1rc1"}
    fields = tool._doc_fields(rows["0.10.1rc1"])  # pylint: disable=protected-access
    assert fields == {"vllm": ["0.10.1", "0.10.1.1"], "python_min": "3.9", "python_max": "3.11",
                      "cann": "8.2.RC1", "torch": "2.7.1", "torch_npu": "2.7.1.dev20250724", "triton_ascend": None}


@pytest.mark.parametrize(("name", "glibc"), [
    ("vllm_ascend-0.9.1-cp311-cp311-manylinux2014_aarch64.manylinux_2_17_aarch64.whl", (2, 17)),
    ("vllm_ascend-0.23.0-cp311-cp311-manylinux_2_34_aarch64.whl", (2, 34)),
    ("triton_ascend-3.2.0-cp311-cp311-manylinux_2_27_aarch64.manylinux_2_28_aarch64.whl", (2, 27)),
    ("vllm_ascend-0.9.0rc1-cp311-cp311-manylinux2014_aarch64.whl", (2, 17)),
])
def test_glibc_of_a_wheel_name(name, glibc):
    assert tool._glibc_of(name) == glibc  # pylint: disable=protected-access


@pytest.mark.parametrize(("docker", "cann"), [
    ("FROM quay.io/ascend/cann:8.3.rc2-910b-ubuntu22.04-py3.11\n", "8.3.RC2"),
    ('ARG CANN_VERSION="9.2.0_20260930220649"\nFROM ${CANN_QUAY_URL}:${CANN_VERSION}-910b-ubuntu22.04-py3.12\n',
     "9.2.0"),
])
def test_cann_of_the_dockerfile(docker, cann):
    assert tool._cann_of_docker(docker) == cann  # pylint: disable=protected-access


def test_newest_doc_wins_and_differences_are_notes(files):
    rows = {row["vllm_ascend"]: row for row in tool.build_rows(files)}
    # v0.23.0's own doc: CANN 9.0.1, torch_npu 2.10.0.post2; newer docs, its Dockerfile and its wheels: 9.1.0, post4
    assert rows["0.23.0"]["cann"] == "9.1.0" and rows["0.23.0"]["torch_npu"] == "2.10.0.post4"
    assert any("its own doc said cann 9.0.1" in note for note in rows["0.23.0"]["notes"])
    # v0.18.0: the doc's Triton-Ascend 3.2.0.dev20260322, the wheel's pin 3.2.0 (what pip installs)
    assert rows["0.18.0"]["triton_ascend"] == "3.2.0"
    assert "wheel METADATA requires triton-ascend==3.2.0, doc 3.2.0.dev20260322" in rows["0.18.0"]["notes"]
    # no aarch64 wheel: no glibc
    assert rows["0.30.0rc2"]["glibc"] is None and rows["0.30.0rc2"]["aarch64_wheels"] == []
