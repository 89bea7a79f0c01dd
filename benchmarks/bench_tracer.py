"""Tracer overhead on a CPU training step: untraced vs `optrace` vs PyTorch DebugMode with hashes.

One process, one model, steps interleaved round-robin (untraced, optrace, DebugMode) so machine
load hits every arm alike; the median step time of each arm is reported and the overheads are
ratios against the untraced median measured in the same run. DebugMode is
``torch.utils._debug_mode.DebugMode`` with ``log_tensor_hashes(hash_fn="hash_tensor",
hash_inputs=True)``: the same digest function on inputs and outputs (feature-detected; skipped
when absent).

    python benchmarks/bench_tracer.py --width 512 --layers 4 --batch 64 --steps 20
"""
from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import time
from pathlib import Path

import torch

from probes import optrace
from probes.config import ProbeConfig
from probes.window import StepWindow, parse_steps


def make_step(width: int, layers: int, batch: int):
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.GELU(), torch.nn.LayerNorm(width)]
    model = torch.nn.Sequential(*mods, torch.nn.Linear(width, 10))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(batch, width)
    y = torch.randint(0, 10, (batch,))

    def step() -> None:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    return step


class OptraceArm:
    """The tracer, installed once; its mode is entered only around its own steps."""

    def __init__(self, out: Path) -> None:
        cfg = ProbeConfig(out_dir=str(out), probes=["optrace"], steps="all", max_records=10**9)
        self.window = StepWindow(parse_steps("all"))
        self.installed = optrace.install(cfg, self.window, out / "rank0", 0)
        self.tracer = self.installed.tracer
        self.window.on_enter.clear()  # the benchmark enters the mode per step

    @contextlib.contextmanager
    def __call__(self):
        self.tracer.enter()
        try:
            yield
        finally:
            self.tracer.leave()
            self.tracer.flush()  # each step pays its own host transfer and file write

    def close(self) -> int:
        n = self.tracer.seq
        self.installed.close()
        return n


def debugmode_arm():
    try:
        from torch.utils._debug_mode import DebugMode
    except ImportError:
        return None
    if not hasattr(DebugMode, "log_tensor_hashes"):
        return None

    @contextlib.contextmanager
    def arm():
        with DebugMode() as dm, DebugMode.log_tensor_hashes(hash_fn="hash_tensor", hash_inputs=True):
            yield
        dm.debug_string()  # what a user of DebugMode does to get the log out

    return arm


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    step = make_step(args.width, args.layers, args.batch)
    out = Path(tempfile.mkdtemp(prefix="bench_tracer_"))
    ours = OptraceArm(out)
    dbg = debugmode_arm()
    arms = {"untraced": contextlib.nullcontext, "optrace": ours}
    if dbg is not None:
        arms["debugmode"] = dbg
    for ctx in arms.values():  # warm-up: imports (TorchDispatchMode pulls in torch._dynamo), allocator
        for _ in range(2):
            with ctx():
                step()
    times: dict[str, list[float]] = {k: [] for k in arms}
    for _ in range(args.steps):
        for name, ctx in arms.items():
            t = time.perf_counter()
            with ctx():
                step()
            times[name].append(time.perf_counter() - t)
    records = ours.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    base = med["untraced"]
    print(f"model: {args.layers}x Linear({args.width})+GELU+LayerNorm, batch {args.batch}, AdamW, "
          f"{args.threads} thread(s); {args.steps} interleaved steps per arm; torch {torch.__version__}")
    print(f"optrace records per step: {records / (args.steps + 2):.0f}")
    for k, v in med.items():
        print(f"{k:10s} median step {v * 1e3:8.2f} ms   x{v / base:5.2f} of untraced")
    if "debugmode" in med:
        ours_over, dbg_over = med["optrace"] - base, med["debugmode"] - base
        print(f"overhead: optrace +{ours_over * 1e3:.2f} ms, DebugMode +{dbg_over * 1e3:.2f} ms; "
              f"optrace/DebugMode overhead ratio {ours_over / dbg_over:.2f} (target < 0.5)")
    else:
        print("DebugMode with log_tensor_hashes not available in this torch: comparison skipped")
    print(f"optrace slowdown x{med['optrace'] / base:.2f} (target < 2)")


if __name__ == "__main__":
    main()
