#!/usr/bin/env bash
# Make this machine a sandbox host: a running Docker engine and the cached base images.
#
#   tools/sandbox-host.sh            ensure dockerd runs, build images when their recipe changed
#   tools/sandbox-host.sh --print    print the image names (base, simulated Atlas node)
#
# No container registry is reachable here, so the base image is made with debootstrap
# (Debian 12 + systemd + python3) and tagged by a hash of its recipe: a second run reuses it.
# The simulated Atlas node image (tests/simulator) is layered on top, tagged the same way.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SUITE=bookworm
PACKAGES=python3,systemd,systemd-sysv,sudo,dbus,procps,iproute2,ca-certificates,python3-apt
log() { printf '[sandbox-host] %s\n' "$*" >&2; }

base_hash() {
  { echo "$SUITE $PACKAGES v1"; } | sha256sum | cut -c1-12
}
sim_hash() {
  # everything under tests/simulator that goes into the image
  (cd "$ROOT" && find tests/simulator -type f 2>/dev/null ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | sort -z |
    xargs -0 sha256sum; echo "base $(base_hash)") | sha256sum | cut -c1-12
}
BASE_IMAGE="ascendai-vllm-base:$(base_hash)"
if [[ -f "$ROOT/tests/simulator/Dockerfile" ]]; then
  SIM_IMAGE="ascendai-vllm-atlas-sim:$(sim_hash)"
else
  SIM_IMAGE=$BASE_IMAGE
fi

if [[ "${1:-}" == "--print" ]]; then
  echo "BASE_IMAGE=$BASE_IMAGE"
  echo "SIM_IMAGE=$SIM_IMAGE"
  exit 0
fi

apt_install() {
  if [[ -z "${_APT_UPDATED:-}" ]]; then apt-get update -qq; _APT_UPDATED=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_docker() {
  if docker info >/dev/null 2>&1; then return 0; fi
  if [[ ! -x /usr/sbin/dockerd ]]; then
    log "installing Debian's docker.io (no Docker engine here)"
    apt_install docker.io
  fi
  log "starting dockerd"
  # A dockerd killed with its session leaves its pid files behind.
  local f
  for f in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
    if [[ -f $f ]] && ! kill -0 "$(cat "$f")" 2>/dev/null; then rm -f "$f"; fi
  done
  mkdir -p /var/log
  nohup /usr/sbin/dockerd >/var/log/ascendai-dockerd.log 2>&1 &
  for _ in $(seq 1 60); do
    docker info >/dev/null 2>&1 && return 0
    sleep 1
  done
  log "dockerd did not come up; see /var/log/ascendai-dockerd.log"
  tail -20 /var/log/ascendai-dockerd.log >&2 || true
  exit 1
}

ensure_base_image() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    log "base image $BASE_IMAGE cached"
    return 0
  fi
  command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
  local rootfs
  rootfs=$(mktemp -d /var/tmp/ascendai-rootfs.XXXXXX)
  log "debootstrap $SUITE into $rootfs (about 2 minutes)"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" >/var/tmp/ascendai-debootstrap.log 2>&1 || {
    tail -30 /var/tmp/ascendai-debootstrap.log >&2; exit 1; }
  # A container needs no getty, no udev settle, and no network wait.
  rm -f "$rootfs"/etc/systemd/system/getty.target.wants/* \
        "$rootfs"/lib/systemd/system/multi-user.target.wants/getty.target || true
  echo "ascendai-sandbox" > "$rootfs/etc/hostname"
  tar -C "$rootfs" -c . | docker import \
      -c 'CMD ["/lib/systemd/systemd"]' -c 'ENV container=docker' \
      - "$BASE_IMAGE" >/dev/null
  rm -rf "$rootfs"
  log "built $BASE_IMAGE"
}

ensure_sim_image() {
  [[ -f "$ROOT/tests/simulator/Dockerfile" ]] || return 0
  if docker image inspect "$SIM_IMAGE" >/dev/null 2>&1; then
    log "simulated Atlas image $SIM_IMAGE cached"
    return 0
  fi
  docker build -q --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$SIM_IMAGE" \
      -f "$ROOT/tests/simulator/Dockerfile" "$ROOT/tests/simulator" >/dev/null
  log "built $SIM_IMAGE"
}

ensure_docker
ensure_base_image
ensure_sim_image
echo "BASE_IMAGE=$BASE_IMAGE"
echo "SIM_IMAGE=$SIM_IMAGE"
