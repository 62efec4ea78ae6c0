"""roles/_common bundle_stage: the staging ascend_driver and ascend_cann share, run through a parent role with
ansible-playbook on this machine (a bundle directory with its MANIFEST.sha256, the controller-copy path)."""

from __future__ import annotations

import hashlib
import os

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import changed_count, run_playbook


def _bundle(tmp_path, body=b"#!/bin/sh\necho driver\n", manifest_body=None):
    bundle = tmp_path / "bundle"
    (bundle / "huawei").mkdir(parents=True)
    (bundle / "huawei" / "pkg.run").write_bytes(body)
    digest = hashlib.sha256(manifest_body if manifest_body is not None else body).hexdigest()
    (bundle / "MANIFEST.sha256").write_text(f"{digest}  huawei/pkg.run\n")
    return bundle


def _parent(tmp_path, bundle):
    tasks = tmp_path / "roles" / "parent" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text(f"""---
- name: Stage through _common
  vars:
    _common_bundle_files: [huawei/pkg.run]
    _common_bundle_hint: Put pkg.run from the vendor into huawei/.
    _common_bundle_dir: {bundle}
    _common_bundle_url: ""
    _common_bundle_validate_certs: true
    _common_stage_dir: {tmp_path / "stage"}
  ansible.builtin.import_role:
    name: ascendai.vllm._common
    tasks_from: bundle_stage
""")
    return [{"hosts": "localhost", "gather_facts": False, "roles": ["parent"]}]


def test_stages_checked_files_once(tmp_path):
    bundle = _bundle(tmp_path)
    play = _parent(tmp_path, bundle)
    proc = run_playbook(tmp_path, play, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    staged = tmp_path / "stage" / "pkg.run"
    assert staged.read_bytes() == (bundle / "huawei" / "pkg.run").read_bytes()
    assert oct(staged.stat().st_mode & 0o777) == "0o600"
    assert oct((tmp_path / "stage").stat().st_mode & 0o777) == "0o700"
    again = run_playbook(tmp_path, play, timeout=300)
    assert again.returncode == 0 and changed_count(again) == 0, again.stdout[-3000:]


def test_a_file_that_does_not_match_its_manifest_line_is_not_staged(tmp_path):
    bundle = _bundle(tmp_path, manifest_body=b"something else")
    proc = run_playbook(tmp_path, _parent(tmp_path, bundle), timeout=300)
    assert proc.returncode != 0
    assert "huawei/pkg.run" in proc.stdout and "Put pkg.run from the vendor into huawei/." in proc.stdout
    assert not os.path.exists(tmp_path / "stage" / "pkg.run")


def test_refuses_to_run_from_a_play(tmp_path):
    play = [{"hosts": "localhost", "gather_facts": False,
             "tasks": [{"ansible.builtin.include_role": {"name": "ascendai.vllm._common", "tasks_from": "bundle_stage"},
                        "vars": {"_common_bundle_files": ["huawei/pkg.run"], "_common_bundle_hint": "x",
                                 "_common_bundle_dir": str(tmp_path), "_common_bundle_url": "",
                                 "_common_bundle_validate_certs": True, "_common_stage_dir": str(tmp_path / "s")}}]}]
    proc = run_playbook(tmp_path, play, timeout=300)
    assert proc.returncode != 0
    assert "ascendai.vllm._common's bundle_stage is internal" in proc.stdout
    assert not os.path.exists(tmp_path / "s")


def test_main_refuses(tmp_path):
    proc = run_playbook(tmp_path, [{"hosts": "localhost", "gather_facts": False, "roles": ["ascendai.vllm._common"]}],
                        timeout=300)
    assert proc.returncode != 0 and "ascendai.vllm._common is internal to the collection" in proc.stdout
