"""Benchmark: nsys SQLite -> kernels frame (parsers.nsys.read_kernels) vs a plain sqlite3 join.

The baseline runs one SQL query with the same content as our frame (every kernel column, the
demangled/short/mangled names from StringIds, the launching call by the canonical correlationId +
globalPid join, earliest call per correlationId and process, its name; ordered by start) with the
sqlite3 module (text decoded with errors="replace", as we must) and ``fetchall()``, on the same
file in the same run; the figure is the ratio of the two times
(target: within 2x). Files: the largest corpus export (real) and a generated bigger copy whose
kernel and runtime rows are replicated to about ``--rows`` kernels (default 1,000,000).

    python benchmarks/bench_nsys.py [--rows N] [--repeat R]
"""
from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from parsers import nsys  # noqa: E402

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "nsys"

BASELINE_SQL = """
SELECT k.*, d.value, s.value, {mangled}, r.start, r.globalTid, rn.value
FROM CUPTI_ACTIVITY_KIND_KERNEL AS k
JOIN StringIds AS d ON d.id = k.demangledName
JOIN StringIds AS s ON s.id = k.shortName
{mangled_join}
LEFT JOIN (SELECT correlationId, globalTid, nameId, min(start) AS start FROM CUPTI_ACTIVITY_KIND_RUNTIME
           GROUP BY correlationId, globalTid & 0xFFFFFFFFFF000000) AS r
       ON r.correlationId = k.correlationId AND (r.globalTid & 0xFFFFFFFFFF000000) = k.globalPid
LEFT JOIN StringIds AS rn ON rn.id = r.nameId
ORDER BY k.start
"""


def baseline(path: Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", errors="replace")
    cols = [r[1] for r in conn.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    has_m = "mangledName" in cols
    sql = BASELINE_SQL.format(
        mangled="m.value" if has_m else "NULL",
        mangled_join="LEFT JOIN StringIds AS m ON m.id = k.mangledName" if has_m else "",
    )
    rows = conn.execute(sql).fetchall()
    conn.close()
    return len(rows)


def ours(path: Path) -> int:
    return len(nsys.read_kernels(path))


def replicate(src: Path, dst: Path, rows: int) -> int:
    """Copy ``src`` and replicate its kernel (and matching runtime) rows to about ``rows`` kernels."""
    shutil.copyfile(src, dst)
    conn = sqlite3.connect(dst)
    n = conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    span = conn.execute("SELECT max(correlationId) + 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
    copies = max(rows // n - 1, 0)
    kcols = [r[1] for r in conn.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    rcols = [r[1] for r in conn.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_RUNTIME)")]

    def shifted(cols, table):
        out = []
        for c in cols:
            if c == "correlationId":
                out.append(f"{table}.correlationId + c.i * {span}")
            elif c in ("start", "end"):
                out.append(f"{table}.{c} + c.i * 1000000")
            else:
                out.append(f"{table}.{c}")
        return ", ".join(out)

    conn.execute("CREATE TEMP TABLE copies(i INTEGER)")
    conn.executemany("INSERT INTO copies VALUES (?)", [(i,) for i in range(1, copies + 1)])
    launched = "(SELECT correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL)"
    conn.execute(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT {shifted(rcols, 'r')} FROM copies AS c, "
        f"(SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId IN {launched}) AS r"
    )
    conn.execute(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT {shifted(kcols, 'k')} FROM copies AS c, "
        f"(SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL) AS k"
    )
    conn.commit()
    total = conn.execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    conn.close()
    return total


def timed(fn, path: Path, repeat: int) -> tuple[float, int]:
    times, n = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        n = fn(path)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    files = sorted(CORPUS.glob("*.sqlite"), key=lambda p: p.stat().st_size)
    if not files:
        print(f"no corpus at {CORPUS}: nothing to measure", file=sys.stderr)
        return 4
    largest = files[-1]
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "replicated.sqlite"
        t0 = time.perf_counter()
        total = replicate(largest, big, args.rows)
        print(f"generated {big.name}: {total:,} kernel rows from {largest.name} in {time.perf_counter() - t0:.1f} s")
        print(f"{'file':<34} {'kernels':>10} {'sqlite3 s':>10} {'ours s':>10} {'ratio':>7}")
        for path, label, rep in ((largest, largest.name, max(args.repeat, 20)), (big, f"replicated ({total:,})", args.repeat)):
            base_t, base_n = timed(baseline, path, rep)
            our_t, our_n = timed(ours, path, rep)
            assert base_n == our_n, (base_n, our_n)
            print(f"{label:<34} {our_n:>10,} {base_t:>10.4f} {our_t:>10.4f} {our_t / base_t:>6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
