"""oneMKL verbose log (``MKL_VERBOSE=1``, ``MKL_VERBOSE_OUTPUT_FILE=PATH``) -> one row per call.

Real lines (oneMKL 2024.0 in the torch 2.13 CPU wheel; tests/fixtures/cpu/logs/)::

    MKL_VERBOSE oneMKL 2024.0 Update 2 Product build 20240605 for Intel(R) 64 architecture ...
    MKL_VERBOSE SGEMM(N,N,48,64,32,0x7ffd...,0x556a...,48,0x556a...,32,0x7ffd...,0x556a...,48) 69.84us CNR:OFF Dyn:0 FastMM:1 TID:0  NThr:1
    MKL_VERBOSE SGEMV(t,32,64,0x7ffd...,0x55ce...,32,0x55ce...,1,0x7ffd...,0x55ce...,1) 13.79us CNR:OFF Dyn:1 FastMM:1 TID:0  NThr:2

A call line is ``MKL_VERBOSE <ROUTINE>(<args>) <time><unit> <KEY:VALUE> ...``. The library writes
each line when the call returns, one process per file (the file is appended to, so a second
process writing the same file adds its own header line). There is no timestamp and no OS thread
id (``TID`` is the OpenMP thread number of the caller, ``NThr`` the threads the call may use):
attributing a line to a site occurrence needs the byte offset of the line, which
:func:`read_log` keeps (``offset``/``end_offset``), against the file size the probe recorded at
the occurrence's start and end.

BLAS argument lists follow the Fortran interface: ``?GEMM(transa, transb, m, n, k, alpha, a, lda,
b, ldb, beta, c, ldc)`` and ``?GEMV(trans, m, n, alpha, a, lda, x, incx, beta, y, incy)``; m, n, k
are column-major (cuBLAS's convention). Other routines keep their arguments in ``args``.

Pure: no torch import. A malformed ``MKL_VERBOSE`` line is :class:`~forensics.core.errors.BadInput`
naming file:line; a cut last line (the writer was killed) is dropped and noted.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from os import PathLike
from pathlib import Path
from typing import Any

import pandas as pd

from forensics.core.errors import BadInput

from ._text import iter_line_chunks, preview

WHAT = "oneMKL verbose log (MKL_VERBOSE)"
PREFIX = "MKL_VERBOSE "

CALL_RE = re.compile(r"^MKL_VERBOSE (?P<routine>[A-Za-z_][A-Za-z0-9_]*)\((?P<args>[^()]*)\)\s+"
                     r"(?P<time>[0-9]+(?:\.[0-9]+)?)(?P<unit>ns|us|ms|s)\b(?P<rest>.*)$")
KV_RE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9_]*):(?P<value>\S*)$")
VERSION_RE = re.compile(r"(?:oneMKL|Intel\(R\) (?:oneAPI )?(?:Math Kernel Library|MKL))\s+(?:Version\s+)?"
                        r"(?P<version>\d+(?:\.\d+)*(?: Update \d+)?)")
UNIT_NS = {"ns": Decimal(1), "us": Decimal(1000), "ms": Decimal(1_000_000), "s": Decimal(1_000_000_000)}
#: BLAS precision letter -> element type (column names follow the cuBLASLt call frame: a_type ...).
PRECISION = {"S": "f32", "D": "f64", "C": "c64", "Z": "c128"}

COLUMNS: dict[str, str] = {
    "line": "Int64",  # 1-based line number in the file
    "offset": "Int64",  # byte offset of the line's first byte
    "end_offset": "Int64",  # byte offset just past the line's newline
    "routine": "string",  # SGEMM, DGEMM, SGEMV, GEMM_BF16BF16F32, ...
    "family": "string",  # gemm | gemv | other (BLAS level from the routine name)
    "a_type": "string",  # f32 for S*, f64 for D*, ... (None when the routine does not say)
    "transa": "string",  # N | T | C (upper-cased; GEMV's trans goes here)
    "transb": "string",
    "m": "Int64",
    "n": "Int64",
    "k": "Int64",
    "lda": "Int64",
    "ldb": "Int64",
    "ldc": "Int64",
    "duration_ns": "Int64",  # the call's time as printed, in ns
    "cnr": "string",  # conditional numerical reproducibility mode (CNR:OFF, COMPATIBLE, AVX2, AUTO...)
    "dyn": "Int64",  # MKL_DYNAMIC in effect
    "fastmm": "Int64",
    "tid": "Int64",  # OpenMP thread number of the caller (not an OS thread id)
    "nthr": "Int64",  # threads the call may use
    "args": "object",  # the raw argument list (strings)
    "extra": "object",  # other KEY:VALUE fields, by name
    "mkl_version": "string",  # from the last header line before the call
    "writer": "Int64",  # how many header lines precede the call (1 = the first process that wrote the file)
    "raw": "string",
}


@dataclass
class MklLog:
    """One parsed file: ``calls`` (COLUMNS), header facts and notes on anything dropped."""

    path: Path
    calls: pd.DataFrame
    versions: list[str] = field(default_factory=list)  # one per header line (per process that wrote the file)
    headers: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if re.fullmatch(r"-?\d+", text) else None


def _family(routine: str) -> str:
    r = routine.upper()
    if "GEMM" in r:
        return "gemm"
    if "GEMV" in r:
        return "gemv"
    return "other"


def _blas_fields(routine: str, args: list[str]) -> dict[str, Any]:
    """m, n, k, transposes and leading dimensions of the GEMM / GEMV argument lists."""
    out: dict[str, Any] = {}
    r = routine.upper()
    if r[:1] in PRECISION and r[1:] in ("GEMM", "GEMV", "GEMM3M", "GEMMT"):
        out["a_type"] = PRECISION[r[0]]
    elif r.startswith("GEMM_") and "BF16" in r:
        out["a_type"] = "bf16"
    fam = _family(r)
    if fam == "gemm" and len(args) >= 13 and r.endswith("GEMM"):
        out.update(transa=args[0].strip().upper(), transb=args[1].strip().upper(), m=_int(args[2]), n=_int(args[3]),
                   k=_int(args[4]), lda=_int(args[7]), ldb=_int(args[9]), ldc=_int(args[12]))
    elif fam == "gemv" and len(args) >= 11:
        out.update(transa=args[0].strip().upper(), m=_int(args[1]), n=_int(args[2]), lda=_int(args[5]))
    return out


def parse_call(text: str) -> dict[str, Any] | None:
    """One ``MKL_VERBOSE ROUTINE(...) time KEY:VALUE...`` line -> fields; None when it is not a call line."""
    m = CALL_RE.match(text)
    if not m:
        return None
    routine = m.group("routine")
    args = m.group("args").split(",") if m.group("args") else []
    try:
        duration = int((Decimal(m.group("time")) * UNIT_NS[m.group("unit")]).to_integral_value())
    except InvalidOperation:
        return None
    row: dict[str, Any] = {"routine": routine, "family": _family(routine), "args": args, "duration_ns": duration}
    row.update(_blas_fields(routine, args))
    extra: dict[str, str] = {}
    for tok in m.group("rest").split():
        kv = KV_RE.match(tok)
        if not kv:
            raise ValueError(f"field {tok!r} is not KEY:VALUE")
        key, value = kv.group("key"), kv.group("value")
        low = key.lower()
        if low == "cnr":
            row["cnr"] = value
        elif low in ("dyn", "fastmm", "tid", "nthr"):
            row[low] = _int(value)
            if row[low] is None:
                raise ValueError(f"{key}:{value!r} is not an integer")
        else:
            extra[key] = value
    row["extra"] = extra
    return row


def read_log(path: str | PathLike[str]) -> MklLog:
    """Parse an oneMKL verbose file: every call line with its byte offsets; header lines as facts."""
    p = Path(path)
    rows: list[dict[str, Any]] = []
    versions: list[str] = []
    headers: list[str] = []
    notes: list[str] = []
    offset = 0
    for first, lines, cut_tail in iter_line_chunks(p, WHAT):
        for i, text in enumerate(lines):
            lineno = first + i
            nbytes = len(text.encode("utf-8"))
            start, end = offset, offset + nbytes + 1
            offset = end
            last_cut = cut_tail and i == len(lines) - 1
            if not text.strip():
                continue
            if not text.startswith(PREFIX):
                if last_cut:
                    notes.append(f"{p}:{lineno}: cut last line dropped (the writer stopped mid-line): {preview(text)}")
                    continue
                raise BadInput(p, f"not an oneMKL verbose line (expected 'MKL_VERBOSE ...'): {preview(text)}", lineno)
            try:
                row = parse_call(text)
            except ValueError as e:
                if last_cut:
                    notes.append(f"{p}:{lineno}: cut last line dropped: {preview(text)}")
                    continue
                raise BadInput(p, f"malformed oneMKL call line: {e}: {preview(text)}", lineno) from None
            if row is None:
                body = text[len(PREFIX):]
                first_token = body.split(" ", 1)[0]
                if "(" in first_token:
                    if last_cut:
                        notes.append(f"{p}:{lineno}: cut last line dropped (the writer stopped mid-line): {preview(text)}")
                        continue
                    raise BadInput(p, f"malformed oneMKL call line (expected ROUTINE(args) TIME KEY:VALUE...): "
                                      f"{preview(text)}", lineno)
                if body.startswith("WARNING"):
                    notes.append(f"{p}:{lineno}: oneMKL says: {body}")
                    continue
                headers.append(body)
                v = VERSION_RE.search(body)
                versions.append(v.group("version") if v else preview(body))
                continue
            if last_cut:
                notes.append(f"{p}:{lineno}: last line has no newline (kept: it parses whole)")
                end -= 1
            row.update(line=lineno, offset=start, end_offset=end, raw=text,
                       mkl_version=versions[-1] if versions else None, writer=len(headers))
            rows.append(row)
    if not rows and not headers:
        raise BadInput(p, f"no {WHAT} lines")
    df = pd.DataFrame(rows)
    for col, dtype in COLUMNS.items():
        if col not in df.columns:
            df[col] = pd.Series([None] * len(df), dtype="object")
        if dtype != "object":
            df[col] = df[col].astype(dtype)
    return MklLog(p, df[list(COLUMNS)], versions, headers, notes)


def read_calls(path: str | PathLike[str]) -> pd.DataFrame:
    """The call frame of :func:`read_log` (the instrument registry's reader); what was dropped is in
    ``attrs["problems"]`` and the library version in ``attrs["versions"]``."""
    log = read_log(path)
    df = log.calls.copy()
    df.attrs["problems"] = list(log.notes)
    df.attrs["versions"] = list(log.versions)
    return df
