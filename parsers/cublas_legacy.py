"""Legacy cuBLAS API log (``CUBLAS_LOGINFO_DBG=1``, ``CUBLAS_LOGDEST_DBG``) -> one row per call.

Multi-line records (cuBLAS docs, cublasLoggerConfigure(); real cuBLAS 13.4.1 output in tests/data/cublaslt/)::

    I! cuBLAS (v13.4.1) function cublasStatus_t cublasSgemm_v2(cublasHandle_t, ...) called:
    i!  transa: type=cublasOperation_t; val=CUBLAS_OP_T(1)
    i!  m: type=int; val=2
    i! Time: 2026-09-11T18:11:38 elapsed from start 0.016667 minutes or 1.000000 seconds
    i!Process=10673; Thread=...; GPU=0; Handle=POINTER (IN HEX:0x0x1f9560f0); StreamId=...; MathMode=...
    i! COMPILED WITH: GNU GCC/G++ / 8.5.0 20210514 (Red Hat 8.5.0-26)

Pointers print with a doubled prefix (``0x0x1f9560f0``) or ``0x(nil)``; they are normalised to
``0x1f9560f0`` / ``0x0``. The log has no Lt algo or tile: join it with the cuBLASLt log.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

import pandas as pd

from forensics.core.errors import BadInput

from ._text import iter_line_chunks, preview

WHAT = "legacy cuBLAS log"

HEADER_RE = re.compile(
    r"I! cuBLAS \(v(?P<version>[^)]*)\) function (?P<signature>(?P<ret>\S+) (?P<function>\w+)\((?P<params>.*)\)) called:?\s*"
)
ARG_RE = re.compile(r"i!\s+(?P<name>[^:\s][^:]*?):\s*type=(?P<type>.*?);\s*val=(?P<val>.*)")
TIME_RE = re.compile(
    r"i! Time:\s*(?P<time>\S+)(?:\s+elapsed from start\s+(?P<minutes>[\d.]+) minutes or (?P<seconds>[\d.]+) seconds)?.*"
)
POINTER_RE = re.compile(r"POINTER \(IN HEX:(?:0x)?(?P<hex>0x[0-9a-fA-F]+|\(nil\)|[0-9a-fA-F]+)\)")
ENUM_RE = re.compile(r"(?P<name>[A-Za-z_][\w]*)\((?P<num>-?\d+)\)")
#: Entry points that launch GEMM-family kernels (gemm, gemv, dot); cublasCreate, cublasSetStream,
#: cublasDestroy ... launch nothing and are not matmul calls.
MATMUL_FUNCTION_RE = re.compile(r"cublas\w*?(?:gemm|gemv|dot)\w*", re.I)

#: One row per call. Types/algo are present only for the *Ex entry points.
COLUMNS: dict[str, str] = {
    "function": "string",  # cublasSgemm_v2, cublasGemmEx, ...
    "version": "string",  # "13.4.1"
    "line": "Int64",  # line of the "I! cuBLAS" header
    "transa": "string",  # N | T | C
    "transb": "string",
    "m": "Int64",
    "n": "Int64",
    "k": "Int64",
    "lda": "Int64",
    "ldb": "Int64",
    "ldc": "Int64",
    "a_type": "string",  # Atype (CUDA_R_16F, ...)
    "b_type": "string",
    "c_type": "string",
    "compute_type": "string",
    "algo": "string",  # cublasGemmAlgo_t (CUBLAS_GEMM_DEFAULT, ...)
    "batch_count": "Int64",
    "process": "Int64",
    "thread": "string",  # large integer, kept as text
    "gpu": "Int64",
    "handle": "string",
    "stream": "string",  # normalised pointer, "0x0" for the default stream
    "stream_kind": "string",  # "defaultStream", "non-blocking", ... (the trailing parenthesis)
    "math_mode": "string",
    "time": "string",  # "2026-09-11T18:11:38"
    "elapsed_s": "Float64",
    "compiled_with": "string",
    "signature": "string",
    "args": "object",  # {name: normalised value} for every argument and context field
    "arg_types": "object",  # {name: declared type}
}

_INT_ARGS = {"m", "n", "k", "lda", "ldb", "ldc", "batchCount"}
_ARG_COLUMNS = {
    "transa": "transa", "transb": "transb", "m": "m", "n": "n", "k": "k", "lda": "lda", "ldb": "ldb",
    "ldc": "ldc", "Atype": "a_type", "Btype": "b_type", "Ctype": "c_type", "computeType": "compute_type",
    "algo": "algo", "batchCount": "batch_count",
}


@dataclass
class _Record:
    row: dict[str, Any]
    args: dict[str, str] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    has_context: bool = False


def pointer(value: str) -> str:
    """``POINTER (IN HEX:0x0x1f9560f0)`` -> ``0x1f9560f0``; ``(nil)`` -> ``0x0``; other text unchanged."""
    m = POINTER_RE.search(value)
    if not m:
        return value.strip()
    h = m["hex"]
    if h == "(nil)":
        return "0x0"
    return h if h.startswith("0x") else "0x" + h


def enum_name(value: str) -> str:
    """``CUBLAS_OP_T(1)`` -> ``CUBLAS_OP_T``; other text unchanged."""
    m = ENUM_RE.fullmatch(value.strip())
    return m["name"] if m else value.strip()


def _op_letter(value: str) -> str:
    return enum_name(value).rsplit("_", 1)[-1].upper()


def read_log(path: str | PathLike[str], tolerate_truncated_tail: bool = False) -> pd.DataFrame:
    """Parse a legacy cuBLAS log: one row per call (``COLUMNS``); problems in ``df.attrs["problems"]``.

    ``BadInput`` (file and line) for an empty, binary or foreign file, an argument line outside a
    call, or a malformed line inside one. A file cut mid-line, or whose last call lacks its
    context line, is an error unless ``tolerate_truncated_tail`` (the incomplete call is dropped).
    """
    src = str(path)
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    current: _Record | None = None
    skipped, first_skipped, headers = 0, None, 0
    any_lines = False  # some call of the file has argument or context lines
    last_line = 0

    def close(rec: _Record | None) -> None:
        if rec is None:
            return
        if not rec.has_context:
            problems.append(f"line {rec.row['line']}: call {rec.row['function']} has no Process= context line")
        rec.row["args"], rec.row["arg_types"] = rec.args, rec.types
        rows.append(rec.row)

    for first, lines, cut_tail in iter_line_chunks(src, WHAT):
        last = len(lines) - 1
        for i, raw in enumerate(lines):
            lineno = first + i
            last_line = lineno
            if cut_tail and i == last:
                msg = f"last line is cut short (no newline at end of file; truncated log?): {preview(raw)}"
                if not tolerate_truncated_tail:
                    raise BadInput(src, msg, line=lineno)
                problems.append(f"line {lineno}: {msg}; dropped with its call")
                current = None
                continue
            if raw.startswith("I! "):
                m = HEADER_RE.fullmatch(raw)
                if m is None:
                    raise BadInput(src, f"malformed call header: {preview(raw, 80)}", line=lineno)
                close(current)
                headers += 1
                current = _Record({"function": m["function"], "version": m["version"], "line": lineno,
                                   "signature": m["signature"]})
            elif raw.startswith("i!"):
                any_lines = True
                if current is None:
                    raise BadInput(src, f"argument line outside a call (no 'I! cuBLAS' header before it): {preview(raw)}", line=lineno)
                _add_line(src, lineno, raw, current)
            elif raw.strip():
                if raw.lstrip().startswith("[") and "[cublasLt]" in raw and not headers:
                    raise BadInput(src, "this is a cuBLASLt log (CUBLASLT_LOG_LEVEL); read it with parsers.cublaslt", line=lineno)
                skipped += 1
                first_skipped = first_skipped or lineno
    header_only = current is not None and not current.args and not current.has_context and not any_lines
    if header_only:  # cuBLAS 10.2 style: the logger printed headers only, for every call of the file
        problems.append(f"line {current.row['line']}: {current.row['function']}: header only "
                        "(no argument or context lines in this log)")
        current.has_context = True
    if current is not None and not current.has_context:
        msg = f"last call ({current.row['function']} at line {current.row['line']}) ends without its Process= context line; truncated log?"
        if not tolerate_truncated_tail:
            raise BadInput(src, msg, line=last_line)
        problems.append(msg + " dropped")
        current = None
    close(current)
    if not headers:
        raise BadInput(src, f"no 'I! cuBLAS (v...) function ... called:' header found; not a {WHAT}?",
                       line=first_skipped or 1)
    if skipped:
        problems.append(f"{skipped} lines are not legacy cuBLAS log lines (first at line {first_skipped}); skipped")
    df = pd.DataFrame({c: pd.Series([r.get(c) for r in rows], dtype=t) for c, t in COLUMNS.items()})
    df.attrs["problems"] = problems
    df.attrs["path"] = src
    return df


def is_matmul_call(function: str | None) -> bool:
    """True for an entry point that launches GEMM-family kernels (``cublasSgemm_v2``, ``cublasGemmEx``...)."""
    return isinstance(function, str) and MATMUL_FUNCTION_RE.fullmatch(function) is not None


def read_matmul_calls(path: str | PathLike[str]) -> pd.DataFrame:
    """The GEMM-family calls of a legacy log (``read_log`` rows whose function launches a GEMM kernel).

    Other records (``cublasCreate_v2``, ``cublasDestroy_v2``, ``cublasSetStream_v2`` ...) are left
    out and counted in ``attrs["problems"]``'s companion ``attrs["other_calls"]``.
    """
    df = read_log(path)
    keep = df["function"].map(is_matmul_call).astype(bool)
    out = df[keep.to_numpy()].reset_index(drop=True)
    out.attrs.update(df.attrs)
    out.attrs["other_calls"] = int((~keep).sum())
    others = df.loc[~keep.to_numpy(), "function"].value_counts()
    if len(others):  # said, so that a damaged GEMM record never disappears from the count unseen
        listed = ", ".join(f"{name} x{n}" for name, n in others.items())
        out.attrs["problems"] = list(df.attrs.get("problems", [])) + [f"records that are not GEMM calls (not counted): {listed}"]
    out.attrs["losses"] = [p for p in out.attrs.get("problems", []) if "dropped" in p or "skipped" in p]
    out["pid"] = out["process"]
    return out


def _add_line(src: str, lineno: int, raw: str, rec: _Record) -> None:
    """Fold one ``i!`` line (argument, time, context, compiler) into the current call."""
    row = rec.row
    if raw.startswith("i!Process=") or raw.startswith("i! Process="):
        _context(raw.split("!", 1)[1].strip(), rec)
        return
    if raw.startswith("i! Time:"):
        m = TIME_RE.fullmatch(raw)
        if m is None:
            raise BadInput(src, f"malformed Time line: {preview(raw)}", line=lineno)
        row["time"] = m["time"]
        row["elapsed_s"] = float(m["seconds"]) if m["seconds"] else None
        return
    if raw.startswith("i! COMPILED WITH:"):
        row["compiled_with"] = raw.split(":", 1)[1].strip()
        return
    m = ARG_RE.fullmatch(raw)
    if m is None:
        raise BadInput(src, f"malformed argument line (expected 'i!  name: type=T; val=V'): {preview(raw)}", line=lineno)
    name, typ, val = m["name"].strip(), m["type"].strip(), m["val"].strip()
    value = pointer(val) if val.startswith("POINTER") else val
    rec.args[name] = value
    rec.types[name] = typ
    col = _ARG_COLUMNS.get(name)
    if col is None:
        return
    if name in ("transa", "transb"):
        row[col] = _op_letter(value)
    elif name in _INT_ARGS:
        try:
            row[col] = int(value)
        except ValueError:
            raise BadInput(src, f"{name}={value!r} is not an integer", line=lineno) from None
    else:
        row[col] = enum_name(value)


def _context(text: str, rec: _Record) -> None:
    """``Process=1; Thread=2; GPU=0; Handle=...; StreamId=... (defaultStream); MathMode=...``."""
    row = rec.row
    rec.has_context = True
    for part in text.split("; "):
        key, sep, value = part.partition("=")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        rec.args[key] = value
        if key == "Process":
            row["process"] = int(value) if value.isdigit() else None
        elif key == "Thread":
            row["thread"] = value
        elif key == "GPU":
            row["gpu"] = int(value) if value.lstrip("-").isdigit() else None
        elif key == "Handle":
            row["handle"] = pointer(value)
        elif key == "StreamId":
            row["stream"] = pointer(value)
            kind = re.search(r"\)\s*\(([^()]*)\)\s*$", value)
            row["stream_kind"] = kind[1] if kind else None
        elif key == "MathMode":
            row["math_mode"] = value
