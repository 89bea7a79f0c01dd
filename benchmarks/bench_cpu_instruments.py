"""Overhead of each CPU-backend instrument on the examples' step window, against the untraced window, same run.

Every instrument is switched on exactly as ``probes/cpu.py`` does inside a capture (a
``CpuCollector`` entering a step window, started by a first site occurrence, and leaving it): ``torch_profiler`` (CPU activities,
``record_shapes=True``), ``onednn`` (verbose on, fd 1 pointed at a file, lines split at exit),
``mkl`` (verbose on into ``MKL_VERBOSE_OUTPUT_FILE``), and ``all`` three. Untraced and traced
windows alternate in one process (round robin, ``--repeats`` rounds of ``--steps`` steps each);
a window's time includes its exit (the profiler's trace export, the oneDNN split) since a
capture pays it, and the steps alone are reported too. Workloads:

* ``example``: the bundled example (``forensics.capture.example_workload --cpu``: two TE-style
  fp32 linear layers, 64x32, SGD), whose GEMMs oneMKL serves;
* ``conv1d``: ``examples/cpu-backend/train.py --model conv1d`` at 2 intra-op threads, whose
  convolutions oneDNN serves (``jit_1x1``).

    flock /work/.heavy.lock python benchmarks/bench_cpu_instruments.py [--steps 20] [--repeats 7] [--json out.json]

Only ratios of medians (and of minima) mean anything; the load average is printed with them.
The site probe's own cost (dispatch mode, digests) is measured by bench_probes.py.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
VARIANTS = ("untraced", "torch_profiler", "onednn", "mkl", "all")

_TMP = Path(tempfile.mkdtemp(prefix="bench_cpu_"))
# oneMKL reads its output file name once, when it first logs, and oneDNN its timestamp flag once:
# set both before torch is imported, as the probe does at activation.
os.environ["MKL_VERBOSE_OUTPUT_FILE"] = str(_TMP / "mkl.log")
os.environ["ONEDNN_VERBOSE_TIMESTAMP"] = "1"
os.environ.pop("MKL_VERBOSE", None)
os.environ.pop("ONEDNN_VERBOSE", None)


def example_step(torch):  # noqa: ANN001
    """One training step of the bundled example on the CPU (fp32), as a closure."""
    from forensics.capture import example_workload as ex

    w1, w2 = ex.build(torch, "cpu", 32, torch.float32)
    linear = ex.make_linear(torch)
    opt = torch.optim.SGD([w1, w2], lr=1e-3)
    g = torch.Generator(device="cpu").manual_seed(1000)
    x = torch.randn(64, 32, generator=g)

    def step() -> None:
        h = linear.apply(x, w1, False)
        y = linear.apply(h, w2, True)
        loss = y.float().pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        w2.grad = w2.main_grad.clone()
        opt.step()
        w2.main_grad.zero_()

    return step


def conv1d_step(torch):  # noqa: ANN001
    import importlib.util

    spec = importlib.util.spec_from_file_location("cpu_train", REPO / "examples" / "cpu-backend" / "train.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    model = mod.conv1d_model()
    x, target = torch.randn(4, 8, 8), torch.randn(4, 4, 8)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def step() -> None:
        loss = torch.nn.functional.mse_loss(model(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()

    return step


def window(step, steps: int, variant: str, block: int) -> tuple[float, float]:
    """(seconds per step, seconds of the whole window incl. its exit) with ``variant`` switched on."""
    from probes.config import ProbeConfig
    from probes.cpu import CpuCollector
    from probes.window import StepWindow, parse_steps

    col = None
    win = StepWindow(parse_steps("all"))
    if variant != "untraced":
        out = _TMP / f"{variant}-{block}"
        cfg = ProbeConfig(out_dir=str(out), probes=["cpu"], steps="all",
                          cpu_instruments=list(VARIANTS[1:4]) if variant == "all" else [variant])
        col = CpuCollector(cfg, win, out, 0)
        col.mkl_path = Path(os.environ["MKL_VERBOSE_OUTPUT_FILE"])
    t0 = time.perf_counter()
    win.start()  # enters the window (armed)
    if col is not None:
        col.end(col.begin("bench#1"))  # the first site occurrence switches the instruments on, as in a capture
    t1 = time.perf_counter()
    for _ in range(steps):
        step()
    t2 = time.perf_counter()
    win.close()  # leaves it: trace written, verbose off, oneDNN lines split
    if col is not None:
        col.close()
    t3 = time.perf_counter()
    return (t2 - t1) / steps, t3 - t0


def measure(name: str, step, steps: int, repeats: int) -> dict:
    for _ in range(5):
        step()  # warm-up: first-call JIT and allocation
    for v in VARIANTS:
        window(step, 2, v, -1)  # and one unrecorded window per variant: first log-file opens, profiler init
    per: dict[str, list[float]] = {v: [] for v in VARIANTS}
    whole: dict[str, list[float]] = {v: [] for v in VARIANTS}
    block = 0
    for r in range(repeats):
        order = VARIANTS if r % 2 == 0 else tuple(reversed(VARIANTS))
        for v in order:
            s, w = window(step, steps, v, block)
            block += 1
            per[v].append(s)
            whole[v].append(w)
    base_s, base_w = statistics.median(per["untraced"]), statistics.median(whole["untraced"])
    base_min = min(per["untraced"])
    rows = {}
    for v in VARIANTS:
        rows[v] = {"step_ms_median": round(statistics.median(per[v]) * 1e3, 3),
                   "step_ratio_median": round(statistics.median(per[v]) / base_s, 2),
                   "step_ratio_min": round(min(per[v]) / base_min, 2),
                   "window_ratio_median": round(statistics.median(whole[v]) / base_w, 2)}
    return {"workload": name, "steps": steps, "repeats": repeats, "variants": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20, help="steps per window")
    p.add_argument("--repeats", type=int, default=7, help="alternated rounds")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    import torch

    load_before = os.getloadavg()
    results = []
    torch.set_num_threads(1)
    results.append(measure("example (fp32, oneMKL SGEMM, 1 thread)", example_step(torch), a.steps, a.repeats))
    torch.set_num_threads(2)
    results.append(measure("conv1d (oneDNN jit_1x1, 2 threads)", conv1d_step(torch), a.steps, a.repeats))
    load_after = os.getloadavg()
    report = {"torch": torch.__version__, "cpus": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
              "load_after": [round(x, 2) for x in load_after], "results": results}
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average before {load_before[0]:.2f}, "
          f"after {load_after[0]:.2f}; {a.repeats} rounds of {a.steps} steps per window")
    for res in results:
        print(f"\n{res['workload']}")
        print(f"  {'variant':<15} {'ms/step':>9} {'step ratio (median/min)':>25} {'window ratio':>13}")
        for v, row in res["variants"].items():
            print(f"  {v:<15} {row['step_ms_median']:>9.3f} {row['step_ratio_median']:>15.2f} / "
                  f"{row['step_ratio_min']:<7.2f} {row['window_ratio_median']:>13.2f}")
    if a.json:
        with open(a.json, "x") as f:
            json.dump(report, f, indent=1)
    import shutil

    shutil.rmtree(_TMP, ignore_errors=True)


if __name__ == "__main__":
    main()
