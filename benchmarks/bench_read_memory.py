"""Peak RSS per million launches of the whole-file readers (issue 44: "a benchmark gives MB of RSS
per million launches").

The traces are SYNTHETIC, in the real formats: each launch is a copy of a real launch's events
from a shipped real file, with its correlation id, external id and timestamps renumbered and its
kernel name taken in turn from that file's kernels.

- Kineto: tests/fixtures/amd/kineto_rocm6.2_mi250_minitoy_train.json.gz (real, PROVENANCE.md):
  per launch its ``cuda_runtime`` ``hipLaunchKernel`` event, the ``ac2g`` flow pair and the
  ``kernel`` event; the file's own metadata (deviceProperties, schemaVersion) kept. Written as
  ``.json.gz``. Read with ``parsers.kineto.read_kernels``. ``kineto-padded``: the same launches
  with, after each, ``--pad`` (default 8) ``python_function`` events copied in turn from the real
  tests/fixtures/amd/kineto_rocm6.4_mi300x_bert_small.json.gz (an event kind no frame keeps):
  the text grows, the rows kept do not. ``--before`` also reads each trace with the whole-file
  reader the streamed one replaced (tests/_kineto_whole_read.py, main before issue 44).
  ``--big``: one Kineto trace whose text passes the old 1 GiB whole-read ceiling, read with the
  default ceilings (no --max-input-bytes).
- rocprofv3 CSV: tests/fixtures/amd/rocprofv3_v3_kernel_trace.csv (real): its header, its rows
  repeated with Dispatch_Id, Correlation_Id and timestamps renumbered. Read with
  ``parsers.rocprofv3.read_kernel_trace``.
- rocprofv3 JSON: tests/fixtures/amd/synthetic_rocprofv3_v3_results.json (itself SYNTHETIC, in
  rocprofiler-sdk's JSON layout, PROVENANCE.md): its process with its 8 dispatch records repeated,
  correlation id, dispatch id and timestamps renumbered. ``rocprofv3_json_padded``: the same plus 4
  SYNTHETIC ``hip_api`` records per launch (the buffer-record header fields), which the reader
  drops: its peak memory should be the unpadded one's. Read with ``parsers.rocprofv3_json.read_results``.
- nsys SQLite (``--nsys``, needs the corpus): the real export ../shared/corpus/nsys/
  extrap_con_kernel.sqlite with its CUPTI_ACTIVITY_KIND_KERNEL and ..._RUNTIME rows repeated
  (correlationId and times renumbered). Read with ``parsers.nsys.read_kernels``.

Each read runs in a fresh ``python`` subprocess that reports ``resource.getrusage`` ``ru_maxrss``
(peak RSS of that process); a subprocess that only imports the reader gives the baseline. The
figure is (peak - baseline) / launches x 1e6, in MB (10^6 bytes) per million launches. The input
ceiling (--max-input-bytes, FORENSICS_MAX_INPUT_BYTES) is raised for the run: a 1M-launch Kineto
trace decompresses past the 1 GiB default.

    python benchmarks/bench_read_memory.py                 # 100k, 300k, 1M launches
    python benchmarks/bench_read_memory.py --launches 100000 --nsys
"""
from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "_data" / "read_memory"
KINETO_SEED = ROOT / "tests" / "fixtures" / "amd" / "kineto_rocm6.2_mi250_minitoy_train.json.gz"
ROCPROF_SEED = ROOT / "tests" / "fixtures" / "amd" / "rocprofv3_v3_kernel_trace.csv"
ROCPROF_JSON_SEED = ROOT / "tests" / "fixtures" / "amd" / "synthetic_rocprofv3_v3_results.json"
NSYS_SEED = ROOT.parent / "shared" / "corpus" / "nsys" / "extrap_con_kernel.sqlite"
PAD_SEED = ROOT / "tests" / "fixtures" / "amd" / "kineto_rocm6.4_mi300x_bert_small.json.gz"
ENV_MAX = "FORENSICS_MAX_INPUT_BYTES"


# --------------------------------------------------------------------------- synthetic traces
def write_kineto(n: int, out: Path, pad: int = 0) -> Path:
    """SYNTHETIC Kineto trace of ``n`` launches copied from the real seed's first launch; after
    each, ``pad`` python_function events copied from a real trace (none kept by the reader)."""
    doc = json.loads(gzip.decompress(KINETO_SEED.read_bytes()))
    events = doc.pop("traceEvents")
    kernels = [e for e in events if e.get("cat") == "kernel"]
    k0 = kernels[0]
    corr = k0["args"]["correlation"]
    rt0 = next(e for e in events if e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation") == corr)
    flows = [e for e in events if e.get("cat") == "ac2g" and e.get("id") == corr]
    names = sorted({e["name"] for e in kernels})
    meta = [e for e in events if e.get("ph") == "M"]
    fns = [e for e in json.loads(gzip.decompress(PAD_SEED.read_bytes()))["traceEvents"]
           if e.get("cat") == "python_function"] if pad else []
    with gzip.open(out, "wt", compresslevel=1, encoding="utf-8") as f:
        f.write("{")
        for k, v in doc.items():
            f.write(f"{json.dumps(k)}: {json.dumps(v)}, ")
        f.write('"traceEvents": [\n')
        f.write(",\n".join(json.dumps(e) for e in meta))
        t0 = float(rt0["ts"])
        for i in range(n):
            c = 1_000_000 + i
            ts = t0 + i * 10.0
            rt = dict(rt0, ts=round(ts, 3), args=dict(rt0["args"], correlation=c, **{"External id": c}))
            kn = dict(k0, name=names[i % len(names)], ts=round(ts + 5.0, 3),
                      args=dict(k0["args"], correlation=c, **{"External id": c}))
            fl = [dict(e, id=c, ts=round(ts if e["ph"] == "s" else ts + 5.0, 3)) for e in flows]
            py = [dict(fns[(i * pad + j) % len(fns)], ts=round(ts + j * 0.5, 3)) for j in range(pad)]
            f.write(",\n" + ",\n".join(json.dumps(e) for e in [rt, *fl, kn, *py]))
        f.write("\n]}\n")
    return out


def write_rocprof(n: int, out: Path) -> Path:
    """SYNTHETIC rocprofv3 kernel trace of ``n`` rows: the real seed's rows renumbered."""
    rows = list(csv.reader(io.StringIO(ROCPROF_SEED.read_text())))
    header, body = rows[0], rows[1:]
    col = {name: i for i, name in enumerate(header)}
    t0 = int(body[0][col["Start_Timestamp"]])
    with open(out, "w", newline="") as f:
        w = csv.writer(f, quoting=csv.QUOTE_NONNUMERIC if False else csv.QUOTE_MINIMAL)
        f.write(ROCPROF_SEED.read_text().split("\n", 1)[0] + "\n")
        for i in range(n):
            r = list(body[i % len(body)])
            dur = int(r[col["End_Timestamp"]]) - int(r[col["Start_Timestamp"]])
            start = t0 + i * 20_000
            r[col["Dispatch_Id"]] = str(i + 1)
            r[col["Correlation_Id"]] = str(i + 1)
            r[col["Start_Timestamp"]], r[col["End_Timestamp"]] = str(start), str(start + dur)
            w.writerow(r)
    return out


def write_rocprof_json(n: int, out: Path, pad: int = 0) -> Path:
    """SYNTHETIC rocprofv3 JSON of ``n`` dispatches (the synthetic seed's records renumbered), with
    ``pad`` SYNTHETIC hip_api records per dispatch that the reader drops."""
    doc = json.loads(ROCPROF_JSON_SEED.read_text())
    node = doc["rocprofiler-sdk-tool"][0]
    seed = node["buffer_records"]["kernel_dispatch"]
    node["buffer_records"] = {k: v for k, v in node["buffer_records"].items() if k not in ("kernel_dispatch", "hip_api")}
    t0 = seed[0]["start_timestamp"]
    with open(out, "w") as f:
        head = json.dumps({"rocprofiler-sdk-tool": [node]})
        cut = head.rindex("}]}") - 1  # inside buffer_records' object, before its closing brace
        f.write(head[:cut] + (", " if node["buffer_records"] else "") + '"kernel_dispatch": [')
        for i in range(n):
            r = seed[i % len(seed)]
            dur = r["end_timestamp"] - r["start_timestamp"]
            start = t0 + i * 20_000
            rec = dict(r, correlation_id=dict(r["correlation_id"], internal=i + 1), start_timestamp=start,
                       end_timestamp=start + dur, dispatch_info=dict(r["dispatch_info"], dispatch_id=i + 1))
            f.write(("," if i else "") + json.dumps(rec))
        f.write("]")
        if pad:
            f.write(', "hip_api": [')
            for i in range(n * pad):
                start = t0 + (i // pad) * 20_000 - 5_000 + (i % pad)
                f.write(("," if i else "") + json.dumps({
                    "size": 64, "kind": 2, "operation": 41, "correlation_id": {"internal": n + i + 1, "external": 0},
                    "start_timestamp": start, "end_timestamp": start + 800, "thread_id": r["thread_id"]}))
            f.write("]")
        f.write(head[cut:])
    return out


def write_nsys(n: int, out: Path) -> Path:
    """SYNTHETIC nsys export: the real seed with its kernel and runtime rows repeated to ``n``."""
    shutil.copy(NSYS_SEED, out)
    con = sqlite3.connect(out)
    kcols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
    rcols = [r[1] for r in con.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_RUNTIME)")]
    kern = con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchall()
    rt = {r[rcols.index("correlationId")]: r for r in con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME")}
    base = max(r[kcols.index("correlationId")] for r in kern) + 1
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    kq = f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({','.join('?' * len(kcols))})"
    rq = f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({','.join('?' * len(rcols))})"
    ki = {c: kcols.index(c) for c in ("start", "end", "correlationId")}
    ri = {c: rcols.index(c) for c in ("start", "end", "correlationId")}
    for i in range(n):
        src = kern[i % len(kern)]
        r = list(src)
        c = base + i
        shift = i * 50_000
        r[ki["start"]] += shift
        r[ki["end"]] += shift
        r[ki["correlationId"]] = c
        con.execute(kq, r)
        old = rt.get(src[ki["correlationId"]])
        if old is not None:
            q = list(old)
            q[ri["start"]] += shift
            q[ri["end"]] += shift
            q[ri["correlationId"]] = c
            con.execute(rq, q)
    con.commit()
    con.close()
    return out


# --------------------------------------------------------------------------- measuring
READ = {
    "kineto": ("from parsers import kineto as m", "len(m.read_kernels(p))"),
    "kineto-padded": ("from parsers import kineto as m", "len(m.read_kernels(p))"),
    "kineto-before": ("from tests import _kineto_whole_read as m", "len(m.read_kernels(p))"),
    "kineto-padded-before": ("from tests import _kineto_whole_read as m", "len(m.read_kernels(p))"),
    "rocprofv3": ("from parsers import rocprofv3 as m", "len(m.read_kernel_trace(p))"),
    "nsys": ("from parsers import nsys as m", "len(m.read_kernels(p))"),
    "rocprofv3_json": ("from parsers import rocprofv3_json as m", "len(m.read_results(p))"),
    "rocprofv3_json_padded": ("from parsers import rocprofv3_json as m", "len(m.read_results(p))"),
}


def measure(reader: str, path: Path | None, default_ceilings: bool = False) -> dict:
    """Peak RSS and wall time of one read in a fresh subprocess; with ``default_ceilings`` the
    input ceilings are left as a user has them (a refusal is reported, not raised)."""
    imp, call = READ[reader]
    code = (f"import resource, sys, time\n{imp}\nfrom forensics.core.errors import BadInput\np = sys.argv[1]\n"
            f"t = time.perf_counter()\ntry:\n    n = {call} if p else 0\nexcept BadInput as e:\n"
            "    n = 'refused: ' + e.message\nw = time.perf_counter() - t\n"
            "print(w, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, n)")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop(ENV_MAX, None)
    if not default_ceilings:
        env[ENV_MAX] = str(64 << 30)
    out = subprocess.run([sys.executable, "-c", code, str(path) if path else ""], env=env, cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split(maxsplit=2)
    rows = int(out[2]) if out[2].strip().isdigit() else out[2].strip()
    return {"rows": rows, "maxrss_mb": int(out[1]) * 1024 / 1e6, "wall_s": float(out[0])}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--launches", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    ap.add_argument("--readers", nargs="+", default=["kineto", "rocprofv3"], choices=sorted(READ))
    ap.add_argument("--nsys", action="store_true", help="also the nsys reader (needs the corpus)")
    ap.add_argument("--keep", action="store_true", help="keep the synthetic files under benchmarks/_data")
    ap.add_argument("--pad", type=int, default=8, help="python_function events after each launch (kineto-padded)")
    ap.add_argument("--before", action="store_true", help="also the whole-file Kineto reader (main before issue 44)")
    ap.add_argument("--big", type=int, metavar="LAUNCHES", help="only: one Kineto trace of LAUNCHES launches "
                    "(600000: past the old 1 GiB whole-read ceiling) read with the default ceilings")
    args = ap.parse_args(argv)
    if args.big:
        return big(args.big, args.before, args.keep)
    readers = list(args.readers) + (["nsys"] if args.nsys and "nsys" not in args.readers else [])
    if args.before:
        readers += [f"{r}-before" for r in readers if r in ("kineto", "kineto-padded")]
    if "nsys" in readers and not NSYS_SEED.exists():
        print(f"nsys: seed {NSYS_SEED} absent (the corpus), skipped")
        readers.remove("nsys")
    DATA.mkdir(parents=True, exist_ok=True)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f} "
          f"{os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}; Python {platform.python_version()}")
    print("traces: SYNTHETIC, real formats (copies of real launches, renumbered); peak RSS of a fresh "
          "subprocess per read (ru_maxrss)")
    print(f"{'reader':<21} {'launches':>9} {'file MB':>8} {'rows':>9} {'read s':>7} {'peak RSS MB':>11} "
          f"{'baseline MB':>11} {'MB per 1M launches':>18}")
    write = {"kineto": (write_kineto, ".json.gz"), "rocprofv3": (write_rocprof, "_kernel_trace.csv"),
             "nsys": (write_nsys, ".sqlite"),
             "kineto-padded": (lambda n, p: write_kineto(n, p, args.pad), f"_pad{args.pad}.json.gz"),
             "rocprofv3_json": (write_rocprof_json, "_results.json"),
             "rocprofv3_json_padded": (lambda n, out: write_rocprof_json(n, out, pad=4), "_results.json")}
    for reader in readers:
        base = measure(reader, None)["maxrss_mb"]
        for n in args.launches:
            fn, suffix = write[reader.removesuffix("-before")]
            path = DATA / f"synthetic_{reader.removesuffix('-before')}_{n}{suffix}"
            if not path.exists():
                fn(n, path)
            r = measure(reader, path)
            per = (r["maxrss_mb"] - base) / n * 1e6
            print(f"{reader:<21} {n:>9,} {path.stat().st_size / 1e6:>8.1f} {r['rows']:>9,} {r['wall_s']:>7.1f} "
                  f"{r['maxrss_mb']:>11,.0f} {base:>11,.0f} {per:>18,.0f}", flush=True)
            if not args.keep and not (args.before and not reader.endswith("-before")):
                path.unlink()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def big(n: int, before: bool, keep: bool) -> int:
    """One Kineto trace whose text passes the old 1 GiB whole-read ceiling, read (and, with
    ``before``, refused by the whole-file reader) with the default ceilings."""
    DATA.mkdir(parents=True, exist_ok=True)
    path = DATA / f"synthetic_kineto_{n}.json.gz"
    if not path.exists():
        write_kineto(n, path)
    with gzip.open(path, "rb") as g:
        text = sum(len(b) for b in iter(lambda: g.read(64 << 20), b""))
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; load average {os.getloadavg()[0]:.2f}")
    print(f"{path.name}: {path.stat().st_size / 1e6:,.0f} MB gzip, {text / 1e9:.3f} GB of JSON text "
          f"({text / (1 << 30):.2f} GiB), {n:,} launches, {4 * n:,} events (SYNTHETIC, real format)")
    for reader in ["kineto"] + (["kineto-before"] if before else []):
        base = measure(reader, None, True)["maxrss_mb"]
        r = measure(reader, path, True)
        print(f"{reader:<14} default ceilings: {r['rows'] if isinstance(r['rows'], str) else format(r['rows'], ',') + ' launches'}"
              f" in {r['wall_s']:.1f} s, peak RSS {r['maxrss_mb']:,.0f} MB (baseline {base:,.0f} MB)", flush=True)
    if not keep:
        path.unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
