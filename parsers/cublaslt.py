"""cuBLASLt API log (``CUBLASLT_LOG_LEVEL`` / ``CUBLASLT_LOG_MASK``) -> pandas frames.

Line grammar (instrument-formats.md §1.2)::

    [<YYYY-MM-DD HH:MM:SS>][cublasLt][<pid>][<Level>][<function>] key=value key=[k=v ...] ...

The timestamp is optional. Each ``[Trace]`` line of a ``cublasLt*Matmul`` function (including
type-encoded aliases such as ``cublasLtSSSMatmul``) is one launched matmul; it becomes one row
of :attr:`CublasLtLog.calls` with the problem descriptor (m, n, k, layout, types, ld) derived
from the column-major matrix descriptors and the algo descriptor. Only non-default fields are
printed by cuBLASLt: an absent ``transa``/``transb`` means ``N``. See docs/parsers/cublaslt.md.
"""
from __future__ import annotations

import gc
from collections import deque
from operator import setitem
import queue
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from itertools import repeat
from os import PathLike
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from forensics.errors import BadInput
from forensics.model import CALL_KEY_COLUMNS

from ._text import Pairs, TokenError, flat_pairs, iter_byte_chunks, iter_line_chunks, preview, spans_array

WHAT = "cuBLASLt log"

#: The line header; the rest of the line (``key=value ...``) starts at ``match.end()``.
HEADER_RE = re.compile(
    r"(?:\[(?P<ts>[^\]\[]*)\])?\[cublasLt\]\[(?P<pid>\d+)\]\[(?P<level>[A-Za-z]+)\]\[(?P<function>[\w.]+)\][ \t]?"
)
MATMUL_FN_RE = re.compile(r"cublasLt(\w*)Matmul")
HEURISTIC_PREFIX = "cublasLtMatmulAlgoGetHeuristic"
#: A line that starts like a cuBLASLt header but may be damaged (checked when HEADER_RE fails).
_LOOKS_LIKE_HEADER = re.compile(r"(?:\[[^\]]*\])?\[cublasLt\b")

#: Columns common to every frame.
COMMON_COLUMNS: dict[str, str] = {
    "line": "Int64",  # 1-based line number in the log
    "pid": "Int64",
    "timestamp": "string",  # as printed ("2023-04-07 04:57:13"); None when the line has none
    "level": "string",  # Trace | Api | Info | Hints | Error | ...
    "function": "string",
}

_MATRICES = ("a", "b", "c", "d")

#: One row per matmul call (``[Trace][cublasLt*Matmul]``).
CALL_COLUMNS: dict[str, str] = {
    **COMMON_COLUMNS,
    "type_hint": "string",  # "SSS" of cublasLtSSSMatmul; None for plain cublasLtMatmul
    "m": "Int64",
    "n": "Int64",
    "k": "Int64",
    "transa": "string",  # N | T | C (absent in the log means N)
    "transb": "string",
    "layout": "string",  # transa + transb, e.g. "NT"
    **{f"{x}_type": "string" for x in _MATRICES},
    **{f"ld{x}": "Int64" for x in _MATRICES},
    **{f"{x}_{d}": "Int64" for x in _MATRICES for d in ("rows", "cols")},
    "batch_count": "Int64",
    **{f"stride_{x}": "Int64" for x in _MATRICES},
    "compute_type": "string",
    "scale_type": "string",
    "epilogue": "string",
    "sm_count_target": "Int64",
    "a_scale_mode": "string",
    "b_scale_mode": "string",
    "algo_id": "Int64",
    "tile": "string",
    "stages": "string",
    "custom_option": "Int64",
    "num_splits_k": "Int64",
    "reduction_scheme": "string",
    "cta_swizzling": "string",
    "cluster_shape": "string",
    "scheduling_mode": "string",
    "inner_shape": "string",
    "workspace_size": "Int64",
    "beta": "string",  # "0", "1", "?" (device pointer / unreadable)
    "out_of_place": "Int64",
    "stream": "string",
    **{f"pointer_{x}": "string" for x in _MATRICES},
    "consistent": "boolean",  # descriptors agree on m, n, k (None when not checkable)
    "extra": "object",  # dict of every other field; nested blocks flattened as "desc.key"
    "raw": "string",
}

#: Algo descriptor columns (what differs when cuBLASLt picks another kernel).
ALGO_COLUMNS = [
    "algo_id", "tile", "stages", "custom_option", "num_splits_k", "reduction_scheme",
    "cta_swizzling", "cluster_shape", "scheduling_mode", "inner_shape",
]

#: ``[Api][cublasLtMatmulAlgoGetHeuristic*]`` queries.
HEURISTIC_COLUMNS: dict[str, str] = {
    **COMMON_COLUMNS,
    **{f"{x}_type": "string" for x in _MATRICES},
    **{f"{x}_{d}": "Int64" for x in _MATRICES for d in ("rows", "cols")},
    **{f"ld{x}": "Int64" for x in _MATRICES},
    "transa": "string",
    "transb": "string",
    "compute_type": "string",
    "scale_type": "string",
    "max_workspace_bytes": "Int64",
    "requested_algo_count": "Int64",
    "preference": "object",  # dict of the preference=[...] block
    "params": "object",  # every field, flattened
    "raw": "string",
}

#: Every other line ([Api], [Info], [Hints], [Error], non-matmul [Trace]).
MESSAGE_COLUMNS: dict[str, str] = {
    **COMMON_COLUMNS,
    "message": "string",  # text after the header
    "params": "object",  # key=value fields when the message tokenizes, else {}
}

# field name in the log -> column
_TOP = {
    "A": "pointer_a", "B": "pointer_b", "C": "pointer_c", "D": "pointer_d",
    "workSpaceSizeInBytes": "workspace_size", "beta": "beta", "outOfPlace": "out_of_place",
    "stream": "stream",
}
_DESC = {"Adesc": "a", "Bdesc": "b", "Cdesc": "c", "Ddesc": "d"}
_MATRIX = {
    "type": "type", "rows": "rows", "cols": "cols", "ld": "ld",
    "batchCount": "batch_count", "stridedBatchOffset": "stride", "batchStride": "stride",
}
_COMPUTE = {
    "computeType": "compute_type", "scaleType": "scale_type", "transa": "transa", "transb": "transb",
    "epilogue": "epilogue", "smCountTarget": "sm_count_target",
    "aScaleMode": "a_scale_mode", "bScaleMode": "b_scale_mode",
}
_ALGO = {
    "algoId": "algo_id", "tile": "tile", "stages": "stages", "customOption": "custom_option",
    "numSplitsK": "num_splits_k", "splitK": "num_splits_k", "splitKNum": "num_splits_k",
    "reductionScheme": "reduction_scheme", "ctaSwizzling": "cta_swizzling", "swizzle": "cta_swizzling",
    "clusterShape": "cluster_shape", "schedulingMode": "scheduling_mode", "innerShape": "inner_shape",
}
_PREF = {"maxWorkspaceSizeinBytes": "max_workspace_bytes", "maxWorkspaceSizeInBytes": "max_workspace_bytes"}
_INT_COLUMNS = {c for c, t in CALL_COLUMNS.items() if t == "Int64"} | {"rows", "cols", "ld", "batch_count", "stride"}

#: Rows per frame chunk (bounded memory while parsing; the frame is concatenated at the end).
ROWS_PER_CHUNK = 100_000


@dataclass
class CublasLtLog:
    """Everything one cuBLASLt log says, as frames (see the ``*_COLUMNS`` contracts)."""

    path: str
    calls: pd.DataFrame
    heuristics: pd.DataFrame
    api: pd.DataFrame
    info: pd.DataFrame
    hints: pd.DataFrame
    errors: pd.DataFrame
    level_counts: dict[str, int] = field(default_factory=dict)  # lines per [Level]
    skipped_lines: int = 0  # lines that are not cuBLASLt log lines (program output on stdout)
    problems: list[str] = field(default_factory=list)  # tolerated damage and notable absences


@dataclass
class _Line:
    """One header-parsed log line."""

    line: int
    ts: str | None
    pid: int
    level: str
    function: str
    rest: str
    raw: str


class _Reader:
    """Streams the classified lines of one log; keeps counts and problems."""

    def __init__(self, path: str | PathLike[str], tolerate_truncated_tail: bool):
        self.path = str(path)
        self.tolerate = tolerate_truncated_tail
        self.level_counts: dict[str, int] = {}
        self.skipped = 0
        self.first_skipped: int | None = None
        self.cut_line: int | None = None
        self.problems: list[str] = []

    def lines(self) -> Iterator[tuple[int, str | None, int, str, str, str, str]]:
        """``(line, timestamp, pid, level, function, rest, raw)`` for every cuBLASLt line."""
        match = HEADER_RE.match
        counts = self.level_counts
        seen = 0
        for first, lines, cut_tail in iter_line_chunks(self.path, WHAT):
            last = len(lines) - 1
            for i, raw in enumerate(lines):
                lineno = first + i
                if cut_tail and i == last:
                    self._cut_tail(lineno, raw)
                    continue
                m = match(raw) if "[cublasLt]" in raw else None
                if m is None:
                    self._foreign(lineno, raw)
                    continue
                seen += 1
                ts, pid, level, function = m.groups()
                rest = raw[m.end():]
                counts[level] = counts.get(level, 0) + 1
                yield lineno, ts, int(pid), level, function, rest, raw
        if not seen:
            self._no_lines()

    def _foreign(self, lineno: int, raw: str) -> None:
        if not raw.strip():
            return
        if _LOOKS_LIKE_HEADER.match(raw.lstrip()):
            raise BadInput(self.path, f"damaged cuBLASLt line header: {preview(raw)}", line=lineno)
        if raw.startswith(("I! cuBLAS", "i! ")):
            raise BadInput(self.path, "this is a legacy cuBLAS log (CUBLAS_LOGINFO_DBG); read it with parsers.cublas_legacy", line=lineno)
        self.skipped += 1
        if self.first_skipped is None:
            self.first_skipped = lineno

    def _cut_tail(self, lineno: int, raw: str) -> None:
        msg = f"last line is cut short (no newline at end of file; truncated log?): {preview(raw)}"
        if not self.tolerate:
            raise BadInput(self.path, msg, line=lineno)
        self.cut_line = lineno
        self.problems.append(f"line {lineno}: {msg}; dropped")

    def _no_lines(self) -> None:
        if self.cut_line is not None and self.first_skipped is None:
            raise BadInput(self.path, "no complete cuBLASLt log line: the only line is cut short", line=self.cut_line)
        where = f" (first other line: {self.first_skipped})" if self.first_skipped else ""
        raise BadInput(self.path, f"no cuBLASLt log line found{where}; not a {WHAT}?", line=self.first_skipped)

    def bad(self, ln: _Line, message: str) -> BadInput:
        return BadInput(self.path, f"{message}: {preview(ln.raw, 80)}", line=ln.line)

    def finish(self) -> None:
        if self.skipped:
            self.problems.append(
                f"{self.skipped} lines are not cuBLASLt log lines (first at line {self.first_skipped}); skipped"
            )


def _op_letter(value: str) -> str:
    """``OP_T`` / ``CUBLAS_OP_T`` / ``T`` -> ``T``."""
    return value.rsplit("_", 1)[-1].upper() if value else "N"


def _to_int(reader: _Reader, ln: _Line, key: str, value: str) -> int:
    try:
        return int(value, 0) if value[:2].lower() == "0x" else int(value)
    except ValueError:
        raise reader.bad(ln, f"{key}={value!r} is not an integer") from None


def _tokens(reader: _Reader, ln: _Line) -> Pairs:
    try:
        return flat_pairs(ln.rest)
    except TokenError as e:
        raise reader.bad(ln, f"column {e.column + len(ln.raw) - len(ln.rest)}: {e}") from None


def _call_row(reader: _Reader, ln: _Line) -> dict[str, Any]:
    """Parse one ``[Trace][cublasLt*Matmul]`` line into a row dict (CALL_COLUMNS)."""
    row: dict[str, Any] = {
        "line": ln.line, "pid": ln.pid, "timestamp": ln.ts, "level": ln.level, "function": ln.function,
        "type_hint": MATMUL_FN_RE.fullmatch(ln.function)[1] or None,
    }
    extra: dict[str, str] = {}
    for key, value in _tokens(reader, ln):
        if isinstance(value, list):
            x = _DESC.get(key)
            if x is not None:
                _matrix(reader, ln, row, extra, key, x, value)
            elif key == "computeDesc":
                _mapped(reader, ln, row, extra, key, value, _COMPUTE)
            elif key == "algo":
                _mapped(reader, ln, row, extra, key, value, _ALGO)
            else:
                _flatten_into(extra, key, value)
        else:
            col = _TOP.get(key)
            if col is None:
                _put(extra, key, value)
            elif col in _INT_COLUMNS:
                row[col] = _to_int(reader, ln, key, value)
            else:
                row[col] = value
    _derive(row)
    row["extra"] = extra
    row["raw"] = ln.raw
    return row


def _matrix(reader: _Reader, ln: _Line, row: dict, extra: dict, key: str, x: str, pairs: Pairs) -> None:
    for k, v in pairs:
        f = _MATRIX.get(k)
        if f is None or isinstance(v, list):
            _flatten_into(extra, f"{key}.{k}", v)
        elif f == "type":
            row[f"{x}_type"] = v
        elif f == "ld":
            row[f"ld{x}"] = _to_int(reader, ln, f"{key}.{k}", v)
        elif f == "batch_count":
            n = _to_int(reader, ln, f"{key}.{k}", v)
            row.setdefault("batch_count", n)
            if n != row["batch_count"]:
                row["consistent"] = False
                extra[f"{key}.{k}"] = v
        elif f == "stride":
            row[f"stride_{x}"] = _to_int(reader, ln, f"{key}.{k}", v)
        else:
            row[f"{x}_{f}"] = _to_int(reader, ln, f"{key}.{k}", v)


def _mapped(reader: _Reader, ln: _Line, row: dict, extra: dict, key: str, pairs: Pairs, names: dict[str, str]) -> None:
    for k, v in pairs:
        col = names.get(k)
        if col is None or isinstance(v, list):
            _flatten_into(extra, f"{key}.{k}", v)
        elif col in ("transa", "transb"):
            row[col] = _op_letter(v)
        elif col in _INT_COLUMNS:
            row[col] = _to_int(reader, ln, f"{key}.{k}", v)
        else:
            row[col] = v


def _put(extra: dict[str, str], key: str, value: str) -> None:
    n, name = 2, key
    while name in extra:
        name = f"{key}#{n}"
        n += 1
    extra[name] = value


def _flatten_into(extra: dict[str, str], key: str, value: str | Pairs) -> None:
    if isinstance(value, list):
        if not value:
            _put(extra, key, "[]")
        for k, v in value:
            _flatten_into(extra, f"{key}.{k}", v)
    else:
        _put(extra, key, value)


def _flat_dict(pairs: Pairs) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in pairs:
        _flatten_into(out, k, v)
    return out


def _derive(row: dict[str, Any]) -> None:
    """Fill transa/transb/layout, m/n/k and ``consistent`` from column-major descriptors.

    op(A) is m x k, op(B) is k x n, C and D are m x n. Stored A is m x k when transa is N and
    k x m otherwise (likewise B). m and n come from C (D when C has no descriptor).
    """
    ta = row.setdefault("transa", "N")
    tb = row.setdefault("transb", "N")
    row["layout"] = ta + tb
    out = "c" if row.get("c_rows") is not None else "d"
    m, n = row.get(f"{out}_rows"), row.get(f"{out}_cols")
    a_rows, a_cols, b_rows, b_cols = (row.get(c) for c in ("a_rows", "a_cols", "b_rows", "b_cols"))
    a_m, a_k = (a_rows, a_cols) if ta == "N" else (a_cols, a_rows)
    b_k, b_n = (b_rows, b_cols) if tb == "N" else (b_cols, b_rows)
    row["m"], row["n"] = m, n
    row["k"] = a_k if a_k is not None else b_k
    checks = [(a_m, m), (a_k, b_k), (b_n, n)]
    if row.get("c_rows") is not None and row.get("d_rows") is not None:
        checks += [(row["c_rows"], row["d_rows"]), (row.get("c_cols"), row.get("d_cols"))]
    if any(x is None or y is None for x, y in checks) or m is None:
        row.setdefault("consistent", None)
    elif row.get("consistent") is not False:
        row["consistent"] = all(x == y for x, y in checks)


def _heuristic_row(reader: _Reader, ln: _Line) -> dict[str, Any]:
    row: dict[str, Any] = {"line": ln.line, "pid": ln.pid, "timestamp": ln.ts, "level": ln.level, "function": ln.function}
    pairs = _tokens(reader, ln)
    scratch: dict[str, str] = {}
    for key, value in pairs:
        if not isinstance(value, list):
            if key == "requestedAlgoCount":
                row["requested_algo_count"] = _to_int(reader, ln, key, value)
            continue
        x = _DESC.get(key)
        if x is not None:
            _matrix(reader, ln, row, scratch, key, x, value)
        elif key == "computeDesc":
            _mapped(reader, ln, row, scratch, key, value, _COMPUTE)
        elif key == "preference":
            pref = _flat_dict(value)
            row["preference"] = pref
            for k, col in _PREF.items():
                if k in pref:
                    row[col] = _to_int(reader, ln, f"preference.{k}", pref[k])
    row.setdefault("transa", "N")
    row.setdefault("transb", "N")
    row.pop("batch_count", None)
    row.pop("consistent", None)
    row["params"] = _flat_dict(pairs)
    row["raw"] = ln.raw
    return row


def _message_row(ln: _Line) -> dict[str, Any]:
    try:
        pairs = flat_pairs(ln.rest) if "=" in ln.rest else []
    except TokenError:
        pairs = []
    return {
        "line": ln.line, "pid": ln.pid, "timestamp": ln.ts, "level": ln.level, "function": ln.function,
        "message": ln.rest, "params": _flat_dict(pairs),
    }


def iter_calls(path: str | PathLike[str], tolerate_truncated_tail: bool = False) -> Iterator[dict[str, Any]]:
    """Stream the matmul calls of a log as row dicts (CALL_COLUMNS keys), in file order."""
    reader = _Reader(path, tolerate_truncated_tail)
    calls = _Templated(CALL_COLUMNS, _call_row)
    for fields in reader.lines():
        if fields[3] == "Trace" and MATMUL_FN_RE.fullmatch(fields[4]):
            row = calls.row(reader, *fields)
            yield {c: row.get(c) for c in CALL_COLUMNS}


def read_log(path: str | PathLike[str], tolerate_truncated_tail: bool = False) -> CublasLtLog:
    """Parse a cuBLASLt log into frames; ``BadInput`` names the file and line of any damage.

    A log without matmul calls is valid (empty ``calls``, noted in ``problems``). A last line
    cut mid-way is an error unless ``tolerate_truncated_tail`` (then dropped and noted).
    Frames are built every ``ROWS_PER_CHUNK`` rows and concatenated at the end.
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of small acyclic objects: cyclic GC passes only cost time here
    try:
        try:
            return _fast_read(path, tolerate_truncated_tail)
        except _Final as e:
            raise e.error from None
        except (_Fallback, BadInput):
            pass  # the per-line path reads the file again: the exact error, or the odd file
        return _read_log(path, tolerate_truncated_tail)
    finally:
        if gc_was_enabled:
            gc.enable()


def read_calls(path: str | PathLike[str]) -> pd.DataFrame:
    """The matmul calls of a log (``read_log(path).calls``), the log's problems in ``attrs["problems"]``."""
    log = read_log(path)
    calls = log.calls
    calls.attrs["problems"] = list(log.problems)
    return calls


def _read_log(path: str | PathLike[str], tolerate_truncated_tail: bool) -> CublasLtLog:
    reader = _Reader(path, tolerate_truncated_tail)
    calls = _Templated(CALL_COLUMNS, _call_row)
    heuristics = _Templated(HEURISTIC_COLUMNS, _heuristic_row)
    messages = {name: _Messages() for name in ("api", "info", "hints", "errors")}
    targets: dict[tuple[str, str], _Templated | _Messages] = {}  # (level, function) -> bucket
    for fields in reader.lines():
        target = targets.get((fields[3], fields[4]))
        if target is None:
            level, function = fields[3], fields[4]
            if level == "Trace" and MATMUL_FN_RE.fullmatch(function):
                target = calls
            elif level == "Api" and function.startswith(HEURISTIC_PREFIX):
                target = heuristics
            else:
                target = messages[_MESSAGE_BUCKET.get(level, "api")]
            targets[(level, function)] = target
        target.add(reader, *fields)
    reader.finish()
    frames = {"calls": calls.frame(), "heuristics": heuristics.frame(),
              **{name: m.frame() for name, m in messages.items()}}
    return _result(reader, frames)


def _result(reader: _Reader, frames: dict[str, pd.DataFrame]) -> CublasLtLog:
    if frames["calls"].empty:
        reader.problems.append(
            "no matmul calls: no [Trace][cublasLt*Matmul] line (CUBLASLT_LOG_LEVEL below 2, or no GEMM ran)"
        )
    return CublasLtLog(reader.path, **frames, level_counts=reader.level_counts,
                       skipped_lines=reader.skipped, problems=reader.problems)


_MESSAGE_BUCKET = {"Info": "info", "Hints": "hints", "Error": "errors"}


class _Messages:
    """Rows of a message bucket ([Api], [Info], [Hints], [Error]), framed every ROWS_PER_CHUNK."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.parts: list[pd.DataFrame] = []

    def add(self, reader: _Reader, lineno: int, ts: str | None, pid: int, level: str, function: str,
            rest: str, raw: str) -> None:
        self.rows.append(_message_row(_Line(lineno, ts, pid, level, function, rest, raw)))
        if len(self.rows) >= ROWS_PER_CHUNK:
            self.parts.append(_frame(self.rows, MESSAGE_COLUMNS))
            self.rows = []

    def frame(self) -> pd.DataFrame:
        if self.rows:
            self.parts.append(_frame(self.rows, MESSAGE_COLUMNS))
            self.rows = []
        return _concat(self.parts, MESSAGE_COLUMNS)


# --- fast path: lines that differ only in pointer values share one parsed template -------------

#: A pointer value (``A=0X7F..``, ``aScalePointer=0x7f..``): the part of a line that changes per call.
_POINTER = re.compile(r"=(0[xX][0-9a-fA-F]+)")
_SENTINEL = re.compile("\x01(\\d+)\x01")
_PER_LINE = ("line", "pid", "timestamp", "raw")
#: Templates kept before the cache is reset (bounds memory on logs with endless distinct shapes).
MAX_TEMPLATES = 20_000


@dataclass
class _Template:
    """A parsed row with its pointer values lifted out: ``ptr_cols``/``ptr_dicts`` say where they go."""

    static: dict[str, Any]
    ptr_cols: list[tuple[str, int]]  # (column, pointer index)
    ptr_dicts: list[tuple[str, str, int]]  # (dict column, key, pointer index)

    def row(self, ptrs: list[str], line: int, ts: str | None, pid: int, raw: str) -> dict[str, Any]:
        row = {c: (v.copy() if isinstance(v, dict) else v) for c, v in self.static.items()}
        for col, i in self.ptr_cols:
            row[col] = ptrs[i]
        for col, key, i in self.ptr_dicts:
            row[col][key] = ptrs[i]
        row.update(line=line, timestamp=ts, pid=pid, raw=raw)
        return row


def _template_of(row: dict[str, Any], n_pointers: int) -> _Template | None:
    """Lift the pointer sentinels out of a row parsed from a marked line (None: not templatable)."""
    static: dict[str, Any] = {}
    cols: list[tuple[str, int]] = []
    dicts: list[tuple[str, str, int]] = []
    for col, value in row.items():
        if col in _PER_LINE:
            continue
        if isinstance(value, str) and "\x01" in value:
            m = _SENTINEL.fullmatch(value)
            if m is None:
                return None
            cols.append((col, int(m[1])))
            static[col] = None
        elif isinstance(value, dict):
            d: dict[str, Any] = {}
            for key, v in value.items():
                if "\x01" in key:
                    return None
                if isinstance(v, str) and "\x01" in v:
                    m = _SENTINEL.fullmatch(v)
                    if m is None:
                        return None
                    dicts.append((col, key, int(m[1])))
                    d[key] = None
                else:
                    d[key] = v
            static[col] = d
        else:
            static[col] = value
    if len(cols) + len(dicts) != n_pointers:
        return None
    return _Template(static, cols, dicts)


class _Templated:
    """Rows of a templated bucket (calls, heuristics), kept columnar and framed in chunks."""

    def __init__(self, contract: dict[str, str], parse) -> None:
        self.contract = contract
        self.parse = parse  # (reader, _Line) -> row dict
        self.cache: dict[tuple[str, str, str], int | None] = {}
        self.templates: list[_Template] = []
        self.parts: list[pd.DataFrame] = []
        self._new_chunk()

    def _new_chunk(self) -> None:
        self.rows: list[tuple[int, list[str], int, int, str | None, str]] = []  # tid, ptrs, line, pid, ts, raw

    def _template(self, reader: _Reader, lineno: int, ts: str | None, pid: int, level: str, function: str,
                  rest: str, raw: str) -> tuple[int, list[str]]:
        parts = _POINTER.split(rest)
        key = (level, function, "\x01".join(parts[::2]))
        tid = self.cache.get(key, -1) if "\x01" not in rest else None
        if tid == -1:
            marked = "".join(p if i % 2 == 0 else f"=\x01{i // 2}\x01" for i, p in enumerate(parts))
            try:
                tpl = _template_of(self.parse(reader, _Line(lineno, ts, pid, level, function, marked, raw)),
                                   len(parts) // 2)
            except BadInput:
                tpl = None
            if tpl is not None:
                tid = len(self.templates)
                self.templates.append(tpl)
            self.cache[key] = tid = tid if tpl is not None else None
        if tid is None:  # not templatable: this row is its own template
            row = self.parse(reader, _Line(lineno, ts, pid, level, function, rest, raw))
            tid = len(self.templates)
            self.templates.append(_Template(row, [], []))
            return tid, []
        return tid, parts[1::2]

    def row(self, reader: _Reader, lineno: int, ts: str | None, pid: int, level: str, function: str,
            rest: str, raw: str) -> dict[str, Any]:
        tid, ptrs = self._template(reader, lineno, ts, pid, level, function, rest, raw)
        row = self.templates[tid].row(ptrs, lineno, ts, pid, raw)
        self._trim()
        return row

    def add(self, reader: _Reader, lineno: int, ts: str | None, pid: int, level: str, function: str,
            rest: str, raw: str) -> None:
        parts = _POINTER.split(rest)  # fast path: a known template, only the pointers are new
        tid = self.cache.get((level, function, "\x01".join(parts[::2])), -1) if "\x01" not in rest else -1
        if tid is None or tid < 0:
            tid, ptrs = self._template(reader, lineno, ts, pid, level, function, rest, raw)
        else:
            ptrs = parts[1::2]
        self.rows.append((tid, ptrs, lineno, pid, ts, raw))
        if len(self.rows) >= ROWS_PER_CHUNK:
            self._flush()

    def _trim(self) -> None:
        if len(self.templates) > MAX_TEMPLATES:
            self.cache.clear()
            self.templates.clear()

    def _flush(self) -> None:
        if self.rows:
            self.parts.append(self._chunk_frame())
        self._new_chunk()
        self._trim()

    def frame(self) -> pd.DataFrame:
        self._flush()
        return _concat(self.parts, self.contract)

    def _chunk_frame(self) -> pd.DataFrame:
        """Static columns by gathering template rows, then the per-line and pointer columns."""
        contract = self.contract
        tids, all_ptrs, lines, pids, tss, raws = zip(*self.rows)
        used, inverse = np.unique(np.asarray(tids, dtype=np.intp), return_inverse=True)
        templates = [self.templates[u] for u in used]
        df = _frame([t.static for t in templates], contract).take(inverse).reset_index(drop=True)
        df["line"] = pd.array(lines, dtype="Int64")
        df["pid"] = pd.array(pids, dtype="Int64")
        df["timestamp"] = pd.array(tss, dtype="string")
        df["raw"] = pd.array(raws, dtype="string")
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(used) + 1))
        filled: dict[str, np.ndarray] = {}
        for j, tpl in enumerate(templates):
            group = order[bounds[j]:bounds[j + 1]]
            dict_cols = [c for c, v in tpl.static.items() if isinstance(v, dict)]
            if not (tpl.ptr_cols or dict_cols):
                continue
            by_index = list(zip(*[all_ptrs[r] for r in group.tolist()]))  # pointer index -> values
            for col, i in tpl.ptr_cols:
                if col not in filled:
                    filled[col] = df[col].to_numpy(dtype=object, na_value=None)
                filled[col][group] = _objects(by_index[i])
            for col in dict_cols:
                if col not in filled:
                    filled[col] = np.empty(len(df), dtype=object)
                base = tpl.static[col]
                entries = [(k, i) for c, k, i in tpl.ptr_dicts if c == col]
                if entries:
                    keys = [k for k, _ in entries]
                    values = [{**base, **dict(zip(keys, v))} for v in zip(*(by_index[i] for _, i in entries))]
                else:
                    values = list(map(dict.copy, repeat(base, len(group))))
                filled[col][group] = _objects(values)
        for col, values in filled.items():
            dtype = contract[col]
            df[col] = values if dtype == "object" else pd.array(values, dtype=dtype)
        return df


def _objects(values: Sequence[Any]) -> np.ndarray:
    """A 1-d object array holding ``values`` as they are (no conversion to numpy strings)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _frame(rows: list[dict[str, Any]], contract: dict[str, str]) -> pd.DataFrame:
    cols = {c: [r.get(c) for r in rows] for c in contract}
    return pd.DataFrame({c: pd.Series(v, dtype=contract[c]) for c, v in cols.items()})


def _concat(parts: list[pd.DataFrame], contract: dict[str, str]) -> pd.DataFrame:
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in contract.items()})
    if len(parts) == 1:
        return parts[0]
    return pd.concat(parts, ignore_index=True)


def problem_key(row: Any) -> tuple:
    """The hashable problem descriptor of a call row (``forensics.model.CALL_KEY_COLUMNS``)."""
    return tuple(_plain(row[c]) for c in CALL_KEY_COLUMNS)


call_key = problem_key


def algo_key(row: Any) -> tuple:
    """The hashable algo descriptor of a call row (:data:`ALGO_COLUMNS`)."""
    return tuple(_plain(row[c]) for c in ALGO_COLUMNS)


def _plain(v: Any) -> Any:
    return None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else v


# --- vectorised path: numpy finds lines, headers and pointers; each template is parsed once ----

#: Bytes per chunk of the vectorised path (whole lines; the last one is cut at a newline).
FAST_CHUNK_BYTES = 64 << 20
_PAD = 64  # zero bytes after a chunk, so fixed-offset header probes never index past its end
_HEX = np.zeros(256, dtype=bool)
_HEX[list(b"0123456789abcdefABCDEF")] = True
_DIGIT = np.zeros(256, dtype=bool)
_DIGIT[list(b"0123456789")] = True
_NOT_TS = np.zeros(256, dtype=bool)
_NOT_TS[list(b"[]\n")] = True
_TAG = np.frombuffer(b"[cublasLt][", dtype=np.uint8)
_MAX_HEX = 24  # hex digits probed per pointer value
_TS_WIDTH = 19  # "YYYY-MM-DD HH:MM:SS"
_MAX_SEGMENTS = 256
_SEGMENT_MIX = np.random.default_rng(0x5EED).integers(1, 2**63, size=_MAX_SEGMENTS + 2, dtype=np.uint64) | np.uint64(1)


class _Fallback(Exception):
    """The vectorised path does not take this file; the per-line path reads it (and finds any error)."""


def _message_static(reader: _Reader, ln: _Line) -> dict[str, Any]:
    """A message row without ``message`` (the vectorised path slices that from the line)."""
    row = _message_row(ln)
    del row["message"]
    return row


@dataclass
class _Chunk:
    """One chunk of whole lines, located by numpy: line spans, header fields and pointer spans."""

    first: int  # line number of the first line
    body: bytearray  # reused for the next chunk: frames hold copies only
    starts: np.ndarray  # line start offsets (lines that passed the header probe)
    ends: np.ndarray  # line end offsets (the newline)
    has_ts: np.ndarray
    pid: np.ndarray
    pid_end: np.ndarray  # offset of the "]" closing the pid
    n_ptr: np.ndarray
    first_ptr: np.ndarray  # index of the line's first pointer in ptr_start/ptr_end
    lines: np.ndarray  # index of each header line among all lines of the chunk (line number - first)
    ptr_start: np.ndarray
    ptr_end: np.ndarray
    groups: tuple[np.ndarray, np.ndarray] = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    _ptr_values: pa.LargeStringArray | None = None

    @property
    def ptr_values(self) -> pa.LargeStringArray:
        if self._ptr_values is None:
            self._ptr_values = spans_array(self.body, self.ptr_start, self.ptr_end)
        return self._ptr_values

    def raw(self, i: int) -> str:
        return self.body[self.starts[i]:self.ends[i]].decode("utf-8")


def _locate(reader: _Reader, first: int, body: bytearray, length: int, scratch: list[np.ndarray] | None = None) -> _Chunk:
    """Find the lines, header fields and pointer values of a chunk without a Python loop per line.

    ``scratch`` (a list, filled on first use) keeps two chunk-sized work arrays between calls.
    """
    if body.find(b"\x00", 0, length) >= 0 or body.find(b"\r", 0, length) >= 0:
        raise _Fallback("NUL or CR bytes")
    try:
        pa.LargeStringArray.from_buffers(1, pa.py_buffer(np.array([0, length], dtype=np.int64)),
                                         pa.py_buffer(body)).validate(full=True)
    except pa.ArrowInvalid:
        raise _Fallback("not UTF-8") from None
    a = np.frombuffer(body, dtype=np.uint8)
    if scratch is None:
        scratch = []
    if not scratch or len(scratch[0]) < length:
        scratch[:] = [np.empty(length, dtype=np.uint8), np.empty(length, dtype=bool)]
    work, hits = scratch[0][:length], scratch[1][:length]
    ends = np.flatnonzero(np.equal(a[:length], 10, out=hits))
    starts = np.empty_like(ends)
    starts[:1] = 0
    starts[1:] = ends[:-1] + 1
    # "[<19-char timestamp>][cublasLt][<pid>]" or "[cublasLt][<pid>]": probed on each line's first bytes
    head = sliding_window_view(a, _PAD)[starts]
    ts_end = 1 + _TS_WIDTH
    has_ts = (head[:, 0] == 91) & (head[:, ts_end] == 93) & ~_NOT_TS[head[:, 1:ts_end]].any(axis=1)
    has_ts &= (head[:, ts_end + 1:ts_end + 1 + len(_TAG)] == _TAG).all(axis=1)
    plain = (head[:, :len(_TAG)] == _TAG).all(axis=1)
    ok = has_ts | plain
    pid_at = np.where(has_ts, ts_end + 1 + len(_TAG), len(_TAG))
    at = pid_at[:, None] + np.arange(20)
    pid_bytes = head[np.arange(len(starts))[:, None], at]
    n_digits = np.argmin(_DIGIT[pid_bytes], axis=1)  # 0 also when all 20 are digits: not taken
    pid_end = starts + pid_at + n_digits
    ok &= (n_digits > 0) & (n_digits <= 18) & (a[pid_end] == 93)
    pid = np.zeros(len(starts), dtype=np.int64)
    for j in range(int(n_digits[ok].max()) if ok.any() else 0):
        use = j < n_digits
        pid[use] = pid[use] * 10 + (pid_bytes[use, j] - 48)
    for i in np.flatnonzero(~ok).tolist():  # not a cuBLASLt header: program output (rare)
        raw = body[starts[i]:ends[i]].decode("utf-8")
        if "[cublasLt]" in raw:
            raise _Fallback("an unusual header")
        reader._foreign(first + i, raw)
    lines = np.flatnonzero(ok)
    # pointer values: "=0X<hex>" / "=0x<hex>" (what _POINTER matches), the value without the "="
    x = np.flatnonzero(np.equal(np.bitwise_or(a[:length], 32, out=work), 120, out=hits))  # 'x' / 'X'
    x = x[x >= 2]
    eq = x[(a[x - 1] == 48) & (a[x - 2] == 61) & _HEX[a[x + 1]]] - 2
    run = np.argmin(_HEX[sliding_window_view(a, _MAX_HEX)[eq + 3]], axis=1)  # the first digit is known hex
    if (run == 0).any():  # argmin 0: all _MAX_HEX bytes are hex digits
        raise _Fallback("a very long pointer value")
    ptr_end = eq + 3 + run
    line_of = np.searchsorted(ends, eq)  # index among all lines
    keep = ok[line_of]
    eq, ptr_end, line_of = eq[keep], ptr_end[keep], line_of[keep]
    if (eq < pid_end[line_of]).any():
        raise _Fallback("pointer-like text in a header")
    n_ptr = np.bincount(line_of, minlength=len(starts))[lines]
    first_ptr = np.zeros(len(lines), dtype=np.int64)
    np.cumsum(n_ptr[:-1], out=first_ptr[1:])
    return _Chunk(first, body, starts[lines], ends[lines], has_ts[lines], pid[lines], pid_end[lines],
                  n_ptr, first_ptr, lines, eq + 1, ptr_end)


def _line_groups(ch: _Chunk) -> tuple[np.ndarray, np.ndarray]:
    """Group lines that differ only in timestamp, pid and pointer values: (group of each line, first line of each group)."""
    n = len(ch.starts)
    n_seg = ch.n_ptr + 1
    if n and n_seg.max() > _MAX_SEGMENTS:
        raise _Fallback("too many pointers on one line")
    seg_first = np.zeros(n, dtype=np.int64)
    np.cumsum(n_seg[:-1], out=seg_first[1:])
    total = int(n_seg.sum())
    seg_line = np.repeat(np.arange(n), n_seg)
    j = np.arange(total) - seg_first[seg_line]  # segment position in its line
    last = j == ch.n_ptr[seg_line]
    ptr = ch.first_ptr[seg_line] + j  # the pointer that ends this segment (unless last)
    seg_start = np.where(j == 0, ch.pid_end[seg_line], ch.ptr_end[np.maximum(ptr - 1, 0)] if len(ch.ptr_end) else 0)
    seg_end = np.where(last, ch.ends[seg_line], ch.ptr_start[np.minimum(ptr, len(ch.ptr_start) - 1)] if len(ch.ptr_start) else 0)
    codes = pc.dictionary_encode(spans_array(ch.body, seg_start, seg_end)).indices
    codes = codes.to_numpy().astype(np.int64)
    mixed = codes.astype(np.uint64) * _SEGMENT_MIX[j]
    key = np.add.reduceat(mixed, seg_first) if total else np.zeros(0, dtype=np.uint64)
    key += ch.has_ts.astype(np.uint64) * _SEGMENT_MIX[-1] + n_seg.astype(np.uint64) * _SEGMENT_MIX[-2]
    _, firsts, group = np.unique(key, return_index=True, return_inverse=True)
    rep = firsts[group]  # verify exactly: same shape and same segment codes as the group's first line
    same = (n_seg[rep] == n_seg) & (ch.has_ts[rep] == ch.has_ts)
    if not same.all() or not (codes[seg_first[rep][seg_line] + j] == codes).all():
        raise _Fallback("template hash collision")
    return group.ravel(), firsts


class _FastState:
    """Buckets and template caches of one vectorised read."""

    def __init__(self) -> None:
        self.buckets: dict[str, _Templated] = {
            "calls": _Templated(CALL_COLUMNS, _call_row),
            "heuristics": _Templated(HEURISTIC_COLUMNS, _heuristic_row),
            **{name: _Templated(MESSAGE_COLUMNS, _message_static) for name in ("api", "info", "hints", "errors")},
        }
        self.names = list(self.buckets)
        self.targets: dict[tuple[str, str], int] = {}
        self.parts: dict[str, list[pd.DataFrame]] = {name: [] for name in self.buckets}

    def target(self, level: str, function: str) -> int:
        t = self.targets.get((level, function))
        if t is None:
            if level == "Trace" and MATMUL_FN_RE.fullmatch(function):
                name = "calls"
            elif level == "Api" and function.startswith(HEURISTIC_PREFIX):
                name = "heuristics"
            else:
                name = _MESSAGE_BUCKET.get(level, "api")
            t = self.targets[(level, function)] = self.names.index(name)
        return t


def _fast_chunk(reader: _Reader, st: _FastState, ch: _Chunk) -> None:
    """Parse one template per line group, then build each bucket's rows for the chunk by gathering."""
    n = len(ch.starts)
    if not n:
        return
    group, firsts = ch.groups
    bucket_of = np.empty(n, dtype=np.int8)
    tid_of = np.empty(n, dtype=np.int64)
    hdr_end = np.empty(n, dtype=np.int64)  # where the message (text after the header) starts
    counts = np.bincount(group, minlength=len(firsts))
    members = np.split(np.argsort(group, kind="stable"), np.cumsum(counts)[:-1])
    order = np.argsort(firsts, kind="stable")
    for g in order.tolist():
        r = int(firsts[g])
        raw = ch.raw(r)
        m = HEADER_RE.match(raw)
        if (m is None or (m["ts"] is None) == bool(ch.has_ts[r])
                or m.end("pid") != ch.pid_end[r] - ch.starts[r]):
            raise _Fallback("header probe disagrees with HEADER_RE")
        ts, _, level, function = m.groups()
        rest = raw[m.end():]
        n_regex = len(_POINTER.findall(rest))
        if n_regex != ch.n_ptr[r] or "\x01" in rest:
            raise _Fallback("pointer probe disagrees with _POINTER")
        b = st.target(level, function)
        bucket = st.buckets[st.names[b]]
        lineno = ch.first + int(ch.lines[r])
        tid, _ = bucket._template(reader, lineno, ts, int(ch.pid[r]), level, function, rest, raw)
        reader.level_counts[level] = reader.level_counts.get(level, 0) + int(counts[g])
        rows = members[g]
        bucket_of[rows] = b
        hdr_end[rows] = ch.pid_end[rows] + (m.end() - m.end("pid"))
        parts = _POINTER.split(rest)
        if bucket.cache.get((level, function, "\x01".join(parts[::2]))) is None and len(rows) > 1:
            for i in rows.tolist():  # not templatable: every line is its own template (rare)
                raw_i = ch.raw(i)
                m_i = HEADER_RE.match(raw_i)
                tid_of[i], _ = bucket._template(reader, ch.first + int(ch.lines[i]), m_i["ts"], int(ch.pid[i]),
                                                level, function, raw_i[m_i.end():], raw_i)
        else:
            tid_of[rows] = tid
    for b, name in enumerate(st.names):
        sel = np.flatnonzero(bucket_of == b)
        if len(sel):
            st.parts[name].append(_gather_frame(st.buckets[name], ch, sel, tid_of[sel], hdr_end))
    for bucket in st.buckets.values():
        if len(bucket.templates) > MAX_TEMPLATES:
            bucket.cache.clear()
            bucket.templates.clear()


def _string(values: pa.Array) -> pd.arrays.ArrowStringArray:
    return pd.arrays.ArrowStringArray(values)


def _static_column(values: list[Any], dtype: str, inverse: np.ndarray, take: pa.Array) -> Any:
    """One column of template values, gathered to the rows (``inverse``: template of each row)."""
    missing = np.array([v is None for v in values], dtype=bool)
    if dtype == "Int64":
        data = np.array([0 if v is None else v for v in values], dtype=np.int64)
        return pd.arrays.IntegerArray(data[inverse], missing[inverse])
    if dtype == "boolean":
        data = np.array([bool(v) for v in values], dtype=bool)
        return pd.arrays.BooleanArray(data[inverse], missing[inverse])
    if dtype == "string":
        return _string(pa.array(values, type=pa.large_string()).take(take))
    return _objects(values)[inverse]


def _gather_frame(bucket: _Templated, ch: _Chunk, sel: np.ndarray, tids: np.ndarray, hdr_end: np.ndarray) -> pd.DataFrame:
    """The rows ``sel`` of a chunk: template columns gathered, per-line columns sliced from the bytes."""
    contract = bucket.contract
    used, inverse = np.unique(tids, return_inverse=True)
    inverse = inverse.ravel()
    templates = [bucket.templates[u] for u in used.tolist()]
    n = len(sel)
    starts, ends, has_ts = ch.starts[sel], ch.ends[sel], ch.has_ts[sel]
    cols: dict[str, Any] = {
        "line": pd.arrays.IntegerArray(ch.first + ch.lines[sel], np.zeros(n, dtype=bool)),
        "pid": pd.arrays.IntegerArray(ch.pid[sel], np.zeros(n, dtype=bool)),
        "timestamp": _string(spans_array(ch.body, np.where(has_ts, starts + 1, starts),
                                         np.where(has_ts, starts + 1 + _TS_WIDTH, starts), has_ts)),
    }
    if "raw" in contract:
        cols["raw"] = _string(spans_array(ch.body, starts, ends))
    if "message" in contract:
        cols["message"] = _string(spans_array(ch.body, hdr_end[sel], ends))
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(used) + 1))
    ptr_index: dict[str, np.ndarray] = {}
    for j, tpl in enumerate(templates):
        group = order[bounds[j]:bounds[j + 1]]
        first_ptr = ch.first_ptr[sel[group]]
        for col, i in tpl.ptr_cols:
            if col not in ptr_index:
                ptr_index[col] = np.full(n, -1, dtype=np.int64)
            ptr_index[col][group] = first_ptr + i
        for col, base in tpl.static.items():
            if not isinstance(base, dict):
                continue
            if col not in cols:
                cols[col] = np.empty(n, dtype=object)
            values = list(map(dict.copy, repeat(base, len(group))))  # C loops; keys keep the template's order
            for c, key, i in tpl.ptr_dicts:
                if c == col:
                    deque(map(setitem, values, repeat(key), ch.ptr_values.take(pa.array(first_ptr + i)).to_pylist()), 0)
            cols[col][group] = _objects(values)
    take = pa.array(inverse)
    try:
        for col, dtype in contract.items():
            if col not in cols:
                cols[col] = _static_column([t.static.get(col) for t in templates], dtype, inverse, take)
    except (OverflowError, TypeError, ValueError) as e:
        raise _Fallback(f"template value does not fit its column: {e}") from None
    for col, idx in ptr_index.items():
        if contract[col] != "string":
            raise _Fallback(f"pointer value in non-string column {col}")
        valid = idx >= 0
        taken = ch.ptr_values.take(pa.array(idx, mask=~valid))
        cols[col] = _string(pc.if_else(pa.array(valid), taken, cols[col]._pa_array.combine_chunks()))
    return pd.DataFrame({c: cols[c] for c in contract}, copy=False)


@dataclass
class _CutTail:
    """The last line of a file without a final newline (a log cut mid-line)."""

    line: int
    raw: bytes


def _located_chunks(reader: _Reader, path: str | PathLike[str]) -> Iterator[_Chunk | _CutTail]:
    """Chunks located one ahead by a helper thread (numpy and Arrow release the GIL while they work)."""
    ready: queue.Queue = queue.Queue(maxsize=1)  # with 3 buffers: one parsed, one queued, one being read
    stop = threading.Event()

    def offer(item: object) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.05)
                return True
            except queue.Full:
                pass
        return False

    def produce() -> None:
        scratch: list[np.ndarray] = []
        try:
            for first, body, length, cut_tail in iter_byte_chunks(path, WHAT, FAST_CHUNK_BYTES, pad=_PAD, buffers=3):
                if cut_tail:  # the whole chunk is the one cut line
                    item: object = _CutTail(first, bytes(body[:length]))
                else:
                    item = _locate(reader, first, body, length, scratch)
                    item.groups = _line_groups(item)
                if not offer(item):
                    return
            offer(None)
        except BaseException as e:  # handed to the parsing thread
            offer(e)

    worker = threading.Thread(target=produce, name="cublaslt-locate", daemon=True)
    worker.start()
    try:
        while (item := ready.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        worker.join()


class _Final(Exception):
    """A ``BadInput`` the vectorised path is sure of (the per-line path would raise the same)."""

    def __init__(self, error: BadInput):
        super().__init__(str(error))
        self.error = error


def _fast_read(path: str | PathLike[str], tolerate_truncated_tail: bool) -> CublasLtLog:
    """The vectorised read; raises ``_Fallback`` for anything it does not take (damage included)."""
    reader = _Reader(path, tolerate_truncated_tail)
    st = _FastState()
    cut: _CutTail | None = None
    with closing(_located_chunks(reader, path)) as chunks:  # stops the helper thread on any exit
        for ch in chunks:
            if isinstance(ch, _CutTail):
                cut = ch
            else:
                _fast_chunk(reader, st, ch)
    if not sum(reader.level_counts.values()):
        raise _Fallback("no cuBLASLt line")
    if cut is not None:  # every earlier line parsed: the cut line is the first damage
        if b"\x00" in cut.raw or b"\r" in cut.raw:
            raise _Fallback("NUL or CR in the cut line")
        try:
            raw = cut.raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Fallback("cut line is not UTF-8") from None
        try:
            reader._cut_tail(cut.line, raw)
        except BadInput as e:
            raise _Final(e) from None
    reader.finish()
    frames = {name: _concat_columns(parts, st.buckets[name].contract) for name, parts in st.parts.items()}
    return _result(reader, frames)


def _concat_columns(parts: list[pd.DataFrame], contract: dict[str, str]) -> pd.DataFrame:
    """Concatenate chunk frames column by column, releasing each part's column once copied.

    Peak memory is the result plus one column, not twice the frame (Arrow string columns are
    joined as chunks, without copying their text).
    """
    if len(parts) <= 1:
        return _concat(parts, contract)
    columns: dict[str, Any] = {}
    for col in contract:
        columns[col] = pd.concat([p[col] for p in parts], ignore_index=True).array
        for p in parts:
            del p[col]
    parts.clear()
    return pd.DataFrame(columns, copy=False)
