#!/usr/bin/env bash
# The collection build and its offline install: the tarball's size and contents, then ansible-doc lists the plugins
# of the installed copy.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
rm -rf build/dist build/install
mkdir -p build/dist build/install
ansible-galaxy collection build --force --output-path build/dist . >/dev/null
tarball=$(ls build/dist/ascendai-vllm-*.tar.gz)
size=$(stat -c %s "$tarball")
echo "built $tarball ($((size / 1024)) KiB)"
[[ $size -lt $((20 * 1024 * 1024)) ]] || { echo "collection tarball too large: $size bytes"; exit 1; }
# Only the collection ships: anything outside these top-level entries is a development file (tool
# configuration, test requirements, the sandbox's inventory, test infrastructure) that galaxy.yml's
# build_ignore must keep out.
extra=$(tar -tzf "$tarball" | grep -vE '^(MANIFEST\.json|FILES\.json|README\.md|LICENSE|(changelogs|docs|meta|playbooks|plugins|roles)(/.*)?|inventories/?|inventories/example-[^/]+(/.*)?)$' || true)
if [[ -n $extra ]]; then
  echo "development files in the collection tarball (add them to build_ignore in galaxy.yml):"
  echo "$extra"
  exit 1
fi
# Install into an empty collections path, away from the checkout and its ansible.cfg.
empty=$(mktemp -d)
trap 'rm -rf "$empty"' EXIT
(cd "$empty" && ANSIBLE_COLLECTIONS_PATH=$empty/collections \
   ansible-galaxy collection install --offline --no-deps -p "$empty/collections" "$ROOT/$tarball" >/dev/null &&
 ANSIBLE_COLLECTIONS_PATH=$empty/collections ansible-doc -l ascendai.vllm &&
 ANSIBLE_COLLECTIONS_PATH=$empty/collections ansible-doc -t filter -l ascendai.vllm) | tee build/dist/plugins.txt
[[ -s build/dist/plugins.txt ]] || { echo "ansible-doc lists no plugins of ascendai.vllm"; exit 1; }
