"""Op-level traces from any producer, normalised for ``forensics diff``.

A *reader* turns one producer's files (our own tracer's JSONL, Megatron-Core determinism traces,
PyTorch DebugMode hash dumps, ...) into :class:`TraceRecord` streams, one per rank. The differ
works on these records only, so every verdict (origin / receiver / control flow, cross-rank
pattern, probe artifacts, one-hop-later warning) applies to every format.

Readers register themselves with :func:`register_reader`; :func:`detect_format` picks one.
"""
from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.core.formats import optrace as optrace_format

#: Evidence strength of a tensor digest. Only "full" can prove bit equality, and only through an
#: order-sensitive digest (``TensorDigest.ordered``); "sampled" and "summary" can prove a difference
#: but never equality; "metadata" proves neither (shape/dtype only). docs/method.md, "Evidence".
EVIDENCE_LEVELS = optrace_format.EVIDENCE_LEVELS  # ("full", "sampled", "summary", "metadata")


@dataclass(frozen=True)
class TensorDigest:
    """What a trace recorded about one tensor."""

    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    numel: int | None = None
    digest: str | None = None  # whole-tensor digest (hex or decimal string), None if not recorded
    chunks: tuple[str, ...] | None = None  # per-row/chunk digests (permutation-sensitive)
    evidence: str = "full"  # one of EVIDENCE_LEVELS
    #: an order-sensitive digest of every element, in row-major order unless ``layout`` says
    #: otherwise (None: not recorded). Only equal order-sensitive digests taken in the same layout
    #: prove equality; ``digest`` may be order-independent (an XOR).
    ordered: str | None = None
    #: the memory layout ``ordered`` was taken in: the dim order ``p`` such that ``tensor.permute(p)``
    #: is row-major contiguous and its row-major bytes are what ``ordered`` digested (None: row-major,
    #: the usual case). Two order-sensitive digests are comparable only when their layouts are equal.
    layout: tuple[int, ...] | None = None
    #: the identity of the storage resize (``storage.resize_:N``) that grew this tensor's storage,
    #: when no traced op had written that storage since: the bytes read are uninitialised memory
    #: (or were written by something the tracer does not see). Not part of the value (``key``).
    grown: str | None = None
    #: a field of the entry the trace lacks (``"dtype"``: a native entry without ``t``): the entry is
    #: still read, its equality is unproven and the dtype is not compared (None: all recorded)
    unrecorded: str | None = None

    def key(self) -> tuple:
        """What equality compares: shape, dtype, digests and the layout of the order-sensitive one."""
        return (self.shape, self.dtype, self.digest, self.chunks, self.ordered, self.layout)


@dataclass
class TraceRecord:
    """One record of one rank's ordered stream."""

    rank: int
    seq: int  # position in the rank's stream (only ordered within one rank)
    identity: str  # alignment key, e.g. "aten.mm.default:17" (name:occurrence)
    name: str  # op / event name, e.g. "aten.mm.default", "all_reduce", "optimizer.step"
    kind: str = "op"  # op | collective | optimizer | backward | gemm | event | ...
    step: int | None = None
    phase: str | None = None  # forward | backward | optimizer | ... when known
    inputs: list[TensorDigest] = field(default_factory=list)
    outputs: list[TensorDigest] = field(default_factory=list)
    source: str | None = None  # "file:line" for error messages and reports
    extra: dict[str, Any] = field(default_factory=dict)  # producer-specific fields, kept


@dataclass
class StreamEnd:
    """How one rank's record stream ended: complete, or partial and why (a reader fills it)."""

    partial: bool = False
    #: e.g. "truncated at record 4096 (no footer): partial", "interrupted: signal 15 (SIGTERM)"
    reason: str | None = None
    records: int | None = None  # records the stream holds, when known
    #: "complete", "interrupted" (a footer says what stopped it), "truncated" (no footer)
    how: str = "complete"


class RankStream:
    """A rank's record iterable plus how it ended (:class:`StreamEnd`). Readers that cannot tell
    return plain iterables; the differ then treats the stream as complete."""

    def __init__(self, records: Iterable[TraceRecord], end: StreamEnd | None = None, path: Path | None = None,
                 reopen: Callable[[Any], Iterable[TraceRecord]] | None = None,
                 parse: Callable[[bytes, int], TraceRecord] | None = None, steps: str | None = None) -> None:
        self._records = records
        self.end = end or StreamEnd()
        #: the step window the run traced (``forensics trace --steps``: "all", "1-2", ...), when known
        self.steps = steps
        #: a native rank file's path, ``reopen(resume)`` its records from a later line
        #: (:class:`forensics.tracediff.columnar.Resume`) and ``parse(line, line_no)`` one line's
        #: record: what the differ's columnar fast path needs (None for other readers)
        self.path, self.reopen, self.parse = path, reopen, parse

    def __iter__(self) -> Iterator[TraceRecord]:
        return iter(self._records)


def stream_end(stream: object) -> StreamEnd:
    """The :class:`StreamEnd` of a rank stream (complete when the reader says nothing)."""
    end = getattr(stream, "end", None)
    return end if isinstance(end, StreamEnd) else StreamEnd()


@dataclass
class Trace:
    """A whole run: per-rank record streams plus what the run recorded about itself."""

    format: str  # reader name
    path: Path
    ranks: dict[int, list[TraceRecord]]
    run_info: dict[str, Any] = field(default_factory=dict)  # command, seeds, world size, versions, knobs

    def records(self, rank: int) -> list[TraceRecord]:
        return self.ranks.get(rank, [])


@dataclass(frozen=True)
class Reader:
    name: str
    detect: Callable[[Path], bool]  # cheap check: does this path look like my format?
    read: Callable[[Path], Trace]  # raises forensics.core.errors.BadInput with file:line
    iter_ranks: Callable[[Path], Iterator[tuple[int, Iterator[TraceRecord]]]] | None = None
    #: optional: the run info (``Trace.run_info``) without reading records; lets the differ stream
    run_info: Callable[[Path], dict[str, Any]] | None = None


_READERS: dict[str, Reader] = {}


def register_reader(reader: Reader) -> Reader:
    _READERS[reader.name] = reader
    return reader


def readers() -> dict[str, Reader]:
    _load_builtin_readers()
    return dict(_READERS)


def detect_format(path: Path) -> str | None:
    """Name of the first registered reader that recognises ``path``, or None."""
    for name, reader in readers().items():
        try:
            if reader.detect(Path(path)):
                return name
        except OSError:
            continue
    return None


def _load_builtin_readers() -> None:
    """Import the reader modules shipped with forensics (each calls register_reader)."""
    for mod in pkgutil.iter_modules(__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"forensics.tracediff.traces.{mod.name}")
