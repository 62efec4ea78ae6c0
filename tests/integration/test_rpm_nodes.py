"""The RPM-family test nodes (tests/rpm_nodes/README.md): Kylin V10 SP3 and openEuler 22.03 LTS SP4 images.

Runs under the marker rpm_nodes (.ci/run rpm-nodes), on the images `tools/sandbox/host.sh rpm-nodes` built;
it builds nothing. Each node runs as Molecule runs it (systemd as PID 1, the same container settings). Checked:
the release files and the facts Ansible gathers from them, the system python3 (refused by ansible-core 2.19 on
Kylin, accepted on openEuler), the glibc version the roles read, and dnf against the local repository only.

Expected facts: ansible-core's own fixtures, made on the real systems:
test/units/module_utils/facts/system/distribution/fixtures/kylin_linux_advanced_server_v10.json (V10: distribution
"Kylin Linux Advanced Server", version and major version "V10", release = the os-release codename, os_family
RedHat) and openeuler_20.03.json (distribution "openEuler", version = VERSION_ID, major = its first field, os_family
RedHat). ansible_pkg_mgr "dnf": module_utils/facts/system/pkg_mgr.py (RedHat family with /usr/bin/dnf).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.path.join(ROOT, ".venv", "bin")
pytestmark = pytest.mark.rpm_nodes  # deselected unless -m rpm_nodes (.ci/run rpm-nodes)

# The Debian python3.11 that dnf runs with (out of PATH on the node). Used here only to gather facts on Kylin,
# whose own python3 ansible-core 2.19 refuses.
DEBIAN_PYTHON = "/usr/lib/ascendai-rpm-node/debian/usr/bin/python3.11"

NODES = {
    "kylin_v10": {
        "image_var": "KYLIN_IMAGE",
        "facts": {
            "ansible_distribution": "Kylin Linux Advanced Server",
            "ansible_distribution_version": "V10",
            "ansible_distribution_major_version": "V10",
            "ansible_distribution_release": "Lance",
            "ansible_os_family": "RedHat",
            "ansible_pkg_mgr": "dnf",
        },
        "python_minor": "3.7",
        "python_refused": True,
        "glibc": "2.28",
        "kernel": "4.19.90-52.22.v2207.ky10",
        "release_file": ("/etc/kylin-release", "Kylin Linux Advanced Server release V10 (Lance)\n"),
    },
    "openeuler_22.03": {
        "image_var": "OPENEULER_IMAGE",
        "facts": {
            "ansible_distribution": "openEuler",
            "ansible_distribution_version": "22.03",
            "ansible_distribution_major_version": "22",
            "ansible_os_family": "RedHat",
            "ansible_pkg_mgr": "dnf",
        },
        "python_minor": "3.9",
        "python_refused": False,
        "glibc": "2.34",
        "kernel": "5.10.0-216.0.0.115.oe2203sp4",
        "release_file": ("/etc/openEuler-release", "openEuler release 22.03 (LTS-SP4)\n"),
    },
}


def _images() -> dict:
    out = subprocess.run([os.path.join(ROOT, "tools", "sandbox", "host.sh"), "--print"], capture_output=True,
                         text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.split())


def sh(name: str, script: str, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(["docker", "exec", name, "bash", "-c", script], capture_output=True, text=True,
                         check=False)
    if check and res.returncode:
        raise AssertionError(f"{script!r} rc={res.returncode}\n{res.stdout}\n{res.stderr}")
    return res


@pytest.fixture(scope="module", params=sorted(NODES))
def node(request):
    spec = dict(NODES[request.param], name=request.param)
    # KYLIN_IMAGE / OPENEULER_IMAGE in the environment name an image to check instead of the recipe's
    image = os.environ.get(spec["image_var"]) or _images()[spec["image_var"]]
    if subprocess.run(["docker", "image", "inspect", image], capture_output=True, check=False).returncode:
        pytest.fail(f"{image} is not built: tools/sandbox/host.sh rpm-nodes")
    name = f"rpm-node-test-{request.param.replace('.', '')}-{uuid.uuid4().hex[:6]}"
    # The settings of the Molecule platform (tests/simulator/README.md, tests/rpm_nodes/README.md).
    subprocess.run(["docker", "run", "-d", "--name", name, "--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN",
                    "--security-opt", "seccomp=unconfined", "--cgroupns", "host",
                    "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--tmpfs", "/run", "--tmpfs", "/run/lock",
                    "--tmpfs", "/tmp", image, "/lib/systemd/systemd"], check=True, capture_output=True)
    try:
        state = ""
        for _attempt in range(60):
            state = sh(name, "systemctl is-system-running", check=False).stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(1)
        assert state == "running", f"systemd: {state}; failed: {sh(name, 'systemctl --failed', check=False).stdout}"
        yield dict(spec, container=name)
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def setup_facts(node, interpreter=None):
    argv = [os.path.join(BIN, "ansible"), "all", "-i", f"{node['container']},", "-c", "community.docker.docker",
            "-m", "ansible.builtin.setup", "-a", "gather_subset=!all,!min,distribution,pkg_mgr", "-o"]
    if interpreter:
        argv += ["-e", f"ansible_python_interpreter={interpreter}"]
    env = dict(os.environ, ANSIBLE_FORCE_COLOR="0", ANSIBLE_NOCOLOR="1")
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, env=env, check=False)


def test_no_debian_service_at_boot(node):
    """The units of the Debian packages behind the stand-in RPMs are gone, their SysV scripts too: a booted node
    neither runs nor knows prometheus, node_exporter or nginx until dnf installs them (neither distribution starts
    them on a minimal install). systemd-sysv-generator turned a left-over /etc/init.d script into an LSB unit of
    the same name: started at boot, as root, and shadowing the stand-in RPM's unit until a daemon-reload."""
    c = node["container"]
    with open(os.path.join(ROOT, "tests", "rpm_nodes", f"{node['name']}.json"), encoding="utf-8") as f:
        units = json.load(f)["hide_debian_units"]
    assert units
    generated = sh(c, "ls /run/systemd/generator.late 2>/dev/null", check=False).stdout.split()
    for unit in units:
        stem = unit.removesuffix(".service")
        assert sh(c, f"test -e /etc/init.d/{stem}", check=False).returncode == 1, f"/etc/init.d/{stem}"
        assert unit not in generated, generated
        state = sh(c, f"systemctl show -p LoadState,ActiveState --value {unit}").stdout.split()
        assert state == ["not-found", "inactive"], (unit, state)


def test_release_files(node):
    path, content = node["release_file"]
    assert sh(node["container"], f"cat {path}").stdout == content
    assert sh(node["container"], "readlink /etc/system-release").stdout.strip() == os.path.basename(path)
    assert sh(node["container"], "readlink /etc/os-release").stdout.strip() == "../usr/lib/os-release"
    with open(os.path.join(ROOT, "tests", "rpm_nodes", f"{node['name']}.json")) as f:
        os_release = json.load(f)["release_files"]["/usr/lib/os-release"]["content"]
    assert sh(node["container"], "cat /usr/lib/os-release").stdout == os_release
    # nothing left that says Debian to a script
    assert sh(node["container"], "test -e /etc/debian_version", check=False).returncode == 1


def test_facts(node):
    if node["python_refused"]:
        # Interpreter discovery finds /usr/bin/python3 (3.7), as on the real node, and ansible-core 2.19's
        # module code does not even parse there (positional-only parameters are Python 3.8).
        res = setup_facts(node)
        assert res.returncode != 0
        assert "discovered_interpreter_python" in res.stdout and "/usr/bin/python3" in res.stdout, res.stdout
        assert "SyntaxError" in res.stdout, res.stdout
        res = setup_facts(node, DEBIAN_PYTHON)
    else:
        res = setup_facts(node)
    assert res.returncode == 0, res.stdout + res.stderr
    facts = json.loads(res.stdout.split("=>", 1)[1])["ansible_facts"]
    for key, want in node["facts"].items():
        assert facts[key] == want, (key, facts[key], want)
    if not node["python_refused"]:
        assert facts["discovered_interpreter_python"] == f"/usr/bin/python{node['python_minor']}"


def fallback(node) -> bool:
    """Built on a host without pyenv: Debian 11's python2.7 (Kylin) or python3.9 (openEuler), README."""
    return sh(node["container"], "cat /usr/lib/ascendai-rpm-node/python-source").stdout.startswith("fallback")


def test_python(node):
    c = node["container"]
    version = sh(c, "/usr/bin/python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'").stdout.strip()
    if fallback(node) and node["name"] == "kylin_v10":
        assert version == "2.7"  # refused by ansible-core 2.19, as 3.7 is
        assert sh(c, "atlas-sim-state show | grep -c 910B3").stdout.strip() != "0"
        return
    assert version == node["python_minor"]
    # no newer interpreter on PATH for Ansible's discovery to prefer (python3.13 ... python3.8)
    newer = [f"python3.{m}" for m in range(8, 14) if f"3.{m}" != node["python_minor"]]
    assert sh(c, "command -v " + " ".join(newer), check=False).stdout.strip() == ""
    # the stdlib pieces a venv and the roles' probes need
    sh(c, "/usr/bin/python3 -c 'import ssl, json, ctypes, venv, ensurepip'")
    # the simulated Atlas layer runs with the node's python3 (npu-smi comes with the driver, later)
    assert '"chip_name": "910B3"' in sh(c, "atlas-sim-state show").stdout


def test_glibc(node):
    c = node["container"]
    assert sh(c, "getconf GNU_LIBC_VERSION").stdout.strip() == f"glibc {node['glibc']}"
    assert sh(c, "ldd --version").stdout.splitlines()[0] == f"ldd (GNU libc) {node['glibc']}"
    assert sh(c, "rpm -q --qf '%{VERSION}' glibc").stdout == node["glibc"]
    # anything else getconf answers still comes from the real one
    assert sh(c, "getconf PAGESIZE").stdout.strip().isdigit()


def test_dnf_offline(node):
    c = node["container"]
    # one enabled repository, the OS's own; an operator repository the node's facts name (Kylin's
    # ascendai-monitoring, tests/rpm_nodes/README.md) is there but disabled, as the roles expect (--enablerepo)
    enabled = sh(c, "dnf -q repolist --enabled").stdout
    assert len([line for line in enabled.splitlines()[1:] if line.strip()]) == 1, enabled
    listed = [line.split()[0] for line in sh(c, "dnf -q repolist --all").stdout.splitlines()[1:] if line.strip()]
    with open(os.path.join(ROOT, "tests", "rpm_nodes", f"{node['name']}.json"), encoding="utf-8") as f:
        extra = json.load(f).get("extra_repo")
    assert sorted(listed) == sorted([enabled.splitlines()[1].split()[0]] + ([extra["id"]] if extra else [])), listed
    if extra:
        assert sh(c, f"dnf -q repolist --disabled {extra['id']}").stdout.count(extra["id"]) == 1
    assert "baseurl=file://" in sh(c, "cat /etc/yum.repos.d/*.repo").stdout
    assert sh(c, "grep -h '^baseurl' /etc/yum.repos.d/*.repo | grep -v file://", check=False).stdout == ""
    # not installed until dnf installs it, then a working program
    assert sh(c, "command -v gcc make lspci", check=False).stdout.strip() == ""
    assert sh(c, "rpm -q gcc", check=False).returncode == 1
    sh(c, "dnf -y -q install gcc gcc-c++ make pciutils numactl")
    assert sh(c, "rpm -q numactl-libs").returncode == 0  # pulled in by numactl's Requires
    sh(c, "cd /root && printf 'int main(void){return 0;}' > t.c && gcc -o t t.c && ./t && command -v make lspci")
    again = sh(c, "dnf -y install gcc")
    assert "Nothing to do" in again.stdout, again.stdout
    # the node's own kernel has a kernel-devel; the container's (the host's) kernel has none, as on a host whose
    # repositories lag its kernel
    sh(c, f"dnf -q list available kernel-devel-{node['kernel']}")
    host = sh(c, "uname -r").stdout.strip()
    assert sh(c, f"dnf -q list available kernel-devel-{host}", check=False).returncode != 0
    assert sh(c, "dnf -y install no-such-package", check=False).returncode != 0


def test_nginx(node):
    c = node["container"]
    assert sh(c, "command -v nginx; id nginx", check=False).stdout.strip() == ""
    sh(c, "dnf -y -q install nginx")
    sh(c, "id nginx && /usr/sbin/nginx -v && systemctl cat nginx.service")


def test_monitoring_packages(node):
    c = node["container"]
    if node["name"] == "kylin_v10":
        # no Kylin V10 SP3 package list we could reach carries Prometheus (README: assumption)
        assert sh(c, "dnf -q list available prometheus prometheus2 node_exporter", check=False).returncode != 0
        return
    sh(c, "dnf -y -q install prometheus node_exporter && systemctl start prometheus node_exporter")
    assert sh(c, "systemctl is-active prometheus node_exporter").stdout.split() == ["active", "active"]
    sh(c, "promtool check config /etc/prometheus/prometheus.yml")
