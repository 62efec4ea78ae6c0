#!/usr/bin/env bash
# The test command: everything CI runs, in order, failing on the first failure.
#
#   tools/test.sh            all stages
#   tools/test.sh STAGE...   only these stages: host lint units integration sanity ansible-lint build controller14 bundle kunpeng
#                            rpm-nodes (the Kylin/openEuler node images and their checks; the full run has them in
#                            the background lane, after kunpeng)
#                            images molecule (background-start / background-wait: the Molecule preparation, the
#                            bundle and kunpeng stages and Molecule's lane b in the background, as the full run
#                            does; MOLECULE_SCENARIOS applies to both lanes)
#                            (controller14: the newest ansible in a Debian 13 container; its SSH/AWX run is the
#                            Molecule scenario controller14)
#                            (host: the Debian packages later stages use, the one stage that runs apt)
#
# Sets up what it needs on a fresh machine: the venv (tools/bootstrap.sh), a Docker engine and
# the sandbox images (tools/sandbox-host.sh). Molecule scenarios: every molecule/*/ directory,
# or those named in MOLECULE_SCENARIOS (space-separated).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
stages=("$@")
# Two lanes on two cores. The full run starts a background lane right after the Docker images are there: the
# sandbox bundle Molecule serves, the bundle stage (the aarch64 wheels), the kunpeng stage that installs them (qemu,
# one core), then Molecule's lane b. The foreground runs the checks, then Molecule's lane a, and waits for the
# background at the end. Each lane keeps one core busy from start to end: with kunpeng alone beside the checks, the
# second core sat idle for about 250 s before Molecule started (measured on a warm run).
[[ ${#stages[@]} -gt 0 ]] || stages=(host images background-start lint units integration sanity ansible-lint build
                                     controller14 molecule background-wait)
banner() { printf '\n===== %s =====\n' "$*"; }

tools/bootstrap.sh
export PATH="$ROOT/.venv/bin:$PATH"
export ANSIBLE_FORCE_COLOR=0 PY_COLORS=0 NO_COLOR=1

# The collection as ansible-test wants it: a tree named ansible_collections/ascendai/vllm holding
# the files git knows (tracked, or new and not ignored).
collection_tree() {
  local dest=$ROOT/build/act/ansible_collections/ascendai/vllm
  rm -rf "$ROOT/build/act"
  mkdir -p "$dest"
  # What is left out, and why: tools/sanity-tree.sh (the controller14 stage's sanity uses the same list).
  tools/sanity-tree.sh "$ROOT" "$dest"
  (cd "$dest" && git init -q && git add -A >/dev/null)
  echo "$dest"
}

stage_lint() {
  banner "ruff + yamllint"
  ruff check .
  yamllint -s .
}

stage_host() {
  banner "host packages"
  # promtool (Debian's prometheus) checks the monitoring role's alert rules in the unit tests, which run
  # without apt, network or Docker and skip those checks (saying so) where promtool is missing.
  # nginx (Debian's) runs the API front's configuration in front of a stand-in server in the unit tests
  # (tests/unit/test_api_front_routes.py): every route of every allowed vLLM release without the key.
  local missing=()
  command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
  [[ -x /usr/sbin/nginx ]] || missing+=(nginx)
  if (( ${#missing[@]} > 0 )); then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  promtool --version 2>&1 | head -1
  /usr/sbin/nginx -v 2>&1
}

stage_units() {
  banner "pytest units"
  command -v promtool >/dev/null 2>&1 || echo "promtool missing: the alert-rule checks will be skipped (tools/test.sh host)"
  [[ -x /usr/sbin/nginx ]] || echo "nginx missing: the API front's route checks will be skipped (tools/test.sh host)"
  python -m pytest -q tests/unit
}

stage_integration() {
  banner "pytest integration (ansible-playbook on this machine: roles, playbooks)"
  python -m pytest -q tests/integration
}

stage_sanity() {
  banner "ansible-test sanity"
  local tree v
  tree=$(collection_tree)
  # ansible-test downloads a pip bootstrap script from a host this network cannot reach: give it
  # the stand-in for every pip version the installed ansible-test may ask for (its requirement pins and the
  # pip of get_venv_packages: 24.2 in ansible-core 2.19, 25.2 in 2.21).
  mkdir -p ~/.ansible/test/cache
  local at
  at=$(python -c 'import ansible_test, os; print(os.path.dirname(ansible_test.__file__))')
  for v in $( { grep -rhoE "^pip==[0-9.]+" "$at/_data/requirements/" | cut -d= -f3
               grep -hoE "pip='[0-9.]+'" "$at/_internal/python_requirements.py" | cut -d"'" -f2; } | sort -u); do
    cp tools/ansible-test/get_pip.py ~/.ansible/test/cache/get_pip_${v//./_}.py
  done
  # The controller's own Python (3.11 on Debian 12, 3.13 on Debian 13), not a fixed one.
  (cd "$tree" && ansible-test sanity --python "$(python -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
     --requirements --color no)
}

stage_ansible_lint() {
  banner "ansible-lint --profile production"
  # The checkout, not a copy some earlier tool installed under ~/.ansible/collections.
  ANSIBLE_COLLECTIONS_PATH=$ROOT/.cache/collections ansible-lint --profile production --offline
}

stage_build() {
  banner "collection build and offline install"
  rm -rf build/dist build/install
  mkdir -p build/dist build/install
  ansible-galaxy collection build --force --output-path build/dist . >/dev/null
  local tarball
  tarball=$(ls build/dist/ascendai-vllm-*.tar.gz)
  local size
  size=$(stat -c %s "$tarball")
  echo "built $tarball ($((size / 1024)) KiB)"
  [[ $size -lt $((20 * 1024 * 1024)) ]] || { echo "collection tarball too large: $size bytes"; return 1; }
  # Only the collection ships: anything outside these top-level entries is a development file (tool
  # configuration, test requirements, the sandbox's inventory, test infrastructure) that galaxy.yml's
  # build_ignore must keep out.
  local extra
  extra=$(tar -tzf "$tarball" | grep -vE '^(MANIFEST\.json|FILES\.json|README\.md|LICENSE|(changelogs|docs|meta|playbooks|plugins|roles)(/.*)?|inventories/?|inventories/example-[^/]+(/.*)?)$' || true)
  if [[ -n $extra ]]; then
    echo "development files in the collection tarball (add them to build_ignore in galaxy.yml):"
    echo "$extra"
    return 1
  fi
  # Install into an empty collections path, away from the checkout and its ansible.cfg.
  local empty
  empty=$(mktemp -d)
  (cd "$empty" && ANSIBLE_COLLECTIONS_PATH=$empty/collections \
     ansible-galaxy collection install --offline --no-deps -p "$empty/collections" "$ROOT/$tarball" >/dev/null &&
   ANSIBLE_COLLECTIONS_PATH=$empty/collections ansible-doc -l ascendai.vllm &&
   ANSIBLE_COLLECTIONS_PATH=$empty/collections ansible-doc -t filter -l ascendai.vllm) | tee build/dist/plugins.txt
  rm -rf "$empty"
  [[ -s build/dist/plugins.txt ]] || { echo "ansible-doc lists no plugins of ascendai.vllm"; return 1; }
}

stage_controller14() {
  banner "the newest controller: ansible 14 on Debian 13's Python 3.13 (syntax, ansible-lint, units, sanity)"
  # The image (debootstrap, cached by a hash of its recipe) and awx.awx from the offline bundle's artifact;
  # the checks run in a container with this checkout read-only (tools/controller14.sh). The SSH and AWX
  # run against a node is the Molecule scenario controller14.
  local image
  image=$(tools/sandbox-host.sh controller | sed -n 's/^CONTROLLER_IMAGE=//p')
  tools/awx-collection.sh
  docker run --rm -v "$ROOT:/src:ro" -v "$ROOT/.cache/awx:/awx:ro" "$image" bash /src/tools/controller14.sh checks
  # The execution environment's build context, complete and offline (collection tarball, pinned wheels).
  tools/ee-context.sh
}

stage_bundle() {
  banner "ascend offline bundle for aarch64 (download.yml, from PyPI)"
  # The default vllm-ascend row's aarch64 wheels (~500 MB) into .cache/bundle-ascend, then the checks of
  # tests/integration/roles/test_offline_bundle_ascend.py (closed without an index, tags, manifest, re-run).
  python -m pytest -q -s -m bundle tests/integration/roles/test_offline_bundle_ascend.py
}

stage_kunpeng() {
  banner "vllm role, ascend flavour, on an emulated Kunpeng node (qemu aarch64, the bundle stage's wheels)"
  # tools/kunpeng-root.sh: Debian 12 arm64 root through qemu-user-static; the roles run in it over the
  # community.general.chroot connection (tests/integration/roles/test_vllm_role_kunpeng.py).
  python -m pytest -q -s -m kunpeng tests/integration/roles/test_vllm_role_kunpeng.py
}

stage_rpm_nodes() {
  banner "RPM-family test nodes (Kylin V10 SP3, openEuler 22.03 LTS SP4): build, then check the images"
  # tools/sandbox-host.sh rpm-nodes builds them (cached by recipe); tests/integration/test_rpm_nodes.py checks
  # release files, facts, python3, glibc and dnf offline on each, under systemd as Molecule runs them.
  tools/sandbox-host.sh rpm-nodes >/dev/null
  python -m pytest -q -s -m rpm_nodes tests/integration/test_rpm_nodes.py
}

stage_images() {
  banner "Docker engine and the sandbox images (node, simulated Atlas node, controller)"
  # Built here, once, before the lanes split: tools/sandbox-host.sh takes no lock of its own.
  tools/sandbox-host.sh controller
}

# The background lane: the Molecule preparation, bundle, kunpeng, Molecule's lane b. Its output goes to a file,
# printed at background-wait; the preparation's exit status goes to a file of its own, which the molecule stage
# waits for.
background_start() {
  banner "background lane started: the Molecule preparation, bundle, kunpeng, Molecule's lane b" \
         "(its output follows at background-wait)"
  mkdir -p "$ROOT/.cache"
  bg_log=$ROOT/.cache/background.log
  rm -f "$bg_log" "$bg_log".* "$ROOT/.cache/molecule-prep.rc"
  molecule_lanes
  (
    # The preparation first, so that lane a never waits for it; Molecule's scenarios run only when it worked.
    prc=0
    molecule_prep || prc=$?
    echo "$prc" > "$ROOT/.cache/molecule-prep.rc"
    start=$SECONDS krc=0
    stage_bundle || krc=$?
    echo "$krc $((SECONDS - start))" > "$bg_log.bundle"
    if [[ $krc -eq 0 ]]; then
      start=$SECONDS
      stage_kunpeng || krc=$?
      echo "$krc $((SECONDS - start))" > "$bg_log.kunpeng"
    fi
    # the RPM-node images' own checks (the images are there: the preparation built them)
    start=$SECONDS
    [[ $prc -ne 0 ]] || stage_rpm_nodes || krc=$?
    echo "$krc $((SECONDS - start))" > "$bg_log.rpm_nodes"
    rc=0
    if [[ $prc -eq 0 && ${#lane_b[@]} -gt 0 ]]; then run_lane "$logdir" "${lane_b[@]}" || rc=1; fi
    [[ $prc -eq 0 && $krc -eq 0 ]] || rc=1
    echo "$rc" > "$bg_log.rc"
  ) > "$bg_log" 2>&1 &
  bg_pid=$!
}

background_wait() {
  banner "waiting for the background lane (bundle, kunpeng, Molecule's lane b)"
  wait "$bg_pid" || true
  bg_pid=""
  cat "$bg_log"
  local rc=1 brc=1 bsecs=? krc=1 ksecs=?
  [[ ! -f $bg_log.bundle ]] || read -r brc bsecs < "$bg_log.bundle"
  [[ ! -f $bg_log.kunpeng ]] || read -r krc ksecs < "$bg_log.kunpeng"
  local rsecs=?
  [[ ! -f $bg_log.rpm_nodes ]] || read -r krc rsecs < "$bg_log.rpm_nodes"
  [[ ! -f $bg_log.rc ]] || read -r rc < "$bg_log.rc"
  times+=("bundle(bg) $bsecs" "kunpeng(bg) $ksecs" "rpm-nodes(bg) $rsecs")
  molecule_times=$(cat "$logdir/times" 2>/dev/null || true)
  molecule_times+="\n"
  [[ $brc -eq 0 ]] || echo "bundle stage failed (exit $brc); the kunpeng stage, which needs it, did not run"
  [[ $brc -ne 0 || $krc -eq 0 ]] || echo "kunpeng or rpm-nodes stage failed (exit $krc)"
  [[ $rc -eq 0 ]] || { echo "background lane failed"; grep FAILED "$logdir/times" || true; return 1; }
}

# Molecule scenarios run in two lanes side by side (MOLECULE_LANES=1: one after the other). One scenario drives one
# node through one Ansible process and leaves most of the second core idle between tasks; two lanes fill it.
# Lane a holds the scenarios that share a host port with the sandbox (default and controller14: 18770) and a few
# short ones; every other scenario, a new one too, goes to lane b, which the full run starts in the background
# lane after kunpeng. The sizes (s, measured on a warm run at f6d2661): lane a default 535, controller14 309, model 71,
# cann_generations 61, python_tarball 52; lane b multinode 430, deepseek_v3 309, monitoring 121, ascend_upgrade 98,
# ascend_stack 95, ascend_faults 58, os_prep 34. Beside them: the checks (about 615 s) in the foreground, the
# Molecule preparation, bundle (60) and kunpeng (401) in the background. With model in lane b, lane a ended 120 s
# before lane b.
# The host ports each scenario's prepare.yml serves the bundle on are distinct otherwise (18766 model,
# 18767 ascend_upgrade, 18771 ascend_stack, 18772 deepseek_v3, 18773 kylin_v10, 18774 openeuler).
# The two RPM-node scenarios (each a whole site.yml, like default) go one to each lane. Measured beside stress-ng:
# lane a 1534 s after about 850 s of checks, lane b about 1230 s after about 560 s of bundle, kunpeng and
# rpm-nodes, and it waited for nothing. default then grew by about 130 s (a real model, served and asked), so
# ascend_stack and ascend_faults (about 100 s each) go back to lane b.
MOLECULE_LANE_A="default controller14 model cann_generations python_tarball kylin_v10"

run_scenario() {  # run_scenario NAME LOGDIR: one `molecule test`, its output printed whole when it ends
  local s=$1 logdir=$2 start=$SECONDS rc=0
  molecule test -s "$s" > "$logdir/$s.log" 2>&1 || rc=$?
  local secs=$((SECONDS - start))
  {
    flock 9
    banner "molecule test -s $s"
    cat "$logdir/$s.log"
    if [[ $rc -eq 0 ]]; then echo "molecule scenario $s passed in $secs s"; else echo "molecule scenario $s FAILED after $secs s"; fi
  } 9> "$logdir/.print.lock"
  if [[ $rc -eq 0 ]]; then echo "  molecule/$s $secs" >> "$logdir/times"; else echo "  molecule/$s(FAILED) $secs" >> "$logdir/times"
    # What failed, for the end of the output (CI keeps only its tail, and a lane's log is printed whole before it).
    { echo "--- molecule/$s: the failed task"; awk -f tools/failure-digest.awk "$logdir/$s.log"; } >> "$logdir/failures"; fi
  return $rc
}

run_lane() {  # run_lane LOGDIR SCENARIO...: every scenario runs; the lane fails when any did
  local logdir=$1 s failed=0
  shift
  for s in "$@"; do run_scenario "$s" "$logdir" || failed=1; done
  return $failed
}

molecule_prep() {
  # A running Docker engine and the images (molecule_lanes exports their names for the scenarios), the Kylin V10 and
  # openEuler nodes of the kylin_v10 and openeuler scenarios among them (built here, in the background lane: the
  # foreground's images stage has built the base and simulated Atlas images they start from).
  tools/sandbox-host.sh rpm-nodes >/dev/null
  # The sandbox's offline bundle (.cache/bundle: wheels, simulated .run packages, tiny models), which the
  # scenarios serve to their nodes over HTTP; the tiny DeepSeek-V3 model too, before the lanes start.
  tools/sandbox.sh bundle
  MODEL_NAME=tiny-deepseek-v3 tools/sandbox-model.sh
}

molecule_lanes() {  # sets logdir, lane_a, lane_b and the environment every scenario reads
  # ansible-compat installs the collection under test into its own cache; keep it away from the
  # checkout's symlink tree (molecule's playbooks get that through the provisioner env).
  export ANSIBLE_COLLECTIONS_PATH=$ROOT/.ansible/collections
  eval "$(tools/sandbox-host.sh --print | grep -E '^(BASE|SIM|KYLIN|OPENEULER)_IMAGE=')"
  export ASCENDAI_BASE_IMAGE=$BASE_IMAGE ASCENDAI_SIM_IMAGE=$SIM_IMAGE ASCENDAI_KYLIN_IMAGE=$KYLIN_IMAGE \
         ASCENDAI_OPENEULER_IMAGE=$OPENEULER_IMAGE
  local scenarios=${MOLECULE_SCENARIOS:-} s
  if [[ -z $scenarios ]]; then
    scenarios=$(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h\n' | xargs -n1 basename | sort)
  fi
  logdir=$ROOT/.cache/molecule-logs
  rm -rf "$logdir"
  mkdir -p "$logdir"
  lane_a=() lane_b=()
  for s in $scenarios; do
    if [[ ${MOLECULE_LANES:-2} -lt 2 || " $MOLECULE_LANE_A " == *" $s "* ]]; then lane_a+=("$s"); else lane_b+=("$s"); fi
  done
}

stage_molecule() {
  banner "molecule"
  local rc=0 pid_b=""
  if [[ -n ${bg_pid:-} ]]; then
    # The background lane prepares and runs lane b: wait for its preparation, then run lane a here.
    echo "lane a: ${lane_a[*]:-none}; lane b (background): ${lane_b[*]:-none}"
    while [[ ! -f $ROOT/.cache/molecule-prep.rc ]] && kill -0 "$bg_pid" 2>/dev/null; do sleep 2; done
    local prc=1
    [[ ! -f $ROOT/.cache/molecule-prep.rc ]] || read -r prc < "$ROOT/.cache/molecule-prep.rc"
    [[ $prc -eq 0 ]] || { echo "the Molecule preparation failed in the background lane (its output follows at background-wait)"; return 1; }
  else
    molecule_prep
    molecule_lanes
    echo "lane a: ${lane_a[*]:-none}; lane b: ${lane_b[*]:-none}"
    if [[ ${#lane_b[@]} -gt 0 ]]; then
      run_lane "$logdir" "${lane_b[@]}" &
      pid_b=$!
    fi
  fi
  if [[ ${#lane_a[@]} -gt 0 ]]; then run_lane "$logdir" "${lane_a[@]}" || rc=1; fi
  if [[ -n $pid_b ]]; then wait "$pid_b" || rc=1; fi
  molecule_times=$(cat "$logdir/times" 2>/dev/null || true)
  molecule_times+="\n"
  # Every scenario runs; the stage fails when any did.
  [[ $rc -eq 0 ]] || { echo "failed molecule scenarios:"; grep FAILED "$logdir/times"; return 1; }
}

# Stage times, printed as a table at the end (and when a stage fails).
times=()
stage_table() {
  printf '\n%-17s %8s\n' stage seconds
  local row
  for row in "${times[@]}"; do printf '%-17s %8s\n' ${row}; done
  [[ -z ${molecule_times:-} ]] || printf '%b' "$molecule_times"
  [[ -z ${molecule_times:-} || ! -s ${logdir:-}/failures ]] || cat "$logdir/failures"
}
trap 'rc=$?; [[ -z ${bg_pid:-} ]] || { pkill -TERM -P "$bg_pid" 2>/dev/null; kill "$bg_pid" 2>/dev/null
                                        banner "the background lane, stopped"; cat "$bg_log"; } || true
      [[ $rc -eq 0 ]] || { times+=("${current_stage:-?}(failed) $((SECONDS - stage_start))"); stage_table; }' EXIT
for s in "${stages[@]}"; do
  current_stage=$s stage_start=$SECONDS
  case $s in
    host) stage_host ;;
    lint) stage_lint ;;
    units) stage_units ;;
    integration) stage_integration ;;
    sanity) stage_sanity ;;
    ansible-lint) stage_ansible_lint ;;
    build) stage_build ;;
    controller14) stage_controller14 ;;
    bundle) stage_bundle ;;
    kunpeng) stage_kunpeng ;;
    rpm-nodes) stage_rpm_nodes ;;
    images) stage_images ;;
    background-start) background_start ;;
    background-wait) background_wait ;;
    molecule) stage_molecule ;;
    *) echo "unknown stage: $s" >&2; exit 2 ;;
  esac
  times+=("$s $((SECONDS - stage_start))")
done
times+=("total $SECONDS")
banner "all stages passed: ${stages[*]}"
stage_table
