#!/usr/bin/env bash
# Create (or reuse) the project venv .venv with the pinned toolchain, and the symlink tree
# .cache/collections/ansible_collections/ascendai/vllm -> this checkout (tools/ci/collection_tree.py link), through
# which ansible-playbook, ansible-doc and pytest find the collection.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
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
  # pip's output is filtered (a site-wide pip.conf may name find-links folders this machine lacks: "... is
  # ignored"), but its exit status is kept (pipefail: pip's, not the filter's).
  pip_quiet() {
    local rc=0
    .venv/bin/python -m pip install -q --disable-pip-version-check "$@" 2>&1 | { grep -v 'is ignored' || true; } || rc=$?
    [[ $rc -eq 0 ]] || { log "pip install $* failed (exit $rc): the venv is NOT marked up to date"; exit "$rc"; }
  }
  pip_quiet --upgrade pip
  pip_quiet -r requirements-dev.txt $( [[ -f requirements-test.txt ]] && echo -r requirements-test.txt )
  .venv/bin/python -c 'import ansible, molecule, pytest, hypothesis' || { log "toolchain install failed"; exit 1; }
  echo "$want" > "$stamp"
fi

"$PY" tools/ci/collection_tree.py link >/dev/null
