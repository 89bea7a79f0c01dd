"""Overhead of the probes on a CPU model step, as ratios against a baseline measured in the same run.

1. **disabled vs not imported** (separate processes, alternated): a training loop in a process
   that never imports the probes, and in one started through the bootstrap with the probe
   modules imported but not activated (no ``FORENSICS_CONFIG``: the shipped default).
2. **enabled vs disabled** (one process, alternated blocks): the same step with the site probe's
   dispatch mode active (naming every GEMM, NVTX no-op ranges, ``torch.hash_tensor`` digests,
   JSONL written) and without it; also with a site filter that selects one of the model's sites,
   and, for reference, with an empty Python dispatch mode (the floor any such probe pays).

    python benchmarks/bench_probes.py [--steps 30] [--repeats 5] [--json out.json]

Timings are medians of ``--repeats`` alternated blocks; only their ratios are meaningful.
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
    for _ in range(repeats):
        for env, code, sink, wall in ((plain_env, LOOP.format(imports="", steps=steps), base, t_base),
                                      (boot_env, LOOP.format(imports=imports, steps=steps), disabled, t_dis)):
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
            wall.append(time.perf_counter() - t0)
            sink.append(float(out.stdout))
    b, d = statistics.median(base), statistics.median(disabled)
    return {"step_not_imported_ms": b * 1e3, "step_disabled_ms": d * 1e3, "ratio_disabled_vs_not_imported": d / b,
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

    class CountMode(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
            CountMode.n += 1
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
    recs = sum(1 for _ in open(out / "all" / "rank0" / "sites.jsonl"))
    return {"step_disabled_ms": med["disabled"] * 1e3, "step_enabled_all_sites_ms": med["all"] * 1e3,
            "step_enabled_one_site_ms": med["one"] * 1e3,
            "ratio_enabled_all_vs_disabled": med["all"] / med["disabled"],
            "ratio_enabled_one_site_vs_disabled": med["one"] / med["disabled"],
            "step_noop_dispatch_mode_ms": med["noop_mode"] * 1e3,
            "ratio_noop_dispatch_mode_vs_disabled": med["noop_mode"] / med["disabled"],
            "gemms_per_step": 12, "aten_ops_per_step": CountMode.n, "jsonl_lines_written": recs}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args()
    res = {"import": import_overhead(a.steps, a.repeats), "enabled": enabled_overhead(a.steps, a.repeats),
           "steps": a.steps, "repeats": a.repeats, "load_average": os.getloadavg(), "cpus": os.cpu_count()}
    print(json.dumps(res, indent=1))
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
