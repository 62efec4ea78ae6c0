"""The driver and CANN roles scan their packages and installed versions in one module run per task, not one per
package (a loop of ascend_package_info runs one module, with its --check and extraction, per package), so that the
scan does not grow with the number of packages."""

from __future__ import annotations

import os

import jinja2
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


def test_driver_plan_renders_when_the_order_leaves_nothing_alone():
    """With both packages in ascend_driver_order the read of the others is skipped: its registered result has no
    results, and the driver's installed version is still found."""
    with open(os.path.join(ROOT, "roles", "ascend_driver", "tasks", "inspect.yml")) as handle:
        book = yaml.safe_load(handle)
    kept = next(t for t in book if t["name"] == "Read the installed packages the order leaves alone")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters["difference"] = lambda a, b: [x for x in a if x not in b]
    assert env.from_string("{{ %s }}" % kept["when"]).render(ascend_driver_order=["driver", "firmware"]) == "False"
    assert env.from_string("{{ %s }}" % kept["when"]).render(ascend_driver_order=["firmware"]) == "True"
    todo = next(t for t in book if t["name"].startswith("Note what will be done"))
    expr = todo["vars"]["_ascend_driver_installed_driver"]
    read = {"results": [{"kind": "firmware", "installed": {"version": "7.5.0.1.129"}},
                        {"kind": "driver", "installed": {"version": "24.1.rc3"}}]}
    skipped = {"changed": False, "skipped": True, "skip_reason": "Conditional result was False"}
    assert env.from_string(expr).render(_ascend_driver_read=read, _ascend_driver_kept=skipped).strip() == "24.1.rc3"
    note = next(t for t in book if t["name"] == "Note the driver and firmware as they will be")
    assert [i["kind"] for i in yaml.safe_load(env.from_string(note["loop"].replace("{{", "{{ (").replace(
        "}}", ") | tojson }}")).render(_ascend_driver_read=read, _ascend_driver_kept=skipped))] == [
        "firmware", "driver"]
