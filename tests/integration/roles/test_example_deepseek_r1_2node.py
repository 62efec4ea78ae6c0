# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""inventories/example-deepseek-r1-2node: DeepSeek-R1-W8A8 on two Atlas 800I A2 nodes as vllm-ascend's
DeepSeek-R1 tutorial runs it at v0.23.0 (tests/unit/fixtures/vllm-ascend-tutorials).

The role's own preflight (roles/vllm_service/tasks/preflight.yml) runs with the inventory on both hosts (local
connection, a stand-in venv Python that reports vLLM 0.23.0 and vllm-ascend 0.23.0, DeepSeek-R1's config.json): the
capacity plan (W8A8 fits, BF16 does not, KV tokens per NPU reported), the per-release option check of vLLM 0.23.0
(the vllm_config filter), the rendered ``--config`` file and environment (checked against vllm-ascend 0.23.0's
switches). The rendered file is parsed by vLLM 0.23.0's own CLI parser (its sdist, tests/unit/fixtures/vllm-releases,
with the option table tools/generate/vllm_release_facts.py generated from it) as the start script runs it, and compared
with the tutorial's command parsed by the same parser; the environment with the tutorial's exports. The start order: the
headless node first, since site.yml serves one node at a time.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap

import pytest
import yaml

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import BIN, ROOT, run_playbook

INVENTORY = os.path.join(ROOT, "inventories", "example-deepseek-r1-2node")
TUTORIAL = os.path.join(ROOT, "tests", "unit", "fixtures", "vllm-ascend-tutorials", "DeepSeek-R1-v0.23.0-{}.sh")
# vllm-ascend v0.23.0 runs on vLLM 0.23.0 (plugins/module_utils/_compat_matrix.py).
VLLM_ASCEND = "0.23.0"
VLLM = "0.23.0"
ADDRESSES = {"r1-node0": "192.168.10.11", "r1-node1": "192.168.10.12"}
NIC = "enp189s0f0"
# deepseek-ai/DeepSeek-R1 config.json (https://huggingface.co/deepseek-ai/DeepSeek-R1/blob/main/config.json), the
# keys the checks read; vllm-ascend/DeepSeek-R1-W8A8 keeps the architecture.
R1_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "moe_layer_freq": 1, "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc",
    "scoring_func": "sigmoid", "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280, "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False, "max_position_embeddings": 163840, "torch_dtype": "bfloat16",
}

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(BIN, "ansible-playbook")),
                                reason="ansible-playbook is not next to this Python")


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


serve_test = _load("vllm_service_serve_test", os.path.join(os.path.dirname(__file__), "test_vllm_service_serve.py"))

_PLAY = textwrap.dedent("""\
    - name: The vLLM service's preflight with the example inventory
      hosts: ascend
      gather_facts: false
      tasks:
        - name: Run the role's checks
          ansible.builtin.include_role:
            name: ascendai.vllm.vllm_service
            tasks_from: preflight.yml
        - name: Keep what it rendered
          ansible.builtin.copy:
            content: "{{ {'config': _vllm_service_config_text | from_yaml, 'env': _vllm_service_environment,
                          'plan': _vllm_service_plan, 'vllm': _vllm_service_installed_vllm.reported,
                          'headless': vllm_service_options.headless | default(false) | bool} | to_json }}"
            dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
            mode: "0644"
          delegate_to: localhost
    """)


def _playbook(tmp_path, *args, overrides=None, releases=(("vllm", VLLM), ("vllm-ascend", VLLM_ASCEND))):
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    python = venv / "python"
    # the preflight runs ascendai.vllm.venv_info under the venv's Python: this one, seeing vLLM 0.23.0 and
    # vllm-ascend 0.23.0 distributions
    site = tmp_path / "venv" / "site"
    for name, version in releases:
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    python.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(site))} exec {shlex.quote(sys.executable)} \"$@\"\n")
    python.chmod(0o755)
    model = tmp_path / "DeepSeek-R1-W8A8"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(R1_CONFIG))
    out = tmp_path / "out"
    out.mkdir()
    variables = {"ansible_connection": "local", "vllm_service_venv": str(tmp_path / "venv"),
                 "vllm_service_model_path": str(model), "out_dir": str(out), **(overrides or {})}
    proc = run_playbook(tmp_path, _PLAY, variables, inventory=INVENTORY, connection=None, args=args, cwd=ROOT,
                        env={"ANSIBLE_HOST_KEY_CHECKING": "0"})
    return proc, out, str(model)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    proc, out, model = _playbook(tmp_path_factory.mktemp("r1"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    result = {host: json.loads((out / f"{host}.json").read_text()) for host in ADDRESSES}
    # the option check, the rendered file and the environment check follow the releases the venv holds
    assert all(got["vllm"] == {"vllm": VLLM, "vllm-ascend": VLLM_ASCEND} for got in result.values()), result
    return result, proc.stdout, model


def _tutorial(node, host):
    """The tutorial's exports and ``vllm serve`` argv for ``node``, with the inventory's addresses and NIC."""
    with open(TUTORIAL.format(node), encoding="utf-8") as handle:
        text = handle.read()
    text = (text.replace("$local_ip", ADDRESSES[host]).replace("$nic_name", NIC)
            .replace("$node0_ip", ADDRESSES["r1-node0"]))
    env = dict(re.findall(r"^export ([A-Z_]+)=(\S+)$", text, re.M))
    command = text[text.index("vllm serve "):].replace("\\\n", " ")
    argv = shlex.split(command)
    assert argv[:2] == ["vllm", "serve"]
    return env, argv[2:]


def _normalise(args):
    values = dict(vars(args))
    # vLLM's serve sets model from the positional model_tag; the rendered file also names it (role: model first)
    values.pop("config", None)
    values["model"] = values.get("model") or values["model_tag"]
    for key, value in values.items():
        if isinstance(value, str) and value.startswith("{"):
            values[key] = json.loads(value)
    return values


@pytest.mark.parametrize("node, host", [("node0", "r1-node0"), ("node1", "r1-node1")])
def test_rendered_service_is_what_the_tutorial_runs(rendered, node, host, tmp_path):
    result, _stdout, model = rendered
    config = result[host]["config"]
    want_env, want_argv = _tutorial(node, host)
    # the model: the tutorial's hub id, the node's directory here (vllm_service_model_path)
    assert want_argv[0] == "vllm-ascend/DeepSeek-R1-W8A8"
    top, _options = serve_test._serve_parser(VLLM)
    want = top.parse_args(["serve", model, *want_argv[1:]])
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    got = top.parse_args(serve_test._exec_argv(["/venv/bin/vllm"], model=model, config=str(path))[1:])
    assert _normalise(got) == _normalise(want)
    assert got.headless is (node == "node1") and result[host]["headless"] is (node == "node1")
    assert (str(got.data_parallel_size), str(got.tensor_parallel_size), got.enable_expert_parallel) == ("4", "4", True)
    assert got.quantization == "ascend"
    # the environment: the tutorial's exports, plus the NPUs the tutorial's docker run maps (davinci0-7)
    assert result[host]["env"] == dict(want_env, ASCEND_RT_VISIBLE_DEVICES="0,1,2,3,4,5,6,7")


def test_preflight_plans_w8a8_fitting_and_reports_kv_tokens(rendered):
    result, stdout, _model = rendered
    for host in ADDRESSES:
        plan = result[host]["plan"]
        assert plan["fits"] is True
        assert (plan["expert_parallel_size"], plan["quantization"]) == (16, "ascend")
        assert plan["weight_gib_per_npu"] == pytest.approx(43.3, abs=0.1)
        assert (plan["kv_bytes_per_token_per_npu"], plan["kv_cache_tokens_per_npu"]) == (70272, 207488)
    assert stdout.count("KV cache 207488 tokens per NPU") == 2


def test_preflight_refuses_the_same_recipe_in_bf16(tmp_path):
    bf16 = {"vllm_service_options": {"tensor_parallel_size": 4, "data_parallel_size": 4, "max_model_len": 16384,
                                     "max_num_seqs": 16, "gpu_memory_utilization": 0.92}}
    proc, _out, _model = _playbook(tmp_path, "--limit", "r1-node0", overrides=bf16)
    assert proc.returncode != 0
    assert "does not fit" in proc.stdout and "weights need 85.5 GiB per NPU" in proc.stdout


def test_the_headless_node_is_served_first(tmp_path):
    """site.yml's serving play (its hosts and serial, read from the file) takes node 1 (headless) first, so that its
    DP ranks are up when node 0's health gate asks (the gate passes only once all ranks joined)."""
    with open(os.path.join(ROOT, "playbooks", "site.yml"), encoding="utf-8") as handle:
        serve = [p for p in yaml.safe_load(handle) if p.get("name", "").startswith("Serve it")]
    assert len(serve) == 1 and "vllm_service" in serve[0]["roles"][0]["role"]
    probe = [{"name": "Order", "hosts": serve[0]["hosts"], "serial": serve[0]["serial"], "gather_facts": False,
              "tasks": [{"name": "Host", "ansible.builtin.debug": {"msg": "x"}}]}]
    proc = run_playbook(tmp_path, probe, {"ansible_connection": "local"}, timeout=300, inventory=INVENTORY,
                        connection=None, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # serial 1: one batch per host, in inventory order
    assert re.findall(r"^ok: \[(r1-node\d)\]", proc.stdout, re.M) == ["r1-node1", "r1-node0"]
    assert proc.stdout.count("PLAY [") == 2


def test_the_inventory_pins_the_tutorials_release():
    """The tutorial is v0.23.0's: both nodes pin vllm-ascend 0.23.0 (the one stack input), whose row runs vLLM 0.23.0
    (the release whose parser the other tests use); unpinned, the default bundle gives v0.18.0."""
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"))
    for host in ADDRESSES:
        proc = subprocess.run([os.path.join(BIN, "ansible-inventory"), "-i", INVENTORY, "--host", host], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=120, check=True)
        assert json.loads(proc.stdout)["vllm_ascend_version"] == "0.23.0", host
    assert os.path.exists(TUTORIAL.format("node0")) and "v0.23.0" in TUTORIAL
    from ansible_collections.ascendai.vllm.plugins.module_utils import _compat_matrix as compat_matrix  # noqa: PLC0415
    row = next(r for r in compat_matrix.all_rows() if r["vllm_ascend"] == "0.23.0")
    assert row["vllm_versions"] == [VLLM]


def test_balance_scheduling_follows_the_vllm_ascend_release(rendered, tmp_path):
    """v0.23.0 reads the tutorial's VLLM_ASCEND_BALANCE_SCHEDULING=1 (the rendered environment has it, the run above
    passed). v0.27.1rc1 no longer defines the variable (vllm_ascend/envs.py; ascend_config.py: "the legacy
    environment fallback has been removed") and its tutorial passes additional_config
    {"scheduler_config": {"enable_balance_scheduling": true}}: the same inventory on a venv with that release (and
    its row's vLLM 0.27.1) stops in preflight, naming the form that release reads, instead of serving without it."""
    result, _stdout, _model = rendered
    assert all(got["env"]["VLLM_ASCEND_BALANCE_SCHEDULING"] == "1" for got in result.values())
    proc, _out, _model = _playbook(tmp_path, "--limit", "r1-node0",
                                   releases=(("vllm", "0.27.1"), ("vllm-ascend", "0.27.1rc1")))
    assert proc.returncode != 0
    assert ("VLLM_ASCEND_BALANCE_SCHEDULING=1 in the service environment does not switch balance scheduling on in "
            "vllm-ascend 0.27.1rc1") in proc.stdout
    assert "additional_config: {scheduler_config: {enable_balance_scheduling: true}}" in proc.stdout
