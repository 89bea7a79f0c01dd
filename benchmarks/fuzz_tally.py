"""A fuzz campaign's figures: the project's own fuzz and property tests rerun at a scale and seed
of your choosing, each case's ending counted.

Runs ``tests/test_fuzz_commands.py`` (damaged captures through analyze/compare/bundle, damaged
traces through diff) with ``FORENSICS_FUZZ_SCALE``/``FORENSICS_FUZZ_SEED`` and a tally file, plus
``tests/test_property_readers.py``, ``tests/test_fuzz_borders.py`` and
``tests/test_fuzz_text_parsers.py`` as they are, and prints:

* per command and base, how the fuzz cases ended (refused in one line; the undamaged result; a
  changed result that names the damaged file; a result of a mutation that may change it);
* every failure pytest reports (a traceback, an exit 70, a hang, a change nothing discloses),
  by test file.

    python benchmarks/fuzz_tally.py --scale 4 --seed 2026
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FUZZ = "tests/test_fuzz_commands.py"
OTHERS = ["tests/test_property_readers.py", "tests/test_fuzz_borders.py", "tests/test_fuzz_text_parsers.py"]


def run(files: list[str], env: dict[str, str]) -> tuple[int, str]:
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE", *files],
                       cwd=ROOT, env=env, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def summary(text: str) -> str:
    last = [line for line in text.splitlines() if re.search(r"\d+ (passed|failed|skipped|error)", line)]
    return last[-1].strip("= ") if last else "no pytest summary"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--scale", type=float, default=4.0, help="FORENSICS_FUZZ_SCALE: cases per kind, times this")
    p.add_argument("--seed", type=int, default=2026, help="FORENSICS_FUZZ_SEED")
    args = p.parse_args(argv)
    tally = Path(tempfile.mkdtemp(prefix="fuzz_tally_")) / "tally.jsonl"
    env = {**os.environ, "FORENSICS_FUZZ_SCALE": str(args.scale), "FORENSICS_FUZZ_SEED": str(args.seed),
           "FORENSICS_FUZZ_TALLY": str(tally), "PYTHONPATH": str(ROOT)}
    t = time.perf_counter()
    code, out = run([FUZZ], env)
    rows = [json.loads(line) for line in tally.read_text().splitlines()] if tally.exists() else []
    print(f"fuzz: {FUZZ}, scale {args.scale}, seed {args.seed}: {summary(out)} ({time.perf_counter() - t:.0f} s)")
    by = collections.Counter()
    for r in rows:
        base, command = r["case"].split("-", 2)[:2]
        by[(f"{base} {command}", r["outcome"])] += 1
    groups = sorted({g for g, _ in by})
    outcomes = ("refused", "same", "disclosed", "result")
    print(f"  {'base and command':<22}" + "".join(f"{o:>10}" for o in outcomes))
    for g in groups:
        print(f"  {g:<22}" + "".join(f"{by[(g, o)]:>10}" for o in outcomes))
    print(f"  {'all':<22}" + "".join(f"{sum(by[(g, o)] for g in groups):>10}" for o in outcomes))
    failed = [line for line in out.splitlines() if line.startswith(("FAILED", "ERROR"))]
    for line in failed:
        print(f"  {line}")
    codes = [code]
    for f in OTHERS:
        t = time.perf_counter()
        c, text = run([f], {**os.environ, "PYTHONPATH": str(ROOT)})
        codes.append(c)
        print(f"{f}: {summary(text)} ({time.perf_counter() - t:.0f} s)")
        for line in text.splitlines():
            if line.startswith(("FAILED", "ERROR")):
                print(f"  {line}")
    return 0 if all(c == 0 for c in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
