"""Where a RECEIVER's differing input came from, in each run.

A first divergence that is a RECEIVER says an input differed, and every earlier record matched (or
was passed over as an artifact): the difference did not come from a traced op's output. This
module says which traced op, in each run, last wrote the bits that input holds: the latest record
before the receiver, in that run's rank file, with an output of the same shape, dtype, layout and
order-sensitive digest (else the same XOR digest). It searches each file backwards from the
receiver for the digest's text (``mmap.rfind``: no record is parsed but the lines that hold it), so
it costs a read of the file, not a walk of it, and only when the first divergence is a RECEIVER.

What it finds is a statement about bits, not about tensor objects: the latest writer of equal
bits may be another tensor that happened to hold them (zeros, ones). The reading says so. Native
rank files only (other readers keep no byte-addressable file): elsewhere nothing is said.
"""
from __future__ import annotations

import functools
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forensics.core.errors import BadInput
from forensics.tracediff.compare import EXACT_ENTRIES
from forensics.tracediff.traces import TensorDigest, TraceRecord

#: lines holding an input's digest looked at per run, before the search gives up (a value that
#: many records read, such as a scalar, has many hits; the writer is usually among the last ones)
MAX_HITS = 10_000
#: what writes memory without a traced op (the reading's list of candidates)
OUTSIDE = ("a collective run below the dispatcher (DDP's and FSDP's reducers call the communication library "
           "from C++), another thread or process, memory written before the traced window or around the "
           "dispatcher")


@dataclass
class Writer:
    """The latest traced record before the receiver whose output holds the input's bits."""

    identity: str
    seq: int
    source: str  # file:line
    by: str = "order-sensitive digest"  # or "XOR digest" (a screen: equal XORs do not prove equal bits)

    def to_json(self) -> dict[str, Any]:
        return {"identity": self.identity, "seq": self.seq, "source": self.source, "by": self.by}


def _needles(t: TensorDigest) -> list[bytes]:
    """The texts of the digests ``t`` carries (an output may carry only one of its kinds: a device
    tensor's inputs get both, its outputs only the XOR under ``--ordered-digests inputs``)."""
    return [f'"{v}"'.encode() for v in (t.ordered, t.digest) if isinstance(v, str) and v]


def _holds(out: TensorDigest, t: TensorDigest) -> str | None:
    """How an output entry is seen to hold the input entry ``t``'s bits (by the order-sensitive
    digest, else by the XOR both carry), or None."""
    if out.shape != t.shape or out.dtype != t.dtype:
        return None
    if t.ordered is not None and out.ordered is not None:
        return "order-sensitive digest" if out.ordered == t.ordered and out.layout == t.layout else None
    if t.digest is not None and out.digest is not None and out.digest == t.digest:
        return "XOR digest"
    return None


#: how a record says an entry holds no digest (its memory could not be read: sparse, DTensor, freed)
_METADATA = (b'"ev":"metadata"', b'"ev": "metadata"')


def _line_offset(mm: mmap.mmap, line_no: int, chunk: int = 1 << 24) -> int | None:
    """Byte offset where line ``line_no`` (1-based) starts, or None past the end (newlines counted
    a chunk at a time, in C)."""
    want, pos = line_no - 1, 0
    while want > 0:
        block = mm[pos:pos + chunk]
        if not block:
            return None
        n = block.count(b"\n")
        if n < want:
            want, pos = want - n, pos + len(block)
            continue
        idx = -1
        for _ in range(want):
            idx = block.find(b"\n", idx + 1)
        return pos + idx + 1
    return pos


@functools.lru_cache(maxsize=64)
def _cached_offset(path: str, line_no: int, size: int, mtime_ns: int) -> int | None:
    """:func:`_line_offset` of a file as it is (size and mtime in the key): each search of one
    receiver's file starts from the same line, counted once."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        return _line_offset(mm, line_no)


def _offset(path: Path, line_no: int) -> int | None:
    st = os.stat(path)
    return _cached_offset(str(path), line_no, st.st_size, st.st_mtime_ns)


def _lines_back(mm: mmap.mmap, end: int, end_line: int, needles: list[bytes]) -> Iterator[tuple[bytes, int]]:
    """``(line, line number)`` of each line before byte ``end`` (the start of line ``end_line``) that
    holds one of ``needles``, latest first; the header line (line 1) is never one."""
    while True:
        hit = max(mm.rfind(n, 0, end) for n in needles)
        if hit < 0:
            return
        start = mm.rfind(b"\n", 0, hit) + 1
        if start == 0:
            return
        stop = mm.find(b"\n", hit)
        end_line -= mm[start:end].count(b"\n")  # the lines between this one and the last
        end = start
        yield mm[start:stop + 1], end_line


def _parse_source(source: str | None) -> tuple[Path, int] | None:
    if not source or ":" not in source:
        return None
    path, _, line = source.rpartition(":")
    return (Path(path), int(line)) if line.isdigit() else None


def latest_writer(stream: Any, receiver_source: str, t: TensorDigest) -> Writer | None | str:
    """The latest record before the receiver (its ``file:line``) whose output holds ``t``'s bits:
    a :class:`Writer`, None (no traced op wrote them), or a string saying why it was not searched."""
    where = _parse_source(receiver_source)
    parse = getattr(stream, "parse", None)
    needles = _needles(t)
    if where is None or parse is None or not needles:
        return "not searched (no byte-addressable rank file, or no digest)"
    path, line_no = where
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            end = _offset(path, line_no)
            if end is None:
                return "not searched (the receiver's line is not in the file)"
            for hits, (raw, hit_line) in enumerate(_lines_back(mm, end, line_no, needles)):
                if hits >= MAX_HITS:
                    return f"not searched past {MAX_HITS} lines holding the digest"
                rec: TraceRecord = parse(raw, hit_line)
                for out in rec.outputs:
                    by = _holds(out, t) if out is not None else None
                    if by is not None:
                        return Writer(rec.identity, rec.seq, rec.source or f"{path}:{hit_line}", by)
            return None
    except (OSError, ValueError, BadInput) as e:
        return f"not searched ({type(e).__name__}: {e})"


def _bits_of(w: Writer) -> str:
    screen = ", by its XOR digest only (a screen, not proof)" if w.by == "XOR digest" else ""
    return f"the bits of {w.identity}'s output (seq {w.seq}{screen})"


def reading(a: Writer | None | str, b: Writer | None | str, a_in_b: bool | None, b_in_a: bool | None,
            passed: dict[str, str] | None = None, hidden: tuple[bool, bool] = (False, False)) -> str:
    """What the writers of one differing input say, in words. ``a_in_b``: whether A's writer's
    output holds the same bits in B (None: not checked); ``b_in_a`` the other way. ``passed``: why
    records the walk passed over were passed over (artifacts, outside data), by identity.
    ``hidden``: whether run A's and B's records before the receiver hold tensors recorded without a
    digest (metadata only), whose writes no search can see."""
    if isinstance(a, str) or isinstance(b, str):
        return f"A: {a if isinstance(a, str) else 'searched'}; B: {b if isinstance(b, str) else 'searched'}"
    runs_hidden = [run for run, h, w in (("A", hidden[0], a), ("B", hidden[1], b)) if h and w is None]
    caveat = (f" (run {' and '.join(runs_hidden)} also recorded tensors without a digest, metadata only, before "
              "it: a write among those cannot be seen)") if runs_hidden else ""
    if a is None and b is None:
        return ("no traced op's output on this rank has these bits' digest before it, in either run: the "
                f"difference reached it from outside the traced ops ({OUTSIDE}){caveat}")
    if a is not None and b is not None and a.identity == b.identity:
        why = (passed or {}).get(a.identity)
        return (f"in both runs it holds {_bits_of(a)}, which differs between the runs: the walk passed over it "
                "as " + (why or "outside data or a probe artifact"))
    if a is not None and b is not None:
        same = " (both outputs match across the runs)" if a_in_b and b_in_a else ""
        return (f"in run A it holds {_bits_of(a)}, in run B {_bits_of(b)}{same}: the op read another tensor in "
                "each run, or the same tensor was overwritten by something the trace does not show")
    known, run, other = (a, "A", "B") if a is not None else (b, "B", "A")
    matched = a_in_b if a is not None else b_in_a
    kept = (f"; in run {other} {known.identity}'s output matched run {run}'s" if matched else
            "" if matched is None else f"; in run {other} {known.identity}'s output differs")
    return (f"in run {run} it holds {_bits_of(known)}, the latest traced output that did; in run {other} no "
            f"traced op's output has its bits' digest{kept}: in run {other} the value was changed after it, or "
            f"another tensor was read, by something the trace does not show ({OUTSIDE}){caveat}")


def _hidden_before(source: str | None) -> bool:
    """Whether the rank file holds, before the receiver's line, a tensor recorded without a digest."""
    where = _parse_source(source)
    if where is None:
        return False
    path, line_no = where
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            end = _offset(path, line_no)
            return end is not None and any(mm.find(m, 0, end) >= 0 for m in _METADATA)
    except OSError:
        return False


def _record_at(stream: Any, source: str | None) -> TraceRecord | None:
    where = _parse_source(source)
    parse = getattr(stream, "parse", None)
    if where is None or parse is None:
        return None
    path, line_no = where
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            start = _offset(path, line_no)
            if start is None:
                return None
            stop = mm.find(b"\n", start)
            return parse(mm[start:stop + 1], line_no)
    except (OSError, ValueError, BadInput):
        return None


def _writer_holds(stream: Any, identity: str, t: TensorDigest, search_from: str) -> bool | None:
    """Whether the record ``identity`` of this run (found by its id, backwards from ``search_from``)
    has an output holding ``t``'s bits; None when it could not be looked up."""
    where = _parse_source(search_from)
    parse = getattr(stream, "parse", None)
    if where is None or parse is None:
        return None
    path, line_no = where
    needle = f'"{identity}"'.encode()
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            end = _offset(path, line_no)
            if end is None:
                return None
            for raw, hit_line in _lines_back(mm, end, line_no, [needle]):
                rec = parse(raw, hit_line)
                if rec.identity == identity:
                    return any(_holds(out, t) is not None for out in rec.outputs if out is not None)
            return None
    except (OSError, ValueError, BadInput):
        return None


def input_sources(d: Any, a_stream: Any, b_stream: Any, passed: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """For each differing input of a RECEIVER: its latest traced writer in each run and the reading
    (``passed``: see :func:`reading`)."""
    ra, rb = _record_at(a_stream, d.source_a), _record_at(b_stream, d.source_b)
    if ra is None or rb is None:
        return []
    out = []
    hidden = (_hidden_before(d.source_a), _hidden_before(d.source_b))
    for i in d.differing_inputs:
        if i >= len(ra.inputs) or i >= len(rb.inputs) or ra.inputs[i] is None or rb.inputs[i] is None:
            continue
        ta, tb = ra.inputs[i], rb.inputs[i]
        if ta.dtype in EXACT_ENTRIES:  # no tensor (arguments, a generator's state): no op wrote it (the verdict's warning says what it is)
            continue
        wa = latest_writer(a_stream, d.source_a, ta)
        wb = latest_writer(b_stream, d.source_b, tb)
        a_in_b = _writer_holds(b_stream, wa.identity, ta, d.source_b) if isinstance(wa, Writer) else None
        b_in_a = _writer_holds(a_stream, wb.identity, tb, d.source_a) if isinstance(wb, Writer) else None
        out.append({"input": i, "writer_a": wa.to_json() if isinstance(wa, Writer) else wa,
                    "writer_b": wb.to_json() if isinstance(wb, Writer) else wb,
                    "reading": reading(wa, wb, a_in_b, b_in_a, passed, hidden)})
    return out
