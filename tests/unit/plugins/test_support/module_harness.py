"""Run a module's main() in-process, as community.docker's unit tests do.

``exit_json`` and ``fail_json`` raise instead of printing and exiting, so a test reads the result as a dict::

    from ansible_collections.ascendai.vllm.tests.unit.plugins.test_support.module_harness import run_module

    ok, result = run_module(monkeypatch, npu_info.main, {"detail": False})

``run_command``, ``get_bin_path`` and ``warn`` can be replaced for the run (the module's own code is not touched).
"""

from __future__ import annotations

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


class AnsibleExitJson(Exception):
    """exit_json was called: ``args[0]`` is the result."""


class AnsibleFailJson(Exception):
    """fail_json was called: ``args[0]`` is the result (``msg`` and the rest)."""


def patch_exits(monkeypatch, keep_no_log=False):
    """Make exit_json / fail_json raise AnsibleExitJson / AnsibleFailJson with the result.

    ``keep_no_log``: add the module's no_log values to the result as ``_no_log_values`` (what Ansible would mask).
    """

    def exit_json(self, **kwargs):
        if keep_no_log:
            kwargs["_no_log_values"] = set(self.no_log_values)
        raise AnsibleExitJson(kwargs)

    def fail_json(self, **kwargs):
        if keep_no_log:
            kwargs["_no_log_values"] = set(self.no_log_values)
        raise AnsibleFailJson(kwargs)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)


def patch_module(monkeypatch, run_command=None, bin_path=None, warnings=None):
    """Replace what a module asks of the host for the test.

    run_command: a callable (argv, **kwargs) -> (rc, stdout, stderr); bin_path: the path get_bin_path returns
    (``False`` keeps the real one, ``None`` returns None: the tool is missing); warnings: a list that collects warn().
    """
    if run_command is not None:
        monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, argv, **kw: run_command(argv, **kw))
    if bin_path is not False:
        monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                            lambda self, name, required=False, opt_dirs=None: bin_path)
    if warnings is not None:
        monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, msg: warnings.append(msg))


def run_module(monkeypatch, main, args, keep_no_log=False):
    """Run ``main()`` with ``args``; return (ok, result): ok is False when the module failed."""
    patch_exits(monkeypatch, keep_no_log=keep_no_log)
    with patch_module_args(args):
        try:
            main()
        except AnsibleExitJson as exc:
            return True, exc.args[0]
        except AnsibleFailJson as exc:
            return False, exc.args[0]
    raise AssertionError("the module returned without exit_json or fail_json")
