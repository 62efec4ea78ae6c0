"""Role api_front's preflight refuses a name nginx cannot take as its access log's syslog tag, before anything
changes; and the limit is nginx's own: the role's configuration with such a name fails ``nginx -t`` (nginx
src/core/ngx_syslog.c, ngx_syslog_parse_args: at most 32 characters, letters, digits and underscores; the role
tags with the name, dashes as underscores)."""

from __future__ import annotations

import subprocess

import pytest

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import run_playbook
from ansible_collections.ascendai.vllm.tests.unit.test_api_front_routes import NGINX, _worker_user, render

NAME_32 = "ascendai-vllm-pd-decode-0-15-abc"
assert len(NAME_32) == 32
NAME_33 = NAME_32 + "d"


def _play(tmp_path, name, state="present"):
    return [{"name": "The front's preflight", "hosts": "localhost", "gather_facts": True, "tasks": [
        {"name": "The role", "ansible.builtin.import_role": {"name": "ascendai.vllm.api_front"},
         "vars": {"api_front_name": name, "api_front_state": state, "api_front_port": 18999,
                  "api_front_upstreams": ["127.0.0.1:28999"], "api_front_api_keys": ["preflight-key"],
                  "api_front_config_dir": str(tmp_path / "etc")}}]}]


@pytest.mark.parametrize("name,length", [(NAME_33, 33), ("vllm.front", 10), ("front:8000", 10)])
def test_a_name_nginx_cannot_tag_with_is_refused_before_anything_changes(tmp_path, name, length):
    # Only the preflight's tags: should the check let the name through, nothing is installed here.
    proc = run_playbook(tmp_path, _play(tmp_path, name), args=("--tags", "api_front_preflight"))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "Check the front's name makes an nginx syslog tag" in out
    assert f'api_front_name="{name}" ({length} characters)' in out, out[-3000:]
    assert "at most 32 letters, digits and underscores" in out and "ngx_syslog.c" in out
    assert "Choose an api_front_name of at most 32 letters, digits, dashes and underscores" in out
    assert "Nothing was changed." in out
    assert not (tmp_path / "etc").exists()


def test_a_name_of_32_letters_digits_and_dashes_passes(tmp_path):
    proc = run_playbook(tmp_path, _play(tmp_path, NAME_32), args=("--tags", "api_front_preflight"))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


def test_removing_a_front_of_an_earlier_name_is_not_refused_by_the_tag_rule(tmp_path):
    proc = run_playbook(tmp_path, _play(tmp_path, "old.front", state="absent"),
                        args=("--tags", "api_front_preflight"))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


@pytest.mark.skipif(NGINX is None, reason="nginx (Debian package nginx) not installed")
@pytest.mark.parametrize("name,error", [
    (NAME_32, None),
    (NAME_33, "syslog tag length exceeds 32"),
    ("vllm.front", 'syslog "tag" only allows alphanumeric characters and underscore'),
])
def test_nginx_takes_the_role_configuration_only_with_such_a_name(tmp_path, name, error):
    conf = tmp_path / "front.conf"
    conf.write_text(render(api_front_name=name, api_front_api_keys=["preflight-key"],
                           api_front_listen_address="127.0.0.1", api_front_port=18999,
                           api_front_upstreams=["127.0.0.1:28999"], _api_front_run_dir=str(tmp_path),
                           _api_front_state_dir=str(tmp_path), _api_front_worker_user=_worker_user()))
    check = subprocess.run([NGINX, "-t", "-q", "-c", str(conf)], capture_output=True, text=True, check=False,
                           timeout=60)
    if error is None:
        assert check.returncode == 0, check.stderr
    else:
        assert check.returncode != 0 and error in check.stderr, check.stderr


@pytest.mark.parametrize("role,extra,setting", [
    ("vllm_service", {"vllm_service_name": "ascendai-vllm-deepseek-r1-w8a8-xx"},
     'vllm_service_name ("ascendai-vllm-deep'),
])
def test_a_role_running_a_front_refuses_its_name_in_its_own_preflight(tmp_path, role, extra, setting):
    """vllm_service checks the front's name (its vllm_service_name + '-front') with api_front's own check, in its
    preflight, naming its own setting (vllm_pd: test_vllm_pd_rank_config.py)."""
    play = [{"name": "preflight", "hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": "The role", "ansible.builtin.import_role": {"name": f"ascendai.vllm.{role}"}}]}]
    variables = dict({"vllm_service_model_path": "/m", "vllm_service_venv": str(tmp_path / "no-venv"),
                      "vllm_service_config_dir": str(tmp_path / "etc")}, **extra)
    proc = run_playbook(tmp_path, play, variables, args=("--tags", f"{role}_preflight"))
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "Check the front's name makes an nginx syslog tag" in out and setting in out, out[-3000:]
    assert "that makes a name of at most 32 letters, digits, dashes and underscores" in out, out[-3000:]
    assert not (tmp_path / "etc").exists()
