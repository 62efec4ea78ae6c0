# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Write the NPU metrics of this node for node_exporter's textfile collector (run by a systemd timer).

npu_smi.py, hccn.py and npu_metrics.py next to this file are copies of the ascendai.vllm collection's
plugins/module_utils (the monitoring role installs them together). The file is written atomically.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hccn  # noqa: E402
import npu_metrics  # noqa: E402
import npu_smi  # noqa: E402


def run(argv, timeout=30):
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return 124, "", "timed out after %ds" % timeout
    return proc.returncode, proc.stdout, proc.stderr


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", required=True, help="the .prom file node_exporter reads")
    parser.add_argument("--npu-smi", default=npu_metrics.DEFAULT_NPU_SMI)
    parser.add_argument("--hccn-tool", default=npu_metrics.DEFAULT_HCCN_TOOL)
    parser.add_argument("--no-nics", action="store_true", help="do not query the NPU NICs with hccn_tool")
    args = parser.parse_args(argv)
    directory = os.path.dirname(os.path.abspath(args.output))
    # model name and VDie ID of each chip (npu-smi info -t board -i N -c C) do not change: asked once, kept in a
    # dot file next to the output (node_exporter reads only *.prom)
    cache = os.path.join(directory, ".ascendai-npu-identity.json")
    try:
        with open(cache) as handle:
            identity = json.load(handle)
    except (OSError, ValueError):
        identity = {}
    if not isinstance(identity, dict):
        identity = {}
    snap = npu_metrics.collect(run, npu_smi, hccn, npu_smi_bin=args.npu_smi, hccn_tool_bin=args.hccn_tool,
                               nics=not args.no_nics, identity=identity)
    text = npu_metrics.render(snap, now=time.time())
    if snap["identity"] and snap["identity"] != identity:
        _write(cache, json.dumps(snap["identity"], sort_keys=True) + "\n", directory)
    _write(args.output, text, directory)
    for message in ([snap["error"]] if snap["error"] else []) + snap["errors"]:
        print(message, file=sys.stderr)
    return 0  # the metrics say whether npu-smi answered (ascendai_npu_metrics_up)


def _write(path, text, directory):
    """Write atomically."""
    fd, tmp = tempfile.mkstemp(prefix=".ascend-npu-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


if __name__ == "__main__":
    sys.exit(main())
