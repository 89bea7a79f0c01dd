"""The vectorised cuBLASLt reader: the frames of :func:`parsers.cublaslt.read_log_per_line`, fast.

numpy finds the lines, headers and pointer values of a chunk of bytes; lines that differ only in
timestamp, pid and pointer values share one *template*, parsed once by the per-line row builders
(so the grammar is :mod:`parsers.cublaslt_grammar`, in one place); each bucket's rows are then
gathered column by column. Anything unusual (NUL/CR bytes, invalid UTF-8, a header the probe
cannot read, damage) raises :class:`Fallback` and the per-line path reads the file instead, so
errors are always the per-line path's. tests/test_cublaslt_fastpath.py proves the two equal.
"""
from __future__ import annotations

import ctypes
import queue
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from itertools import repeat
from operator import setitem
from os import PathLike
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from numpy.lib.stride_tricks import sliding_window_view

from forensics.core.errors import BadInput
from parsers._text import arrow_views_work, iter_byte_chunks, spans_array, view_array
from parsers.cublaslt import (
    CALL_COLUMNS, CATEGORY, HEADER_RE, HEURISTIC_COLUMNS, MESSAGE_COLUMNS, WHAT, CublasLtLog,
    _bucket, _call_row, _concat, _heuristic_row, _Line, _message_row, _objects, _Reader, _result, _series,
    join_categoricals,
)

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
    """A templated bucket (calls, heuristics, messages): its contract, row builder and template cache."""

    def __init__(self, contract: dict[str, str], parse) -> None:
        self.contract = contract
        self.parse = parse  # (reader, _Line) -> row dict
        self.cache: dict[tuple[str, str, str], int | None] = {}
        self.templates: list[_Template] = []

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


# --- vectorised path: numpy finds lines, headers and pointers; each template is parsed once ----

#: Bytes per chunk of the vectorised path (whole lines; the last one is cut at a newline). Three
#: buffers and two chunk-sized work arrays live at once, so this bounds the reader's working memory
#: (~5 chunks) whatever the file's size: 8 MiB read a 64 MiB log with 411 MiB peak RSS and 1.72 s
#: CPU, 64 MiB chunks with 691 MiB and 2.1 s (benchmarks/bench_cublaslt.py, docs/scale.md).
FAST_CHUNK_BYTES = 8 << 20
_PAD = 64  # zero bytes after a chunk, so fixed-offset header probes never index past its end
_HEX = np.zeros(256, dtype=bool)
_HEX[list(b"0123456789abcdefABCDEF")] = True
_NOT_TS = np.zeros(256, dtype=bool)
_NOT_TS[list(b"[]\n")] = True
_TAG = np.frombuffer(b"[cublasLt][", dtype=np.uint8)
_MAX_HEX = 24  # hex digits probed per pointer value
_TS_WIDTH = 19  # "YYYY-MM-DD HH:MM:SS"
_MAX_SEGMENTS = 256
_SEGMENT_MIX = np.random.default_rng(0x5EED).integers(1, 2**63, size=_MAX_SEGMENTS + 2, dtype=np.uint64) | np.uint64(1)


class Fallback(Exception):
    """The vectorised path does not take this file; the per-line path reads it (and finds any error)."""


def _message_static(reader: _Reader, ln: _Line) -> dict[str, Any]:
    """A message row without ``message`` (the vectorised path slices that from the line)."""
    row = _message_row(reader, ln)
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

    def raw(self, i: int) -> str:
        return self.body[self.starts[i]:self.ends[i]].decode("utf-8")


def _hex_run(body: bytearray, at: np.ndarray, width: int) -> np.ndarray:
    """How many hex digits start at each offset ``at`` (0: all ``width`` are; ``width`` a multiple of 8).

    The bytes are gathered 8 at a time (unaligned 64-bit loads) and tested by arithmetic: twice as
    fast as a window of single bytes looked up in ``_HEX`` (2.5 vs 6.9 ms for the 87,704 pointers of an
    8 MiB chunk). ``body`` must hold ``width`` bytes after the largest offset (the chunk's padding).
    """
    words = np.ndarray((len(body) - 7,), dtype="<u8", buffer=body, strides=(1,))
    out = np.empty((len(at), width // 8), dtype="<u8")
    for k in range(width // 8):
        out[:, k] = words[at + 8 * k]
    b = out.view(np.uint8)
    hexy = (b - np.uint8(48) < 10) | ((b | np.uint8(32)) - np.uint8(97) < 6)
    return np.argmin(hexy.reshape(len(at), width), axis=1)


def _locate(reader: _Reader, first: int, body: bytearray, length: int, scratch: list[np.ndarray] | None = None) -> _Chunk:
    """Find the lines, header fields and pointer values of a chunk without a Python loop per line.

    ``scratch`` (a list, filled on first use) keeps two chunk-sized work arrays between calls.
    """
    if body.find(b"\x00", 0, length) >= 0 or body.find(b"\r", 0, length) >= 0:
        raise Fallback("NUL or CR bytes")
    try:
        pa.LargeStringArray.from_buffers(1, pa.py_buffer(np.array([0, length], dtype=np.int64)),
                                         pa.py_buffer(body)).validate(full=True)
    except pa.ArrowInvalid:
        raise Fallback("not UTF-8") from None
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
    pid_bytes = sliding_window_view(a, 20)[starts + pid_at]
    n_digits = np.argmin(pid_bytes - np.uint8(48) < 10, axis=1)  # 0 also when all 20 are digits: not taken
    pid_end = starts + pid_at + n_digits
    ok &= (n_digits > 0) & (n_digits <= 18) & (a[pid_end] == 93)
    pid = np.zeros(len(starts), dtype=np.int64)
    for j in range(int(n_digits[ok].max()) if ok.any() else 0):
        use = j < n_digits
        pid[use] = pid[use] * 10 + (pid_bytes[use, j] - 48)
    for i in np.flatnonzero(~ok).tolist():  # not a cuBLASLt header: program output (rare)
        raw = body[starts[i]:ends[i]].decode("utf-8")
        if "[cublasLt]" in raw:
            raise Fallback("an unusual header")
        reader._foreign(first + i, raw)
    lines = np.flatnonzero(ok)
    # pointer values: "=0X<hex>" / "=0x<hex>" (what _POINTER matches), the value without the "="
    x = np.flatnonzero(np.equal(np.bitwise_or(a[:length], 32, out=work), 120, out=hits))  # 'x' / 'X'
    x = x[x >= 2]
    eq = x[(a[x - 1] == 48) & (a[x - 2] == 61) & _HEX[a[x + 1]]] - 2
    run = _hex_run(body, eq + 3, 16)  # the first digit is known hex
    longer = np.flatnonzero(run == 0)  # argmin 0: all 16 bytes are hex digits
    if len(longer):
        run[longer] = _hex_run(body, eq[longer] + 3, _MAX_HEX)
        if (run == 0).any():
            raise Fallback("a very long pointer value")
    ptr_end = eq + 3 + run
    line_of = np.searchsorted(ends, eq)  # index among all lines
    keep = ok[line_of]
    eq, ptr_end, line_of = eq[keep], ptr_end[keep], line_of[keep]
    if (eq < pid_end[line_of]).any():
        raise Fallback("pointer-like text in a header")
    n_ptr = np.bincount(line_of, minlength=len(starts))[lines]
    first_ptr = np.zeros(len(lines), dtype=np.int64)
    np.cumsum(n_ptr[:-1], out=first_ptr[1:])
    return _Chunk(first, body, starts[lines], ends[lines], has_ts[lines], pid[lines], pid_end[lines],
                  n_ptr, first_ptr, lines, eq + 1, ptr_end)


def _span_views(body: bytearray, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The byte ranges ``body[starts[i]:ends[i]]`` as an Arrow ``string_view`` array over ``body``
    itself (:func:`parsers._text.view_array`): ``body`` holds 16 bytes after the last range, and
    each range is UTF-8 (a chunk validated whole, cut at ASCII bytes)."""
    return view_array(pa.string_view(), body, np.frombuffer(body, np.uint8), starts, ends - starts)


def _span_codes(body: bytearray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """A code per byte range, equal for equal bytes (first seen, first numbered), as int64: Arrow's
    hash over views of the chunk (:func:`_span_views`); slicing the ranges into a string array first
    (``spans_array``) cost more than the hashing."""
    # string views over the chunk's own bytes, where the host and pyarrow take them (not pyarrow 17)
    spans = _span_views(body, starts, ends) if arrow_views_work() else spans_array(body, starts, ends)
    return pc.dictionary_encode(spans).indices.to_numpy().astype(np.int64)


def _line_groups(ch: _Chunk) -> tuple[np.ndarray, np.ndarray]:
    """Group lines that differ only in timestamp, pid and pointer values: (group of each line, first line of each group)."""
    n = len(ch.starts)
    n_seg = ch.n_ptr + 1
    if n and n_seg.max() > _MAX_SEGMENTS:
        raise Fallback("too many pointers on one line")
    seg_first = np.zeros(n, dtype=np.int64)
    np.cumsum(n_seg[:-1], out=seg_first[1:])
    total = int(n_seg.sum())
    seg_line = np.repeat(np.arange(n), n_seg)
    j = np.arange(total) - seg_first[seg_line]  # segment position in its line
    # a line's segments run from the pid's "]" to its first pointer, between its pointers, and from its
    # last pointer to its end: the pointers are in file order, so each is placed by a mask, not gathered
    first_seg = np.zeros(total, dtype=bool)
    first_seg[seg_first] = True
    last_seg = np.zeros(total, dtype=bool)
    last_seg[seg_first + n_seg - 1] = True
    seg_start = np.empty(total, dtype=np.int64)
    seg_start[first_seg] = ch.pid_end
    seg_start[~first_seg] = ch.ptr_end
    seg_end = np.empty(total, dtype=np.int64)
    seg_end[last_seg] = ch.ends
    seg_end[~last_seg] = ch.ptr_start
    codes = _span_codes(ch.body, seg_start, seg_end)
    mixed = codes.astype(np.uint64) * _SEGMENT_MIX[j]
    key = np.add.reduceat(mixed, seg_first) if total else np.zeros(0, dtype=np.uint64)
    key += ch.has_ts.astype(np.uint64) * _SEGMENT_MIX[-1] + n_seg.astype(np.uint64) * _SEGMENT_MIX[-2]
    _, firsts, group = np.unique(key, return_index=True, return_inverse=True)
    rep = firsts[group]  # verify exactly: same shape and same segment codes as the group's first line
    same = (n_seg[rep] == n_seg) & (ch.has_ts[rep] == ch.has_ts)
    if not same.all() or not (codes[seg_first[rep][seg_line] + j] == codes).all():
        raise Fallback("template hash collision")
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
        #: each bucket's chunk pieces not yet framed: framed together, once, when the bucket's
        #: template cache is reset and at the end (one part per bucket on most logs)
        self.pieces: dict[str, list[_Piece]] = {name: [] for name in self.buckets}

    def target(self, level: str, function: str) -> int:
        t = self.targets.get((level, function))
        if t is None:
            t = self.targets[(level, function)] = self.names.index(_bucket(level, function))
        return t

    def frame_pieces(self, name: str) -> None:
        """Frame the pending pieces of bucket ``name`` (before its templates are dropped, and at the end)."""
        if self.pieces[name]:
            pa.default_memory_pool().release_unused()  # the chunks' freed work memory, before the columns are built
            _give_back()
            self.parts[name].append(_part_frame(self.buckets[name], self.pieces[name]))
            self.pieces[name] = []


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
            raise Fallback("header probe disagrees with HEADER_RE")
        ts, _, level, function = m.groups()
        rest = raw[m.end():]
        n_regex = len(_POINTER.findall(rest))
        if n_regex != ch.n_ptr[r] or "\x01" in rest:
            raise Fallback("pointer probe disagrees with _POINTER")
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
            st.pieces[name].append(_gather_piece(st.buckets[name], ch, sel, tid_of[sel], hdr_end))
    for name, bucket in st.buckets.items():
        if len(bucket.templates) > MAX_TEMPLATES:
            st.frame_pieces(name)  # the pieces' template ids index this list
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
        if all(v is None for v in values):  # a pointer column (its values are placed after)
            return _string(pa.nulls(len(inverse), pa.large_string()))
        return _string(pa.array(values, type=pa.large_string()).take(take))
    if dtype == CATEGORY:  # codes gathered, each template's text once
        if not all(v is None or type(v) is str for v in values):
            return _series(values, CATEGORY).array.take(inverse)
        # what _series(values, CATEGORY) gives (categories: the distinct texts, sorted), built from
        # the codes: 0.25 vs 1.3 ms a column of 100,000 rows
        categories = sorted({v for v in values if v is not None})
        position = {v: i for i, v in enumerate(categories)}
        codes = np.array([-1 if v is None else position[v] for v in values], dtype=np.int32)
        return pd.Categorical.from_codes(codes[inverse], dtype=pd.CategoricalDtype(pd.Index(categories, dtype="string")),
                                         validate=False)
    return _objects(values)[inverse]


@dataclass
class _Piece:
    """A bucket's rows of one chunk: what differs per line. The template columns are not built
    here but once per part (:func:`_part_frame`), over all its rows: built per chunk, ~50 columns
    a bucket through pandas, they took half of a 65 MiB read's CPU (docs/scale.md)."""

    tids: np.ndarray  # template of each row
    line: np.ndarray
    pid: np.ndarray
    timestamp: pa.Array
    message: pa.Array | None
    pointers: dict[str, pa.Array]  # column -> the row's pointer value, null where its template holds none there
    dicts: dict[str, np.ndarray]  # dict column -> each row's dict (None where its template has none)


def _dense(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(ids, return_inverse=True)`` for small non-negative ids, without sorting."""
    present = np.zeros(int(ids.max()) + 1 if len(ids) else 0, dtype=bool)
    present[ids] = True
    used = np.flatnonzero(present)
    return used, (np.cumsum(present) - 1)[ids]


def _gather_piece(bucket: _Templated, ch: _Chunk, sel: np.ndarray, tids: np.ndarray, hdr_end: np.ndarray) -> _Piece:
    """The rows ``sel`` of a chunk: per-line columns sliced from the bytes, pointer values and dicts placed."""
    contract = bucket.contract
    used, inverse = _dense(tids)
    templates = [bucket.templates[u] for u in used.tolist()]
    n = len(sel)
    starts, ends, has_ts = ch.starts[sel], ch.ends[sel], ch.has_ts[sel]
    timestamp = spans_array(ch.body, np.where(has_ts, starts + 1, starts), np.where(has_ts, starts + 1 + _TS_WIDTH, starts),
                            has_ts)
    message = spans_array(ch.body, hdr_end[sel], ends) if "message" in contract else None
    dicts: dict[str, np.ndarray] = {}
    ptr_index: dict[str, np.ndarray] = {}
    placed: list[tuple[list[dict], str, np.ndarray]] = []  # (a template's row dicts, key, the rows' pointer indices)
    if any(t.ptr_cols or t.ptr_dicts or any(isinstance(v, dict) for v in t.static.values()) for t in templates):
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(used) + 1))
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
                if col not in dicts:
                    dicts[col] = np.empty(n, dtype=object)
                entries = [(key, i) for c, key, i in tpl.ptr_dicts if c == col]
                if not entries:  # the same fields on every row of the template: one dict, shared by its rows
                    dicts[col][group] = _objects([dict(base)] * len(group))
                    continue
                values = list(map(dict.copy, repeat(base, len(group))))  # C loops; keys keep the template's order
                placed.extend((values, key, first_ptr + i) for key, i in entries)
                dicts[col][group] = _objects(values)
        if placed:  # the dicts' pointer values, as Python strings made once for the chunk
            wanted = np.concatenate([idx for _, _, idx in placed])  # each pointer once: one (row, key) holds it
            order = np.argsort(wanted, kind="stable")
            codes = pc.dictionary_encode(spans_array(ch.body, ch.ptr_start[wanted[order]], ch.ptr_end[wanted[order]]))
            texts = np.empty(len(wanted), dtype=object)
            texts[order] = _objects(codes.dictionary.to_pylist())[codes.indices.to_numpy()]  # a repeated value ("0X0") held once
            at = 0
            for values, key, idx in placed:
                deque(map(setitem, values, repeat(key), texts[at:at + len(idx)]), 0)
                at += len(idx)
    pointers = {col: _pointer_column(ch, idx, starts) for col, idx in ptr_index.items()}
    return _Piece(tids, ch.first + ch.lines[sel], ch.pid[sel], timestamp, message, pointers, dicts)


def _pointer_column(ch: _Chunk, idx: np.ndarray, starts: np.ndarray) -> pa.LargeStringArray:
    """Each row's pointer ``idx`` (-1: none, null) sliced from the chunk; a row without one gets an
    empty range at its line's start, so the ranges stay in file order."""
    valid = idx >= 0
    if valid.all():
        return spans_array(ch.body, ch.ptr_start[idx], ch.ptr_end[idx])
    at = np.where(valid, idx, 0)
    return spans_array(ch.body, np.where(valid, ch.ptr_start[at], starts), np.where(valid, ch.ptr_end[at], starts), valid)


def _part_frame(bucket: _Templated, pieces: list[_Piece]) -> pd.DataFrame:
    """The frame of a bucket's pieces: template columns gathered once over all their rows."""
    contract = bucket.contract
    tids = np.concatenate([p.tids for p in pieces])
    used, inverse = _dense(tids)
    templates = [bucket.templates[u] for u in used.tolist()]
    n = len(tids)
    cols: dict[str, Any] = {
        "line": pd.arrays.IntegerArray(np.concatenate([p.line for p in pieces]), np.zeros(n, dtype=bool)),
        "pid": pd.arrays.IntegerArray(np.concatenate([p.pid for p in pieces]), np.zeros(n, dtype=bool)),
        "timestamp": _string(pa.chunked_array([p.timestamp for p in pieces], type=pa.large_string())),
    }
    if "message" in contract:
        cols["message"] = _string(pa.chunked_array([p.message for p in pieces], type=pa.large_string()))
    for col in dict.fromkeys(c for p in pieces for c in p.dicts):
        cols[col] = np.concatenate([p.dicts[col] if col in p.dicts else np.full(len(p.tids), None, dtype=object)
                                    for p in pieces])
    take = pa.array(inverse)
    try:
        for col, dtype in contract.items():
            if col not in cols:
                cols[col] = _static_column([t.static.get(col) for t in templates], dtype, inverse, take)
    except (OverflowError, TypeError, ValueError) as e:
        raise Fallback(f"template value does not fit its column: {e}") from None
    for col in dict.fromkeys(c for p in pieces for c in p.pointers):
        if contract[col] != "string":
            raise Fallback(f"pointer value in non-string column {col}")
        taken = pa.chunked_array([p.pointers.pop(col) if col in p.pointers else pa.nulls(len(p.tids), pa.large_string())
                                  for p in pieces], type=pa.large_string())
        static = cols[col]._pa_array
        if static.null_count == len(static):  # no template holds text there: the pointers as taken (no copy)
            cols[col] = _string(taken)
        else:
            cols[col] = _string(pc.if_else(pc.is_valid(taken), taken, static))
        del taken, static
    for col, dtype in contract.items():
        if dtype == CATEGORY and not isinstance(cols[col], pd.Categorical):  # timestamps sliced from the bytes
            cols[col] = pd.Series(cols[col], copy=False).astype(CATEGORY).array
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


class Final(Exception):
    """A ``BadInput`` the vectorised path is sure of (the per-line path would raise the same)."""

    def __init__(self, error: BadInput):
        super().__init__(str(error))
        self.error = error


def fast_read(path: str | PathLike[str], tolerate_truncated_tail: bool) -> CublasLtLog:
    """The vectorised read; raises ``Fallback`` for anything it does not take (damage included)."""
    reader = _Reader(path, tolerate_truncated_tail)
    st = _FastState()
    cut: _CutTail | None = None
    with closing(_located_chunks(reader, path)) as chunks:  # stops the helper thread on any exit
        for ch in chunks:
            if isinstance(ch, _CutTail):
                cut = ch
            else:
                _fast_chunk(reader, st, ch)
                # Arrow's pool (mimalloc here) keeps a chunk's freed work buffers: given back after each
                # chunk, the 257 MiB log peaked 15 MiB lower (510 vs 525 MiB, same CPU; docs/scale.md)
                pa.default_memory_pool().release_unused()
    if not sum(reader.level_counts.values()):
        raise Fallback("no cuBLASLt line")
    if cut is not None:  # every earlier line parsed: the cut line is the first damage
        if b"\x00" in cut.raw or b"\r" in cut.raw:
            raise Fallback("NUL or CR in the cut line")
        try:
            raw = cut.raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Fallback("cut line is not UTF-8") from None
        try:
            reader._cut_tail(cut.line, raw)
        except BadInput as e:
            raise Final(e) from None
    reader.finish()
    for name in st.names:
        st.frame_pieces(name)
    frames = {name: _concat_columns(parts, st.buckets[name].contract) for name, parts in st.parts.items()}
    return _result(reader, frames)


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None elsewhere: musl, macOS, Windows)."""
    try:
        return ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError, TypeError):
        return None


_TRIM = _malloc_trim()
#: Columns joined between two returns of freed memory to the OS (each return costs ~1 ms).
_TRIM_EVERY = 8


def _give_back() -> None:
    """Return the C heap's free pages to the OS. The chunk frames' integer and object columns are
    small allocations from the heap; once joined, their pieces are free but glibc keeps the pages,
    and the joined columns (large, mapped apart) come on top: on a 257 MiB log the join raised RSS
    by 92 MiB where the data grew by nothing."""
    if _TRIM is not None:
        _TRIM(0)


def _concat_columns(parts: list[pd.DataFrame], contract: dict[str, str]) -> pd.DataFrame:
    """Concatenate chunk frames column by column, releasing each part's column once copied.

    Peak memory is the result plus a few columns, not twice the frame (Arrow string columns are
    joined as chunks, without copying their text); the pieces' freed memory goes back to the OS
    every :data:`_TRIM_EVERY` columns.
    """
    if len(parts) <= 1:
        return _concat(parts, contract)
    # each part's columns as arrays (no copy); deleting a column from a DataFrame copied the rest of
    # its block each time (0.69 s of 2.06 s CPU on a 64 MiB log, 8 MiB chunks)
    arrays = [{col: p[col].array for col in contract} for p in parts]
    parts.clear()
    _give_back()  # what the chunks' work arrays left free, before the joined columns are allocated
    columns: dict[str, Any] = {}
    for i, col in enumerate(contract, 1):
        chunks = [a.pop(col) for a in arrays]
        if contract[col] == CATEGORY and all(isinstance(c, pd.Categorical) for c in chunks):
            columns[col] = join_categoricals(chunks)
        elif all(type(c) is type(chunks[0]) and c.dtype == chunks[0].dtype for c in chunks):
            columns[col] = type(chunks[0])._concat_same_type(chunks)
        else:  # parts typed differently: pandas finds the common dtype
            columns[col] = pd.concat([pd.Series(c, copy=False) for c in chunks], ignore_index=True).array
        del chunks
        if i % _TRIM_EVERY == 0:
            _give_back()
    _give_back()
    return pd.DataFrame(columns, copy=False)
