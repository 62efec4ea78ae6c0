"""Role k8s_manifests: run it with ansible-playbook against localhost, validate every rendered object against the
Kubernetes OpenAPI schemas (kubernetes-validate, strict: unknown fields fail) and check what the cluster will run.

With a key the pod runs role api_front's nginx as a sidecar (vLLM's --api-key guards only some path
prefixes): vLLM on the pod's loopback, the front's port the only one published, the probes through the front, the
nginx configuration rendered from api_front's template, and the key only in the Secret. The front's configuration and
its init step run here in the real nginx (Debian package nginx, as tests/unit/test_api_front_routes.py) and in the
shells of the stock nginx images (dash; busybox where installed)."""

from __future__ import annotations

import http.client
import http.server
import importlib.util
import json
import math
import os
import re
import shutil
import socket
import stat
import string
import subprocess
import threading
import time

import kubernetes_validate
import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.ascendai.vllm.plugins.filter.nginx_bearer_regex import nginx_bearer_regex
from ansible_collections.ascendai.vllm.plugins.module_utils._service_env import service_env
from ansible_collections.ascendai.vllm.plugins.filter.compat_stack import compat_stack
from ansible_collections.ascendai.vllm.plugins.module_utils._vllm_options import render_config
from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import ROOT, run_playbook

# Oldest and newest Kubernetes the schemas cover that clusters with the Ascend device plugin run.
K8S_VERSIONS = ("1.28.0", kubernetes_validate.latest_version())

# Facts 7.2: the driver files vllm-ascend's docker run lines mount.
DRIVER_PATHS = ["/usr/local/dcmi", "/usr/local/bin/npu-smi", "/usr/local/Ascend/driver/lib64",
                "/usr/local/Ascend/driver/version.info", "/etc/ascend_install.info"]

# The key of the "front" scenario: every character nginx or YAML could read otherwise, so that any form of it in a
# rendered file (plain, JSON-escaped, the nginx pattern) is found.
KEY = 'k8s-Key.Of+The/Front=~"x;y{z}$w\\v\'u'
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
needs_nginx = pytest.mark.skipif(NGINX is None, reason="nginx (Debian package nginx) not installed")
# The stock nginx images' shells: Debian's dash and mawk, Alpine's busybox sh and awk.
SHELLS = [pytest.param([shell], id=shell) for shell in ("dash", "sh") if shutil.which(shell)][:1] + \
    [pytest.param(["busybox", "sh"], id="busybox",
                  marks=pytest.mark.skipif(shutil.which("busybox") is None, reason="busybox not installed"))]

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
    # The front with the key given, other names and ports, on the node's network.
    "front": {
        "k8s_manifests_name": "llm",
        "k8s_manifests_port": 8080,
        "k8s_manifests_backend_port": 19000,
        "k8s_manifests_service_port": 80,
        "k8s_manifests_api_key": KEY,
        "k8s_manifests_api_key_secret": "llm-key",
        "k8s_manifests_api_key_secret_key": "token",
        "k8s_manifests_host_network": "yes",
        "k8s_manifests_front_image": "registry.example.com/mirror/nginx:1.30.6",
    },
    "same_port": {"k8s_manifests_backend_port": 8000},
    "bad_key": {"k8s_manifests_api_key": "two words-" + KEY},
    "guide_resource": {"k8s_manifests_npu_resource": "huawei.com/ascend-910b"},
    "bad_option": {"k8s_manifests_vllm_options": {"swap_space": 4}},
    # The stack's release (vllm_ascend_version) picks the image and the vLLM whose options it takes: 0.11.0 still
    # has swap_space, which bad_option's default release refuses.
    "stack_release": {"vllm_ascend_version": "0.11.0", "k8s_manifests_vllm_options": {"swap_space": 4}},
    # vllm-ascend 0.27.1rc1 no longer reads VLLM_ASCEND_BALANCE_SCHEDULING (vllm_ascend/envs.py); v0.23.0 does, and
    # ignores additional_config.scheduler_config (read from v0.25.1rc1); a site's own image is not checked
    "balance_env_gone": {"vllm_ascend_version": "0.27.1rc1",
                         "k8s_manifests_env": {"VLLM_ASCEND_BALANCE_SCHEDULING": 1}},
    "balance_nested_v023": {"k8s_manifests_image": "quay.io/ascend/vllm-ascend:v0.23.0-a3",
                            "k8s_manifests_vllm_options": {"additional_config": {"scheduler_config": {
                                "enable_balance_scheduling": True}}}},
    "balance_env_v023": {"k8s_manifests_image": "quay.io/ascend/vllm-ascend:v0.23.0",
                         "k8s_manifests_env": {"VLLM_ASCEND_BALANCE_SCHEDULING": 1}},
    "balance_site_image": {"k8s_manifests_image": "registry.example.com/site/vllm:1.2.3",
                           "k8s_manifests_vllm_version": "0.23.0",
                           "k8s_manifests_env": {"VLLM_ASCEND_BALANCE_SCHEDULING": 1}},
    # vllm-ascend 0.11.0's image runs vLLM 0.11.0, which still has swap_space (removed in 0.18.0)
    "old_image": {"k8s_manifests_image": "quay.io/ascend/vllm-ascend:v0.11.0-openeuler",
                  "k8s_manifests_vllm_options": {"swap_space": 4, "additional_config": {"ascend_scheduler_config":
                                                                                        {"enabled": True}}}},
}


def _start(tmp, name, extra):
    dest = tmp / name
    work = tmp / f"{name}.run"
    work.mkdir()
    play = [{"name": "Render the manifests", "hosts": "localhost", "gather_facts": False,
             "roles": [{"role": "ascendai.vllm.k8s_manifests"}]}]
    proc = run_playbook(work, play, dict(extra, k8s_manifests_dest=str(dest)), cwd=ROOT, background=True)
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


def _pod(docs):
    return _by_kind(docs)["Deployment"]["spec"]["template"]["spec"]


def _front(docs):
    return next(c for c in _pod(docs)["containers"] if c["name"] == "front")


def _inputs(scenario):
    """The scenario's values over the role's defaults (the ones these tests need)."""
    values = {"k8s_manifests_name": "vllm", "k8s_manifests_port": 8000, "k8s_manifests_backend_port": 18000,
              "k8s_manifests_service_port": 8000, "k8s_manifests_api_key_secret": "vllm-api-key",
              "k8s_manifests_api_key_secret_key": "api-key"}
    values.update(SCENARIOS[scenario])
    return values


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("scenario", ["single", "multi", "front"])
def test_every_object_validates_against_the_kubernetes_schema(runs, scenario, version):
    docs, texts = _ok(runs, scenario)
    expected = {"configmap.yaml", "deployment.yaml", "service.yaml"}
    if scenario != "multi":
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
    docs, _unused = _ok(runs, scenario)
    container = _container(docs)
    # with the front (single) the port clients and the kubelet reach is the front's; without (multi) vLLM's own
    published = _front(docs) if scenario == "single" else container
    assert {p["name"]: p["containerPort"] for p in published["ports"]} == {"http": 8000}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": 8000}, probe
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
    # with a key (single) vLLM listens behind the front, on the pod's loopback only
    options.update({"host": "127.0.0.1", "port": 18000} if scenario == "single" else {"host": "0.0.0.0", "port": 8000})
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
    assert config_volume["configMap"]["items"] == [{"key": "config.yaml", "path": "config.yaml"}]
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
                                        max_model_len=4096, gpu_memory_utilization=0.9, host="127.0.0.1", port=18000),
                                   model="/models/deepseek-llm-67b-chat", served_model_name="deepseek-67b",
                                   vllm_version="0.11.0")


def test_the_image_and_its_vllm_follow_the_stack(runs):
    """k8s_manifests_image empty: the tag of the host's stack (ascendai_stack), the default release or the one
    vllm_ascend_version names; the options are checked against that release's vLLM."""
    docs, _unused = _ok(runs, "stack_release")
    assert _container(docs)["image"] == "quay.io/ascend/vllm-ascend:v0.11.0"
    assert yaml.safe_load(_by_kind(docs)["ConfigMap"]["data"]["config.yaml"])["swap-space"] == 4
    docs, _unused = _ok(runs, "single")
    assert _container(docs)["image"] == f"quay.io/ascend/vllm-ascend:v{compat_stack('')['vllm_ascend']}"


def test_balance_scheduling_follows_the_vllm_ascend_release_of_the_image(runs):
    """The same check as the systemd path (service_env, vllm_config with vllm_ascend_version): the image's release."""
    rc, output, _docs, _unused = runs["balance_env_gone"]
    assert rc != 0
    assert ("VLLM_ASCEND_BALANCE_SCHEDULING=1 in the service environment does not switch balance scheduling on in "
            "vllm-ascend 0.27.1rc1") in output
    rc, output, _docs, _unused = runs["balance_nested_v023"]
    assert rc != 0
    assert ("additional_config: {scheduler_config: {enable_balance_scheduling: true}} in the vLLM options does not "
            "switch balance scheduling on in vllm-ascend 0.23.0") in output
    for scenario in ("balance_env_v023", "balance_site_image"):
        docs, _unused = _ok(runs, scenario)
        assert {"name": "VLLM_ASCEND_BALANCE_SCHEDULING", "value": "1"} in _container(docs)["env"]


def test_removed_vllm_option_fails_before_anything_is_written(runs):
    rc, output, docs, _unused = runs["bad_option"]
    assert rc != 0
    assert "swap_space" in output
    assert not docs


# ------------------------------------------------------------------------------------------------ the API front
def _api_front_module():
    """tests/unit/test_api_front_routes.py: its renderer of role api_front's template (the role's defaults, vars and
    OS vars, resolved as Ansible would), the one whose output that test runs in nginx against every vLLM route."""
    spec = importlib.util.spec_from_file_location(
        "api_front_routes_for_k8s", os.path.join(ROOT, "tests", "unit", "test_api_front_routes.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


API_FRONT = _api_front_module()


def _front_conf(docs):
    return _by_kind(docs)["ConfigMap"]["data"]["front-nginx.conf"]


def _front_script(docs):
    return _by_kind(docs)["ConfigMap"]["data"]["front-keys.sh"]


@pytest.mark.parametrize("scenario", ["single", "front"])
def test_only_the_front_port_is_published_and_vllm_binds_loopback(runs, scenario):
    values = _inputs(scenario)
    port, backend = values["k8s_manifests_port"], values["k8s_manifests_backend_port"]
    docs, _unused = _ok(runs, scenario)
    kinds = _by_kind(docs)
    pod = _pod(docs)
    config = yaml.safe_load(kinds["ConfigMap"]["data"]["config.yaml"])
    # vLLM reads host and port from its --config file only
    assert (config["host"], config["port"]) == ("127.0.0.1", backend)
    vllm = _container(docs)
    assert vllm["name"] == "vllm" and "ports" not in vllm
    assert not any(arg in ("--host", "--port") or arg.startswith(("--host=", "--port=")) for arg in vllm["command"])
    published = [(c["name"], p["containerPort"]) for c in pod["containers"] + pod.get("initContainers", [])
                 for p in c.get("ports", [])]
    assert published == [("front", port)]
    service = kinds["Service"]["spec"]["ports"]
    assert [(p["port"], p["targetPort"]) for p in service] == [(values["k8s_manifests_service_port"], "http")]
    assert _front(docs)["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    assert backend not in [p["port"] for p in service]
    # nginx listens on every address of the pod and forwards to vLLM's loopback port
    conf = _front_conf(docs)
    assert re.findall(r"^ *listen (\S+);$", conf, re.M) == [f"0.0.0.0:{port}"]
    assert re.findall(r"^ *server (\S+) max_fails", conf, re.M) == [f"127.0.0.1:{backend}"]


@pytest.mark.parametrize("scenario", ["single", "front"])
def test_probes_reach_health_through_the_front(runs, scenario):
    """The kubelet probes the pod's address, where only nginx listens; /health is open there and forwarded."""
    docs, _unused = _ok(runs, scenario)
    port = _inputs(scenario)["k8s_manifests_port"]
    for container in _pod(docs)["containers"]:
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            if probe in container:
                assert container[probe] == dict(container[probe], httpGet={"path": "/health", "port": port})
    assert all(p in _container(docs) for p in ("startupProbe", "livenessProbe", "readinessProbe"))
    conf = _front_conf(docs)
    assert re.findall(r"location = (\S+) \{", conf) == ["/health", "/metrics"]
    backend = _inputs(scenario)["k8s_manifests_backend_port"]
    assert "proxy_pass http://{}_servers/health;".format(conf.split("upstream ")[1].split("_servers")[0]) in conf
    assert f"127.0.0.1:{backend}" in conf


@pytest.mark.parametrize("scenario", ["single", "front"])
def test_the_front_configuration_is_api_fronts_template_for_the_same_inputs(runs, scenario):
    """One source of the routing rules: the ConfigMap's nginx configuration is what role api_front's template (with
    api_front's own defaults and derived values) renders for the pod's name, ports, the stock image's worker user,
    the container's log and the key file; and apart from where the keys come from and where it logs, the same text
    as the systemd front's for the same name, ports and key."""
    values = _inputs(scenario)
    name = values["k8s_manifests_name"] + "-front"
    common = {"api_front_name": name, "api_front_port": values["k8s_manifests_port"],
              "api_front_upstreams": [f"127.0.0.1:{values['k8s_manifests_backend_port']}"]}
    pod_values = dict(common, api_front_api_keys=[], _api_front_worker_user="nginx", _api_front_run_dir=f"/run/{name}",
                      _api_front_state_dir=f"/var/lib/{name}", _api_front_access_log="/dev/stdout",
                      _api_front_keys_file=f"/run/{name}/keys.map")
    conf = _front_conf(_ok(runs, scenario)[0])
    assert conf.rstrip("\n") == API_FRONT.render(**pod_values).rstrip("\n")

    systemd = API_FRONT.render(**dict(common, api_front_api_keys=[KEY])).splitlines()
    pod = conf.splitlines()
    key_line = f'        "{nginx_bearer_regex(KEY)}" 1;'
    include_line = f"        include /run/{name}/keys.map;"
    assert pod.count(include_line) == 1 and systemd.count(key_line) == 1
    # before http: besides the header's comments, only the worker user (the image's, Debian's)
    pod_head, systemd_head = ([line for line in lines[:lines.index("http {")] if not line.startswith("#")]
                              for lines in (pod, systemd))
    assert len(pod_head) == len(systemd_head)
    assert [(a, b) for a, b in zip(pod_head, systemd_head) if a != b] == [("user nginx;", "user www-data;")]
    # http, the routing rules: the same but the temporary files' directory, the log and where the key comes from
    pod_http, systemd_http = pod[pod.index("http {"):], systemd[systemd.index("http {"):]
    assert len(pod_http) == len(systemd_http)
    ident = name.replace("-", "_")
    assert [(a, b) for a, b in zip(pod_http, systemd_http) if a != b] == [
        (f"    access_log /dev/stdout {ident};",
         f"    access_log syslog:server=unix:/dev/log,nohostname,tag={ident} {ident};"),
        (include_line, key_line)]


def test_no_front_without_a_key(runs):
    docs, texts = _ok(runs, "multi")
    pod = _pod(docs)
    assert [c["name"] for c in pod["containers"]] == ["vllm"] and "initContainers" not in pod
    assert set(_by_kind(docs)["ConfigMap"]["data"]) == {"config.yaml"}
    assert "nginx" not in texts["deployment.yaml"]


def test_the_key_is_only_in_the_secret(runs):
    """The key given (scenario front) goes to the Secret only when applying: in no rendered file, in no form (plain,
    JSON-escaped, nginx's pattern), no Secret or ConfigMap value holds it, and vLLM and the init step read it from
    the same Secret."""
    docs, texts = _ok(runs, "front")
    forms = {KEY, json.dumps(KEY)[1:-1], nginx_bearer_regex(KEY), nginx_bearer_regex(KEY).split("\\x20", 1)[1][:-1],
             KEY.replace("'", "''")}
    for name, text in texts.items():
        for form in forms:
            assert form not in text, f"{name} holds the key"
    assert "Secret" not in {d["kind"] for file_docs in docs.values() for d in file_docs}
    pod = _pod(docs)
    reference = {"secretKeyRef": {"name": "llm-key", "key": "token"}}
    init = pod["initContainers"]
    assert [c["name"] for c in init] == ["front-keys"]
    for container in (init[0], _container(docs)):
        assert [e for e in container["env"] if e["name"] == "VLLM_API_KEY"] == \
            [{"name": "VLLM_API_KEY", "valueFrom": reference}]
        assert all("valueFrom" in e or "KEY" not in e["name"] for e in container["env"])
    assert "env" not in _front(docs)
    configmap = _by_kind(docs)["ConfigMap"]["data"]
    assert "keys.map" in configmap["front-nginx.conf"] and "api-key" not in json.dumps(configmap).lower()


def test_the_key_file_lives_only_on_the_fronts_memory_volume(runs):
    docs, _unused = _ok(runs, "front")
    pod = _pod(docs)
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["front-run"]["emptyDir"]["medium"] == "Memory"
    mounts = {c["name"]: {m["name"]: m for m in c["volumeMounts"]} for c in pod["containers"] + pod["initContainers"]}
    assert "front-run" not in mounts["vllm"] and "front" not in mounts["vllm"]
    assert mounts["front-keys"]["front-run"]["mountPath"] == "/run/llm-front"
    assert mounts["front"]["front-run"]["mountPath"] == "/run/llm-front"
    init = pod["initContainers"][0]
    assert init["command"] == ["sh", "/etc/ascendai/front/front-keys.sh", "/run/llm-front/keys.map"]
    front = _front(docs)
    assert front["command"] == ["nginx", "-e", "stderr", "-c", "/etc/ascendai/front/front-nginx.conf"]
    assert init["image"] == front["image"] == "registry.example.com/mirror/nginx:1.30.6"
    for container in (init, front):
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True}
    # the front's files come from the ConfigMap, vLLM's config volume holds only its own file
    assert [i["key"] for i in volumes["front"]["configMap"]["items"]] == ["front-nginx.conf", "front-keys.sh"]
    annotations = _by_kind(docs)["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert re.fullmatch("[0-9a-f]{64}", annotations["ascendai.vllm/front-sha256"])


def test_failing_inputs_write_nothing_and_never_show_the_key(runs):
    rc, output, docs, _unused = runs["same_port"]
    assert rc != 0 and not docs
    assert "k8s_manifests_backend_port and k8s_manifests_port are both 8000" in output
    rc, output, docs, _unused = runs["bad_key"]
    assert rc != 0 and not docs
    assert "a key in k8s_manifests_api_key is empty" in output and "(the key is not shown)" in output
    assert KEY not in output and "two words" not in output


def _run_script(shell, script, tmp_path, key):
    path = tmp_path / "front-keys.sh"
    path.write_text(script)
    out = tmp_path / "keys.map"
    if out.exists():
        out.unlink()
    env = {k: v for k, v in os.environ.items() if k != "VLLM_API_KEY"}
    if key is not None:
        env["VLLM_API_KEY"] = key
    proc = subprocess.run(shell + [str(path), str(out)], env=env, capture_output=True, text=True, check=False)
    return proc, out


@pytest.mark.parametrize("shell", SHELLS)
def test_the_init_step_writes_the_line_api_front_writes_for_the_key(runs, tmp_path, shell):
    """The pod's key line equals the filter's, as role api_front renders it inline, for every printable ASCII
    character; the file is 0600."""
    script = _front_script(_ok(runs, "single")[0])
    printable = "".join(chr(c) for c in range(33, 127))
    keys = [KEY, "aB3", printable, printable[::-1], string.ascii_letters + string.digits, "\\", "'", '"', "$", "%s"]
    for key in keys:
        proc, out = _run_script(shell, script, tmp_path, key)
        assert proc.returncode == 0, proc.stderr
        inline = [line for line in API_FRONT.render(api_front_api_keys=[key]).splitlines() if "[Bb][Ee]" in line]
        assert out.read_text() == inline[0] + "\n" == f'        "{nginx_bearer_regex(key)}" 1;\n'
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
        assert not (tmp_path / "keys.map.new").exists()


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("key", [None, "", "zq words", "zq\tkey", "zq\nkey", "zqkey\n", "zq\u00e9-key", "zq\x7fkey"])
def test_the_init_step_refuses_what_the_filter_refuses_without_showing_it(runs, tmp_path, shell, key):
    script = _front_script(_ok(runs, "single")[0])
    proc, out = _run_script(shell, script, tmp_path, key)
    assert proc.returncode != 0 and not out.exists() and not (tmp_path / "keys.map.new").exists()
    assert "printable ASCII without spaces" in proc.stderr
    if key:
        assert "zq" not in proc.stdout + proc.stderr
    with pytest.raises(AnsibleFilterError):
        nginx_bearer_regex(key)


class _Backend(http.server.BaseHTTPRequestHandler):
    """The stand-in for vLLM: 200 and what it received, on every method and path."""

    protocol_version = "HTTP/1.1"

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = f"backend {self.command} {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *_args):
        pass


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ask(port, method, path, key=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(method, path, body=b"{}" if method == "POST" else None,
                 headers={"Authorization": key} if key is not None else {})
    answer = conn.getresponse()
    result = (answer.status, answer.read().decode("utf-8", "replace"))
    conn.close()
    return result


@needs_nginx
def test_the_pod_front_as_rendered_runs_in_nginx(runs, tmp_path):
    """The ConfigMap's configuration and init step, the containers' commands, in the real nginx in front of a stand-in
    for vLLM: only the addresses are moved to this machine (a free port, a temporary directory, an existing user)."""
    docs, _unused = _ok(runs, "front")
    pod = _pod(docs)
    backend = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Backend)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    port = _free_port()
    run_dir, state_dir = tmp_path / "run", tmp_path / "state"
    run_dir.mkdir()
    state_dir.mkdir()
    conf = _front_conf(docs)
    for old, new in (("/run/llm-front", str(run_dir)), ("/var/lib/llm-front", str(state_dir)),
                     ("listen 0.0.0.0:8080;", f"listen 127.0.0.1:{port};"),
                     ("server 127.0.0.1:19000 ", f"server 127.0.0.1:{backend.server_address[1]} "),
                     ("user nginx;", f"user {API_FRONT._worker_user()};")):
        assert old in conf
        conf = conf.replace(old, new)
    conf_path = tmp_path / "front-nginx.conf"
    conf_path.write_text(conf)
    init = pod["initContainers"][0]
    proc, keys = _run_script([init["command"][0]], _front_script(docs), run_dir, KEY)
    assert proc.returncode == 0, proc.stderr
    assert keys == run_dir / "keys.map"
    command = [NGINX] + [str(conf_path) if arg.endswith("front-nginx.conf") else arg
                         for arg in _front(docs)["command"][1:]]
    check = subprocess.run(command[:1] + ["-t", "-q"] + command[1:], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stderr
    log = open(tmp_path / "nginx.log", "w")  # noqa: SIM115 - closed below
    nginx = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        for path in ("/health", "/metrics"):
            assert _ask(port, "GET", path) == (200, f"backend GET {path}")
        for method, path in (("POST", "/invocations"), ("POST", "/tokenize"), ("POST", "/load"),
                             ("POST", "/v1/completions"), ("GET", "/v1/models"), ("POST", "/scale_elastic_ep")):
            status, text = _ask(port, method, path)
            assert status == 401 and "backend" not in text, (path, status, text)
            assert _ask(port, method, path, key=f"Bearer {KEY[:-1]}")[0] == 401
            assert _ask(port, method, path, key=f"Bearer {KEY.upper()}")[0] == 401
            assert _ask(port, method, path, key=f"Bearer {KEY}") == (200, f"backend {method} {path}")
            assert _ask(port, method, path, key=f"bearer {KEY}")[0] == 200
    finally:
        nginx.terminate()
        nginx.wait(timeout=10)
        log.close()
        backend.shutdown()
