"""Time to verdict: the whole loop on a real small CPU program, as a ratio to plain runs of it.

The loop a user runs (README): two traced runs, ``diff``, ``kernel`` with the site from the diff's
``next:`` line, ``analyze``, ``compare``, ``knob NAME --values V`` (dynamic scope at that site:
two baseline arms and one per value; ``--knob``) and ``bundle``. Every step is a real ``forensics``
command on a real program (default: examples/cpu-divergence/train.py at 1 and 2 threads), in its
own process, timed by wall clock; the plain runs of the same program are timed in the same run
(interleaved with the loop when ``--repeat`` > 1), so that the ratio, not the seconds, is the
figure (a loaded machine slows both).

    python benchmarks/bench_loop.py [--repeat 2] [--steps 3] [--profile DIR]

The table gives each step's wall and CPU seconds (user + system of the command and every process it
waited for: on a shared, loaded machine wall time moves with the neighbours, CPU time far less)
and their ratios to the plain runs it stands for: a trace
to one plain run, ``kernel`` and ``knob`` to one plain run per arm (their passes, each from the
capture manifest's ``arms[].seconds``, and the rest: start-up, planning, analysis), the others to one plain run. ``start-up`` is ``forensics --help`` (the
interpreter, the CLI's imports). ``--profile DIR`` also writes ``python -X importtime`` of the
CLI and a cProfile of ``kernel`` and ``analyze`` (the parent process) there.

The loop's ratio is its total over the plain runs the loop needs (2 for the traces, one per
kernel and knob arm): the target of issue 33 is <= 2x. Exit status is non-zero only on error (a slow
loop is reported, not failed).
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PROGRAM = ROOT / "examples" / "cpu-divergence" / "train.py"
_PASS = re.compile(r"^\s*pass (\S+): ok\s+(\d+):(\d\d):(\d\d)\s*$", re.M)


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                flags = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines()
                              if ln.startswith("flags")), "")
                isa = [f for f in ("avx2", "avx512f", "amx_tile") if f" {f}" in flags]
                return f"{name} ({', '.join(isa) or 'no AVX2'}; {os.cpu_count()} CPUs)"
    except OSError:
        pass
    return f"{platform.processor() or platform.machine()} ({os.cpu_count()} CPUs)"


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def forensics_cmd() -> list[str]:
    exe = Path(sys.executable).parent / "forensics"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "forensics"]


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def run(argv: list[str], cwd: Path, ok: tuple[int, ...] = (0,), env: dict | None = None) -> tuple[tuple[float, float], str]:
    """(wall, CPU) seconds and stdout+stderr of one command; an exit status outside ``ok`` is an error.

    CPU is user + system time of the command and every process it waited for (its passes): on a
    shared, loaded machine it moves far less than wall time.
    """
    t, c = time.perf_counter(), _children_cpu()
    p = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env=env)
    wall = (time.perf_counter() - t, _children_cpu() - c)
    if p.returncode not in ok:
        raise SystemExit(f"error: {shlex.join(argv)} exited {p.returncode}:\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return wall, p.stdout + p.stderr


def next_command(diff_out: str) -> list[str]:
    for line in diff_out.splitlines():
        if line.startswith("next: "):
            return shlex.split(line[len("next: "):])
    raise SystemExit(f"error: diff printed no next: line:\n{diff_out}")


def _passes(out: str, step: str, t: dict[str, tuple[float, float]], capture: Path) -> int:
    """Add ``step``'s passes and the rest of it to ``t``; the arm count.

    Each pass's wall seconds come from the capture's manifest (``arms[].seconds``, measured by the
    command around each pass); the command's own ``pass X: ok H:MM:SS`` lines (whole seconds) are
    the fallback, and say which passes ran."""
    printed = [(m[1], int(m[2]) * 3600 + int(m[3]) * 60 + int(m[4])) for m in _PASS.finditer(out)]
    if not printed:
        raise SystemExit(f"error: {step} printed no 'pass aN: ok' lines:\n{out}")
    try:
        manifest = yaml.safe_load((capture / "manifest.yaml").read_text()) or {}
        measured = {a["name"]: float(a["seconds"]) for a in manifest.get("arms", []) if "seconds" in a}
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        measured = {}
    passes = [(name, measured.get(name, s)) for name, s in printed]
    how = "wall, from the manifest" if all(name in measured for name, _ in printed) else "wall, whole seconds"
    for name, s in passes:
        t[f"  {step} pass {name} ({how})"] = (s, float("nan"))
    t[f"  rest of {step} (start-up, planning, analysis)"] = (t[step][0] - sum(s for _, s in passes), float("nan"))
    return len(passes)


def one_loop(work: Path, program: list[str], threads: tuple[int, int], fx: list[str],
             knob: tuple[str, str]) -> tuple[dict[str, tuple[float, float]], dict[str, int]]:
    """One pass of the loop in ``work``: each step's (wall, CPU) seconds (passes: wall only, from the
    command's own lines), and the arms of kernel and knob (the plain runs each stands for)."""
    t: dict[str, tuple[float, float]] = {}
    arms: dict[str, int] = {}
    for arm, n in zip("AB", threads):
        t[f"trace {arm}"], _ = run(fx + ["trace", "--out", f"run{arm}", "--"] + program + ["--threads", str(n)], work)
    t["diff"], out = run(fx + ["diff", "runA", "runB"], work, ok=(1,))
    nxt = next_command(out)
    if nxt[:2] != ["forensics", "kernel"]:
        raise SystemExit(f"error: unexpected next: line {shlex.join(nxt)}")
    t["kernel"], out = run(fx + nxt[1:] + [], work, ok=(0,))
    arms["kernel"] = _passes(out, "kernel", t, work / "forensics-capture")
    cap = "forensics-capture"
    t["analyze"], _ = run(fx + ["analyze", cap], work)
    t["compare"], _ = run(fx + ["compare", cap], work, ok=(0, 1))
    site = next((a.split("=", 1)[1] for a in nxt if a.startswith("--site=")), None)
    if site is None:
        site = nxt[nxt.index("--site") + 1] if "--site" in nxt else _site_of(work / cap)
    name, value = knob
    t["knob"], out = run(fx + ["knob", name, "--site", site, "--device", "cpu", "--values", value, "--out", "knobcap",
                               "--"] + program + ["--threads", str(threads[0])], work, ok=(0, 1))
    arms["knob"] = _passes(out, "knob", t, work / "knobcap")
    t["bundle"], _ = run(fx + ["bundle", cap, "-o", "bundle.tar.gz"], work)
    return t, arms


def _site_of(capture: Path) -> str:
    for line in (capture / "manifest.yaml").read_text().splitlines():
        if line.startswith("site:"):
            return line.split(":", 1)[1].strip().strip("'\"")
    raise SystemExit(f"error: no site: in {capture}/manifest.yaml")


def profile(out: Path, work: Path, fx: list[str], kernel_argv: list[str]) -> None:
    """-X importtime of the CLI and cProfile of kernel and analyze (parent process) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    p = subprocess.run([sys.executable, "-X", "importtime", "-c", "import forensics.cli"],
                       capture_output=True, text=True, cwd=work)
    (out / "importtime.txt").write_text(p.stderr)
    for name, argv in (("kernel", kernel_argv + ["--out", "prof-capture"]), ("analyze", ["analyze", "prof-capture"])):
        prof = out / f"{name}.pstats"
        subprocess.run([sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "forensics"] + argv,
                       capture_output=True, text=True, cwd=work)
        report = subprocess.run([sys.executable, "-c",
                                 "import pstats, sys; pstats.Stats(sys.argv[1]).sort_stats('cumulative').print_stats(40)",
                                 str(prof)], capture_output=True, text=True)
        (out / f"{name}.cumulative.txt").write_text(report.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=2, help="loops (and plain-run pairs) interleaved; medians reported")
    ap.add_argument("--threads", default="1,2", help="thread counts of runs A and B (default 1,2)")
    ap.add_argument("--profile", type=Path, help="also write -X importtime and cProfile output to this folder")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (printed)")
    ap.add_argument("--knob", default="ONEDNN_MAX_CPU_ISA=SSE41",
                    help="NAME=VALUE of the knob step (knob --dynamic at the kernel's site; default %(default)s)")
    args = ap.parse_args(argv)
    a, b = (int(x) for x in args.threads.split(","))
    program = [sys.executable, str(PROGRAM)]
    fx = forensics_cmd()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    os.environ.update(env)

    print(f"cpu           {cpu_model()}")
    print(f"program       {shlex.join(['python', str(PROGRAM.relative_to(ROOT))])} --threads {a} / {b}")
    print(f"before        {load()}")
    base = Path(tempfile.mkdtemp(prefix="bench-loop-"))
    plain: list[tuple[float, float]] = []
    startup: list[tuple[float, float]] = []
    loops: list[dict[str, tuple[float, float]]] = []
    arm_counts: dict[str, int] = {}
    knob = tuple(args.knob.split("=", 1))
    try:
        for i in range(args.repeat):
            for n in (a, b):
                plain.append(run(program + ["--threads", str(n)], base)[0])
            startup.append(run(fx + ["--help"], base)[0])
            work = base / f"loop{i}"
            work.mkdir()
            t, arm_counts = one_loop(work, program, (a, b), fx, knob)
            loops.append(t)
            print(f"loop {i + 1}/{args.repeat} done, {load()}", flush=True)
        if args.profile:
            profile(args.profile, base / "loop0", fx, next_command(run(fx + ["diff", "runA", "runB"], base / "loop0", ok=(1,))[1])[1:])
    finally:
        if args.keep:
            print(f"work folder   {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)

    def median(xs: list[tuple[float, float]], i: int) -> float:
        return statistics.median(x[i] for x in xs)

    p, pc = median(plain, 0), median(plain, 1)
    med = {k: (median([lp[k] for lp in loops], 0), median([lp[k] for lp in loops], 1)) for k in loops[0]}
    unit = {"trace A": 1, "trace B": 1, **arm_counts}
    print(f"after         {load()}")
    print(f"plain run     {p:7.2f} s wall (median of {len(plain)}: {', '.join(f'{x:.2f}' for x, _ in plain)}),"
          f" {pc:.2f} s CPU ({', '.join(f'{c:.2f}' for _, c in plain)})")
    print(f"start-up      {median(startup, 0):7.2f} s wall, {median(startup, 1):.2f} s CPU (forensics --help: interpreter and CLI imports)")
    print()
    print("x plain: the step over the plain runs it stands for (a trace: 1; kernel and knob: one per arm; the")
    print("others: 1, as the cost of one more run of the program)")
    print(f"{'step':52s} {'wall s':>8s} {'x plain':>8s} {'CPU s':>8s} {'x plain':>8s}")
    for k, (w, c) in med.items():
        u = unit.get(k, 1)
        what = f"{k} ({u} arms)" if k in arm_counts else k
        cpu = "" if c != c else f" {c:8.2f} {c / (pc * u):8.2f}"
        print(f"{what:52s} {w:8.2f} {w / (p * u):8.2f}{cpu}")
    steps = ("trace A", "trace B", "diff", "kernel", "analyze", "compare", "knob", "bundle")
    total, total_c = sum(med[k][0] for k in steps), sum(med[k][1] for k in steps)
    runs = 2 + sum(arm_counts.values())
    print(f"{'whole loop':52s} {total:8.2f} {total / (p * runs):8.2f} {total_c:8.2f} {total_c / (pc * runs):8.2f}"
          f"  (over {runs} plain runs: 2 traced, {arm_counts['kernel']} kernel arms, {arm_counts['knob']} knob arms)")
    for what, w, c, n in (("kernel alone", med["kernel"][0], med["kernel"][1], arm_counts["kernel"]),
                          ("knob alone", med["knob"][0], med["knob"][1], arm_counts["knob"]),
                          ("whole loop", total, total_c, runs)):
        print(f"{what}: {w / (p * n):.2f}x its {n} plain runs by wall, {c / (pc * n):.2f}x by CPU"
              f" (target <= 2x: {'met' if w <= 2 * p * n else 'NOT met'} by wall, {'met' if c <= 2 * pc * n else 'NOT met'} by CPU)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
