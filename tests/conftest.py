"""Make the collection importable as ``ansible_collections.ascendai.vllm`` for pytest.

The checkout itself is the collection root: tools/ci/collection_tree.py (the one builder of that tree) points
``.cache/collections/ansible_collections/ascendai/vllm`` at it.  Nothing is copied.
"""

from __future__ import annotations

import importlib.util
import os
import sys

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
_spec = importlib.util.spec_from_file_location("collection_tree", os.path.join(_ROOT, "tools/ci/collection_tree.py"))
_builder = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_builder)
_TREE = _builder.link(_ROOT)

if _TREE not in sys.path:
    sys.path.insert(0, _TREE)
