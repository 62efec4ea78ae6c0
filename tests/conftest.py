"""Make the collection importable as ``ansible_collections.ascendai.vllm`` for pytest.

The checkout itself is the collection root, so a symlink tree under ``.cache/`` points
``ansible_collections/ascendai/vllm`` at it.  Nothing is copied.
"""

from __future__ import annotations

import os
import sys

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
_TREE = os.path.join(_ROOT, ".cache", "collections")
_LINK = os.path.join(_TREE, "ansible_collections", "ascendai", "vllm")

if not os.path.islink(_LINK):
    os.makedirs(os.path.dirname(_LINK), exist_ok=True)
    try:
        os.symlink(_ROOT, _LINK)
    except FileExistsError:
        pass

if _TREE not in sys.path:
    sys.path.insert(0, _TREE)
