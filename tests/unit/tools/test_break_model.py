"""tests/tools/break_model.py: one square tensor transposed, everything else byte for byte the same."""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
_SPEC = importlib.util.spec_from_file_location("break_model", ROOT / "tests" / "tools" / "break_model.py")
break_model = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(break_model)


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        raw = array.tobytes()
        header[name] = {"dtype": {"float32": "F32", "float16": "F16"}[array.dtype.name], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read(path, name, dtype):
    data = path.read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    meta = json.loads(data[8:8 + size])[name]
    begin, end = meta["data_offsets"]
    return np.frombuffer(data[8 + size + begin:8 + size + end], dtype=dtype).reshape(meta["shape"])


@pytest.fixture
def model(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text('{"model_type": "llama"}')
    q = np.arange(9, dtype=np.float32).reshape(3, 3)
    write_safetensors(src / "model.safetensors", {"q": q, "rect": np.ones((2, 4), np.float16),
                                                  "h": np.arange(4, dtype=np.float16).reshape(2, 2)})
    return src


def test_one_tensor_transposed_the_rest_the_same(model, tmp_path):
    assert break_model.main([str(model), str(tmp_path / "dest"), "--tensor", "q"]) == 0
    dest = tmp_path / "dest"
    assert (dest / "config.json").read_bytes() == (model / "config.json").read_bytes()
    src_bytes, dest_bytes = (model / "model.safetensors").read_bytes(), (dest / "model.safetensors").read_bytes()
    assert len(src_bytes) == len(dest_bytes) and src_bytes != dest_bytes
    assert (read(dest / "model.safetensors", "q", np.float32) == np.arange(9, dtype=np.float32).reshape(3, 3).T).all()
    assert (read(dest / "model.safetensors", "rect", np.float16) == 1).all()
    before = read(model / "model.safetensors", "h", np.float16)
    assert (read(dest / "model.safetensors", "h", np.float16) == before).all()
    assert break_model.main([str(model), str(tmp_path / "dest2"), "--tensor", "h"]) == 0
    assert (read(tmp_path / "dest2" / "model.safetensors", "h", np.float16)
            == np.arange(4, dtype=np.float16).reshape(2, 2).T).all()


@pytest.mark.parametrize("tensor, message", [("rect", r"rect is F16 \[2, 4\]: pick a square"),
                                             ("nope", "no safetensors file of .* holds nope")])
def test_refuses_what_it_cannot_break(model, tmp_path, tensor, message):
    with pytest.raises(SystemExit, match=message):
        break_model.main([str(model), str(tmp_path / "dest"), "--tensor", tensor])


def test_refuses_an_existing_destination(model, tmp_path):
    with pytest.raises(SystemExit, match="exists"):
        break_model.main([str(model), str(model)])
