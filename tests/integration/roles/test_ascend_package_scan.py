"""The driver and CANN roles scan their packages and installed versions in one module run per task, not one per
package (a loop of ascend_package_info runs one module, with its --check and extraction, per package), so that the
scan does not grow with the number of packages."""

from __future__ import annotations

import os

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLES = ("ascend_driver", "ascend_cann")
LOOPS = ("loop", "with_items", "with_list", "with_dict", "with_nested")


def tasks(role):
    """Every task of the role's tasks/*.yml (blocks opened), with the file it is in."""
    out = []
    folder = os.path.join(ROOT, "roles", role, "tasks")

    def walk(items, name):
        for t in items or []:
            out.append((name, t))
            for key in ("block", "rescue", "always"):
                walk(t.get(key), name)

    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as handle:
            walk(yaml.safe_load(handle), name)
    return out


@pytest.mark.parametrize("role", ROLES)
def test_package_info_is_never_looped(role):
    reads = [(f, t) for f, t in tasks(role) if "ascendai.vllm.ascend_package_info" in t]
    assert reads, role
    looped = ["%s: %s" % (f, t["name"]) for f, t in reads if any(k in t for k in LOOPS)]
    assert looped == []
    for f, t in reads:
        args = t["ascendai.vllm.ascend_package_info"]
        assert "kinds" in args or args.get("kind") == "driver", (f, t["name"])


def test_the_read_of_the_packages_the_order_leaves_alone_runs_only_when_there_are_some():
    """Its condition is that its kinds are not empty; what the role makes of a skipped read is the
    ascend_install_outlook filter's (tests/unit/plugins/filter/test_ascend_install_outlook.py)."""
    with open(os.path.join(ROOT, "roles", "ascend_driver", "tasks", "inspect.yml")) as handle:
        book = yaml.safe_load(handle)
    kept = next(t for t in book if t["name"] == "Read the installed packages the order leaves alone")
    kinds = kept["ascendai.vllm.ascend_package_info"]["kinds"]
    assert kinds.startswith("{{ ") and kinds.endswith(" }}")
    assert kept["when"] == kinds[3:-3] + " | length > 0"
    assert kept["register"] == "_ascend_driver_kept"
    note = next(t for t in book if "ascendai.vllm.ascend_install_outlook" in str(t))
    assert "kept=_ascend_driver_kept" in note["ansible.builtin.set_fact"]["_ascend_driver_outlook"]
