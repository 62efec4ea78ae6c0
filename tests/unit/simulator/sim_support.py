"""What the simulator tests share: where the simulator lives and how its installers are run.

The simulated node's tools are the package ``atlas_sim`` under tests/simulator (on a container they live on the
node's PYTHONPATH); this is the one place that puts that directory on ``sys.path`` for the tests that import it.
"""

from __future__ import annotations

import os
import sys

SIM_DIR = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "simulator"))
if SIM_DIR not in sys.path:
    sys.path.insert(0, SIM_DIR)

# The options of a first driver install for all users (Huawei installation guide; the simulator checks them).
DRIVER_OPTS = ("--full", "--quiet", "--nox11", "--install-for-all")


def run_pkg(node, pkg, *args, env=None, stdin=None):
    """Run a simulated .run package on ``node`` (a conftest.Node) as the roles do: ``bash PKG ARGS``."""
    return node.run(["bash", pkg] + list(args), env=env, stdin=stdin)


def kv(node, path):
    """A KEY=VALUE file of the node (version.info, ascend_install.info) as a dict."""
    return dict(line.split("=", 1) for line in node.read(path).splitlines() if "=" in line)
