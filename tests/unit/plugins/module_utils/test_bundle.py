"""bundle: the manifest (sha256sum's own output, read, written, merged under the lock), file selection with the
messages a role shows, verification in place, and the sha256 cache."""

from __future__ import annotations

import hashlib
import os
import stat
import re
import shutil
import subprocess
import sys
import threading

import pytest
import yaml

from ansible_collections.ascendai.vllm.plugins.doc_fragments.bundle_transfer import ModuleDocFragment
from ansible_collections.ascendai.vllm.plugins.module_utils import _bundle as bundle
from ansible_collections.ascendai.vllm.plugins.modules import bundle_fetch, model_fetch

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
SHA256SUM = shutil.which("sha256sum")
needs_sha256sum = pytest.mark.skipif(SHA256SUM is None, reason="coreutils sha256sum is not installed")

DRIVER = "huawei/Ascend-hdk-910b-npu-driver_25.2.0_linux-x86-64.run"
FIRMWARE = "huawei/Ascend-hdk-910b-npu-firmware_7.7.0.6.236.run"
TOOLKIT = "huawei/Ascend-cann-toolkit_8.3.RC1_linux-x86_64.run"


def write(root, rel, data):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    return hashlib.sha256(data).hexdigest()


def make_tree(root):
    sums = {rel: write(str(root), rel, rel.encode() * 3) for rel in
            (DRIVER, FIRMWARE, TOOLKIT, "python/cpython-3.11.15+20260807-x86_64-unknown-linux-gnu-install_only.tar.gz",
             "models/tiny/config.json", "models/tiny/sub/extra.txt", "wheels/x86_64/numpy-2.2.6-cp311.whl")}
    write(str(root), ".work/sandbox-bundle-x86_64.stamp", b"stamp")
    write(str(root), "models/tiny/.ascendai_fetch/config.json.sha256", b"{}")
    return sums


@needs_sha256sum
def test_parse_reads_sha256sum_output_text_and_binary_mode(tmp_path):
    sums = make_tree(tmp_path)
    text = subprocess.run([SHA256SUM, DRIVER, "-b", FIRMWARE], cwd=tmp_path, check=True,
                          capture_output=True, text=True).stdout
    assert "*" + FIRMWARE in text  # sha256sum -b marks binary mode with '*'
    assert bundle.parse_manifest(text) == {DRIVER: sums[DRIVER], FIRMWARE: sums[FIRMWARE]}


@needs_sha256sum
def test_written_manifest_is_what_sha256sum_checks_and_the_builder_writes(tmp_path):
    sums = make_tree(tmp_path)
    assert bundle.write_manifest(str(tmp_path), sums) is True
    assert bundle.write_manifest(str(tmp_path), dict(reversed(list(sums.items())))) is False  # same content
    check = subprocess.run([SHA256SUM, "-c", "--strict", bundle.MANIFEST_NAME], cwd=tmp_path,
                           capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    text = (tmp_path / bundle.MANIFEST_NAME).read_text()
    # the order of tools/sandbox/bundle.sh: LC_ALL=C sort -t " " -k 3 (by path, byte order)
    sort = subprocess.run(["sort", "-t", " ", "-k", "3"], input=text, capture_output=True, text=True,
                          env=dict(os.environ, LC_ALL="C"), check=True).stdout
    assert text == sort
    assert oct(os.stat(tmp_path / bundle.MANIFEST_NAME).st_mode & 0o777) == "0o644"
    # the same lines as the offline_bundle role's builder (roles/offline_bundle/files/bundle_tools.py manifest)
    sys.path.insert(0, os.path.join(ROOT, "roles", "offline_bundle", "files"))
    try:
        import bundle_tools
    finally:
        sys.path.pop(0)
    assert "".join(line + "\n" for line in bundle_tools.manifest(str(tmp_path))) == text


def test_tree_entries_leave_out_dot_directories_and_the_manifest(tmp_path):
    sums = make_tree(tmp_path)
    bundle.write_manifest(str(tmp_path), sums)
    assert bundle.tree_entries(str(tmp_path)) == sums
    assert bundle.tree_entries(str(tmp_path), "models/tiny") == {k: v for k, v in sums.items()
                                                                 if k.startswith("models/tiny/")}
    assert not os.path.exists(tmp_path / bundle.STATE_DIR)  # rehash=True writes no cache


def test_merge_keeps_other_lines_and_replaces_a_directory(tmp_path):
    sums = make_tree(tmp_path)
    bundle.write_manifest(str(tmp_path), sums)
    os.unlink(tmp_path / "models/tiny/sub/extra.txt")
    new = write(str(tmp_path), "models/tiny/config.json", b'{"architectures": ["LlamaForCausalLM"]}')
    res = bundle.update_manifest(str(tmp_path), prefixes=["models/tiny"])
    assert res["changed"] is True and res["entries"] == {"models/tiny/config.json": new}
    got = bundle.read_manifest(str(tmp_path))
    want = {k: v for k, v in sums.items() if not k.startswith("models/tiny/")}
    want["models/tiny/config.json"] = new
    assert got == want
    assert bundle.update_manifest(str(tmp_path), paths=[DRIVER])["changed"] is False
    with pytest.raises(bundle.BundleError, match="no such file"):
        bundle.update_manifest(str(tmp_path), paths=["huawei/absent.run"])


def test_a_merge_waits_for_the_lock_another_writer_holds(tmp_path):
    """The lock is what keeps two writers from losing each other's lines: a merge must not start while another
    holds it, and must then keep the other writer's line."""
    make_tree(tmp_path)
    done = threading.Event()

    def merge():
        bundle.merge_manifest(str(tmp_path), {"python/b.tar.gz": "b" * 64})
        done.set()

    with bundle.manifest_lock(str(tmp_path)):
        worker = threading.Thread(target=merge, daemon=True)
        worker.start()
        worker.join(0.5)
        held = not done.is_set()  # a merge that ignores the lock is done by now
        bundle.write_manifest(str(tmp_path), {"python/a.tar.gz": "a" * 64})   # the holder's own write
    worker.join(30)
    assert held and done.is_set()
    assert bundle.read_manifest(str(tmp_path)) == {"python/a.tar.gz": "a" * 64, "python/b.tar.gz": "b" * 64}


def test_concurrent_writers_in_processes_lose_nothing(tmp_path):
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from ansible_collections.ascendai.vllm.plugins.module_utils import _bundle as bundle\n"
            "for i in range(25):\n"
            "    bundle.merge_manifest(sys.argv[2], {f'w/{sys.argv[3]}-{i}': format(i, '064x')})\n")
    tree = os.path.join(ROOT, ".cache", "collections")
    procs = [subprocess.Popen([sys.executable, "-c", code, tree, str(tmp_path), name]) for name in ("a", "b", "c")]
    assert [p.wait(120) for p in procs] == [0, 0, 0]
    assert len(bundle.read_manifest(str(tmp_path))) == 75


def test_missing_file_message_names_the_line_to_add_and_the_hint():
    entries = {DRIVER: "a" * 64}
    hint = "Download the firmware from Huawei's support site, or set ascend_driver_firmware_version."
    with pytest.raises(bundle.BundleError) as exc:
        bundle.select(entries, [DRIVER, FIRMWARE], where="http://bundle/", hint=hint)
    msg = str(exc.value)
    assert f"{FIRMWARE} is not in the MANIFEST.sha256 of http://bundle/" in msg
    assert f"(cd BUNDLE && sha256sum {FIRMWARE} >> MANIFEST.sha256)" in msg
    assert msg.endswith(hint)


def test_select_files_globs_and_prefix():
    entries = {DRIVER: "a" * 64, TOOLKIT: "b" * 64, "models/m/config.json": "c" * 64, "models/m/d/x": "d" * 64,
               "models/mm/config.json": "e" * 64}
    assert bundle.select(entries, [DRIVER]) == [(DRIVER.split("/")[1], DRIVER, "a" * 64)]
    assert bundle.select(entries, ["huawei/*-toolkit_*.run"]) == [(TOOLKIT.split("/")[1], TOOLKIT, "b" * 64)]
    assert bundle.select(entries, prefix="models/m/") == [("config.json", "models/m/config.json", "c" * 64),
                                                          ("d/x", "models/m/d/x", "d" * 64)]
    with pytest.raises(bundle.BundleError, match="lists no files under models/n/; directories in this bundle's "
                                                 "models/: m, mm. Put"):
        bundle.select(entries, prefix="models/n")
    with pytest.raises(bundle.BundleError, match="both land in dest as config.json"):
        bundle.select(entries, ["models/m/config.json", "models/mm/config.json"])
    with pytest.raises(bundle.BundleError, match="name the bundle's files"):
        bundle.select(entries)


def test_verify_in_place_names_the_file_and_both_sums(tmp_path):
    sums = make_tree(tmp_path)
    rows = bundle.select({DRIVER: sums[FIRMWARE], FIRMWARE: sums[FIRMWARE]}, [DRIVER, FIRMWARE])
    with pytest.raises(bundle.BundleError) as exc:
        bundle.verify_in_place(str(tmp_path), rows, hint="Nothing was installed.")
    msg = str(exc.value)
    # the message molecule/ascend_faults looks for
    assert re.search(r"Ascend-hdk-910b-npu-driver_25.2.0_linux-x86-64.run. sha256 [0-9a-f]{64}, "
                     r"but MANIFEST.sha256 says [0-9a-f]{64}", msg)
    assert "firmware" not in msg and msg.endswith("Nothing was installed.")
    os.unlink(tmp_path / FIRMWARE)
    with pytest.raises(bundle.BundleError, match="firmware_7.7.0.6.236.run: no such file in the bundle"):
        bundle.verify_in_place(str(tmp_path), bundle.select(sums, [FIRMWARE]))


def test_read_manifest_errors(tmp_path):
    assert bundle.read_manifest(str(tmp_path)) == {}
    with pytest.raises(bundle.BundleError, match="playbooks/download.yml"):
        bundle.read_manifest(str(tmp_path), missing_ok=False)
    (tmp_path / bundle.MANIFEST_NAME).write_bytes(b"\xff\xfe")
    with pytest.raises(bundle.BundleError, match="not UTF-8"):
        bundle.read_manifest(str(tmp_path))
    with pytest.raises(bundle.BundleError, match="not a sha256"):
        bundle.format_manifest({DRIVER: "nope"})
    with pytest.raises(bundle.BundleError, match="not a plain relative path"):
        bundle.format_manifest({"../etc/passwd": "a" * 64})


def test_sha256_cache_is_keyed_by_size_and_mtime(tmp_path, monkeypatch):
    sums = make_tree(tmp_path)
    assert bundle.local_sha256(str(tmp_path), DRIVER) == (sums[DRIVER], False)
    monkeypatch.setattr(bundle, "file_sha256", lambda *a, **k: pytest.fail("hashed again"))
    assert bundle.local_sha256(str(tmp_path), DRIVER) == (sums[DRIVER], True)
    st = os.stat(tmp_path / DRIVER)
    os.utime(tmp_path / DRIVER, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert bundle.read_cached_sha256(str(tmp_path), DRIVER) is None


class _Module:
    """What apply_file_attributes asks of an AnsibleModule: its check mode (the changes go through descriptors)."""

    def __init__(self, check_mode=False):
        self.check_mode = check_mode


def _modes(dest, rels):
    return {rel: stat.S_IMODE(os.lstat(os.path.join(dest, rel) if rel else dest).st_mode) for rel in rels}


def test_file_attributes_go_to_dest_its_directories_and_files(tmp_path):
    """One home for what bundle_fetch and model_fetch did each in their main(): directory_mode on dest and the
    directories below it (and the state directory), mode on the files, owner and group on all; a file not there
    (check mode) is passed over; check mode reports without changing."""
    dest = str(tmp_path / "m")
    os.makedirs(os.path.join(dest, "sub"))
    os.makedirs(os.path.join(dest, bundle.STATE_DIR))
    for rel in ("config.json", "sub/w.safetensors"):
        with open(os.path.join(dest, rel), "w", encoding="utf-8") as handle:
            handle.write("x")
        os.chmod(os.path.join(dest, rel), 0o644)
    for rel in ("", "sub", bundle.STATE_DIR):
        os.chmod(os.path.join(dest, rel) if rel else dest, 0o755)
    files = ["config.json", "sub/w.safetensors", "not-yet.bin"]
    dirs = ["", "sub", bundle.STATE_DIR]
    before = _modes(dest, dirs + files[:2])
    assert bundle.apply_file_attributes(_Module(check_mode=True), dest, files, False, mode="0640",
                                        directory_mode="0750") is True
    assert _modes(dest, dirs + files[:2]) == before
    assert bundle.apply_file_attributes(_Module(), dest, files, False, owner=str(os.getuid()),
                                        group=str(os.getgid()), mode="0640", directory_mode="0750") is True
    assert _modes(dest, dirs + files[:2]) == {"": 0o750, "sub": 0o750, bundle.STATE_DIR: 0o750,
                                              "config.json": 0o640, "sub/w.safetensors": 0o640}
    assert bundle.apply_file_attributes(_Module(), dest, files, False, mode="0640", directory_mode="0750") is False
    assert bundle.apply_file_attributes(_Module(), dest, files, True) is True
    os.chmod(os.path.join(dest, "config.json"), 0o600)
    # no mode given: modes are left alone
    assert bundle.apply_file_attributes(_Module(), dest, files, False, owner=str(os.getuid())) is False
    assert _modes(dest, ["config.json"]) == {"config.json": 0o600}


def test_fetch_diff_names_what_was_missing_and_the_files_after():
    assert bundle.fetch_diff({"fetched": ["b", "a"], "files": ["c", "a", "b"]}) == {
        "before": {"missing_or_different": ["a", "b"]}, "after": {"files": ["a", "b", "c"]}}


def test_the_transfer_options_are_documented_once_as_they_are_specified():
    """bundle_fetch and model_fetch share their transfer options: one argument spec (transfer_argument_spec) and one
    doc fragment (ascendai.vllm.bundle_transfer), which must say the same types and defaults; neither module
    documents them again."""
    documented = yaml.safe_load(ModuleDocFragment.DOCUMENTATION)["options"]
    spec = bundle.transfer_argument_spec()
    assert set(documented) == set(spec)
    for name, option in spec.items():
        assert documented[name]["type"] == option["type"], name
        assert documented[name].get("default") == option.get("default"), name
    spec["parallel"]["default"] = 99  # a copy: a caller cannot change the next module's defaults
    assert bundle.transfer_argument_spec()["parallel"]["default"] == 4
    for module in (bundle_fetch, model_fetch):
        doc = yaml.safe_load(module.DOCUMENTATION)
        assert "ascendai.vllm.bundle_transfer" in doc["extends_documentation_fragment"], module.__name__
        assert not set(doc["options"]) & set(spec), module.__name__
