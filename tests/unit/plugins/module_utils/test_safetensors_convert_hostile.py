"""model_convert on hostile sources: links and index entries out of src, headers the safetensors library
refuses (safetensors 0.5.3 tensor.rs Metadata::validate), odd JSON, dest through symlinks, temp-like user dirs."""

from __future__ import annotations

import json
import os
import struct

import pytest

pytest.importorskip("numpy")

from ansible.module_utils.testing import patch_module_args  # noqa: E402
from ansible_collections.ascendai.vllm.plugins.module_utils import _safetensors_convert as sc  # noqa: E402
from ansible_collections.ascendai.vllm.plugins.modules import model_convert  # noqa: E402

F32_2x2 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.25)


def raw_st(path, header, data, length=None):
    """Write a safetensors file with this exact header object (json text) and data."""
    text = header if isinstance(header, str) else json.dumps(header)
    text = text.encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text) if length is None else length) + text + data)


def small_model(d, header=None, data=None, index=None, config=None):
    os.makedirs(d, exist_ok=True)
    if header is None:
        header = {"__metadata__": {"format": "pt"},
                  "a.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                  "b.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [16, 32]}}
        data = F32_2x2 + F32_2x2
    raw_st(os.path.join(d, "model-00001-of-00001.safetensors" if index else "model.safetensors"), header, data)
    if index is not None:
        with open(os.path.join(d, sc.INDEX_NAME), "w") as f:
            f.write(index if isinstance(index, str) else json.dumps(index))
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(json.dumps({"model_type": "llama", "torch_dtype": "float32"}) if config is None else config)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        f.write('{"model": {}}')


@pytest.fixture
def model(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    small_model(src)
    return src, dest


def test_small_model_converts(model):
    src, dest = model
    assert sc.convert_model(src, dest, "bfloat16", fsync=False)["tensors"] == 2


# --------------------------------------------------------------------------- out of src


def test_symlink_out_of_src_is_not_copied(model, tmp_path):
    src, dest = model
    secret = tmp_path / "secret"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    os.remove(os.path.join(src, "tokenizer.json"))
    os.symlink(str(secret), os.path.join(src, "tokenizer.json"))
    with pytest.raises(sc.ConvertError, match=r"tokenizer.json resolves to .*secret, outside src"):
        sc.convert_model(src, dest, "bfloat16", fsync=False)
    assert not os.path.exists(dest)


def test_symlink_to_etc_passwd_is_refused(model):
    src, dest = model
    os.remove(os.path.join(src, "tokenizer.json"))
    os.symlink("/etc/passwd", os.path.join(src, "tokenizer.json"))
    with pytest.raises(sc.ConvertError, match="outside src"):
        sc.convert_model(src, dest, "bfloat16", fsync=False)
    assert not os.path.exists(dest)


def test_hugging_face_cache_snapshot_links_are_followed(tmp_path):
    # huggingface_hub cache: snapshots/<rev>/<file> -> ../../blobs/<hash>
    repo = tmp_path / "hub" / "models--org--tiny"
    staging = str(tmp_path / "staging")
    small_model(staging)
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / "0123abc"
    snap.mkdir(parents=True)
    for i, name in enumerate(sorted(os.listdir(staging))):
        os.rename(os.path.join(staging, name), str(repo / "blobs" / f"blob{i}"))
        os.symlink(f"../../blobs/blob{i}", str(snap / name))
    res = sc.convert_model(str(snap), str(tmp_path / "dest"), "float16", fsync=False)
    assert res["tensors"] == 2 and "tokenizer.json" in res["copied_files"]


@pytest.mark.parametrize("entry", ["../other/model-00001-of-00001.safetensors", "ABS"])
def test_index_entries_outside_src_are_refused(tmp_path, entry):
    other = str(tmp_path / "other")
    small_model(other, index={"weight_map": {"a.weight": "model-00001-of-00001.safetensors",
                                             "b.weight": "model-00001-of-00001.safetensors"}})
    if entry == "ABS":
        entry = os.path.join(other, "model-00001-of-00001.safetensors")
    src = str(tmp_path / "src")
    small_model(src, index={"weight_map": {"a.weight": entry, "b.weight": entry}})
    with pytest.raises(sc.ConvertError, match="weight_map names shard\\(s\\) outside src"):
        sc.convert_model(src, str(tmp_path / "dest"), "bfloat16", fsync=False)
    assert not os.path.exists(str(tmp_path / "dest"))


@pytest.mark.parametrize("index,words", [
    ('{"weight_map": ["model-00001-of-00001.safetensors"]}', "must map tensor names"),
    ('{"weight_map": {"a.weight": 3}}', "outside src"),
    ('{"weight_map": {"a.weight": null}}', "outside src"),
    ('{"weight_map": {"a.weight": ""}}', "outside src"),
    ('{"weight_map": {"a.weight": {"x": 1}}}', "outside src"),
    ("[1, 2]", "cannot read weight_map"),
    ('{"weight_map": "model.safetensors"}', "must map tensor names"),
])
def test_odd_weight_maps_are_clear_errors(tmp_path, index, words):
    src = str(tmp_path / "src")
    small_model(src, index=index)
    with pytest.raises(sc.ConvertError, match=words):
        sc.convert_model(src, str(tmp_path / "dest"), "bfloat16", fsync=False)


def test_list_config_is_a_clear_error(tmp_path):
    src = str(tmp_path / "src")
    small_model(src, config="[1, 2, 3]")
    with pytest.raises(sc.ConvertError, match="config.json holds a JSON list, not an object"):
        sc.convert_model(src, str(tmp_path / "dest"), "bfloat16", fsync=False)


def test_absurd_shard_size_is_a_clear_error():
    with pytest.raises(sc.ConvertError, match="max_shard_size"):
        sc.parse_size("9" * 400)


# --------------------------------------------------------------------------- headers the library refuses


def t(dtype="F32", shape=(2, 2), offsets=(0, 16)):
    return {"dtype": dtype, "shape": list(shape) if isinstance(shape, tuple) else shape, "data_offsets": list(offsets)}


BAD_HEADERS = [
    # overlapping: b starts inside a
    ({"a": t(), "b": t(offsets=(8, 24))}, F32_2x2 + F32_2x2[:8], "overlaps the previous tensor"),
    # gap between a and b
    ({"a": t(), "b": t(offsets=(24, 40))}, F32_2x2 * 2 + b"\0" * 8, "leaves a gap"),
    # first tensor not at 0
    ({"a": t(offsets=(8, 24))}, b"\0" * 8 + F32_2x2, "leaves a gap"),
    # bytes after the last tensor
    ({"a": t()}, F32_2x2 + b"junk", "tensors end at data offset 16 but the file has 20"),
    # duplicate name: json keeps the last, one tensor was silently lost
    ('{"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}, '
     '"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [16, 32]}}', F32_2x2 * 2, "'a' appears twice"),
    ({"a": t(shape=(-2, -2))}, F32_2x2, "not a list of non-negative integers"),
    ({"a": t(dtype="F33")}, F32_2x2, "has dtype 'F33'"),
    ({"a": t(dtype=7)}, F32_2x2, "has dtype 'int'"),
    ({"a": t(shape=[2.0, 2.0])}, F32_2x2, "not a list of non-negative integers"),
    ({"a": t(shape=["2", "2"])}, F32_2x2, "not a list of non-negative integers"),
    ({"a": t(shape=[True, 4])}, F32_2x2, "not a list of non-negative integers"),
    ({"a": t(shape=2)}, F32_2x2, "not a list of non-negative integers"),
    ('{"a": {"dtype": "F32", "shape": [1e400], "data_offsets": [0, 16]}}', F32_2x2, "non-negative integers"),
    ('{"a": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 16]}}', F32_2x2, "NaN is not JSON"),
    ('{"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 1e400]}}', F32_2x2, "not two non-negative"),
    ({"a": t(offsets=(0, 16, 32))}, F32_2x2, "not two non-negative"),
    ({"a": t(shape=(2**40, 2**40))}, F32_2x2, "overflows 64 bits"),
    ({"a": t(shape=(2, 3))}, F32_2x2, r"is F32\[2, 3\] \(24 bytes\) but its data_offsets span 16"),
    ({"a": "F32"}, F32_2x2, "has dtype 'NoneType'"),
    ({"__metadata__": {"format": 3}, "a": t()}, F32_2x2, "__metadata__ must map names to strings"),
    ("[" * 100000 + "]" * 100000, b"", "not valid JSON"),
]


@pytest.mark.parametrize("header,data,words", BAD_HEADERS, ids=[w[:30] for _h, _d, w in BAD_HEADERS])
def test_bad_headers_are_refused_with_the_reason(tmp_path, header, data, words):
    src = str(tmp_path / "src")
    small_model(src, header=header, data=data)
    with pytest.raises(sc.ConvertError, match=words):
        sc.convert_model(src, str(tmp_path / "dest"), "bfloat16", fsync=False)
    assert not os.path.exists(str(tmp_path / "dest"))


def test_module_reports_a_bad_header_instead_of_a_traceback(tmp_path, capsys):
    src = str(tmp_path / "src")
    small_model(src, header='{"a": {"dtype": "F32", "shape": [1e400], "data_offsets": [0, 16]}}', data=F32_2x2)
    with patch_module_args({"src": src, "dest": str(tmp_path / "dest"), "dtype": "float16"}), \
            pytest.raises(SystemExit):
        model_convert.main()
    res = json.loads(capsys.readouterr().out)
    assert res["failed"] is True and "model.safetensors: tensor 'a' shape [inf]" in res["msg"]


# --------------------------------------------------------------------------- dest


def test_dest_inside_src_through_a_symlink_is_refused(model, tmp_path):
    src, _dest = model
    os.symlink(src, str(tmp_path / "alias"))
    with pytest.raises(sc.ConvertError, match="must be outside src.*through symlinks"):
        sc.convert_model(src, str(tmp_path / "alias" / "bf16"), "bfloat16", fsync=False)
    assert sorted(os.listdir(src)) == ["config.json", "model.safetensors", "tokenizer.json"]


def test_symlinked_dest_fails_before_anything_is_replaced(model, tmp_path):
    src, _dest = model
    real = tmp_path / "real"
    sc.convert_model(src, str(real), "float16", fsync=False)
    before = sorted(os.listdir(str(real)))
    link = tmp_path / "served"
    os.symlink(str(real), str(link))
    with pytest.raises(sc.ConvertError, match="is a symlink .*give the real directory"):
        sc.convert_model(src, str(link), "bfloat16", fsync=False)
    assert os.path.islink(str(link)) and os.readlink(str(link)) == str(real)
    assert sorted(os.listdir(str(real))) == before
    assert json.load(open(str(real / sc.MARKER_NAME)))["dtype"] == "float16"
    assert sorted(os.listdir(str(tmp_path))) == ["real", "served", "src"]


def test_user_directory_named_like_a_temp_dir_is_kept(model, tmp_path):
    src, dest = model
    mine = tmp_path / ".dest.convert-999999999-mine"  # a temp-like name, a pid that does not run, not ours
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    sc.convert_model(src, dest, "bfloat16", fsync=False)
    assert (mine / "notes.txt").read_text() == "keep me"


def test_temp_dir_of_a_killed_run_is_removed(model, tmp_path):
    src, dest = model
    stale = tmp_path / ".dest.convert-999999999-abc"
    stale.mkdir()
    (stale / sc.TEMP_OWNER_NAME).write_text(json.dumps({"pid": 999999999, "dest": dest}))
    (stale / "model.safetensors").write_bytes(b"half")
    sc.convert_model(src, dest, "bfloat16", fsync=False)
    assert sorted(os.listdir(str(tmp_path))) == ["dest", "src"]
    assert not os.path.exists(os.path.join(dest, sc.TEMP_OWNER_NAME))
