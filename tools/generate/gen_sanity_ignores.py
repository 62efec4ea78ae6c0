#!/usr/bin/env python3
# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Write tests/sanity/ignore-<core>.txt for every ansible-core version we support, from one rule list.

ansible-test reads only the ignore file of the ansible-core version it belongs to, so the same entries must be in
each file; writing them by hand lets them drift apart (a module added to one file, not another). The one
entry today: ``validate-modules:missing-gplv3-license`` for every module, because the collection is
Apache-2.0 (ansible-test expects GPLv3 headers in modules).

    python tools/generate/gen_sanity_ignores.py          # (re)write the files
    python tools/generate/gen_sanity_ignores.py --check  # exit 1 when a file differs (test_sanity_ignores.py)
"""

from __future__ import annotations

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# Oldest supported (meta/runtime.yml requires_ansible) to the newest ansible-core tested.
CORE_VERSIONS = ("2.16", "2.17", "2.18", "2.19", "2.20", "2.21")
PER_MODULE = ("validate-modules:missing-gplv3-license # Apache-2.0 collection",)


def render():
    modules = sorted(name for name in os.listdir(os.path.join(ROOT, "plugins", "modules"))
                     if name.endswith(".py") and name != "__init__.py")
    return "".join("plugins/modules/%s %s\n" % (module, rule) for module in modules for rule in PER_MODULE)


def main(argv):
    text = render()
    stale = []
    for core in CORE_VERSIONS:
        path = os.path.join(ROOT, "tests", "sanity", "ignore-%s.txt" % core)
        current = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if current != text:
            stale.append(path)
            if "--check" not in argv:
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(text)
    if "--check" in argv and stale:
        print("stale sanity ignore files (run python tools/generate/gen_sanity_ignores.py): %s" % ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
