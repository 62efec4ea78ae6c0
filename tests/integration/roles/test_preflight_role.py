# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""playbooks/preflight.yml (the ascendai.vllm.preflight role) on this machine, in check mode, from an inventory.

Nothing Ascend is installed here, so the driver and CANN plans say ``full`` and the NPUs ``no npu-smi yet``; the
table is printed and the host fails only on what group_vars ask of it. Before the role chose the CANN release
(roles/ascend_cann/tasks/release.yml) the CANN plan stopped the play on an undefined ascend_cann_release_version.
"""

from __future__ import annotations

import os
import pathlib
import sys

import pytest
import yaml

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import PLAYBOOK, ROOT, run_playbook


def _run(tmp_path, group_vars):
    inventory = tmp_path / "inventory"
    (inventory / "group_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"ascend": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        # as root without sudo on the test machine; a real node uses the inventory's become method
        "ansible_become_method": "ansible.builtin.su"}}}}))
    (inventory / "group_vars" / "ascend.yml").write_text(yaml.safe_dump(dict(
        group_vars, preflight_model_dir=str(tmp_path / "models"))))
    proc = run_playbook(tmp_path, pathlib.Path(ROOT, "playbooks", "preflight.yml"), inventory=inventory,
                        connection=None, args=["--check"])
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
def test_preflight_prints_the_table_and_passes_a_host_that_meets_the_inventory(tmp_path):
    rc, out = _run(tmp_path, {"preflight_min_memory_mb": 1, "preflight_model_free_gb": 0})
    assert rc == 0, out[-4000:]
    header = [line for line in out.splitlines() if '"host ' in line]
    assert header and "CANN toolkit / kernels / nnal" in header[0], out[-4000:]
    row = [line for line in out.splitlines() if line.strip().startswith('"localhost ')]
    assert row and "no npu-smi yet" in row[0] and row[0].rstrip('",').endswith("none"), out[-4000:]


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
def test_preflight_stops_a_host_below_the_inventory_minimum(tmp_path):
    rc, out = _run(tmp_path, {"preflight_min_memory_mb": 10 ** 9, "preflight_model_free_gb": 0})
    assert rc != 0
    assert "MB < 1000000000 MB (preflight_min_memory_mb)" in out, out[-4000:]
    assert "Stop the hosts that cannot be deployed" in out
