"""Wall time of a batch-invariance sweep (``forensics kernel --rows``) against plain runs of the site's op.

The sweep of ``examples/batch-invariance/train.py``'s first linear layer (``gemm:TN:acc0:grad0#1``,
``aten.addmm``, ``--batch`` rows of 4096 into 1024) at ``--rows`` (default ``auto``), through the
library (:func:`forensics.sweep.run.run_sweep`, CPU backend, no progress display), split into its
keep run and its replay arms (each a fresh process under torch.profiler and the oneMKL/oneDNN logs),
against, per row count:

* ``op``: the op alone on the kept inputs' first m rows, in this process, best of ``--repeats``;
* ``process``: a fresh ``python -c`` that imports torch, loads the kept inputs and runs the op once
  (what a hand-made anchor-row experiment costs per size without any instrument).

    flock /work/.heavy.lock python benchmarks/bench_batch_invariance.py [--batch 32] [--rows auto] [--json out.json]

The load average is printed with the figures: on a shared machine only ratios taken in one run mean much.
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

PLAIN = r"""
import sys, torch
kept = torch.load(sys.argv[1], weights_only=True)
m = int(sys.argv[2])
a = list(kept["args"])
a[1] = a[1].narrow(0, 0, m)
torch.ops.aten.addmm.default(*a, **kept["kwargs"])
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rows", default="auto")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []))
    from forensics.sweep.run import run_sweep

    tmp = Path(tempfile.mkdtemp(prefix="bench_sweep_"))
    load0 = os.getloadavg()[0]
    t0 = time.monotonic()
    res = run_sweep("gemm:TN:acc0:grad0#1", [sys.executable, str(REPO / "examples" / "batch-invariance" / "train.py"),
                                             "--steps", "1", "--batch", str(a.batch)], a.rows, steps="0",
                    out=tmp / "sweep", device="cpu")
    sweep_s = time.monotonic() - t0
    inputs = res.kernel.capture_dir / "sweep" / "site-inputs.pt"
    arm_s = {p.name: p.seconds for p in res.kernel.passes}

    import torch

    kept = torch.load(inputs, weights_only=True)
    rows_out = []
    for m in res.rows:
        args = list(kept["args"])
        args[1] = args[1].narrow(0, 0, m)
        times = []
        for _ in range(a.repeats):
            t = time.perf_counter()
            torch.ops.aten.addmm.default(*args, **kept["kwargs"])
            times.append(time.perf_counter() - t)
        t = time.monotonic()
        subprocess.run([sys.executable, "-c", PLAIN, str(inputs), str(m)], check=True)
        proc_s = time.monotonic() - t
        rows_out.append({"rows": m, "op_ms": round(min(times) * 1e3, 3), "process_s": round(proc_s, 2),
                         "replay_arm_s": arm_s.get(f"r{m}")})
    table = res.tables["base"]
    out = {"batch": a.batch, "rows": res.rows, "verdict": table.verdict_line, "sweep_s": round(sweep_s, 2),
           "keep_s": res.seconds.get("keep"), "replay_s": res.seconds.get("replay"), "per_size": rows_out,
           "plain_process_total_s": round(sum(r["process_s"] for r in rows_out), 2),
           "plain_op_total_ms": round(sum(r["op_ms"] for r in rows_out), 3),
           "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}
    print(f"sweep of {len(res.rows)} row counts ({', '.join(map(str, res.rows))}) of a {a.batch}x4096 @ 4096x1024 addmm: "
          f"{out['sweep_s']} s (keep run {out['keep_s']} s, replay arms {out['replay_s']} s)")
    print(f"{'rows':>6} {'op alone (ms)':>14} {'plain process (s)':>18} {'replay arm (s)':>15}")
    for r in rows_out:
        print(f"{r['rows']:>6} {r['op_ms']:>14} {r['process_s']:>18} {r['replay_arm_s']!s:>15}")
    print(f"per size: replay arm median {statistics.median(arm_s.values()):.2f} s vs plain process median "
          f"{statistics.median(r['process_s'] for r in rows_out):.2f} s vs op alone median "
          f"{statistics.median(r['op_ms'] for r in rows_out):.2f} ms; "
          f"whole sweep / sum of plain processes = {out['sweep_s'] / out['plain_process_total_s']:.1f}x")
    print(f"load average {out['load_before']} -> {out['load_after']} on {out['cpus']} CPUs")
    print(f"verdict: {table.verdict_line}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
