#!/usr/bin/env bash
# Put the sandbox's model into the offline bundle on this host: the tiny random DeepSeek-LLM-architecture
# model of tests/tools/make_tiny_model.py (bf16 safetensors, BPE tokenizer, chat template; 2.7 MB) in
# <bundle>/models/tiny-deepseek/, and its sha256 lines in <bundle>/MANIFEST.sha256.
#
#   tools/sandbox/model.sh              generate when missing or when the generator changed, merge the manifest
#   BUNDLE_DIR=/tmp/b MODEL_NAME=tiny tools/sandbox/model.sh
#
# The manifest is shared with roles/offline_bundle and tools/sandbox/bundle.sh: only the lines under
# models/<name>/ are replaced (roles/offline_bundle/files/bundle_tools.py update-manifest, under the manifest lock);
# every other line is kept. The model is regenerated only when the generator
# (or the safetensors writer it uses) changes: a stamp holds their hash, so the sums stay stable.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUNDLE=${BUNDLE_DIR:-$ROOT/.cache/bundle}
NAME=${MODEL_NAME:-tiny-deepseek}
SEED=${MODEL_SEED:-0}
PY=${PYTHON:-$ROOT/.venv/bin/python}
log() { printf '[sandbox-model] %s\n' "$*" >&2; }

[[ -x $PY ]] || { [[ $PY == "$ROOT/.venv/bin/python" ]] && "$ROOT/tools/ci/bootstrap.sh"; }
mkdir -p "$BUNDLE/models" "$BUNDLE/.work"   # .work/: left out of the manifest
# tiny-deepseek-v3: the DeepSeek-V3-architecture model (MLA + MoE) of tests/tools/make_tiny_v3_model.py.
GEN=tests/tools/make_tiny_model.py
[[ $NAME == tiny-deepseek-v3 ]] && GEN=tests/tools/make_tiny_v3_model.py
gen_hash=$(cd "$ROOT" && cat "$GEN" tests/tools/make_tiny_model.py plugins/module_utils/_safetensors_convert.py |
           sha256sum | cut -c1-16)
gen_hash="$gen_hash-seed$SEED"
stamp="$BUNDLE/.work/sandbox-model-$NAME.stamp"
dest="$BUNDLE/models/$NAME"

if [[ -f $dest/config.json && -f $stamp && $(cat "$stamp") == "$gen_hash" ]]; then
  log "$dest up to date"
else
  # Generated next to its place and swapped in: an interrupted run leaves no half model in the bundle.
  work=$(mktemp -d "$BUNDLE/.work/$NAME.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  "$PY" "$ROOT/$GEN" "$work/$NAME" --seed "$SEED" >/dev/null
  chmod -R u=rwX,go=rX "$work/$NAME"
  rm -rf "$dest.old"
  [[ -e $dest ]] && mv "$dest" "$dest.old"
  mv "$work/$NAME" "$dest"
  rmdir "$work"   # now, not in the EXIT trap: the exec below for the second model skips it
  rm -rf "$dest.old"
  echo "$gen_hash" > "$stamp"
  log "generated $dest ($(du -sh "$dest" | cut -f1))"
fi

# Replace the lines of models/<name>/ in the manifest through the collection's one writer
# (plugins/module_utils/_bundle.py, under <bundle>/.work/manifest.lock): files gone from the folder leave it, every
# other line is kept, sorted by path.
merged=$("$PY" "$ROOT/roles/offline_bundle/files/bundle_tools.py" update-manifest "$BUNDLE" --prefix "models/$NAME")
log "$merged"
# Without MODEL_NAME: the tiny DeepSeek-V3-architecture model goes in beside the DeepSeek-LLM one (8 MB).
[[ -n ${MODEL_NAME:-} ]] || MODEL_NAME=tiny-deepseek-v3 exec "$0" "$@"
