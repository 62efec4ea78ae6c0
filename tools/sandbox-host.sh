#!/usr/bin/env bash
# Make this machine a sandbox host: a running Docker engine and the cached base images.
#
#   tools/sandbox-host.sh              ensure dockerd runs, build images when their recipe changed
#   tools/sandbox-host.sh --print      print the image names (base, simulated Atlas node, controller)
#   tools/sandbox-host.sh controller   also build the newest-Ansible controller image
#
# No container registry is reachable here, so the base image is made with debootstrap
# (Debian 12 + systemd + python3 + sshd) and tagged by a hash of its recipe: a second run reuses it.
# The simulated Atlas node image (tests/simulator) is layered on top, tagged the same way.
# The node runs sshd with a non-root user `ansible` (passwordless sudo, no password, key login
# only; the test writes its public key into ~ansible/.ssh/authorized_keys when it starts a node).
# The controller image (Debian 13 + python3 3.13 + a venv with the newest ansible 14.x,
# tools/controller14-requirements.txt) is made the same way: the newest controller, which reaches
# the node over SSH (tools/controller14.sh).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SUITE=bookworm
PACKAGES=python3,systemd,systemd-sysv,sudo,dbus,procps,iproute2,ca-certificates,python3-apt,openssh-server
# The controller: Debian 13, whose python3 is 3.13; git for ansible-test, ssh for the connection.
CTL_SUITE=trixie
CTL_PACKAGES=python3,python3-venv,ca-certificates,openssh-client,git,procps,iproute2
log() { printf '[sandbox-host] %s\n' "$*" >&2; }

base_hash() {
  { echo "$SUITE $PACKAGES v2 ansible-user"; } | sha256sum | cut -c1-12
}
ctl_hash() {
  { echo "$CTL_SUITE $CTL_PACKAGES v1"; cat "$ROOT/tools/controller14-requirements.txt"; } | sha256sum | cut -c1-12
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
CONTROLLER_IMAGE="ascendai-vllm-controller14:$(ctl_hash)"

if [[ "${1:-}" == "--print" ]]; then
  echo "BASE_IMAGE=$BASE_IMAGE"
  echo "SIM_IMAGE=$SIM_IMAGE"
  echo "CONTROLLER_IMAGE=$CONTROLLER_IMAGE"
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
  # SSH as on a real site: a non-root user with passwordless sudo and key login only ('*': no
  # password, yet not locked). A container may not set the audit login uid: pam_loginuid would end
  # every session, so it is optional here. The host keys are made once, at build time (a test image).
  chroot "$rootfs" useradd --create-home --shell /bin/bash --password '*' ansible
  install -d -m 0700 "$rootfs/home/ansible/.ssh"
  chroot "$rootfs" chown ansible:ansible /home/ansible/.ssh
  echo 'ansible ALL=(ALL:ALL) NOPASSWD: ALL' > "$rootfs/etc/sudoers.d/ansible"
  chmod 0440 "$rootfs/etc/sudoers.d/ansible"
  sed -i 's/^session\s\+required\s\+pam_loginuid.so/session optional pam_loginuid.so/' "$rootfs/etc/pam.d/sshd"
  printf 'PasswordAuthentication no\nPermitRootLogin no\n' > "$rootfs/etc/ssh/sshd_config.d/ascendai.conf"
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

ensure_controller_image() {
  if docker image inspect "$CONTROLLER_IMAGE" >/dev/null 2>&1; then
    log "controller image $CONTROLLER_IMAGE cached"
    return 0
  fi
  command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
  local rootfs ctx
  rootfs=$(mktemp -d /var/tmp/ascendai-ctlfs.XXXXXX)
  log "debootstrap $CTL_SUITE into $rootfs (about 2 minutes)"
  debootstrap --variant=minbase --include="$CTL_PACKAGES" "$CTL_SUITE" "$rootfs" >/var/tmp/ascendai-debootstrap-ctl.log 2>&1 || {
    tail -30 /var/tmp/ascendai-debootstrap-ctl.log >&2; exit 1; }
  tar -C "$rootfs" -c . | docker import -c 'CMD ["/bin/bash"]' - "$CONTROLLER_IMAGE-rootfs" >/dev/null
  rm -rf "$rootfs"
  # The venv: pip reaches PyPI from the build container. This site's extra CA certificates (a TLS
  # proxy) go in with it, so that pip trusts what the host trusts.
  ctx=$(mktemp -d /var/tmp/ascendai-ctlctx.XXXXXX)
  mkdir -p "$ctx/ca"
  cp /usr/local/share/ca-certificates/*.crt "$ctx/ca/" 2>/dev/null || true
  cp "$ROOT/tools/controller14-requirements.txt" "$ctx/requirements.txt"
  cat > "$ctx/Dockerfile" <<'DOCKERFILE'
ARG ROOTFS
FROM ${ROOTFS}
COPY ca/ /usr/local/share/ca-certificates/
COPY requirements.txt /opt/controller14-requirements.txt
RUN update-ca-certificates >/dev/null \
 && python3 -m venv /opt/ansible \
 && /opt/ansible/bin/pip install -q --disable-pip-version-check --no-cache-dir -r /opt/controller14-requirements.txt
ENV PATH=/opt/ansible/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8
DOCKERFILE
  docker build -q --build-arg "ROOTFS=$CONTROLLER_IMAGE-rootfs" -t "$CONTROLLER_IMAGE" "$ctx" >/dev/null
  docker image rm "$CONTROLLER_IMAGE-rootfs" >/dev/null 2>&1 || true
  rm -rf "$ctx"
  log "built $CONTROLLER_IMAGE"
}

ensure_docker
ensure_base_image
ensure_sim_image
[[ "${1:-}" != "controller" ]] || ensure_controller_image
echo "BASE_IMAGE=$BASE_IMAGE"
echo "SIM_IMAGE=$SIM_IMAGE"
echo "CONTROLLER_IMAGE=$CONTROLLER_IMAGE"
