"""Without ascendai_bundle_url and ascendai_bundle_dir, the roles that need the bundle stop in their preflight with
the fix (no fallback into a development checkout's .cache/bundle), and with either set they pass that check."""

from __future__ import annotations

import pytest
from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import run_playbook

ROLES = {"ascend_driver": ("ascend_driver_bundle_url", "ascend_driver_bundle_dir"),
         "ascend_cann": ("ascend_cann_bundle_url", "ascend_cann_bundle_dir"),
         "model": ("model_bundle_url", "model_bundle_src")}


def _preflight(tmp_path, role, extra=None):
    play = [{"hosts": "localhost", "gather_facts": False, "vars": extra or {},
             "tasks": [{"ansible.builtin.include_role": {"name": f"ascendai.vllm.{role}", "tasks_from": "preflight"}}]}]
    return run_playbook(tmp_path, play, timeout=300)


@pytest.mark.parametrize("role", sorted(ROLES))
def test_no_bundle_location_stops_in_preflight_with_the_fix(tmp_path, role):
    proc = _preflight(tmp_path, role)
    assert proc.returncode != 0
    url, src = ROLES[role]
    assert f"{role} has no offline bundle: {url} and {src} are both empty" in proc.stdout
    assert "Set ascendai_bundle_url" in proc.stdout and "or ascendai_bundle_dir" in proc.stdout
    assert ".cache/bundle" not in proc.stdout


@pytest.mark.parametrize("role", sorted(ROLES))
def test_a_bundle_url_passes_that_check(tmp_path, role):
    proc = _preflight(tmp_path, role, {"ascendai_bundle_url": "http://127.0.0.1:9/bundle"})
    assert "has no offline bundle" not in proc.stdout, proc.stdout[-3000:]
    assert "Check the offline bundle's location is set" in proc.stdout
