"""roles/offline_bundle preflight: an ascend target whose glibc (manylinux tag) cannot take the row's aarch64
wheels is refused before anything is downloaded, naming the row that would install."""

from __future__ import annotations

import os
import sys

import pytest

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import BIN, PLAYBOOK, run_playbook


def run_preflight(tmp_path, vllm_ascend, platform, **role_vars):
    target = {"name": "aarch64", "flavour": "ascend", "platforms": [platform],
              "uv_platform": "aarch64-" + platform.rsplit("_", 1)[0], "python_version": "3.11"}
    return run_playbook(tmp_path, [{
        "name": "bundle preflight", "hosts": "localhost", "gather_facts": False,
        "vars": {"ansible_python_interpreter": sys.executable},
        "roles": [{"role": "ascendai.vllm.offline_bundle", "offline_bundle_vllm_ascend_version": vllm_ascend,
                   "offline_bundle_targets": [target], "offline_bundle_dir": str(tmp_path / "bundle"),
                   "offline_bundle_uv": os.path.join(BIN, "uv"), **role_vars}],
    }], args=["--tags", "offline_bundle_preflight"])


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
@pytest.mark.parametrize(("vllm_ascend", "platform", "refused"), [
    ("0.23.0", "manylinux_2_28_aarch64", True),
    ("0.23.0", "manylinux_2_34_aarch64", False),
    ("0.11.0", "manylinux_2_28_aarch64", False),
    ("0.11.0", "manylinux_2_17_aarch64", True),
])
def test_target_glibc_against_the_row(tmp_path, vllm_ascend, platform, refused):
    # the Huawei index holds 0.23.0's triton-ascend==3.2.2 (test_pin_missing_from_pypi_stops_before_download)
    out = run_preflight(tmp_path, vllm_ascend, platform,
                        offline_bundle_ascend_extra_index_urls=["https://mirrors.huaweicloud.com/ascend/repos/pypi"])
    if refused:
        assert out.returncode != 0, out.stdout[-3000:]
        assert "that row's aarch64 wheels need" in out.stdout
        assert "the newest release whose aarch64 wheels install is" in out.stdout
        assert not (tmp_path / "bundle" / "wheels").exists()
    else:
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
@pytest.mark.parametrize(("vllm_ascend", "role_vars", "refused"), [
    ("0.23.0", {}, True),  # triton-ascend==3.2.2: not on PyPI
    ("0.23.0", {"offline_bundle_ascend_extra_index_urls": ["https://mirrors.huaweicloud.com/ascend/repos/pypi"]},
     False),
    ("0.23.0", {"offline_bundle_overrides": ["triton-ascend==3.2.0"]}, False),
    ("0.18.0", {}, False),  # its wheels pin triton-ascend==3.2.0, on PyPI
])
def test_pin_missing_from_pypi_stops_before_download(tmp_path, vllm_ascend, role_vars, refused):
    out = run_preflight(tmp_path, vllm_ascend, "manylinux_2_34_aarch64", **role_vars)
    if refused:
        assert out.returncode != 0, out.stdout[-3000:]
        assert "pins triton-ascend==3.2.2, which PyPI does not have" in out.stdout
        assert "https://mirrors.huaweicloud.com/ascend/repos/pypi" in out.stdout
        assert not (tmp_path / "bundle" / "wheels").exists()
    else:
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
@pytest.mark.parametrize(("platform", "release"), [
    ("manylinux_2_28_aarch64", "0.18.0"),   # Kylin V10's glibc: v0.18.0, whose wheels are all on PyPI
    ("manylinux_2_34_aarch64", "0.23.0"),   # openEuler 22.03+/Ubuntu 22.04: the newest final
])
def test_empty_release_is_the_default_release_for_the_targets(tmp_path, platform, release):
    # empty: the bundle holds one default release, the newest final one for the targets' glibc
    out = run_preflight(tmp_path, "", platform,
                        offline_bundle_ascend_extra_index_urls=["https://mirrors.huaweicloud.com/ascend/repos/pypi"])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert f"offline_bundle_vllm_ascend_version is empty: vllm-ascend {release}," in out.stdout, out.stdout[-3000:]
