"""cuBLASLt API log (``CUBLASLT_LOG_LEVEL`` / ``CUBLASLT_LOG_MASK``) -> pandas frames.

The line grammar is :mod:`parsers.cublaslt_grammar` (taken from the logger's own format strings).
Each ``[Trace]`` line of a ``cublasLt*Matmul`` function (including type-encoded aliases such as
``cublasLtSSSMatmul``) is one launched matmul; it becomes one row of :attr:`CublasLtLog.calls`
with the problem descriptor (m, n, k, layout, types, ld, order) derived from the column-major
matrix descriptors, and the algo descriptor. ``[Api][cublasLtMatmulAlgoGetHeuristic*]`` queries
get the same problem columns (so a query joins its call). Only non-default fields are printed by
cuBLASLt: an absent ``transa``/``transb`` means ``N``, an absent ``order`` means column-major.

This module is the readable path, one line at a time; :mod:`parsers.cublaslt_fast` reads large
logs vectorised and gives the same frames (tests/test_cublaslt_fastpath.py). docs/parsers/cublaslt.md.
"""
from __future__ import annotations

import gc
import logging
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from forensics.core.errors import BadInput
from forensics.core.model import CALL_KEY_COLUMNS

from . import cublaslt_grammar as grammar
from ._text import iter_line_chunks, preview

WHAT = "cuBLASLt log"

#: The line header (:data:`parsers.cublaslt_grammar.HEADER`); the body starts at ``match.end()``.
HEADER_RE = grammar.HEADER
MATMUL_FN_RE = re.compile(r"cublasLt(\w*)Matmul")
HEURISTIC_PREFIX = "cublasLtMatmulAlgoGetHeuristic"

Pairs = grammar.Pairs

#: Columns common to every frame.
COMMON_COLUMNS: dict[str, str] = {
    "line": "Int64",  # 1-based line number in the log
    "pid": "Int64",
    "timestamp": "string",  # as printed ("2023-04-07 04:57:13"); None when the line has none
    "level": "string",  # Trace | Api | Info | Hints | Error
    "function": "string",
}

_MATRICES = ("a", "b", "c", "d")

#: The problem descriptor columns a call and a heuristic query share.
PROBLEM_COLUMNS: dict[str, str] = {
    "m": "Int64",
    "n": "Int64",
    "k": "Int64",
    "transa": "string",  # N | T | C (absent in the log means N)
    "transb": "string",
    "layout": "string",  # transa + transb, e.g. "NT"
    **{f"{x}_type": "string" for x in _MATRICES},
    **{f"{x}_order": "string" for x in _MATRICES},  # ORDER_ROW ...; absent in the log means ORDER_COL
    **{f"ld{x}": "Int64" for x in _MATRICES},
    **{f"{x}_{d}": "Int64" for x in _MATRICES for d in ("rows", "cols")},
    "compute_type": "string",
    "scale_type": "string",
    "epilogue": "string",
    "sm_count_target": "Int64",
    "a_scale_mode": "string",
    "b_scale_mode": "string",
}

#: One row per matmul call (``[Trace][cublasLt*Matmul]``).
CALL_COLUMNS: dict[str, str] = {
    **COMMON_COLUMNS,
    "type_hint": "string",  # "SSS" of cublasLtSSSMatmul; None for plain cublasLtMatmul
    **PROBLEM_COLUMNS,
    "batch_count": "Int64",
    **{f"stride_{x}": "Int64" for x in _MATRICES},
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
}

#: Algo descriptor columns (what differs when cuBLASLt picks another kernel): the grammar's one list.
ALGO_COLUMNS = list(grammar.ALGO_COLUMNS)

#: ``[Api][cublasLtMatmulAlgoGetHeuristic*]`` queries, with the problem descriptor of a call.
HEURISTIC_COLUMNS: dict[str, str] = {
    **COMMON_COLUMNS,
    **PROBLEM_COLUMNS,
    "max_workspace_bytes": "Int64",
    "requested_algo_count": "Int64",
    "preference": "object",  # dict of the preference=[...] block
    "params": "object",  # every field, flattened
}

#: Every other line ([Api], [Info], [Hints], [Error]).
MESSAGE_COLUMNS: dict[str, str] = {
    **COMMON_COLUMNS,
    "message": "string",  # text after the header
    "params": "object",  # key=value fields of a known format (or of free text that tokenizes), else {}
}

#: Text columns whose values repeat (function, types, layouts, algo fields): held as categoricals
#: of ``string`` values (one code per row, each distinct text once). The per-call text (pointers,
#: stream, a message's text) and the timestamp (a row of it read alone must keep ``<NA>``, which a
#: categorical gives back as NaN) stay ``string``.
CATEGORY = "category"
_PER_CALL_TEXT = {"stream", "message", "timestamp", *(f"pointer_{x}" for x in _MATRICES)}
for _contract in (CALL_COLUMNS, HEURISTIC_COLUMNS, MESSAGE_COLUMNS):
    _contract.update({c: CATEGORY for c, t in _contract.items() if t == "string" and c not in _PER_CALL_TEXT})
del _contract

# field name in the log -> column
_TOP = {
    "A": "pointer_a", "B": "pointer_b", "C": "pointer_c", "D": "pointer_d",
    "workSpaceSizeInBytes": "workspace_size", "beta": "beta", "outOfPlace": "out_of_place",
    "stream": "stream",
}
_DESC = {"Adesc": "a", "Bdesc": "b", "Cdesc": "c", "Ddesc": "d"}
_MATRIX = {
    "type": "type", "rows": "rows", "cols": "cols", "ld": "ld", "order": "order",
    "batchCount": "batch_count", "stridedBatchOffset": "stride",
}
_COMPUTE = {
    "computeType": "compute_type", "scaleType": "scale_type", "transa": "transa", "transb": "transb",
    "epilogue": "epilogue", "smCountTarget": "sm_count_target",
    "aScaleMode": "a_scale_mode", "bScaleMode": "b_scale_mode",
}
_ALGO = {
    "algoId": "algo_id", "tile": "tile", "stages": "stages", "customOption": "custom_option",
    "numSplitsK": "num_splits_k", "reductionScheme": "reduction_scheme", "ctaSwizzling": "cta_swizzling",
    "clusterShape": "cluster_shape", "schedulingMode": "scheduling_mode", "innerShape": "inner_shape",
}
_PREF = {"maxWorkspaceSizeinBytes": "max_workspace_bytes"}
_INT_COLUMNS = {c for c, t in CALL_COLUMNS.items() if t == "Int64"} | {"rows", "cols", "ld", "batch_count", "stride"}

#: Rows per frame chunk (bounded memory while parsing; the frame is concatenated at the end).
ROWS_PER_CHUNK = 100_000
#: Logs smaller than this are read by the per-line path (same frames; less setup).
FAST_MIN_BYTES = 1 << 20
#: Says (at INFO) when and why the vectorised reader handed a file to the per-line path.
_log = logging.getLogger("parsers.cublaslt")


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
    problems: list[str] = field(default_factory=list)  # tolerated damage, unknown names, notable absences

    @property
    def facts(self) -> list[dict[str, Any]]:
        """What the ``[Info][cublasLtCreate]`` lines say about the library and device, per line:
        ``pid``, ``line``, ``library_version`` ("12.4"), ``device``, ``sm_count`` and the two
        shared-memory limits. Empty when the log has no such line (level below 4)."""
        return library_facts(self.info)

    def raw(self, frame: pd.DataFrame) -> list[str]:
        """The log lines of ``frame``'s rows, in row order (:func:`raw_lines` on this log's file)."""
        return raw_lines(self.path, frame["line"])


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
        self._noted: set[str] = set()

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
                counts[level] = counts.get(level, 0) + 1
                yield lineno, ts, int(pid), level, function, raw[m.end():], raw
        if not seen:
            self._no_lines()

    def _foreign(self, lineno: int, raw: str) -> None:
        if not raw.strip():
            return
        if grammar.DAMAGED.search(raw):
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

    def note(self, ln: _Line, what: str) -> None:
        """Say once (at its first line) what a line holds that cuBLAS 13.10's tables do not."""
        if what not in self._noted:
            self._noted.add(what)
            self.problems.append(f"line {ln.line}: {what}")

    def finish(self) -> None:
        if self.skipped:
            self.problems.append(
                f"{self.skipped} lines are not cuBLASLt log lines (first at line {self.first_skipped}); skipped"
            )


# --------------------------------------------------------------------------- one line -> one row
def _parse(reader: _Reader, ln: _Line, strict: bool) -> grammar.Line:
    """The grammar's reading of a line's body. Damage raises ``BadInput`` (file:line) on a
    ``strict`` line (calls, heuristic queries, the library [Info] line); on other lines it is noted
    and the line kept as free text."""
    try:
        parsed = grammar.parse_body(ln.level, ln.function, ln.rest, len(ln.raw) - len(ln.rest))
    except grammar.GrammarError as e:
        if strict:
            raise reader.bad(ln, f"column {e.column}: {e}") from None
        reader.note(ln, f"[{ln.level}][{ln.function}] does not follow cuBLAS 13.10's format for it "
                        f"({grammar.format_of(ln.level, ln.function)}); kept as text")
        return grammar.Line(ln.ts, ln.pid, ln.level, ln.function, grammar.base_api(ln.function), ln.rest)
    for name in parsed.unknown:
        reader.note(ln, f"not in cuBLAS 13.10's tables, kept as printed: {name}")
    return parsed


def _op_letter(value: str) -> str:
    """``OP_T`` / ``CUBLAS_OP_T`` / ``T`` -> ``T``."""
    return value.rsplit("_", 1)[-1].upper() if value else "N"


def _to_int(reader: _Reader, ln: _Line, key: str, value: str) -> int:
    try:
        return int(value, 0) if value[:2].lower() == "0x" else int(value)
    except ValueError:
        raise reader.bad(ln, f"{key}={value!r} is not an integer") from None


def _call_row(reader: _Reader, ln: _Line) -> dict[str, Any]:
    """Parse one ``[Trace][cublasLt*Matmul]`` line into a row dict (CALL_COLUMNS)."""
    row: dict[str, Any] = {
        "line": ln.line, "pid": ln.pid, "timestamp": ln.ts, "level": ln.level, "function": ln.function,
        "type_hint": MATMUL_FN_RE.fullmatch(ln.function)[1] or None,
    }
    extra: dict[str, str] = {}
    for key, value in _parse(reader, ln, strict=True).pairs:
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
    return row


def _matrix(reader: _Reader, ln: _Line, row: dict, extra: dict, key: str, x: str, pairs: Pairs) -> None:
    for k, v in pairs:
        f = _MATRIX.get(k)
        if f is None or isinstance(v, list):
            _flatten_into(extra, f"{key}.{k}", v)
        elif f in ("type", "order"):
            row[f"{x}_{f}"] = v
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
    k x m otherwise (likewise B); ``order`` changes the memory layout, not rows and cols. m and n
    come from C (D when C has no descriptor).
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
    for x in _MATRICES:
        if row.get(f"{x}_rows") is not None:
            row.setdefault(f"{x}_order", "ORDER_COL")
    checks = [(a_m, m), (a_k, b_k), (b_n, n)]
    if row.get("c_rows") is not None and row.get("d_rows") is not None:
        checks += [(row["c_rows"], row["d_rows"]), (row.get("c_cols"), row.get("d_cols"))]
    if any(x is None or y is None for x, y in checks) or m is None:
        row.setdefault("consistent", None)
    elif row.get("consistent") is not False:
        row["consistent"] = all(x == y for x, y in checks)


def _heuristic_row(reader: _Reader, ln: _Line) -> dict[str, Any]:
    """One ``[Api][cublasLtMatmulAlgoGetHeuristic*]`` query, with the problem columns of a call."""
    row: dict[str, Any] = {"line": ln.line, "pid": ln.pid, "timestamp": ln.ts, "level": ln.level, "function": ln.function}
    pairs = _parse(reader, ln, strict=True).pairs
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
    _derive(row)
    row.pop("batch_count", None)
    row.pop("consistent", None)
    row["params"] = _flat_dict(pairs)
    return row


def _message_row(reader: _Reader, ln: _Line) -> dict[str, Any]:
    """An [Api] line of another function, or an [Info]/[Hints]/[Error] line (free text)."""
    strict = ln.level == "Info" and grammar.format_of(ln.level, ln.function) is not None
    parsed = _parse(reader, ln, strict=strict)
    pairs = parsed.pairs
    if parsed.format is None and "=" in ln.rest:
        try:
            pairs = grammar.tokenize(ln.rest)
        except grammar.GrammarError:
            pairs = []
    return {
        "line": ln.line, "pid": ln.pid, "timestamp": ln.ts, "level": ln.level, "function": ln.function,
        "message": ln.rest, "params": _flat_dict(pairs),
    }


def raw_lines(path: str | PathLike[str], lines: Iterable[Any]) -> list[str]:
    """The text of the 1-based ``lines`` of a log, in the order asked, as the reader read them
    (no newline; a CRLF file's CR dropped). The frames keep each row's ``line``, not its text:
    the text is read back from the file here, exactly. The file is read once, up to the last
    line asked. A line the file does not have is ``BadInput`` (the file changed since it was read)."""
    wanted = [int(n) for n in lines]
    if not wanted:
        return []
    want, found, last = set(wanted), {}, max(wanted)
    for first, chunk, _ in iter_line_chunks(path, WHAT):
        for n in want.intersection(range(first, first + len(chunk))):
            found[n] = chunk[n - first]
        if first + len(chunk) > last:
            break
    absent = sorted(want.difference(found))
    if absent:
        raise BadInput(str(path), f"the log has no line {absent[0]} (changed since it was read?)", line=absent[0])
    return [found[n] for n in wanted]


def library_facts(info: pd.DataFrame) -> list[dict[str, Any]]:
    """Library version, device and SM count from the ``[Info][cublasLtCreate]`` rows of ``info``."""
    out = []
    if info is None or not len(info):
        return out
    rows = info[(info["function"] == "cublasLtCreate")]
    for r in rows.itertuples(index=False):
        p = r.params if isinstance(r.params, dict) else {}
        if "version" not in p:
            continue
        out.append({"pid": int(r.pid), "line": int(r.line), "library_version": p["version"],
                    "device": int(p["device"]), "sm_count": int(p["multiProcessorCount"]),
                    "max_shared_mem_per_block": int(p["maxSharedMemPerBlock"]),
                    "max_shared_mem_per_block_optin": int(p["maxSharedMemoryPerBlockOptin"])})
    return out


# --------------------------------------------------------------------------- reading a log
def _bucket(level: str, function: str) -> str:
    if level == "Trace" and MATMUL_FN_RE.fullmatch(function):
        return "calls"
    if level == "Api" and grammar.base_api(function).startswith(HEURISTIC_PREFIX):
        return "heuristics"
    return _MESSAGE_BUCKET.get(level, "api")


_MESSAGE_BUCKET = {"Info": "info", "Hints": "hints", "Error": "errors"}
#: bucket -> (contract, row builder)
BUCKETS = {
    "calls": (CALL_COLUMNS, _call_row),
    "heuristics": (HEURISTIC_COLUMNS, _heuristic_row),
    **{name: (MESSAGE_COLUMNS, _message_row) for name in ("api", "info", "hints", "errors")},
}


def iter_calls(path: str | PathLike[str], tolerate_truncated_tail: bool = False) -> Iterator[dict[str, Any]]:
    """Stream the matmul calls of a log as row dicts (CALL_COLUMNS keys), in file order."""
    reader = _Reader(path, tolerate_truncated_tail)
    for fields in reader.lines():
        if _bucket(fields[3], fields[4]) == "calls":
            row = _call_row(reader, _Line(*fields))
            yield {c: row.get(c) for c in CALL_COLUMNS}


def read_log(path: str | PathLike[str], tolerate_truncated_tail: bool = False) -> CublasLtLog:
    """Parse a cuBLASLt log into frames; ``BadInput`` names the file and line of any damage.

    A log without matmul calls is valid (empty ``calls``, noted in ``problems``). A last line
    cut mid-way is an error unless ``tolerate_truncated_tail`` (then dropped and noted). Large
    logs go through the vectorised reader; the per-line path reads any file it does not take
    (and gives the exact error for a damaged one).
    """
    from parsers import cublaslt_fast as fast  # noqa: PLC0415

    try:
        small = os.path.getsize(path) < FAST_MIN_BYTES
    except OSError:
        small = True  # the per-line path says why it cannot read the file
    if small:  # the vectorised reader's setup (a helper thread, numpy buffers) does not pay off
        return read_log_per_line(path, tolerate_truncated_tail)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of small acyclic objects: cyclic GC passes only cost time here
    try:
        try:
            return fast.fast_read(path, tolerate_truncated_tail)
        except fast.Final as e:
            raise e.error from None
        except (fast.Fallback, BadInput) as e:  # the per-line path reads the file again: the exact error, or the odd file
            _log.info("%s: the vectorised reader fell back to the per-line path: %s", path, e)
        return read_log_per_line(path, tolerate_truncated_tail)
    finally:
        if gc_was_enabled:
            gc.enable()


def read_calls(path: str | PathLike[str]) -> pd.DataFrame:
    """The matmul calls of a log (``read_log(path).calls``); ``attrs["problems"]``: the log's
    problems; ``attrs["facts"]``: the library facts (:attr:`CublasLtLog.facts`)."""
    log = read_log(path)
    calls = log.calls
    calls.attrs["problems"] = list(log.problems) + ([held_instead(log)] if calls.empty and log.level_counts else [])
    calls.attrs["losses"] = [p for p in log.problems if "dropped" in p or "not cuBLASLt log lines" in p
                             or "kept as text" in p]
    calls.attrs["facts"] = log.facts
    return calls


def held_instead(log: CublasLtLog) -> str:
    """What a log without matmul calls holds, in one line: heuristic queries with their problem
    descriptors, [Error]/[Info] messages, [Api] calls by name (nothing read goes unshown)."""
    parts = []
    if len(log.heuristics):
        h = log.heuristics
        probs = [f"{r.function}({r.transa},{r.transb}) m={r.m} n={r.n} k={r.k} A={r.a_type}"
                 for r in h.head(4).itertuples(index=False)]
        parts.append(f"{len(h)} heuristic quer{'y' if len(h) == 1 else 'ies'} (no kernel runs from a query): "
                     + "; ".join(probs) + ("; ..." if len(h) > 4 else ""))
    for frame, level in ((log.errors, "Error"), (log.info, "Info")):
        for r in frame.head(3).itertuples(index=False):
            if isinstance(r.message, str) and r.message and r.level == level:
                parts.append(f"[{level}][{r.function}] line {r.line}: {r.message[:200]}")  # noqa: PERF401
    if len(log.api):
        counts = log.api["function"].value_counts()
        parts.append(f"{len(log.api)} [Api] line(s): " + ", ".join(f"{f} x{n}" for f, n in counts.items()))
    return "the log holds instead: " + ("; ".join(parts) if parts else
                                        ", ".join(f"{n} [{lv}] line(s)" for lv, n in log.level_counts.items()))


def read_log_per_line(path: str | PathLike[str], tolerate_truncated_tail: bool = False) -> CublasLtLog:
    """The readable path: every line through the grammar, one at a time."""
    reader = _Reader(path, tolerate_truncated_tail)
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in BUCKETS}
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in BUCKETS}
    for fields in reader.lines():
        name = _bucket(fields[3], fields[4])
        contract, build = BUCKETS[name]
        rows[name].append(build(reader, _Line(*fields)))
        if len(rows[name]) >= ROWS_PER_CHUNK:
            parts[name].append(_frame(rows[name], contract))
            rows[name] = []
    reader.finish()
    frames = {}
    for name, (contract, _) in BUCKETS.items():
        if rows[name]:
            parts[name].append(_frame(rows[name], contract))
        frames[name] = _concat(parts[name], contract)
    return _result(reader, frames)


def _result(reader: _Reader, frames: dict[str, pd.DataFrame]) -> CublasLtLog:
    if frames["calls"].empty:
        reader.problems.append(
            "no matmul calls: no [Trace][cublasLt*Matmul] line (CUBLASLT_LOG_LEVEL below 2, or no GEMM ran)"
        )
    return CublasLtLog(reader.path, **frames, level_counts=reader.level_counts,
                       skipped_lines=reader.skipped, problems=reader.problems)


def _objects(values: Sequence[Any]) -> np.ndarray:
    """A 1-d object array holding ``values`` as they are (no conversion to numpy strings, no look
    inside a dict or tuple: 1.2 ms for 100,000 dicts, where filling an empty array took 5.2)."""
    return np.fromiter(values, dtype=object, count=len(values))


def _series(values: Any, dtype: str) -> pd.Series:
    """A column of ``dtype``; ``category``: a categorical of ``string`` values, categories sorted."""
    if dtype == CATEGORY:
        return pd.Series(values, dtype="string").astype(CATEGORY)
    return pd.Series(values, dtype=dtype)


def _frame(rows: list[dict[str, Any]], contract: dict[str, str]) -> pd.DataFrame:
    cols = {c: [r.get(c) for r in rows] for c in contract}
    return pd.DataFrame({c: _series(v, contract[c]) for c, v in cols.items()})


def join_categoricals(chunks: list[pd.Categorical]) -> pd.Categorical:
    """Categorical pieces of one column joined, categories united and sorted (as one read gives)."""
    return union_categoricals(chunks, sort_categories=True)


def _concat(parts: list[pd.DataFrame], contract: dict[str, str]) -> pd.DataFrame:
    if not parts:
        return pd.DataFrame({c: _series([], t) for c, t in contract.items()})
    if len(parts) == 1:
        return parts[0]
    joined = pd.concat(parts, ignore_index=True)
    for c, t in contract.items():
        if t == CATEGORY:
            joined[c] = join_categoricals([p[c].array for p in parts])
    return joined


def problem_key(row: Any) -> tuple:
    """The hashable problem descriptor of a call or heuristic row (``forensics.core.model.CALL_KEY_COLUMNS``);
    a column the row lacks (a legacy cuBLAS call has no ``order``: column-major) counts as its default."""
    return tuple(_plain(row[c]) if c in row else _KEY_DEFAULTS.get(c) for c in CALL_KEY_COLUMNS)


_KEY_DEFAULTS = {f"{x}_order": "ORDER_COL" for x in _MATRICES}


call_key = problem_key


def algo_key(row: Any) -> tuple:
    """The hashable algo descriptor of a call row (:data:`ALGO_COLUMNS`)."""
    return tuple(_plain(row[c]) for c in ALGO_COLUMNS)


def _plain(v: Any) -> Any:
    return None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else v
