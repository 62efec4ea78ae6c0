"""Integration tests: they run ansible-playbook against localhost (or a chroot), build the aarch64 bundle from
PyPI (marker ``bundle``) or emulate a Kunpeng node with qemu (marker ``kunpeng``). Every test here carries the
marker ``integration``; pytest.ini deselects ``bundle`` and ``kunpeng`` unless ``-m`` names them
(.ci/run bundle / kunpeng)."""

from __future__ import annotations

import fcntl
import os

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(items):
    for item in items:
        if str(item.fspath).startswith(_HERE):
            item.add_marker(pytest.mark.integration)


_FACTS_DIR = "/etc/ansible/facts.d"
_FACTS_LOCK = "/tmp/ascendai-integration-local-facts.lock"
# These run in .ci/run's background lane, beside the foreground integration stage, and never on this machine's
# /etc/ansible (a chroot, an emulated node, containers): a snapshot they took would put back, minutes later, a fact
# that a foreground test had written for a moment, and a later test would read a venv that no longer exists.
_ELSEWHERE = ("bundle", "kunpeng", "rpm_nodes")


@pytest.fixture(autouse=True)
def _keep_this_machines_local_facts(request):
    """The vllm, vllm_service and generation roles write Ansible local facts (/etc/ansible/facts.d/ascendai_*.fact)
    when a test runs them for real on this machine, and other roles read them (the model checks, the driver's service
    stop, the serving venv): put the folder back as it was after each test, so no test sees what an earlier one left.
    The tests that run elsewhere leave the folder alone, and an exclusive lock keeps two pytest processes on this
    machine from interleaving their snapshots."""
    if any(request.node.get_closest_marker(name) for name in _ELSEWHERE):
        yield
        return

    def snapshot():
        if not os.path.isdir(_FACTS_DIR):
            return {}
        found = {}
        for name in os.listdir(_FACTS_DIR):
            if name.startswith("ascendai_") and name.endswith(".fact"):
                with open(os.path.join(_FACTS_DIR, name), "rb") as handle:
                    found[name] = handle.read()
        return found

    with open(_FACTS_LOCK, "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        before = snapshot()
        try:
            yield
        finally:
            after = snapshot()
            for name in set(before) | set(after):
                path = os.path.join(_FACTS_DIR, name)
                if name not in before:
                    os.unlink(path)
                elif after.get(name) != before[name]:
                    with open(path, "wb") as handle:
                        handle.write(before[name])
