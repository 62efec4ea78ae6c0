"""The bootstrap (playbooks/bootstrap.yml) on a node without python3, over the docker connection, with the bundle as a
directory on the controller (ascendai_bundle_dir): the self-unpacking script path. The bundle-URL path (curl on the
node) runs in Molecule kylin_v10. Needs Docker and the base image (.ci/run integration has both in CI);
skipped, saying so, without them."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys

import pytest

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import (
    COLLECTIONS, ROOT, changed_count, run_playbook,
)


def _base_image():
    if not shutil.which("docker"):
        return None, "docker is not installed (.ci/run integration runs with it)"
    proc = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "ascendai-vllm-base"],
                          capture_output=True, text=True, check=False, timeout=60)
    if proc.returncode != 0:
        return None, f"docker does not answer: {proc.stderr.strip()[:200]}"
    images = proc.stdout.split()
    return (images[0], "") if images else (None, "no ascendai-vllm-base image (tools/sandbox/host.sh builds it)")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("bundle")
    tarball = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "tools", "make_cpython_tarball.py"),
                              str(out / "python")], capture_output=True, text=True, check=True).stdout.strip()
    name = os.path.basename(tarball)
    digest = hashlib.sha256(open(tarball, "rb").read()).hexdigest()
    (out / "MANIFEST.sha256").write_text(f"{digest}  python/{name}\n")
    version, release = re.match(r"cpython-([^+]+)\+([^-]+)-", name).groups()
    return out, version, release


def _node(image):
    name = "ascendai-bootstrap-test-%d" % os.getpid()
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    subprocess.run(["docker", "run", "-d", "--rm", "--name", name, image, "sleep", "infinity"],
                   capture_output=True, text=True, check=True, timeout=120)
    # no python3 at all: the node's own interpreters out of the way
    subprocess.run(["docker", "exec", name, "sh", "-c", "mkdir -p /root/hidden && mv /usr/bin/python3* /root/hidden/"],
                   capture_output=True, text=True, check=True, timeout=60)
    return name


def _run(tmp_path, node, bundle_dir, version, release, *extra):
    inventory = {"all": {"children": {"ascend": {"hosts": {node: {
        "ansible_connection": "community.docker.docker", "ascendai_bundle_dir": str(bundle_dir),
        "python_runtime_tarball_version": version, "python_runtime_tarball_release": release}}}}}}
    play = [{"ansible.builtin.import_playbook": os.path.join(ROOT, "playbooks", "bootstrap.yml")},
            {"name": "A later play", "hosts": "ascend", "gather_facts": True, "tasks": [
                {"name": "Show the interpreter", "ansible.builtin.debug": {
                    "msg": "INTERPRETER={{ ansible_facts['python']['executable'] }}"}}]}]
    # the node's own Python (python=None), found by the bootstrap; community.docker from ansible-galaxy's folder
    return run_playbook(tmp_path, play, inventory=inventory, connection=None, args=extra, python=None,
                        env={"ANSIBLE_COLLECTIONS_PATH": COLLECTIONS + ":" + os.path.join(ROOT, ".ansible",
                                                                                          "collections")})


def test_a_node_without_python3_gets_the_bundles_cpython_once(tmp_path, bundle):
    image, why = _base_image()
    if not image:
        pytest.skip(why)
    bundle_dir, version, release = bundle
    node = _node(image)
    home = f"/opt/ascendai/python/{version}"
    try:
        first = _run(tmp_path, node, bundle_dir, version, release)
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
        assert changed_count(first, node) == 1  # the unpack, nothing else
        assert f"no python3 at /usr/bin/python3 (needs 3.8 or later); installing the bundle's CPython as {home}" \
            in " ".join(first.stdout.split())
        assert f"INTERPRETER={home}/bin/python" in first.stdout
        again = _run(tmp_path, node, bundle_dir, version, release)
        assert changed_count(again, node) == 0
        assert f"using {home}/bin/python" in " ".join(again.stdout.split())
        # a damaged tarball is refused before anything is unpacked
        other = tmp_path / "bad"
        shutil.copytree(bundle_dir, other)
        manifest = (other / "MANIFEST.sha256").read_text()
        (other / "MANIFEST.sha256").write_text("0" * 64 + manifest[64:])
        subprocess.run(["docker", "exec", node, "rm", "-rf", "/opt/ascendai"], check=True, timeout=60)
        bad = _run(tmp_path, node, other, version, release)
        assert bad.returncode != 0 and "sha256" in bad.stdout
        listing = subprocess.run(["docker", "exec", node, "ls", "/opt/ascendai/python"], capture_output=True,
                                 text=True, check=False, timeout=60)
        assert version not in listing.stdout
    finally:
        subprocess.run(["docker", "rm", "-f", node], capture_output=True, check=False, timeout=120)


def test_check_mode_on_a_fresh_node_installs_nothing_and_goes_on(tmp_path, bundle):
    image, why = _base_image()
    if not image:
        pytest.skip(why)
    bundle_dir, version, release = bundle
    node = _node(image)
    try:
        proc = _run(tmp_path, node, bundle_dir, version, release, "--check")
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
        assert "INTERPRETER=/var/tmp/ascendai-check/python-" in proc.stdout
        listing = subprocess.run(["docker", "exec", node, "sh", "-c", "ls /opt/ascendai 2>&1"], capture_output=True,
                                 text=True, check=False, timeout=60)
        assert "No such file" in listing.stdout
    finally:
        subprocess.run(["docker", "rm", "-f", node], capture_output=True, check=False, timeout=120)
