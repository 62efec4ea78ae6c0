"""Integration tests: they run ansible-playbook against localhost (or a chroot), build the aarch64 bundle from
PyPI (marker ``bundle``) or emulate a Kunpeng node with qemu (marker ``kunpeng``). Every test here carries the
marker ``integration``; pytest.ini deselects ``bundle`` and ``kunpeng`` unless ``-m`` names them
(tools/test.sh bundle / kunpeng)."""

from __future__ import annotations

import os

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(items):
    for item in items:
        if str(item.fspath).startswith(_HERE):
            item.add_marker(pytest.mark.integration)
