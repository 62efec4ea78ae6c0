# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""What the roles write into systemd files, read back by systemd itself.

The environment files and units of vllm_service and ray_cluster are rendered from the roles' own templates and
handed to systemd 252 running as PID 1 in the sandbox's base image (Debian 12, tools/sandbox/host.sh): the
environment through ``systemd-run -p EnvironmentFile=... env -0``, the unit settings through D-Bus after a
daemon-reload. Every generated value either comes back byte for byte or is refused before it is written. No copy
of systemd's rules is used to check the result.

Needs Docker and the base image (.ci/run integration has both in CI); skipped, saying so, without them.
The checks that run no systemd (start script quoting, the roles' preflight) run everywhere.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid

import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.ascendai.vllm.plugins.filter.systemd_quote import systemd_quote

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import (
    ROOT, render_templates, run_playbook, template_text,
)

TEMPLATES = {
    "vllm.env": ("vllm_service", "vllm.env.j2"),
    "vllm.service": ("vllm_service", "vllm.service.j2"),
    "ray.env": ("ray_cluster", "ray.env.j2"),
    "ray.service": ("ray_cluster", "ray.service.j2"),
    "ray-start": ("ray_cluster", "ray-start.sh.j2"),
}
# the read-back regex of roles/vllm_service/tasks/api_key.yml (the key kept on the node)
KEPT_KEY_RE = re.compile(r"^VLLM_API_KEY=([!-~]+)$", re.MULTILINE)


def render(which, **variables):
    """A role template templated by Ansible's own engine (in this process: one per generated example)."""
    role, name = TEMPLATES[which]
    with open(os.path.join(ROOT, "roles", role, "templates", name), encoding="utf-8") as handle:
        template = handle.read()
    return template_text(template, dict(variables, ansible_managed="managed"), file=True,
                         filters={"ascendai.vllm.systemd_quote": systemd_quote})


# ------------------------------------------------------------------ systemd 252 in the base image


def _base_image():
    if not shutil.which("docker"):
        return None, "docker is not installed (.ci/run integration runs with it)"
    proc = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "ascendai-vllm-base"],
                          capture_output=True, text=True, check=False, timeout=60)
    if proc.returncode != 0:
        return None, f"docker does not answer: {proc.stderr.strip()[:200]}"
    images = [x for x in proc.stdout.split() if x and not x.endswith(":<none>")]
    if not images:
        return None, "no ascendai-vllm-base image (tools/sandbox/host.sh builds it)"
    return images[0], None


class Systemd:
    def __init__(self, container):
        self.container = container

    def sh(self, script, data=None):
        proc = subprocess.run(["docker", "exec", "-i", self.container, "sh", "-c", script], input=data,
                              capture_output=True, check=False, timeout=120)
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")
        return proc.stdout

    def env_of(self, content):
        """The environment systemd gives a service from an EnvironmentFile= with ``content``."""
        path = f"/root/rt/{uuid.uuid4().hex}.env"
        self.sh(f"mkdir -p /root/rt && cat > {path}", content.encode("utf-8"))
        out = self.sh(f"systemd-run --quiet --wait --pipe -p EnvironmentFile={path} /usr/bin/env -0")
        pairs = [item.split(b"=", 1) for item in out.split(b"\0") if item]
        return {k.decode(): v.decode("utf-8") for k, v in pairs if k.startswith(b"T_") or k == b"VLLM_API_KEY"}

    def unit_properties(self, text, *properties):
        """The properties systemd parsed from the unit ``text`` (as D-Bus gives them, JSON)."""
        name = f"rt{uuid.uuid4().hex[:12]}"
        self.sh(f"cat > /etc/systemd/system/{name}.service && systemctl daemon-reload", text.encode("utf-8"))
        out = {}
        for interface, prop in properties:
            raw = self.sh(f"busctl --json=short get-property org.freedesktop.systemd1 /org/freedesktop/systemd1/unit/"
                          f"{name}_2eservice org.freedesktop.systemd1.{interface} {prop}")
            out[prop] = json.loads(raw)["data"]
        load = self.sh(f"systemctl show -p LoadState --value {name}.service").decode().strip()
        self.sh(f"rm -f /etc/systemd/system/{name}.service")
        out["LoadState"] = load
        return out

    def exec_word(self, word):
        """What a service started from ``ExecStart=/usr/bin/echo -n <word>`` is given as that word: D-Bus shows the
        command line before systemd substitutes the environment (``$$``), so the service is run."""
        name = f"rt{uuid.uuid4().hex[:12]}"
        unit = (f"[Service]\nType=oneshot\nStandardOutput=file:/root/rt/{name}.out\n"
                f"ExecStart=/usr/bin/echo -n {word}\n")
        self.sh(f"mkdir -p /root/rt && cat > /etc/systemd/system/{name}.service && systemctl daemon-reload && "
                f"systemctl start {name}.service", unit.encode("utf-8"))
        out = self.sh(f"cat /root/rt/{name}.out && rm -f /root/rt/{name}.out /etc/systemd/system/{name}.service")
        return out.decode("utf-8")


@pytest.fixture(scope="module")
def systemd():
    image, why = _base_image()
    if image is None:
        pytest.skip(f"systemd's own parser is not at hand: {why}")
    proc = subprocess.run(
        ["docker", "run", "-d", "--rm", "--cap-add", "SYS_ADMIN", "--security-opt", "seccomp=unconfined",
         "--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--tmpfs", "/run", "--tmpfs", "/run/lock",
         image, "/lib/systemd/systemd"], capture_output=True, text=True, check=False, timeout=120)
    if proc.returncode != 0:
        pytest.skip(f"cannot boot systemd in {image}: {proc.stderr.strip()[:300]}")
    container = proc.stdout.strip()
    try:
        # the bus is there only once systemd has started dbus: ask again until it answers (a boot takes seconds)
        deadline = time.monotonic() + 120
        state = ""
        while time.monotonic() < deadline and state not in ("running", "degraded"):
            state = subprocess.run(["docker", "exec", container, "systemctl", "is-system-running", "--wait"],
                                   capture_output=True, text=True, check=False, timeout=150).stdout.strip()
            if state not in ("running", "degraded"):
                time.sleep(0.5)
        if state not in ("running", "degraded"):
            pytest.skip(f"systemd in {image} did not finish booting within 120 s (state {state!r})")
        yield Systemd(container)
    finally:
        subprocess.run(["docker", "rm", "-f", container], capture_output=True, check=False, timeout=120)


_SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                            HealthCheck.too_slow])
_NO_CONTROL = st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=24)
_HOSTILE = st.one_of(
    _NO_CONTROL,
    st.sampled_from(["x\\", "'q", '"q', "a b ", " lead", "$HOME", "${PATH}", "`id`", "$(id)", "%n", "#c", ";c",
                     "a\\nb", "\\", "'", '"', "\\\\\"'", "x\nLD_PRELOAD=/tmp/evil.so", "\u6b63\u5e38", ""]),
    st.text(max_size=12),
)


# ------------------------------------------------------------------ environment files


@_SETTINGS
@given(st.lists(_HOSTILE, min_size=1, max_size=6))
def test_vllm_env_file_reads_back_exactly_or_is_refused(systemd, values):
    env = {f"T_V{i}": v for i, v in enumerate(values)}
    try:
        content = render("vllm.env", vllm_service_name="vllm", _vllm_service_secretfile="/etc/x.secret.env",
                         _vllm_service_environment=env)
    except AnsibleFilterError as exc:
        assert any(re.search(r"[\x00-\x1f\x7f]", v) for v in values), exc
        return
    assert systemd.env_of(content) == env


@_SETTINGS
@given(st.dictionaries(st.from_regex(r"T_[A-Z0-9_]{1,8}", fullmatch=True), _HOSTILE, min_size=1, max_size=5))
def test_ray_env_file_reads_back_exactly_or_is_refused(systemd, env):
    try:
        content = render("ray.env", _ray_cluster_base_env={"RAY_USAGE_STATS_ENABLED": "0"}, ray_cluster_env=env)
    except AnsibleFilterError:
        assert any(re.search(r"[\x00-\x1f\x7f]", v) for v in env.values())
        return
    assert systemd.env_of(content) == env


@_SETTINGS
@given(st.one_of(st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=48),
                 st.sampled_from(["k\\", "'k", '"k', "k\nLD_PRELOAD=/tmp/evil.so", "k k", " k", "\u00e9t\u00e9"])))
def test_api_key_file_reads_back_exactly_or_is_refused(systemd, key):
    try:
        systemd_quote(key, "env_plain", name="vllm_service_api_key")
    except AnsibleFilterError as exc:
        assert key not in str(exc) or len(key) < 3
        return
    # what configure.yml writes, and a variable after it that must survive
    content = f"VLLM_API_KEY={key}\nT_AFTER=after\n"
    assert systemd.env_of(content) == {"VLLM_API_KEY": key, "T_AFTER": "after"}
    assert KEPT_KEY_RE.findall(content) == [key]


# ------------------------------------------------------------------ unit files

_PATHS = st.one_of(
    st.lists(st.text(st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="/"), min_size=1,
                     max_size=10), min_size=1, max_size=3).map(lambda parts: "/" + "/".join(parts)),
    st.sampled_from(["/etc/ascend ai/vllm", "/etc/%n/vllm", "/etc/$HOME", "/etc/a\\", "/etc/x\nExecStartPre=/bin/id",
                     "/etc/'q", '/etc/"q', "/etc//x", "/etc/./x", "relative/x", "/etc/x ", "/etc/\\\\x"]),
)


def _vllm_unit(config_dir):
    envfile = f"{config_dir}/vllm.env"
    return render("vllm.service", vllm_service_served_model_name="m", vllm_service_user="u", vllm_service_group="g",
                  _vllm_service_groups=[], _vllm_service_envfile=envfile,
                  _vllm_service_secretfile=f"{config_dir}/vllm.secret.env", vllm_service_name="vllm",
                  _vllm_service_libexec="/usr/local/libexec/ascendai", vllm_service_restart_sec=5,
                  vllm_service_start_timeout=600, vllm_service_limit_nofile=65536)


@_SETTINGS
@given(_PATHS)
def test_vllm_unit_paths_read_back_exactly_or_are_refused(systemd, config_dir):
    try:
        unit = _vllm_unit(config_dir)
    except AnsibleFilterError as exc:
        assert "vllm_service_config_dir" in str(exc)
        return
    props = systemd.unit_properties(unit, ("Service", "EnvironmentFiles"), ("Service", "ExecStart"),
                                    ("Service", "ExecStartPre"), ("Service", "WorkingDirectory"),
                                    ("Service", "CacheDirectory"), ("Service", "Environment"))
    assert props["LoadState"] == "loaded"
    # torch's inductor cache in the service's own cache directory, not in a /tmp that may be noexec
    assert props["CacheDirectory"] == ["vllm"]
    assert props["Environment"] == ["TORCHINDUCTOR_CACHE_DIR=/var/cache/vllm/torchinductor",
                                    "TRITON_CACHE_DIR=/var/cache/vllm/triton"]
    assert props["EnvironmentFiles"] == [[f"{config_dir}/vllm.env", False], [f"{config_dir}/vllm.secret.env", True]]
    assert props["ExecStart"][0][:2] == ["/bin/bash", ["/bin/bash", "/usr/local/libexec/ascendai/vllm-serve"]]
    assert props["ExecStartPre"] == [] and props["WorkingDirectory"] == "/var/lib/vllm"


@_SETTINGS
@given(_PATHS, _PATHS)
def test_ray_unit_paths_read_back_exactly_or_are_refused(systemd, config_dir, temp_dir):
    try:
        unit = render("ray.service", _ray_cluster_role="head", ray_cluster_user="u", ray_cluster_group="g",
                      _ray_cluster_envfile=f"{config_dir}/ray.env", ray_cluster_temp_dir=temp_dir,
                      _ray_cluster_libexec="/usr/local/libexec/ascendai", _ray_cluster_unit="ray-head")
    except AnsibleFilterError as exc:
        assert "ray_cluster_config_dir" in str(exc) or "ray_cluster_temp_dir" in str(exc)
        return
    props = systemd.unit_properties(unit, ("Service", "EnvironmentFiles"), ("Service", "WorkingDirectory"),
                                    ("Service", "ExecStart"), ("Service", "ExecStartPre"))
    assert props["LoadState"] == "loaded"
    assert props["EnvironmentFiles"] == [[f"{config_dir}/ray.env", False]]
    assert props["WorkingDirectory"] == temp_dir
    assert props["ExecStart"][0][:2] == ["/bin/bash", ["/bin/bash", "/usr/local/libexec/ascendai/ray-head"]]
    assert props["ExecStartPre"] == []


@_SETTINGS
@given(_PATHS)
def test_exec_path_word_reads_back_exactly_or_is_refused(systemd, path):
    try:
        word = systemd_quote(path, "exec_path", name="p")
    except AnsibleFilterError:
        return
    assert systemd.exec_word(word) == path


# ------------------------------------------------------------------ shell and preflight (no systemd needed)


def test_ray_start_script_never_runs_a_script_path(tmp_path):
    marker = tmp_path / "ran"
    script = render_templates(tmp_path, {"ray-start": (
        os.path.join(ROOT, "roles", "ray_cluster", "templates", "ray-start.sh.j2"),
        {"_ray_cluster_role": "head", "_ray_cluster_unit": "ray-head",
         "ray_cluster_env_scripts": [f"/x$(touch {marker})", f"/y`touch {marker}`"], "_ray_cluster_bin": "/bin/true",
         "_ray_cluster_args": []})})["ray-start"]
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert proc.returncode == 78
    assert not marker.exists(), "the start script ran a command from ray_cluster_env_scripts"
    assert "$(touch" in proc.stderr


def _run_tasks(tmp_path, role, tasks_from, variables):
    play = [{"name": f"Checks of {role}", "hosts": "localhost", "gather_facts": False,
             "tasks": [{"name": "Run the role's checks", "ansible.builtin.include_role": {
                 "name": f"ascendai.vllm.{role}", "tasks_from": tasks_from}}]}]
    return run_playbook(tmp_path, play, variables, timeout=300, cwd=ROOT)


@pytest.mark.parametrize("name, value, words", [
    ("vllm_service_config_dir", "/etc/ascendai/vllm\nExecStartPre=/bin/sh -c id", "control character"),
    ("vllm_service_config_dir", "etc/vllm", "absolute path"),
    ("vllm_service_config_dir", "/etc/vllm/", "simplest form"),
    ("vllm_service_api_key", "k3y\nLD_PRELOAD=/tmp/evil.so", "control character"),
    ("vllm_service_api_key", "secret-with-backslash\\", "backslash"),
    ("vllm_service_api_key", "'secret-quoted", "quote"),
])
def test_vllm_service_preflight_refuses_what_systemd_would_misread(tmp_path, name, value, words):
    proc = _run_tasks(tmp_path, "vllm_service", "preflight.yml", {name: value})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert name in out and words in out
    if name == "vllm_service_api_key":
        secret = value.split("\n")[0]
        assert secret not in out, "the API key reached the output"


@pytest.mark.parametrize("name, value", [
    ("ray_cluster_config_dir", "/etc/ascendai/ray\nExecStartPre=/bin/id"),
    ("ray_cluster_temp_dir", "/var/lib/ray\n"),
    ("ray_cluster_env", {"HCCL_IF_IP": "10.0.0.1\nLD_PRELOAD=/tmp/evil.so"}),
    ("ray_cluster_env_scripts", ["/opt/env.sh\nExecStartPre=/bin/id"]),
])
def test_ray_cluster_preflight_refuses_what_systemd_would_misread(tmp_path, name, value):
    proc = _run_tasks(tmp_path, "ray_cluster", "preflight.yml", {name: value, "ray_cluster_head_host": "localhost"})
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert name in out and "control character" in out
    assert "Look for ray in the venv" not in out, "the check must come before anything else"
