"""One ignore file per supported ansible-core version, all generated from one rule list
(tools/generate/gen_sanity_ignores.py), so that a module added to one is in all and none drifts."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def test_every_ignore_file_is_generated_and_current():
    tool = os.path.join(ROOT, "tools", "generate", "gen_sanity_ignores.py")
    result = subprocess.run([sys.executable, tool, "--check"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_there_is_no_ignore_file_for_an_unsupported_version():
    sys.path.insert(0, os.path.join(ROOT, "tools", "generate"))
    import gen_sanity_ignores

    files = sorted(os.listdir(os.path.join(ROOT, "tests", "sanity")))
    assert files == sorted("ignore-%s.txt" % core for core in gen_sanity_ignores.CORE_VERSIONS)
