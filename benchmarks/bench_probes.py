"""Overhead of the probes on a CPU model step, as ratios against a baseline measured in the same run.

1. **disabled vs not imported** (separate processes, alternated): a training loop in a process
   that never imports the probes, and in one started through the bootstrap with the probe
   modules imported but not activated (no ``FORENSICS_CONFIG``: the shipped default).
2. **enabled vs disabled** (one process, alternated blocks): the same step with the site probe's
   dispatch mode active (naming every GEMM, NVTX no-op ranges, ``torch.hash_tensor`` digests,
   JSONL written) and without it; also with a site filter that selects one of the model's sites,
   and, for reference, with an empty Python dispatch mode (the floor any such probe pays).

    python benchmarks/bench_probes.py [--steps 30] [--repeats 5] [--json out.json]
    python benchmarks/bench_probes.py --gpu      # CUPTI probe vs torch.profiler (needs CUDA + cupti-python)

Timings are medians (and minima) of ``--repeats`` alternated blocks; only their ratios are
meaningful, and on a shared machine only differences well above the run-to-run spread.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LOOP = r"""
import sys, time, torch
torch.set_num_threads(1)
torch.manual_seed(0)
{imports}
model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(256, 256), torch.nn.ReLU())])
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
x = torch.randn(64, 256)
def step():
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()
for _ in range(5):
    step()
t0 = time.perf_counter()
for _ in range({steps}):
    step()
sys.stdout.write(str((time.perf_counter() - t0) / {steps}))
"""


def make_model(torch):  # noqa: ANN001
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(256, 256), torch.nn.ReLU())])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(64, 256)

    def step():
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()

    return step


def per_step(step, steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - t0) / steps


def import_overhead(steps: int, repeats: int) -> dict:
    """Step time in a process without the probes vs one with them imported (bootstrap, inactive)."""
    from probes.config import BOOTSTRAP_DIR

    plain_env = {k: v for k, v in os.environ.items() if k != "FORENSICS_CONFIG"}
    boot_env = dict(plain_env, PYTHONPATH=os.pathsep.join([str(BOOTSTRAP_DIR), str(REPO), plain_env.get("PYTHONPATH", "")]))
    imports = "import probes, probes.activate, probes.sites, probes.cupti, probes.gemm_naming, probes.window"
    base, disabled, t_base, t_dis = [], [], [], []
    for i in range(repeats):
        pair = [(plain_env, LOOP.format(imports="", steps=steps), base, t_base),
                (boot_env, LOOP.format(imports=imports, steps=steps), disabled, t_dis)]
        for env, code, sink, wall in (pair if i % 2 == 0 else pair[::-1]):  # alternate the order too
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            wall.append(time.perf_counter() - t0)
            sink.append(float(out.stdout))
    b, d = statistics.median(base), statistics.median(disabled)
    return {"step_not_imported_ms": b * 1e3, "step_disabled_ms": d * 1e3, "ratio_disabled_vs_not_imported": d / b,
            "ratio_disabled_vs_not_imported_min": min(disabled) / min(base),
            "process_wall_not_imported_s": statistics.median(t_base),
            "process_wall_disabled_s": statistics.median(t_dis)}


def enabled_overhead(steps: int, repeats: int) -> dict:
    """Same process: blocks with the site probe's mode active vs not, alternated."""
    import torch

    from probes.config import ProbeConfig
    from probes.sites import SiteProbe
    from probes.window import StepWindow, parse_steps

    torch.set_num_threads(1)
    step = make_model(torch)
    for _ in range(5):
        step()
    out = Path(tempfile.mkdtemp(prefix="bench-probes-"))
    probes = {}
    for name, site in (("all", None), ("one", "gemm:NT:acc0:grad1")):
        cfg = ProbeConfig(out_dir=str(out / name), site=site, steps="all", max_site_records=10**9)
        window = StepWindow(parse_steps("all"))
        probes[name] = SiteProbe(cfg, window, out / name / "rank0", 0)
    from torch.utils._python_dispatch import TorchDispatchMode

    class NoopMode(TorchDispatchMode):
        """Reference: the cost of any Python dispatch mode, doing nothing."""

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            return func(*args, **(kwargs or {}))

    from probes.gemm_naming import is_gemm

    class CountMode(TorchDispatchMode):
        n = 0
        gemms = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            CountMode.n += 1
            CountMode.gemms += is_gemm(str(func))
            return func(*args, **(kwargs or {}))

    with CountMode():
        step()
    times: dict[str, list[float]] = {"disabled": [], "noop_mode": [], "all": [], "one": []}
    for _ in range(repeats):
        times["disabled"].append(per_step(step, steps))
        with NoopMode():
            times["noop_mode"].append(per_step(step, steps))
        for name, p in probes.items():
            p._push_mode()
            times[name].append(per_step(step, steps))
            p._pop_mode()
            p.flush()
    for p in probes.values():
        p.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    low = {k: min(v) for k, v in times.items()}
    recs = sum(1 for _ in open(out / "all" / "rank0" / "sites.jsonl"))
    return {"step_disabled_ms": med["disabled"] * 1e3, "step_enabled_all_sites_ms": med["all"] * 1e3,
            "step_enabled_one_site_ms": med["one"] * 1e3,
            "ratio_enabled_all_vs_disabled": med["all"] / med["disabled"],
            "ratio_enabled_one_site_vs_disabled": med["one"] / med["disabled"],
            "step_noop_dispatch_mode_ms": med["noop_mode"] * 1e3,
            "ratio_noop_dispatch_mode_vs_disabled": med["noop_mode"] / med["disabled"],
            "min_ratios": {k: low[k] / low["disabled"] for k in ("noop_mode", "one", "all")},
            "gemms_per_step": CountMode.gemms, "aten_ops_per_step": CountMode.n, "jsonl_lines_written": recs}


def gpu_step_time(mode: str, steps: int) -> float:
    """One process, one mode: seconds per example-workload step with none | cupti | profiler collecting."""
    import torch

    from forensics.capture.example_workload import build, make_linear

    w1, w2 = build(torch, "cuda", 4096)
    linear = make_linear(torch)
    opt = torch.optim.SGD([w1, w2], lr=1e-3)
    x = torch.randn(2048, 4096, device="cuda").to(torch.bfloat16)

    def step():
        linear.apply(linear.apply(x, w1, False), w2, True).float().pow(2).mean().backward()
        w2.grad = w2.main_grad.to(torch.bfloat16)
        opt.step()
        w2.main_grad.zero_()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    ctx = None
    if mode == "cupti":
        from probes.cupti import install
        from probes.config import ProbeConfig
        from probes.window import StepWindow, parse_steps

        out = Path(tempfile.mkdtemp(prefix="bench-cupti-"))
        window = StepWindow(parse_steps("all"))
        ctx = install(ProbeConfig(out_dir=str(out), probes=["cupti"], steps="all"), window, out / "rank0", 0)
        window.start()
    elif mode == "profiler":
        ctx = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                 torch.profiler.ProfilerActivity.CUDA])
        ctx.__enter__()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    dt = (time.perf_counter() - t0) / steps
    if mode == "cupti":
        ctx.close()  # flush included in neither timing: both tools export after the window
    elif mode == "profiler":
        ctx.__exit__(None, None, None)
    return dt


def cupti_vs_profiler(steps: int, repeats: int) -> dict:
    """GPU only: the CUPTI probe vs torch.profiler vs nothing on the example's steps, one process per run."""
    try:
        import torch

        if not torch.cuda.is_available():
            return {"skipped": "no CUDA device"}
    except ImportError:
        return {"skipped": "no torch"}
    times: dict[str, list[float]] = {"none": [], "cupti": [], "profiler": []}
    for _ in range(repeats):
        for mode in times:
            r = subprocess.run([sys.executable, __file__, "--gpu-mode", mode, "--steps", str(steps)],
                               capture_output=True, text=True)
            if r.returncode != 0:
                return {"failed": mode, "stderr": r.stderr[-2000:]}
            times[mode].append(float(r.stdout.strip().splitlines()[-1]))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"step_none_ms": med["none"] * 1e3, "step_cupti_ms": med["cupti"] * 1e3,
            "step_profiler_ms": med["profiler"] * 1e3, "ratio_cupti_vs_none": med["cupti"] / med["none"],
            "ratio_profiler_vs_none": med["profiler"] / med["none"],
            "ratio_cupti_vs_profiler": med["cupti"] / med["profiler"]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--gpu", action="store_true", help="also CUPTI probe vs torch.profiler on the example (CUDA)")
    p.add_argument("--gpu-mode", choices=["none", "cupti", "profiler"], help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.gpu_mode:
        print(gpu_step_time(a.gpu_mode, a.steps))
        return 0
    if a.gpu:
        print(json.dumps({"gpu": cupti_vs_profiler(a.steps, a.repeats)}, indent=1))
        return 0
    res = {"import": import_overhead(a.steps, a.repeats), "enabled": enabled_overhead(a.steps, a.repeats),
           "steps": a.steps, "repeats": a.repeats, "load_average": os.getloadavg(), "cpus": os.cpu_count()}
    print(json.dumps(res, indent=1))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
