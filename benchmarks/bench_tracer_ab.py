"""Two versions of the op tracer on one CPU training step, in one process: before/after a change.

The machine's untraced step moves by up to a third from one process to the next (with the
allocator's state: how many fresh pages a step faults in), so a ratio from two separate runs can say more about the processes than
about the change. Here both versions are installed in the same process, each recording only
inside its own steps (its window is closed between them), and the steps of the three arms
(untraced, A, B) are interleaved, the order reversed every other round.

    git show fdd8e24:probes/optrace.py > /tmp/optrace_before.py   # the last single-file tracer
    python benchmarks/bench_tracer_ab.py /tmp/optrace_before.py probes/optrace/__init__.py --batch 64 --steps 40

Each file is loaded as its own module; its own imports (probes.config, probes.window,
probes.digests..., and the modules of the package probes.optrace) come from this checkout. A
single-file tracer (up to fdd8e24) is compared whole with this checkout's package; two versions of
the package cannot be compared this way (the package's modules are imported by name, so another
version's __init__.py alone would run this checkout's modules).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_tracer import OptraceArm, make_step  # noqa: E402


def load(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"{path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("a", help="probes/optrace/__init__.py (or the single probes/optrace.py) of version A")
    p.add_argument("b", help="probes/optrace/__init__.py (or the single probes/optrace.py) of version B")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    args = p.parse_args()
    torch.set_num_threads(1)
    step = make_step(args.width, args.layers, args.batch)
    arms = {"untraced": contextlib.nullcontext,
            "A": OptraceArm(Path(tempfile.mkdtemp(prefix="bench_tracer_ab_")), module=load("optrace_a", args.a)),
            "B": OptraceArm(Path(tempfile.mkdtemp(prefix="bench_tracer_ab_")), module=load("optrace_b", args.b))}
    for ctx in arms.values():
        for _ in range(3):
            with ctx():
                step()
    times: dict[str, list[float]] = {k: [] for k in arms}
    order = list(arms.items())
    for i in range(args.steps):
        for name, ctx in (order if i % 2 == 0 else order[::-1]):
            gc.collect()
            t = time.perf_counter()
            with ctx():
                step()
            times[name].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["untraced"]
    print(f"batch {args.batch}, {args.steps} interleaved steps per arm; A = {args.a}, B = {args.b}")
    for k, v in med.items():
        print(f"  {k:9s} median step {v * 1e3:7.2f} ms   x{v / base:5.2f} of untraced   overhead +{(v - base) * 1e3:6.2f} ms")
    print(f"  B's overhead / A's: {(med['B'] - base) / (med['A'] - base):.2f}")


if __name__ == "__main__":
    main()
