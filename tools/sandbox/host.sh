#!/usr/bin/env bash
# Make this machine a sandbox host: a running Docker engine and the cached base images.
#
#   tools/sandbox/host.sh              ensure dockerd runs, build images when their recipe changed
#   tools/sandbox/host.sh --print      print the image names (base, simulated Atlas node, controller)
#   tools/sandbox/host.sh controller   also build the newest-Ansible controller image
#   tools/sandbox/host.sh rpm-nodes    also build the RPM-family nodes (Kylin V10 SP3, openEuler 22.03 LTS SP4)
#
# No container registry is reachable here, so the base image is made with debootstrap
# (Debian 12 + systemd + python3 + sshd) and tagged by a hash of its recipe: a second run reuses it.
# The simulated Atlas node image (tests/simulator) is layered on top, tagged the same way.
# The node runs sshd with a non-root user `ansible` (passwordless sudo, no password, key login
# only; the test writes its public key into ~ansible/.ssh/authorized_keys when it starts a node).
# The controller image (Debian 13 + python3 3.13 + a venv with the newest ansible 14.x,
# tools/ci/controller14-requirements.txt) is made the same way: the newest controller, which reaches
# the node over SSH (tools/ci/controller14.sh).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
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
  { echo "$CTL_SUITE $CTL_PACKAGES v1"; cat "$ROOT/tools/ci/controller14-requirements.txt"; } | sha256sum | cut -c1-12
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

# The RPM-family nodes (tests/rpm_nodes/README.md): Debian's rpm/dnf/createrepo-c, stand-in RPMs, the
# distribution's release files, python3 minor and glibc version, then the simulated Atlas layer. Their python3 is
# copied from this host's pyenv (CPython 3.7 for Kylin V10, 3.9 for openEuler 22.03); a host without one gets
# Debian 11's python2.7 / python3.9 instead (the same effect on ansible-core 2.19: refused / accepted), which the
# hash records, so the two never share a tag.
rpm_python_dir() {  # MINOR -> the newest pyenv CPython of that minor on this host, or nothing
  local root d
  # ASCENDAI_RPM_NODE_PYTHON=fallback: build as a host without pyenv would (to check that path here)
  [[ ${ASCENDAI_RPM_NODE_PYTHON:-} != fallback ]] || return 0
  for root in "$(pyenv root 2>/dev/null || true)" "${PYENV_ROOT:-}" "$HOME/.pyenv" /root/.pyenv; do
    [[ -n $root && -d $root/versions ]] || continue
    d=$(find "$root/versions" -maxdepth 1 -name "$1.*" -type d 2>/dev/null | sort -V | tail -1)
    if [[ -n $d && -x $d/bin/python$1 ]]; then echo "$d"; return 0; fi
  done
}
rpm_python_source() {  # NODE -> "pyenv <version>" or "fallback"
  local d
  d=$(rpm_python_dir "$(rpm_node_minor "$1")")
  if [[ -n $d ]]; then echo "pyenv $(basename "$d")"; else echo fallback; fi
}
rpm_node_minor() { case $1 in kylin_v10) echo 3.7 ;; openeuler_22.03) echo 3.9 ;; esac; }
rpm_hash() {  # NODE
  (cd "$ROOT" && find tests/rpm_nodes -type f ! -name '*.pyc' ! -path '*/__pycache__/*' ! -path 'tests/rpm_nodes/tests/*' \
     -print0 | sort -z | xargs -0 sha256sum; echo "$1 base $(base_hash) python $(rpm_python_source "$1")") |
    sha256sum | cut -c1-12
}
rpm_sim_hash() { echo "$(rpm_hash "$1") $(sim_hash)" | sha256sum | cut -c1-12; }
KYLIN_RPM_IMAGE="ascendai-vllm-rpmnode-kylin-v10:$(rpm_hash kylin_v10)"
OPENEULER_RPM_IMAGE="ascendai-vllm-rpmnode-openeuler-2203:$(rpm_hash openeuler_22.03)"
KYLIN_IMAGE="ascendai-vllm-kylin-v10-sim:$(rpm_sim_hash kylin_v10)"
OPENEULER_IMAGE="ascendai-vllm-openeuler-2203-sim:$(rpm_sim_hash openeuler_22.03)"

print_images() {
  echo "BASE_IMAGE=$BASE_IMAGE"
  echo "SIM_IMAGE=$SIM_IMAGE"
  echo "CONTROLLER_IMAGE=$CONTROLLER_IMAGE"
  echo "KYLIN_IMAGE=$KYLIN_IMAGE"
  echo "OPENEULER_IMAGE=$OPENEULER_IMAGE"
}

if [[ "${1:-}" == "--print" ]]; then
  print_images
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
  cp "$ROOT/tools/ci/controller14-requirements.txt" "$ctx/requirements.txt"
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

ensure_rpm_node() {  # NODE RPM_IMAGE SIM_LAYER_IMAGE
  local node=$1 rpm_image=$2 image=$3 ctx pydir fallback='' start=$SECONDS
  if docker image inspect "$image" >/dev/null 2>&1; then
    log "$node node $image cached"
    return 0
  fi
  if ! docker image inspect "$rpm_image" >/dev/null 2>&1; then
    ctx=$(mktemp -d /var/tmp/ascendai-rpmctx.XXXXXX)
    mkdir -p "$ctx/recipe" "$ctx/python"
    cp "$ROOT"/tests/rpm_nodes/Dockerfile "$ROOT"/tests/rpm_nodes/build_node.py "$ROOT"/tests/rpm_nodes/*.json \
       "$ROOT"/tests/rpm_nodes/README.md "$ctx/recipe/"
    pydir=$(rpm_python_dir "$(rpm_node_minor "$node")")
    if [[ -n $pydir ]]; then
      # bin/ and lib/ only, without the test suite, Tk and the static library (about a third of the size)
      tar -C "$pydir" -c --exclude='*/test' --exclude='*/tests' --exclude='*/idlelib' --exclude='*/tkinter' \
          --exclude='*/turtledemo' --exclude='*/__pycache__' --exclude='*.a' --exclude='*/config-3*' bin lib |
        tar -C "$ctx/python" -x
      echo "pyenv $(basename "$pydir") from $pydir" > "$ctx/python/SOURCE"
    else
      fallback=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["python"]["fallback"]["debs"])' \
                 "$ROOT/tests/rpm_nodes/$node.json")
      log "DEVIATION: no pyenv CPython $(rpm_node_minor "$node") on this host: the $node node's /usr/bin/python3" \
          "comes from Debian 11's $fallback (the same effect on ansible-core 2.19; tests/rpm_nodes/README.md)"
      echo "fallback: Debian 11 $fallback" > "$ctx/python/SOURCE"
    fi
    log "building the $node node (Debian 12 + rpm/dnf + stand-in RPMs, about 2 minutes)"
    docker build -q --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "NODE=$node" \
        --build-arg "PYTHON_FALLBACK_DEBS=$fallback" -t "$rpm_image" -f "$ctx/recipe/Dockerfile" "$ctx" >/dev/null
    rm -rf "$ctx"
  fi
  docker build -q --build-arg "BASE_IMAGE=$rpm_image" -t "$image" \
      -f "$ROOT/tests/simulator/Dockerfile" "$ROOT/tests/simulator" >/dev/null
  log "built $image in $((SECONDS - start)) s"
}

ensure_docker
ensure_base_image
ensure_sim_image
[[ "${1:-}" != "controller" ]] || ensure_controller_image
if [[ "${1:-}" == "rpm-nodes" ]]; then
  ensure_rpm_node kylin_v10 "$KYLIN_RPM_IMAGE" "$KYLIN_IMAGE"
  ensure_rpm_node openeuler_22.03 "$OPENEULER_RPM_IMAGE" "$OPENEULER_IMAGE"
fi
print_images
