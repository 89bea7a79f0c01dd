"""What order-sensitive digests cost, to choose `forensics trace --ordered-digests`'s default.

1. Per tensor, on this CPU: ``torch.hash_tensor`` (the XOR digest every entry carries) against the
   order-sensitive digests: ``ordered_cpu`` (xxh3-64 over the row-major bytes, on the host: a
   transposed tensor is copied first), ``ordered_cpu_layout`` (what the tracer records: the same,
   but a dense permuted tensor is read in memory order, no copy) and ``ordered_device`` (the on-device mix used for GPU tensors, run here on CPU
   tensors: same ops, so the same op count). Ratios are against hash_tensor measured in the same
   run, repetitions interleaved.
2. Per training step: the CPU model of benchmarks/bench_tracer.py traced with ``--ordered-digests``
   off (XOR digests only) / auto (CPU tensors: ``o`` instead of the XOR) / all (the same on CPU;
   device outputs too), interleaved round-robin with an untraced
   arm; medians and ratios against untraced and against ``off`` from the same run.
3. The GPU cost on paper (no GPU measured): bytes moved per element by each digest, from the ops
   they run, and what that means at a given HBM bandwidth and kernel launch cost.

    python benchmarks/bench_ordered_digest.py [--steps 15] [--threads 1]
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_tracer import OptraceArm, make_step  # noqa: E402
from probes import optrace  # noqa: E402


def _median_time(fn, x, reps: int) -> float:
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn(x)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def per_tensor() -> None:
    print("1. per tensor (median seconds per call, ns per element, ratio to hash_tensor; same run)")
    fns = {"hash_tensor": torch.hash_tensor, "ordered_cpu (xxh3)": optrace.ordered_cpu,
           "ordered_cpu_layout": lambda x: optrace.ordered_cpu_layout(x)[0],
           "ordered_device (mix, on CPU)": optrace.ordered_device}
    for n in (1 << 10, 1 << 16, 1 << 20, 1 << 24):
        for dtype in (torch.float32, torch.bfloat16):
            for layout in ("contiguous", "transposed"):
                rows = max(1, n // 256)
                x = torch.randn(rows, n // rows).to(dtype)
                if layout == "transposed":
                    x = x.t()
                reps = max(5, min(400, (1 << 24) // n))
                times = {k: [] for k in fns}
                for _ in range(reps):  # interleaved: machine load hits every digest alike
                    for k, f in fns.items():
                        times[k].append(_median_time(f, x, 1))
                med = {k: statistics.median(v) for k, v in times.items()}
                base = med["hash_tensor"]
                cells = "  ".join(f"{k} {v / n * 1e9:7.2f} ns/el x{v / base:6.2f}" for k, v in med.items())
                print(f"  n={n:>9,} {str(dtype)[6:]:8s} {layout:10s} {cells}")


def per_step(steps: int, threads: int) -> None:
    torch.set_num_threads(threads)
    step = make_step(512, 4, 64)
    base = Path(tempfile.mkdtemp(prefix="bench_ordered_"))
    arms = {"untraced": contextlib.nullcontext}
    tracers = {m: OptraceArm(base / m, ordered=m) for m in ("off", "auto", "all")}
    arms.update({f"optrace {m}": a for m, a in tracers.items()})
    for ctx in arms.values():
        for _ in range(2):
            with ctx():
                step()
    times: dict[str, list[float]] = {k: [] for k in arms}
    for _ in range(steps):
        for name, ctx in arms.items():
            t = time.perf_counter()
            with ctx():
                step()
            times[name].append(time.perf_counter() - t)
    records = {m: a.close() for m, a in tracers.items()}
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"2. per training step: 4x Linear(512)+GELU+LayerNorm, batch 64, AdamW, {threads} thread(s), "
          f"{steps} interleaved steps per arm, torch {torch.__version__}; "
          f"records per step {records['auto'] / (steps + 2):.0f}")
    for k, v in med.items():
        rel = f"   x{v / med['optrace off']:5.2f} of optrace off" if k.startswith("optrace") else ""
        print(f"  {k:14s} median {v * 1e3:8.2f} ms   x{v / med['untraced']:5.2f} of untraced{rel}")


def on_paper() -> None:
    """Bytes each digest moves per element (read + write, from the ops it runs) and what that
    means on a GPU. A model, not a measurement: no GPU was used."""
    e = 4  # float32 element
    hash_bytes = e  # hash_tensor: one read, the up-cast and XOR stay in registers
    ordered = {
        "to int64 (read e, write 8)": e + 8,
        "position keys: arange + mul (write 8, read 8 write 8)": 24,
        "xor keys (read 16, write 8)": 24,
        "3 rounds of logical shift, mask, xor (56 each)": 168,
        "2 multiplies in place (16 each)": 32,
        "sum (read 8)": 8,
    }
    total = sum(ordered.values())
    launches = 14
    print("3. GPU cost on paper (model, not measured): bytes per float32 element")
    print(f"  hash_tensor: {hash_bytes} B, 1 kernel; ordered_device: {total} B, {launches} kernels "
          f"({total / hash_bytes:.0f}x the bytes)")
    for bw, name in ((3.35e12, "H100 SXM 3.35 TB/s"), (4.8e12, "H200 4.8 TB/s")):
        for n in (1 << 16, 1 << 20, 1 << 24):
            h = n * hash_bytes / bw + 5e-6
            o = n * total / bw + launches * 5e-6
            print(f"  {name}: n={n:>10,}: hash_tensor ~{h * 1e6:7.1f} us, ordered_device ~{o * 1e6:8.1f} us "
                  f"(assuming 5 us per launch)")
    print("  => on a GPU every traced input would pay ~14 launches and ~67x the bytes of its XOR digest;"
          " a fused kernel would pay about what hash_tensor pays.")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--skip-tensors", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")
    if not args.skip_tensors:
        per_tensor()
    per_step(args.steps, args.threads)
    on_paper()
    print(f"load average {os.getloadavg()[0]:.2f} at end")


if __name__ == "__main__":
    main()
