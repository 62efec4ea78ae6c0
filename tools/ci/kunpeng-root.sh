#!/usr/bin/env bash
# Test infrastructure: an emulated Kunpeng (aarch64) Debian 12 root for the vllm role's ascend flavour.
#
#   tools/ci/kunpeng-root.sh          ensure it, print its path (.cache/kunpeng-root)
#
# No aarch64 machine and no container registry here: qemu-user-static (Debian's) runs aarch64 binaries
# through binfmt_misc, and debootstrap --arch=arm64 makes the root from Debian's archive. The test drives it
# with the community.general.chroot connection (tests/integration/roles/test_vllm_role_kunpeng.py). Cached: a second
# run reuses the root (stamp = the recipe). The test never changes it: it runs on an overlay of it.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEST=${KUNPENG_ROOT:-$ROOT/.cache/kunpeng-root}
PACKAGES=python3,python3-venv,python3-pip,python3-apt,ca-certificates
# v2: the test now works on an overlay; roots of v1 had the test's venv installed in them.
STAMP="bookworm arm64 minbase $PACKAGES v2"
log() { printf '[kunpeng-root] %s\n' "$*" >&2; }

if ! command -v qemu-aarch64-static >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
  log "installing qemu-user-static and debootstrap (Debian)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-user-static debootstrap >/dev/null
fi
if [[ ! -e /proc/sys/fs/binfmt_misc/register ]]; then
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
if [[ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]]; then
  log "registering qemu-aarch64 with binfmt_misc"
  cat /usr/lib/binfmt.d/qemu-aarch64.conf > /proc/sys/fs/binfmt_misc/register
fi

if [[ -f $DEST/.ascendai-stamp && "$(cat "$DEST/.ascendai-stamp")" == "$STAMP" ]]; then
  log "cached: $DEST"
else
  log "debootstrap arm64 into $DEST (a few minutes)"
  rm -rf "$DEST"
  debootstrap --arch=arm64 --variant=minbase --include="$PACKAGES" bookworm "$DEST" \
    "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >/dev/null
  echo "$STAMP" > "$DEST/.ascendai-stamp"
fi
chroot "$DEST" /usr/bin/python3 -c 'import platform; assert platform.machine() == "aarch64", platform.machine()'
echo "$DEST"
