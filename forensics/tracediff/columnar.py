"""The differ's columnar fast path: the matching part of two native rank files, compared in bulk.

Most of two traces of one program match record for record; the per-rank walk
(:mod:`forensics.tracediff.walk`) spends its time parsing and comparing those records one by one in
Python. This module reads both rank files in blocks and compares them as arrays:

* both files' lines must have the form our tracer writes, ``{"seq":N,"id":"...",...}``: each
  line's seq, identity and the text after its seq are read from the block's bytes with numpy
  (:mod:`forensics.tracediff.columnar_scan`, no Python object per line);
* run A's records are checked by *template* (the line after its identity, with the digest strings
  blanked, which the checks read only as strings): each template is parsed once by the walk's own
  reader and checks (seq aside: increasing, from the head), and what it gives (valid, step, weak
  evidence, a GEMM, an uninitialised op) holds for every line with it. A block with many new
  templates is parsed by pyarrow's JSON reader instead (C++, an explicit schema: a value of the
  wrong type fails the block) and the native reader's checks are applied to its columns (non-empty
  id and op, a kind, steps, shapes, numel = product of the shape, digests as text, known evidence
  levels, memory layouts ``ol`` that are permutations of the dims);
* records are aligned by identity within *closed segments* (runs of positions where both files
  hold the same set of identities: one record when the order is the same, a few when neighbours
  swapped), and a pair is equal when its two lines are byte for byte the same after the seq. Equal
  text is equal values, so B's record passes every check A's passed.

It never decides a divergence. It finds the longest prefix of segments in which every pair is equal
and every record passes the reader's checks (and, since the walk's reader is orjson, is valid UTF-8
and nested fewer than 1,024 levels), computes what the walk would have accumulated over that prefix
(records compared, steps, matches resting on weak evidence, the GEMM site counts, the tensors of
uninitialised ops, the last pair) and returns where each file resumes. The walk starts there with
that state: whatever follows (the first divergence, a control-flow region, a partial end, a
malformed line and its ``file:line``) is decided by the same code as before, so the verdicts are
the same. Anything not handled exactly here (another key order, an escaped identity, a record kind
left out, a segment longer than the walk's window, an identity twice in a segment, a record the
walk's checks refuse, a block Arrow's schema refuses) only ends the prefix.

Memory: one block of each file, the records of the current segments and at most
``columnar_scan.Templates.LIMIT`` templates, never the trace.
"""
from __future__ import annotations

import io
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from forensics.tracediff import columnar_scan as scan
from parsers._text import arrow_views_work
from forensics.tracediff.traces import EVIDENCE_LEVELS

BLOCK_BYTES = 8 << 20  # bytes of JSON lines parsed at once per file
#: smaller rank files are walked record by record: setting up the columnar reader costs more there
MIN_BYTES = 1 << 20
ROUND_ROWS = 1 << 15  # records aligned per round (a segment never spans more than the walk's window)

_ENTRY = pa.struct([("s", pa.list_(pa.int64())), ("t", pa.string()), ("n", pa.int64()), ("h", pa.string()),
                    ("o", pa.string()), ("c", pa.list_(pa.string())), ("ev", pa.string()), ("ol", pa.list_(pa.int64())),
                    ("g", pa.string())])
SCHEMA = pa.schema([
    ("type", pa.string()), ("seq", pa.int64()), ("id", pa.string()), ("op", pa.string()), ("kind", pa.string()),
    ("step", pa.int64()), ("phase", pa.string()), ("in", pa.list_(_ENTRY)), ("out", pa.list_(_ENTRY)),
    # meta is read only to know whether it is an object (or null) and whether it names a GEMM
    ("meta", pa.struct([("gemm", pa.struct([]))])),
])
_PARSE = pj.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore")
_READ = pj.ReadOptions(block_size=1 << 20, use_threads=True)  # 1 MiB chunks: both cores busy
_EXACT_PRODUCT = float(1 << 53)
#: a record's 'in' or 'out' given as null: Arrow's reader cannot tell it from an absent key
_NULL_LIST = re.compile(rb'"(?:in|out)"\s*:\s*null')
#: orjson (the walk's reader) refuses JSON nested deeper than 1,024 levels: a line with this many
#: brackets is left to it
_MAX_BRACKETS = 1000


class Unsupported(Exception):
    """This file cannot be read exactly here: the caller walks the rank from its first record."""


@dataclass
class Resume:
    """Where one file resumes after the prefix: its byte offset, line number and last seq read."""

    offset: int
    line: int
    last_seq: int
    records: int  # records before it


@dataclass
class Prefix:
    """What the walk would have accumulated over the records compared here."""

    pairs: int = 0
    steps: list[Any] = field(default_factory=list)
    unproven: int = 0
    last_pair: tuple[tuple[bytes, int], tuple[bytes, int]] | None = None  # (A line, its line no), (B line, no)
    last_b_seq: int = -1
    a: Resume | None = None
    b: Resume | None = None
    blocks: int = 0  # A's blocks read
    json_blocks: int = 0  # of which by Arrow's JSON reader (too many new templates)
    templates: int = 0  # distinct templates parsed (the cache is cleared when full)


# --------------------------------------------------------------------------- reading blocks
class _Side:
    """One rank file read in blocks: a table of its records' columns and each record's offset and line."""

    def __init__(self, path: Path, full: bool, use_ordered: bool = True, uninitialised: str | None = None) -> None:
        self.path = Path(path)
        self.full = full  # A: every record checked (by template); B: seq, identity and the text after the seq
        self.templates = scan.Templates(use_ordered, uninitialised) if full else None
        self.use_ordered, self.uninitialised = use_ordered, uninitialised
        self.f = open(self.path, "rb")  # noqa: SIM115 - closed by close()
        head = self.f.readline()
        self.pos = len(head)  # file offset of the next unread byte
        self.next_line = 2
        self.carry = b""
        self.eof = False
        self.stopped = False  # a block the columnar reader does not read: nothing past it is compared here
        self.table: pa.Table | None = None
        self.offsets = np.zeros(0, np.int64)  # byte offset of each buffered record's line
        self.lines = np.zeros(0, np.int64)  # its line number
        self.raw: list[bytes] = []  # the buffered blocks' bytes, and where each starts
        self.raw_starts: list[int] = []
        self.blocks = 0  # blocks read
        self.arrow_blocks = 0  # A's blocks read by Arrow's JSON reader (too many new templates)

    def close(self) -> None:
        self.f.close()

    def __len__(self) -> int:
        return 0 if self.table is None else self.table.num_rows

    def fill(self, rows: int) -> None:
        """Read blocks until ``rows`` records are buffered or the file ends."""
        while len(self) < rows and not self.eof:
            kept = len(self.carry)
            data = bytearray(kept + BLOCK_BYTES + scan.PAD)  # zeros after the data: see scan.PAD
            data[:kept] = self.carry
            with memoryview(data) as view:
                got = self.f.readinto(view[kept:kept + BLOCK_BYTES])
            if not got:
                self.eof = True
                break
            size = kept + got
            buf = np.frombuffer(data, dtype=np.uint8)
            ends = np.flatnonzero(buf[:size] == 10)  # each line's newline (no line objects)
            if not len(ends):
                self.carry = bytes(data[:size])
                continue
            cut = int(ends[-1]) + 1
            start = self.pos
            begins = np.concatenate(([0], ends[:-1] + 1))
            lens = ends - begins
            tb = None if not lens.all() else self._parse(data, cut, buf, begins, ends)
            if tb is None:  # a blank line, bytes that are not UTF-8, a value the schema refuses:
                self.eof = self.stopped = True  # the prefix ends before this block (the walk reads it)
                break
            self.carry = bytes(data[cut:size])
            self.pos += cut
            self.table = tb if self.table is None else pa.concat_tables([self.table, tb])
            self.offsets = np.concatenate((self.offsets, begins + start))
            self.lines = np.concatenate((self.lines, np.arange(self.next_line, self.next_line + len(begins))))
            self.next_line += len(begins)
            self.raw.append(data)
            self.raw_starts.append(start)
            self.blocks += 1

    def _parse(self, data: bytearray, cut: int, buf: np.ndarray, begins: np.ndarray,
               ends: np.ndarray) -> pa.Table | None:
        """The block ``data[:cut]``'s records as a table: ``seq`` and ``id`` read from each line's
        head, ``line`` (the text after the seq), all null where the line is not in our tracer's
        form; for A also ``valid`` (the native reader's checks, but for seq order), ``step``,
        ``unproven``, ``gemm`` and ``uninit`` (see :mod:`forensics.tracediff.columnar_scan`). B's
        records need no check: a pair is compared only when B's text after the seq is A's, byte
        for byte."""
        n = len(begins)
        h = scan.heads(data, begins, ends)
        ok = h.ok
        cols: dict[str, Any] = {}
        if self.full:
            offsets = pa.py_buffer(np.array([0, cut], np.int32))
            try:  # UTF-8 (orjson refuses what is not): B's compared lines are A's bytes after the seq
                pa.Array.from_buffers(pa.binary(), 1, [None, offsets, pa.py_buffer(data)]).cast(pa.string())
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                return None
            specials = scan.specials_of(data, cut, ends)
            ok = ok & scan.plain(specials, h.id_start, h.id_end)  # the identity: no escape, no control byte
            lens = ends - begins
            deep = lens >= 2 * _MAX_BRACKETS  # only a line this long can nest that deep: count its brackets
            for i in np.flatnonzero(deep):
                deep[i] = data.count(b"[", begins[i], ends[i]) + data.count(b"{", begins[i], ends[i]) >= _MAX_BRACKETS
        ids = scan.binary(data, buf, h.id_start, h.id_end - h.id_start, ok)
        if self.full:
            cols = self.templates.columns(data, cut, begins, ok, h.id_end, ends, max(64, n // 8))
            if cols is None:  # many new templates (lines unlike each other): Arrow's JSON reader, in C
                self.arrow_blocks += 1
                cols = self._parse_json(bytes(data[:cut]), n, h, ids)
                if cols is None:
                    return None
            cols["valid"] = cols["valid"] & ok & ~deep
        rest = scan.binary(data, buf, h.rest_start, ends + 1 - h.rest_start, ok)
        seq = pa.array(h.seq, mask=~ok)
        return pa.table({"seq": seq, "id": ids, "line": rest, **cols})

    def _parse_json(self, block: bytes, n: int, h: scan.Heads, ids: pa.Array) -> dict[str, Any] | None:
        """A's per-record columns from Arrow's JSON reader (explicit schema, every column) and the
        checks applied to its columns; None when the block is refused."""
        if _NULL_LIST.search(block):  # 'in' or 'out' null (bad input to the walk) reads as absent here
            return None
        try:
            tb = pj.read_json(io.BytesIO(block), read_options=_READ, parse_options=_PARSE)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return None
        if tb.num_rows != n:
            return None
        valid = _records_valid(tb)
        valid &= _np_int(tb.column("seq"), -1) == np.where(h.ok, h.seq, -2)  # the head's seq and id (no later key)
        valid &= _np_bool(pc.equal(pc.cast(_combine(tb.column("id")), pa.binary()), ids))
        outs = _combine(tb.column("out"))
        strong = _per_row(outs, _entries_strong(pc.list_flatten(outs), self.use_ordered), n)
        unproven = (_np_int(pc.list_value_length(outs), 0) > 0) & ~strong
        gemm = ~_np_bool(pc.is_null(pc.struct_field(_combine(tb.column("meta")), "gemm")))
        uninit = np.zeros(n, dtype=bool)
        if self.uninitialised:
            search = re.compile(self.uninitialised).search
            names = pc.dictionary_encode(pc.fill_null(tb.column("op"), "")).combine_chunks()
            hits = np.array([bool(search(x)) for x in names.dictionary.to_pylist()] or [False])
            uninit = hits[np.asarray(names.indices.to_numpy(zero_copy_only=False), dtype=np.int64)]
        return {"valid": valid, "step": _combine(tb.column("step")), "unproven": unproven, "gemm": gemm,
                "uninit": uninit}

    def line_bytes(self, row: int) -> bytes:
        """The raw bytes of a buffered record's line."""
        off = int(self.offsets[row])
        for block, start in zip(reversed(self.raw), reversed(self.raw_starts)):
            if off >= start:
                end = block.index(b"\n", off - start)
                return bytes(block[off - start:end + 1])
        raise IndexError(row)

    def drop(self, rows: int) -> None:
        """Forget the first ``rows`` buffered records (and the blocks no longer needed)."""
        if rows <= 0:
            return
        self.table = self.table.slice(rows)
        self.offsets = self.offsets[rows:]
        self.lines = self.lines[rows:]
        keep_from = int(self.offsets[0]) if len(self.offsets) else self.pos
        while len(self.raw_starts) > 1 and self.raw_starts[1] <= keep_from:
            self.raw.pop(0)
            self.raw_starts.pop(0)
        if not len(self.offsets):
            self.raw, self.raw_starts = [], []


# --------------------------------------------------------------------------- array helpers
def _np_bool(a: pa.Array | pa.ChunkedArray) -> np.ndarray:
    return np.asarray(pc.fill_null(a, False).to_numpy(zero_copy_only=False), dtype=bool)


def _np_int(a: pa.Array | pa.ChunkedArray, fill: int) -> np.ndarray:
    return np.asarray(pc.fill_null(a, fill).to_numpy(zero_copy_only=False), dtype=np.int64)


def _combine(a: pa.Array | pa.ChunkedArray) -> pa.Array:
    return a.combine_chunks() if isinstance(a, pa.ChunkedArray) else a


def _segments(lists: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(length of each list (null: 0), start of each list's values in ``pc.list_flatten``)."""
    lens = _np_int(pc.list_value_length(lists), 0)
    return lens, np.cumsum(lens) - lens


def _entries_valid(e: pa.StructArray) -> np.ndarray:
    """Per entry: the checks of the native reader (non-negative shape and numel, numel = product of
    the shape, chunk digests without nulls, a known evidence level, a memory layout ``ol`` that is a
    permutation of the shape's dims). A product too large to check exactly here counts as invalid
    (the walk checks it)."""
    present = ~_np_bool(pc.is_null(e))
    n = pc.struct_field(e, "n")
    nv = _np_int(n, 0)
    ok = nv >= 0
    ok &= ~_np_bool(pc.is_null(pc.struct_field(e, "t")))  # every entry names its dtype (native._entry_ok)
    ev = pc.struct_field(e, "ev")
    ok &= _np_bool(pc.is_in(pc.fill_null(ev, "full"), value_set=pa.array(list(EVIDENCE_LEVELS))))
    s = _combine(pc.struct_field(e, "s"))
    lens, starts = _segments(s)
    flat = pc.list_flatten(s)
    prod = np.ones(len(e), dtype=np.float64)
    if len(flat):
        nulls = _np_bool(pc.is_null(flat))
        v = _np_int(flat, 0)
        bad = nulls | (v < 0) | (v >= 1 << 52)
        badc = np.add.reduceat(bad.astype(np.int64), starts[lens > 0]) if (lens > 0).any() else np.zeros(0, np.int64)
        has = np.flatnonzero(lens > 0)
        ok[has] &= badc == 0
        vf = np.where(bad, 1, v).astype(np.float64)
        prod[has] = np.multiply.reduceat(vf, starts[has])
    check = ~_np_bool(pc.is_null(s)) & ~_np_bool(pc.is_null(n))
    ok &= ~check | ((prod < _EXACT_PRODUCT) & (prod == nv.astype(np.float64)))
    c = _combine(pc.struct_field(e, "c"))
    cflat = pc.list_flatten(c)
    if len(cflat):
        clens, cstarts = _segments(c)
        has = np.flatnonzero(clens > 0)
        nulls = _np_bool(pc.is_null(cflat)).astype(np.int64)
        ok[has] &= np.add.reduceat(nulls, cstarts[has]) == 0
    ol = _combine(pc.struct_field(e, "ol"))
    ok &= _layouts_valid(ol, s)
    return np.where(present, ok, True)


def _layouts_valid(ol: pa.Array, s: pa.Array) -> np.ndarray:
    """Per entry: its memory layout ``ol`` is absent, or a permutation of 0..k-1 (no null, no
    negative, no repeat) with k the number of dims of its shape when the shape is recorded: what
    ``native._layout_problem`` accepts."""
    ok = np.ones(len(ol), dtype=bool)
    olens, _ = _segments(ol)
    has_ol = ~_np_bool(pc.is_null(ol))
    has_s = ~_np_bool(pc.is_null(s))
    ok &= ~(has_ol & has_s) | (olens == _np_int(pc.list_value_length(s), 0))
    flat = pc.list_flatten(ol)
    if len(flat):
        parent = np.repeat(np.arange(len(ol)), olens)  # list_flatten's order: each list's values in turn
        v = _np_int(flat, -1)  # a null counts as a negative value: invalid
        size = olens[parent]
        bad = (v < 0) | (v >= size)
        order = np.lexsort((v, parent))  # within each list, its values ascending
        pos = np.arange(len(v)) - (np.cumsum(olens) - olens)[parent]  # each value's index in its list
        # sorted, each list is 0..k-1 exactly when no value repeats (parent is ascending, so the
        # sort keeps every list at its own positions: a flag at sorted index i is parent[i]'s)
        bad |= v[order] != pos
        ok &= np.bincount(parent[bad], minlength=len(ol)) == 0
    return ok


def _entries_strong(e: pa.StructArray, use_ordered: bool) -> np.ndarray:
    """Per entry: equality of two equal entries rests on a full digest (not a weak-evidence match)."""
    full = _np_bool(pc.equal(pc.fill_null(pc.struct_field(e, "ev"), "full"), "full"))
    digest = ~_np_bool(pc.is_null(pc.struct_field(e, "h")))
    if use_ordered:
        digest |= ~_np_bool(pc.is_null(pc.struct_field(e, "o")))
    return np.where(_np_bool(pc.is_null(e)), True, full & digest)


def _per_row(lists: pa.Array, per_entry: np.ndarray, rows: int) -> np.ndarray:
    """Rows whose every entry has ``per_entry`` true (empty and null lists: true)."""
    lists = _combine(lists)
    parent = np.asarray(pc.list_parent_indices(lists).to_numpy(zero_copy_only=False), dtype=np.int64)
    return np.bincount(parent[~per_entry], minlength=rows) == 0


def _seq_valid(t: pa.Table, last_seq: int) -> np.ndarray:
    """Per record: a seq, greater than the one before (nothing after the first failure is trusted)."""
    seq = t.column("seq")
    s = _np_int(seq, -1)
    ok = ~_np_bool(pc.is_null(seq)) & (s > np.concatenate(([last_seq], s[:-1])))
    first_bad = np.flatnonzero(~ok)
    if len(first_bad):
        ok[first_bad[0]:] = False
    return ok


def _records_valid(t: pa.Table) -> np.ndarray:
    """Per record read by Arrow's JSON reader: a plain record line the native reader would accept,
    but for its seq's order (types are the schema's)."""
    n = t.num_rows
    typ = t.column("type")
    ok = _np_bool(pc.or_kleene(pc.is_null(typ), pc.equal(typ, "op")))
    ok &= ~_np_bool(pc.is_null(t.column("seq")))
    for name in ("id", "op"):
        col = t.column(name)
        ok &= _np_int(pc.utf8_length(col), 0) > 0
    ok &= ~_np_bool(pc.is_null(t.column("kind")))  # explicit null (invalid) cannot be told from absent ("op")
    ok &= _np_int(t.column("step"), 0) >= 0
    for side in ("in", "out"):
        lists = _combine(t.column(side))
        ents = pc.list_flatten(lists)
        ok &= _per_row(lists, _entries_valid(ents), n)
    return ok


# --------------------------------------------------------------------------- alignment
def _closures(codes_a: np.ndarray, codes_b: np.ndarray, n_codes: int) -> np.ndarray:
    """Positions p (1..n) where A[:p] and B[:p] hold the same identities (random 64-bit weights per
    identity, summed: equal sums mark candidates, verified exactly afterwards)."""
    rng = np.random.default_rng(0x5EED)
    w = rng.integers(1, np.iinfo(np.int64).max, size=max(n_codes, 1), dtype=np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        ca = np.cumsum(w[codes_a], dtype=np.uint64)
        cb = np.cumsum(w[codes_b], dtype=np.uint64)
    return np.flatnonzero(ca == cb) + 1


def _step_key(col: pa.ChunkedArray) -> np.ndarray:
    return _np_int(col, -1)


def compare_prefix(path_a: Path, path_b: Path, use_ordered: bool = True, window: int = 16_384,
                   uninitialised: str | None = None, on_gemm: Callable[[bytes, int], None] | None = None,
                   on_uninitialised: Callable[[bytes, int, bytes, int], None] | None = None) -> Prefix:
    """The longest prefix of matching, valid segments of two native rank files (see the module text).

    ``on_gemm(line, line_no)`` is called, in A's order, for every A record of the prefix whose meta
    names a GEMM (the walk counts site occurrences from them); ``on_uninitialised(line_a, no_a, line_b, no_b)``
    (with their line numbers) for every pair whose op matches the regular expression ``uninitialised`` (its outputs are
    garbage: the walk follows them). Raises :class:`Unsupported` when a file cannot be opened here
    (the walk reads it and says why), or when this pyarrow builds no binary views over our
    buffers (17, 18: the walk reads the files, with the same report)."""
    if not arrow_views_work():
        raise Unsupported(f"pyarrow {pa.__version__} builds no binary views over a buffer of ours")
    try:
        a, b = _Side(path_a, True, use_ordered, uninitialised), _Side(path_b, False)
    except OSError as e:
        raise Unsupported(str(e)) from None
    pre = Prefix()
    seen_steps: set[Any] = set()
    last_a = last_b = -1
    pool = ThreadPoolExecutor(1)  # B's block is read while A's is (numpy and Arrow release the GIL)
    try:
        first = True
        while True:
            _fill_both(a, b, ROUND_ROWS, pool)
            n = min(len(a), len(b))
            if n == 0:
                break
            ta, tb = a.table.slice(0, n), b.table.slice(0, n)
            if first:
                sa, sb = ta.column("step")[0].as_py(), _first_step(b)
                if sb is _UNREAD or isinstance(sa, int) and isinstance(sb, int) and sa != sb:
                    break  # the walk skips leading steps of one run: it decides from the start
                first = False
            ids = pa.chunked_array(ta.column("id").chunks + tb.column("id").chunks).combine_chunks()
            enc = pc.dictionary_encode(pc.fill_null(ids, pa.scalar(b"", pa.binary())))
            codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
            ca, cb = codes[:n], codes[n:]
            ends = _closures(ca, cb, len(enc.dictionary))
            if not len(ends):
                if n >= window or (a.eof and b.eof) or (a.eof and len(a) == n) or (b.eof and len(b) == n):
                    break  # no re-closing within reach: the walk decides from here
                _fill_both(a, b, ROUND_ROWS + max(len(a), len(b)), pool)
                if min(len(a), len(b)) == n:
                    break
                continue
            upto = int(ends[-1])
            starts = np.concatenate(([0], ends[:-1]))
            seg_len = ends - starts
            seg = np.repeat(np.arange(len(ends)), seg_len)
            oa = np.lexsort((ca[:upto], seg))
            ob = np.lexsort((cb[:upto], seg))
            seg_ok = np.ones(len(ends), dtype=bool)
            exact = ca[:upto][oa] == cb[:upto][ob]
            dup = np.zeros(upto, dtype=bool)
            sorted_codes, sorted_seg = ca[:upto][oa], seg[oa]
            dup[1:] = (sorted_codes[1:] == sorted_codes[:-1]) & (sorted_seg[1:] == sorted_seg[:-1])
            seg_ok &= np.bincount(sorted_seg[~exact | dup], minlength=len(ends)) == 0
            seg_ok &= seg_len <= window
            match_b = np.empty(upto, dtype=np.int64)
            match_b[oa] = ob  # A position -> B position of the same identity
            ta_u = ta.slice(0, upto)
            lines_b = tb.column("line").slice(0, upto)
            if not np.array_equal(match_b, np.arange(upto)):  # reordered neighbours: B's lines in A's order
                lines_b = lines_b.take(pa.array(match_b))
            pair_ok = _seq_valid(ta_u, last_a) & _np_bool(ta_u.column("valid"))
            valid_b = _seq_valid(tb.slice(0, upto), last_b)  # the rest of B's line is A's (compared below)
            pair_ok &= valid_b[match_b]
            pair_ok &= _np_bool(pc.equal(ta_u.column("line"), lines_b))  # null (not our form) never equal
            seg_ok &= np.bincount(seg[~pair_ok], minlength=len(ends)) == 0
            bad = np.flatnonzero(~seg_ok)
            stop_seg = int(bad[0]) if len(bad) else len(ends)
            k = int(starts[stop_seg]) if stop_seg < len(ends) else upto
            if k:
                _accumulate(pre, a, b, ta_u.slice(0, k), match_b[:k], use_ordered, seen_steps, uninitialised,
                            on_gemm, on_uninitialised)
                last_a = int(_np_int(ta.column("seq"), -1)[k - 1])
                last_b = int(_np_int(tb.column("seq"), -1)[k - 1])
                pre.last_b_seq = last_b
                a.drop(k)
                b.drop(k)
            if stop_seg < len(ends):
                break
        pre.a = _resume(a, last_a, pre.pairs)
        pre.b = _resume(b, last_b, pre.pairs)
        pre.blocks, pre.json_blocks, pre.templates = a.blocks, a.arrow_blocks, a.templates.parsed
        return pre
    finally:
        pool.shutdown()
        a.close()
        b.close()


def _fill_both(a: _Side, b: _Side, rows: int, pool: ThreadPoolExecutor) -> None:
    fut = pool.submit(b.fill, rows)
    a.fill(rows)
    fut.result()


_UNREAD = object()


def _first_step(side: _Side) -> Any:
    """The step of a side's first buffered record (its line parsed here), or ``_UNREAD``."""
    try:
        obj = json.loads(side.line_bytes(0))
    except (ValueError, IndexError):
        return _UNREAD
    return obj.get("step") if isinstance(obj, dict) else _UNREAD


def _resume(side: _Side, last_seq: int, records: int) -> Resume:
    if len(side):
        return Resume(int(side.offsets[0]), int(side.lines[0]), last_seq, records)
    return Resume(side.pos, side.next_line, last_seq, records)  # what follows was not read here


def _accumulate(pre: Prefix, a: _Side, b: _Side, ta: pa.Table, match_b: np.ndarray, use_ordered: bool,
                seen_steps: set[Any], uninitialised: str | None, on_gemm: Callable[[bytes, int], None] | None,
                on_uninitialised: Callable[[bytes, int, bytes, int], None] | None) -> None:
    k = ta.num_rows
    pre.pairs += k
    for s in pc.unique(ta.column("step")).to_pylist():  # in order of first appearance
        if s not in seen_steps:
            seen_steps.add(s)
            pre.steps.append(s)
    pre.unproven += int(np.count_nonzero(_np_bool(ta.column("unproven"))))
    if on_gemm is not None:
        for row in np.flatnonzero(_np_bool(ta.column("gemm"))):
            on_gemm(a.line_bytes(int(row)), int(a.lines[row]))
    if uninitialised and on_uninitialised is not None:
        for row in np.flatnonzero(_np_bool(ta.column("uninit"))):
            j = int(match_b[row])
            on_uninitialised(a.line_bytes(int(row)), int(a.lines[row]), b.line_bytes(j), int(b.lines[j]))
    last = k - 1
    pre.last_pair = ((a.line_bytes(last), int(a.lines[last])),
                     (b.line_bytes(int(match_b[last])), int(b.lines[match_b[last]])))
