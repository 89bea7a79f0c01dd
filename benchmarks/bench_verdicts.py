"""Benchmark: arm comparison, discriminator table and toggle report as a ratio to loading the capture.

Builds a SYNTHETIC capture (tests/synthetic_captures.py: real formats, made-up values) with
``--repeat`` copies of the worked-example GEMM pattern (7 occurrences each) in three arms (a1, a2,
one toggle arm), then times in the same run: ``load_evidence`` (forensics.judge.analysis: parse every
file, attribute, count: the baseline) and ``compare_arms``, ``discriminator_table``,
``toggle_report`` and ``write_bundle`` on the loaded evidence. Prints seconds, occurrences per second and each step's
ratio to the load (target: every verdict step <= 1x the load).

    python benchmarks/bench_verdicts.py [--repeat 300]

Exit status is non-zero only on error (a slow step is reported, not failed).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forensics.judge.arm_evidence import load_evidence  # noqa: E402
from forensics.evidence.bundle import write_bundle  # noqa: E402
from forensics.judge.verdicts import compare_arms, discriminator_table, toggle_report  # noqa: E402
from tests.synthetic_captures import Arm, build_capture, wgrad_scenario  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=300, help="copies of the 7-GEMM pattern per arm")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cap = build_capture(Path(tmp) / "cap", wgrad_scenario() * args.repeat,
                            [Arm("a1"), Arm("a2"), Arm("t1", toggle={"NVTE_EXT_MARGIN_SM": "8"})])
        t0 = time.perf_counter()
        ev = load_evidence(cap)
        load = time.perf_counter() - t0
        n = len(ev.sites)
        steps = {}
        t0 = time.perf_counter()
        comparison = compare_arms(ev)
        steps["compare_arms"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        discriminator_table(ev, comparison=comparison)
        steps["discriminator_table"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        toggle_report(ev)
        steps["toggle_report"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        write_bundle(ev, Path(tmp) / "bundle.tar.gz")
        steps["write_bundle (analysis reused)"] = time.perf_counter() - t0
    print(f"capture: {n} site occurrences over 3 arms (SYNTHETIC)")
    print(f"load_evidence (baseline): {load:.2f} s ({n / load:,.0f} occurrences/s)")
    for name, secs in steps.items():
        print(f"{name}: {secs:.2f} s ({n / secs:,.0f} occurrences/s), ratio to load {secs / load:.2f}x"
              + ("" if secs <= load else "  <-- slower than loading"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
