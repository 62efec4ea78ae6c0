"""Root never writes where another account points: a fetch into a directory that the service account owns (the model
role gives it the model directory, then runs the fetch as root on every run) must not follow a symbolic link that
the account put under dest, before or during the transfer. Outside dest nothing is written, chmod-ed or chown-ed;
the run fails naming the link."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading

import pytest
from ansible.module_utils.testing import patch_module_args
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.ascendai.vllm.plugins.module_utils import _bundle as bundle_utils
from ansible_collections.ascendai.vllm.plugins.module_utils import _model_fetch as mf
from ansible_collections.ascendai.vllm.plugins.modules import model_fetch
from ansible_collections.ascendai.vllm.tests.unit.plugins.module_utils import test_model_fetch as helpers
from ansible_collections.ascendai.vllm.tests.unit.plugins.module_utils.test_model_fetch import (
    MODEL,
    RangeHandler,
    make_bundle,
    model_files,
)

server = helpers.server

SECRET = b"root's own file, not the bundle's\n"


def outside_dir(tmp_path):
    """A directory outside dest holding root-owned 0600 files named like the model's files."""
    out = tmp_path / "outside"
    (out / "sub").mkdir(parents=True, exist_ok=True)
    for rel in ("extra.txt", "sub/extra.txt", "config.json", "config.json.part", "sub/extra.txt.part",
                "status.json", "config.json.sha256"):
        path = out / rel
        path.write_bytes(SECRET)
        os.chmod(path, 0o600)
    return out


def snapshot(root):
    """Every entry under ``root``: (type, mode, uid, gid, sha256 of a file's content)."""
    seen = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st_ = os.lstat(path)
            digest = None
            if stat.S_ISREG(st_.st_mode):
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()
            seen[os.path.relpath(path, root)] = (stat.S_IFMT(st_.st_mode), stat.S_IMODE(st_.st_mode), st_.st_uid,
                                                 st_.st_gid, digest)
    return seen


def link_in(dest, rel, target):
    """Replace ``dest/rel`` (a file or a directory) by a symbolic link to ``target``, as the account could.

    The fetch may be writing there at the same moment (parallel workers create files and directories): a step that
    loses that race is tried again, as the account would, until the link is in place."""
    path = os.path.join(dest, rel)
    for attempt in range(200):
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                os.rename(path, f"{path}.moved{attempt}")
            elif os.path.lexists(path):
                os.unlink(path)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.symlink(target, path)
            return
        except (FileExistsError, FileNotFoundError, IsADirectoryError, NotADirectoryError):
            # the fetch turned the path into a directory (or its parent into a file) between the look and the step
            continue
    raise AssertionError(f"could not put a link at {path}: the fetch kept recreating it")


def change_bundle(root):
    """New content for every file of the model, so that the next run fetches each of them again."""
    files = {rel: data + b"v2" for rel, data in model_files().items()}
    make_bundle(root, files)
    return files


@pytest.mark.parametrize("rel, target", [
    ("sub", "outside"),                                    # a directory of the model
    ("config.json", "outside/config.json"),                # a file of the model
    (bundle_utils.STATE_DIR, "outside"),                   # the state directory (.part, sha256 cache, status)
])
def test_a_link_under_dest_is_refused_and_nothing_outside_changes(server, tmp_path, rel, target):
    make_bundle(server.root, model_files())
    dest = str(tmp_path / "dest")
    mf.fetch_model(dest, MODEL, src=server.url, retries=0)
    out = outside_dir(tmp_path)
    link_in(dest, rel, os.path.join(str(tmp_path), target))
    change_bundle(server.root)
    before = snapshot(out)
    with pytest.raises(bundle_utils.BundleError) as exc:
        mf.fetch_model(dest, MODEL, src=server.url, retries=0)
    msg = str(exc.value)
    assert "symbolic link" in msg and os.path.join(dest, rel) in msg and "Remove" in msg, msg
    assert snapshot(out) == before


def test_a_link_under_dest_is_refused_by_a_check_run_too(server, tmp_path):
    make_bundle(server.root, model_files())
    dest = str(tmp_path / "dest")
    mf.fetch_model(dest, MODEL, src=server.url, retries=0)
    out = outside_dir(tmp_path)
    link_in(dest, "sub", str(out))
    before = snapshot(out)
    with pytest.raises(bundle_utils.BundleError, match="symbolic link"):
        mf.fetch_model(dest, MODEL, src=server.url, retries=0, check_mode=True)
    assert snapshot(out) == before


def run_module(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit):
        model_fetch.main()
    return json.loads(capsys.readouterr().out)


def test_the_module_does_not_chown_or_chmod_through_a_link(server, tmp_path, capsys):
    """The observed case: sub/ became a link, and a root-owned 0600 file outside dest became nobody 0640."""
    make_bundle(server.root, model_files())
    dest = str(tmp_path / "dest")
    args = {"src": server.url, "model": MODEL, "dest": dest, "owner": "nobody", "mode": "0640",
            "directory_mode": "0750", "retries": 0}
    assert run_module(capsys, args)["changed"] is True
    out = outside_dir(tmp_path)
    link_in(dest, "sub", str(out))
    before = snapshot(out)
    res = run_module(capsys, args)          # nothing to fetch: only the owner and modes are applied
    assert res.get("failed") is True and "symbolic link" in res["msg"] and os.path.join(dest, "sub") in res["msg"]
    assert snapshot(out) == before
    change_bundle(server.root)
    res = run_module(capsys, args)          # everything to fetch
    assert res.get("failed") is True and "symbolic link" in res["msg"]
    assert snapshot(out) == before


def test_attributes_refuse_a_hard_linked_file(server, tmp_path, capsys):
    make_bundle(server.root, model_files())
    dest = str(tmp_path / "dest")
    args = {"src": server.url, "model": MODEL, "dest": dest, "mode": "0640", "retries": 0}
    run_module(capsys, args)
    other = tmp_path / "other"
    os.link(os.path.join(dest, "config.json"), other)
    os.chmod(other, 0o600)
    res = run_module(capsys, args)
    assert res.get("failed") is True and "hard link" in res["msg"]
    assert stat.S_IMODE(os.stat(other).st_mode) == 0o600


def test_a_plain_run_still_sets_owner_and_modes_and_is_idempotent(server, tmp_path, capsys):
    make_bundle(server.root, model_files())
    dest = str(tmp_path / "dest")
    args = {"src": server.url, "model": MODEL, "dest": dest, "owner": "nobody", "group": "0", "mode": "u=rw,g=r,o=",
            "directory_mode": "0750", "retries": 0}
    assert run_module(capsys, args)["changed"] is True
    st_ = os.stat(os.path.join(dest, "sub", "extra.txt"))
    assert stat.S_IMODE(st_.st_mode) == 0o640 and st_.st_uid == __import__("pwd").getpwnam("nobody").pw_uid
    assert stat.S_IMODE(os.stat(os.path.join(dest, "sub")).st_mode) == 0o750
    assert run_module(capsys, args)["changed"] is False


def test_an_unknown_owner_is_named(server, tmp_path, capsys):
    make_bundle(server.root, model_files())
    res = run_module(capsys, {"src": server.url, "model": MODEL, "dest": str(tmp_path / "d"),
                              "owner": "no-such-user-xyz"})
    assert res.get("failed") is True and "owner=no-such-user-xyz" in res["msg"]


# --------------------------------------------------------------------------- the race


class SwapHandler(RangeHandler):
    """Before the body of ``server.swap_on`` is sent, runs ``server.swap()`` once: the account's move, in the middle
    of the transfer."""

    def do_GET(self):
        rel, _path = self._target()
        swap = None
        with self.server.lock:
            if rel == self.server.swap_on and self.server.swap is not None:
                swap, self.server.swap = self.server.swap, None
        if swap is not None:
            try:
                swap()
            except Exception as exc:  # recorded for the test: a failed swap must not look like a network error
                self.server.swap_error = exc
        super().do_GET()


FILES = sorted(model_files())
TARGETS = ["sub", bundle_utils.STATE_DIR, f"{bundle_utils.STATE_DIR}/sub", "config.json", "sub/extra.txt",
           f"{bundle_utils.STATE_DIR}/config.json.part", f"{bundle_utils.STATE_DIR}/sub/extra.txt.part"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(target=st.sampled_from(TARGETS), when=st.sampled_from(["before"] + FILES),
       first_run=st.booleans(), parallel=st.sampled_from([1, 4]))
def test_hypothesis_a_link_placed_before_or_during_a_run_never_lets_it_write_outside(
        server, tmp_path_factory, target, when, first_run, parallel):
    tmp = tmp_path_factory.mktemp("race")
    server.swap, server.swap_on, server.swap_error = None, None, None
    server.RequestHandlerClass = SwapHandler
    make_bundle(server.root, model_files())
    dest = str(tmp / "dest")
    if not first_run:
        mf.fetch_model(dest, MODEL, src=server.url, retries=0)
        change_bundle(server.root)
    out = outside_dir(tmp)
    before = snapshot(out)
    target_path = os.path.join(str(out), os.path.basename(target))

    def swap():
        link_in(dest, target, target_path if not target.endswith(("sub", bundle_utils.STATE_DIR)) else str(out))

    if when == "before":
        swap()
    else:
        server.swap, server.swap_on = swap, f"models/{MODEL}/{when}"
    try:
        mf.fetch_model(dest, MODEL, src=server.url, retries=0, parallel=parallel)
    except bundle_utils.BundleError as exc:
        assert server.swap_error is None, f"the test's own swap failed: {server.swap_error!r}"
        # a link in place names it; a .part removed before the link was made (the account's unlink) is named too
        assert any(words in str(exc) for words in ("symbolic link", "stopped", "during the transfer")), str(exc)
    assert server.swap_error is None, f"the test's own swap failed: {server.swap_error!r}"
    assert snapshot(out) == before, f"{target} linked {when}: a file outside dest changed"
    server.swap = None
    server.RequestHandlerClass = RangeHandler


def test_the_race_also_holds_without_http(tmp_path):
    """A directory source, a link swapped in while the first file is being copied: nothing outside changes."""
    bundle = make_bundle(str(tmp_path / "b"), model_files())
    dest = str(tmp_path / "dest")
    out = outside_dir(tmp_path)
    before = snapshot(out)
    original = bundle_utils.DirSource.open
    done = threading.Event()

    def open_and_swap(self, rel, offset):
        if not done.is_set():
            done.set()
            link_in(dest, "sub", str(out))
        return original(self, rel, offset)

    bundle_utils.DirSource.open = open_and_swap
    try:
        with pytest.raises(bundle_utils.BundleError, match="symbolic link"):
            mf.fetch_model(dest, MODEL, src=bundle.root, retries=0, parallel=1)
    finally:
        bundle_utils.DirSource.open = original
    assert snapshot(out) == before


def test_check_mode_with_an_owner_a_real_run_creates_first_reports_instead_of_failing(tmp_path):
    # A check run on a fresh node: the model role's owner does not exist yet (a real run creates it first).
    from ansible_collections.ascendai.vllm.plugins.module_utils import _bundle
    dest = tmp_path / "model"
    dest.mkdir()
    (dest / "config.json").write_text("{}")
    owner = "ascendai-no-such-user-x"
    assert _bundle.set_attributes(str(dest), ["config.json"], owner=owner, group=owner, check_mode=True) is True
    assert _bundle.set_attributes(str(tmp_path / "absent"), ["config.json"], owner=owner, check_mode=True) is False
    with pytest.raises(_bundle.BundleError, match="no such user on this host"):
        _bundle.set_attributes(str(dest), ["config.json"], owner=owner, check_mode=False)


def test_a_part_file_removed_during_its_transfer_is_named(server, tmp_path):
    """The account deletes a .part while it is being written (before it could put a link there): the run fails
    naming the file and saying what happened, and nothing is moved into the model."""
    server.RequestHandlerClass = SwapHandler
    server.swap_error = None
    make_bundle(server.root, model_files())
    dest = str(tmp_path / "dest")
    part = os.path.join(dest, bundle_utils.STATE_DIR, "config.json.part")
    server.swap, server.swap_on = (lambda: os.unlink(part)), f"models/{MODEL}/config.json"
    try:
        with pytest.raises(bundle_utils.BundleError) as exc:
            mf.fetch_model(dest, MODEL, src=server.url, retries=0, parallel=1)
    finally:
        server.RequestHandlerClass = RangeHandler
    assert server.swap_error is None, repr(server.swap_error)
    assert f"{part} was removed during the transfer" in str(exc.value) and "re-run" in str(exc.value)
    assert not os.path.exists(os.path.join(dest, "config.json"))
