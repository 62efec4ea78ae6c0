# Copyright: ascendai.vllm contributors
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Streaming dtype conversion of a Hugging Face safetensors model directory.

The safetensors format is parsed here directly (8-byte little-endian header length,
JSON header, raw tensor data), so a node needs neither ``safetensors`` nor torch.
Tensors are converted chunk by chunk: memory stays bounded by the chunk buffers,
whatever the size of the model or of its largest tensor.

Rounding is round-to-nearest-even, bit for bit what ``torch.Tensor.to(dtype)`` gives
for every non-NaN value (float64 sources go through float32 first, as torch does).
A NaN stays a quiet NaN with its sign and leading payload bits (what the x86 F16C and
AVX512-BF16 conversion instructions give); torch's own NaN bits differ between its
scalar and vector paths (0x7FC0, 0xFFFF, ...), so no single pattern is "torch's".
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import json
import mmap
import os
import re
import shutil
import tempfile
import threading
import time

try:
    import numpy as np
    HAS_NUMPY = True
    NUMPY_IMPORT_ERROR = None
except ImportError as exc:  # pragma: no cover - exercised on nodes without numpy
    np = None
    HAS_NUMPY = False
    NUMPY_IMPORT_ERROR = exc

MARKER_NAME = ".ascendai_model_convert.json"
MARKER_VERSION = 1
INDEX_NAME = "model.safetensors.index.json"
DEFAULT_CHUNK_BYTES = 256 * 1024  # of fp32: the work arrays stay in a core's L2 cache

TARGET_DTYPES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
FLOAT_SOURCES = ("F64", "F32", "F16", "BF16")
ITEMSIZE = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2,
    "I64": 8, "I32": 4, "I16": 2, "I8": 1,
    "U64": 8, "U32": 4, "U16": 2, "U8": 1,
    "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "C64": 8,
}
TORCH_DTYPE_NAME = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
OTHER_WEIGHT_SUFFIXES = (".h5", ".msgpack", ".gguf", ".onnx", ".ot")
PICKLE_INDEX_NAME = "pytorch_model.bin.index.json"

_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {
    "": 1, "b": 1,
    "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12, "tb": 10**12,
    "ki": 2**10, "kib": 2**10, "mi": 2**20, "mib": 2**20, "gi": 2**30, "gib": 2**30, "ti": 2**40, "tib": 2**40,
}


class ConvertError(Exception):
    """A conversion that cannot be done; the message says why and what to do."""


# --------------------------------------------------------------------------- sizes


def parse_size(value):
    """Return a byte count for ``5GB`` (10**9 units, as Hugging Face), ``5GiB`` (2**30) or an int."""
    shown = _short_repr(value)
    if isinstance(value, bool):
        raise ConvertError(f"max_shard_size={shown} is not a size; use e.g. '5GB', '500MB' or '2GiB'")
    if isinstance(value, int):
        size = value
    else:
        m = _SIZE_RE.match(str(value))
        if not m:
            raise ConvertError(f"max_shard_size={shown} is not a size; use e.g. '5GB', '500MB' or '2GiB'")
        number = float(m.group(1))
        if number > 2**63:  # '1e400' is not matched; a 400-digit number is inf as a float
            raise ConvertError(f"max_shard_size={shown} is not a size a disk holds; use e.g. '5GB'")
        size = int(number * _SIZE_UNITS[(m.group(2) or "").lower()])
    if size <= 0:
        raise ConvertError(f"max_shard_size={shown} must be more than 0 bytes; use e.g. '5GB'")
    if size >= 2**63:
        raise ConvertError(f"max_shard_size={shown} is not a size a disk holds; use e.g. '5GB'")
    return size


# --------------------------------------------------------------------------- headers


# The safetensors library's own limits (safetensors/src/tensor.rs, docs/sources.md "safetensors"): a header of at
# most 100,000,000 bytes; tensors that, sorted by offset, tile the data exactly (the first at 0, each starting
# where the previous ends, the last ending at the end of the file); an element count that fits 64 bits; and
# shape * dtype size == end - begin.
MAX_HEADER_BYTES = 100_000_000
_U64 = 2**64
# Bounds checked while the header is read, before json.loads: a header near the library's ceiling made of tiny
# values costs json.loads about 10x its size (a 92 MB one, 2.2 GB). A real header spends 100-200 bytes per tensor
# (one JSON object each) and holds at most about 100,000 tensors in one file (DeepSeek-V3's 163 shards hold some
# 91,000 together); metadata is a few short strings.
MAX_TENSORS = 250_000
MAX_HEADER_VALUES = 16 * MAX_TENSORS
HEADER_SLACK_BYTES = 1 << 20
HEADER_BYTES_PER_TENSOR = 4096
_HEADER_CHUNK = 1 << 20
# A safetensors count fits 64 bits: 20 digits
_MAX_INT_DIGITS = 20


def _is_count(value):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _U64


def _unique_keys(pairs):
    out = {}
    for key, value in pairs:
        if key in out:
            raise ConvertError(f"key {key!r} appears twice (a duplicate tensor name would lose a tensor)")
        out[key] = value
    return out


def _refuse_constant(name):
    raise ConvertError(f"{name} is not JSON a safetensors header holds")


def _parse_int(text):
    digits = len(text.lstrip("-"))
    if digits > _MAX_INT_DIGITS:
        raise ConvertError(f"a number of {digits} digits (a safetensors header's numbers fit 64 bits, "
                           f"{_MAX_INT_DIGITS} digits)")
    return int(text)


def _read_header_bytes(f, n, path):
    """The ``n`` header bytes of an open safetensors file, refused as soon as they hold more objects (tensors),
    more JSON values, or more bytes per object than a real header could: the counts are taken on the raw bytes
    (``{``, ``[`` and ``,`` inside strings count too, so they are upper bounds) before anything is parsed."""
    parts, got, objects, values = [], 0, 0, 0
    while got < n:
        block = f.read(min(_HEADER_CHUNK, n - got))
        if not block:
            break
        got += len(block)
        braces = block.count(b"{")
        objects += braces
        values += braces + block.count(b"[") + block.count(b",")
        if objects > MAX_TENSORS + 2:
            raise ConvertError(f"{path}: the header holds more than {MAX_TENSORS:,} tensors; no real checkpoint "
                               "has that many in one file: the file is damaged or not safetensors")
        if values > MAX_HEADER_VALUES:
            raise ConvertError(f"{path}: the header holds more than {MAX_HEADER_VALUES:,} JSON values (shapes of "
                               "that many dimensions?); the file is damaged or not safetensors")
        if got > HEADER_SLACK_BYTES + HEADER_BYTES_PER_TENSOR * objects:
            raise ConvertError(f"{path}: the header's first {got:,} bytes hold only {objects:,} tensors; a real "
                               f"header spends far less than {HEADER_BYTES_PER_TENSOR} bytes per tensor (a huge "
                               "metadata string?): the file is damaged or not safetensors")
        parts.append(block)
    return b"".join(parts)


def read_header(path):
    """Parse one safetensors file's header, refusing what the safetensors library refuses.

    Returns ``(tensors, metadata, data_start, file_size)``; ``tensors`` is a list of dicts
    (name, dtype, shape, begin, end) in data order, with absolute file offsets.
    """
    try:
        file_size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise ConvertError(f"{path}: shorter than the 8-byte safetensors header length")
            n = int.from_bytes(raw, "little")
            if n > file_size - 8 or n > MAX_HEADER_BYTES:
                raise ConvertError(f"{path}: header length {n} does not fit the file ({file_size} bytes); the file "
                                   "is truncated or not safetensors")
            header_bytes = _read_header_bytes(f, n, path)
    except OSError as exc:
        raise ConvertError(f"{path}: cannot read: {exc}") from exc
    try:
        header = json.loads(header_bytes.decode("utf-8"), object_pairs_hook=_unique_keys,
                            parse_constant=_refuse_constant, parse_int=_parse_int)
    except ConvertError as exc:
        raise ConvertError(f"{path}: header refused: {exc}; the file is damaged or not safetensors") from None
    except (ValueError, RecursionError) as exc:
        raise ConvertError(f"{path}: header is not valid JSON ({exc}); the file is damaged or not "
                           "safetensors") from None
    if not isinstance(header, dict):
        raise ConvertError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ConvertError(f"{path}: __metadata__ must map names to strings")
    data_start = 8 + n
    data_bytes = file_size - data_start
    tensors = []
    for name, info in header.items():
        dtype = info.get("dtype") if isinstance(info, dict) else None
        shape = info.get("shape") if isinstance(info, dict) else None
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if dtype not in ITEMSIZE:
            raise ConvertError("{}: tensor {!r} has dtype {!r}; safetensors knows {}".format(
                path, name, dtype if isinstance(dtype, str) else type(dtype).__name__, ", ".join(sorted(ITEMSIZE))))
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise ConvertError(f"{path}: tensor {name!r} shape {_short_repr(shape)} is not a list of non-negative "
                               "integers")
        if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_count(o) for o in offsets):
            raise ConvertError(f"{path}: tensor {name!r} data_offsets {_short_repr(offsets)} are not two "
                               "non-negative integers")
        begin, end = offsets
        if not begin <= end or end > data_bytes:
            raise ConvertError(f"{path}: tensor {name!r} data_offsets [{begin}, {end}] lie outside the file "
                               f"({data_bytes} data bytes); the file is truncated")
        numel = 1
        for d in shape:
            numel *= d
            if numel >= _U64:
                raise ConvertError(f"{path}: tensor {name!r} shape {_short_repr(shape)} overflows 64 bits")
        if numel * ITEMSIZE[dtype] != end - begin:
            raise ConvertError(f"{path}: tensor {name!r} is {dtype}{_short_repr(shape)} ({numel * ITEMSIZE[dtype]} "
                               f"bytes) but its data_offsets span {end - begin} bytes")
        tensors.append({"name": name, "dtype": dtype, "shape": shape, "numel": numel,
                        "begin": data_start + begin, "end": data_start + end, "file": path})
    tensors.sort(key=lambda t: (t["begin"], t["end"]))
    at = data_start
    for t in tensors:
        if t["begin"] != at:
            what = "overlaps the previous tensor" if t["begin"] < at else "leaves a gap after the previous tensor"
            raise ConvertError(f"{path}: tensor {t['name']!r} at data offset {t['begin'] - data_start} {what} (which "
                               f"ends at {at - data_start}); the safetensors library refuses such a file")
        at = t["end"]
    if at != file_size:
        raise ConvertError(f"{path}: the tensors end at data offset {at - data_start} but the file has {data_bytes} "
                           "data bytes; the file is damaged or not safetensors")
    return tensors, metadata, data_start, file_size


def _short_repr(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def build_header(entries, metadata=None):
    """Serialise a safetensors header for ``entries`` (name, dtype, shape, nbytes) in order.

    Returns the bytes to write before the data (length prefix + JSON padded with spaces
    to a multiple of 8, as the safetensors library does).
    """
    header = {}
    if metadata:
        header["__metadata__"] = dict(metadata)
    offset = 0
    for e in entries:
        header[e["name"]] = {"dtype": e["dtype"], "shape": list(e["shape"]),
                             "data_offsets": [offset, offset + e["nbytes"]]}
        offset += e["nbytes"]
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)
    return len(text).to_bytes(8, "little") + text


# --------------------------------------------------------------------------- scanning


def _is_weight_name(name):
    low = name.lower()
    return (low.endswith((".safetensors", ".safetensors.index.json", ".bin.index.json"))
            or low.endswith(PICKLE_SUFFIXES) or low.endswith(OTHER_WEIGHT_SUFFIXES)
            or low in (INDEX_NAME, PICKLE_INDEX_NAME))


def _inside(path, root):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _link_roots(src):
    """Where a symlink in ``src`` may point: into ``src`` itself and, for a Hugging Face cache snapshot
    (``.../models--ORG--NAME/snapshots/REV``, whose files link to ``../../blobs/HASH``), into that repo's
    ``blobs`` directory (docs/sources.md "Hugging Face cache")."""
    real = os.path.realpath(src)
    roots = [real]
    snapshots = os.path.dirname(real)
    repo = os.path.dirname(snapshots)
    if os.path.basename(snapshots) == "snapshots" and os.path.basename(repo).startswith(
            ("models--", "datasets--", "spaces--")):
        roots.append(os.path.join(repo, "blobs"))
    return roots


def _check_link(full, src, roots):
    """Refuse a path in src that resolves outside it (``tokenizer.json -> /etc/passwd`` would be copied into dest,
    a weight file linked to another model's shard would be merged)."""
    target = os.path.realpath(full)
    if not any(_inside(target, root) for root in roots):
        raise ConvertError(f"{full} resolves to {target}, outside src={src}: refusing to read or copy it (a symlink "
                           "out of the model directory). Replace the link by the file it should be, or remove it")


def _safe_relative(name):
    """An index entry names a file inside src: relative, no '..', no NUL, a string."""
    if not isinstance(name, str) or not name or "\x00" in name or os.path.isabs(name):
        return False
    parts = name.replace(os.sep, "/").split("/")
    return ".." not in parts and "" not in parts


def scan_source(src):
    """Inventory a model directory: safetensors tensors, pickle files, other (copied) files."""
    if not os.path.isdir(src):
        raise ConvertError(f"src={src} is not a directory; give the model directory (config.json + *.safetensors)")
    roots = _link_roots(src)
    weight_files, pickle_files, other_files, skipped = [], [], [], []
    for root, dirs, files in os.walk(src):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for d in dirs:
            if os.path.islink(os.path.join(root, d)):
                skipped.append(os.path.relpath(os.path.join(root, d), src) + os.sep)  # os.walk does not enter it
        for fname in sorted(files):
            full = os.path.join(root, fname)
            rel = os.path.relpath(full, src)
            if fname.startswith(".") or not os.path.isfile(full):
                if fname != MARKER_NAME:
                    skipped.append(rel)
                continue
            _check_link(full, src, roots)
            low = fname.lower()
            if root == src and low.endswith(".safetensors"):
                weight_files.append(rel)
            elif low.endswith(PICKLE_SUFFIXES):
                pickle_files.append(rel)
            elif _is_weight_name(fname):
                skipped.append(rel)
            else:
                other_files.append(rel)
    index_path = os.path.join(src, INDEX_NAME)
    if os.path.isfile(index_path):
        try:
            with open(index_path, "r", encoding="utf-8") as f:
                weight_map = json.load(f)["weight_map"]
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            raise ConvertError(f"{index_path}: cannot read weight_map ({type(exc).__name__}: {exc})") from None
        if not isinstance(weight_map, dict) or not all(isinstance(k, str) for k in weight_map):
            raise ConvertError(f"{index_path}: weight_map must map tensor names to shard file names, got "
                               f"{_short_repr(weight_map)}")
        bad = sorted({_short_repr(w) for w in weight_map.values() if not _safe_relative(w)})
        if bad:
            raise ConvertError(f"{index_path}: weight_map names shard(s) outside src={src}: {', '.join(bad[:3])}; "
                               "an index names files of its own directory only (e.g. model-00001-of-00002.safetensors)")
        indexed = sorted(set(weight_map.values()))
        for w in indexed:
            if os.path.lexists(os.path.join(src, w)):
                _check_link(os.path.join(src, w), src, roots)
        missing = [w for w in indexed if not os.path.isfile(os.path.join(src, w))]
        if missing:
            raise ConvertError(f"{INDEX_NAME} names shard(s) that are not in {src}: {', '.join(missing)}; "
                               "the download is incomplete")
        skipped.extend(w for w in weight_files if w not in indexed)
        weight_files = indexed
    else:
        weight_map = None
    return {"src": src, "weight_files": weight_files, "pickle_files": pickle_files,
            "other_files": other_files, "skipped": sorted(skipped), "weight_map": weight_map}


def load_safetensors_tensors(inventory):
    """Read every header; returns the tensors in (file, offset) order and per-file header digests."""
    tensors, digests, seen = [], {}, {}
    for rel in inventory["weight_files"]:
        path = os.path.join(inventory["src"], rel)
        file_tensors, _meta, data_start, _size = read_header(path)
        with open(path, "rb") as f:
            digests[rel] = hashlib.sha256(f.read(data_start)).hexdigest()
        for t in file_tensors:
            if t["name"] in seen:
                raise ConvertError(f"tensor {t['name']!r} is in both {seen[t['name']]} and {rel}; the source "
                                   "directory mixes two models")
            seen[t["name"]] = rel
            t["kind"] = "safetensors"
            tensors.append(t)
    wm = inventory["weight_map"]
    if wm is not None:
        absent = sorted(set(wm) - set(seen))
        if absent:
            raise ConvertError(f"{INDEX_NAME} lists {len(absent)} tensor(s) absent from the shards, e.g. "
                               f"{', '.join(absent[:3])}; the download is incomplete")
    return tensors, digests


def refuse_pickles_message(pickle_files):
    return ("src holds only pickle weights ({}) and allow_pickle is false. Loading a pickle runs arbitrary code "
            "from the file, and vLLM loads safetensors anyway. Get the safetensors release of the model, or, if "
            "you trust where these files come from, set allow_pickle: true to convert them once (needs torch on "
            "the node; loaded with torch.load(weights_only=True)).".format(", ".join(pickle_files[:4])))


def check_not_quantized(src, config):
    qc = (config or {}).get("quantization_config")
    if qc:
        method = qc.get("quant_method", "?") if isinstance(qc, dict) else "?"
        raise ConvertError(f"src={src} is a quantized model (config.json quantization_config.quant_method={method}); "
                           "changing its dtype would break its scales. Serve it as it is, or dequantize it with "
                           "the tool of its quantization method.")
    if os.path.isfile(os.path.join(src, "quant_model_description.json")):
        raise ConvertError(f"src={src} is a msModelSlim quantized model (quant_model_description.json); serve it "
                           "with --quantization ascend instead of converting it")


# --------------------------------------------------------------------------- planning


def output_dtype(src_dtype, target):
    """safetensors dtype a tensor gets: floats convert, everything else passes through."""
    return target if src_dtype in FLOAT_SOURCES else src_dtype


def plan_shards(tensors, target, max_shard_size):
    """Group tensors into output shards (Hugging Face's rule: start a new shard when the next
    tensor would pass max_shard_size; a bigger tensor gets a shard of its own)."""
    shards, current, current_size = [], [], 0
    for t in tensors:
        out = output_dtype(t["dtype"], target)
        nbytes = t["numel"] * ITEMSIZE[out] if out != t["dtype"] else t["end"] - t["begin"]
        entry = {"name": t["name"], "dtype": out, "shape": t["shape"], "nbytes": nbytes, "src": t}
        if current and current_size + nbytes > max_shard_size:
            shards.append(current)
            current, current_size = [], 0
        current.append(entry)
        current_size += nbytes
    if current or not shards:
        shards.append(current)
    n = len(shards)
    names = ["model.safetensors"] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    return [{"file": name, "tensors": entries, "data_bytes": sum(e["nbytes"] for e in entries),
             "header": build_header(entries, {"format": "pt"})} for name, entries in zip(names, shards)]


def fingerprint(inventory, digests, copied):
    """What identifies the source: sizes, mtimes and header digests of the weights, sizes/mtimes of the rest."""
    files = []
    for rel in list(inventory["weight_files"]) + list(copied):
        st = os.stat(os.path.join(inventory["src"], rel))
        files.append([rel, st.st_size, st.st_mtime_ns, digests.get(rel)])
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode("utf-8")).hexdigest()


def read_marker(dest):
    try:
        with open(os.path.join(dest, MARKER_NAME), "r", encoding="utf-8") as f:
            marker = json.load(f)
    except (OSError, ValueError):
        return None
    return marker if isinstance(marker, dict) else None


def marker_matches(dest, marker, wanted):
    """True when ``dest`` holds a finished conversion with the wanted source and options."""
    if not marker or any(marker.get(k) != v for k, v in wanted.items()):
        return False
    for rel, size in (marker.get("files") or {}).items():
        path = os.path.join(dest, rel)
        if not os.path.isfile(path) or os.path.getsize(path) != size:
            return False
    return bool(marker.get("files"))


# --------------------------------------------------------------------------- conversion kernels


def _require_numpy():
    if not HAS_NUMPY:
        raise ConvertError(f"numpy is needed to convert between float dtypes and could not be imported "
                           f"({NUMPY_IMPORT_ERROR}); "
                           "install python3-numpy (vLLM nodes have it)")


class _Work:
    """Preallocated scratch arrays for one chunk size (one set per thread); reused for every chunk."""

    def __init__(self, chunk_elems):
        self.n = chunk_elems
        self.src = np.empty(chunk_elems * 8, dtype=np.uint8)
        self.u32 = np.empty(chunk_elems, dtype=np.uint32)
        self.f32 = np.empty(chunk_elems, dtype=np.float32)
        self.t32 = np.empty(chunk_elems, dtype=np.uint32)
        self.t32b = np.empty(chunk_elems, dtype=np.uint32)
        self.out = np.empty(chunk_elems * 4, dtype=np.uint8)
        self.mask = np.empty(chunk_elems, dtype=np.bool_)


if HAS_NUMPY:
    _U32_ABS, _U32_EXP = np.uint32(0x7FFFFFFF), np.uint32(0x7F800000)
    _U32_BF16_BIAS = np.uint32(0x7FFF)
    _U32_F16_MIN_NORMAL = np.uint32(0x38800000)  # 2^-14: below it fp16 steps are 2^-24 (subnormals)
    _U32_F16_OVERFLOW = np.uint32(0x477FF000)  # 65520, the tie between 65504 and 65536 that rounds to inf
    _U32_EXP_PLUS_15 = np.uint32(15 << 23)
    _F32_FOUR = np.float32(4.0)


def _nan_fix(u, out16, mask, rule):
    """NaNs are rare: found by isnan (one fast pass), then fixed one by one: quiet, sign and payload kept."""
    np.isnan(u.view(np.float32), out=mask)
    if mask.any():
        b = u[mask]
        out16[mask] = rule(b).astype(np.uint16)


def _bf16_nan(b):
    return (b >> 16) | 0x0040


def _f16_nan(b):
    return ((b >> 16) & 0x8000) | 0x7E00 | ((b >> 13) & 0x03FF)


def _f32_to_bf16(u, out16, tmp, mask):
    """fp32 bits ``u`` -> bf16 bits ``out16`` with round-to-nearest-even (torch's rule).

    (u + 0x7FFF + lowest kept bit) >> 16: ties go to the even neighbour; the carry out of the mantissa
    moves to the next binade or to inf as it should."""
    np.right_shift(u, 16, out=tmp)
    np.bitwise_and(tmp, 1, out=tmp)
    np.add(tmp, u, out=tmp)
    np.add(tmp, _U32_BF16_BIAS, out=tmp)
    np.right_shift(tmp, 16, out=tmp)
    np.copyto(out16, tmp, casting="unsafe")  # a contiguous narrowing copy: faster than a strided high-half copy
    _nan_fix(u, out16, mask, _bf16_nan)


def _f32_to_f16_cast(u):
    """fp32 bits -> fp16 bits through numpy's cast (IEEE round-to-nearest-even, overflow to inf), quiet NaN kept.

    The reference for :func:`_f32_to_f16` (the way every chunk went before), which gives the same bits in fewer
    nanoseconds: numpy's float32 -> float16 cast runs at scalar speed (about 2 GB/s of fp32 a core measured on an
    AVX-512 Xeon with numpy 2.4, against about 2.5 for the 12 passes). Used for the rare elements
    :func:`_f32_to_f16` leaves to it."""
    with np.errstate(over="ignore", invalid="ignore"):
        bits = u.view(np.float32).astype(np.float16).view(np.uint16)
    nan = (u & _U32_ABS) > _U32_EXP
    if nan.any():
        bits[nan] = _f16_nan(u[nan]).astype(np.uint16)
    return bits


def _f32_to_f16(u, out16, a, t, t2, mask):
    """fp32 bits ``u`` -> fp16 bits ``out16``, round-to-nearest-even: bit for bit what numpy's IEEE cast gives
    (:func:`_f32_to_f16_cast`), in 12 vector passes that let the FPU do the rounding (the magic-number idea of
    fp16_ieee_from_fp32_value in https://github.com/Maratyszcza/FP16/blob/master/include/fp16/fp16.h).

    With e the exponent of |x| (at least -14, the smallest fp16 normal) the magic number M = 2^(e+15) has an ulp of
    2^(e-8), the fp16 step at |x| scaled by 4; so the float sum s = 4|x| + M is 4|x| rounded to fp16 precision
    (ties to even, subnormals included, the carry into the next binade too), with the fp16 significand k in the low
    12 bits of s and the exponent field of s equal to e + 15 + 127 = (fp16 exponent) + 128. Then the fp16 bits are
    (s + (s >> 13)) mod 2^16: the low 16 bits of s are k, and s >> 13 brings the exponent field down by 13 places,
    its part above 2^15 dropping out with the 128. The sign is put in bit 15. |x| >= 65520 (inf on overflow) and
    NaN (quiet, sign and payload kept) are rare and fixed afterwards. ``a``, ``t`` and ``t2`` are uint32 scratch
    arrays as long as ``u``.
    """
    np.bitwise_and(u, _U32_ABS, out=a)
    np.bitwise_and(a, _U32_EXP, out=t)
    np.maximum(t, _U32_F16_MIN_NORMAL, out=t)
    np.add(t, _U32_EXP_PLUS_15, out=t)  # M
    with np.errstate(over="ignore", invalid="ignore"):
        np.multiply(a.view(np.float32), _F32_FOUR, out=t2.view(np.float32))
        np.add(t.view(np.float32), t2.view(np.float32), out=t.view(np.float32))  # s, rounded by the FPU
    np.right_shift(t, 13, out=t2)
    np.add(t2, t, out=t2)
    np.right_shift(u, 31, out=t)
    np.left_shift(t, 15, out=t)
    np.bitwise_or(t2, t, out=t2)
    np.copyto(out16, t2, casting="unsafe")
    if a.max() >= _U32_F16_OVERFLOW:  # a reduction: much cheaper than a mask pass
        np.greater_equal(a, _U32_F16_OVERFLOW, out=mask)
        out16[mask] = _f32_to_f16_cast(u[mask])


def _to_f32_bits(src_dtype, raw, n, work):
    """Widen ``n`` elements of raw ``src_dtype`` bytes to fp32 bits in ``work.u32[:n]`` (exact)."""
    u = work.u32[:n]
    if src_dtype == "F32":
        return raw.view(np.uint32)
    if src_dtype == "BF16":
        halves = u.view(np.uint16)
        halves[0::2] = 0
        halves[1::2] = raw.view(np.uint16)
        return u
    if src_dtype == "F16":
        h = raw.view(np.float16)
        np.copyto(u.view(np.float32), h, casting="unsafe")
        mask = work.mask[:n]
        np.isnan(h, out=mask)
        if mask.any():
            u[mask] |= np.uint32(0x00400000)
        return u
    if src_dtype == "F64":
        with np.errstate(over="ignore", invalid="ignore"):
            np.copyto(u.view(np.float32), raw.view(np.float64), casting="unsafe")
        return u
    raise ConvertError(f"cannot convert dtype {src_dtype}")


def convert_chunk(src_dtype, dst_dtype, raw, work=None):
    """Convert raw little-endian bytes of ``src_dtype`` to raw bytes of ``dst_dtype``.

    ``raw`` is a uint8 numpy array; returns a uint8 numpy array (a view into the work
    buffers when ``work`` is given, so copy it before the next call).
    """
    _require_numpy()
    n = raw.size // ITEMSIZE[src_dtype]
    if work is None or work.n < n:
        work = _Work(max(n, 1))
    if src_dtype == dst_dtype:
        return raw
    u = _to_f32_bits(src_dtype, raw, n, work)
    mask = work.mask[:n]
    if dst_dtype == "F32":
        return u.view(np.uint8)  # the widened bits are the answer (src is never F32 here)
    out = work.out[:n * 2]
    out16 = out.view(np.uint16)
    if dst_dtype == "BF16":
        _f32_to_bf16(u, out16, work.t32[:n], mask)
    elif dst_dtype == "F16":
        _f32_to_f16(u, out16, work.f32[:n].view(np.uint32), work.t32[:n], work.t32b[:n], mask)
    else:
        raise ConvertError(f"cannot convert to dtype {dst_dtype}")
    return out


# --------------------------------------------------------------------------- writing


def _write_all(fd, data, offset=None):
    """Write all of ``data``: at ``offset`` (pwrite, which threads may do side by side) or at the file position."""
    view = memoryview(data).cast("B")
    while view:
        if offset is None:
            written = os.write(fd, view)
        else:
            written = os.pwrite(fd, view, offset)
            offset += written
        view = view[written:]


def _pread_into(fd, buf, offset):
    view = memoryview(buf).cast("B")
    got = 0
    while got < len(view):
        n = os.preadv(fd, [view[got:]], offset + got)
        if n == 0:
            raise ConvertError("unexpected end of file while reading tensor data; the source is truncated")
        got += n


def _copy_range(src_fd, out_fd, offset, nbytes, work_buf, out_offset):
    """Copy bytes unchanged from ``offset`` to ``out_offset``; in the kernel (copy_file_range) where the
    filesystem allows, else through ``work_buf``."""
    remaining = nbytes
    if hasattr(os, "copy_file_range"):
        try:
            while remaining:
                n = os.copy_file_range(src_fd, out_fd, min(remaining, 1 << 30), offset, out_offset)
                if n == 0:
                    raise ConvertError("unexpected end of file while copying tensor data; the source is truncated")
                offset += n
                out_offset += n
                remaining -= n
            return
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL, errno.EBADF):
                raise
    while remaining:
        n = min(remaining, len(work_buf))
        _pread_into(src_fd, work_buf[:n], offset)
        _write_all(out_fd, work_buf[:n], out_offset)
        offset += n
        out_offset += n
        remaining -= n


def _libc_sync_file_range():
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError, TypeError):  # not Linux/glibc: no early writeback, the fsync does it all
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


_SYNC_FILE_RANGE = _libc_sync_file_range()
_SYNC_FILE_RANGE_WRITE = 2
WRITEBACK_BYTES = 64 * 1024 * 1024


def _start_writeback(fd):
    """Ask the kernel to start writing the file's dirty pages to disk now (Linux sync_file_range with
    SYNC_FILE_RANGE_WRITE, which does not wait for them), so that the disk works while the CPUs convert and the
    fsync at the end of the shard has little left to wait for. Best effort: nothing happens where it is missing."""
    if _SYNC_FILE_RANGE is not None:
        _SYNC_FILE_RANGE(fd, 0, 0, _SYNC_FILE_RANGE_WRITE)


def default_threads():
    """Threads for the conversion: the CPUs this process may run on, at most 8 (numpy releases the GIL in
    its loops; pread, pwrite and copy_file_range release it too)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(8, cpus))


# Source bytes one conversion item maps at a time: big enough that mapping costs little per byte, small enough that
# threads * window stays a few tens of MiB of resident (mapped page cache) memory.
WINDOW_BYTES = 8 * 1024 * 1024
_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)  # Linux, Python 3.10+: the page tables are filled in one call
USE_MMAP = hasattr(mmap, "PROT_READ")


def _shard_items(shard, fds, chunk_bytes):
    """The pieces of work of one shard, in file order: ("copy"|"convert"|"torch", entry, src_fd, src_offset,
    count, out_offset) with count in bytes for a copy and in elements for a conversion."""
    out_offset = len(shard["header"])
    for entry in shard["tensors"]:
        t = entry["src"]
        if t["kind"] == "torch":
            yield ("torch", entry, None, 0, 0, out_offset)
            out_offset += entry["nbytes"]
            continue
        fd = fds.get(t["file"])
        if fd is None:
            fd = fds[t["file"]] = os.open(t["file"], os.O_RDONLY)
        if entry["dtype"] == t["dtype"]:
            step = max(chunk_bytes, 64 * 1024 * 1024)
            for off in range(0, t["end"] - t["begin"], step):
                n = min(step, t["end"] - t["begin"] - off)
                yield ("copy", entry, fd, t["begin"] + off, n, out_offset + off)
        else:
            size, osize = ITEMSIZE[t["dtype"]], ITEMSIZE[entry["dtype"]]
            elems = max(1, chunk_bytes // 4)  # what the work buffers hold (widened to fp32)
            elems *= max(1, WINDOW_BYTES // (elems * size))
            for first in range(0, t["numel"], elems):
                n = min(elems, t["numel"] - first)
                yield ("convert", entry, fd, t["begin"] + first * size, n, out_offset + first * osize)
        out_offset += entry["nbytes"]


def _map_window(fd, offset, nbytes, align):
    """Map ``nbytes`` of the file at ``offset`` read-only; returns (mmap, start of the bytes in it) or None where
    mapping is not possible or the bytes would not be aligned for their dtype (then the caller preads)."""
    if not USE_MMAP or offset % align:
        return None
    start = offset - offset % mmap.ALLOCATIONGRANULARITY
    try:
        if os.fstat(fd).st_size < offset + nbytes:
            raise ConvertError("a source file became shorter during the conversion; it is being changed (a "
                               "download still running?): run again once it is complete")
        mapped = mmap.mmap(fd, offset + nbytes - start, flags=mmap.MAP_SHARED | _MAP_POPULATE,
                           prot=mmap.PROT_READ, offset=start)
    except (OSError, ValueError, OverflowError):
        return None
    return mapped, offset - start


def _convert_window(entry, fd, offset, count, out_offset, out_fd, work):
    """Convert ``count`` elements at ``offset`` chunk by chunk (the chunk fits the work buffers, which stay in the
    CPU's cache), read through one mapping of the window (no copy into a buffer) or by pread."""
    src_dtype, dst_dtype = entry["src"]["dtype"], entry["dtype"]
    size, osize = ITEMSIZE[src_dtype], ITEMSIZE[dst_dtype]
    window = _map_window(fd, offset, count * size, size)
    done = 0
    try:
        while done < count:
            n = min(work.n, count - done)
            if window is not None:
                raw = np.frombuffer(window[0], dtype=np.uint8, count=n * size, offset=window[1] + done * size)
            else:
                raw = work.src[:n * size]
                _pread_into(fd, raw, offset + done * size)
            data = convert_chunk(src_dtype, dst_dtype, raw, work)
            raw = None  # the mapping can be closed only once no array looks into it
            _write_all(out_fd, data, out_offset + done * osize)
            done += n
    finally:
        if window is not None:
            raw = None
            try:
                window[0].close()
            except BufferError:  # an array from an exception's traceback still looks into it: the GC unmaps it
                pass
    return count * osize


def _do_item(item, out_fd, work):
    """Do one piece of work; returns the bytes written."""
    kind, entry, fd, offset, count, out_offset = item
    if kind == "torch":
        _write_all(out_fd, entry["src"]["tensor"], out_offset)
        return entry["nbytes"]
    if kind == "copy":
        _copy_range(fd, out_fd, offset, count, work.src if work else bytearray(1 << 22), out_offset)
        return count
    return _convert_window(entry, fd, offset, count, out_offset, out_fd, work)


def _run_items(items, out_fd, works, writeback):
    """Run ``items`` on len(works) threads (this one included); the first error stops them all and is raised."""
    lock = threading.Lock()
    state = {"error": None, "written": 0, "kicked": 0}

    def worker(work):
        try:
            while True:
                with lock:
                    if state["error"] is not None:
                        return
                    item = next(items, None)
                if item is None:
                    return
                n = _do_item(item, out_fd, work)
                with lock:
                    state["written"] += n
                    kick = writeback and state["written"] - state["kicked"] >= WRITEBACK_BYTES
                    if kick:
                        state["kicked"] = state["written"]
                if kick:
                    _start_writeback(out_fd)
        except BaseException as exc:  # pylint: disable=broad-except  # raised again by the caller's thread
            with lock:
                if state["error"] is None:
                    state["error"] = exc

    others = [threading.Thread(target=worker, args=(w,), daemon=True) for w in works[1:]]
    for t in others:
        t.start()
    try:
        worker(works[0])
    except BaseException as exc:  # e.g. KeyboardInterrupt between two statements of worker(): stop the others
        with lock:
            if state["error"] is None:
                state["error"] = exc
        raise
    finally:
        for t in others:
            t.join()
    error = state["error"]
    if isinstance(error, BaseException):
        raise error  # pylint: disable=raising-bad-type  # set by a worker thread


def write_shards(shards, outdir, chunk_bytes=DEFAULT_CHUNK_BYTES, fsync=True, threads=None):
    """Write every planned shard into ``outdir``: ``threads`` threads (default: :func:`default_threads`)
    read, convert and write chunks side by side with pread/pwrite at their own offsets."""
    needs_numpy = any(e["dtype"] != e["src"]["dtype"] and e["src"]["kind"] != "torch"
                      for s in shards for e in s["tensors"])
    threads = default_threads() if threads is None else max(1, int(threads))
    chunk_bytes = max(8, int(chunk_bytes))
    if needs_numpy:
        _require_numpy()
        works = [_Work(max(1, chunk_bytes // 4)) for dummy in range(threads)]
    else:
        works = [None] * threads
    fds = {}
    try:
        for shard in shards:
            path = os.path.join(outdir, shard["file"])
            out_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                _write_all(out_fd, shard["header"])
                _run_items(_shard_items(shard, fds, chunk_bytes), out_fd, works, fsync)
                if fsync:
                    os.fsync(out_fd)
            finally:
                os.close(out_fd)
    finally:
        for fd in fds.values():
            os.close(fd)


def write_index(shards, outdir):
    if len(shards) < 2:
        return None
    weight_map = {}
    for s in shards:
        for e in s["tensors"]:
            weight_map[e["name"]] = s["file"]
    index = {"metadata": {"total_size": sum(s["data_bytes"] for s in shards)}, "weight_map": weight_map}
    _write_json(os.path.join(outdir, INDEX_NAME), index)
    return INDEX_NAME


def _write_json(path, data):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
        f.write("\n")


def set_config_dtype(config, target):
    """Return a copy of config.json's dict with torch_dtype (and dtype, where used) set."""
    name = TORCH_DTYPE_NAME[target]

    def fix(d):
        d = dict(d)
        d["torch_dtype"] = name
        if "dtype" in d:
            d["dtype"] = name
        for k, v in list(d.items()):
            if isinstance(v, dict) and ("torch_dtype" in v or "dtype" in v) and k.endswith("_config"):
                d[k] = fix(v)
        return d

    return fix(config)


def verify_output(outdir, shards, tensors, target):
    """Re-read what was written: every source tensor present once, same shape, asked dtype."""
    expected = {t["name"]: t for t in tensors}
    found = {}
    for s in shards:
        path = os.path.join(outdir, s["file"])
        written, _meta, data_start, size = read_header(path)
        if size != data_start + s["data_bytes"]:
            raise ConvertError(f"verification: {path} is {size} bytes, expected {data_start + s['data_bytes']}")
        for w in written:
            if w["name"] in found:
                raise ConvertError("verification: tensor {!r} written twice".format(w["name"]))
            found[w["name"]] = w
    missing = sorted(set(expected) - set(found))
    extra = sorted(set(found) - set(expected))
    if missing or extra:
        raise ConvertError(f"verification: missing tensors {missing[:5]}, unexpected tensors {extra[:5]}")
    for name, t in expected.items():
        w = found[name]
        if w["shape"] != t["shape"]:
            raise ConvertError("verification: {} has shape {}, source {}".format(name, w["shape"], t["shape"]))
        if w["dtype"] != output_dtype(t["dtype"], target):
            expected = output_dtype(t["dtype"], target)
            raise ConvertError("verification: {} is {}, expected {}".format(name, w["dtype"], expected))
    return len(found)


# --------------------------------------------------------------------------- pickles (opt-in)


def load_pickle_tensors(inventory):  # pragma: no cover - needs torch; tested where torch is installed
    """Load pickle weights with torch.load(weights_only=True); tensors converted by torch itself."""
    try:
        import torch
    except ImportError as exc:
        raise ConvertError(f"allow_pickle needs torch on the node to read "
                           f"{', '.join(inventory['pickle_files'][:3])} ({exc})") from exc
    tensors, digests, seen = [], {}, {}
    files = [p for p in inventory["pickle_files"] if not p.endswith(("training_args.bin", "optimizer.pt"))]
    for rel in files:
        path = os.path.join(inventory["src"], rel)
        try:
            try:
                state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError:
                state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # noqa: BLE001  # pylint: disable=broad-except
            raise ConvertError(f"{path}: torch.load(weights_only=True) refused it ({exc}); it is not a plain "
                               "state dict (a whole pickled module cannot be served by vLLM)") from exc
        if not isinstance(state, dict):
            raise ConvertError(f"{path}: not a state dict of tensors")
        st = os.stat(path)
        digests[rel] = f"{st.st_size}:{st.st_mtime_ns}"
        for name, value in state.items():
            if not isinstance(value, torch.Tensor):
                continue
            if name in seen:
                raise ConvertError(f"tensor {name!r} is in both {seen[name]} and {rel}")
            seen[name] = rel
            dtype = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                     torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
                     torch.uint8: "U8", torch.bool: "BOOL"}.get(value.dtype)
            if dtype is None:
                raise ConvertError(f"{path}: tensor {name!r} has dtype {value.dtype}, not supported")
            tensors.append({"name": name, "dtype": dtype, "shape": list(value.shape), "numel": value.numel(),
                            "begin": 0, "end": value.numel() * ITEMSIZE[dtype], "file": path, "kind": "torch",
                            "value": value})
    return tensors, digests


def _materialise_torch(shards, target):  # pragma: no cover - needs torch
    import torch
    tdt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[target]
    for s in shards:
        for e in s["tensors"]:
            t = e["src"]
            value = t["value"]
            if t["dtype"] in FLOAT_SOURCES:
                value = value.to(tdt)
            t["tensor"] = memoryview(value.contiguous().reshape(-1).view(torch.uint8).numpy())


# --------------------------------------------------------------------------- directory swap


def _rename_exchange(a, b):
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where not available."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return rc == 0


def _fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _tmp_prefix(dest):
    return f".{os.path.basename(dest.rstrip(os.sep))}.convert-"


# Written into every temporary directory this module creates, removed just before the swap: only a directory
# holding it is ever cleaned up as stale, never one that merely has a temp-like name.
TEMP_OWNER_NAME = ".ascendai_model_convert.tmp"


def make_temp(dest, tag=""):
    parent = os.path.dirname(os.path.abspath(dest))
    path = tempfile.mkdtemp(prefix=_tmp_prefix(dest) + f"{os.getpid()}-{tag}", dir=parent)
    with open(os.path.join(path, TEMP_OWNER_NAME), "w", encoding="utf-8") as f:
        f.write(json.dumps({"pid": os.getpid(), "dest": os.path.abspath(dest)}) + "\n")
    return path


def _ours(path, dest):
    """A temp directory a run of this module made for ``dest``: a real directory with our owner file."""
    if os.path.islink(path) or not os.path.isdir(path):
        return False
    try:
        with open(os.path.join(path, TEMP_OWNER_NAME), "r", encoding="utf-8") as f:
            owner = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(owner, dict) and owner.get("dest") == os.path.abspath(dest)


def clean_stale_temp(dest):
    """Remove temporary directories left by runs that were killed (their pid is gone); only directories this
    module created (they hold its owner file), never a user's directory that merely has such a name."""
    parent = os.path.dirname(os.path.abspath(dest))
    prefix = _tmp_prefix(dest)
    removed = []
    try:
        names = os.listdir(parent)
    except OSError:
        return removed
    for name in names:
        if not name.startswith(prefix) or not _ours(os.path.join(parent, name), dest):
            continue
        pid = name[len(prefix):].split("-", 1)[0]
        alive = False
        if pid.isdigit():
            try:
                os.kill(int(pid), 0)
                alive = int(pid) != os.getpid()
            except OSError:
                alive = False
        if not alive:
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
            removed.append(name)
    return removed


def swap_into_place(tmpdir, dest):
    """Put ``tmpdir`` at ``dest``; the old ``dest`` (if any) is removed only after the swap."""
    parent = os.path.dirname(os.path.abspath(dest))
    if os.path.lexists(dest):
        if _rename_exchange(tmpdir, dest):
            shutil.rmtree(tmpdir)
        else:
            old = make_temp(dest, "old-")
            os.rename(dest, os.path.join(old, "x"))
            os.rename(tmpdir, dest)
            shutil.rmtree(old)
    else:
        os.rename(tmpdir, dest)
    _fsync_dir(parent)


# --------------------------------------------------------------------------- the whole job


def convert_model(src, dest, dtype, max_shard_size="5GB", allow_pickle=False, force=False, check_mode=False,
                  chunk_bytes=DEFAULT_CHUNK_BYTES, fsync=True, threads=None):
    """Convert the model at ``src`` into ``dest``; returns a result dict for the module."""
    started = time.time()
    if dtype not in TARGET_DTYPES:
        raise ConvertError("dtype={!r} is not one of {}".format(dtype, ", ".join(TARGET_DTYPES)))
    target = TARGET_DTYPES[dtype]
    shard_limit = parse_size(max_shard_size)
    src = os.path.abspath(src)
    dest = os.path.abspath(dest)
    if os.path.islink(dest):
        # the swap would replace the link, not the directory it names, and the old tree would stay: refuse first
        raise ConvertError(f"dest={dest} is a symlink (to {os.path.realpath(dest)}); give the real directory as dest, "
                           "the conversion replaces dest as a whole")
    real_src, real_dest = os.path.realpath(src), os.path.realpath(dest)
    if _inside(real_dest, real_src) or _inside(real_src, real_dest):
        raise ConvertError(f"dest={dest} must be outside src={src} (the conversion writes a new directory)"
                           + (f"; through symlinks they are {real_dest} and {real_src}"
                              if (real_src, real_dest) != (src, dest) else ""))
    if os.path.lexists(dest) and not os.path.isdir(dest):
        raise ConvertError(f"dest={dest} exists and is not a directory")

    inv = scan_source(src)
    config = None
    if "config.json" in inv["other_files"]:
        try:
            with open(os.path.join(src, "config.json"), "r", encoding="utf-8") as f:
                config = json.load(f)
        except (OSError, ValueError, RecursionError) as exc:
            raise ConvertError(f"{src}/config.json is not valid JSON: {exc}") from None
        if not isinstance(config, dict):
            raise ConvertError(f"{src}/config.json holds a JSON {type(config).__name__}, not an object; it is not a "
                               "Hugging Face model config")
    check_not_quantized(src, config)

    if inv["weight_files"]:
        tensors, digests = load_safetensors_tensors(inv)
        skipped = inv["skipped"] + inv["pickle_files"]
    elif inv["pickle_files"]:
        if not allow_pickle:
            raise ConvertError(refuse_pickles_message(inv["pickle_files"]))
        tensors, digests = load_pickle_tensors(inv)
        skipped = inv["skipped"]
    else:
        raise ConvertError(f"src={src} holds no *.safetensors weights")
    if not tensors:
        raise ConvertError(f"src={src}: the weight files hold no tensors")

    copied = [f for f in inv["other_files"] if f not in (INDEX_NAME,)]
    wanted = {"version": MARKER_VERSION, "source": fingerprint(inv, digests, copied), "dtype": dtype,
              "max_shard_size": shard_limit}
    shards = plan_shards(tensors, target, shard_limit)
    src_dtypes, out_dtypes = {}, {}
    for t in tensors:
        src_dtypes[t["dtype"]] = src_dtypes.get(t["dtype"], 0) + 1
        o = output_dtype(t["dtype"], target)
        out_dtypes[o] = out_dtypes.get(o, 0) + 1
    result = {
        "changed": False, "dest": dest, "dtype": dtype, "shards": [s["file"] for s in shards],
        "tensors": len(tensors), "converted_tensors": sum(1 for t in tensors
                                                          if output_dtype(t["dtype"], target) != t["dtype"]),
        "source_dtypes": src_dtypes, "dest_dtypes": out_dtypes,
        "total_size": sum(s["data_bytes"] for s in shards), "copied_files": copied, "skipped_files": skipped,
        "source_format": "safetensors" if inv["weight_files"] else "pickle",
    }
    old = read_marker(dest)
    before = {"dtype": old.get("dtype"), "shards": sorted(f for f in old.get("files", {}) if f.endswith(
        ".safetensors"))} if old else {"state": "absent" if not os.path.exists(dest) else "not a finished conversion"}
    after = {"dtype": dtype, "shards": result["shards"]}
    if not force and marker_matches(dest, old, wanted):
        result["msg"] = f"dest already holds this model in {dtype}"
        return result
    result["changed"] = True
    result["diff"] = {"before": before, "after": after}
    needed = sum(len(s["header"]) + s["data_bytes"] for s in shards)
    needed += sum(os.path.getsize(os.path.join(src, f)) for f in copied)
    parent = os.path.dirname(dest)
    if check_mode:
        result["msg"] = f"would write {len(shards)} shard(s), {result['total_size']} bytes of tensors, in {dtype}"
        return result

    os.makedirs(parent, exist_ok=True)
    clean_stale_temp(dest)
    free = shutil.disk_usage(parent).free
    if free < needed:
        raise ConvertError(f"{parent} has {free} bytes free; the converted model needs {needed} "
                           f"({needed / 1e9:.1f} GB). Free space or choose another dest")
    if result["source_format"] == "pickle":
        _materialise_torch(shards, target)  # pragma: no cover
    tmpdir = make_temp(dest)
    try:
        write_shards(shards, tmpdir, chunk_bytes=chunk_bytes, fsync=fsync, threads=threads)
        files = {}
        index = write_index(shards, tmpdir)
        for rel in copied:
            out = os.path.join(tmpdir, rel)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            if rel == "config.json" and config is not None:
                _write_json(out, set_config_dtype(config, target))
            else:
                shutil.copy2(os.path.join(src, rel), out)
        verify_output(tmpdir, shards, tensors, target)
        for rel in [s["file"] for s in shards] + ([index] if index else []) + copied:
            files[rel] = os.path.getsize(os.path.join(tmpdir, rel))
        marker = dict(wanted, files=files, src=src, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        _write_json(os.path.join(tmpdir, MARKER_NAME), marker)
        os.chmod(tmpdir, 0o755)
        os.remove(os.path.join(tmpdir, TEMP_OWNER_NAME))
        if fsync:
            _fsync_dir(tmpdir)
        swap_into_place(tmpdir, dest)
    except BaseException:
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise
    result["config_updated"] = config is not None
    result["seconds"] = round(time.time() - started, 3)
    result["msg"] = (f"wrote {len(shards)} shard(s), {len(tensors)} tensors ({result['converted_tensors']} "
                     f"converted) in {dtype}")
    return result
