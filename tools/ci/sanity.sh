#!/usr/bin/env bash
# The one ansible-test sanity recipe, under the ansible-test and python3 found on PATH: the venv's on this host
# (tools/ci/run.py's sanity stage), ansible 14's in the newest controller's container (tools/ci/controller14.sh).
#
#   tools/ci/sanity.sh SRC BUILD    the files git knows in the checkout SRC, less what sanity must not check
#                                   (tools/ci/collection_tree.py SANITY_LEFT_OUT), copied under BUILD and checked there
set -euo pipefail
src=$1 build=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
tree=$(python3 "$here/collection_tree.py" copy --sanity --git "$src" "$build")
# An empty tree would "pass" with "All targets skipped".
compgen -G "$tree/plugins/modules/*.py" >/dev/null || { echo "sanity: no modules in $tree"; exit 1; }
# ansible-test downloads a pip bootstrap script from a host this network cannot reach: give it the stand-in for
# every pip version the installed ansible-test may ask for (its requirement pins and the pip of
# get_venv_packages: 24.2 in ansible-core 2.19, 25.2 in 2.21).
mkdir -p ~/.ansible/test/cache
at=$(python3 -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')
for v in $( { grep -rhoE "^pip==[0-9.]+" "$at/_data/requirements/" | cut -d= -f3
             grep -hoE "pip='[0-9.]+'" "$at/_internal/python_requirements.py" | cut -d"'" -f2; } | sort -u); do
  cp "$here/ansible-test/get_pip.py" ~/.ansible/test/cache/get_pip_${v//./_}.py
done
# The controller's own Python (3.11 on Debian 12, 3.13 on Debian 13), not a fixed one.
cd "$tree"
ansible-test sanity --python "$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" --requirements --color no
