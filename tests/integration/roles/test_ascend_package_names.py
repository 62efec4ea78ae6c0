"""The .run file names the ascend_driver and ascend_cann roles look for, rendered from their vars/main.yml."""

from __future__ import annotations

import os
import sys

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "simulator"))

import build_installers  # noqa: E402  (the simulator names its packages as Huawei does)
from ansible_collections.ascendai.vllm.plugins.filter.ascend_cann_layout import ascend_cann_layout  # noqa: E402


def _templar(variables):
    """Ansible's templar with the collection's ascend_cann_layout filter (the role's vars call it by its FQCN)."""
    templar = Templar(loader=DataLoader(), variables=variables)
    templar.environment.filters["ascendai.vllm.ascend_cann_layout"] = ascend_cann_layout
    return templar


def _trusted(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    if isinstance(value, dict):
        return {k: _trusted(v) for k, v in value.items()}
    return value


def render_files(role, variables):
    """The role's _<role>_files, templated by Ansible's engine with the role's vars/main.yml (lazily, as in a play)."""
    with open(os.path.join(ROOT, "roles", role, "vars", "main.yml")) as handle:
        data = yaml.safe_load(handle)
    templar = _templar(dict(_trusted(data), **variables))
    files = templar.template(trust_as_template("{{ _%s_files }}" % role))
    return {kind: str(name).strip() for kind, name in files.items()}


@pytest.mark.parametrize("arch,driver", [
    ("x86_64", "Ascend-hdk-910b-npu-driver_25.2.0_linux-x86-64.run"),
    ("aarch64", "Ascend-hdk-910b-npu-driver_25.2.0_linux-aarch64.run"),
])
def test_driver_names(arch, driver):
    files = render_files("ascend_driver", {"ansible_facts": {"architecture": arch}, "ascend_driver_npu_type": "910b",
                                           "ascend_driver_version": "25.2.0",
                                           "ascend_driver_firmware_version": "7.7.0.1.231"})
    assert files == {"driver": driver, "firmware": "Ascend-hdk-910b-npu-firmware_7.7.0.1.231.run"}
    assert files["driver"] == build_installers.filename("driver", "25.2.0", arch)


# The 910B kernels package became Ascend-cann-910b-ops with CANN 8.5.0 (vllm-ascend installation.md at v0.14.0rc1:
# Ascend-cann-910b-ops_8.5.0_linux-"$(uname -i)".run; at v0.11.0: Ascend-cann-kernels-910b_8.3.RC2_linux-...).
@pytest.mark.parametrize("version,arch,kernels", [
    ("8.3.RC2", "x86_64", "Ascend-cann-kernels-910b_8.3.RC2_linux-x86_64.run"),
    ("8.5.0", "aarch64", "Ascend-cann-910b-ops_8.5.0_linux-aarch64.run"),
    ("8.5.1", "x86_64", "Ascend-cann-910b-ops_8.5.1_linux-x86_64.run"),
    ("9.1.0", "aarch64", "Ascend-cann-910b-ops_9.1.0_linux-aarch64.run"),
])
def test_cann_names(version, arch, kernels):
    files = render_files("ascend_cann", {"ansible_facts": {"architecture": arch}, "ascend_cann_npu_type": "910b",
                                         "ascend_cann_release_version": version,  # tasks/release.yml's choice
                                         "ascend_cann_install_path": "/usr/local/Ascend"})
    assert files == {"toolkit": "Ascend-cann-toolkit_%s_linux-%s.run" % (version, arch), "kernels": kernels,
                     "nnal": "Ascend-cann-nnal_%s_linux-%s.run" % (version, arch)}
    assert kernels == build_installers.filename("kernels", version, arch)


@pytest.mark.parametrize("version,kernels", [
    ("8.3.RC2", "Ascend-cann-kernels-910b_8.3.RC2_linux-aarch64.run"),
    ("8.5.1", "Ascend-cann-910b-ops_8.5.1_linux-aarch64.run"),
])
def test_offline_bundle_names(version, kernels):
    with open(os.path.join(ROOT, "roles", "offline_bundle", "vars", "main.yml")) as handle:
        data = yaml.safe_load(handle)
    templar = _templar(dict(_trusted(data), _offline_bundle_cann=version, offline_bundle_npu_type="910b",
                            offline_bundle_driver_version="25.2.0", offline_bundle_firmware_version="7.7.0.1.231"))
    names = templar.template(trust_as_template("{{ _offline_bundle_huawei_expected }}"))
    assert names[2:] == ["Ascend-cann-toolkit_%s_linux-aarch64.run" % version, kernels,
                         "Ascend-cann-nnal_%s_linux-aarch64.run" % version]
