"""Many ranks: `forensics analyze` (and `forensics diff`) over 1024 ranks built from real rank files.

analyze: the capture is tests/fixtures/cpu/example (a real CPU-backend capture of one rank, arms a1
and a2) copied to N ranks with the rank changed (tests/many_ranks.py), with planted differences on
known ranks of arm a2: no oneMKL log (SINGLE-SOURCE on both occurrences) and a oneMKL log cut inside
the line of occurrence #2 (SINGLE-SOURCE on #2). The run must recover exactly that pattern.

Figures, all from this one run: wall time of `forensics analyze` on the N-rank capture against
"one rank's time x N / cores" (one rank's time: the same command on the 1-rank capture, in-process
analysis time; the CLI's own start-up is shown apart), peak RSS of the whole process tree (parent and
workers, sampled every 50 ms) and of its largest process, at N and at N/4 ranks (memory bounded by
the workers, not the ranks).

diff: the traces are built from the real rank files of tests/fixtures/traces-cpu-divergence (the CPU
example traced by `forensics trace`), rank changed per rank, ORIGIN and RECEIVER ranks planted
(tests/many_ranks.py); the same figures against one rank's in-process diff time.

    python benchmarks/bench_scale.py all --ranks 1024
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "benchmarks" / "_data" / "scale"


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_measured(cmd: list[str], env: dict | None = None) -> dict:
    """Run ``cmd``; wall time, exit code, peak RSS of the process tree and of its largest process."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    peak = {"tree": 0.0, "one": 0.0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            pids, stack = [], [proc.pid]
            while stack:
                p = stack.pop()
                pids.append(p)
                stack += _children(p)
            rss = [_rss_mb(p) for p in pids]
            peak["tree"] = max(peak["tree"], sum(rss))
            peak["one"] = max(peak["one"], max(rss, default=0.0))
            done.wait(0.05)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    out, err = proc.communicate()
    wall = time.perf_counter() - t
    done.set()
    th.join()
    return {"wall_s": wall, "rc": proc.returncode, "peak_tree_mb": peak["tree"], "peak_one_mb": peak["one"],
            "stdout": out, "stderr": err}


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def planted_analyze(n: int):
    from tests.many_ranks import Planted

    no_mkl = {r for r in range(n) if r % 97 == 13}
    cut = {r for r in range(n) if r % 89 == 50} - no_mkl
    return Planted(no_mkl=no_mkl, cut_mkl=cut)


def expected_not_named(planted) -> set[tuple[str, int, str]]:
    return ({("a2", r, o) for r in planted.no_mkl for o in ("1", "2")} | {("a2", r, "2") for r in planted.cut_mkl})


def not_named(analysis_json: Path) -> set[tuple[str, int, str]]:
    data = json.loads(analysis_json.read_text())
    return {(v["arm"], int(v["rank"]), v["scope"].rsplit("#", 1)[1]) for v in data["verdicts"] if v["verdict"] != "NAMED"}


def one_rank_seconds(capture: Path, repeats: int = 5) -> float:
    """In-process analysis time of a 1-rank capture (median of warm runs)."""
    code = ("import statistics, sys, time; from forensics.judge.analysis import analyze; analyze(sys.argv[1]); ts=[]\n"
            "for _ in range(int(sys.argv[2])):\n t=time.perf_counter(); analyze(sys.argv[1]); ts.append(time.perf_counter()-t)\n"
            "print(statistics.median(ts))")
    out = subprocess.run([sys.executable, "-c", code, str(capture), str(repeats)], capture_output=True, text=True,
                         env=_env(), check=True)
    return float(out.stdout.strip().splitlines()[-1])


def bench_analyze(n: int, jobs: int) -> None:
    from forensics.runtime.parallel import available_cores
    from tests.many_ranks import build_capture

    cores = available_cores() if jobs <= 0 else jobs
    DATA.mkdir(parents=True, exist_ok=True)
    results = {}
    one = DATA / "analyze-1"
    shutil.rmtree(one, ignore_errors=True)
    build_capture(one, 1)
    per_rank = one_rank_seconds(one)
    cli_one = run_measured([sys.executable, "-m", "forensics", "analyze", str(one), "--out", str(DATA / "out-1"), "-q"],
                           _env())
    shutil.rmtree(DATA / "out-1", ignore_errors=True)
    print(f"one rank (arms a1+a2): analysis {per_rank:.3f} s in-process; the CLI {cli_one['wall_s']:.2f} s "
          f"(interpreter and imports included), peak RSS {cli_one['peak_tree_mb']:.0f} MB")
    for size in (max(1, n // 4), n):
        cap = DATA / f"analyze-{size}"
        shutil.rmtree(cap, ignore_errors=True)
        planted = planted_analyze(size)
        t = time.perf_counter()
        build_capture(cap, size, planted)
        built = time.perf_counter() - t
        out = DATA / f"out-{size}"
        shutil.rmtree(out, ignore_errors=True)
        r = run_measured([sys.executable, "-m", "forensics", "analyze", str(cap), "--out", str(out), "-q",
                          "--jobs", str(jobs)], _env())
        got = not_named(out / "analysis.json") if r["rc"] in (0, 1) else None
        want = expected_not_named(planted)
        ideal = per_rank * size / cores
        results[size] = r
        print(f"{size} ranks (built in {built:.0f} s): wall {r['wall_s']:.1f} s, exit {r['rc']}; one rank x {size} / "
              f"{cores} cores = {ideal:.1f} s; ratio {r['wall_s'] / ideal:.2f} (target < 10); peak RSS tree "
              f"{r['peak_tree_mb']:.0f} MB, largest process {r['peak_one_mb']:.0f} MB")
        print(f"  planted: {len(planted.no_mkl)} ranks without a oneMKL log, {len(planted.cut_mkl)} with it cut; "
              f"recovered exactly: {got == want} ({len(want)} non-NAMED (rank, occurrence) expected, "
              f"{len(got) if got is not None else 'no'} found)")
        if got != want:
            print(f"  MISMATCH: missing {sorted(want - (got or set()))[:10]} extra {sorted((got or set()) - want)[:10]}")
            print(r["stderr"][-2000:])
        shutil.rmtree(cap, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
    small, big = results[max(1, n // 4)], results[n]
    print(f"peak RSS at {n // 4} vs {n} ranks: tree {small['peak_tree_mb']:.0f} vs {big['peak_tree_mb']:.0f} MB, "
          f"largest process {small['peak_one_mb']:.0f} vs {big['peak_one_mb']:.0f} MB")
    shutil.rmtree(one, ignore_errors=True)


def one_rank_diff_seconds(a: Path, b: Path, repeats: int = 20) -> float:
    """In-process diff time of one rank (median of warm runs)."""
    code = ("import statistics, sys, time; from forensics.tracediff.diff import diff_paths; diff_paths(sys.argv[1], sys.argv[2]); ts=[]\n"
            "for _ in range(int(sys.argv[3])):\n t=time.perf_counter(); diff_paths(sys.argv[1], sys.argv[2]); ts.append(time.perf_counter()-t)\n"
            "print(statistics.median(ts))")
    out = subprocess.run([sys.executable, "-c", code, str(a), str(b), str(repeats)], capture_output=True, text=True,
                         env=_env(), check=True)
    return float(out.stdout.strip().splitlines()[-1])


def bench_diff(n: int, jobs: int) -> None:
    from forensics.runtime.parallel import available_cores
    from tests.many_ranks import TraceSources, build_traces

    fix = ROOT / "tests" / "fixtures" / "traces-cpu-divergence"
    src = TraceSources(fix / "a.jsonl", fix / "same.jsonl", fix / "origin.jsonl", fix / "a_window.jsonl",
                       fix / "receiver.jsonl")
    cores = available_cores() if jobs <= 0 else jobs
    DATA.mkdir(parents=True, exist_ok=True)
    per_rank = one_rank_diff_seconds(fix / "a.jsonl", fix / "origin.jsonl")
    print(f"one rank (real CPU-example traces, 130 records, ORIGIN at record 28): diff {per_rank * 1e3:.1f} ms in-process")
    results = {}
    for size in (max(1, n // 4), n):
        origin = {r for r in range(size) if r % 97 == 13}
        receiver = {r for r in range(size) if r % 89 == 50} - origin
        base = DATA / f"diff-{size}"
        shutil.rmtree(base, ignore_errors=True)
        build_traces(base / "A", base / "B", size, src, origin, receiver)
        out = base / "report.json"
        r = run_measured([sys.executable, "-m", "forensics", "diff", str(base / "A"), str(base / "B"), "--json", str(out),
                          "--jobs", str(jobs)], _env())
        got = None
        if r["rc"] in (0, 1) and out.exists():
            rep = json.loads(out.read_text())
            got = {int(k): v["first_divergence"]["verdict"] for k, v in rep["ranks"].items() if v["first_divergence"]}
        want = {**{x: "ORIGIN" for x in origin}, **{x: "RECEIVER" for x in receiver}}
        ideal = per_rank * size / cores
        results[size] = r
        print(f"{size} ranks: wall {r['wall_s']:.1f} s, exit {r['rc']}; one rank x {size} / {cores} cores = {ideal:.1f} s; "
              f"ratio {r['wall_s'] / ideal:.2f} (target < 10); peak RSS tree {r['peak_tree_mb']:.0f} MB, largest "
              f"process {r['peak_one_mb']:.0f} MB")
        print(f"  planted: {len(origin)} ORIGIN ranks, {len(receiver)} RECEIVER ranks; recovered exactly: {got == want}")
        if got != want:
            print(f"  MISMATCH: {sorted(set((got or {}).items()) ^ set(want.items()))[:10]}")
            print(r["stderr"][-2000:])
        shutil.rmtree(base, ignore_errors=True)
    small, big = results[max(1, n // 4)], results[n]
    print(f"peak RSS at {n // 4} vs {n} ranks: tree {small['peak_tree_mb']:.0f} vs {big['peak_tree_mb']:.0f} MB, "
          f"largest process {small['peak_one_mb']:.0f} vs {big['peak_one_mb']:.0f} MB")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["analyze", "diff", "all"])
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--jobs", type=int, default=0, help="worker processes (0: one per core)")
    args = p.parse_args()
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs")
    if args.what in ("diff", "all"):
        bench_diff(args.ranks, args.jobs)
    if args.what in ("analyze", "all"):
        bench_analyze(args.ranks, args.jobs)
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
