"""One collection-wide ascendai_bundle_url / ascendai_bundle_dir: every role's bundle location follows them unless
the role's own variable is set, and the sandbox inventory sets only ascendai_bundle_url."""

from __future__ import annotations

import os

import pytest
import yaml
from ansible.template import Templar

try:  # ansible-core 2.19+ templates only strings marked as trusted (role defaults are, when loaded by Ansible)
    from ansible.template import trust_as_template
except ImportError:  # pragma: no cover - older ansible-core
    def trust_as_template(value):
        return value

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
URL = "http://10.0.0.1:18770"
DIR = "/srv/ascendai-bundle"
PLAYBOOKS = "/work/checkout/playbooks"

# role variable -> (with ascendai_bundle_url and ascendai_bundle_dir set, with neither set). With neither, no role
# falls back to a folder of a development checkout (<playbook dir>/../.cache/bundle): the location is empty
# and the role's preflight says to set one.
EXPECTED = {
    "ascend_driver_bundle_url": (URL, ""),
    "ascend_driver_bundle_dir": (DIR, ""),
    "ascend_cann_bundle_url": (URL, ""),
    "ascend_cann_bundle_dir": (DIR, ""),
    "ascend_cann_wheelhouse_url": (URL + "/wheels/aarch64/", ""),
    "ascend_cann_wheelhouse_src": (DIR + "/wheels/aarch64", ""),
    "python_runtime_tarball_url": (URL + "/python/", ""),
    "python_runtime_tarball_src": (DIR + "/python", ""),
    "vllm_wheelhouse_url": (URL + "/wheels/aarch64/", ""),
    "vllm_wheelhouse_src": (DIR + "/wheels/aarch64", ""),
    "model_bundle_url": (URL, ""),
    "model_bundle_src": (DIR, ""),
    "offline_bundle_dir": (DIR, ""),
}


def role_default(name):
    role = next(r for r in ("ascend_driver", "ascend_cann", "python_runtime", "vllm", "model", "offline_bundle")
                if name.startswith(r + "_"))
    with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml"), encoding="utf-8") as f:
        return yaml.safe_load(f)[name]


def render(expr, **extra):
    variables = {"playbook_dir": PLAYBOOKS, "ansible_facts": {"architecture": "aarch64"}, **extra}
    return Templar(loader=None, variables=variables).template(trust_as_template(expr))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_role_default_follows_the_collection_wide_bundle(name):
    with_both, with_neither = EXPECTED[name]
    expr = role_default(name)
    assert render(expr, ascendai_bundle_url=URL, ascendai_bundle_dir=DIR).strip() == with_both
    slash = render(expr, ascendai_bundle_url=URL + "/", ascendai_bundle_dir=DIR).strip()  # a URL ending in /
    assert slash in (with_both, with_both.replace(URL, URL + "/", 1)) and ":18770//" not in slash
    assert render(expr).strip() == with_neither


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_argument_spec_documents_the_collection_wide_variable(name):
    role = next(r for r in ("ascend_driver", "ascend_cann", "python_runtime", "vllm", "model", "offline_bundle")
                if name.startswith(r + "_"))
    with open(os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml"), encoding="utf-8") as f:
        options = yaml.safe_load(f)["argument_specs"]["main"]["options"]
    wide = "ascendai_bundle_url" if name.endswith("_url") else "ascendai_bundle_dir"
    assert wide in options
    description = options[name]["description"]
    assert f"O({wide})" in (description if isinstance(description, str) else " ".join(description))


def test_sandbox_inventory_sets_only_the_collection_wide_url():
    with open(os.path.join(ROOT, "inventories", "sandbox", "group_vars", "ascend.yml"), encoding="utf-8") as f:
        group_vars = yaml.safe_load(f)
    assert "ascendai_bundle_url" in group_vars
    copies = sorted(k for k, v in group_vars.items() if k in EXPECTED or "ascendai_bundle_url" in str(v)
                    and k != "ascendai_bundle_url")
    assert copies == []


def python_runtime_block_vars():
    with open(os.path.join(ROOT, "roles", "python_runtime", "tasks", "install.yml"), encoding="utf-8") as f:
        tasks = yaml.safe_load(f)
    return next(t for t in tasks if t.get("name") == "Install the CPython tarball")["vars"]


@pytest.mark.parametrize("url,src,sha,root,file", [
    # the bundle over HTTP, its manifest in the folder above python/
    (URL + "/python/", "", "", URL, "python/cpython.tar.gz"),
    # the controller's bundle directory
    ("", DIR + "/python", "", DIR, "python/cpython.tar.gz"),
    # a sum given: any folder, a one-line manifest
    ("", "/opt/tarballs/", "AB" * 32, "/opt/tarballs", "cpython.tar.gz"),
    (URL + "/py/", "", "ab" * 32, URL + "/py", "cpython.tar.gz"),
])
def test_python_runtime_fetches_the_tarball_from_the_bundle_root(url, src, sha, root, file):
    block = python_runtime_block_vars()
    variables = {"python_runtime_tarball_url": url, "python_runtime_tarball_src": src,
                 "python_runtime_tarball_sha256": sha, "python_runtime_tarball_name": "cpython.tar.gz",
                 "python_runtime_prefix": "/opt/ascendai/python", "python_runtime_tarball_version": "3.11.15",
                 "python_runtime_tarball_release": "20260807"}
    variables.update({k: trust_as_template(v) for k, v in block.items()})
    templar = Templar(loader=None, variables=variables)
    assert templar.template(trust_as_template(block["_python_runtime_bundle_root"])).strip() == root
    assert templar.template(trust_as_template(block["_python_runtime_bundle_file"])).strip() == file
    manifest = templar.template(trust_as_template(block["_python_runtime_manifest_content"])).strip()
    assert manifest == (f"{sha.lower()}  cpython.tar.gz" if sha else "")
