"""A safetensors header is bounded before it is parsed: its size, its tensor count and its JSON values are counted
while it is read, so a header of 92 MB (the library's ceiling is 100 MB) is refused without the gigabytes that
json.loads would spend on it; a number of more than 4,300 digits (Python's int conversion limit) is refused with a
clear message, not a traceback or Python's advice to raise the limit."""

from __future__ import annotations

import json
import struct
import tracemalloc

import pytest

from ansible_collections.ascendai.vllm.plugins.module_utils import _safetensors_convert as sc

HEADER_BYTES = 92_000_000
PEAK_LIMIT = 64 << 20


def write_header(path, pieces, total):
    """A safetensors file whose header is the concatenation of ``pieces()`` up to ``total`` bytes, written in
    pieces so that the test itself never holds it."""
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", total))
        left = total
        for block in pieces():
            block = block[:left]
            f.write(block)
            left -= len(block)
            if not left:
                break


def many_tensors():
    yield b'{"__metadata__":{"format":"pt"},'
    i = 0
    while True:
        yield b"".join(b'"t%d":{"dtype":"F32","shape":[1,1],"data_offsets":[0,0]},' % (i + k) for k in range(10_000))
        i += 10_000


def one_string():
    yield b'{"__metadata__":{"x":"'
    while True:
        yield b"a" * (1 << 20)


def many_values():
    yield b'{"t":{"dtype":"F32","shape":['
    while True:
        yield b"1," * (1 << 19)


def peak_of(fn):
    tracemalloc.start()
    try:
        try:
            fn()
        except sc.ConvertError as exc:
            error = exc
        else:
            error = None
        return tracemalloc.get_traced_memory()[1], error
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("pieces, words", [
    (many_tensors, ("tensors",)),
    (one_string, ("bytes",)),
    (many_values, ("values", "bytes")),   # whichever bound is met first
])
def test_a_92_mb_header_is_refused_before_it_is_parsed(tmp_path, pieces, words):
    path = str(tmp_path / "model.safetensors")
    write_header(path, pieces, HEADER_BYTES)
    peak, error = peak_of(lambda: sc.read_header(path))
    assert error is not None, "a 92 MB header was accepted"
    assert any(w in str(error) for w in words) and path in str(error)
    assert peak < PEAK_LIMIT, f"{peak / 2**20:.0f} MiB allocated to refuse a 92 MB header"


def test_a_real_sized_header_still_parses(tmp_path):
    """100,000 tensors (more than DeepSeek-V3 has in all its 163 shards together) in one file."""
    n = 100_000
    header = {"__metadata__": {"format": "pt"}}
    for i in range(n):
        header[f"model.layers.{i // 1000}.mlp.experts.{i % 1000}.down_proj.weight"] = {
            "dtype": "BF16", "shape": [1], "data_offsets": [2 * i, 2 * i + 2]}
    text = json.dumps(header).encode()
    path = str(tmp_path / "model.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"\0" * (2 * n))
    tensors, meta, _start, _size = sc.read_header(path)
    assert len(tensors) == n and meta == {"format": "pt"}


@pytest.mark.parametrize("number", ["9" * 5000, "1" + "0" * 4300, "-" + "9" * 4400])
def test_a_number_with_thousands_of_digits_is_a_clear_error(tmp_path, number):
    text = ('{"a":{"dtype":"F32","shape":[%s],"data_offsets":[0,4]}}' % number).encode()
    path = str(tmp_path / "model.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"\0" * 4)
    with pytest.raises(sc.ConvertError) as exc:
        sc.read_header(path)
    assert "digits" in str(exc.value) and "set_int_max_str_digits" not in str(exc.value)
    assert path in str(exc.value)


def test_size_options_with_thousands_of_digits_are_clear_errors():
    for value in ("9" * 5000 + "GB", "9" * 5000, int("9" * 4000)):
        with pytest.raises(sc.ConvertError, match="max_shard_size") as exc:
            sc.parse_size(value)
        assert len(str(exc.value)) < 300
