"""The python_bootstrap_plan filter: which Python a node's modules run with, from the bootstrap's raw probe."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible import release as ansible_release
from ansible.module_utils import basic
from hypothesis import given
from hypothesis import strategies as st

from ansible_collections.ascendai.vllm.plugins.filter import python_bootstrap_plan as mod
from ansible_collections.ascendai.vllm.plugins.filter.python_bootstrap_plan import python_bootstrap_plan
from ansible_collections.ascendai.vllm.plugins.module_utils._python_bootstrap import core_floor, parse_probe

BUNDLED = "/opt/ascendai/python/3.11.15/bin/python3.11"
# The filter judges by the running ansible-core's own floor (its _PY_MIN), so the tests name that core: the unit
# stage runs them under the pinned 2.19 and the controller14 stage under the newest core (floor 3.9 since 2.20).
CORE = ansible_release.__version__
CORE_MINOR = ".".join(CORE.split(".")[:2])
FLOOR = ".".join(str(v) for v in core_floor(CORE, getattr(basic, "_PY_MIN", None)))


def test_registered():
    assert mod.FilterModule().filters() == {"python_bootstrap_plan": python_bootstrap_plan}


def test_kylin_v10_python_3_7_is_refused_and_the_bundle_installed():
    plan = python_bootstrap_plan("/usr/bin/python3 3.7.9\nARCH aarch64\n", BUNDLED, CORE)
    assert plan["action"] == "install"
    assert plan["interpreter"] == BUNDLED
    assert plan["accepted"] is False
    assert plan["message"].startswith(
        "python3 3.7.9 (/usr/bin/python3) refused by ansible-core %s (needs %s or later)" % (CORE_MINOR, FLOOR))


def test_rerun_uses_the_unpacked_cpython_and_says_so():
    probe = "/usr/bin/python3 3.7.9\n%s 3.11.15\nARCH aarch64\n" % BUNDLED
    plan = python_bootstrap_plan(probe, BUNDLED, CORE)
    assert plan["action"] == "none"
    assert plan["message"] == (
        "python3 3.7.9 (/usr/bin/python3) refused by ansible-core %s; using %s 3.11.15" % (CORE_MINOR, BUNDLED))


def test_no_python3_at_all_installs_the_same_way():
    plan = python_bootstrap_plan("ARCH x86_64\n", BUNDLED, CORE)
    assert plan["action"] == "install"
    assert plan["system_version"] == ""
    assert plan["message"].startswith("no python3 at /usr/bin/python3")


def test_openeuler_22_03_python_3_9_is_kept():
    plan = python_bootstrap_plan("/usr/bin/python3 3.9.9\nARCH aarch64\n", BUNDLED, CORE)
    assert (plan["action"], plan["interpreter"], plan["accepted"]) == ("none", "/usr/bin/python3", True)


def test_an_accepted_inventory_interpreter_wins_a_refused_one_does_not():
    probe = "/usr/local/bin/python3.12 3.12.1\n/usr/bin/python3 3.9.9\n"
    assert python_bootstrap_plan(probe, BUNDLED, CORE, prefer="/usr/local/bin/python3.12")["interpreter"] == (
        "/usr/local/bin/python3.12")
    probe = "/usr/local/bin/python3.7 3.7.3\n/usr/bin/python3 3.7.3\n"
    assert python_bootstrap_plan(probe, BUNDLED, CORE, prefer="/usr/local/bin/python3.7")["action"] == "install"


def test_a_refused_bundled_python_is_an_error_with_the_fix():
    with pytest.raises(AnsibleFilterError, match=r"Python 3.7.16, which ansible-core [0-9.]+ refuses .* Remove /opt"):
        python_bootstrap_plan("/usr/bin/python3 3.7.9\n%s 3.7.16\n" % BUNDLED, BUNDLED, CORE)


def test_the_floor_is_the_running_cores_own():
    # the installed ansible-core's _PY_MIN wins over the table
    assert core_floor("2.19.14", getattr(basic, "_PY_MIN", None)) == tuple(getattr(basic, "_PY_MIN", (3, 8)))
    assert core_floor("2.17.0") == (3, 7)
    assert core_floor("2.16.3") == (3, 6)
    assert core_floor("2.19.14") == (3, 8)
    assert core_floor("2.20.0") == (3, 9)
    assert core_floor("2.21.5") == (3, 9)
    with pytest.raises(ValueError, match="not an ansible-core version"):
        core_floor("devel")


@given(st.text(max_size=400))
def test_probe_text_never_raises_and_only_paths_with_versions_count(text):
    for path, version in parse_probe(text):
        assert path.startswith("/") and " " not in path
        assert all(part.isdigit() for part in version.split("."))
    plan = python_bootstrap_plan(text.replace(BUNDLED, "/x"), BUNDLED, CORE)
    assert plan["action"] in ("none", "install")
