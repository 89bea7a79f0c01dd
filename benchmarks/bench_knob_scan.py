"""Benchmark: static knob scan of a whole site-packages (cold and warm cache) vs ``grep -rlw``.

The baseline is ``grep -rlw NAME <site-packages>`` on the same tree in the same run (it only
lists files; the scan also parses every hit, reads ELF sections and classifies). Figures: seconds
for the cold scan (fresh cache directory), the warm scan (same cache) and grep, and the ratios
cold/grep and warm/grep. Budget: cold scan under 30 s on a 2-core machine.

    python benchmarks/bench_knob_scan.py [--name CUBLAS_WORKSPACE_CONFIG] [--path DIR] [--jobs N] [--repeat R]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from forensics.knobs import default_paths, scan  # noqa: E402


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def grep_baseline(name: str, paths: list[str]) -> tuple[float, int]:
    t, r = timed(lambda: subprocess.run(["grep", "-rlw", "--", name, *paths], capture_output=True, text=True))
    return t, len(r.stdout.split())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="CUBLAS_WORKSPACE_CONFIG")
    ap.add_argument("--path", action="append", help="tree to scan (default: this interpreter's site-packages)")
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=1, help="cold/warm pairs (each cold run uses a new cache dir)")
    args = ap.parse_args()
    paths = args.path or default_paths()
    colds, warms, greps = [], [], []
    for _ in range(args.repeat):
        cache = tempfile.mkdtemp(prefix="knob-bench-cache-")
        os.environ["FORENSICS_CACHE_DIR"] = cache
        try:
            t_cold, cold = timed(lambda: scan(args.name, paths, workers=args.jobs))
            t_warm, warm = timed(lambda: scan(args.name, paths, workers=args.jobs))
        finally:
            shutil.rmtree(cache, ignore_errors=True)
        t_grep, n_grep = grep_baseline(args.name, paths)
        colds.append(t_cold)
        warms.append(t_warm)
        greps.append(t_grep)
    c = cold.counts  # type: ignore[attr-defined]
    print(f"knob {args.name} over {', '.join(paths)}")
    print(f"  files: {c['python_files']} Python, {c['shared_libraries']} shared libraries; "
          f"{sum(len(r.findings) for r in cold.python)} Python findings; libraries: "  # type: ignore[attr-defined]
          f"{sum(lib.verdict == 'contains the name' for lib in cold.libraries)} hold the name, "  # type: ignore[attr-defined]
          f"{sum(lib.verdict == 'cannot tell statically' for lib in cold.libraries)} cannot tell statically; "  # type: ignore[attr-defined]
          f"grep lists {n_grep} files")
    print(f"  cpu count: {os.cpu_count()}, workers: {args.jobs or min(os.cpu_count() or 1, 8)}")
    cold_s, warm_s, grep_s = statistics.median(colds), statistics.median(warms), statistics.median(greps)
    print(f"  cold scan  {cold_s:7.2f} s   ratio to grep {cold_s / grep_s:5.2f}   (budget 30 s: {'OK' if cold_s < 30 else 'OVER'})")
    print(f"  warm scan  {warm_s:7.2f} s   ratio to grep {warm_s / grep_s:5.2f}   cache hits {warm.counts['cache_hits']}")  # type: ignore[attr-defined]
    print(f"  grep -rlw  {grep_s:7.2f} s")
    return 0 if cold_s < 30 else 1


if __name__ == "__main__":
    sys.exit(main())
