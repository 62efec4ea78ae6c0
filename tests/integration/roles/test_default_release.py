"""One default release (issue 16, finding 9): the Kubernetes image tag is the release the vllm role picks when
vllm_ascend_version is empty on a node whose glibc takes every wheel, both from compat_matrix.default_release;
the CANN role installs that release's CANN, and the bundle holds it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import yaml
from ansible_collections.ascendai.vllm.plugins.module_utils import compat_matrix as cm

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def _defaults(role):
    with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml"), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def test_kubernetes_image_tag_is_the_default_release():
    image = _defaults("k8s_manifests")["k8s_manifests_image"]
    assert image == f"quay.io/ascend/vllm-ascend:v{cm.default_release()['vllm_ascend']}", (
        "the newest final vllm-ascend release changed (tools/vllm_ascend_matrix.py generate): move "
        "k8s_manifests_image (defaults, argument spec, AWX survey) to its tag")


def test_the_vllm_role_chooses_through_the_same_function():
    with open(os.path.join(ROOT, "roles", "vllm", "vars", "main.yml"), encoding="utf-8") as handle:
        text = handle.read()
    assert "'latest' | ascendai.vllm.compat_row(" in text


def test_one_release_decides_the_stack_by_default():
    # the vllm role, the CANN role and the bundle used to pin 0.11.0 / 8.3.RC2 while the image ran v0.23.0
    assert _defaults("vllm")["vllm_ascend_version"] == ""
    assert _defaults("ascend_cann")["ascend_cann_version"] == ""
    assert _defaults("offline_bundle")["offline_bundle_vllm_ascend_version"] == ""


PLAYBOOK = os.path.join(ROOT, ".venv", "bin", "ansible-playbook")


def _cann_choice(tmp_path, **role_vars):
    play = tmp_path / "play.yml"
    play.write_text(json.dumps([{
        "name": "CANN choice", "hosts": "localhost", "gather_facts": True,
        "vars": {"ansible_python_interpreter": sys.executable},
        "tasks": [
            {"name": "choose",
             "ansible.builtin.include_role": {"name": "ascendai.vllm.ascend_cann", "tasks_from": "release"},
             "vars": role_vars},
            {"name": "show", "ansible.builtin.debug": {"msg": "CHOSEN={{ ascend_cann_release_version }}"}},
        ],
    }]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0")
    out = subprocess.run([PLAYBOOK, "-i", "localhost,", "-c", "local", str(play)], capture_output=True, text=True,
                         env=env, cwd=str(tmp_path), check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    found = re.search(r"CHOSEN=(\S+?)\"", out.stdout)
    assert found, out.stdout[-3000:]
    return found.group(1)


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="the toolchain venv has no ansible-playbook")
def test_cann_follows_the_release(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    common = {"ascend_cann_wheelhouse_src": str(wheels), "ascend_cann_wheelhouse_url": ""}
    # a pinned release: its row's CANN (v0.11.0: 8.3.RC2)
    assert _cann_choice(tmp_path, vllm_ascend_version="0.11.0", **common) == "8.3.RC2"
    # nothing pinned, nothing bundled: the default release's CANN
    assert _cann_choice(tmp_path, **common) == cm.default_release()["cann"][-1]
    # nothing pinned: the newest final release among the bundled ones (v0.18.0: CANN 8.5.1)
    (wheels / "vllm_ascend-0.18.0-cp311-cp311-manylinux_2_24_aarch64.whl").write_bytes(b"")
    assert _cann_choice(tmp_path, **common) == "8.5.1"
    # asked for: kept
    assert _cann_choice(tmp_path, ascend_cann_version="8.2.RC1", **common) == "8.2.RC1"
