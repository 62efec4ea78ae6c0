#!/usr/bin/env bash
# Copy the files ansible-test sanity checks from the checkout SRC into DEST (an ansible_collections/ns/name tree),
# for tools/test.sh (sanity) and tools/controller14.sh (sanity under the newest ansible-core): one list for both.
#
#   tools/sanity-tree.sh SRC DEST
#
# Left out: tests/unit/fixtures, verbatim third-party captures (vendor docs in Chinese with typographic quotes among
# them), data rather than code; and the test infrastructure that build_ignore keeps out of the collection (simulator,
# the RPM-node images' recipe, test tools, benchmarks, tools/), which ruff checks instead.
set -euo pipefail
src=$1 dest=$2
mkdir -p "$dest"
(cd "$src" && git ls-files -co --exclude-standard -z -- . ':!tests/unit/fixtures' ':!tests/simulator' \
    ':!tests/rpm_nodes' ':!tests/tools' ':!benchmarks' ':!tools') |
  (cd "$src" && xargs -0 -I{} sh -c 'if [ -e "$1" ] || [ -L "$1" ]; then cp --parents -P "$1" "$2/"; fi' _ {} "$dest")
