"""Diff throughput: the differ vs an orjson + pandas-merge baseline, on two generated traces.

The traces are GENERATED here (SYNTHETIC, native optrace format, docs/trace-format.md): N records
on one rank, ``--per-step`` records per step, 20 op names, one tensor input, one argument
digest, one tensor output. B holds the same records with neighbours swapped inside each step (so
positions differ and only identity alignment works) and the LAST record's output changed: every
method must read everything and find that record as ORIGIN.

Methods, each in its own process (wall time and peak RSS, VmHWM, measured there):

* ``differ``: ``forensics diff`` as shipped (the columnar prefix, then the walk; what the prefix read is
  printed under it: records compared, run A's blocks, how many went to Arrow's JSON reader, templates);
* ``walk`` (``--walk``): the record-by-record walk alone (the differ before the columnar path);
* ``pandas``: the baseline: every line parsed with orjson into columns (the in/out lists kept as
  their JSON text), two DataFrames, ``merge`` on (step, identity), first differing output by A's
  seq, then the input test. Its address space is capped (``--baseline-cap-gb``) so that it fails
  alone instead of exhausting a shared machine;
* ``read_json`` (``--read-json``): ``pandas.read_json(lines=True)`` and the same merge.

    python benchmarks/bench_diff.py --records 2000000 10000000
    python benchmarks/bench_diff.py --records 2000000 --differ-only --stages   # where the differ's CPU goes
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OPS = [f"aten.op{i}.default" for i in range(20)]
HEADER = b'{"type":"header","schema":"forensics.optrace","version":1,"rank":0,"world_size":1,"argv":["bench"]}\n'
LINE = ('{{"seq":{seq},"id":"{op}:{occ}","op":"{op}","kind":"op","step":{step},"phase":"forward",'
        '"in":[{{"s":[64,64],"t":"float32","n":4096,"h":"{hi}"}},{{"s":null,"t":"args","n":2,"h":"00000000deadbeef"}}],'
        '"out":[{{"s":[64,64],"t":"float32","n":4096,"h":"{ho}"}}]}}\n')


def generate(path: Path, n: int, per_step: int, variant: bool) -> None:
    """SYNTHETIC trace; ``variant``: swap neighbours within steps and change the last output."""
    counts: dict[str, int] = {}
    rows = []
    for i in range(n):
        op = OPS[i % len(OPS)]
        counts[op] = counts.get(op, 0) + 1
        rows.append((op, counts[op], i // per_step, i))
    with open(path, "w", buffering=1 << 22) as f:
        f.write(HEADER.decode())
        order = list(range(n))
        if variant:
            for j in range(0, n - 1, 2):
                if rows[j][2] == rows[j + 1][2]:
                    order[j], order[j + 1] = order[j + 1], order[j]
        for seq, j in enumerate(order):
            op, occ, step, i = rows[j]
            hi = format((i * 2654435761) & 0xFFFFFFFFFFFFFFFF, "016x")
            ho = format((i * 40503 + 7) & 0xFFFFFFFFFFFFFFFF, "016x")
            if variant and i == n - 1:
                ho = "ffffffffffffffff"
            f.write(LINE.format(seq=seq, op=op, occ=occ, step=step, hi=hi, ho=ho))
        f.write(json.dumps({"type": "footer", "records": n, "dropped": 0}) + "\n")


def run_differ(a: Path, b: Path) -> dict:
    from forensics.tracediff import columnar
    from forensics.tracediff.diff import diff_paths

    seen = []  # what the columnar prefix read (its Prefix), shown beside the figures
    orig = columnar.compare_prefix
    columnar.compare_prefix = lambda *x, **k: seen.append(orig(*x, **k)) or seen[-1]
    rep = diff_paths(a, b)
    d = rep.ranks[0].first_divergence
    prefix = {"pairs": sum(p.pairs for p in seen), "blocks": sum(p.blocks for p in seen),
              "json_blocks": sum(p.json_blocks for p in seen), "templates": sum(p.templates for p in seen)}
    return {"identity": d.identity if d else None, "verdict": d.verdict if d else None, "prefix": prefix}


def run_walk(a: Path, b: Path) -> dict:
    import forensics.tracediff.diff as diff_mod
    from forensics.tracediff import walk

    orig = walk.walk_rank
    diff_mod.walk_rank = lambda *x, **k: orig(*x, **{**k, "columnar": False})
    return run_differ(a, b)


def _columns(path: Path):
    import orjson
    import pandas as pd

    ids, seqs, steps, ins, outs = [], [], [], [], []
    with open(path, "rb") as f:
        f.readline()
        for line in f:
            o = orjson.loads(line)
            if o.get("type") == "footer":
                break
            ids.append(o["id"])
            seqs.append(o["seq"])
            steps.append(o["step"])
            ins.append(orjson.dumps(o["in"]).decode())  # text: each bytes object orjson returns holds a ~4 KB
            outs.append(orjson.dumps(o["out"]).decode())  # buffer (8.2 GB at 500K records); its text does not
    return pd.DataFrame({"identity": ids, "seq": seqs, "step": steps, "in": ins, "out": outs})


def run_pandas(a: Path, b: Path) -> dict:
    da, db = _columns(a), _columns(b)
    m = da.merge(db, on=["step", "identity"], how="left", suffixes=("_a", "_b")).sort_values("seq_a")
    diverged = m[(m["out_a"] != m["out_b"]) | m["out_b"].isna()]
    if diverged.empty:
        return {"identity": None, "verdict": None}
    row = diverged.iloc[0]
    verdict = "CONTROL_FLOW" if row["out_b"] is None else ("ORIGIN" if row["in_a"] == row["in_b"] else "RECEIVER")
    return {"identity": row["identity"], "verdict": verdict}


def run_read_json(a: Path, b: Path) -> dict:
    import pandas as pd

    def load(p: Path):
        df = pd.read_json(p, lines=True)
        df = df[df["type"].isna()] if "type" in df else df
        return pd.DataFrame({"identity": df["id"], "seq": df["seq"], "step": df["step"],
                             "in": df["in"].map(repr), "out": df["out"].map(repr)})

    da, db = load(a), load(b)
    m = da.merge(db, on=["step", "identity"], how="left", suffixes=("_a", "_b")).sort_values("seq_a")
    diverged = m[(m["out_a"] != m["out_b"]) | m["out_b"].isna()]
    row = diverged.iloc[0]
    return {"identity": row["identity"], "verdict": "ORIGIN" if row["in_a"] == row["in_b"] else "RECEIVER"}


def peak_rss_mb() -> float:
    """This process's own peak RSS (VmHWM). ru_maxrss is not used: Linux carries it over fork and
    execve, so a child would report the generating parent's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


METHODS = {"differ": run_differ, "walk": run_walk, "pandas": run_pandas, "read_json": run_read_json}


def measure(method: str, a: Path, b: Path, cap_gb: float | None = None) -> dict:
    def cap() -> None:
        if cap_gb:
            limit = int(cap_gb * (1 << 30))
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    t = time.perf_counter()
    out = subprocess.run([sys.executable, __file__, "--_run", method, str(a), str(b)],
                         capture_output=True, text=True, preexec_fn=cap if method == "pandas" else None)
    if out.returncode != 0:  # say why (a missing module, the memory cap), not only "exit status 1"
        tail = out.stderr.strip().splitlines()[-1:] or ["(no message)"]
        return {"method": method, "failed": f"exit {out.returncode} after {time.perf_counter() - t:.0f} s: {tail[0]}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def stages(a: Path, b: Path) -> None:
    """Thread CPU time per stage of the columnar prefix on ``a``/``b`` (wrappers around the stages,
    no profiler; run B's blocks are read in their own thread, each stage counts its own thread)."""
    import threading
    from collections import defaultdict

    from forensics.tracediff import columnar
    from forensics.tracediff import columnar_scan as scan

    acc: dict[str, float] = defaultdict(float)
    order: list[str] = []  # the labels as registered: a stage, then its parts
    lock = threading.Lock()

    def wrap(owner, name: str, label) -> None:  # noqa: ANN001
        f = getattr(owner, name)
        order.extend(label if isinstance(label, tuple) else (label,))

        def timed(*x, **k):  # noqa: ANN002, ANN003, ANN202
            t = time.thread_time()
            try:
                return f(*x, **k)
            finally:
                with lock:
                    acc[label if isinstance(label, str) else label[0 if x[0].full else 1]] += time.thread_time() - t
        setattr(owner, name, timed)

    wrap(columnar._Side, "fill", ("run A: its blocks (read, lines, heads, templates, columns)",
                                  "run B: its blocks (read, lines, heads, columns)"))  # (A, B)
    wrap(scan.Templates, "columns", "  run A: templates (blanking, the template column, dictionary, parses)")
    wrap(scan, "blank", "    run A: finding and blanking digests, fwd and steps")
    wrap(scan, "template_info", "    run A: parsing the new templates")
    wrap(scan, "heads", "  both sides: heads")
    wrap(scan, "binary", "  both sides: binary columns (ids, text after the seq, templates)")
    t, w = time.process_time(), time.perf_counter()
    pre = columnar.compare_prefix(a, b)
    total, wall = time.process_time() - t, time.perf_counter() - w
    print(f"  columnar prefix alone: {total:.2f} s CPU ({wall:.2f} s wall), {pre.pairs:,} pairs; by stage:")
    for label in order:
        print(f"  {acc[label]:7.2f} s  {label}")
    rest = total - sum(v for k, v in acc.items() if k.startswith("run "))
    print(f"  {rest:7.2f} s  aligning and comparing the pairs, the rest")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, nargs="+", default=[2_000_000, 10_000_000])
    p.add_argument("--per-step", type=int, default=100_000)
    p.add_argument("--dir", type=Path, default=Path(__file__).resolve().parent / "_data" / "diff")
    p.add_argument("--walk", action="store_true", help="also time the record-by-record walk alone")
    p.add_argument("--read-json", action="store_true", help="also time pandas.read_json (slow)")
    p.add_argument("--differ-only", action="store_true", help="skip the baselines (memory-bound check at large N)")
    p.add_argument("--baseline-cap-gb", type=float, default=14.0, help="address-space cap of the pandas baseline")
    p.add_argument("--keep", action="store_true", help="keep the generated traces")
    p.add_argument("--stages", action="store_true", help="also time the columnar prefix's stages (in this process)")
    p.add_argument("--_run", nargs=3, metavar=("METHOD", "A", "B"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args._run:
        method, a, b = args._run
        t, c = time.perf_counter(), time.process_time()
        result = METHODS[method](Path(a), Path(b))
        dt, cpu = time.perf_counter() - t, time.process_time() - c
        rss = peak_rss_mb()
        print(json.dumps({"method": method, "seconds": dt, "cpu_seconds": cpu, "peak_rss_mb": rss, **result}))
        return
    import os

    load = os.getloadavg()
    model = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                  if ln.startswith("model name")), "unknown CPU") if Path("/proc/cpuinfo").exists() else "unknown CPU"
    print(f"cpu: {model}; load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs")
    args.dir.mkdir(parents=True, exist_ok=True)
    for n in args.records:
        a, b = args.dir / f"a{n}.jsonl", args.dir / f"b{n}.jsonl"
        t = time.perf_counter()
        if not (a.exists() and b.exists()):
            generate(a, n, args.per_step, False)
            generate(b, n, args.per_step, True)
        print(f"{n:,} records per trace ({a.stat().st_size / 1e9:.2f} GB each; made in {time.perf_counter() - t:.0f} s), "
              f"{args.per_step:,} records per step")
        methods = ["differ"] + (["walk"] if args.walk else []) + ([] if args.differ_only else ["pandas"]) \
            + (["read_json"] if args.read_json else [])
        results = {m: measure(m, a, b, args.baseline_cap_gb) for m in methods}
        for m, r in results.items():
            if "failed" in r:
                print(f"  {m:10s} FAILED ({r['failed']})")
                continue
            print(f"  {m:10s} {r['seconds']:8.1f} s  {r['cpu_seconds']:8.1f} s CPU (all threads)  {n / r['seconds'] / 1e3:8.0f} k records/s  "
                  f"peak RSS {r['peak_rss_mb']:7.0f} MB  first divergence {r['identity']} {r['verdict']}")
            if r.get("prefix"):
                p = r["prefix"]
                print(f"  {'':10s} columnar prefix: {p['pairs']:,} pairs, {p['blocks']} blocks of run A "
                      f"({p['json_blocks']} by Arrow's JSON reader), {p['templates']} templates parsed")
        done = {m: r for m, r in results.items() if "failed" not in r}
        assert len({(r["identity"], r["verdict"]) for r in done.values()}) == 1, "methods disagree"
        for other in ("pandas", "walk", "read_json"):
            if other in done and "differ" in done:
                print(f"  differ / {other} time ratio: {done['differ']['seconds'] / done[other]['seconds']:.2f}"
                      + (" (target < 0.5)" if other == "pandas" else "")
                      + f"; CPU time ratio {done['differ']['cpu_seconds'] / done[other]['cpu_seconds']:.2f}")
        if args.stages:
            stages(a, b)
        if not args.keep:
            a.unlink()
            b.unlink()
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
