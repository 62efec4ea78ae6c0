#!/usr/bin/env bash
# Runs INSIDE the newest controller (ansible 14.5.0 = ansible-core 2.21.5 on Debian 13's Python 3.13, the image
# of `tools/sandbox/host.sh controller`), with this checkout mounted read-only at /src and the awx.awx artifact
# (roles/offline_bundle/files/awx_collection.py) in /awx. Called by the controller14 stage of tools/ci/run.py and the
# Molecule scenario molecule/controller14.
#
#   tools/ci/controller14.sh checks        ansible-lint, every playbook's syntax check, the unit subset, sanity
#   tools/ci/controller14.sh awx NODE GW   the AWX job templates through ansible-runner over SSH to NODE (an
#                                       address), as user `ansible` with become and pipelining; GW: the address
#                                       where the node reaches the bundle server (the Docker bridge's gateway)
set -euo pipefail
SRC=${SRC:-/src}
CHECKOUT_COLLECTIONS=/tmp/checkout
AWX_ARTIFACTS=${AWX_ARTIFACTS:-/awx}
export ANSIBLE_FORCE_COLOR=0 PY_COLORS=0 NO_COLOR=1
banner() { printf '\n===== controller14: %s =====\n' "$*"; }

# The checkout's files that git knows (tracked, or new and not ignored), into a writable collection tree
# (tools/ci/collection_tree.py): lint and syntax checks find ascendai.vllm under $CHECKOUT_COLLECTIONS.
git config --global --add safe.directory '*'
WORK=$(python3 "$SRC/tools/ci/collection_tree.py" copy "$SRC" "$CHECKOUT_COLLECTIONS")
cd "$WORK"
ansible --version | head -1
python3 --version

# The collection from its own tarball, and awx.awx from the offline bundle's artifact, as a project sync
# installs collections/requirements.yml; everything else comes from the ansible 14 package.
COLLECTIONS=/tmp/collections
rm -rf "$COLLECTIONS" /tmp/dist
ansible-galaxy collection build --output-path /tmp/dist . >/dev/null
ansible-galaxy collection install --offline --no-deps -p "$COLLECTIONS" /tmp/dist/ascendai-vllm-*.tar.gz \
    "$AWX_ARTIFACTS"/awx-awx-*.tar.gz >/dev/null
ANSIBLE_COLLECTIONS_PATH=$COLLECTIONS ansible-galaxy collection list awx.awx 2>/dev/null | tail -1

failed=()
failed_tails=()
STEP_LOG=/tmp/controller14-step.log
step() {  # step NAME COMMAND...: run it, remember a failure (and its last lines), go on with the next check
  local name=$1 rc=0
  shift
  banner "$name"
  "$@" 2>&1 | tee "$STEP_LOG" || rc=$?
  if [[ $rc -eq 0 ]]; then echo "controller14: $name passed"; return 0; fi
  failed+=("$name")
  failed_tails+=("--- $name: its last lines"$'\n'"$(tail -n 10 "$STEP_LOG" | cut -c1-160)")
  echo "controller14: $name FAILED"
}

syntax_checks() {
  local pb rc=0
  for pb in site.yml playbooks/*.yml playbooks/awx/configure.yml playbooks/awx/preflight.yml \
            playbooks/awx/deploy_k8s.yml; do
    if ansible-playbook --syntax-check -i inventories/sandbox "$pb" >/dev/null; then echo "syntax ok: $pb"
    else echo "syntax check failed: $pb"; rc=1; fi
  done
  return $rc
}

checks() {
  # The checkout's copy for lint and syntax, awx.awx from the bundle.
  mkdir -p /tmp/awx-only/ansible_collections && cp -a "$COLLECTIONS/ansible_collections/awx" /tmp/awx-only/ansible_collections/
  export ANSIBLE_COLLECTIONS_PATH=$CHECKOUT_COLLECTIONS:/tmp/awx-only

  step "syntax check of every playbook" syntax_checks
  step "ansible-lint --profile production" ansible-lint --profile production --offline
  # The plugins (the code that runs under ansible-core 2.21 on the controller and the node), the AWX data,
  # the sanity ignore files and the source rules. The roles' tests build vLLM venvs and the tools' tests need
  # torch: they exercise no controller code that site.yml over SSH does not run here too.
  step "unit tests (subset)" env ASCENDAI_AWX_ARTIFACTS="$AWX_ARTIFACTS" python3 -m pytest -q -p no:cacheprovider \
      tests/unit/plugins tests/integration/awx tests/unit/test_sanity_ignores.py tests/unit/test_sources_in_project.py \
      tests/unit/tools/test_gen_role_docs.py tests/unit/tools/test_awx_job.py tests/integration/roles/test_offline_bundle_awx.py
  step "ansible-test sanity (ansible-core $(python3 -c 'import ansible; print(ansible.__version__)'))" sanity
  [[ ${#failed[@]} -eq 0 ]] && return 0
  # CI keeps the output's tail: each failed check's last lines again, the list last.
  printf '%s\n' "${failed_tails[@]}"
  echo "controller14: FAILED: ${failed[*]}"
  return 1
}

sanity() {
  # The same recipe as the host's sanity stage (tools/ci/sanity.sh), under this container's ansible-core.
  bash "$SRC/tools/ci/sanity.sh" "$SRC" /tmp/act
}

awx_jobs() {
  local node=$1 gateway=$2 inv=/tmp/awx-inventory
  # Host key checking stays on: the node's key goes into known_hosts first, as an operator does.
  mkdir -p ~/.ssh && chmod 0700 ~/.ssh
  ssh-keyscan -T 10 "$node" 2>/dev/null > ~/.ssh/known_hosts
  [[ -s ~/.ssh/known_hosts ]] || { echo "no SSH host key from $node"; return 1; }
  # The AWX inventory: the node and the sandbox's group variables.
  rm -rf "$inv" && mkdir -p "$inv/group_vars"
  cp -r inventories/sandbox/group_vars/. "$inv/group_vars/"
  printf 'all:\n  children:\n    ascend:\n      hosts:\n        atlas-sim-controller14:\n          ansible_host: %s\n          ansible_python_interpreter: /usr/bin/python3\n' \
      "$node" > "$inv/hosts.yml"
  local job=(python3 tests/tools/awx_job.py --inventory "$inv" --collections "$COLLECTIONS" --ssh-key /ssh/id_ed25519
             --user ansible)
  # The survey answer an operator gives for the sandbox: the CPU flavour (the bundle comes from the
  # inventory's ascendai_bundle_url, the bundle server on the node's gateway, $gateway).
  local install_answers='{"vllm_flavour": "cpu"}'
  echo "bundle server: http://$gateway:18770"

  banner "AWX job: install the stack (site.yml), fresh node, over SSH as ansible with become and pipelining"
  "${job[@]}" --stage install --answers "$install_answers"
  banner "AWX job: install the stack again: changed=0"
  "${job[@]}" --stage install --answers "$install_answers" --expect-changed 0
  banner "AWX job: preflight (after the driver is in: npu-smi comes with it)"
  "${job[@]}" --stage preflight --expect-changed 0
  banner "AWX job: deploy the model (Kubernetes), rendering only: no cluster here"
  "${job[@]}" --stage deploy --override k8s_manifests_apply=false
}

case ${1:-} in
  checks) checks ;;
  awx) awx_jobs "${2:?node address}" "${3:?bundle server address}" ;;
  *) echo "usage: $0 checks | awx NODE GATEWAY" >&2; exit 2 ;;
esac
