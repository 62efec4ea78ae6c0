#!/usr/bin/env python3
"""Turn the Debian 12 sandbox image into an RPM-family test node (Kylin V10 SP3 or openEuler 22.03 LTS SP4).

Test infrastructure of ascendai.vllm (tests/ is never shipped). Runs once, inside ``docker build``
(tests/rpm_nodes/Dockerfile), with Debian's python3.11, rpm 4.18, rpmbuild, createrepo_c and dnf 4.14:

1. the distribution's release files (/usr/lib/os-release and the files Ansible's distribution facts read);
2. the programs the stand-in RPMs stand for (Debian's gcc, make, dkms, lspci, prometheus ...) move out of PATH
   into HIDDEN, so that they appear only when dnf installs the stand-in RPM, whose payload is a symlink to them;
3. one stand-in RPM per row of ``<node>.json`` (name, version, release, provides, requires from the published
   package lists), built with rpmbuild; a local repository (createrepo_c); the rows marked ``installed`` go into the
   rpm database, as on a minimal install; dnf reads that repository only (no network);
4. the distribution's python3 (a CPython of the same minor, copied from the build context) as /usr/bin/python3;
   Debian's python3.11 moves out of PATH, and dnf (python3-dnf is Debian's, for 3.11) runs with it;
5. getconf and ldd report the distribution's glibc (the roles read ``getconf GNU_LIBC_VERSION``).

Every value and its source is in ``<node>.json`` and in tests/rpm_nodes/README.md.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Everything this script moves out of sight lives under one prefix, so a test (or a person) can tell the
# node's own files from the Debian programs behind the stand-ins.
HOME = Path("/usr/lib/ascendai-rpm-node")
HIDDEN = HOME / "debian"
REPO = Path("/var/lib/ascendai-rpm-node/repo")
EXTRA_REPO = Path("/var/lib/ascendai-rpm-node/repo-extra")
DEBIAN_PYTHON = HIDDEN / "usr/bin/python3.11"


def log(msg: str) -> None:
    print(f"[rpm-node] {msg}", flush=True)


def run(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, **kw)


def hide(debian_path: str, real: str | None = None) -> Path:
    """Move a Debian file (its real file, following symlinks) under HIDDEN; return where it is now.

    ``real``: the target resolved before an earlier move broke the chain (cc -> alternatives -> gcc -> gcc-12).
    """
    src = Path(debian_path)
    real = Path(real or os.path.realpath(src))
    dest = HIDDEN / real.relative_to("/")
    if not dest.exists():
        if not real.exists():
            raise SystemExit(f"rpm-node: {debian_path} is not in the Debian image (recipe error)")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(real), str(dest))
    if src.is_symlink() or src.exists():
        src.unlink()
    return dest


def write_release_files(node: dict) -> None:
    for path, spec in node["release_files"].items():
        p = Path(path)
        if p.is_symlink() or p.exists():
            p.unlink()
        p.parent.mkdir(parents=True, exist_ok=True)
        if "symlink" in spec:
            p.symlink_to(spec["symlink"])
        else:
            p.write_text(spec["content"])
    # Debian's own marker would tell a script this is Debian.
    for path in node.get("hide_debian_files", []):
        if Path(path).exists():
            hide(path)


def spec_text(pkg: dict, arch: str, payload: list[tuple[str, str | None, str | None]]) -> str:
    lines = [
        "%define debug_package %{nil}",
        "%define __os_install_post %{nil}",
        "%define _build_id_links none",
        f"Name: {pkg['name']}",
        f"Version: {pkg['version']}",
        f"Release: {pkg['release']}",
    ]
    if pkg.get("epoch"):
        lines.append(f"Epoch: {pkg['epoch']}")
    lines += [
        "Summary: ascendai.vllm test node stand-in (see /usr/lib/ascendai-rpm-node/README.md)",
        "License: test-only",
        f"BuildArch: {'noarch' if pkg.get('noarch') else arch}",
        "AutoReqProv: no",
    ]
    for prov in pkg.get("provides", []):
        lines.append(f"Provides: {prov.replace('ARCH', arch)}")
    for req in pkg.get("requires", []):
        lines.append(f"Requires: {req.replace('ARCH', arch)}")
    lines += ["", "%description", f"Stand-in for {pkg['name']}. Source: {pkg['source']}"]
    if pkg.get("pre"):
        lines += ["", "%pre", pkg["pre"]]
    lines += ["", "%install"]
    for path, target, content in payload:
        lines.append(f"mkdir -p %{{buildroot}}{os.path.dirname(path)}")
        if target is not None:
            lines.append(f"ln -s {target} %{{buildroot}}{path}")
        elif content is not None:
            lines.append(f"cat > %{{buildroot}}{path} <<'ASCENDAI_EOF'")
            lines.append(content.rstrip("\n"))
            lines.append("ASCENDAI_EOF")
        else:
            lines.append(f"mkdir -p %{{buildroot}}{path}")
    lines += ["", "%files"]
    for path, target, content in payload:
        if target is None and content is None:
            lines.append(f"%dir {path}")
        elif path.startswith("/etc/") and content is not None:
            lines.append(f"%config(noreplace) {path}")
        else:
            lines.append(path)
    return "\n".join(lines) + "\n"


def build_rpms(node: dict, arch: str, kernel: str) -> list[Path]:
    top = Path(tempfile.mkdtemp(prefix="rpmbuild."))
    for d in ("SPECS", "RPMS", "BUILD", "BUILDROOT", "SOURCES", "SRPMS"):
        (top / d).mkdir()
    built = []
    # resolved before anything moves: several links lead to one program
    reals = {e["debian"]: os.path.realpath(e["debian"]) for p in node["packages"] for e in p.get("files", [])
             if "debian" in e}
    for pkg in node["packages"]:
        pkg = json.loads(json.dumps(pkg).replace("KVER", kernel))
        payload = []
        for entry in pkg.get("files", []):
            path = entry["path"].replace("ARCH", arch)
            if "debian" in entry:
                payload.append((path, str(hide(entry["debian"], reals[entry["debian"]])), None))
            elif "content" in entry:
                payload.append((path, None, entry["content"]))
            else:
                payload.append((path, None, None))
        spec = top / "SPECS" / f"{pkg['name']}.spec"
        spec.write_text(spec_text(pkg, arch, payload))
        # (rpmbuild warns about every absolute symlink: that is the design here, so its output shows on failure only)
        res = subprocess.run(["rpmbuild", "-bb", "--quiet", "--define", f"_topdir {top}", str(spec)],
                             capture_output=True, text=True)
        if res.returncode:
            raise SystemExit(f"rpm-node: rpmbuild {pkg['name']} failed:\n{res.stdout}{res.stderr}")
    # gcc finds cc1 relative to where its driver really is (HIDDEN/usr/bin): give it ../lib/gcc there too.
    if (HIDDEN / "usr/bin").is_dir() and Path("/usr/lib/gcc").is_dir() and not (HIDDEN / "usr/lib/gcc").exists():
        (HIDDEN / "usr/lib").mkdir(parents=True, exist_ok=True)
        (HIDDEN / "usr/lib/gcc").symlink_to("/usr/lib/gcc")
    extra = {p["name"] for p in node["packages"] if p.get("repo") == "extra"}
    for rpm in sorted((top / "RPMS").rglob("*.rpm")):
        # rows marked "repo": "extra" go into the operator's repository (node["extra_repo"]), not the distribution's
        repo = EXTRA_REPO if any(rpm.name.startswith(name + "-") and rpm.name[len(name) + 1:][:1].isdigit()
                                 for name in extra) else REPO
        dest = repo / "Packages" / rpm.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(rpm), dest)
        built.append(dest)
    shutil.rmtree(top)
    return built


def install_python(node: dict) -> None:
    """The distribution's python3 from the build context, laid out as /usr/bin/pythonX.Y + /usr/lib/pythonX.Y."""
    src = HOME / "python-src"
    minor = node["python"]["minor"]
    info = (src / "SOURCE").read_text().strip() if (src / "SOURCE").exists() else "missing"
    # for the checks: which interpreter this node got (pyenv, or the fallback)
    (HOME / "python-source").write_text(info + "\n")
    # Debian's interpreter leaves PATH: Ansible's discovery (python3.13 ... python3.8, /usr/bin/python3) would
    # find python3.11 before the distribution's python3, which no Kylin or openEuler host has.
    for name in ("python3", "python3.11"):
        p = Path("/usr/bin") / name
        if name == "python3.11":
            hide(str(p))
        elif p.is_symlink() or p.exists():
            p.unlink()
    dnf = Path("/usr/bin/dnf-3")
    text = dnf.read_text()
    dnf.write_text(text.replace("#!/usr/bin/python3\n", f"#!{DEBIAN_PYTHON}\n", 1))
    if not (src / "bin").is_dir():
        fallback = node["python"]["fallback"]
        if not Path(fallback["path"]).exists():
            raise SystemExit(f"rpm-node: no Python {minor} in the build context and no fallback {fallback['path']}")
        os.symlink(fallback["path"], "/usr/bin/python3")
        if fallback.get("tools_python"):
            # The simulated Atlas tools need Python 3.8+ and find it as `python3` on PATH; /usr/local/bin comes
            # before /usr/bin there, while Ansible's discovery asks for /usr/bin/python3 by its path.
            os.symlink(hide(fallback["tools_python"]), "/usr/local/bin/python3")
            log(f"DEVIATION: `python3` on PATH is {fallback['tools_python']} (for the simulated Atlas tools), "
                "/usr/bin/python3 is not")
        log(f"DEVIATION: no CPython {minor} on the build host; /usr/bin/python3 is {fallback['path']} "
            f"(Debian 11), {fallback['why']}")
        shutil.rmtree(src, ignore_errors=True)
        return
    exe = next(p for p in sorted((src / "bin").iterdir()) if p.name.startswith("python3.") and p.is_file()
               and not p.name.endswith("-config"))
    shutil.copy2(exe, f"/usr/bin/{exe.name}")
    for lib in (src / "lib").glob("libpython3*.so*"):
        shutil.copy2(lib, f"/usr/lib/{lib.name}", follow_symlinks=True)
    shutil.copytree(src / "lib" / exe.name, f"/usr/lib/{exe.name}", symlinks=True, dirs_exist_ok=True)
    os.symlink(exe.name, "/usr/bin/python3")
    run("ldconfig")
    out = subprocess.run(["/usr/bin/python3", "-c", "import sys, ssl; print('%d.%d.%d' % sys.version_info[:3])"],
                         check=True, capture_output=True, text=True).stdout.strip()
    if not out.startswith(minor + "."):
        raise SystemExit(f"rpm-node: /usr/bin/python3 is {out}, wanted {minor}.x")
    log(f"/usr/bin/python3 is CPython {out} ({info})")
    shutil.rmtree(src)


def glibc_wrappers(node: dict) -> None:
    version = node["glibc"]
    getconf = hide("/usr/bin/getconf")
    Path("/usr/bin/getconf").write_text(
        "#!/bin/sh\n"
        "# ascendai.vllm test node: reports the distribution's glibc (Debian's real one runs underneath)\n"
        f'if [ "$#" -eq 1 ] && [ "$1" = GNU_LIBC_VERSION ]; then echo "glibc {version}"; exit 0; fi\n'
        f'exec {getconf} "$@"\n')
    ldd = hide("/usr/bin/ldd")
    Path("/usr/bin/ldd").write_text(
        "#!/bin/sh\n"
        "# ascendai.vllm test node: reports the distribution's glibc (Debian's real one runs underneath)\n"
        'if [ "$1" = --version ] || [ "$1" = -v ]; then\n'
        f'  echo "ldd (GNU libc) {version}"\n'
        '  echo "Copyright (C) 2018 Free Software Foundation, Inc."\n'
        '  echo "This is free software; see the source for copying conditions.  There is NO"\n'
        '  echo "warranty; not even for MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE."\n'
        '  echo "Written by Roland McGrath and Ulrich Drepper."\n'
        "  exit 0\n"
        "fi\n"
        f'exec {ldd} "$@"\n')
    os.chmod("/usr/bin/getconf", 0o755)
    os.chmod("/usr/bin/ldd", 0o755)


def configure_dnf(node: dict) -> None:
    repos = Path("/etc/yum.repos.d")
    repos.mkdir(exist_ok=True)
    for f in repos.iterdir():
        f.unlink()
    (repos / node["repo"]["file"]).write_text(
        f"[{node['repo']['id']}]\n"
        f"name={node['repo']['name']}\n"
        f"baseurl=file://{REPO}\n"
        "enabled=1\n"
        # the stand-ins are unsigned; the real repositories sign with the distribution's key
        "gpgcheck=0\n")
    if node.get("extra_repo"):
        # An operator's repository for what the distribution lacks, off by default as such repositories usually are:
        # a role names it (dnf --enablerepo) where it needs it.
        (repos / node["extra_repo"]["file"]).write_text(
            f"[{node['extra_repo']['id']}]\n"
            f"name={node['extra_repo']['name']}\n"
            f"baseurl=file://{EXTRA_REPO}\n"
            "enabled=0\n"
            "gpgcheck=0\n")
    Path("/etc/dnf/dnf.conf").write_text(
        "[main]\n"
        "gpgcheck=1\n"
        "installonly_limit=3\n"
        "clean_requirements_on_remove=True\n"
        "best=True\n"
        "skip_if_unavailable=False\n"
        "reposdir=/etc/yum.repos.d\n")
    # Kylin and openEuler ship /usr/bin/yum as a link to dnf-3.
    if not Path("/usr/bin/yum").exists():
        os.symlink("dnf-3", "/usr/bin/yum")


def main() -> None:
    name = sys.argv[1]
    node = json.loads((HERE / f"{name}.json").read_text())
    arch = platform.machine()
    kernel = node["kernel"]
    log(f"{node['title']}: release files, stand-in RPMs, python3, glibc {node['glibc']}")
    write_release_files(node)
    for unit in node.get("hide_debian_units", []):
        for where in ("/etc/systemd/system/multi-user.target.wants", "/usr/lib/systemd/system"):
            p = Path(where) / unit
            if p.is_symlink():
                p.unlink()
            elif p.exists():
                hide(str(p))
        # The Debian package's SysV script too: systemd-sysv-generator would otherwise make an LSB unit of the same
        # name (no User=, started at boot), which neither distribution has; and its rc?.d links.
        stem = unit.removesuffix(".service")
        script = Path("/etc/init.d") / stem
        if script.exists():
            hide(str(script))
        for link in Path("/etc").glob(f"rc?.d/[SK][0-9][0-9]{stem}"):
            link.unlink()
    built = build_rpms(node, arch, kernel)
    run("createrepo_c", "--quiet", str(REPO))
    if EXTRA_REPO.is_dir():
        run("createrepo_c", "--quiet", str(EXTRA_REPO))
    # The rows a minimal install already has: into the rpm database, without their (empty or link) payload
    # conflicting with the Debian files they stand for. --force-debian: Debian's rpm otherwise warns that
    # dpkg owns the system.
    installed = [p for p in built if any(p.name.startswith(f"{r['name']}-{r['version']}-")
                                         for r in node["packages"] if r.get("installed"))]
    run("rpm", "-i", "--force-debian", "--nodeps", "--justdb", *map(str, installed))
    configure_dnf(node)
    install_python(node)
    glibc_wrappers(node)
    (HOME / "README.md").write_text((HERE / "README.md").read_text())
    (HOME / "node.json").write_text(json.dumps(node, indent=1))
    log(f"{len(built)} stand-in RPMs in {REPO}, {len(installed)} installed")


if __name__ == "__main__":
    main()
