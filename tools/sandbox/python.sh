#!/usr/bin/env bash
# Put a relocatable CPython into the sandbox's offline bundle: <bundle>/python/cpython-<X.Y.Z>+sandbox-<arch>-
# unknown-linux-gnu-install_only.tar.gz (tests/tools/make_cpython_tarball.py packs this host's CPython the way
# python-build-standalone's install_only tarballs are laid out; GitHub, where the real ones are, is out of reach),
# its sha256 line in <bundle>/MANIFEST.sha256, and <bundle>/python/tarball.yml naming its version and release for the
# inventories that use it (the Kylin V10 node's bootstrap and python_runtime).
#
#   tools/sandbox/python.sh            pack when missing or when the packer or the host's Python changed
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUNDLE=${BUNDLE_DIR:-$ROOT/.cache/bundle}
PY=${PYTHON:-$ROOT/.venv/bin/python}
log() { printf '[sandbox-python] %s\n' "$*" >&2; }

[[ -x $PY ]] || "$ROOT/tools/ci/bootstrap.sh"
mkdir -p "$BUNDLE/python" "$BUNDLE/.work"
base=$("$PY" -c 'import sys; print(sys.base_prefix)')
want=$( { cat "$ROOT/tests/tools/make_cpython_tarball.py"; "$PY" -c 'import sys; print(sys.version)'; echo "$base"; } |
        sha256sum | cut -c1-16)
stamp=$BUNDLE/.work/sandbox-python.stamp
if [[ -f $stamp && $(cat "$stamp") == "$want" && -f $BUNDLE/python/tarball.yml ]]; then
  log "$BUNDLE/python up to date"
else
  work=$(mktemp -d "$BUNDLE/.work/python.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  tarball=$("$PY" "$ROOT/tests/tools/make_cpython_tarball.py" "$work" --prefix "$base")
  name=$(basename "$tarball")
  rm -f "$BUNDLE"/python/cpython-*-install_only.tar.gz
  mv "$tarball" "$BUNDLE/python/$name"
  version=${name#cpython-}; version=${version%%+*}
  release=${name#*+}; release=${release%%-*}
  printf 'python_runtime_tarball_version: "%s"\npython_runtime_tarball_release: "%s"\n' "$version" "$release" \
    > "$BUNDLE/python/tarball.yml"
  echo "$want" > "$stamp"
  log "packed $BUNDLE/python/$name ($(du -h "$BUNDLE/python/$name" | cut -f1))"
fi
log "$("$PY" "$ROOT/roles/offline_bundle/files/bundle_tools.py" update-manifest "$BUNDLE" --prefix python)"
