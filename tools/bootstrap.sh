#!/usr/bin/env bash
# Create (or reuse) the project venv .venv with the pinned toolchain, and the symlink tree
# .cache/collections/ansible_collections/ascendai/vllm -> this checkout, through which
# ansible-playbook, ansible-doc and pytest find the collection.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-python3}
log() { printf '[bootstrap] %s\n' "$*" >&2; }

want=$(cat requirements-dev.txt $( [[ -f requirements-test.txt ]] && echo requirements-test.txt ) | sha256sum | cut -c1-16)
stamp=.venv/.ascendai-requirements
if [[ -x .venv/bin/python && -f $stamp && "$(cat "$stamp")" == "$want" ]]; then
  log "venv up to date"
else
  if ! "$PY" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    log "installing python3-venv"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
  fi
  [[ -x .venv/bin/python ]] || "$PY" -m venv .venv
  log "installing the pinned toolchain into .venv (a few minutes the first time)"
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v 'is ignored' || true
  .venv/bin/python -m pip install -q --disable-pip-version-check -r requirements-dev.txt \
    $( [[ -f requirements-test.txt ]] && echo -r requirements-test.txt ) 2>&1 | grep -v 'is ignored' || true
  .venv/bin/python -c 'import ansible, molecule, pytest, hypothesis' || { log "toolchain install failed"; exit 1; }
  echo "$want" > "$stamp"
fi

link=.cache/collections/ansible_collections/ascendai/vllm
mkdir -p "$(dirname "$link")"
ln -sfn "$ROOT" "$link"
