"""Role k8s_manifests: run it with ansible-playbook against localhost, validate every rendered object against the
Kubernetes OpenAPI schemas (kubernetes-validate, strict: unknown fields fail) and check what the cluster will run."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import kubernetes_validate
import pytest
import yaml

from ansible_collections.ascendai.vllm.plugins.module_utils.service_env import service_env
from ansible_collections.ascendai.vllm.plugins.module_utils.vllm_options import render_config

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
# Oldest and newest Kubernetes the schemas cover that clusters with the Ascend device plugin run.
K8S_VERSIONS = ("1.28.0", kubernetes_validate.latest_version())

# Facts 7.2: the driver files vllm-ascend's docker run lines mount.
DRIVER_PATHS = ["/usr/local/dcmi", "/usr/local/bin/npu-smi", "/usr/local/Ascend/driver/lib64",
                "/usr/local/Ascend/driver/version.info", "/etc/ascend_install.info"]

SCENARIOS = {
    "single": {
        "k8s_manifests_accelerator_type": "module-910b-8",
        "k8s_manifests_env": {"TASK_QUEUE_ENABLE": 2},
        "k8s_manifests_vllm_options": {"enable_prefix_caching": False, "max_num_seqs": 64},
    },
    "multi": {
        "k8s_manifests_multi_node": True,
        "k8s_manifests_roce_qos": {"pfc_priority": 3, "dscp": 26},
        "k8s_manifests_hccl_env": {"HCCL_BUFFSIZE": 200, "HCCL_SOCKET_IFNAME": "eth0"},
        "k8s_manifests_env": {"OMP_NUM_THREADS": 1, "TASK_QUEUE_ENABLE": 2},
        "k8s_manifests_npu_alloc_conf": "max_split_size_mb:256",
        "k8s_manifests_npus": 4,
        "k8s_manifests_tensor_parallel_size": 4,
        "k8s_manifests_model_source": "pvc",
        "k8s_manifests_model_pvc": "models",
        "k8s_manifests_model_mount": "/data",
        "k8s_manifests_model_dir": "DeepSeek-R1-W8A8",
        "k8s_manifests_served_model_name": "deepseek_r1",
        "k8s_manifests_vllm_options": {"data_parallel_size": 4, "quantization": "ascend"},
        "k8s_manifests_cpu": "64",
        "k8s_manifests_memory": "512Gi",
        "k8s_manifests_create_namespace": False,
        "k8s_manifests_api_key_secret": "",
        "k8s_manifests_startup_timeout": 3605,
        "k8s_manifests_shm_size": "64Gi",
        "k8s_manifests_service_type": "NodePort",
    },
    "guide_resource": {"k8s_manifests_npu_resource": "huawei.com/ascend-910b"},
    "bad_option": {"k8s_manifests_vllm_options": {"swap_space": 4}},
    # vllm-ascend 0.11.0's image runs vLLM 0.11.0, which still has swap_space (removed in 0.18.0)
    "old_image": {"k8s_manifests_image": "quay.io/ascend/vllm-ascend:v0.11.0-openeuler",
                  "k8s_manifests_vllm_options": {"swap_space": 4, "additional_config": {"ascend_scheduler_config":
                                                                                        {"enabled": True}}}},
}


def _start(tmp, name, extra):
    dest = tmp / name
    varfile = tmp / f"{name}.json"
    varfile.write_text(json.dumps(dict(extra, k8s_manifests_dest=str(dest), ansible_python_interpreter=sys.executable)))
    play = tmp / "play.yml"
    play.write_text(textwrap.dedent("""\
        - name: Render the manifests
          hosts: localhost
          connection: local
          gather_facts: false
          roles:
            - role: ascendai.vllm.k8s_manifests
        """))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_NOCOLOR="1", ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    proc = subprocess.Popen([PLAYBOOK, "-i", "localhost,", str(play), "-e", f"@{varfile}"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return dest, proc


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run every scenario once (in parallel): name -> (rc, output, {file name: [documents]}, raw texts)."""
    tmp = tmp_path_factory.mktemp("k8s")
    started = {name: _start(tmp, name, extra) for name, extra in SCENARIOS.items()}
    out = {}
    for name, (dest, proc) in started.items():
        output, _unused = proc.communicate(timeout=600)
        docs, texts = {}, {}
        if dest.is_dir():
            for path in sorted(dest.iterdir()):
                texts[path.name] = path.read_text()
                docs[path.name] = [d for d in yaml.safe_load_all(texts[path.name]) if d is not None]
        out[name] = (proc.returncode, output, docs, texts)
    return out


def _ok(runs, name):
    rc, output, docs, texts = runs[name]
    assert rc == 0, output
    return docs, texts


def _by_kind(docs):
    return {d["kind"]: d for file_docs in docs.values() for d in file_docs}


def _container(docs):
    return _by_kind(docs)["Deployment"]["spec"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("scenario", ["single", "multi"])
def test_every_object_validates_against_the_kubernetes_schema(runs, scenario, version):
    docs, texts = _ok(runs, scenario)
    expected = {"configmap.yaml", "deployment.yaml", "service.yaml"}
    if scenario == "single":
        expected.add("namespace.yaml")
    assert set(docs) == expected
    for name, file_docs in docs.items():
        assert len(file_docs) == 1, f"{name} holds {len(file_docs)} objects, want one"
        assert texts[name].startswith("#\n# Ansible managed\n#\n"), name
        kubernetes_validate.validate(file_docs[0], version, strict=True)


def test_the_validator_rejects_a_broken_deployment(runs):
    docs, _unused = _ok(runs, "single")
    broken = json.loads(json.dumps(docs["deployment.yaml"][0]))
    broken["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["httpGet"]["pathh"] = "/health"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("scenario,npus", [("single", 8), ("multi", 4)])
def test_npus_are_requested_from_the_ascend_device_plugin(runs, scenario, npus):
    docs, texts = _ok(runs, scenario)
    resources = _container(docs)["resources"]
    assert resources["limits"]["huawei.com/Ascend910"] == npus
    assert resources["requests"] == resources["limits"]
    assert "ascend-910b" not in texts["deployment.yaml"]


def test_cpu_and_memory_when_asked(runs):
    limits = _container(_ok(runs, "multi")[0])["resources"]["limits"]
    assert (limits["cpu"], limits["memory"]) == ("64", "512Gi")
    assert set(_container(_ok(runs, "single")[0])["resources"]["limits"]) == {"huawei.com/Ascend910"}


@pytest.mark.parametrize("scenario,budget", [("single", 1800), ("multi", 3605)])
def test_probes_on_health_and_a_long_startup_budget(runs, scenario, budget):
    container = _container(_ok(runs, scenario)[0])
    port_names = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert port_names == {"http": 8000}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
    startup = container["startupProbe"]
    assert startup["failureThreshold"] == math.ceil(budget / startup["periodSeconds"])
    assert startup["failureThreshold"] * startup["periodSeconds"] >= budget


def test_shm_is_memory_backed_with_a_limit(runs):
    for scenario, size in (("single", "16Gi"), ("multi", "64Gi")):
        docs, _unused = _ok(runs, scenario)
        pod = _by_kind(docs)["Deployment"]["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": size}
        mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
        assert mounts["/dev/shm"] == "shm"


def test_host_networking_only_across_nodes(runs):
    single = _by_kind(_ok(runs, "single")[0])["Deployment"]["spec"]["template"]["spec"]
    multi = _by_kind(_ok(runs, "multi")[0])["Deployment"]["spec"]["template"]["spec"]
    assert "hostNetwork" not in single
    assert (multi["hostNetwork"], multi["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    assert single["nodeSelector"] == {"accelerator-type": "module-910b-8"}
    assert "nodeSelector" not in multi


@pytest.mark.parametrize("scenario", ["single", "multi"])
def test_env_equals_the_systemd_path_for_the_same_inputs(runs, scenario):
    inputs = dict(SCENARIOS[scenario])
    container = _container(_ok(runs, scenario)[0])
    plain = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    multi = inputs.get("k8s_manifests_multi_node", False)
    systemd = service_env(inputs.get("k8s_manifests_env", {}), visible_devices=[0, 1, 2, 3],
                          npu_alloc_conf=inputs.get("k8s_manifests_npu_alloc_conf", "expandable_segments:True"),
                          roce_qos=inputs.get("k8s_manifests_roce_qos", {}) if multi else None,
                          hccl=inputs.get("k8s_manifests_hccl_env", {}), target="systemd")
    # The one deliberate difference: the device plugin, not a mask, picks the NPUs in a pod.
    assert systemd.pop("ASCEND_RT_VISIBLE_DEVICES") == "0,1,2,3"
    assert plain == systemd
    if multi:
        assert (plain["HCCL_RDMA_TC"], plain["HCCL_RDMA_SL"]) == ("104", "3")  # DSCP 26 x 4, priority 3
    else:
        assert "HCCL_RDMA_TC" not in plain


def test_api_key_comes_from_a_secret(runs):
    env = _container(_ok(runs, "single")[0])["env"]
    keyed = [e for e in env if e["name"] == "VLLM_API_KEY"]
    assert keyed == [{"name": "VLLM_API_KEY",
                      "valueFrom": {"secretKeyRef": {"name": "vllm-api-key", "key": "api-key"}}}]
    assert all(e["name"] != "VLLM_API_KEY" for e in _container(_ok(runs, "multi")[0])["env"])


@pytest.mark.parametrize("scenario", ["single", "multi"])
def test_configmap_holds_the_vllm_config_that_the_command_reads(runs, scenario):
    inputs = SCENARIOS[scenario]
    docs, _unused = _ok(runs, scenario)
    kinds = _by_kind(docs)
    config = yaml.safe_load(kinds["ConfigMap"]["data"]["config.yaml"])
    options = {"tensor_parallel_size": inputs.get("k8s_manifests_tensor_parallel_size", 8), "max_model_len": 4096,
               "gpu_memory_utilization": 0.9}
    options.update(inputs.get("k8s_manifests_vllm_options", {}))
    options.update({"host": "0.0.0.0", "port": 8000})
    model = f"{inputs.get('k8s_manifests_model_mount', '/models')}/" \
            f"{inputs.get('k8s_manifests_model_dir', 'deepseek-llm-67b-chat')}"
    assert config == render_config(options, model=model,
                                   served_model_name=inputs.get("k8s_manifests_served_model_name", "deepseek-67b"))
    container = _container(docs)
    # vLLM's serve sub-command, the model first (every release reads it there), then the file
    assert container["command"] == ["vllm", "serve", model, "--config", "/etc/vllm/config.yaml"]
    pod = kinds["Deployment"]["spec"]["template"]["spec"]
    config_volume = next(v for v in pod["volumes"] if v["name"] == "config")
    assert config_volume["configMap"]["name"] == kinds["ConfigMap"]["metadata"]["name"]
    assert {"name": "config", "mountPath": "/etc/vllm", "readOnly": True} in container["volumeMounts"]
    if scenario == "single":
        assert config["no-enable-prefix-caching"] is True  # read the same by api_server and `vllm serve`


def test_model_volume_hostpath_or_pvc(runs):
    single = _by_kind(_ok(runs, "single")[0])["Deployment"]["spec"]["template"]["spec"]
    multi = _by_kind(_ok(runs, "multi")[0])["Deployment"]["spec"]["template"]["spec"]
    model = {v["name"]: v for v in single["volumes"]}["model"]
    assert model["hostPath"] == {"path": "/srv/models", "type": "Directory"}
    model = {v["name"]: v for v in multi["volumes"]}["model"]
    assert model["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    assert {"name": "model", "mountPath": "/data", "readOnly": True} in multi["containers"][0]["volumeMounts"]


def test_driver_files_are_mounted_read_only_at_the_same_path(runs):
    pod = _by_kind(_ok(runs, "single")[0])["Deployment"]["spec"]["template"]["spec"]
    host = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v and v["name"] != "model"}
    mounts = {m["name"]: (m["mountPath"], m.get("readOnly")) for m in pod["containers"][0]["volumeMounts"]}
    assert sorted(host.values()) == sorted(DRIVER_PATHS)
    for name, path in host.items():
        assert mounts[name] == (path, True)


def test_service_selects_the_pods(runs):
    kinds = _by_kind(_ok(runs, "multi")[0])
    service, deployment = kinds["Service"], kinds["Deployment"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in service["spec"]["selector"].items())
    assert deployment["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    assert service["spec"]["type"] == "NodePort"
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


def test_guide_resource_name_fails_with_the_fix(runs):
    rc, output, docs, _unused = runs["guide_resource"]
    assert rc != 0
    assert "huawei.com/ascend-910b does not exist" in output
    assert "use huawei.com/Ascend910" in output
    assert not docs


def test_options_follow_the_vllm_of_the_image_tag(runs):
    docs, _unused = _ok(runs, "old_image")
    config = yaml.safe_load(_by_kind(docs)["ConfigMap"]["data"]["config.yaml"])
    assert config["swap-space"] == 4
    # vLLM 0.11.0's --config loader would pass a mapping on as str(dict): rendered in the form 0.11.0 reads
    assert config == render_config(dict(SCENARIOS["old_image"]["k8s_manifests_vllm_options"], tensor_parallel_size=8,
                                        max_model_len=4096, gpu_memory_utilization=0.9, host="0.0.0.0", port=8000),
                                   model="/models/deepseek-llm-67b-chat", served_model_name="deepseek-67b",
                                   vllm_version="0.11.0")


def test_removed_vllm_option_fails_before_anything_is_written(runs):
    rc, output, docs, _unused = runs["bad_option"]
    assert rc != 0
    assert "swap_space" in output
    assert not docs
