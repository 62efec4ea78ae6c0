"""The Molecule scenarios' own configuration: what Molecule would silently ignore.

Molecule writes inline ``provisioner.inventory.group_vars``/``host_vars`` only when the inventory has no ``links``
(molecule/provisioner/ansible.py, ``manage_inventory``: ``_add_or_update_vars`` without links, else
``_link_or_update_vars``). A scenario with both runs without its inline variables, and a test that depends on them
proves nothing (the scale scenario's "new node with a release the bundle lacks" did, until this test)."""

from __future__ import annotations

import glob
import os

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCENARIOS = sorted(glob.glob(os.path.join(ROOT, "molecule", "*", "molecule.yml")))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.split(os.sep)[-2])
def test_no_inline_inventory_vars_beside_links(path):
    with open(path, encoding="utf-8") as handle:
        inventory = (yaml.safe_load(handle).get("provisioner") or {}).get("inventory") or {}
    links = inventory.get("links") or {}
    if links:
        ignored = sorted(k for k in ("group_vars", "host_vars") if k in inventory)
        assert not ignored, (f"{path}: provisioner.inventory has links, so Molecule ignores its inline {ignored}; "
                             "put them in a directory and link it (links: host_vars: host_vars/)")
        for kind, source in links.items():
            assert os.path.isdir(os.path.join(os.path.dirname(path), source)), f"{path}: links.{kind} {source} missing"
