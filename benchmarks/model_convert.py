#!/usr/bin/env python3
"""Benchmark ascendai.vllm.model_convert against `cp` and the naive load-all/convert/save.

Makes a synthetic fp32 model (Llama-shaped tensors, many of them) of --size-gb, then times,
each in its own child process so its peak RSS can be read from wait4():

  cp          `cp -r` of the same source directory (the floor: just moving the bytes), first and last
  stream-bf16 the module's convert_model() to bfloat16
  stream-fp16 the module's convert_model() to float16
  naive-bf16  load every tensor (safetensors + torch), .to(bfloat16), save_file per shard
  naive-fp16  the same to float16 (numpy when torch is absent)

GB/s is source bytes per wall-clock second; "CPU s" is the child's user + system time (less sensitive than the
wall clock to other work on the machine, which the load averages printed before and after show). The conversions
use ascendai.vllm's default thread count (--threads to change it). Run from the repository root:

  .venv/bin/python benchmarks/model_convert.py --size-gb 4
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def _import_convert():
    spec = importlib.util.spec_from_file_location("collection_tree", os.path.join(ROOT, "tools/ci/collection_tree.py"))
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    sys.path.insert(0, builder.link(ROOT))
    from ansible_collections.ascendai.vllm.plugins.module_utils import (
        _safetensors_convert as safetensors_convert,
    )
    return safetensors_convert


def make_model(path, size_bytes, seed=0, shard_bytes=2 * 10**9):
    """Write a synthetic fp32 Llama-like model (hidden 2048, intermediate 5632, vocab 32000)."""
    import numpy as np
    sc = _import_convert()
    hidden, inter, vocab = 2048, 5632, 32000
    tensors = [("model.embed_tokens.weight", (vocab, hidden))]
    layer = 0
    fixed = 2 * vocab * hidden * 4
    per_layer = (4 * hidden * hidden + 3 * inter * hidden + 2 * hidden) * 4
    n_layers = max(1, (size_bytes - fixed) // per_layer)
    for layer in range(n_layers):
        p = f"model.layers.{layer}."
        tensors += [(p + "input_layernorm.weight", (hidden,)),
                    (p + "self_attn.q_proj.weight", (hidden, hidden)),
                    (p + "self_attn.k_proj.weight", (hidden, hidden)),
                    (p + "self_attn.v_proj.weight", (hidden, hidden)),
                    (p + "self_attn.o_proj.weight", (hidden, hidden)),
                    (p + "post_attention_layernorm.weight", (hidden,)),
                    (p + "mlp.gate_proj.weight", (inter, hidden)),
                    (p + "mlp.up_proj.weight", (inter, hidden)),
                    (p + "mlp.down_proj.weight", (hidden, inter))]
    tensors += [("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab, hidden))]
    shards, cur, cur_size = [], [], 0
    for name, shape in tensors:
        nbytes = int(np.prod(shape)) * 4
        if cur and cur_size + nbytes > shard_bytes:
            shards.append(cur)
            cur, cur_size = [], 0
        cur.append((name, shape, nbytes))
        cur_size += nbytes
    shards.append(cur)
    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(seed)
    block = rng.standard_normal(8 * 1024 * 1024, dtype=np.float32) * np.float32(0.02)
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        entries = [{"name": n, "dtype": "F32", "shape": list(s), "nbytes": b} for n, s, b in shard]
        with open(os.path.join(path, fname), "wb") as f:
            f.write(sc.build_header(entries, {"format": "pt"}))
            for _n, _s, nbytes in shard:
                left = nbytes // 4
                while left:
                    k = min(left, block.size)
                    start = int(rng.integers(0, block.size - k + 1))
                    f.write(block[start:start + k].tobytes())
                    left -= k
                weight_map[_n] = fname
                total += nbytes
    with open(os.path.join(path, sc.INDEX_NAME), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
              "intermediate_size": inter, "num_hidden_layers": n_layers, "num_attention_heads": 16,
              "num_key_value_heads": 16, "vocab_size": vocab, "torch_dtype": "float32"}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return total, len(tensors)


# --------------------------------------------------------------------------- child workers


def child_stream(src, dest, dtype, threads=None):
    sc = _import_convert()
    sc.convert_model(src, dest, dtype, threads=threads)


def child_naive(src, dest, dtype):
    names = sorted(f for f in os.listdir(src) if f.endswith(".safetensors"))
    os.makedirs(dest, exist_ok=True)
    try:
        import torch
        from safetensors.torch import load_file, save_file
        target = {"bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
        loaded = {f: load_file(os.path.join(src, f)) for f in names}  # everything in memory
        converted = {f: {k: v.to(target) for k, v in d.items()} for f, d in loaded.items()}
    except ImportError as exc:
        import numpy as np
        from safetensors.numpy import load_file, save_file
        if dtype != "float16":
            raise SystemExit("naive bfloat16 needs torch") from exc
        loaded = {f: load_file(os.path.join(src, f)) for f in names}
        converted = {f: {k: v.astype(np.float16) for k, v in d.items()} for f, d in loaded.items()}
    for f, d in converted.items():
        save_file(d, os.path.join(dest, f), metadata={"format": "pt"})
    for f in os.listdir(src):
        if not f.endswith(".safetensors"):
            shutil.copy2(os.path.join(src, f), os.path.join(dest, f))


def run_child(argv):
    started = time.perf_counter()
    proc = subprocess.Popen(argv)
    _pid, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed with {proc.returncode}")
    return elapsed, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime  # Linux reports KiB


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _d, fs in os.walk(path) for f in fs)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gb", type=float, default=4.0, help="size of the synthetic fp32 model (10**9 bytes)")
    ap.add_argument("--workdir", default=None, help="where to put the models (default: a temp dir in /tmp)")
    ap.add_argument("--skip-naive", action="store_true", help="leave out the naive load-everything way")
    ap.add_argument("--keep", action="store_true", help="keep the files afterwards")
    ap.add_argument("--threads", type=int, default=None, help="conversion threads (default: the module's choice)")
    ap.add_argument("--repeat", type=int, default=1, help="run every way this many times (ratios use the best)")
    ap.add_argument("--child", nargs=4, metavar=("WAY", "SRC", "DEST", "DTYPE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        way, src, dest, dtype = args.child
        if way == "make":
            print(json.dumps(make_model(src, int(float(dtype) * 10**9))))
        elif way == "info":
            sc = _import_convert()
            largest = max(t["end"] - t["begin"] for f in os.listdir(src) if f.endswith(".safetensors")
                          for t in sc.read_header(os.path.join(src, f))[0])
            print(json.dumps([int(dtype) or sc.default_threads(), largest]))
        elif way == "stream":
            child_stream(src, dest, dtype, args.threads)
        else:
            child_naive(src, dest, dtype)
        return

    work = tempfile.mkdtemp(prefix="model-convert-bench-", dir=args.workdir)
    try:
        src = os.path.join(work, "src")
        t0 = time.perf_counter()
        # made in a child so that this parent stays small: a forked child starts with its parent's RSS
        made = subprocess.run([sys.executable, __file__, "--child", "make", src, "-", str(args.size_gb)],
                              check=True, stdout=subprocess.PIPE, text=True).stdout
        _total, n_tensors = json.loads(made)
        src_bytes = dir_bytes(src)
        n_shards = len([f for f in os.listdir(src) if f.endswith(".safetensors")])
        print(f"synthetic fp32 model: {src_bytes / 1e9:.2f} GB, {n_tensors} tensors, {n_shards} shards "
              f"(made in {time.perf_counter() - t0:.1f} s)")
        threads = [] if args.threads is None else ["--threads", str(args.threads)]
        ways = [("cp -r", ["cp", "-r", src, os.path.join(work, "out")]),
                ("stream bf16", [sys.executable, __file__, "--child", "stream", src, os.path.join(work, "out"),
                                 "bfloat16"] + threads),
                ("stream fp16", [sys.executable, __file__, "--child", "stream", src, os.path.join(work, "out"),
                                 "float16"] + threads)]
        if not args.skip_naive:
            ways += [("naive bf16", [sys.executable, __file__, "--child", "naive", src, os.path.join(work, "out"),
                                     "bfloat16"]),
                     ("naive fp16", [sys.executable, __file__, "--child", "naive", src, os.path.join(work, "out"),
                                     "float16"])]
        ways.append(("cp -r again", ways[0][1]))
        subprocess.run(["cat"] + [os.path.join(src, f) for f in os.listdir(src)], stdout=subprocess.DEVNULL,
                       check=True)  # same (warm) page cache for every way
        # asked of a child, so that this parent stays small (see above)
        n_threads, largest = json.loads(subprocess.run(
            [sys.executable, __file__, "--child", "info", src, "-", str(args.threads or 0)],
            check=True, stdout=subprocess.PIPE, text=True).stdout)
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
              f"{os.cpu_count()} CPUs; conversion threads: {n_threads}")
        rows = []
        for _round in range(max(1, args.repeat)):
            for label, argv in ways:
                out = os.path.join(work, "out")
                shutil.rmtree(out, ignore_errors=True)
                subprocess.run(["sync"], check=True)
                elapsed, rss, cpu = run_child(argv)
                rows.append((label, elapsed, src_bytes / elapsed / 1e9, rss / 2**20, dir_bytes(out) / 1e9, cpu))
                shutil.rmtree(out, ignore_errors=True)
        print(f"load average after:  {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        print(f"{'way':<12} {'seconds':>9} {'GB/s':>8} {'CPU s':>7} {'peak RSS MiB':>13} {'out GB':>9}")
        for label, elapsed, gbps, rss, outgb, cpu in rows:
            print(f"{label:<12} {elapsed:9.2f} {gbps:8.2f} {cpu:7.2f} {rss:13.0f} {outgb:9.2f}")
        cp = max(r[2] for r in rows if r[0].startswith("cp"))  # the fastest cp run
        budget = (n_threads + 1) * largest / 2**20 + 100
        for label in dict.fromkeys(r[0] for r in rows if not r[0].startswith("cp")):
            best = max(r[2] for r in rows if r[0] == label)
            rss = max(r[3] for r in rows if r[0] == label)
            print(f"{label}: {best / cp:.2f}x the speed of the fastest cp; peak RSS {rss:.0f} MiB "
                  f"(target <= (threads + 1) x largest tensor + 100 MB = {budget:.0f} MiB)")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
