"""The ascend_cann_layout filter: package names and paths of a CANN release, checked against Huawei's own
install log and version files (tests/unit/fixtures/ascend-install)."""

from __future__ import annotations

import os
import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter.ascend_cann_layout import FilterModule

ascend_cann_layout = FilterModule().filters()["ascend_cann_layout"]

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "ascend-install")


def read(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read()


def test_cann_8_5_paths_are_those_of_the_installed_toolkit_info():
    # MindCluster's example: cat /usr/local/Ascend/cann/<arch>-linux/ascend_toolkit_install.info of CANN 8.5.0
    text = read("driver-firmware-cann-version-info-mindcluster-doc.txt")
    for arch in ("aarch64", "x86_64"):
        block = re.search(rf"cat (/usr/local/Ascend/cann/{arch}-linux/ascend_toolkit_install\.info)\n.*?"
                          rf"version=(\S+)\n.*?path=(\S+)\n", text, re.S)
        info_file, version, path = block.groups()
        layout = ascend_cann_layout(version, arch)
        assert layout["generation"] == "cann"
        assert layout["info"]["toolkit"] == info_file
        # the install path the info file records is <home>/<arch>-linux
        assert path == f"{layout['home']}/{arch}-linux"
        assert layout["files"]["toolkit"] == f"Ascend-cann-toolkit_{version}_linux-{arch}.run"
        # from CANN 8.5 on the kernels package is the "<npu>-ops" one (DOCUMENTATION)
        assert layout["files"]["kernels"] == f"Ascend-cann-910b-ops_{version}_linux-{arch}.run"


def test_older_cann_installs_under_ascend_toolkit_as_its_installer_says():
    # llm-action's install of Ascend-cann-toolkit_6.3.RC1_linux-aarch64.run: "source .../ascend-toolkit/set_env.sh"
    log = read("driver-firmware-toolkit-run-install-logs-910-llm-action.txt")
    package = re.search(r"\$ \./(Ascend-cann-toolkit_(\S+)_linux-(\w+)\.run)", log)
    run_file, version, arch = package.groups()
    layout = ascend_cann_layout(version, arch)
    assert layout["generation"] == "ascend-toolkit"
    assert layout["files"]["toolkit"] == run_file
    assert f'"source {layout["toolkit_set_env"]}"' in log
    assert layout["home"] == "/usr/local/Ascend/ascend-toolkit/latest"
    assert layout["files"]["kernels"] == "Ascend-cann-kernels-910b_6.3.RC1_linux-aarch64.run"


def test_generation_boundary_npu_type_and_install_path():
    assert ascend_cann_layout("8.3.RC2", "aarch64")["generation"] == "ascend-toolkit"
    assert ascend_cann_layout("8.5.0", "aarch64")["generation"] == "cann"
    assert ascend_cann_layout("9.1.0", "aarch64")["home"] == "/usr/local/Ascend/cann-9.1.0"
    layout = ascend_cann_layout("8.3.RC2", "x86_64", npu_type="310p", install_path="/opt/Ascend/")
    assert layout["files"]["kernels"] == "Ascend-cann-kernels-310p_8.3.RC2_linux-x86_64.run"
    assert layout["toolkit_set_env"] == "/opt/Ascend/ascend-toolkit/set_env.sh"
    assert layout["nnal_set_env"] == "/opt/Ascend/nnal/atb/set_env.sh"
    assert layout["atb_home"] == "/opt/Ascend/nnal/atb/latest/atb"
    assert layout["info"]["nnal"] == "/opt/Ascend/nnal/atb/latest/version.info"


@pytest.mark.parametrize("version,arch,needle", [
    ("latest", "aarch64", "not an Ascend version: 'latest'"),
    ("8.5.x", "aarch64", "not an Ascend version: '8.5.x'"),
    ("8.5.1", "", "arch=''"),
    ("8.5.1", None, "arch=None"),
    ("8.5.1", ["aarch64"], r"arch=\['aarch64'\]"),
])
def test_bad_input_is_named(version, arch, needle):
    with pytest.raises(AnsibleFilterError, match=rf"^ascend_cann_layout: .*{needle}"):
        ascend_cann_layout(version, arch)


@pytest.mark.parametrize("version", [8.5, 8.10, 8, True, None, ["8.5.1"], {"version": "8.5.1"}])
def test_a_version_that_is_not_a_string_is_refused(version):
    # an unquoted YAML 8.10 is the float 8.1: the layout of another release, so no number is read as a version
    with pytest.raises(AnsibleFilterError, match=rf"^ascend_cann_layout: version={re.escape(repr(version))} is not "
                                                 r"a version string; quote it in YAML, e.g\. ascend_cann_version: "
                                                 r"\"8\.5\.1\""):
        ascend_cann_layout(version, "aarch64")


@pytest.mark.parametrize("kwargs,needle", [
    ({"npu_type": 910}, "npu_type=910; pass the NPU of the package names as a string, e.g. '910b'"),
    ({"npu_type": ["910b"]}, r"npu_type=\['910b'\]; pass the NPU"),
    ({"install_path": 7}, "install_path=7; pass the CANN install path as an absolute path, e.g. '/usr/local/Ascend'"),
    ({"install_path": "opt/Ascend"}, "install_path='opt/Ascend'; pass the CANN install path as an absolute path"),
])
def test_npu_type_and_install_path_that_are_not_strings_are_refused(kwargs, needle):
    with pytest.raises(AnsibleFilterError, match=rf"^ascend_cann_layout: {needle}"):
        ascend_cann_layout("8.5.1", "aarch64", **kwargs)


def test_empty_npu_type_and_install_path_take_the_defaults():
    layout = ascend_cann_layout("8.5.1", "aarch64", npu_type="", install_path=None)
    assert layout["files"]["kernels"] == "Ascend-cann-910b-ops_8.5.1_linux-aarch64.run"
    assert layout["toolkit_set_env"] == "/usr/local/Ascend/ascend-toolkit/set_env.sh"


def test_a_text_that_is_no_version_is_named_once_with_the_fix():
    with pytest.raises(AnsibleFilterError) as err:
        ascend_cann_layout("latest", "aarch64")
    message = str(err.value)
    assert message.startswith("ascend_cann_layout: not an Ascend version: 'latest'")
    assert message.endswith('Set the CANN release as a quoted string, e.g. ascend_cann_version: "8.5.1"'), message
    assert message.count("not an Ascend version") == 1
