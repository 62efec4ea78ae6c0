"""Unit tests: pure Python, no ansible-playbook, network, Docker or apt (tests/conftest.py makes the collection
importable)."""

from __future__ import annotations

import os

# Real captured outputs: tests/unit/fixtures (each file's first line names its public source).
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
