#!/usr/bin/env bash
# The sandbox deployment: a simulated Atlas 800 node (4x 910B3, Debian 12, systemd) in a Docker
# container, and the whole site.yml run against it with inventories/sandbox.
#
#   tools/sandbox.sh up       (default) bootstrap, start the node, run site.yml
#   tools/sandbox.sh down     remove the node container
#   tools/sandbox.sh shell    a shell on the node
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
NAME=ascendai-sandbox-atlas-1
cmd=${1:-up}
shift || true

node_up() {
  eval "$(tools/sandbox-host.sh | grep -E '^(BASE|SIM)_IMAGE=')"
  if docker container inspect "$NAME" >/dev/null 2>&1; then
    if [[ "$(docker inspect -f '{{.Config.Image}}' "$NAME")" != "$SIM_IMAGE" ]]; then
      echo "[sandbox] the node image changed: recreating $NAME"
      docker rm -f "$NAME" >/dev/null
    else
      docker start "$NAME" >/dev/null
    fi
  fi
  if ! docker container inspect "$NAME" >/dev/null 2>&1; then
    # --privileged fails on these machines; these flags boot systemd as PID 1.
    docker run -d --name "$NAME" --hostname atlas-sim-1 \
      --cap-add SYS_ADMIN --cap-add NET_ADMIN --security-opt seccomp=unconfined --cgroupns host \
      -v /sys/fs/cgroup:/sys/fs/cgroup:rw --tmpfs /run --tmpfs /run/lock --tmpfs /tmp \
      "$SIM_IMAGE" /lib/systemd/systemd >/dev/null
  fi
  for _ in $(seq 1 60); do
    state=$(docker exec "$NAME" systemctl is-system-running 2>/dev/null || true)
    [[ $state == running || $state == degraded ]] && return 0
    sleep 1
  done
  echo "[sandbox] systemd in $NAME did not come up (state: ${state:-unknown})" >&2
  exit 1
}

case $cmd in
  up)
    tools/bootstrap.sh
    node_up
    .venv/bin/ansible-playbook -i inventories/sandbox site.yml "$@"
    ;;
  down)
    docker rm -f "$NAME" >/dev/null 2>&1 || true
    echo "[sandbox] removed $NAME"
    ;;
  shell)
    exec docker exec -it "$NAME" bash -l
    ;;
  *)
    echo "usage: $0 [up|down|shell] [ansible-playbook options]" >&2
    exit 2
    ;;
esac
