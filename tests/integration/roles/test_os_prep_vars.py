"""Which os_prep vars file a host picks, from the real /etc/os-release of Kylin V10 SP2, openEuler 22.03, Ubuntu 22.04.

The facts come from ansible-core's own distribution fact code (ansible.module_utils.facts.system.distribution) run on
a temp root that holds only that os-release; the first_found candidates and the support-matrix check are templated
from roles/os_prep exactly as written there, by Ansible's own template engine.
"""

from __future__ import annotations

import os
import re
import sys

import pytest
import yaml
from ansible.module_utils import distro as ansible_distro
from ansible.module_utils.facts.system import distribution as dist_mod

from ansible_collections.ascendai.vllm.tests.integration.test_support.playbook import template_text

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLE = os.path.join(ROOT, "roles", "os_prep")

# Real /etc/os-release texts. Kylin V10 SP2 ("Sword", kernel 4.19.90-24.4.v2101.ky10): ansible-core's fixture
# test/units/module_utils/facts/system/distribution/fixtures/kylin_linux_advanced_server_v10.json; openEuler 22.03 LTS
# as printed by `cat /etc/os-release` on an Ascend host (vllm-ascend/MindIE benchmark notes); Ubuntu 22.04 LTS
# (jammy) as shipped by base-files 12ubuntu4.
OS_RELEASE = {
    "kylin_v10_sp2": ('NAME="Kylin Linux Advanced Server"\nVERSION="V10 (Sword)"\nID="kylin"\nVERSION_ID="V10"\n'
                      'PRETTY_NAME="Kylin Linux Advanced Server V10 (Sword)"\nANSI_COLOR="0;31"\n\n',
                      "4.19.90-24.4.v2101.ky10.aarch64"),
    "openeuler_22.03": ('NAME="openEuler"\nVERSION="22.03 LTS"\nID="openEuler"\nVERSION_ID="22.03"\n'
                        'PRETTY_NAME="openEuler 22.03 LTS"\nANSI_COLOR="0;31"\n\n',
                        "5.10.0-60.18.0.50.oe2203.aarch64"),
    "ubuntu_22.04": ('PRETTY_NAME="Ubuntu 22.04.4 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\n'
                     'VERSION="22.04.4 LTS (Jammy Jellyfish)"\nVERSION_CODENAME=jammy\nID=ubuntu\nID_LIKE=debian\n'
                     'HOME_URL="https://www.ubuntu.com/"\nSUPPORT_URL="https://help.ubuntu.com/"\n'
                     'BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"\n'
                     'PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"\n'
                     'UBUNTU_CODENAME=jammy\n', "5.15.0-78-generic"),
}

# Package names as the OS repositories carry them: openEuler 22.03 LTS OS/everything repos and Kylin V10 SP2
# (openEuler-derived, same rpm names; iproute not iproute2, gcc-c++ not g++, no python3-venv: venv is in python3);
# Ubuntu 22.04 main/universe.
RPM_NAMES = {"gcc", "gcc-c++", "make", "dkms", "pciutils", "numactl", "numactl-libs", "net-tools", "ethtool", "iproute",
             "tar", "unzip", "sudo", "python3"}
DEB_NAMES = {"gcc", "g++", "make", "dkms", "pciutils", "numactl", "libnuma1", "net-tools", "ethtool", "iproute2", "tar",
             "unzip", "sudo", "python3", "python3-venv"}

EXPECTED = {
    # host: (distribution, version, major, os_family, vars file, package manager, real names, header packages)
    "kylin_v10_sp2": ("Kylin Linux Advanced Server", "V10", "V10", "RedHat", "Kylin_Linux_Advanced_Server.yml", "dnf",
                      RPM_NAMES, ["kernel-devel-4.19.90-24.4.v2101.ky10.aarch64"]),
    "openeuler_22.03": ("openEuler", "22.03", "22", "RedHat", "openEuler.yml", "dnf", RPM_NAMES,
                        ["kernel-devel-5.10.0-60.18.0.50.oe2203.aarch64",
                         "kernel-headers-5.10.0-60.18.0.50.oe2203.aarch64"]),
    "ubuntu_22.04": ("Ubuntu", "22.04", "22", "Debian", "Ubuntu.yml", "apt", DEB_NAMES,
                     ["linux-headers-5.15.0-78-generic"]),
}


class FakeModule:
    def run_command(self, *args, **kwargs):
        return 1, "", ""

    def get_bin_path(self, *args, **kwargs):
        return None

    def debug(self, msg):
        pass


def gather(tmp_path, monkeypatch, os_release):
    """distribution facts as ansible-core computes them on a host whose only release file is this os-release."""
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "os-release").write_text(os_release)

    def inside(path):
        return str(tmp_path / path.lstrip("/"))

    real_file_exists = dist_mod._file_exists
    real_get = dist_mod.get_file_content

    def file_exists(path, allow_empty=False):
        return real_file_exists(inside(path), allow_empty)

    monkeypatch.setattr(dist_mod, "_file_exists", file_exists)
    monkeypatch.setattr(dist_mod, "get_file_content", lambda path, *a, **kw: real_get(inside(path), *a, **kw))
    # ansible's distro shim is the system 'distro' package when installed, else the bundled copy: patch the module
    # that holds the LinuxDistribution instance behind distro.id(), distro.version() ...
    holder = sys.modules[ansible_distro.id.__module__]
    monkeypatch.setattr(holder, "_distro", holder.LinuxDistribution(
        include_lsb=False, include_uname=False, include_oslevel=False, root_dir=str(tmp_path)))
    monkeypatch.setattr(dist_mod.platform, "system", lambda: "Linux")
    return dist_mod.Distribution(FakeModule()).get_distribution_facts()


def role_yaml(*parts):
    with open(os.path.join(ROLE, *parts)) as handle:
        return yaml.safe_load(handle)


def render(template, facts, extra=None):
    return template_text(template, dict(extra or {}, ansible_facts=facts))


def _data(value):
    """A templated expression's value: Ansible gives native types; text (a Jinja loop's output) is YAML."""
    return yaml.safe_load(value) if isinstance(value, str) else value


def first_found_candidates(facts):
    task = [t for t in role_yaml("tasks", "preflight.yml") if t["name"] == "Load the OS data"][0]
    return [render(f, facts) for f in task["vars"]["_os_prep_vars_candidates"]["files"]]


def supported(facts):
    """The support-matrix assertion of tasks/preflight.yml, evaluated as written."""
    tasks = role_yaml("tasks", "preflight.yml")
    task = [t for t in tasks if t["name"] == "Fail on an OS outside the support matrix"][0]
    matrix = role_yaml("vars", "main.yml")["_os_prep_supported"]
    pattern = render(task["vars"]["_os_prep_version_pattern"], facts, {"_os_prep_supported": matrix}).strip()
    return facts["distribution"] in matrix and re.match(pattern, facts["distribution_version"]) is not None


@pytest.mark.parametrize("host", sorted(OS_RELEASE))
def test_host_picks_its_vars_file(host, tmp_path, monkeypatch):
    text, kernel = OS_RELEASE[host]
    facts = gather(tmp_path, monkeypatch, text)
    name, version, major, family, vars_file, pkg_mgr, real_names, headers = EXPECTED[host]
    assert (facts["distribution"], facts["distribution_version"], facts["distribution_major_version"],
            facts["os_family"]) == (name, version, major, family)
    assert supported(facts)

    candidates = first_found_candidates(facts)
    found = [c for c in candidates if os.path.isfile(os.path.join(ROLE, "vars", c))]
    assert found and found[0] == vars_file, (candidates, found)

    data = role_yaml("vars", vars_file)
    assert data["_os_prep_pkg_mgr"] == pkg_mgr
    assert set(data["_os_prep_packages"]) <= real_names, set(data["_os_prep_packages"]) - real_names
    assert {"gcc", "make", "dkms", "pciutils", "net-tools"} <= set(data["_os_prep_packages"])
    facts = dict(facts, kernel=kernel)
    assert [render(p, facts) for p in data["_os_prep_kernel_header_packages"]] == headers


@pytest.mark.parametrize("text,name,version", [
    ('NAME="openEuler"\nVERSION="20.03 (LTS)"\nID="openEuler"\nVERSION_ID="20.03"\n'
     'PRETTY_NAME="openEuler 20.03 (LTS)"\nANSI_COLOR="0;31"\n\n', "openEuler", "20.03"),
    ('NAME="Ubuntu"\nVERSION="20.04.6 LTS (Focal Fossa)"\nID=ubuntu\nID_LIKE=debian\nPRETTY_NAME="Ubuntu 20.04.6 LTS"\n'
     'VERSION_ID="20.04"\nVERSION_CODENAME=focal\nUBUNTU_CODENAME=focal\n', "Ubuntu", "20.04"),
])
def test_an_unsupported_release_is_refused(tmp_path, monkeypatch, text, name, version):
    facts = gather(tmp_path, monkeypatch, text)
    assert (facts["distribution"], facts["distribution_version"]) == (name, version)
    assert not supported(facts)


# --- sysctl: only the keys the running kernel has ---------------------------------------------------------------

def _proc_sys(tmp_path, keys):
    """A /proc/sys holding these keys only (as on a kernel that has exactly them)."""
    for key in keys:
        target = tmp_path / "proc" / "sys" / key.replace(".", "/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("0\n")
    return tmp_path


def _tuning_task(name):
    return [t for t in role_yaml("tasks", "tuning.yml") if t["name"].startswith(name)][0]


def _sysctl_conf(root, sysctl):
    """tasks/tuning.yml's stat loop and set_fact, then templates/sysctl.conf.j2, templated as written."""
    look = _tuning_task("Look for each kernel parameter")
    items = _data(template_text(look["loop"], {"os_prep_sysctl": sysctl}))
    results = []
    for item in items:
        path = template_text(look["ansible.builtin.stat"]["path"], {"item": item})
        results.append({"item": item, "stat": {"exists": os.path.exists(os.path.join(str(root), path.lstrip("/")))}})
    note = _tuning_task("Note the parameters")["ansible.builtin.set_fact"]
    facts = {k: _data(template_text(v, {"_os_prep_sysctl_keys": {"results": results}})) for k, v in note.items()}
    with open(os.path.join(ROLE, "templates", "sysctl.conf.j2")) as handle:
        text = template_text(handle.read(), dict(facts, os_prep_sysctl=sysctl, ansible_managed="Ansible managed"),
                             file=True)
    return text, facts


def test_sysctl_skips_a_key_the_kernel_lacks(tmp_path):
    sysctl = role_yaml("defaults", "main.yml")["os_prep_sysctl"]
    # Ubuntu 22.04 (5.15) / openEuler 24.03 (6.6): no kernel.sched_migration_cost_ns since Linux 5.13
    root = _proc_sys(tmp_path, ["vm.swappiness", "kernel.numa_balancing"])
    text, facts = _sysctl_conf(root, sysctl)
    active = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert active == ["kernel.numa_balancing = 0", "vm.swappiness = 0"]
    assert facts["_os_prep_sysctl_skipped"] == ["kernel.sched_migration_cost_ns"]
    assert "# kernel.sched_migration_cost_ns = 50000  (skipped: not in /proc/sys of this kernel)" in text


def test_sysctl_keeps_every_key_a_5_10_kernel_has(tmp_path):
    sysctl = role_yaml("defaults", "main.yml")["os_prep_sysctl"]
    # openEuler 22.03 (5.10, CONFIG_SCHED_DEBUG): the key is still in /proc/sys
    root = _proc_sys(tmp_path, ["vm.swappiness", "kernel.numa_balancing", "kernel.sched_migration_cost_ns"])
    text, facts = _sysctl_conf(root, sysctl)
    assert "kernel.sched_migration_cost_ns = 50000" in text.splitlines()
    assert facts["_os_prep_sysctl_skipped"] == []


# --- preflight: the driver's build packages on dnf systems ------------------------------------------------------

def _build_check(results, kernel="5.10.0-60.18.0.50.oe2203.aarch64"):
    """tasks/preflight.yml's missing list and message, templated as written."""
    task = [t for t in role_yaml("tasks", "preflight.yml") if t["name"].startswith("Stop when a build package")][0]
    missing = _data(template_text(task["vars"]["_os_prep_build_missing"],
                                  {"_os_prep_build_pkgs": {"results": results}}))
    msg = template_text(task["ansible.builtin.fail"]["msg"], {
        "_os_prep_build_missing": missing, "inventory_hostname": "node1", "ansible_facts": {"kernel": kernel}})
    return missing, msg


def test_preflight_names_missing_dkms_and_kernel_devel_with_their_fix():
    # `dnf -q list NAME` exits 1 with "Error: No matching Packages to list" when NAME is neither installed nor available
    results = [{"item": "dkms", "rc": 1}, {"item": "kernel-devel-5.10.0-60.18.0.50.oe2203.aarch64", "rc": 1},
               {"item": "kernel-headers-5.10.0-60.18.0.50.oe2203.aarch64", "rc": 0}]
    missing, msg = _build_check(results)
    assert missing == ["dkms", "kernel-devel-5.10.0-60.18.0.50.oe2203.aarch64"]
    assert "Huawei ships a dkms rpm" in msg and "rpm -ivh" in msg
    assert "must match the running kernel 5.10.0-60.18.0.50.oe2203.aarch64" in msg
    assert "instg_0049.html" in msg and "Nothing was changed" in msg


def test_preflight_passes_when_everything_is_installed_or_available():
    assert _build_check([{"item": "dkms", "rc": 0}])[0] == []
    assert _build_check([{"item": "dkms", "skipped": True}])[0] == []
