#!/usr/bin/env python3
"""Time a no-op site run on 1 to N simulated nodes against the Ansible floor: what the roles cost beyond Ansible's own.

Starts N simulated Atlas nodes (the simulated node image of tools/sandbox/host.sh, started as
tools/sandbox/sandbox.sh starts its node, without vLLM), serves the sandbox bundle (.cache/bundle, built by
`tools/sandbox/sandbox.sh bundle`) over HTTP on the Docker bridge, writes an inventory like inventories/sandbox
(its group_vars read at run time, only the bundle URL overridden) and a playbook with the plays of
playbooks/site.yml that install the stack and deploy the model, minus vllm, vllm_service and monitoring.
Then:

  converge   every node once (not timed against anything)
  no-op      the same playbook again, --limit the first N nodes, for each N: changed must be 0
  floor      for each N: the same plays (each gathers facts) with as many ansible.builtin.ping tasks per
             host as the no-op run counted per host (ok + changed + skipped from its recap, less the
             fact gathering), same connection (community.docker.docker), same forks (ansible.cfg's)

and prints, per N: no-op s, floor s, no-op/floor, no-op(N)/no-op(1), the controller's peak RSS (summed over
the ansible-playbook process tree, sampled from /proc every 0.2 s) and the load average, next to the
targets (TARGET_FLOOR, TARGET_SCALE). The largest N's no-op run has ansible.posix.profile_tasks and
profile_roles enabled, and a small callback that counts module runs (loop items included) per role and
loop: the top tasks and the per-role counts are printed. Containers and the HTTP server are removed at the
end (also on Ctrl-C or a failure) unless --keep. Run from the repository root, through the Molecule lock:

  flock -o /tmp/ascendai-molecule.lock .venv/bin/python benchmarks/site_scale.py --nodes 1,2,4,8
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PREFIX = "ascendai-scale-"
DEFAULT_PORT = 18779          # not the sandbox's 18770, Molecule's 18771 or 18767
TARGET_SCALE = 1.3            # no-op(8) / no-op(1)
TARGET_FLOOR = 1.2            # no-op / floor
FACT_TASKS = 2                # the playbook's two plays each gather facts

RECAP_RE = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)"
    r"\s+failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)\s+rescued=(?P<rescued>\d+)\s+ignored=(?P<ignored>\d+)")
# profile_tasks: "Role : Task name ---------- 1.23s"; profile_roles: "os_prep ------- 4.56s"
PROFILE_RE = re.compile(r"^(?P<name>.*?)\s-+\s+(?P<secs>\d+(?:\.\d+)?)s\s*$")


# ---------------------------------------------------------------------------------------------- pure parts

def parse_recap(text):
    """The PLAY RECAP of ansible-playbook's output: {host: {ok, changed, unreachable, failed, skipped, ...}}."""
    out = {}
    in_recap = False
    for line in text.splitlines():
        if line.startswith("PLAY RECAP"):
            in_recap, out = True, {}
            continue
        if not in_recap:
            continue
        m = RECAP_RE.match(line.strip())
        if m:
            out[m.group("host")] = {k: int(v) for k, v in m.groupdict().items() if k != "host"}
        elif out and not line.strip():
            in_recap = False
    if not out:
        raise ValueError("no PLAY RECAP in the output of ansible-playbook")
    return out


def tasks_per_host(recap):
    """How many task results each host had (ok + changed + skipped), and whether all hosts agree.

    Ansible's ok already counts the changed results and the ignored failures; changed is added anyway for a
    run that was not a no-op, as the targets count them (a no-op has changed=0, so it does not
    matter there). Returns (count of the first host in name order, {host: count}).
    """
    counts = {h: r["ok"] + r["changed"] + r["skipped"] for h, r in recap.items()}
    if not counts:
        raise ValueError("empty recap")
    first = sorted(counts)[0]
    return counts[first], counts


def changed_hosts(recap):
    """Hosts with changed, failed or unreachable results: a no-op run must have none."""
    return sorted(h for h, r in recap.items() if r["changed"] or r["failed"] or r["unreachable"])


def parse_profile(text):
    """profile_tasks / profile_roles summary lines in the output: [(name, seconds)], in output order.

    Only the summary after the PLAY RECAP is read (the per-task banners carry a date, not this shape).
    """
    rows = []
    after = False
    for line in text.splitlines():
        if line.startswith("PLAY RECAP"):
            after = True
            continue
        if not after:
            continue
        m = PROFILE_RE.match(line.rstrip())
        if m and not line.startswith("="):
            rows.append((m.group("name").strip(), float(m.group("secs"))))
    return rows


def ratio(a, b):
    """a / b, or None when b is missing or zero."""
    if a is None or not b:
        return None
    return a / b


def report_rows(results):
    """Table rows from {n: {"noop": s, "floor": s, "rss": bytes, "load": (l1, l5, l15), ...}}.

    no-op/floor against TARGET_FLOOR per row, no-op(N)/no-op(1) against TARGET_SCALE (the target is
    for N = 8; every row shows the ratio and the largest N is checked).
    """
    ns = sorted(results)
    base = results[ns[0]]["noop"] if ns and ns[0] == 1 else None
    rows = []
    for n in ns:
        r = results[n]
        vs_floor = ratio(r.get("noop"), r.get("floor"))
        vs_one = ratio(r.get("noop"), base)
        rows.append({
            "n": n,
            "noop": r.get("noop"),
            "floor": r.get("floor"),
            "vs_floor": vs_floor,
            "floor_ok": None if vs_floor is None else vs_floor <= TARGET_FLOOR,
            "vs_one": vs_one,
            "scale_ok": None if vs_one is None or n != max(ns) else vs_one <= TARGET_SCALE,
            "rss_mib": None if r.get("rss") is None else r["rss"] / 2**20,
            "load": r.get("load"),
            "tasks": r.get("tasks"),
            "cpu": r.get("cpu"),
        })
    return rows


def format_table(rows):
    def f(v, fmt):
        return "-" if v is None else fmt % v

    def mark(ok):
        return "" if ok is None else (" ok" if ok else " MISS")

    head = ("%3s  %9s  %9s  %17s  %22s  %9s  %6s  %17s  %s"
            % ("N", "no-op s", "floor s", "no-op/floor", "no-op(N)/no-op(1)", "RSS MiB", "tasks",
               "CPU s ctl/nodes/%", "load 1/5/15"))
    lines = [head, "-" * len(head)]
    for r in rows:
        load = "-" if not r["load"] else "/".join("%.2f" % x for x in r["load"])
        cpu = r.get("cpu") or {}
        cpu = "%s/%s/%s" % (f(cpu.get("controller"), "%.0f"), f(cpu.get("nodes"), "%.0f"),
                            f(None if cpu.get("busy") is None else 100 * cpu["busy"], "%.0f"))
        lines.append("%3d  %9s  %9s  %17s  %22s  %9s  %6s  %17s  %s" % (
            r["n"], f(r["noop"], "%.1f"), f(r["floor"], "%.1f"),
            f(r["vs_floor"], "%.2f") + mark(r["floor_ok"]),
            f(r["vs_one"], "%.2f") + mark(r["scale_ok"]),
            f(r["rss_mib"], "%.0f"), f(r["tasks"], "%d"), cpu, load))
    lines.append("targets (issue 20): no-op/floor <= %.1f for every N; no-op(8)/no-op(1) <= %.1f"
                 % (TARGET_FLOOR, TARGET_SCALE))
    lines.append("CPU s: the no-op run's controller (ansible-playbook and its children) / the nodes' containers, "
                 "%: the whole machine's CPUs busy during it (other work on the machine included)")
    return "\n".join(lines)


def floor_playbook(pings, plays=FACT_TASKS):
    """The floor: `plays` plays that gather facts, and `pings` ansible.builtin.ping tasks spread over them."""
    if pings < 0:
        raise ValueError("negative ping count %d" % pings)
    per, extra = divmod(pings, plays)
    out = ["---"]
    for p in range(plays):
        count = per + (1 if p < extra else 0)
        out += ["- name: Floor play %d" % (p + 1), "  hosts: ascend", "  become: true", "  gather_facts: true",
                "  tasks:" if count else "  tasks: []"]
        out += ["    - name: Ping %d\n      ansible.builtin.ping:" % (i + 1) for i in range(count)]
    return "\n".join(out) + "\n"


def tree_rss(root_pid, proc="/proc"):
    """The summed VmRSS (bytes) of root_pid and every descendant, read from /proc (no psutil)."""
    children = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "stat")) as fh:
                stat = fh.read()
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces: the ppid is the 2nd field after ')'
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(name))
    total, todo = 0, [root_pid]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, ()))
        try:
            with open(os.path.join(proc, str(pid), "status")) as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


# ------------------------------------------------------------------------------------------- the machinery

PLAYBOOK = """---
# playbooks/site.yml's plays that install the stack and deploy the model, minus vllm (and vllm_service,
# monitoring): written by benchmarks/site_scale.py
- name: Install the stack
  hosts: ascend
  become: true
  gather_facts: true
  roles:
    - role: ascendai.vllm.os_prep
    - role: ascendai.vllm.python_runtime
    - role: ascendai.vllm.ascend_driver
    - role: ascendai.vllm.ascend_cann

- name: Deploy the model
  hosts: ascend
  become: true
  gather_facts: true
  roles:
    - role: ascendai.vllm.model
"""

# Counts, per role, the task results and the module runs (one per loop item) of the first host.
COUNT_CALLBACK = '''
from __future__ import annotations
import json
import os
from ansible.plugins.callback import CallbackBase


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "scale_count"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.counts = {}

    def _key(self, result):
        task = result._task
        role = task._role.get_name() if task._role else "(play)"
        return result._host.get_name(), role

    def _add(self, result, what):
        host, role = self._key(result)
        c = self.counts.setdefault(host, {}).setdefault(role, {"tasks": 0, "runs": 0, "skipped": 0, "loops": {}})
        c[what] += 1
        if what == "runs" and result._result.get("_ansible_item_label", result._result.get("item")) is not None:
            name = result._task.get_name()
            c["loops"][name] = c["loops"].get(name, 0) + 1

    def _task(self, result, skipped=False):
        self._add(result, "tasks")
        if skipped:
            self._add(result, "skipped")
        elif not result._result.get("results"):
            self._add(result, "runs")

    def v2_runner_on_ok(self, result):
        self._task(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._task(result)

    def v2_runner_on_skipped(self, result):
        self._task(result, skipped=True)

    def v2_runner_item_on_ok(self, result):
        self._add(result, "runs")

    def v2_runner_item_on_failed(self, result):
        self._add(result, "runs")

    def v2_playbook_on_stats(self, stats):
        with open(os.environ["SCALE_COUNT_FILE"], "w") as fh:
            json.dump(self.counts, fh, indent=1, sort_keys=True)
'''


def collection_tree(checkout):
    """The collections path in which ascendai.vllm is `checkout` (a checkout of this repository)."""
    spec = importlib.util.spec_from_file_location("collection_tree", os.path.join(ROOT, "tools/ci/collection_tree.py"))
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    return builder.link(checkout)


def machine_cpu(path="/proc/stat"):
    """(busy, total) jiffies of all CPUs from the first line of /proc/stat (idle and iowait are not busy)."""
    with open(path) as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    total = sum(fields[:8])
    return total - fields[3] - fields[4], total


def container_cpu_ns(cid, root="/sys/fs/cgroup"):
    """CPU time (ns) of a container's cgroup: cgroup v1 cpuacct (cgroupfs or systemd driver) or v2 cpu.stat."""
    for path in ("cpuacct/docker/%s/cpuacct.usage" % cid, "cpu,cpuacct/docker/%s/cpuacct.usage" % cid,
                 "cpuacct/system.slice/docker-%s.scope/cpuacct.usage" % cid):
        try:
            with open(os.path.join(root, path)) as fh:
                return int(fh.read())
        except OSError:
            pass
    for path in ("system.slice/docker-%s.scope/cpu.stat" % cid, "docker/%s/cpu.stat" % cid):
        try:
            with open(os.path.join(root, path)) as fh:
                for line in fh:
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) * 1000
        except OSError:
            pass
    return None


def log(msg):
    print("[site_scale] %s" % msg, file=sys.stderr, flush=True)


def sh(argv, check=True, **kw):
    return subprocess.run(argv, check=check, text=True, capture_output=True, **kw)


def load_avg():
    with open("/proc/loadavg") as fh:
        return tuple(float(x) for x in fh.read().split()[:3])


class Bench:
    def __init__(self, args):
        self.args = args
        self.names = ["%s%d" % (PREFIX, i) for i in range(1, max(args.nodes) + 1)]
        self.server = None
        self.compare_profile = None
        self.tmp = tempfile.mkdtemp(prefix="ascendai-scale-")
        self.logdir = args.logdir or self.tmp
        os.makedirs(self.logdir, exist_ok=True)
        self.env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=collection_tree(args.collection or ROOT),
                        ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                        ANSIBLE_FORCE_COLOR="0", ANSIBLE_RETRY_FILES_ENABLED="0")
        self.env["PATH"] = os.path.join(ROOT, ".venv", "bin") + os.pathsep + self.env.get("PATH", "")
        if args.no_pipelining:
            # ansible.cfg turns pipelining on for every connection ([connection] pipelining), which
            # community.docker.docker follows; this measures the runs without it (each module copied in first)
            self.env["ANSIBLE_PIPELINING"] = "0"

    # -- nodes
    def image(self):
        out = sh(["bash", "tools/sandbox/host.sh"], cwd=ROOT).stdout
        for line in out.splitlines():
            if line.startswith("SIM_IMAGE="):
                return line.split("=", 1)[1]
        raise SystemExit("tools/sandbox/host.sh printed no SIM_IMAGE")

    def nodes_up(self):
        image = self.image()
        for i, name in enumerate(self.names, 1):
            have = sh(["docker", "inspect", "-f", "{{.Config.Image}}", name], check=False)
            if have.returncode == 0 and have.stdout.strip() == image and self.args.reuse:
                sh(["docker", "start", name])
                continue
            sh(["docker", "rm", "-f", name], check=False)
            # tools/sandbox/sandbox.sh node_up's flags, without the published port
            sh(["docker", "run", "-d", "--name", name, "--hostname", "scale-%d" % i, "--restart", "always",
                "--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN", "--security-opt", "seccomp=unconfined",
                "--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--tmpfs", "/run",
                "--tmpfs", "/run/lock", "--tmpfs", "/tmp", "--shm-size", "1g", image, "/lib/systemd/systemd"])
        for name in self.names:
            for _ in range(120):
                state = sh(["docker", "exec", name, "systemctl", "is-system-running"], check=False).stdout.strip()
                if state in ("running", "degraded"):
                    break
                time.sleep(1)
            else:
                raise SystemExit("systemd in %s did not come up (%s)" % (name, state))
        self.ids = [sh(["docker", "inspect", "-f", "{{.Id}}", name]).stdout.strip() for name in self.names]
        log("%d nodes up (%s)" % (len(self.names), image))

    def serve(self):
        bundle = os.path.join(ROOT, ".cache", "bundle")
        if not os.path.exists(os.path.join(bundle, "MANIFEST.sha256")):
            raise SystemExit("no sandbox bundle in %s: run tools/sandbox/sandbox.sh bundle first" % bundle)
        ip = sh(["docker", "inspect", "-f", "{{.NetworkSettings.Gateway}}", self.names[0]]).stdout.strip()
        self.server = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(self.args.port), "--bind", ip, "--directory", bundle],
            stdout=open(os.path.join(self.logdir, "bundle-http.log"), "w"), stderr=subprocess.STDOUT,
            close_fds=True, start_new_session=True)
        for _ in range(40):
            try:
                socket.create_connection((ip, self.args.port), timeout=1).close()
                log("bundle served at http://%s:%d/" % (ip, self.args.port))
                return
            except OSError:
                time.sleep(0.25)
        raise SystemExit("the bundle server did not start on %s:%d" % (ip, self.args.port))

    def write_files(self):
        inv = os.path.join(self.tmp, "inventory")
        gv = os.path.join(inv, "group_vars", "ascend")
        os.makedirs(gv, exist_ok=True)
        hosts = {"all": {"children": {"ascend": {"hosts": {
            "scale-%d" % i: {"ansible_connection": "community.docker.docker", "ansible_host": name,
                             "ansible_python_interpreter": "/usr/bin/python3"}
            for i, name in enumerate(self.names, 1)}}}}}
        with open(os.path.join(inv, "hosts.yml"), "w") as fh:
            fh.write("---\n" + json.dumps(hosts, indent=2) + "\n")
        # the sandbox's group_vars as they are now, then (loaded after it: file names sort) what differs here
        shutil.copy(os.path.join(ROOT, "inventories", "sandbox", "group_vars", "ascend.yml"),
                    os.path.join(gv, "10-sandbox.yml"))
        with open(os.path.join(gv, "20-scale.yml"), "w") as fh:
            fh.write("---\nascendai_bundle_url: \"http://{{ ansible_facts['default_ipv4']['gateway'] }}:%d\"\n"
                     "# no vLLM here: python_runtime makes the vllm venv, but nothing installs vLLM into it, and the\n"
                     "# model role asks an existing venv's vLLM for its architectures (as molecule/model, skipped)\n"
                     "model_vllm_python: /opt/ascendai/venvs/no-vllm/bin/python\n"
                     % self.args.port)
        self.inventory = inv
        self.playbook = os.path.join(self.tmp, "site_scale.yml")
        with open(self.playbook, "w") as fh:
            fh.write(PLAYBOOK)
        cb = os.path.join(self.tmp, "callback_plugins")
        os.makedirs(cb, exist_ok=True)
        with open(os.path.join(cb, "scale_count.py"), "w") as fh:
            fh.write(COUNT_CALLBACK)
        self.callback_dir = cb

    # -- runs
    def play(self, label, playbook, n, extra_env=None):
        """ansible-playbook --limit the first n nodes: (seconds, peak RSS bytes, load after, output)."""
        hosts = ",".join("scale-%d" % i for i in range(1, n + 1))
        argv = ["ansible-playbook", "-i", self.inventory, playbook, "--limit", hosts]
        env = dict(self.env, **(extra_env or {}))
        out_path = os.path.join(self.logdir, "%s-n%d.log" % (label, n))
        peak = [0]
        ids = [self.ids[i] for i in range(n)]
        ru0, m0 = resource.getrusage(resource.RUSAGE_CHILDREN), machine_cpu()
        c0 = [container_cpu_ns(c) for c in ids]
        with open(out_path, "w") as out:
            t0 = time.monotonic()
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    close_fds=True)
            done = threading.Event()

            def sample():
                while not done.is_set():
                    peak[0] = max(peak[0], tree_rss(proc.pid))
                    done.wait(0.2)

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            try:
                rc = proc.wait()
            except BaseException:
                # Ctrl-C or SIGTERM: stop the run before the nodes are removed under it
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                raise
            finally:
                done.set()
            secs = time.monotonic() - t0
            sampler.join()
        load = load_avg()
        ru1, m1 = resource.getrusage(resource.RUSAGE_CHILDREN), machine_cpu()
        c1 = [container_cpu_ns(c) for c in ids]
        self.last_cpu = {
            "controller": (ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime),
            "nodes": None if None in c0 + c1 else sum(b - a for a, b in zip(c0, c1)) / 1e9,
            "busy": (m1[0] - m0[0]) / max(1, m1[1] - m0[1]),
        }
        with open(out_path) as fh:
            text = fh.read()
        log("%s N=%d: %.1f s, rc %d, peak RSS %.0f MiB, load %s (%s)"
            % (label, n, secs, rc, peak[0] / 2**20, load, out_path))
        if rc != 0:
            raise SystemExit("%s N=%d failed (rc %d): see %s\n%s" % (label, n, rc, out_path, text[-3000:]))
        return secs, peak[0], load, text

    def run(self):
        a = self.args
        self.nodes_up()
        self.serve()
        self.write_files()
        nmax = max(a.nodes)
        if not a.no_converge:
            self.play("converge", self.playbook, nmax)
        results, notes, profile = {}, [], None
        # the largest N first: its profile is what the search for the dominant cost needs, whatever comes after
        for n in sorted(a.nodes, key=lambda k: (k != nmax, k)):
            # the largest N's no-op run carries the profiling callbacks (they print, the run's work is the same)
            env = self.profile_env("counts") if n == nmax and not a.no_profile else None
            secs, rss, load, text = self.play("noop", self.playbook, n, env)
            cpu = self.last_cpu
            if env:
                profile = self.read_profile(secs, text, env)
            recap = parse_recap(text)
            bad = changed_hosts(recap)
            if bad:
                notes.append("N=%d: the no-op run changed something on %s: %s" % (n, ", ".join(bad), recap))
            count, per_host = tasks_per_host(recap)
            if len(set(per_host.values())) > 1:
                notes.append("N=%d: hosts differ in task count: %s (the floor uses %d)" % (n, per_host, count))
            first = recap[sorted(recap)[0]]
            floor_path = os.path.join(self.tmp, "floor-%d.yml" % count)
            with open(floor_path, "w") as fh:
                fh.write(floor_playbook(count - FACT_TASKS))
            fsecs, frss, fload, ftext = self.play("floor", floor_path, n)
            results[n] = {"noop": secs, "floor": fsecs, "rss": rss, "floor_rss": frss, "load": load, "cpu": cpu,
                          "floor_cpu": self.last_cpu,
                          "tasks": count, "recap": first, "floor_recap": parse_recap(ftext)[sorted(recap)[0]]}
            with open(os.path.join(self.logdir, "results.json"), "w") as fh:
                json.dump({"results": results, "notes": notes}, fh, indent=1)
            log("so far:\n" + format_table(report_rows(results)))
        if a.compare:
            env = dict(self.profile_env("counts-compare") if not a.no_profile else {},
                       ANSIBLE_COLLECTIONS_PATH=collection_tree(a.compare))
            secs, rss, load, text = self.play("compare", self.playbook, nmax, env)
            if not a.no_profile:
                self.compare_profile = self.read_profile(secs, text, env)
            recap = parse_recap(text)
            bad = changed_hosts(recap)
            if bad:
                notes.append("--compare N=%d: the no-op run changed something on %s" % (nmax, ", ".join(bad)))
            results[nmax]["compare"] = {"noop": secs, "rss": rss, "load": load, "tasks": tasks_per_host(recap)[0],
                                        "cpu": self.last_cpu,
                                        "recap": recap[sorted(recap)[0]]}
            with open(os.path.join(self.logdir, "results.json"), "w") as fh:
                json.dump({"results": results, "notes": notes}, fh, indent=1)
        self.report(results, notes, profile)

    def profile_env(self, name):
        return {"ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.profile_tasks,ansible.posix.profile_roles,scale_count",
                "ANSIBLE_CALLBACK_PLUGINS": self.callback_dir,
                "SCALE_COUNT_FILE": os.path.join(self.logdir, name + ".json"),
                "PROFILE_TASKS_TASK_OUTPUT_LIMIT": str(self.args.top), "PROFILE_TASKS_SORT_ORDER": "descending"}

    def read_profile(self, secs, text, env):
        try:
            with open(env["SCALE_COUNT_FILE"]) as fh:
                return {"secs": secs, "rows": parse_profile(text), "counts": json.load(fh)}
        except (OSError, ValueError) as exc:
            log("no profile: %s" % exc)
            return None

    def report(self, results, notes, profile):
        forks = sh(["ansible-config", "dump", "--only-changed"], cwd=ROOT, env=self.env, check=False).stdout
        forks = next((ln for ln in forks.splitlines() if ln.startswith("DEFAULT_FORKS")), "DEFAULT_FORKS: 5")
        print()
        print("collection: %s; pipelining: %s" % (self.args.collection or ROOT,
                                                 "off (ANSIBLE_PIPELINING=0)" if self.args.no_pipelining else
                                                 "as ansible.cfg (on for every connection)"))
        print("site_scale: os_prep, python_runtime, ascend_driver, ascend_cann, model on the simulated node image,"
              " community.docker.docker, %s, %d CPUs" % (forks, os.cpu_count()))
        print("floor: facts in each of the %d plays + ping tasks to match the no-op run's ok+changed+skipped per host"
              % FACT_TASKS)
        print(format_table(report_rows(results)))
        for n in sorted(results):
            r = results[n]
            print("N=%d no-op recap (first host): %s; floor recap: %s" % (n, r["recap"], r["floor_recap"]))
            print("N=%d floor peak RSS: %.0f MiB, CPU %s" % (n, r["floor_rss"] / 2**20, r["floor_cpu"]))
        c = results[max(results)].get("compare")
        if c:
            r = results[max(results)]
            print("N=%d no-op with %s: %.1f s (this checkout: %.1f s, %+.1f%%), %d task results per host (here %d),"
                  " peak RSS %.0f MiB, load %s, CPU %s (here %s); recap %s" % (
                      max(results), self.args.compare, c["noop"], r["noop"], 100 * (r["noop"] / c["noop"] - 1),
                      c["tasks"], r["tasks"], c["rss"] / 2**20, c["load"], c["cpu"], r["cpu"], c["recap"]))
        for note in notes:
            print("NOTE: " + note)
        for label, prof in (("this checkout", profile), (self.args.compare, self.compare_profile)):
            self.print_profile(label, max(results), prof)
        print("uptime: " + sh(["uptime"]).stdout.strip())
        print("logs: " + self.logdir)

    def print_profile(self, label, nmax, profile):
        if profile:
            print("\nprofile of the no-op run with %s, N=%d: %.1f s (ansible.posix.profile_tasks then profile_roles):"
                  % (label, nmax, profile["secs"]))
            for name, secs in profile["rows"]:
                print("  %7.2f s  %s" % (secs, name))
            host = sorted(profile["counts"])[0]
            print("\nper role on %s: task results / module runs (loop items counted) / skipped:" % host)
            for role, c in sorted(profile["counts"][host].items()):
                print("  %-30s %4d / %4d / %4d" % (role, c["tasks"], c["runs"], c["skipped"]))
            print("\nloops on %s (module runs per task, one per item):" % host)
            for role, c in sorted(profile["counts"][host].items()):
                for name, items in sorted(c.get("loops", {}).items(), key=lambda kv: -kv[1]):
                    print("  %3d  %s : %s" % (items, role, name))

    def cleanup(self):
        if self.server and self.server.poll() is None:
            self.server.terminate()
            try:
                self.server.wait(10)
            except subprocess.TimeoutExpired:
                self.server.kill()
        if not self.args.keep:
            for name in self.names:
                sh(["docker", "rm", "-f", name], check=False)
            log("removed %d containers" % len(self.names))
        else:
            log("kept %s" % ", ".join(self.names))
        if not self.args.logdir:
            log("logs and the generated inventory stay in %s" % self.tmp)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", default="1,2,4,8", help="comma-separated node counts (default 1,2,4,8)")
    ap.add_argument("--keep", action="store_true", help="leave the containers running at the end")
    ap.add_argument("--reuse", action="store_true", help="reuse existing %s<i> containers of the current image"
                    % PREFIX)
    ap.add_argument("--no-converge", action="store_true", help="skip the converge run (with --reuse)")
    ap.add_argument("--no-profile", action="store_true", help="skip the profile_tasks run")
    ap.add_argument("--port", type=int, default=DEFAULT_PORT, help="bundle HTTP port (default %d)" % DEFAULT_PORT)
    ap.add_argument("--top", type=int, default=25, help="profile_tasks rows to print")
    ap.add_argument("--collection", help="run the roles of this checkout of the repository (e.g. an unpacked "
                    "`git archive` of an older commit) instead of this one's")
    ap.add_argument("--compare", help="also time the largest N's no-op run with the roles of this checkout "
                    "(before/after a fix, same nodes, same run)")
    ap.add_argument("--no-pipelining", action="store_true", help="ANSIBLE_PIPELINING=0 for every run (ansible.cfg "
                    "turns it on: the docker connection then sends each module through one docker exec)")
    ap.add_argument("--logdir", help="where the ansible-playbook outputs go (default: a temp dir)")
    args = ap.parse_args(argv)
    args.nodes = sorted({int(x) for x in args.nodes.split(",") if x.strip()})
    if not args.nodes or args.nodes[0] < 1:
        ap.error("--nodes needs positive counts")
    bench = Bench(args)

    def on_signal(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_signal)
    try:
        bench.run()
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    finally:
        bench.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
