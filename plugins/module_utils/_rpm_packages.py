# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""RPM packages through the rpm and dnf command lines, for nodes whose system Python ansible-core refuses.

ansible.builtin.dnf imports the dnf Python bindings; where the interpreter running it lacks them it re-spawns itself
under the system Python that has them (ansible-core ``modules/dnf.py`` calls
``respawn_module(probe_interpreters_for_module(['/usr/libexec/platform-python', '/usr/bin/python3', ...], 'dnf'))``,
``module_utils/common/respawn.py``). On Kylin V10 that Python is 3.7, which ansible-core 2.18 and later refuse, so
the module cannot run there whatever ansible_python_interpreter is. The dnf command line runs under its own Python,
and rpm -q reads the database without any: what is missing is known before anything changes, so a re-run changes
nothing and check mode says what would be installed.
"""

from __future__ import annotations

import re

# rpm(8) -q: "package NAME is not installed"; rpm -q --whatprovides: "no package provides NAME".
_NOT_INSTALLED = re.compile(r"^package (?P<name>\S+) is not installed$")
_NOT_PROVIDED = re.compile(r"^no package provides (?P<name>\S+)$")
# A package spec dnf and rpm both take: a name, an NVR/NEVRA, or a capability such as /usr/bin/curl.
_SPEC = re.compile(r"^[A-Za-z0-9_/+.:~^-][A-Za-z0-9_/+.:~^=<>() -]*$")


class RpmSpecError(ValueError):
    """A package name that would not reach rpm and dnf as one argument."""


def check_specs(names):
    """The names, stripped and without duplicates, in order; refuses what is not a package spec."""
    seen = []
    for name in names:
        text = str(name).strip()
        if not text or not _SPEC.match(text) or text.startswith("-") or len(text) > 256:
            raise RpmSpecError(
                "%r is not an RPM package name (letters, digits and ._+-:~^/ only, not starting with '-'): fix the "
                "package list" % (name,))
        if text not in seen:
            seen.append(text)
    return seen


def query_argv(rpm, names, whatprovides=False):
    return [rpm, "-q"] + (["--whatprovides"] if whatprovides else []) + ["--"] + list(names)


def not_installed(stdout, names, whatprovides=False):
    """The names rpm -q (or -q --whatprovides) said are absent, in the order given."""
    pattern = _NOT_PROVIDED if whatprovides else _NOT_INSTALLED
    absent = {m.group("name") for m in (pattern.match(line.strip()) for line in str(stdout).splitlines()) if m}
    return [name for name in names if name in absent]


def install_argv(dnf, names, enablerepo=None, disable_weak_deps=True):
    argv = [dnf, "install", "-y", "--quiet"]
    if disable_weak_deps:
        argv.append("--setopt=install_weak_deps=False")
    for repo in enablerepo or []:
        argv.append("--enablerepo=%s" % repo)
    return argv + ["--"] + list(names)


def diff(before_missing, names):
    return {
        "before": "".join("%s: absent\n" % n if n in before_missing else "%s: present\n" % n for n in names),
        "after": "".join("%s: present\n" % n for n in names),
    }
