#!/usr/bin/env bash
# The execution environment's build context, offline-complete: build/ee/ (Containerfile + _build/) from
# execution-environment.yml, with the collection's own tarball and every wheel the build installs.
#
#   tools/ci/ee-context.sh                  x86_64 (EE_ARCH=aarch64 for Kunpeng AWX nodes)
#   podman build --build-arg EE_BASE_IMAGE=REGISTRY/centos/centos:stream9 -t REGISTRY/ascendai/vllm-ee:0.1.0 build/ee
#
# 1. ansible-galaxy collection build -> build/ee-files/collections/ascendai-vllm.tar.gz
# 2. pip download (PyPI, or PIP_INDEX_URL) of the pins for the EE's Python 3.12 on EL9 (glibc 2.34) ->
#    build/ee-files/wheels/
# 3. ansible-builder create -> build/ee/
# 4. the checks: every file the Containerfile and the galaxy requirements name is in the context, pip never
#    reaches an index (tests/tools/ee_context.py), and every pin resolves from the context's wheels alone
#    (pip download --no-index).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
export PATH="$ROOT/.venv/bin:$PATH"
ARCH=${EE_ARCH:-x86_64}
FILES=build/ee-files
CONTEXT=build/ee
log() { printf '[ee-context] %s\n' "$*" >&2; }

# What the Containerfile pip-installs: ansible_core and ansible_runner of the definition, the builder's own
# tools (bindep pyyaml packaging, dumb-init: ansible-builder 3.2.0's containerfile.py) and the collection's
# Python requirements (meta/ee-requirements.txt).
refs=$(python3 -c 'import yaml; d = yaml.safe_load(open("execution-environment.yml"))["dependencies"]
print(d["ansible_core"]["package_pip"], d["ansible_runner"]["package_pip"])')
pins=($refs bindep pyyaml packaging dumb-init==1.2.5)
platform=(--only-binary :all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none
          --platform "manylinux_2_34_$ARCH" --platform "manylinux_2_28_$ARCH" --platform "manylinux_2_17_$ARCH"
          --platform "manylinux2014_$ARCH" --platform any)

rm -rf "$FILES/collections" "$CONTEXT"
mkdir -p "$FILES/collections" "$FILES/wheels"
ansible-galaxy collection build --force --output-path build/ee-dist . >/dev/null
cp "$(ls -t build/ee-dist/ascendai-vllm-*.tar.gz | head -1)" "$FILES/collections/ascendai-vllm.tar.gz"
log "downloading the wheels for Python 3.12 / $ARCH into $FILES/wheels (a re-run reuses them)"
python3 -m pip download -q "${platform[@]}" -d "$FILES/wheels" "${pins[@]}" -r meta/ee-requirements.txt 2>&1 |
  { grep -v 'is ignored' || true; }
ansible-builder create -f execution-environment.yml --context "$CONTEXT" --output-filename Containerfile >/dev/null
python3 tests/tools/ee_context.py "$CONTEXT"
check=$(mktemp -d)
# pip's own configuration (a site-wide find-links folder) is left out: the context's wheels only.
env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL PIP_CONFIG_FILE=/dev/null python3 -m pip download -q --no-index --find-links "$CONTEXT/_build/ee-files/wheels" "${platform[@]}" -d "$check" \
  "${pins[@]}" -r "$CONTEXT/_build/requirements.txt" 2>&1 | { grep -v 'is ignored' || true; }
rm -rf "$check"
log "every pin resolves from the context's $(ls "$CONTEXT/_build/ee-files/wheels" | wc -l) wheels alone: $CONTEXT is complete"
