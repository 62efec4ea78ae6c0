#!/usr/bin/env bash
# Assemble the Huawei part of the sandbox's offline bundle on this host: the SIMULATED driver, firmware
# and CANN .run packages (tests/simulator/build_installers.py), version sets n and n+1 and the CANN
# releases of the later generations (EXTRA_CANNS: 8.5.1, 9.1.0), for this machine's architecture, in <bundle>/huawei/, and their sha256 lines in <bundle>/MANIFEST.sha256.
#
#   tools/sandbox/bundle.sh              build what is missing or stale, merge the manifest
#   BUNDLE_DIR=/tmp/b ARCH=aarch64 tools/sandbox/bundle.sh
#
# The manifest is shared with roles/offline_bundle (wheels, python, models) and tools/sandbox/model.sh: only the
# lines of the files this script writes are replaced (roles/offline_bundle/files/bundle_tools.py update-manifest,
# under the manifest lock); every other line is kept as it is. The packages are rebuilt
# only when the simulator's sources change (a stamp holds their hash), so their sums stay stable.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUNDLE=${BUNDLE_DIR:-$ROOT/.cache/bundle}
ARCH=${ARCH:-$(uname -m)}
PY=${PYTHON:-python3}
log() { printf '[sandbox-bundle] %s\n' "$*" >&2; }

mkdir -p "$BUNDLE/huawei"
sim_hash=$(cd "$ROOT" && find tests/simulator -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 | sort -z |
           xargs -0 sha256sum | sha256sum | cut -c1-16)
stamp="$BUNDLE/.work/sandbox-bundle-$ARCH.stamp"   # .work/: left out of the manifest
mkdir -p "$BUNDLE/.work"

listing=$("$PY" - "$ROOT/tests/simulator" "$ARCH" <<'PYEOF'
import sys
sys.path.insert(0, sys.argv[1])
import build_installers as b
for kind in b.KINDS:
    for name in ("n", "n+1"):
        version = b.SETS[name]["cann" if kind in ("toolkit", "kernels", "nnal") else kind]
        print(b.filename(kind, version, sys.argv[2]))
    if kind in ("toolkit", "kernels", "nnal"):
        for version in b.EXTRA_CANNS:
            print(b.filename(kind, version, sys.argv[2]))
PYEOF
)
mapfile -t files < <(printf '%s\n' "$listing" | sort -u)

missing=0
for f in "${files[@]}"; do [[ -f "$BUNDLE/huawei/$f" ]] || missing=1; done
if [[ $missing == 1 || ! -f $stamp || $(cat "$stamp") != "$sim_hash" ]]; then
  for set in n n+1; do
    "$PY" "$ROOT/tests/simulator/build_installers.py" "$BUNDLE/huawei" --set "$set" --arch "$ARCH" >/dev/null
  done
  for cann in $("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import build_installers as b; print(*b.EXTRA_CANNS)' \
                "$ROOT/tests/simulator"); do
    "$PY" "$ROOT/tests/simulator/build_installers.py" "$BUNDLE/huawei" --cann-version "$cann" \
      --only toolkit,kernels,nnal --arch "$ARCH" >/dev/null
  done
  echo "$sim_hash" > "$stamp"
  log "built ${#files[@]} simulated packages for $ARCH in $BUNDLE/huawei"
else
  log "simulated packages for $ARCH up to date in $BUNDLE/huawei"
fi

# Merge our files' lines into the manifest through the collection's one writer (plugins/module_utils/_bundle.py,
# under <bundle>/.work/manifest.lock): their old lines replaced, every other line kept, sorted by path.
paths=()
for f in "${files[@]}"; do paths+=(--path "huawei/$f"); done
merged=$("$PY" "$ROOT/roles/offline_bundle/files/bundle_tools.py" update-manifest "$BUNDLE" "${paths[@]}")
log "$merged"
