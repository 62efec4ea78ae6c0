"""The -vvv no-leak check's key search (tests/tools/no_leak_run.py): it must find the key as text, inside any
base64 stream (slurp output), and inside a diagnostics .tar.gz, and must not report clean files."""

from __future__ import annotations

import base64
import io
import os
import sys
import tarfile

import pytest
import yaml

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import no_leak_run

KEY = "sk-noleak-0123456789abcdef0123456789abcdef"


@pytest.mark.parametrize("prefix", [b"", b"a", b"ab", b"abc", b"VLLM_API_KEY=", b"x" * 100])
@pytest.mark.parametrize("suffix", [b"", b"\n", b"\nnext line\n"])
def test_finds_the_key_in_base64_at_every_alignment(tmp_path, prefix, suffix):
    (tmp_path / "event.json").write_bytes(b'{"content": "%s"}' % base64.b64encode(prefix + KEY.encode() + suffix))
    assert no_leak_run.find_key(str(tmp_path), no_leak_run.key_forms(KEY)) == [str(tmp_path / "event.json")]


def test_finds_the_key_as_text_and_inside_an_archive(tmp_path):
    (tmp_path / "stdout").write_text("ok: [node] => {\"api_key\": \"%s\"}\n" % KEY)
    data = ("--api-key %s\n" % KEY).encode()
    info = tarfile.TarInfo("node/ps.txt")
    info.size = len(data)
    with tarfile.open(tmp_path / "bundle.tar.gz", "w:gz") as archive:
        archive.addfile(info, io.BytesIO(data))
    found = no_leak_run.find_key(str(tmp_path), no_leak_run.key_forms(KEY))
    assert sorted(found) == sorted([str(tmp_path / "stdout"), str(tmp_path / "bundle.tar.gz") + ":node/ps.txt"])


def test_clean_files_and_a_redacted_key_are_not_reported(tmp_path):
    (tmp_path / "stdout").write_text("VLLM_API_KEY=<redacted>\n" + "sk-noleak-0123456789abcdef" + "\n")
    (tmp_path / "b64").write_bytes(base64.b64encode(b"VLLM_API_KEY=<redacted>\n"))
    assert no_leak_run.find_key(str(tmp_path), no_leak_run.key_forms(KEY)) == []


PLANTED = {"API key": KEY, "bundle password": "bundlepw-noleak-0123456789abcdef", "HF token": "hf_noleak0123456789"}


def test_more_extra_vars_join_the_planted_secrets_and_the_destination():
    more = {"vllm_service_options": {"max_num_seqs": 8}}
    assert no_leak_run.runner_extravars(more, PLANTED, "/d", "http://10.0.0.1:8080/bundle") == {
        "vllm_service_options": {"max_num_seqs": 8}, "vllm_service_api_key": KEY, "diagnostics_dest_dir": "/d",
        "hf_token": PLANTED["HF token"],
        "ascendai_bundle_url": "http://noleak:bundlepw-noleak-0123456789abcdef@10.0.0.1:8080/bundle"}
    assert more == {"vllm_service_options": {"max_num_seqs": 8}}
    assert "ascendai_bundle_url" not in no_leak_run.runner_extravars({}, PLANTED, "/d")


@pytest.mark.parametrize("more, message", [
    ({"vllm_service_api_key": "mine"}, "must not set vllm_service_api_key"),
    ({"diagnostics_dest_dir": "/x", "a": 1}, "must not set diagnostics_dest_dir"),
    ({"hf_token": "x"}, "must not set hf_token"),
    ({"ascendai_bundle_url": "http://u:p@h/"}, "must not set ascendai_bundle_url"),
    (["max_num_seqs"], "must hold a JSON object, not list"),
])
def test_extra_vars_that_would_hide_a_secret_or_are_no_object_are_refused(more, message):
    with pytest.raises(SystemExit, match=message):
        no_leak_run.runner_extravars(more, PLANTED, "/d")


@pytest.mark.parametrize("url", ["ftp://h/b", "/srv/bundle", "http://user:pw@h/b"])
def test_a_bundle_url_that_cannot_take_the_planted_password_is_refused(url):
    with pytest.raises(SystemExit, match="--bundle-url"):
        no_leak_run.plant_bundle_password(url, "pw")


def test_the_plan_covers_every_playbook_and_every_job_template():
    playbook_dir = os.path.join(os.path.dirname(__file__), "..", "..", "..", "playbooks")
    runs = no_leak_run.plan_runs(playbook_dir)
    names = [name for _label, name, _extra in runs]
    on_disk = {f for f in os.listdir(playbook_dir) if f.endswith(".yml")}
    # download.yml needs the internet (named with --playbook); awx/configure.yml talks to an AWX server; pd.yml
    # serves prefill/decode groups that a single-node inventory has not (its key checks are the pd scenario's);
    # scale.yml and remove_node.yml need a second node (scale.yml's key passes through vllm_service as in site.yml's
    # run; remove_node.yml reads no secret)
    assert on_disk - set(names) == {"download.yml", "pd.yml", "scale.yml", "remove_node.yml"}
    assert names[0] == "site.yml"
    labels = " ".join(label for label, _name, _extra in runs)
    for template in yaml.safe_load(open(os.path.join(playbook_dir, "awx", "job_templates.yml"),
                                        encoding="utf-8"))["awx_job_templates"]:
        assert "AWX " + template["name"] in labels
    k8s = [extra for _label, name, extra in runs if name == "awx/deploy_k8s.yml"]
    assert k8s == [{"k8s_manifests_apply": False, "k8s_manifests_wait_timeout": 1800}]
    assert [r[1] for r in no_leak_run.plan_runs(playbook_dir, ["bench.yml", "download.yml"])] == [
        "bench.yml", "download.yml"]
    with pytest.raises(SystemExit, match="not a playbook"):
        no_leak_run.plan_runs(playbook_dir, ["nope.yml"])
