"""Running ansible-playbook on this machine for the integration tests (import through the collection:
``ansible_collections.ascendai.vllm.tests.integration.test_support.playbook``). Every role test that runs
ansible-playbook goes through ``run_playbook``: one place sets the collection path, the interpreter and the output
format, so a change there (a new Ansible warning, another collections folder) is made once."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.path.dirname(sys.executable)
PLAYBOOK = os.path.join(BIN, "ansible-playbook")
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")


def run_playbook(tmp_path, play, extra_vars=None, timeout=600, *, inventory="localhost,", connection="local",
                 args=(), env=None, python=sys.executable, cwd=None, background=False):
    """ansible-playbook with the checkout's collection; returns the CompletedProcess (stdout and stderr apart).

    ``play``: a list of plays or YAML text, written to tmp_path/play.yml, or an ``os.PathLike`` to run as it is (a
    playbook of ``playbooks/``). ``extra_vars``: passed as ``-e @vars.json``. ``inventory``: ``-i`` as given (a
    path or ``host,``), or a dict written to tmp_path/inventory.json. ``connection``: ``-c`` (None: the inventory's).
    ``args``: more arguments (``--check``, ``--tags``, ``--limit``, ``-v``). ``env``: more environment variables.
    ``python``: the interpreter of the modules, through the environment, not ``-e``: an extra var would outrank the
    ``ansible_python_interpreter`` a task sets (the roles run ``venv_info`` under a venv's Python that way); None
    leaves it to the inventory (a container's or a chroot's Python). ``cwd``: tmp_path unless given.
    ``background``: start it and return the Popen (stdout and stderr together), for runs that go in parallel."""
    if isinstance(play, os.PathLike):
        play_path = os.fspath(play)
    else:
        play_path = str(tmp_path / "play.yml")
        (tmp_path / "play.yml").write_text(play if isinstance(play, str) else json.dumps(play))
    if isinstance(inventory, dict):
        (tmp_path / "inventory.json").write_text(json.dumps(inventory))
        inventory = str(tmp_path / "inventory.json")
    argv = [PLAYBOOK, "-i", str(inventory)]
    if connection:
        argv += ["-c", connection]
    argv += [*args, play_path]
    if extra_vars:
        (tmp_path / "vars.json").write_text(json.dumps(extra_vars))
        argv += ["-e", f"@{tmp_path / 'vars.json'}"]
    run_env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
                   ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0")
    if python:
        run_env["ANSIBLE_PYTHON_INTERPRETER"] = python
    run_env.update(env or {})
    cwd = str(cwd or tmp_path)
    if background:
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=run_env,
                                cwd=cwd)
    return subprocess.run(argv, capture_output=True, text=True, check=False, env=run_env, timeout=timeout, cwd=cwd)


def changed_count(proc, host="localhost"):
    """changed= of ``host`` in an ansible-playbook recap, asserting the host had no failure and was reachable."""
    match = re.search(re.escape(host) + r"\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=0\s+failed=0", proc.stdout)
    assert match, proc.stdout[-3000:] + proc.stderr[-2000:]
    return int(match.group(1))


def render_templates(tmp_path, jobs, vars_files=(), timeout=300):
    """Role templates rendered by Ansible's own template module, all in one ansible-playbook run: ``jobs`` maps an
    output name to ``(template path, variables)``; ``vars_files`` (a role's defaults) are loaded under them, as the
    role's defaults are under its task variables. Returns ``{name: text}``; a failed run fails the caller."""
    out = tmp_path / "rendered"
    out.mkdir(exist_ok=True)
    tasks = [{"name": f"Render {name}",
              "ansible.builtin.template": {"src": os.fspath(src), "dest": str(out / name), "mode": "0600"},
              "vars": variables}
             for name, (src, variables) in jobs.items()]
    play = [{"name": "Render templates", "hosts": "localhost", "gather_facts": False,
             "vars_files": [os.fspath(path) for path in vars_files], "tasks": tasks}]
    proc = run_playbook(tmp_path, play, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return {name: (out / name).read_text() for name in jobs}


def template_text(text, variables, *, file=False, filters=None):
    """``text`` templated by Ansible's own engine in this process (its filters, tests and undefined handling), for
    the checks that template one expression per generated example, where an ansible-playbook run per example would
    be too slow. ``file``: the whole text is a template file, rendered as the template module renders one (trailing
    newlines kept). ``filters``: the collection's filters the text names, ``{fqcn: function}`` (the plugin loader is
    not set up inside pytest, which imports the collection as plain packages)."""
    from ansible.parsing.dataloader import DataLoader  # pylint: disable=import-outside-toplevel
    from ansible.template import Templar  # pylint: disable=import-outside-toplevel
    try:
        from ansible.template import trust_as_template  # pylint: disable=import-outside-toplevel
    except ImportError:  # ansible-core before 2.19 trusts every string
        def trust_as_template(value):
            return value
    templar = Templar(loader=DataLoader(), variables=variables)
    for fqcn, function in (filters or {}).items():
        local = "_test_" + fqcn.replace(".", "_")
        # Only where the name is used as a filter (after a pipe): the same words in the text around, a comment that
        # names the filter, stay as they are.
        text = re.sub(r"(\|\s*)" + re.escape(fqcn) + r"\b", lambda match, name=local: match.group(1) + name, text)
        templar.environment.filters[local] = function
    if file:
        return templar.template(trust_as_template(text), preserve_trailing_newlines=True, escape_backslashes=False)
    return templar.template(trust_as_template(text))
