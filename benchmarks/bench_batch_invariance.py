"""Wall time of a batch-invariance sweep (``forensics kernel --rows``) against one plain run of the program.

The program is a real small training script, ``examples/batch-invariance/train.py`` (``--steps 1``,
``--batch 256``: two linear layers, SGD), and the site its first layer's fprop
(``gemm:TN:acc0:grad0#1``, an ``aten.addmm`` oneMKL serves as an SGEMM). Timed, alternating so
that a change of load hits both alike:

* ``plain``: ``python train.py`` alone;
* ``sweep``: the whole ``python -m forensics kernel --device cpu --rows SIZES -q`` command (CLI start,
  the keep run, the one replay process under torch.profiler and the oneMKL/oneDNN logs, the analysis,
  the table), at 6 sizes by default (``1,2,3,8,17,64``: 7 replays with the full batch's);
* ``repeat`` (``--repeat N``, optional): ``kernel --repeat N`` on the same site.

Each is measured in wall seconds and in CPU seconds (user + system of the command and every process
it waited for, from ``getrusage(RUSAGE_CHILDREN)``): on a loaded machine wall time mostly measures
the queue for the cores, CPU time what the command itself costs.

The issue's budget: 6 sizes within 3x one plain run. The ratio is printed with the CPU model, its
vector ISA, the core count and the load average before and after: on a shared machine (this project's
has 2 cores and several developers) a ratio taken in one run means more than either time alone.

    python benchmarks/bench_batch_invariance.py [--rows 1,2,3,8,17,64] [--rounds 2] [--repeat 8] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "batch-invariance" / "train.py"


def cpu_model() -> str:
    """The CPU's model name and widest x86 vector ISA, from /proc/cpuinfo (the platform's name elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    name = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), [])
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{name} ({isa})"


CPU_S: list[float] = []  # CPU seconds (user + system, the command and every process it waited for) per timed()


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, subprocess.CompletedProcess]:
    """Wall seconds of ``cmd``; its CPU seconds (children's rusage delta) are appended to CPU_S."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd)
    wall = time.monotonic() - t
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_S.append((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime))
    return wall, proc


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", default="1,2,3,8,17,64")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=0, help="also time kernel --repeat N (0: not)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + ([os.environ["PYTHONPATH"]]
                                                                      if os.environ.get("PYTHONPATH") else [])))
    tmp = Path(tempfile.mkdtemp(prefix="bench_sweep_"))
    plain_cmd = [sys.executable, str(SCRIPT), "--steps", "1", "--batch", str(a.batch)]
    site = ["--device", "cpu", "--site", "gemm:TN:acc0:grad0#1", "--steps", "0", "-q"]
    load0 = os.getloadavg()
    plain, sweep, repeat, splits, plain_cpu, sweep_cpu = [], [], [], [], [], []
    for i in range(a.rounds):
        s, p = timed(plain_cmd, env, tmp)
        assert p.returncode == 0, p.stderr[-2000:]
        plain.append(s)
        plain_cpu.append(CPU_S[-1])
        out = tmp / f"sw{i}"
        s, p = timed([sys.executable, "-m", "forensics", "kernel", *site, "--rows", a.rows, "--out", str(out), "--",
                      *plain_cmd], env, tmp)
        assert p.returncode in (0, 1), p.stdout[-2000:] + p.stderr[-2000:]
        sweep.append(s)
        sweep_cpu.append(CPU_S[-1])
        data = json.loads((out / "replay" / "sweep" / "sweep.json").read_text())
        splits.append(data["seconds"])
        verdict = data["tables"]["base"]["verdict_line"]
        if a.repeat:
            s, p = timed([sys.executable, "-m", "forensics", "kernel", *site, "--repeat", str(a.repeat), "--out",
                          str(tmp / f"rep{i}"), "--", *plain_cmd], env, tmp)
            assert p.returncode in (0, 1), p.stdout[-2000:] + p.stderr[-2000:]
            repeat.append(s)
    load1 = os.getloadavg()
    n_sizes = len([x for x in a.rows.split(",") if x.strip()])
    out = {"cpu": cpu_model(), "cores": os.cpu_count(), "python": platform.python_version(),
           "load_before": [round(x, 2) for x in load0], "load_after": [round(x, 2) for x in load1],
           "rows": a.rows, "sizes": n_sizes, "batch": a.batch, "plain_s": [round(x, 2) for x in plain],
           "sweep_s": [round(x, 2) for x in sweep], "sweep_split_s": splits, "repeat_s": [round(x, 2) for x in repeat],
           "plain_cpu_s": [round(x, 2) for x in plain_cpu], "sweep_cpu_s": [round(x, 2) for x in sweep_cpu],
           "ratio": round(statistics.median(sweep) / statistics.median(plain), 2),
           "cpu_ratio": round(statistics.median(sweep_cpu) / statistics.median(plain_cpu), 2), "verdict": verdict}
    print(f"cpu: {out['cpu']}, {out['cores']} cores; load average (1, 5, 15 min) {out['load_before']} before, "
          f"{out['load_after']} after")
    print(f"plain run of train.py --steps 1 --batch {a.batch}: {', '.join(f'{x:.2f}' for x in plain)} s")
    print(f"forensics kernel --rows {a.rows} ({n_sizes} sizes + the full batch): "
          f"{', '.join(f'{x:.2f}' for x in sweep)} s (keep run / replay process: "
          f"{', '.join(str(s.get('keep')) + '/' + str(s.get('replay')) for s in splits)} s)")
    if repeat:
        print(f"forensics kernel --repeat {a.repeat}: {', '.join(f'{x:.2f}' for x in repeat)} s")
    print(f"CPU seconds (user + system of every process): plain {', '.join(f'{x:.2f}' for x in plain_cpu)}, "
          f"sweep {', '.join(f'{x:.2f}' for x in sweep_cpu)}")
    print(f"ratio sweep / plain run (medians of {a.rounds}): {out['ratio']}x wall, {out['cpu_ratio']}x CPU time "
          "(the issue's budget: 3x; on a loaded machine the CPU-time ratio moves less with the load)")
    print(f"verdict: {verdict}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
