"""What a file in a capture is, from its content: magic bytes, headers, JSON keys, SQLite tables.

Each instrument module says what its files look like: a binary form (``Instrument.content``: ncu's
``NVR`` magic, an nsys report's title, the tables of nsys's SQLite export) or a text log's line
(``Instrument.line_form``), asked in registry order; the JSON forms (Kineto, the CPU probe's
trace, our own JSON lines files) and what is positively no instrument's (`nsys stats` reports,
ncu's console output, capture metadata) are written here. A file's name is a hint only:
``report1.sqlite`` is an nsys export because it holds nsys's tables, ``cublasLt.log``,
``log.cublaslt`` and ``cublas.log`` are library logs because their lines are, and
``sampled_rank-0.json.gz`` is a Kineto trace because its JSON says so. The name decides only between
instruments whose content is the same format (a Chrome trace from the CPU probe, ``torchprof*``,
vs a Kineto trace of a CUDA run) and for our own context files.

:func:`recognise` reads at most :data:`HEAD` bytes of a file (decompressed for gzip), and for SQLite
the table list; it never reads a whole file, but for a gzipped SQLite file (an ``.rpd.gz``), whose table
list can lie anywhere in it: that is decompressed whole, at most :data:`GZ_SQLITE` bytes. It returns the instrument (a name of
:mod:`forensics.instruments`) and what was seen, or ``None`` and why the file is not one (said in
``forensics analyze`` output and analysis.json as ``not recognised: why``).
"""
from __future__ import annotations

import fnmatch
import json
import os
import re
import sqlite3
import stat
import tempfile
import zlib
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from forensics import instruments as registry
from forensics.core.errors import ForensicsError
from forensics.instruments.base import Head
from forensics.core.formats import optrace as optrace_format
from forensics.core.formats import sites as sites_format
from parsers._rocm_db import gunzip_to  # the bounded decompression the AMD database readers use

#: Bytes of a file (after gzip decompression) looked at to recognise it.
HEAD = 64 << 10
#: A gzipped SQLite file is decompressed whole (its table list can lie anywhere) up to this many bytes.
GZ_SQLITE = 1 << 30

#: Files a capture holds that are its own metadata, read by other stages (never instrument output).
METADATA = {
    "manifest.yaml": "the capture's manifest",
    "summary.json": "a campaign summary (read as the manifest)",
    "probe.json": "the probe configuration of the arm (written by forensics kernel)",
    ".forensics-claim": "forensics' claim on the folder",
}


@dataclass(frozen=True)
class Recognised:
    """What a file is: ``instrument`` (None: not an instrument file) and what was seen, or why not."""

    instrument: str | None
    why: str
    #: For ``instrument`` None: the content is positively something else (an `nsys stats` report, ncu's
    #: console output, capture metadata), so a name that looks like an instrument's changes nothing.
    known: bool = False


_NSYS_STATS_CSV = re.compile(
    rb"^(?:Time \(%\),Total Time \([a-z]+\),Instances|Start \([a-z]+\),Duration \([a-z]+\),CorrId"
    rb"|API Start \([a-z]+\),API Dur|NVTX Range,Style,PID|Start \([a-z]+\),Duration \([a-z]+\),Name,Result)", re.M)
_NSYS_STATS_TEXT = re.compile(rb"^\s*\*\* [^\n]*\((?:cuda|nvtx|osrt|um)_[a-z_]+\):\s*$|^\s*Time \(%\)\s+Total Time", re.M)
_NCU_CONSOLE = re.compile(rb"^==ERROR==[^\n]*|^==PROF==[^\n]*", re.M)
_NSYS_STATS_REPORT = re.compile(rb"\((cuda_[a-z_]+|nvtx_[a-z_]+|osrt_[a-z_]+|um_[a-z_]+)\)")

#: Header start -> the `nsys stats` report script that prints it (its SQL aliases as column names).
_NSYS_STATS_KINDS = ((b"Time (%)", "a summary such as cuda_gpu_kern_sum"), (b"API Start", "cuda_kern_exec_trace"),
                     (b"NVTX Range", "nvtx_kern_sum"), (b"Start (ns),Duration (ns),CorrId", "cuda_gpu_trace"),
                     (b"Start (ns),Duration (ns),Name,Result", "cuda_api_trace"))
_NSYS_STATS_WHY = ("an `nsys stats` report ({what}): summaries or a flat table printed from an nsys report, with no "
                   "NVTX range and no correlation to site occurrences, so its rows cannot be counted per scope: "
                   "keep the report and give its SQLite export (`nsys export --type sqlite REPORT.nsys-rep`)")


def _name_hint(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def _head(path: Path) -> tuple[bytes, bool]:
    """(first HEAD bytes, decompressed from gzip?)."""
    with open(path, "rb") as f:
        raw = f.read(HEAD)
    if raw[:2] == b"\x1f\x8b":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out = b""
        with open(path, "rb") as f:
            while len(out) < HEAD:
                chunk = f.read(HEAD)
                if not chunk:
                    break
                try:
                    out += d.decompress(chunk, HEAD - len(out))
                except zlib.error:
                    break
                if d.eof:
                    break
        return out, True
    return raw, False


def _table_names(db: Path, immutable: bool) -> set[str]:
    uri = Path(os.path.abspath(db)).as_uri() + ("?mode=ro&immutable=1" if immutable else "?mode=ro")
    with closing(sqlite3.connect(uri, uri=True)) as c:
        c.text_factory = lambda b: b.decode("utf-8", errors="replace")  # a flipped byte in a name: still read
        return {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _sqlite(path: Path, head: bytes, gz: bool = False) -> Recognised:
    try:
        if gz:  # a gzipped database (an .rpd.gz): its schema may sit anywhere, so the whole file, bounded
            with tempfile.TemporaryDirectory(prefix="forensics-gz-") as tmp:
                whole = Path(tmp) / "db.sqlite"
                try:
                    gunzip_to(path, whole, GZ_SQLITE)
                except ForensicsError as e:
                    return Recognised(None, f"a gzipped SQLite file: {getattr(e, 'message', e)}")
                tables = _table_names(whole, True)
        else:
            tables = _table_names(path, True)
    except (sqlite3.DatabaseError, ValueError) as e:  # ValueError: UnicodeDecodeError of a damaged schema
        why = e if isinstance(e, sqlite3.DatabaseError) else f"{type(e).__name__}: its schema does not parse"
        return Recognised(None, f"an SQLite file{' (gzip)' if gz else ''} that does not open ({why}): corrupt or truncated")
    seen = _content(Head(path.name, head, gz, frozenset(tables)))  # nsys's export, rocpd, .rpd: by their tables
    if seen is not None:
        return seen
    shown = ", ".join(sorted(tables)[:6]) or "no tables"
    return Recognised(None, "an SQLite database without Nsight Systems tables (StringIds, CUPTI_ACTIVITY_KIND_*), "
                            "rocprofv3's rocpd tables (rocpd_kernel_dispatch, rocpd_info_kernel_symbol) or a "
                            f"rocmProfileData .rpd's (rocpd_op, rocpd_api, rocpd_kernelapi); it has {shown}: "
                            "no instrument's database")


def _content(head: Head) -> Recognised | None:
    """The first instrument whose binary form (``Instrument.content``) the file has."""
    for inst in registry.content_forms():
        why = inst.content(head)
        if why is not None:
            return Recognised(inst.name, why)
    return None


def _json_kind(path: Path, head: bytes, gz: bool) -> Recognised | None:
    text = head.lstrip()
    name = path.name
    if text.startswith(b"{") and (b'"traceEvents"' in text or (b'"schemaVersion"' in text and b'"deviceProperties"' in text)
                                  or b'"displayTimeUnit"' in text):
        if _name_hint(name, ("torchprof*",)):
            return Recognised("torch_profiler", "Chrome trace JSON (traceEvents) of the CPU probe's torch.profiler")
        return Recognised("kineto", "Chrome trace JSON" + (" (gzip)" if gz else "") + " with "
                          + ("traceEvents" if b'"traceEvents"' in text else "schemaVersion/deviceProperties")
                          + ": a PyTorch profiler (Kineto) trace")
    first = text.split(b"\n", 1)[0].strip()
    if first.startswith(b"{"):
        try:
            obj = json.loads(first)
        except (ValueError, RecursionError):  # a JSON nested too deep is not ours
            obj = None
        if isinstance(obj, dict):
            schema = obj.get("schema") if isinstance(obj.get("schema"), str) else ""
            own = {sites_format.SCHEMA: "sites", "forensics.cupti": "cupti", "forensics.cpuprobe": "cpuprobe",
                   optrace_format.SCHEMA: "optrace"}
            if schema in own:
                for line in text.split(b"\n")[1:64]:
                    try:
                        rec = json.loads(line)
                    except (ValueError, RecursionError):  # a JSON nested too deep is not ours
                        continue
                    if isinstance(rec, dict) and rec.get("event") == "unavailable" and schema == "forensics.cupti":
                        return Recognised(None, "the CUPTI probe's own record that CUPTI could not collect here ("
                                          f"{str(rec.get('reason') or rec.get('message') or 'no reason given')[:200]}): "
                                          "no activity record to count", known=True)
                return Recognised(own[schema], f"JSON lines with a {schema} header")
            if "kind_name" in obj and "kind" in obj:
                return Recognised("cupti", "JSON lines of CUPTI activity records (kind, kind_name)")
            if _name_hint(name, ("rank_*.jsonl", "trace*.jsonl")):
                return Recognised("optrace", "JSON lines (an op trace by its name)")
            if name == "environment.json" or (not gz and {"python", "torch"} <= set(obj)):
                return Recognised("environment", "JSON object with the captured environment")
            if name in METADATA:
                return Recognised(None, METADATA[name], known=True)
            if "event" in obj and _name_hint(name, ("sites*.jsonl", "*.sites.jsonl")):
                return Recognised("sites", "JSON lines of site events (no header; a sites file by its name)")
            keys = ", ".join(list(obj)[:6])
            return Recognised(None, f"JSON whose first object (keys {keys}) is no instrument's: no traceEvents or "
                                    "schemaVersion (Kineto), no forensics header, no CUPTI kind_name")
    return None


def recognise(path: str | os.PathLike[str]) -> Recognised:
    """What ``path`` is, from its content (its name a hint only between formats that look alike)."""
    path = Path(path)
    name = path.name
    try:
        st = os.stat(path)
    except OSError as e:
        return Recognised(None, f"cannot be read: {e.strerror}")
    if not stat.S_ISREG(st.st_mode):
        return Recognised(None, "not a regular file")
    if name in ("manifest.yaml", ".forensics-claim"):
        return Recognised(None, METADATA[name], known=True)
    if st.st_size == 0:
        return Recognised(None, "an empty file")
    try:
        head, gz = _head(path)
    except OSError as e:
        return Recognised(None, f"cannot be read: {e.strerror}")
    if head.startswith(b"SQLite format 3\x00"):
        return _sqlite(path, head, gz)
    seen = _content(Head(name, head, gz, path=path))  # magic bytes: ncu's NVR, an nsys report's title
    if seen is not None:
        return seen
    if gz and not head:
        return Recognised(None, "a gzip file that does not decompress (corrupt or truncated)")
    kind = _json_kind(path, head, gz)
    if kind is not None:
        return kind
    if _name_hint(name, ("*.pftrace", "*.pftrace.gz")):  # Perfetto protobuf: no magic to tell it by
        return Recognised(None, "a file named as rocprofv3's Perfetto output (.pftrace): not read; its records are in "
                                "rocprofv3's csv, json or rocpd output (--output-format csv,json,rocpd)", known=True)
    if b"\x00" in head[:4096]:
        if _name_hint(name, ("*.nsys-rep", "*.qdrep")):
            return Recognised("nsys_rep", "a binary file named as an Nsight Systems report; run `nsys export --type sqlite`")
        return Recognised(None, f"a binary file of no known instrument format (first bytes {head[:8].hex()})")
    for inst, form in registry.line_forms():  # text logs: each instrument's own line form
        if form.search(head):
            return Recognised(inst.name, inst.line_why)
    if _NSYS_STATS_CSV.search(head) or _NSYS_STATS_TEXT.search(head):
        m = _NSYS_STATS_REPORT.search(head)
        csv_head = _NSYS_STATS_CSV.search(head)
        what = m.group(1).decode() if m else (
            "CSV, " + next((name for start, name in _NSYS_STATS_KINDS if csv_head.group(0).startswith(start)), "a report")
            if csv_head else "text")
        return Recognised(None, _NSYS_STATS_WHY.format(what=what), known=True)
    m = _NCU_CONSOLE.search(head)
    if m:
        return Recognised(None, "Nsight Compute console output with no CSV export in it ("
                          + m.group(0).decode("utf-8", "replace").strip()[:160] + ")", known=True)
    if name in METADATA:
        return Recognised(None, METADATA[name], known=True)
    return Recognised(None, "text with no instrument's line form (no [cublasLt] line, no 'I! cuBLAS' record, "
                            "no onednn_verbose or MKL_VERBOSE line, no ncu CSV header, no [HIPBLASLT] or rocblas_ "
                            "line, no rocprofv3 CSV header) in its first "
                            f"{min(len(head), HEAD) // 1024 or 1} KiB")
