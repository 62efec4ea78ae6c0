"""Tests for the ascendai.vllm.compat_check and ascendai.vllm.compat_row filters."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ascendai.vllm.plugins.filter import compat_check as cc_mod
from ansible_collections.ascendai.vllm.plugins.filter import compat_row as cr_mod
from ansible_collections.ascendai.vllm.plugins.filter.compat_check import compat_check
from ansible_collections.ascendai.vllm.plugins.filter.compat_row import compat_row

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def test_registered_under_their_names():
    assert cc_mod.FilterModule().filters() == {"compat_check": compat_check}
    assert cr_mod.FilterModule().filters() == {"compat_row": compat_row}


def test_bad_combination_fails_naming_the_row_that_works():
    with pytest.raises(AnsibleFilterError) as info:
        compat_check("0.23", cann="8.1")
    text = str(info.value)
    assert text.startswith("Impossible combination (vllm-ascend 0.23, CANN 8.1):")
    assert "CANN 8.1 is not the CANN of that row (9.1.0)" in text
    assert "Or keep CANN 8.1 and use the row that works with it: vllm-ascend v0.7.3.post1: vLLM 0.7.3, " \
           "Python 3.9-3.11, CANN 8.1.RC1, torch 2.5.1, torch_npu 2.5.1." in text


def test_good_combination_returns_row():
    row = compat_check({"vllm_ascend": "0.23.0", "vllm": "0.23.0", "python": "3.11", "cann": "9.1.0"},
                       torch_npu="2.10.0.post4")
    assert row["label"] == "v0.23.0"
    assert row["torch"] == "2.10.0"


def test_without_release_returns_newest_row_for_the_stack():
    assert compat_check({"cann": "8.3.RC2", "python": "3.10"})["label"] == "v0.13.0rc1"


@pytest.mark.parametrize(("kwargs", "fragment"), [
    ({"python": 3.1}, "python=3.1 is not a version string; quote it"),
    ({"cann": ["8.1"]}, "cann must be a version string, got list"),
    ({"cann": "eight"}, "cann='eight' is not a version string"),
])
def test_bad_input_named(kwargs, fragment):
    with pytest.raises(AnsibleFilterError, match=fragment.replace(".", r"\.").replace("(", r"\(")):
        compat_check("0.23.0", **kwargs)


def test_unknown_mapping_key():
    with pytest.raises(AnsibleFilterError, match=r"unknown keys \['cuda'\]"):
        compat_check({"vllm_ascend": "0.23.0", "cuda": "12"})


def test_compat_row():
    assert compat_row("0.23.0.post1")["torch_npu"] == "2.10.0.post4"
    assert compat_row("latest")["label"] == "v0.23.0"  # newest final with aarch64 wheels (0.30.0rc2: rc, sdist)
    assert compat_row("v0.9.1")["cann"] == ["8.2.RC1"]
    with pytest.raises(AnsibleFilterError, match=r"vllm-ascend 0\.19\.0 is not in the compatibility table; known "
                                                 r"releases: v0\.7\.1rc1"):
        compat_row("0.19.0")
    assert compat_row("0.9")["label"] == "v0.9.1"  # the newest final of 0.9 (pip's reading of 0.9.*)
    with pytest.raises(AnsibleFilterError, match="matches 3 rows"):
        compat_row("0.10")  # release candidates only
    with pytest.raises(AnsibleFilterError, match="quoted version string"):
        compat_row(0.23)


def test_through_ansible_with_fqcn(tmp_path):
    """The filter resolves by FQCN in a real ansible run and its message reaches the user."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_LOCAL_TEMP=str(tmp_path), ANSIBLE_HOME=str(tmp_path), ANSIBLE_NOCOLOR="1")
    ansible = os.path.join(os.path.dirname(sys.executable), "ansible")
    ok = subprocess.run([ansible, "localhost", "-m", "ansible.builtin.debug", "-a",
                         "msg=cann={{ ('0.23.0' | ascendai.vllm.compat_row).cann | join(',') }}"],
                        capture_output=True, text=True, env=env, check=False, timeout=120)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "cann=9.1.0" in ok.stdout
    bad = subprocess.run([ansible, "localhost", "-m", "ansible.builtin.debug", "-a",
                          "msg={{ '0.23' | ascendai.vllm.compat_check(cann='8.1') }}"],
                         capture_output=True, text=True, env=env, check=False, timeout=120)
    assert bad.returncode != 0
    assert "vllm-ascend v0.7.3.post1" in bad.stdout + bad.stderr


def test_glibc_of_an_aarch64_node():
    assert compat_check({"vllm_ascend": "0.11.0", "cann": "8.3.RC2"}, glibc="2.28")["glibc"] == "2.28"
    with pytest.raises(AnsibleFilterError, match=r"glibc 2\.28 is older than the glibc 2\.34"):
        compat_check({"vllm_ascend": "0.23.0", "glibc": "2.28"})


@pytest.mark.parametrize(("kwargs", "label"), [
    ({}, "v0.23.0"),
    ({"glibc": "2.28"}, "v0.18.0"),              # Kylin V10
    ({"glibc": "2.38"}, "v0.23.0"),              # openEuler 24.03
    ({"glibc": ""}, "v0.23.0"),                  # not read (x86_64, or ldd missing)
    ({"glibc": "2.35", "available": ["0.11.0", "0.13.0"]}, "v0.13.0"),
    ({"glibc": "2.35", "cann": "8.3.RC2"}, "v0.11.0"),  # the CANN the node gets (ascend_cann_version) decides too
    ({"glibc": "2.28", "cann": "9.1.0"}, None),
])
def test_latest_follows_the_node_and_the_bundle(kwargs, label):
    if label is None:
        with pytest.raises(AnsibleFilterError, match=r"no final vllm-ascend release installs on glibc 2\.28 with "
                                                     r"CANN 9\.1\.0"):
            compat_row("latest", **kwargs)
        return
    assert compat_row("latest", **kwargs)["label"] == label


def test_latest_says_when_nothing_fits():
    with pytest.raises(AnsibleFilterError, match=r"no final vllm-ascend release installs on glibc 2\.28 among the "
                                                 r"bundled releases 0\.23\.0"):
        compat_row("latest", glibc="2.28", available=["0.23.0"])
    with pytest.raises(AnsibleFilterError, match="available must be a list"):
        compat_row("latest", available="0.23.0")
    with pytest.raises(AnsibleFilterError, match="go with 'latest' only"):
        compat_row("0.23.0", glibc="2.28")
