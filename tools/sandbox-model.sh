#!/usr/bin/env bash
# Put the sandbox's model into the offline bundle on this host: the tiny random DeepSeek-LLM-architecture
# model of tests/tools/make_tiny_model.py (bf16 safetensors, BPE tokenizer, chat template; 2.7 MB) in
# <bundle>/models/tiny-deepseek/, and its sha256 lines in <bundle>/MANIFEST.sha256.
#
#   tools/sandbox-model.sh              generate when missing or when the generator changed, merge the manifest
#   BUNDLE_DIR=/tmp/b MODEL_NAME=tiny tools/sandbox-model.sh
#
# The manifest is shared with roles/offline_bundle and tools/sandbox-bundle.sh: only the lines under
# models/<name>/ are replaced; every other line is kept. The model is regenerated only when the generator
# (or the safetensors writer it uses) changes: a stamp holds their hash, so the sums stay stable.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUNDLE=${BUNDLE_DIR:-$ROOT/.cache/bundle}
NAME=${MODEL_NAME:-tiny-deepseek}
SEED=${MODEL_SEED:-0}
PY=${PYTHON:-$ROOT/.venv/bin/python}
log() { printf '[sandbox-model] %s\n' "$*" >&2; }

[[ -x $PY ]] || { [[ $PY == "$ROOT/.venv/bin/python" ]] && "$ROOT/tools/bootstrap.sh"; }
mkdir -p "$BUNDLE/models" "$BUNDLE/.work"   # .work/: left out of the manifest
# tiny-deepseek-v3: the DeepSeek-V3-architecture model (MLA + MoE) of tests/tools/make_tiny_v3_model.py.
GEN=tests/tools/make_tiny_model.py
[[ $NAME == tiny-deepseek-v3 ]] && GEN=tests/tools/make_tiny_v3_model.py
gen_hash=$(cd "$ROOT" && cat "$GEN" tests/tools/make_tiny_model.py plugins/module_utils/safetensors_convert.py |
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
  rm -rf "$dest.old"
  echo "$gen_hash" > "$stamp"
  log "generated $dest ($(du -sh "$dest" | cut -f1))"
fi

# Merge under a lock (other tools update the same manifest): drop the old lines of models/<name>/, add
# the current sums, keep everything else, sort by path.
manifest="$BUNDLE/MANIFEST.sha256"
exec 9>"$BUNDLE/.work/manifest.lock"
flock 9
tmp=$(mktemp "$BUNDLE/.MANIFEST.XXXXXX")
trap 'rm -f "$tmp"; rm -rf "${work:-}"' EXIT
{
  if [[ -f $manifest ]]; then
    awk -v prefix="models/$NAME/" '{ path = substr($0, index($0, "  ") + 2); if (index(path, prefix) != 1) print }' \
      "$manifest"
  fi
  (cd "$BUNDLE" && find "models/$NAME" -type f ! -name '.*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
} | LC_ALL=C sort -t " " -k 3 > "$tmp"
if [[ -f $manifest ]] && cmp -s "$tmp" "$manifest"; then
  log "MANIFEST.sha256 unchanged"
else
  mv "$tmp" "$manifest"
  chmod 0644 "$manifest"
  log "MANIFEST.sha256 updated ($(grep -c " models/$NAME/" "$manifest") lines for models/$NAME/, $(wc -l < "$manifest") in all)"
fi
# Without MODEL_NAME: the tiny DeepSeek-V3-architecture model goes in beside the DeepSeek-LLM one (8 MB).
[[ -n ${MODEL_NAME:-} ]] || MODEL_NAME=tiny-deepseek-v3 exec "$0" "$@"
