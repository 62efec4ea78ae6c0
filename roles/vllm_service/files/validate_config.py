# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Validate a ``vllm serve --config`` YAML file against the vLLM installed in this Python environment.

Run it with the service venv's interpreter before (re)starting the service, so a bad option never takes a
running service down::

    /opt/vllm/venv/bin/python validate_config.py /etc/vllm/config.yaml.new
    /opt/vllm/venv/bin/python validate_config.py --list-options   # the option names, snake_case

It builds the parser the service's start script meets, vLLM's CLI with its ``serve`` sub-command
(``ServeSubcommand().subparser_init`` under a top-level ``FlexibleArgumentParser``, as
``vllm.entrypoints.cli.main`` does), and parses ``["serve", MODEL, "--config", FILE]`` with it, so the file goes
through vLLM's own config loader as the service reads it: under ``vllm serve`` that loader is the top-level
parser's, which does not know the serve options' ``--no-X`` forms (vLLM 0.32 drops a ``false`` there too). Then it
runs ``validate_parsed_serve_args`` when that vLLM has it. A vLLM without the CLI's serve module gets the API
server's parser and ``["--port=PORT", "--config", FILE]``. It also insists that every key is an exact
option name, because argparse would take ``enforce: true`` as an abbreviation of ``--enforce-eager``, and that
the loader passes every key on: before vLLM 0.32 a ``false`` value is dropped without a word (write
``no-KEY: true``), and up to 0.14 a mapping becomes ``str(dict)``, a Python repr (write it as a JSON string).
This mirrors ``plugins/module_utils/vllm_options.py:validate_with_parser`` of the ascendai.vllm collection.

The last line on stdout is JSON: ``{"ok": bool, "problems": [...], "vllm_version": "...", "config": FILE}``.
Exit status: 0 valid, 1 invalid, 2 could not check (vLLM or PyYAML not importable, file unreadable).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

# vLLM logs to stdout by default; keep stdout for the JSON result.
os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")


def _build_parser():
    """``(serve options parser, parser that reads --config or None, validate function or None)``."""
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # vLLM before the argparse_utils split
        from vllm.utils import FlexibleArgumentParser
    try:
        from vllm.entrypoints.cli.serve import ServeSubcommand
    except ImportError:
        ServeSubcommand = None
    if ServeSubcommand is not None:
        top = FlexibleArgumentParser(prog="vllm")
        serve = ServeSubcommand().subparser_init(top.add_subparsers(dest="subparser"))
        return serve, top, getattr(ServeSubcommand(), "validate", None)
    try:
        from vllm.entrypoints.launchers import cli_args  # vLLM 0.3x
    except ImportError:
        from vllm.entrypoints.openai import cli_args  # older vLLM
    parser = cli_args.make_arg_parser(FlexibleArgumentParser(description="vLLM OpenAI-Compatible RESTful API server."))
    return parser, None, getattr(cli_args, "validate_parsed_serve_args", None)


def _vllm_version():
    try:
        from vllm import __version__
    except ImportError:
        return None
    return __version__


def _long_options(parser):
    return sorted({action.dest for action in parser._actions if any(o.startswith("--") for o in action.option_strings)})


def check(path, parser, validate=None, top=None):
    """Problems with the config file at ``path`` (an empty list when vLLM accepts it).

    ``parser``: the parser holding the serve options; ``top``: vLLM's CLI parser with ``parser`` as its ``serve``
    sub-parser (it reads the file under ``vllm serve``), or None for the API server's flat parser.
    """
    import yaml

    if not path.endswith((".yaml", ".yml")):
        return [f"{path}: vLLM only reads --config files ending in .yaml or .yml"]
    with open(path, encoding="utf-8") as handle:
        try:
            config = yaml.safe_load(handle)
        except yaml.YAMLError as exc:
            return [f"{path}: not valid YAML: {exc}"]
    if not isinstance(config, dict):
        return [f"{path}: the config must be a YAML mapping, got {type(config).__name__}"]
    known = parser._option_string_actions
    problems = [f"{key}: not an option of this vLLM (--{str(key).replace('_', '-')})" for key in config
                if "--" + str(key).lstrip("-").replace("_", "-") not in known]
    if problems:
        return problems
    problems = _lost_by_loader(config, top if top is not None else parser, path)
    if problems:
        return problems
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            if top is not None:
                args = top.parse_args(["serve", str(config.get("model", "model")), "--config", path])
            else:
                args = parser.parse_args([f"--port={config.get('port', 8000)}", "--config", path])
            if validate is not None:
                validate(args)
    except SystemExit:
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        problems.append(lines[-1] if lines else "vLLM's argument parser rejected the file")
    except Exception as exc:  # noqa: BLE001 - vLLM raises ValueError/TypeError/AssertionError here
        problems.append(f"{type(exc).__name__}: {exc}")
    return problems


def _lost_by_loader(config, parser, path):
    """Keys that this vLLM's ``--config`` loader drops or passes in a form its parser cannot read."""
    loader = getattr(parser, "load_config_file", None) or getattr(parser, "_load_config_file", None)
    if loader is None:
        return []
    argv = loader(path)
    problems = []
    for key, value in config.items():
        flag = "--" + str(key)
        if flag not in argv and "--no-" + str(key) not in argv:
            problems.append(f"{key}: {json.dumps(value)} is dropped by this vLLM's --config loader"
                            + (f" (write no-{key}: true for --no-{key})" if value is False else ""))
        elif isinstance(value, dict):
            passed = argv[argv.index(flag) + 1]
            try:
                json.loads(passed)
            except ValueError:
                problems.append(f"{key}: this vLLM's --config loader passes the mapping as a Python repr "
                                f"({passed}), which is not JSON; write the value as a JSON string")
    return problems


def main(argv):
    if len(argv) != 1:
        sys.stderr.write(__doc__)
        return 2
    try:
        parser, top, validate = _build_parser()
    except Exception as exc:  # noqa: BLE001 - report any import failure as "could not check"
        print(json.dumps({"ok": False, "problems": [f"cannot import vLLM: {exc}"], "vllm_version": None}))
        return 2
    if argv[0] == "--list-options":
        print("\n".join(_long_options(parser)))
        return 0
    try:
        problems = check(argv[0], parser, validate, top)
    except (OSError, ImportError) as exc:
        print(json.dumps({"ok": False, "problems": [str(exc)], "vllm_version": _vllm_version(), "config": argv[0]}))
        return 2
    print(json.dumps({"ok": not problems, "problems": problems, "vllm_version": _vllm_version(), "config": argv[0]}))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
