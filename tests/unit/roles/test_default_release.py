"""One default release (issue 16, finding 9): the Kubernetes image tag is the release the vllm role picks when
vllm_ascend_version is empty on a node whose glibc takes every wheel, both from compat_matrix.default_release."""

from __future__ import annotations

import os

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
