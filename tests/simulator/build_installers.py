#!/usr/bin/env python3
"""Build SIMULATED Ascend installer packages (.run) for the simulated Atlas node (test infrastructure only).

    tests/simulator/build_installers.py OUTDIR [--set default|n|n+1] [--driver-version V] [--firmware-version V]
        [--cann-version V] [--arch aarch64|x86_64] [--only driver,firmware,toolkit,kernels,nnal] [overrides]

Each package is a self-contained bash script (makeself-like): a header that checks the SHA256 of the payload
and unpacks it, then a base64 tar.gz payload holding the stdlib-only Python install logic (atlas_sim).
Real file names and the documented options are used; see tests/simulator/README.md.
"""

import argparse
import base64
import hashlib
import io
import json
import os
import platform
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from atlas_sim import SIMULATED_NOTE, versions  # noqa: E402

CANN_COMPAT = "[V100R001C15],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21],[V100R001C23]"
FW_COMPAT_DRV = "[24.1.rc1,24.1.rc3.],[24.1.0,24.1.0.],[25.0.rc1,25.2.0.]"

# Two releases: N (older) and N+1 (the sandbox default, for vllm-ascend v0.11.0 / v0.12.0rc1 which need CANN
# 8.3.RC2; N's CANN 8.2.RC1 fits vllm-ascend v0.9.1 and v0.10.x). N+1's driver and firmware are Ascend HDK 25.5.1,
# the collection's default (roles/ascend_driver/defaults): driver 25.5.1 with firmware 7.8.0.6.201, the HDK that
# Huawei's release notes pair with CANN 8.5.x, 9.0.x and 9.1.x (hicann/release-management 8.5.0, 9.0.0, 9.1.0
# release-notes.md; docs/sources.md). 25.5.1's Innerversion V100R001C23SPC006B220: public captures (docs/sources.md);
# its compatible_version_fw and the firmware's compatible_version_drv: assumption.
DRIVERS = {
    "24.1.rc3": {"innerversion": "V100R001C19SPC002B230",
                 "compatible_version": "[V100R001C15],[V100R001C17],[V100R001C18],[V100R001C19],[V100R001C20],"
                                       "[V100R001C21],[V100R001C22],[V100R001C23]",
                 "compatible_version_fw": "[7.0.0,7.7.99]"},
    "25.2.0": {"innerversion": "V100R001C23SPC001B211",
               "compatible_version": "[V100R001C15],[V100R001C17],[V100R001C18],[V100R001C19],[V100R001C20],"
                                     "[V100R001C21],[V100R001C22],[V100R001C23]",
               "compatible_version_fw": "[7.0.0,7.7.99]"},
    "25.5.1": {"innerversion": "V100R001C23SPC006B220",
               "compatible_version": "[V100R001C15],[V100R001C17],[V100R001C18],[V100R001C19],[V100R001C20],"
                                     "[V100R001C21],[V100R001C22],[V100R001C23]",
               "compatible_version_fw": "[7.0.0,7.8.99]"},
}
FIRMWARES = {
    "7.5.0.1.129": {"package_version": "24.1.rc3", "compatible_version_drv": FW_COMPAT_DRV},
    "7.7.0.1.231": {"package_version": "25.2.0", "compatible_version_drv": FW_COMPAT_DRV},
    "7.8.0.6.201": {"package_version": "25.5.1",
                    "compatible_version_drv": "[24.1.rc1,24.1.rc3.],[24.1.0,24.1.0.],[25.0.rc1,25.5.1.]"},
}
# CANN 8.5.0's ascend_toolkit_install.info: innerversion V100R001C25SPC001B232, compatible_version
# [V100R001C15],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21],[V100R001C23]
# (https://github.com/vllm-project/vllm-ascend/issues/6271); 8.5.1's and 9.1.0's innerversion: assumption.
CANN85_COMPAT = "[V100R001C15],[V100R001C18],[V100R001C19],[V100R001C20],[V100R001C21],[V100R001C23]"
CANNS = {
    "8.2.RC1": {"innerversion": "V100R001C22SPC001B231", "compatible_version": CANN_COMPAT,
                "inner_build": "8.2.0.1.231"},
    "8.3.RC2": {"innerversion": "V100R001C23SPC002B210", "compatible_version": CANN_COMPAT,
                "inner_build": "8.3.0.2.210"},
    "8.5.1": {"innerversion": "V100R001C25SPC002B220", "compatible_version": CANN85_COMPAT,
              "inner_build": "8.5.1.2.220"},
    "9.1.0": {"innerversion": "V100R001C27SPC001B150", "compatible_version": CANN85_COMPAT,
              "inner_build": "9.1.0.1.150"},
}
# CANN releases built besides the sets (CANN only; they run on the n+1 driver 25.5.1): the 8.5 and 9.x generations.
EXTRA_CANNS = ("8.5.1", "9.1.0")
SETS = {
    "n": {"driver": "24.1.rc3", "firmware": "7.5.0.1.129", "cann": "8.2.RC1"},
    "n+1": {"driver": "25.5.1", "firmware": "7.8.0.6.201", "cann": "8.3.RC2"},
}
SETS["default"] = SETS["n+1"]
KINDS = ("driver", "firmware", "toolkit", "kernels", "nnal")
LABELS = {"driver": "ASCEND DRIVER RUN PACKAGE", "firmware": "ASCEND-HDK-910B-NPU FIRMWARE RUN PACKAGE",
          "toolkit": "ASCEND_RUN_PACKAGE", "kernels": "ASCEND_RUN_PACKAGE", "nnal": "ASCEND_RUN_PACKAGE"}

HEADER = r"""#!/bin/bash
# {filename}
# SIMULATED Ascend run package (ascendai.vllm test infrastructure, tests/simulator): no real driver inside.
LABEL="{label}"
VERSION="{version}"
SHA256="{sha256}"
FILENAME="{filename}"
usage() {{
  cat <<'USAGE_EOF'
Usage: ./{filename} [options]
Options:
  --help | -h                  Print this message
  --version                    Print the version of the package
  --info                       Print embedded info : title, default target directory, embedded script ...
  --list                       Print the list of files in the archive
  --check                      Checks integrity and version dependency of the archive
  --quiet                      Quiet install mode, skip human-computer interactions
  --nox11                      Do not spawn an xterm
  --noexec --extract=<path>    Do not run the embedded script, extract the files to <path>
  --tar arg1 [arg2 ...]        Access the contents of the archive through the tar command
  --full                       Install the full package (driver, firmware)
  --install                    Install the package
  --run                        Install the run mode files
  --devel                      Install the development mode files
  --upgrade                    Upgrade the package
  --uninstall                  Uninstall the package
  --install-path=<path>        Install to the specified path (default /usr/local/Ascend)
  --install-username=<user>    Run user of the package (default HwHiAiUser)
  --install-usergroup=<group>  Run group of the package (default HwHiAiUser)
  --install-for-all            Allow all users to use the installed package
  --force                      Skip the version relationship check
USAGE_EOF
  echo "{note}"
}}
extract_to() {{
  local skip
  skip=$(awk '/^__ATLAS_SIM_PAYLOAD_BELOW__$/ {{ print NR + 1; exit 0 }}' "$0")
  tail -n +"$skip" "$0" | base64 -d > "$1/payload.tar.gz"
}}
# makeself's --tar ARG1 [ARGS]: the payload through "tar ARG1 - ARGS", without the integrity check
# (makeself-header.sh, https://github.com/megastep/makeself/blob/release-2.5.0/makeself-header.sh#L435-L445)
if [ "$1" = "--tar" ]; then
  arg1="$2"; shift 2 || {{ usage; exit 1; }}
  skip=$(awk '/^__ATLAS_SIM_PAYLOAD_BELOW__$/ {{ print NR + 1; exit 0 }}' "$0")
  tail -n +"$skip" "$0" | base64 -d | gzip -dc | tar "$arg1" - "$@"
  exit 0
fi
noexec=n; extract=""
for arg in "$@"; do
  case "$arg" in
    -h|--help) usage; exit 0 ;;
    --version) echo "$VERSION"; exit 0 ;;
    --info) echo "Identification: $LABEL"; echo "Target directory: $FILENAME"; echo "Version: $VERSION"; exit 0 ;;
    --noexec) noexec=y ;;
    --extract=*) extract="${{arg#--extract=}}" ;;
  esac
done
tmp=$(mktemp -d "${{TMPDIR:-/tmp}}/atlas-sim-run.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
extract_to "$tmp"
actual=$(sha256sum "$tmp/payload.tar.gz" | cut -d' ' -f1)
if [ "$actual" != "$SHA256" ]; then
  echo "Verifying archive integrity...Error in SHA256 checksums: $actual is different from $SHA256"
  exit 1
fi
echo "Verifying archive integrity...  100%   SHA256 checksums are OK. All good."
for arg in "$@"; do
  case "$arg" in
    --check) exit 0 ;;
    --list) tar -tzf "$tmp/payload.tar.gz"; exit 0 ;;
  esac
done
if [ "$noexec" = y ]; then
  dest="${{extract:-$PWD}}"; mkdir -p "$dest" && tar -xzf "$tmp/payload.tar.gz" -C "$dest"
  echo "Uncompressing $LABEL  100%  "; exit 0
fi
tar -xzf "$tmp/payload.tar.gz" -C "$tmp" || exit 1
echo "Uncompressing $LABEL  100%  "
PYTHONPATH="$tmp${{PYTHONPATH:+:$PYTHONPATH}}" python3 -m atlas_sim.installer --package-meta "$tmp/package.json" -- "$@"
exit $?
__ATLAS_SIM_PAYLOAD_BELOW__
"""


def cann_ops_generation(version):
    """True from CANN 8.5.0 on: the kernels package is Ascend-cann-910b-ops_* (vllm-ascend installation.md at
    v0.14.0rc1, 8.5.0, and later; Ascend-cann-kernels-910b_* up to 8.3.RC2 at v0.11.0) and CANN installs under
    <path>/cann-<version> (Huawei's cann-container-image, 8.5.1 and 9.x)."""
    return versions.compare(version, "8.5.0") >= 0


def filename(kind, version, arch):
    drv_arch = "x86-64" if arch == "x86_64" else arch
    return {
        "driver": "Ascend-hdk-910b-npu-driver_%s_linux-%s.run" % (version, drv_arch),
        "firmware": "Ascend-hdk-910b-npu-firmware_%s.run" % version,
        "toolkit": "Ascend-cann-toolkit_%s_linux-%s.run" % (version, arch),
        "kernels": ("Ascend-cann-910b-ops_%s_linux-%s.run" if cann_ops_generation(version)
                    else "Ascend-cann-kernels-910b_%s_linux-%s.run") % (version, arch),
        "nnal": "Ascend-cann-nnal_%s_linux-%s.run" % (version, arch),
    }[kind]


def version_files(meta):
    """The version file(s) of the extracted package (``--noexec --extract=DIR``, ``--tar``), at the place a real
    package has them: the driver ``version.info`` at the top, which its installer reads
    (https://github.com/verylucky01/driver/blob/e29d066/scripts/package/custom/driver/common/scripts/env_check.sh#L366-L372,
    ver_check.sh#L100-L104), with the text the install leaves in /usr/local/Ascend/driver/version.info;
    ``firmware/version.info`` (assumption: the firmware installer is not published); the CANN packages a
    ``version.info`` at the top (simulator choice: no capture of an extracted CANN package exists), holding the
    version, innerversion and ``compatible_version``."""
    kind = meta["kind"]
    if kind == "driver":
        pairs = [("Version", meta["version"]), ("ascendhal_version", "7.35.23"), ("aicpu_version", "1.0"),
                 ("tdt_version", "1.0"), ("log_version", "1.0"), ("prof_version", "2.0"),
                 ("dvppkernels_version", "1.1"), ("tsfw_version", "1.0"), ("Innerversion", meta["innerversion"]),
                 ("compatible_version", meta["compatible_version"]),
                 ("compatible_version_fw", meta["compatible_version_fw"]), ("package_version", meta["version"])]
        return {"version.info": pairs}
    if kind == "firmware":
        return {"firmware/version.info": [("Version", meta["version"]), ("firmware_version", "1.0"),
                                          ("package_version", meta["package_version"]),
                                          ("compatible_version_drv", meta["compatible_version_drv"])]}
    names = {"toolkit": "Ascend-cann-toolkit", "nnal": "Ascend-cann-nnal",
             "kernels": filename("kernels", meta["version"], meta["arch"]).split("_")[0]}
    return {"version.info": [("package_name", names[kind]), ("Version", meta["version"]),
                             ("innerversion", meta["innerversion"]),
                             ("compatible_version", meta["compatible_version"]), ("arch", meta["arch"]),
                             ("os", "linux")]}


def _add(tar, name, data, mode=0o644):
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def _payload(meta):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        # makeself archives the directory as "tar cf - ." (member names start with "./")
        for name, pairs in sorted(version_files(meta).items()):
            _add(tar, "./" + name, "".join("%s=%s\n" % pair for pair in pairs).encode())
        pkg = os.path.join(HERE, "atlas_sim")
        for name in sorted(os.listdir(pkg)):
            if name.endswith(".py"):
                info = tarfile.TarInfo("atlas_sim/" + name)
                data = open(os.path.join(pkg, name), "rb").read()
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))
        data = json.dumps(meta, indent=2, sort_keys=True).encode()
        info = tarfile.TarInfo("package.json")
        info.size, info.mode, info.mtime = len(data), 0o644, 0
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def build(outdir, kind, meta):
    payload = _payload(meta)
    text = HEADER.format(filename=meta["filename"], label=LABELS[kind], version=meta["version"],
                         sha256=hashlib.sha256(payload).hexdigest(), note=SIMULATED_NOTE)
    encoded = base64.encodebytes(payload).decode()
    target = os.path.join(outdir, meta["filename"])
    with open(target, "w") as handle:
        handle.write(text + encoded)
    os.chmod(target, 0o755)
    return target


def metas(args):
    chosen = dict(SETS[args.set])
    chosen["driver"] = args.driver_version or chosen["driver"]
    chosen["firmware"] = args.firmware_version or chosen["firmware"]
    chosen["cann"] = args.cann_version or chosen["cann"]
    arch = args.arch
    out = {}
    drv = dict(DRIVERS.get(chosen["driver"], DRIVERS[SETS["default"]["driver"]]))
    if args.driver_innerversion:
        drv["innerversion"] = args.driver_innerversion
    if args.driver_compatible_fw:
        drv["compatible_version_fw"] = args.driver_compatible_fw
    out["driver"] = dict(drv, version=chosen["driver"])
    fw = dict(FIRMWARES.get(chosen["firmware"], FIRMWARES[SETS["default"]["firmware"]]))
    if args.firmware_compatible_drv:
        fw["compatible_version_drv"] = args.firmware_compatible_drv
    out["firmware"] = dict(fw, version=chosen["firmware"])
    cann = dict(CANNS.get(chosen["cann"], CANNS["8.3.RC2"]))
    if args.cann_compatible:
        cann["compatible_version"] = args.cann_compatible
    for kind in ("toolkit", "kernels", "nnal"):
        out[kind] = dict(cann, version=chosen["cann"])
    for kind, meta in out.items():
        meta.update(kind=kind, arch=arch, filename=filename(kind, meta["version"], arch))
    return out


def parser():
    p = argparse.ArgumentParser(description="Build SIMULATED Ascend installer packages. " + SIMULATED_NOTE)
    p.add_argument("outdir")
    p.add_argument("--set", default="default", choices=sorted(SETS))
    p.add_argument("--driver-version")
    p.add_argument("--firmware-version")
    p.add_argument("--cann-version")
    p.add_argument("--arch", default="aarch64" if platform.machine() in ("aarch64", "arm64") else "x86_64",
                   choices=["aarch64", "x86_64"])
    p.add_argument("--only", default=",".join(KINDS), help="comma list of: " + ",".join(KINDS))
    p.add_argument("--driver-innerversion")
    p.add_argument("--driver-compatible-fw", help="e.g. [7.0.0,7.2.99]")
    p.add_argument("--firmware-compatible-drv", help="e.g. [23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.]")
    p.add_argument("--cann-compatible", help="e.g. [V100R001C15],[V100R001C17]")
    return p


def main(argv=None):
    args = parser().parse_args(argv)
    os.makedirs(args.outdir, exist_ok=True)
    wanted = [k.strip() for k in args.only.split(",") if k.strip()]
    for kind, meta in metas(args).items():
        if kind in wanted:
            print(build(args.outdir, kind, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
