"""Tests for module_utils/_safetensors_convert.py.

Bit-exactness is checked twice: against an independent reference built from CPython's own
IEEE packing (struct 'e'/'f') and value comparisons, and (when installed) against torch's
``Tensor.to(dtype)``. Source files are written by a minimal writer in this file, not by the
code under test; the results are read back by ``safetensors`` when it is installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

np = pytest.importorskip("numpy")

from ansible_collections.ascendai.vllm.plugins.module_utils import _safetensors_convert as sc  # noqa: E402

BITS = {"F32": np.uint32, "F16": np.uint16, "BF16": np.uint16, "F64": np.uint64}
NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}


def import_torch():
    """Import torch (or skip), with the real sys.intern: ansible.module_utils.basic, once imported by another
    test, replaces sys.intern by an object that torch._dynamo refuses at import."""
    import sys
    current = sys.intern
    sys.intern = getattr(type(current), "unpatched_implementation", current)
    try:
        return pytest.importorskip("torch")
    finally:
        sys.intern = current


# --------------------------------------------------------------------------- independent reference


def _values_of(dtype, bits):
    """Exact float64 values of raw bits (NaNs come out as NaN)."""
    bits = np.asarray(bits, dtype=BITS[dtype])
    if dtype == "F32":
        with np.errstate(invalid="ignore"):
            return bits.view(np.float32).astype(np.float64)
    if dtype == "F64":
        return bits.view(np.float64)
    if dtype == "BF16":
        return np.array(struct.unpack(f"<{bits.size}f", b"".join(
            b"\x00\x00" + int(b).to_bytes(2, "little") for b in bits)), dtype=np.float64)
    return np.array(struct.unpack(f"<{bits.size}e", bits.tobytes()), dtype=np.float64)


def _ref_nan_bits(dtype, f32bits):
    """The NaN rule: sign and leading payload bits kept, quiet bit set."""
    b = int(f32bits)
    if dtype == "BF16":
        return (b >> 16) | 0x0040
    if dtype == "F16":
        return ((b >> 16) & 0x8000) | 0x7E00 | ((b >> 13) & 0x3FF)
    return b | 0x00400000


def _ref_round_bf16(x):
    """Nearest bf16 to the float64 value ``x`` (ties to even), by comparing the two neighbours."""
    if x == 0:
        return 0x8000 if np.signbit(x) else 0
    sign = 0x8000 if x < 0 else 0
    a = abs(x)
    if np.isinf(a):
        return sign | 0x7F80
    f32 = struct.unpack("<I", struct.pack("<f", min(a, 3.4028234663852886e38)))[0]
    lo = f32 & 0x7FFF0000
    # float32 truncation may have rounded up; step down until lo <= a
    while lo and struct.unpack("<f", lo.to_bytes(4, "little"))[0] > a:
        lo -= 0x10000
    hi = lo + 0x10000
    lo_v = struct.unpack("<f", lo.to_bytes(4, "little"))[0]
    hi_v = 2.0 ** 128 if hi >= 0x7F800000 else struct.unpack("<f", hi.to_bytes(4, "little"))[0]
    d_lo, d_hi = a - lo_v, hi_v - a
    pick = hi if (d_hi < d_lo or (d_hi == d_lo and (lo >> 16) & 1)) else lo
    return sign | (pick >> 16)


def _ref_to_f32(x):
    """float64 -> float32 bits, round to nearest even (CPython's pack), overflow to inf."""
    if np.isfinite(x) and abs(x) >= 2.0 ** 128 - 2.0 ** 103:
        x = np.copysign(np.inf, x)
    return struct.unpack("<I", struct.pack("<f", x))[0]


def _ref_to_f16(x):
    if np.isfinite(x) and abs(x) >= 65520.0:
        x = np.copysign(np.inf, x)
    return struct.unpack("<H", struct.pack("<e", x))[0]


def reference(src, dst, bits):
    """Independent conversion of raw bits ``src`` -> ``dst`` (torch's semantics for non-NaN values)."""
    out = []
    vals = _values_of(src, bits)
    for b, v in zip(np.asarray(bits).tolist(), vals.tolist()):
        if src == "F64" and not np.isnan(v):
            v = float(struct.unpack("<f", struct.pack("<I", _ref_to_f32(v)))[0])  # torch: f64 -> f32 first
        if np.isnan(v):
            f32 = {"F32": b, "BF16": b << 16, "F64": _ref_to_f32(v) | ((b >> 32) & 0x80000000)}.get(src)
            if src == "F16":
                f32 = ((b & 0x8000) << 16) | 0x7F800000 | ((b & 0x3FF) << 13) | 0x00400000
            if src == "F64":
                f32 = ((b >> 32) & 0x80000000) | 0x7FC00000 | ((b >> 29) & 0x3FFFFF)
            if src == "BF16" and dst == "F32":
                out.append(f32)  # widening bf16 is a plain shift, as in torch
            elif src == dst:
                out.append(b)
            else:
                out.append(_ref_nan_bits(dst, f32))
            continue
        if dst == "F32":
            out.append(_ref_to_f32(v))
        elif dst == "F16":
            out.append(_ref_to_f16(v))
        else:
            out.append(_ref_round_bf16(v))
    return np.array(out, dtype=BITS[dst])


# --------------------------------------------------------------------------- inputs


def f32_specials():
    vals = [0x00000000, 0x80000000, 0x7F800000, 0xFF800000,  # zeros, infinities
            0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FC12345, 0x7F812345, 0x7FFFFFFF,  # NaNs
            0x00000001, 0x80000001, 0x007FFFFF, 0x00400000, 0x00008000, 0x00018000,  # f32 subnormals
            0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001, 0x7F7E8000,  # bf16 overflow edge
            0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001, 0xBF808000, 0xBF818000,  # bf16 ties and neighbours
            0x3F801000, 0x3F803000, 0x3F800FFF, 0x3F801001,  # f16 ties at 1.0 (ulp 2^-10)
            0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x47800000,  # f16 max 65504, tie 65520, 65536
            0x33800000, 0x33000000, 0x33000001, 0x33400000, 0x38800000, 0x387FC000, 0x387FE000,  # f16 subnormals
            0x387FF000, 0x00800000, 0x80800000, 0x00FF8000, 0x00808000]
    return np.array(vals, dtype=np.uint32)


def f32_inputs():
    rng = np.random.default_rng(1234)
    rand = rng.integers(0, 2 ** 32, size=20000, dtype=np.uint64).astype(np.uint32)
    normal = (rng.standard_normal(5000).astype(np.float32) * np.float32(0.02)).view(np.uint32)
    # every bf16 tie pattern with random high bits
    ties = (rng.integers(0, 2 ** 16, size=3000, dtype=np.uint32) << 16) | 0x8000
    ties_f16 = (rng.integers(0, 2 ** 19, size=3000, dtype=np.uint32) << 13) | 0x1000
    return np.concatenate([f32_specials(), rand, normal, ties, ties_f16])


def all16():
    return np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16)


INPUTS = {"F32": f32_inputs, "F16": all16, "BF16": all16}


def run_convert(src, dst, bits):
    raw = np.ascontiguousarray(bits).view(np.uint8)
    return sc.convert_chunk(src, dst, raw.copy()).copy().view(BITS[dst])


# --------------------------------------------------------------------------- kernels


@pytest.mark.parametrize("src", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("dst", ["F32", "F16", "BF16"])
def test_bit_exact_against_independent_reference(src, dst):
    bits = INPUTS[src]()
    got = run_convert(src, dst, bits)
    want = reference(src, dst, bits)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, "first mismatches (input, got, want): %s" % [
        (hex(int(bits[i])), hex(int(got[i])), hex(int(want[i]))) for i in bad[:5]]


def test_reference_agrees_with_known_values():
    """Values a person can check by hand, so the reference itself is pinned down."""
    b = reference("F32", "BF16", np.array([0x3F808000, 0x3F818000, 0x7F7F8000, 0x7FC00001, 0x00000001],
                                          dtype=np.uint32))
    assert [hex(int(x)) for x in b] == ["0x3f80", "0x3f82", "0x7f80", "0x7fc0", "0x0"]
    h = reference("F32", "F16", np.array([0x477FEFFF, 0x477FF000, 0x33000000, 0x33000001, 0x3F801000],
                                         dtype=np.uint32))
    # 65519.99 -> 65504; 65520 ties to even -> inf; 2^-25 ties to 0; just above -> smallest subnormal; 1+2^-11 -> 1
    assert [hex(int(x)) for x in h] == ["0x7bff", "0x7c00", "0x0", "0x1", "0x3c00"]


def test_float64_rounds_through_float32_like_torch():
    x = np.array([1 + 2 ** -8 + 2 ** -40, 1 + 2 ** -11 + 2 ** -40, -3.5e38, 1e-50, np.inf], dtype=np.float64)
    bits = x.view(np.uint64)
    bf = run_convert("F64", "BF16", bits)
    hf = run_convert("F64", "F16", bits)
    # 1+2^-8+2^-40 is 1+2^-8 in float32, a tie that goes to even: 1.0 (a direct rounding would give 1+2^-7)
    assert [hex(int(v)) for v in bf] == ["0x3f80", "0x3f80", "0xff80", "0x0", "0x7f80"]
    # 1+2^-8 is exact in float16; 1+2^-11+2^-40 is a float32 tie 1+2^-11 -> 1.0 (direct rounding: 1+2^-10)
    assert [hex(int(v)) for v in hf] == ["0x3c04", "0x3c00", "0xfc00", "0x0", "0x7c00"]
    assert np.array_equal(bf, reference("F64", "BF16", bits))
    assert np.array_equal(hf, reference("F64", "F16", bits))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2 ** 32 - 1), min_size=1, max_size=64),
       st.sampled_from(["F16", "BF16"]))
def test_any_f32_bits_match_reference(values, dst):
    bits = np.array(values, dtype=np.uint32)
    assert np.array_equal(run_convert("F32", dst, bits), reference("F32", dst, bits))


@pytest.mark.parametrize("src", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("dst", ["F32", "F16", "BF16"])
def test_bit_exact_against_torch(src, dst):
    torch = import_torch()
    tdt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
    bits = INPUTS[src]()
    t = torch.from_numpy(bits.view(np.int32 if src == "F32" else np.int16).copy()).view(tdt[src])
    want = t.to(tdt[dst]).view(torch.int32 if dst == "F32" else torch.int16).numpy().view(BITS[dst])
    got = run_convert(src, dst, bits)
    nan = np.isnan(t.to(torch.float32).numpy())
    assert nan.sum() > 0  # the inputs do hold NaNs
    # every non-NaN value bit for bit; torch's NaN bits depend on its code path, so there: NaN in, NaN out
    bad = np.nonzero((got != want) & ~nan)[0]
    assert bad.size == 0, [(hex(int(bits[i])), hex(int(got[i])), hex(int(want[i]))) for i in bad[:5]]
    got_vals = _values_of(dst, got)
    assert np.array_equal(np.isnan(got_vals), nan)


def test_float64_against_torch():
    torch = import_torch()
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.standard_normal(5000) * 10.0 ** rng.integers(-45, 40, 5000),
                        [1 + 2 ** -8 + 2 ** -40, 65520.0, -65519.999, 3.5e38, 5e-46, 0.0, -0.0, np.inf]])
    for dst, tdt in (("BF16", torch.bfloat16), ("F16", torch.float16), ("F32", torch.float32)):
        want = torch.from_numpy(x).to(tdt).view(torch.int32 if dst == "F32" else torch.int16).numpy()
        assert np.array_equal(run_convert("F64", dst, x.view(np.uint64)), want.view(BITS[dst])), dst


# -------------------------------------------------------------------------------------- the fast kernels


def f32_class_patterns():
    """fp32 bit patterns of every class that fp16 and bf16 rounding treat apart: for each of the 256 exponents and both
    signs, mantissas at and around every rounding edge (the fp16 kept bits 0, 1, odd, even, all ones; below them 0,
    1, just under, at and just over the tie, all ones); every 5th of the 2^23 mantissas (5 is prime to the 2^13
    rounding step, so every remainder below the kept bits comes up) of the exponents where fp16 changes regime (its
    smallest subnormal's half, subnormal to normal, the last binade before inf); random patterns."""
    kept = np.array([0, 1, 2, 3, 0x1FF, 0x200, 0x201, 0x3FE, 0x3FF], dtype=np.uint32) << 13
    low = np.array([0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF, 0x7FFF, 0x8000, 0x8001], dtype=np.uint32)
    grid = ((np.arange(256, dtype=np.uint32) << 23)[:, None, None] | kept[None, :, None] | low[None, None, :]).ravel()
    full = [(np.uint32(e) << 23) | np.arange(0, 2 ** 23, 5, dtype=np.uint32) for e in (102, 112, 113, 142)]
    rand = np.random.default_rng(20).integers(0, 2 ** 32, size=2 ** 19, dtype=np.uint64).astype(np.uint32)
    pos = np.concatenate([grid, *full, rand, f32_specials()])
    return np.concatenate([pos, pos ^ np.uint32(0x80000000)])


def fast_f16(u):
    n = u.size
    out = np.empty(n, np.uint16)
    sc._f32_to_f16(u, out, np.empty(n, np.uint32), np.empty(n, np.uint32), np.empty(n, np.uint32),
                   np.empty(n, np.bool_))
    return out


def fast_bf16(u):
    out = np.empty(u.size, np.uint16)
    sc._f32_to_bf16(u, out, np.empty(u.size, np.uint32), np.empty(u.size, np.bool_))
    return out


def plain_bf16(u):
    """bf16 the plain way, the reference for the fast kernel: the high half of u + 0x7FFF + the lowest kept bit;
    NaN: quiet, sign and payload kept."""
    r = ((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r[nan] = ((u[nan] >> 16) | 0x0040).astype(np.uint16)
    return r


def _mismatches(u, got, want):
    bad = np.nonzero(got != want)[0]
    return [(hex(int(u[i])), hex(int(got[i])), hex(int(want[i]))) for i in bad[:5]], bad.size


def test_fast_f16_is_bit_exact_with_the_numpy_cast_in_every_class():
    u = f32_class_patterns()
    a = u & 0x7FFFFFFF
    classes = {"+-0": a == 0, "f32 subnormal": (a > 0) & (a < 0x00800000),
               "f16 zero after rounding": (a >= 0x00800000) & (a <= 0x33000000),
               "f16 subnormal": (a > 0x33000000) & (a < 0x38800000), "f16 normal": (a >= 0x38800000) & (a < 0x477FF000),
               "overflow to inf": (a >= 0x477FF000) & (a < 0x7F800000), "inf": a == 0x7F800000, "NaN": a > 0x7F800000}
    assert all(mask.sum() > 1000 or name in ("+-0", "inf") and mask.sum() >= 2 for name, mask in classes.items())
    got, want = fast_f16(u), sc._f32_to_f16_cast(u)
    first, count = _mismatches(u, got, want)
    assert count == 0, f"{count} mismatches, first (input, fast, cast): {first}"
    sample = np.concatenate([f32_specials(), u[::1999]])  # and the independent reference, on a sample
    assert np.array_equal(fast_f16(sample), reference("F32", "F16", sample))


def test_fast_bf16_is_bit_exact_with_the_plain_formula_in_every_class():
    u = f32_class_patterns()
    first, count = _mismatches(u, fast_bf16(u), plain_bf16(u))
    assert count == 0, f"{count} mismatches, first (input, fast, plain): {first}"


@pytest.mark.skipif(os.environ.get("ASCENDAI_EXHAUSTIVE") != "1",
                    reason="all 2^32 fp32 patterns take minutes of CPU; set ASCENDAI_EXHAUSTIVE=1 to run them")
def test_fast_kernels_are_bit_exact_on_all_float32_patterns():
    step = 2 ** 22
    u = np.empty(step, np.uint32)
    base = np.arange(step, dtype=np.uint32)
    f16, bf16, want = np.empty(step, np.uint16), np.empty(step, np.uint16), np.empty(step, np.uint16)
    a, t, t2, mask = (np.empty(step, np.uint32), np.empty(step, np.uint32), np.empty(step, np.uint32),
                      np.empty(step, np.bool_))
    for start in range(0, 2 ** 32, step):
        np.add(base, np.uint32(start), out=u)
        sc._f32_to_f16(u, f16, a, t, t2, mask)
        want[...] = sc._f32_to_f16_cast(u)
        if not np.array_equal(f16, want):
            first, count = _mismatches(u, f16, want)
            raise AssertionError(f"f16: {count} mismatches from {start:#x}, first (input, fast, cast): {first}")
        sc._f32_to_bf16(u, bf16, t, mask)
        want[...] = plain_bf16(u)
        if not np.array_equal(bf16, want):
            first, count = _mismatches(u, bf16, want)
            raise AssertionError(f"bf16: {count} mismatches from {start:#x}, first (input, fast, plain): {first}")


# --------------------------------------------------------------------------- safetensors files (test-side writer)


def write_st(path, tensors, metadata=None, pad=False):
    """Minimal independent safetensors writer: {name: (dtype, shape, raw bytes)}; with ``pad``, the header padded
    with spaces to a multiple of 8 bytes as the safetensors library does (so that the tensors are aligned)."""
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = metadata
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        blobs.append(raw)
    text = json.dumps(header).encode()
    if pad:
        text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_st(path):
    """Independent reader: {name: (dtype, shape, raw bytes)}, metadata."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]])
            for k, v in header.items()}, meta


def make_model(d, n_layers=3, shards=2, pad=False):
    """A small Llama-like fp32 model with specials in its weights, plus int64/bool/f8 tensors and extra files."""
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(3)
    specials = f32_specials()
    tensors = {"model.embed_tokens.weight": ("F32", (64, 32), None)}
    for i in range(n_layers):
        tensors[f"model.layers.{i}.self_attn.q_proj.weight"] = ("F32", (32, 32), None)
        tensors[f"model.layers.{i}.mlp.up_proj.weight"] = ("F32", (48, 32), None)
        tensors[f"model.layers.{i}.input_layernorm.weight"] = ("F16", (32,), None)
    tensors["model.rotary.inv_freq"] = ("BF16", (16,), None)
    tensors["position_ids"] = ("I64", (1, 10), np.arange(10, dtype=np.int64).tobytes())
    tensors["mask"] = ("BOOL", (4,), bytes([1, 0, 1, 1]))
    tensors["fp8.scale_like"] = ("F8_E4M3", (8,), bytes(range(8)))
    built = {}
    for name, (dtype, shape, raw) in tensors.items():
        if raw is None:
            n = int(np.prod(shape))
            if dtype == "F32":
                arr = (rng.standard_normal(n).astype(np.float32) * np.float32(0.05)).view(np.uint32)
                arr[:len(specials)] = specials[:n]
            else:
                arr = rng.integers(0, 2 ** 16, size=n, dtype=np.uint32).astype(np.uint16)
            raw = arr.tobytes()
        built[name] = (dtype, shape, raw)
    names = list(built)
    per = -(-len(names) // shards)
    weight_map = {}
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: built[k] for k in names[s * per:(s + 1) * per]}
        write_st(os.path.join(d, fname), part, {"format": "pt"}, pad=pad)
        weight_map.update({k: fname for k in part})
    with open(os.path.join(d, sc.INDEX_NAME), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "torch_dtype": "float32",
                   "hidden_size": 32}, f)
    for extra in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        with open(os.path.join(d, extra), "w") as f:
            f.write(f'{{"name": "{extra}"}}')
    return built


def load_dest(dest):
    out = {}
    for fname in sorted(os.listdir(dest)):
        if fname.endswith(".safetensors"):
            tensors, meta = read_st(os.path.join(dest, fname))
            assert meta == {"format": "pt"}
            out.update(tensors)
    return out


def tree_digest(d):
    h = {}
    for root, _dirs, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                h[os.path.relpath(p, d)] = hashlib.sha256(fh.read()).hexdigest()
    return h


# --------------------------------------------------------------------------- whole conversions


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_convert_model_values_files_and_config(tmp_path, dtype):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    built = make_model(src)
    target = sc.TARGET_DTYPES[dtype]
    res = sc.convert_model(src, dest, dtype, max_shard_size="4KB", chunk_bytes=256)
    assert res["changed"] is True
    written = load_dest(dest)
    assert set(written) == set(built)
    for name, (sdt, shape, raw) in built.items():
        wdt, wshape, wraw = written[name]
        assert list(wshape) == list(shape)
        if sdt in ("F32", "F16", "BF16"):
            assert wdt == target
            want = reference(sdt, target, np.frombuffer(raw, dtype=BITS[sdt]))
            assert np.frombuffer(wraw, dtype=BITS[target]).tolist() == want.tolist(), name
        else:
            assert (wdt, wraw) == (sdt, raw), name  # int64, bool and float8 pass through
    shards = sorted(f for f in os.listdir(dest) if f.endswith(".safetensors"))
    n = len(shards)
    assert n > 1 and shards == [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    assert res["shards"] == shards
    with open(os.path.join(dest, sc.INDEX_NAME)) as f:
        index = json.load(f)
    assert set(index["weight_map"]) == set(built) and set(index["weight_map"].values()) == set(shards)
    assert index["metadata"]["total_size"] == sum(len(v[2]) for v in written.values()) == res["total_size"]
    for shard in shards:  # at most 4 KB of data, or a single bigger tensor (Hugging Face's rule)
        sizes = [len(v[2]) for v in read_st(os.path.join(dest, shard))[0].values()]
        assert sum(sizes) <= 4000 or len(sizes) == 1, (shard, sizes)
    with open(os.path.join(dest, "config.json")) as f:
        config = json.load(f)
    assert config["torch_dtype"] == dtype and config["hidden_size"] == 32
    for extra in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        with open(os.path.join(dest, extra)) as f:
            assert f.read() == f'{{"name": "{extra}"}}'
    assert res["source_dtypes"] == {"F32": 7, "F16": 3, "BF16": 1, "I64": 1, "BOOL": 1, "F8_E4M3": 1}
    assert res["dest_dtypes"][target] == 11
    assert res["converted_tensors"] == 11 - res["source_dtypes"].get(target, 0)
    assert not [p for p in os.listdir(str(tmp_path)) if p.startswith(".")]  # no temp dir left


def test_written_files_load_with_safetensors(tmp_path):
    torch = import_torch()
    safetensors_torch = pytest.importorskip("safetensors.torch")
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    make_model(src)
    sc.convert_model(src, dest, "bfloat16", max_shard_size="3KB")
    loaded = {}
    for f in os.listdir(dest):
        if f.endswith(".safetensors"):
            loaded.update(safetensors_torch.load_file(os.path.join(dest, f)))
    srcs = {}
    for f in os.listdir(src):
        if f.endswith(".safetensors"):
            srcs.update(safetensors_torch.load_file(os.path.join(src, f)))
    assert set(loaded) == set(srcs)
    for name, t in srcs.items():
        if t.is_floating_point() and t.dtype != torch.float8_e4m3fn:
            want = t.to(torch.bfloat16)
            assert loaded[name].dtype == torch.bfloat16
            same = (loaded[name].view(torch.int16) == want.view(torch.int16)) | torch.isnan(want)
            assert bool(same.all()), name
        else:
            assert loaded[name].dtype == t.dtype
            assert torch.equal(loaded[name].view(torch.uint8), t.view(torch.uint8))


def test_single_shard_is_model_safetensors_without_index(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    make_model(src)
    res = sc.convert_model(src, dest, "float16")
    assert res["shards"] == ["model.safetensors"]
    assert not os.path.exists(os.path.join(dest, sc.INDEX_NAME))


def test_idempotent_and_fingerprint(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    make_model(src)
    assert sc.convert_model(src, dest, "bfloat16")["changed"] is True
    before = tree_digest(dest)
    again = sc.convert_model(src, dest, "bfloat16")
    assert again["changed"] is False and "already" in again["msg"]
    assert tree_digest(dest) == before
    assert sc.convert_model(src, dest, "bfloat16", force=True)["changed"] is True
    assert sc.convert_model(src, dest, "float16")["changed"] is True  # other dtype
    assert sc.convert_model(src, dest, "float16", max_shard_size="1KB")["changed"] is True  # other sharding
    # a shard removed from dest, or a source file changed, means converting again
    sc.convert_model(src, dest, "float16")
    os.remove(os.path.join(dest, "model.safetensors"))
    assert sc.convert_model(src, dest, "float16")["changed"] is True
    st_ = os.stat(os.path.join(src, "tokenizer.json"))
    os.utime(os.path.join(src, "tokenizer.json"), ns=(st_.st_atime_ns, st_.st_mtime_ns + 10 ** 9))
    assert sc.convert_model(src, dest, "float16")["changed"] is True
    assert sc.convert_model(src, dest, "float16")["changed"] is False


def test_check_mode_writes_nothing(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    make_model(src)
    res = sc.convert_model(src, dest, "bfloat16", check_mode=True)
    assert res["changed"] is True and not os.path.exists(dest)
    assert res["diff"] == {"before": {"state": "absent"}, "after": {"dtype": "bfloat16",
                                                                    "shards": ["model.safetensors"]}}
    sc.convert_model(src, dest, "bfloat16")
    assert sc.convert_model(src, dest, "bfloat16", check_mode=True)["changed"] is False
    res = sc.convert_model(src, dest, "float16", check_mode=True)
    assert res["changed"] is True and res["diff"]["before"]["dtype"] == "bfloat16"
    with open(os.path.join(dest, "config.json")) as f:
        assert json.load(f)["torch_dtype"] == "bfloat16"


@pytest.mark.parametrize("fail_at", [1, 5, 9])
def test_interrupted_run_leaves_old_state(tmp_path, monkeypatch, fail_at):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    make_model(src)
    sc.convert_model(src, dest, "float16", max_shard_size="3KB")
    before = tree_digest(dest)
    calls = {"n": 0}
    real_write = sc._write_all

    def failing_write(fd, data, offset=None):
        calls["n"] += 1
        if calls["n"] == fail_at:
            real_write(fd, bytes(data)[:3], offset)  # half a write, then the "crash"
            raise OSError(28, "No space left on device")
        real_write(fd, data, offset)

    monkeypatch.setattr(sc, "_write_all", failing_write)
    with pytest.raises(OSError, match="No space"):
        sc.convert_model(src, dest, "bfloat16", max_shard_size="3KB", chunk_bytes=64)
    assert tree_digest(dest) == before  # the old conversion, untouched
    assert sorted(os.listdir(str(tmp_path))) == ["dest", "src"]  # temp dir removed
    monkeypatch.setattr(sc, "_write_all", real_write)
    assert sc.convert_model(src, dest, "float16", max_shard_size="3KB")["changed"] is False


def test_interrupted_first_run_leaves_no_dest(tmp_path, monkeypatch):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    make_model(src)

    def boom(*_a, **_k):
        raise KeyboardInterrupt()

    monkeypatch.setattr(sc, "verify_output", boom)
    with pytest.raises(KeyboardInterrupt):
        sc.convert_model(src, dest, "bfloat16")
    assert sorted(os.listdir(str(tmp_path))) == ["src"]


def test_stale_temp_dir_of_killed_run_is_removed(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    make_model(src)
    stale = tmp_path / ".dest.convert-999999999-abc"  # no such pid
    stale.mkdir()
    (stale / sc.TEMP_OWNER_NAME).write_text(json.dumps({"pid": 999999999, "dest": dest}))  # made by model_convert
    (stale / "model.safetensors").write_bytes(b"half")
    sc.convert_model(src, dest, "bfloat16")
    assert sorted(os.listdir(str(tmp_path))) == ["dest", "src"]


def test_pickles_refused_with_reason(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text('{"model_type": "llama"}')
    (src / "pytorch_model.bin").write_bytes(b"\x80\x02c__builtin__\neval\n")
    with pytest.raises(sc.ConvertError) as err:
        sc.convert_model(str(src), str(tmp_path / "dest"), "bfloat16")
    msg = str(err.value)
    assert "pytorch_model.bin" in msg and "runs arbitrary code" in msg and "allow_pickle" in msg
    assert "vLLM loads safetensors" in msg
    assert not (tmp_path / "dest").exists()


def test_pickles_beside_safetensors_are_not_read_nor_copied(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    make_model(src)
    with open(os.path.join(src, "pytorch_model.bin"), "wb") as f:
        f.write(b"not even a pickle")
    res = sc.convert_model(src, dest, "bfloat16")
    assert "pytorch_model.bin" in res["skipped_files"]
    assert not os.path.exists(os.path.join(dest, "pytorch_model.bin"))


def test_allow_pickle_converts_a_state_dict(tmp_path):
    torch = import_torch()
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text('{"model_type": "llama", "torch_dtype": "float32"}')
    state = {"w": torch.tensor([1.0, 1 + 2 ** -8, float("inf"), -1e-45]), "ids": torch.arange(3)}
    torch.save(state, str(src / "pytorch_model.bin"))
    res = sc.convert_model(str(src), str(tmp_path / "dest"), "bfloat16", allow_pickle=True)
    assert res["source_format"] == "pickle" and res["converted_tensors"] == 1
    written = load_dest(str(tmp_path / "dest"))
    assert written["w"][0] == "BF16"
    assert np.frombuffer(written["w"][2], np.uint16).tolist() == [0x3F80, 0x3F80, 0x7F80, 0x8000]
    assert written["ids"] == ("I64", [3], np.arange(3, dtype=np.int64).tobytes())


def test_quantized_and_bad_sources_refused(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    make_model(src)
    with pytest.raises(sc.ConvertError, match="outside src"):
        sc.convert_model(src, os.path.join(src, "bf16"), "bfloat16")
    with open(os.path.join(src, "config.json"), "w") as f:
        json.dump({"quantization_config": {"quant_method": "fp8"}}, f)
    with pytest.raises(sc.ConvertError, match="quant_method=fp8"):
        sc.convert_model(src, dest, "bfloat16")
    with open(os.path.join(src, "config.json"), "w") as f:
        json.dump({"model_type": "llama"}, f)
    shard = os.path.join(src, "model-00002-of-00002.safetensors")
    with open(shard, "r+b") as f:
        f.truncate(os.path.getsize(shard) - 10)
    with pytest.raises(sc.ConvertError, match="truncated"):
        sc.convert_model(src, dest, "bfloat16")
    os.remove(shard)
    with pytest.raises(sc.ConvertError, match="download is incomplete"):
        sc.convert_model(src, dest, "bfloat16")
    assert not os.path.exists(dest)


def test_disk_space_checked_first(tmp_path, monkeypatch):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    make_model(src)
    monkeypatch.setattr(sc.shutil, "disk_usage", lambda _p: type("U", (), {"free": 100})())
    with pytest.raises(sc.ConvertError, match="has 100 bytes free"):
        sc.convert_model(src, dest, "bfloat16")
    assert not os.path.exists(dest)


def test_memory_bounded_by_chunks_not_tensor(tmp_path):
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    os.makedirs(src)
    big = np.random.default_rng(0).standard_normal(8 * 1024 * 1024).astype(np.float32)  # one 32 MiB tensor
    write_st(os.path.join(src, "model.safetensors"), {"w": ("F32", (1024, 8192), big.tobytes())})
    tracemalloc.start()
    try:
        sc.convert_model(src, dest, "bfloat16", chunk_bytes=256 * 1024, threads=2)
        _cur, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024, peak  # a few 256 KiB chunk buffers, not the 32 MiB tensor
    w = load_dest(dest)["w"]
    assert np.array_equal(np.frombuffer(w[2], np.uint16)[:1000], reference("F32", "BF16", big.view(np.uint32)[:1000]))


def shard_digests(d):
    return {k: v for k, v in tree_digest(d).items() if k != sc.MARKER_NAME}


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("chunk_bytes,window", [(64, 1000), (100, 8 << 20), (4096, 4096)])
@pytest.mark.parametrize("mapped", [True, False])
def test_threads_write_the_same_bytes_as_one_thread(tmp_path, monkeypatch, dtype, chunk_bytes, window, mapped):
    """Many threads, windows of several chunks, mapped or pread: the same bytes as one thread with pread."""
    src = str(tmp_path / "src")
    make_model(src, pad=True)  # aligned tensors, which are mapped
    one, many = str(tmp_path / "one"), str(tmp_path / "many")
    monkeypatch.setattr(sc, "USE_MMAP", False)
    sc.convert_model(src, one, dtype, max_shard_size="5KB", chunk_bytes=chunk_bytes, threads=1, fsync=False)
    monkeypatch.setattr(sc, "USE_MMAP", mapped)
    monkeypatch.setattr(sc, "WINDOW_BYTES", window)
    maps, real_map = [], sc._map_window

    def counting_map(*args):
        window = real_map(*args)
        maps.append(window is not None)
        return window

    monkeypatch.setattr(sc, "_map_window", counting_map)
    sc.convert_model(src, many, dtype, max_shard_size="5KB", chunk_bytes=chunk_bytes, threads=3)
    assert any(maps) == mapped
    assert shard_digests(one) == shard_digests(many)
    assert len([f for f in os.listdir(many) if f.endswith(".safetensors")]) > 1


def test_a_source_shortened_during_the_run_is_an_error_not_a_crash(tmp_path):
    """Reading past the end of a mapped file kills the process (SIGBUS); the size is checked before each mapping."""
    path = tmp_path / "shard.safetensors"
    path.write_bytes(bytes(8192))
    fd = os.open(str(path), os.O_RDONLY)
    try:
        window = sc._map_window(fd, 4096, 4096, 4)
        assert window is not None and bytes(window[0][window[1]:window[1] + 4]) == bytes(4)
        window[0].close()
        os.truncate(str(path), 6000)
        with pytest.raises(sc.ConvertError, match="became shorter"):
            sc._map_window(fd, 4096, 4096, 4)
    finally:
        os.close(fd)


def test_unchanged_tensors_copied_without_copy_file_range(tmp_path, monkeypatch):
    """Where copy_file_range is refused (another filesystem, an old kernel), the bytes go through pread/pwrite."""
    src = str(tmp_path / "src")
    built = make_model(src)
    sc.convert_model(src, str(tmp_path / "kernel"), "float16", max_shard_size="5KB", threads=2)

    def refuse(*_a, **_k):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(sc.os, "copy_file_range", refuse, raising=False)
    sc.convert_model(src, str(tmp_path / "user"), "float16", max_shard_size="5KB", threads=2, chunk_bytes=64)
    assert shard_digests(str(tmp_path / "kernel")) == shard_digests(str(tmp_path / "user"))
    got = load_dest(str(tmp_path / "user"))
    for name in ("position_ids", "mask", "fp8.scale_like"):
        assert got[name][2] == built[name][2]


def test_an_error_in_a_worker_thread_stops_the_run_and_leaves_the_old_state(tmp_path, monkeypatch):
    import threading
    src, dest = str(tmp_path / "src"), str(tmp_path / "dest")
    make_model(src)
    sc.convert_model(src, dest, "float16", max_shard_size="3KB")
    before, threads_before = tree_digest(dest), threading.active_count()
    real_do_item = sc._do_item
    failed = threading.Event()

    def do_item(item, out_fd, work):
        if threading.current_thread() is threading.main_thread():
            assert failed.wait(30)  # this thread carries on only once another one has failed
        else:
            real_do_item(item, out_fd, work)
            failed.set()
            raise OSError(28, "No space left on device")
        return real_do_item(item, out_fd, work)

    monkeypatch.setattr(sc, "_do_item", do_item)
    with pytest.raises(OSError, match="No space"):
        sc.convert_model(src, dest, "bfloat16", max_shard_size="3KB", chunk_bytes=64, threads=3)
    assert tree_digest(dest) == before  # the old conversion, untouched
    assert sorted(os.listdir(str(tmp_path))) == ["dest", "src"]  # temp dir removed
    assert threading.active_count() == threads_before  # the worker threads were joined


@pytest.mark.parametrize("text,want", [("5GB", 5 * 10 ** 9), ("500MB", 5 * 10 ** 8), ("2GiB", 2 * 2 ** 30),
                                       ("1.5 GB", 1500000000), ("4096", 4096), (123, 123), ("10kib", 10240)])
def test_parse_size(text, want):
    assert sc.parse_size(text) == want


@pytest.mark.parametrize("text", ["five GB", "-1GB", "0", "5PB", True])
def test_parse_size_rejects(text):
    with pytest.raises(sc.ConvertError, match="max_shard_size"):
        sc.parse_size(text)


def test_plan_shards_follows_hugging_face_rule():
    ts = [{"name": f"t{i}", "dtype": "F32", "shape": [n], "numel": n, "begin": 0, "end": 4 * n, "kind": "x"}
          for i, n in enumerate([100, 100, 300, 50, 50])]
    plan = sc.plan_shards(ts, "BF16", 400)  # bf16 sizes 200, 200, 600, 100, 100
    assert [[e["name"] for e in s["tensors"]] for s in plan] == [["t0", "t1"], ["t2"], ["t3", "t4"]]
    assert [s["file"] for s in plan] == ["model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                         "model-00003-of-00003.safetensors"]
    assert [s["data_bytes"] for s in plan] == [400, 600, 200]
