"""ascendai.vllm.rpm_packages with stand-in rpm and dnf commands on PATH.

The stand-ins print what rpm 4 prints (lib/query.c: "package %s is not installed", "no package provides %s") and keep
the installed set in a file; the Kylin and openEuler Molecule scenarios run the module against real rpm and dnf."""

from __future__ import annotations

import os
import stat

import pytest
from ansible.module_utils.testing import patch_module_args
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.ascendai.vllm.plugins.module_utils._rpm_packages import (
    RpmSpecError, check_specs, install_argv, not_installed, query_argv)
from ansible_collections.ascendai.vllm.plugins.modules import rpm_packages
from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.module_harness import (
    AnsibleExitJson, AnsibleFailJson, patch_exits)

RPM = r"""#!/bin/sh
# stand-in rpm -q [--whatprovides] -- NAMES: the installed set is $STATE (one name per line); provides in $PROVIDES
what=0; rc=0
for a in "$@"; do
  case $a in -q|--) continue ;; --whatprovides) what=1; continue ;; esac
  by=$(grep "^$a " "$PROVIDES" 2>/dev/null | cut -d' ' -f2)
  if grep -qx "$a" "$STATE"; then echo "$a-1.0-1.ky10.aarch64"
  elif [ $what = 1 ] && [ -n "$by" ] && grep -qx "$by" "$STATE"; then echo "$by-1.0-1.ky10.aarch64"
  elif [ $what = 1 ]; then echo "no package provides $a"; rc=$((rc+1))
  else echo "package $a is not installed"; rc=$((rc+1)); fi
done
exit $rc
"""

DNF = r"""#!/bin/sh
# stand-in dnf install -y ... -- NAMES: appends to $STATE, or fails for names listed in $UNAVAILABLE
echo "$@" >> "$LOG"
seen=0
for a in "$@"; do
  [ "$a" = -- ] && { seen=1; continue; }
  [ $seen = 1 ] || continue
  if grep -qx "$a" "$UNAVAILABLE" 2>/dev/null; then echo "Error: Unable to find a match: $a" >&2; exit 1; fi
  echo "$a" >> "$STATE"
done
"""


@pytest.fixture
def node(tmp_path, monkeypatch):
    patch_exits(monkeypatch)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, body in (("rpm", RPM), ("dnf", DNF)):
        path = bindir / name
        path.write_text(body)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    state = tmp_path / "installed"
    state.write_text("gcc\nmake\n")
    monkeypatch.setenv("PATH", "%s:%s" % (bindir, os.environ["PATH"]))
    monkeypatch.setenv("STATE", str(state))
    monkeypatch.setenv("PROVIDES", str(tmp_path / "provides"))
    monkeypatch.setenv("UNAVAILABLE", str(tmp_path / "unavailable"))
    monkeypatch.setenv("LOG", str(tmp_path / "dnf.log"))
    return tmp_path


def run(args, check=False, diff=False):
    args = dict(args, _ansible_check_mode=check, _ansible_diff=diff)
    with patch_module_args(args), pytest.raises((AnsibleExitJson, AnsibleFailJson)) as exc:
        rpm_packages.main()
    return exc.type, exc.value.args[0]


def test_installs_only_what_is_missing_then_changes_nothing(node):
    kind, res = run({"name": ["gcc", "dkms", "make", "numactl"]})
    assert kind is AnsibleExitJson, res
    assert res["changed"] is True and res["installed"] == ["dkms", "numactl"]
    assert res["cmd"][-3:] == ["--", "dkms", "numactl"]
    assert "--setopt=install_weak_deps=False" in res["cmd"]
    kind, res = run({"name": ["gcc", "dkms", "make", "numactl"]})
    assert (kind, res["changed"], res["cmd"]) == (AnsibleExitJson, False, [])
    assert len((node / "dnf.log").read_text().splitlines()) == 1


def test_check_mode_reports_and_installs_nothing(node):
    kind, res = run({"name": ["dkms", "gcc"]}, check=True, diff=True)
    assert kind is AnsibleExitJson and res["changed"] is True and res["installed"] == ["dkms"]
    assert res["diff"] == {"before": "dkms: absent\ngcc: present\n", "after": "dkms: present\ngcc: present\n"}
    assert not (node / "dnf.log").exists()
    assert "dkms" not in (node / "installed").read_text()


def test_a_capability_provided_by_an_installed_package_counts(node):
    (node / "provides").write_text("/usr/bin/cc gcc\n")
    kind, res = run({"name": ["/usr/bin/cc"]})
    assert (kind, res["changed"]) == (AnsibleExitJson, False)


def test_a_package_the_repositories_lack_fails_naming_it_and_the_check(node):
    (node / "unavailable").write_text("kernel-devel-4.19.90-52.22.v2207.ky10.aarch64\n")
    kind, res = run({"name": ["kernel-devel-4.19.90-52.22.v2207.ky10.aarch64"]})
    assert kind is AnsibleFailJson
    assert "dnf could not install kernel-devel-4.19.90-52.22.v2207.ky10.aarch64 (exit 1)" in res["msg"]
    assert "Unable to find a match" in res["msg"] and "dnf list --available" in res["msg"]


@pytest.mark.parametrize("bad", ["", "-y", "--setopt=x", "gcc;rm -rf /", "a\nb", "x" * 300])
def test_names_that_are_not_package_specs_are_refused_before_rpm_runs(node, bad):
    kind, res = run({"name": ["gcc", bad]})
    assert kind is AnsibleFailJson and "is not an RPM package name" in res["msg"]
    assert not (node / "dnf.log").exists()


def test_argv_shapes():
    assert query_argv("rpm", ["a"], whatprovides=True) == ["rpm", "-q", "--whatprovides", "--", "a"]
    assert install_argv("dnf", ["a"], ["local"]) == [
        "dnf", "install", "-y", "--quiet", "--setopt=install_weak_deps=False", "--enablerepo=local", "--", "a"]
    assert check_specs(["gcc", " gcc ", "python3"]) == ["gcc", "python3"]


@settings(max_examples=200)
@given(st.text(max_size=300))
def test_rpm_output_parsing_never_raises_and_names_only_asked_packages(text):
    names = ["gcc", "dkms"]
    assert set(not_installed(text, names)) <= set(names)
    assert set(not_installed(text, names, whatprovides=True)) <= set(names)


@given(st.text(min_size=1, max_size=40))
def test_spec_check_never_lets_an_option_or_a_line_break_through(text):
    try:
        specs = check_specs([text])
    except RpmSpecError:
        return
    assert not specs[0].startswith("-") and "\n" not in specs[0] and ";" not in specs[0]
