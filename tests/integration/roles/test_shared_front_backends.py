"""Role shared_front works out its backends and its key from the inventory, and refuses, before anything changes,
what cannot work: nodes that do not share one API key (each node's generated key is its own, so the node fronts
would refuse the shared front's requests on all nodes but one), nodes whose front speaks TLS (the shared front
speaks plain HTTP to them), and a group with no serving node left. Only the role's preflight tags run: the nginx
part is the api_front role's (tests/unit/test_api_front_routes.py runs it, with the shared front's retry setting,
before a node that is down)."""

from __future__ import annotations

import json
import re

import pytest

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import run_playbook

KEY = "site-key-0123456789"


def _inventory(nodes):
    return {"all": {"children": {
        "ascend": {"hosts": nodes},
        "ray_workers": {"hosts": {"ray-w": {}}},
        "shared_front": {"hosts": {"localhost": {"ansible_connection": "local"}}},
    }}}


def _run(tmp_path, nodes, role_vars=None):
    nodes = dict(nodes, **{"ray-w": {"shared_front_node_address": "10.0.0.9", "vllm_service_api_key": KEY}})
    play = [{"name": "shared front", "hosts": "shared_front", "gather_facts": False, "tasks": [
        {"name": "The role", "ansible.builtin.import_role": {"name": "ascendai.vllm.shared_front"},
         "vars": role_vars or {}},
        {"name": "Show", "ansible.builtin.debug": {"msg": "ENDPOINT={{ shared_front_endpoint | to_json }}"},
         "tags": ["always"]}]}]
    proc = run_playbook(tmp_path, play, inventory=_inventory(nodes), connection=None,
                        args=("--tags", "shared_front_preflight,always"))
    out = proc.stdout + proc.stderr
    found = re.search(r'"msg": "ENDPOINT=(.*)"\n', proc.stdout)
    return proc.returncode, out, (json.loads(found.group(1).replace('\\"', '"')) if found else None)


def test_every_serving_node_but_ray_workers_is_a_backend_at_its_front(tmp_path):
    rc, out, endpoint = _run(tmp_path, {
        "node-a": {"shared_front_node_address": "10.0.0.1", "vllm_service_api_key": KEY},
        "node-b": {"shared_front_node_address": "10.0.0.2", "vllm_service_api_key": KEY, "vllm_service_port": 8443},
        # no address given: its default IPv4 address, read from its facts (this machine's, through a local connection)
        "node-c": {"vllm_service_api_key": KEY, "ansible_connection": "local"}})
    assert rc == 0, out[-3000:]
    assert endpoint["backends"][:2] == ["10.0.0.1:8000", "10.0.0.2:8443"]
    assert re.fullmatch(r"(\d{1,3}\.){3}\d{1,3}:8000", endpoint["backends"][2]), endpoint
    assert endpoint["backends"][2] != "node-c:8000"
    assert endpoint["url"] == "http://localhost:8080" and endpoint["unit"] == "ascendai-shared-front.service"
    assert KEY not in out


def test_removed_nodes_are_left_out(tmp_path):
    rc, out, endpoint = _run(tmp_path, {
        "node-a": {"shared_front_node_address": "10.0.0.1", "vllm_service_api_key": KEY},
        "node-b": {"shared_front_node_address": "10.0.0.2", "vllm_service_api_key": KEY}},
        {"shared_front_exclude": ["node-b"]})
    assert rc == 0, out[-3000:]
    assert endpoint["backends"] == ["10.0.0.1:8000"]


@pytest.mark.parametrize("keys,why", [
    ((KEY, KEY + "x"), "their vllm_service_api_key differ"),
    ((KEY, ""), "some have none set"),
])
def test_nodes_without_one_shared_key_are_refused_without_showing_it(tmp_path, keys, why):
    rc, out, _endpoint = _run(tmp_path, {
        "node-a": {"shared_front_node_address": "10.0.0.1", "vllm_service_api_key": keys[0]},
        "node-b": {"shared_front_node_address": "10.0.0.2", "vllm_service_api_key": keys[1]}})
    text = " ".join(out.split())
    assert rc != 0, out[-3000:]
    assert "the nodes behind the shared front (node-a, node-b) need one API key" in text
    assert why in text and "Set vllm_service_api_key (Ansible Vault) once for the group ascend" in text
    assert KEY not in out


def test_given_keys_need_no_node_key(tmp_path):
    rc, out, endpoint = _run(tmp_path, {"node-a": {"shared_front_node_address": "10.0.0.1"}},
                             {"shared_front_api_keys": ["front-key-1"]})
    assert rc == 0, out[-3000:]
    assert endpoint["backends"] == ["10.0.0.1:8000"]


def test_a_node_front_with_tls_is_refused(tmp_path):
    rc, out, _endpoint = _run(tmp_path, {
        "node-a": {"shared_front_node_address": "10.0.0.1", "vllm_service_api_key": KEY},
        "node-b": {"shared_front_node_address": "10.0.0.2", "vllm_service_api_key": KEY,
                   "api_front_tls_certificate": "/etc/pki/node.pem"}})
    text = " ".join(out.split())
    assert rc != 0, out[-3000:]
    assert "the API fronts of node-b use TLS (api_front_tls_certificate)" in text and "Nothing was changed" in text


def test_no_serving_node_left_is_refused(tmp_path):
    rc, out, _endpoint = _run(tmp_path, {"node-a": {"shared_front_node_address": "10.0.0.1",
                                                    "vllm_service_api_key": KEY}},
                              {"shared_front_exclude": ["node-a"]})
    assert rc != 0, out[-3000:]
    assert "no backend: shared_front_backends is empty and the group ascend" in " ".join(out.split())
