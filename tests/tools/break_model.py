#!/usr/bin/env python3
"""Copy a Hugging Face model directory with one square weight transposed: a conversion bug made on purpose.

Usage: break_model.py SRC DEST [--tensor NAME]

The copy loads (same names, shapes, dtypes and file sizes; config.json, tokenizer and chat template untouched),
is served, and writes fluent text; only its answers are wrong. It shows that the sandbox's answer check
(vllm_service_health_answers) catches a conversion that is not bit-exact, where /health, /v1/models and a
non-empty completion all pass. The default tensor is layer 0's query projection, the one llama.cpp's converter
permutes and tools/sandbox/smollm2.py has to un-permute. Test infrastructure, never shipped.
"""

from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}   # bf16 moved as raw 16-bit words


def transpose_in_place(path, name):
    """Transpose tensor ``name`` (2-D, square) of the safetensors file ``path`` in place; returns its shape."""
    with open(path, "r+b") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        if name not in header:
            square = sorted(k for k, v in header.items()
                            if k != "__metadata__" and len(v["shape"]) == 2 and v["shape"][0] == v["shape"][1])
            raise SystemExit(f"{path}: no tensor {name!r}; its 2-D square ones: {square[:8]}")
        meta = header[name]
        rows, cols = meta["shape"]
        if rows != cols or meta["dtype"] not in DTYPES:
            raise SystemExit(f"{name} is {meta['dtype']} {meta['shape']}: pick a square 2-D F32/F16/BF16 tensor")
        begin, end = meta["data_offsets"]
        f.seek(8 + size + begin)
        data = np.frombuffer(f.read(end - begin), dtype=DTYPES[meta["dtype"]]).reshape(rows, cols)
        f.seek(8 + size + begin)
        f.write(np.ascontiguousarray(data.T).tobytes())
    return rows, cols


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dest", type=Path)
    ap.add_argument("--tensor", default="model.layers.0.self_attn.q_proj.weight")
    args = ap.parse_args(argv)
    if args.dest.exists():
        raise SystemExit(f"{args.dest} exists: give a new directory")
    shutil.copytree(args.src, args.dest)
    for part in sorted(args.dest.glob("*.safetensors")):
        with open(part, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            names = json.loads(f.read(size))
        if args.tensor in names:
            shape = transpose_in_place(part, args.tensor)
            print(f"{args.dest}: {args.tensor} {list(shape)} transposed in {part.name}")
            return 0
    raise SystemExit(f"no safetensors file of {args.src} holds {args.tensor}")


if __name__ == "__main__":
    sys.exit(main())
