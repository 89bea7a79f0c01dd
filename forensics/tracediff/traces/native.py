"""Reader of our own op-tracer output (``probes/optrace/``): ``<dir>/rank<R>/trace.jsonl``. The
format's name, version, file name and key order are stated once in
:mod:`forensics.core.formats.optrace`, which the tracer writes with.

One JSON object per line: a header (``"type": "header"``, ``"schema": "forensics.optrace"``),
records (``seq``, ``id``, ``op``, ``kind``, ``step``, ``in``, ``out``, ``meta``), and a footer
(``"type": "footer"``, ``records``, ``dropped``). docs/trace-format.md describes every field.
The reader streams: records are parsed one line at a time, one rank file at a time.

A file without a footer (the process was killed) or whose footer says it was stopped (a signal,
a write failure) is **partial**: its records are read up to where they stop (a cut last line is
dropped) and :class:`~forensics.tracediff.traces.StreamEnd` says so. A wrong-typed value (a numel
of 1.5, a digest that is not a string) is bad input (``file:line``), never a different verdict.
"""
from __future__ import annotations

import math
import os
import re
import reprlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import msgspec

from forensics.core.errors import BadInput
from forensics.core.formats import optrace as optrace_format
from forensics.tracediff.traces import (
    EVIDENCE_LEVELS,
    RankStream,
    Reader,
    StreamEnd,
    TensorDigest,
    Trace,
    TraceRecord,
    register_reader,
)

#: the format's owner states its name, version, file name and the JSON reader (orjson when
#: installed, ~3x faster on these lines; json the fallback)
_loads = optrace_format.loads
_JSONError = optrace_format.JSON_ERRORS
SCHEMA = optrace_format.SCHEMA
SCHEMA_VERSION = optrace_format.VERSION
FILE_NAME = optrace_format.FILE_NAME
_RANK_DIR = re.compile(r"^rank(\d+)$")

# --------------------------------------------------------------------------- the border: typed header and footer
_Count = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
_Rank = Annotated[int, msgspec.Meta(ge=0, le=(1 << 31) - 1)]


class Header(msgspec.Struct):
    """The first line of a rank file (probes/optrace/ writes it; docs/trace-format.md): the fields
    the differ uses, typed. Records are checked by hand on the hot path (:func:`_check_record`)."""

    type: str
    schema: str
    version: int
    rank: _Rank | None = None
    world_size: _Count | None = None
    argv: list[str] | None = None
    script_argv: list[str] | None = None
    pid: _Count | None = None
    versions: dict[str, str | None] | None = None
    env: dict[str, str | None] | None = None
    steps: str | None = None
    ranks: str | list[_Rank] | None = None
    max_records: _Count | None = None
    hash: str | None = None
    chunks: str | None = None
    chunked_ops: list[str] | None = None
    ordered: dict[str, Any] | None = None
    compiled: str | None = None
    #: version 2: the level the tracer recorded at (``forensics trace --evidence``) and what each
    #: light level's digest is; absent in version 1 (full)
    evidence: str | None = None
    evidence_digests: dict[str, str] | None = None
    at: str | None = None  # version 2: ops (the default) or modules (one record per nn.Module call)
    generators: str | None = None
    storage_events: list[str] | None = None
    program: dict[str, Any] | None = None
    packages: dict[str, Any] | None = None


class Footer(msgspec.Struct):
    """The last line of a complete rank file."""

    type: str
    records: _Count | None = None
    dropped: _Count | None = None
    unwritten: _Count | None = None
    last_step: _Count | None = None
    seeds: dict[str, Any] | None = None
    stopped: str | dict[str, Any] | None = None
    compiled_graphs: _Count | None = None
    packages: dict[str, Any] | None = None
    sources: dict[str, Any] | None = None


def _typed(obj: dict, schema: type, path: Path, line: int | None, what: str) -> None:
    try:
        msgspec.convert(obj, schema)
    except msgspec.ValidationError as e:
        text, _, at = str(e).partition(" - at `$")
        field = at.rstrip("`").lstrip(".") or what
        raise BadInput(path, f"{what} {field}: {text[:1].lower()}{text[1:].replace('`', '')}", line) from None



def _brief(value: Any) -> str:
    """A short repr for messages: bounded depth and length (a 1,000-deep list must not overflow repr)."""
    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother, r.maxlist, r.maxdict = 3, 60, 60, 6, 6
    return r.repr(value)

def rank_files(path: Path) -> dict[int, Path]:
    """``{rank: file}`` for a trace directory, or for a single rank file (rank from its header)."""
    path = Path(path)
    if path.is_file():
        header = read_header(path)
        return {int(header.get("rank", 0)): path}
    files: dict[int, Path] = {}
    if (path / FILE_NAME).is_file():
        files[int(read_header(path / FILE_NAME).get("rank", 0))] = path / FILE_NAME
    for sub in sorted(path.iterdir()) if path.is_dir() else []:
        m = _RANK_DIR.match(sub.name)
        if m and (sub / FILE_NAME).is_file():
            files[int(m.group(1))] = sub / FILE_NAME
    if not files:
        raise BadInput(path, f"no {FILE_NAME} and no rank<R>/{FILE_NAME} here: not a forensics trace directory")
    return files


def read_header(path: Path) -> dict[str, Any]:
    """The first line of a rank file, checked for schema and version by the format's owner, then
    typed (:class:`Header`)."""
    header = optrace_format.read_header(path, _brief)
    _typed(header, Header, path, 1, "header")
    return header


def _tail_lines(path: Path, want: int = 2) -> tuple[list[bytes], bool]:
    """The last ``want`` complete lines of a file, and whether the file ends with a cut line."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        block = 4096
        while True:
            start = max(0, size - block)
            f.seek(start)
            data = f.read(size - start)
            cut = not data.endswith(b"\n")
            lines = data.split(b"\n")
            lines = lines[:-1]  # the piece after the last newline: b"" or a cut line
            if start > 0:
                lines = lines[1:]  # the first piece may be the middle of a line
            lines = [x for x in lines if x.strip()]
            if len(lines) >= want or start == 0:
                return lines[-want:], cut
            block *= 8


def read_footer(path: Path) -> dict[str, Any] | None:
    """The last line when it is a footer, else None (the process died before closing the trace)."""
    lines, cut = _tail_lines(Path(path), 1)
    if cut or not lines:
        return None
    try:
        obj = _loads(lines[-1])
    except _JSONError:
        return None
    if not optrace_format.is_footer(obj):
        return None
    _typed(obj, Footer, Path(path), None, "footer")
    return obj


def stream_end_of(path: Path) -> StreamEnd:
    """How a rank file ended: complete, interrupted (its footer says what stopped it), or truncated
    (no footer: killed, out of memory, disk full). Read from the file's tail only."""
    path = Path(path)
    foot = read_footer(path)
    if foot is not None:
        records = foot.get("records") if foot.get("records").__class__ is int else None
        stopped = foot.get("stopped")
        if stopped:
            return StreamEnd(True, f"interrupted ({stopped}) at record {records}: partial", records, "interrupted")
        return StreamEnd(False, None, records)
    lines, cut = _tail_lines(path, 1)
    records = 0
    if lines:
        try:
            last = _loads(lines[-1])
        except _JSONError:
            last = None
        if isinstance(last, dict) and last.get("seq").__class__ is int:
            records = last["seq"] + 1
    note = "; its last line was cut and is not read" if cut else ""
    return StreamEnd(True, f"truncated at record {records} (no footer): partial{note}", records, "truncated")


_new = object.__new__
#: Entries that are not tensors and carry no shape (compare.EXACT_ENTRIES).
_SHAPELESS = frozenset({"args", "generator"})


def _bad_tensor(path: Path, line: int, what: str) -> BadInput:
    return BadInput(path, f"tensor entry: {what}", line)


def _entry_ok(obj: Any, _int: type = int, _str: type = str, _list: type = list, _prod: Any = math.prod) -> bool:
    """Fast check of one tensor entry's types (the differ runs it on every entry it compares)."""
    if obj.__class__ is not dict:
        return False
    get = obj.get
    shape = get("s")
    if shape is not None:
        if shape.__class__ is not _list:
            return False
        for d in shape:
            if d.__class__ is not _int or d < 0:
                return False
    elif get("t") not in _SHAPELESS and (get("h") is not None or get("o") is not None):
        return False  # a tensor's digest without its shape: the tracer writes none
    numel = get("n")
    if numel is not None and (numel.__class__ is not _int or numel < 0 or (shape is not None and _prod(shape) != numel)):
        return False
    if get("t").__class__ is not _str:  # every entry names its dtype (or args, generator)
        return False
    for key in ("h", "o", "g"):
        v = get(key)
        if v is not None and v.__class__ is not _str:
            return False
    chunks = get("c")
    if chunks is not None:
        if chunks.__class__ is not _list:
            return False
        for c in chunks:
            if c.__class__ is not _str:
                return False
    layout = get("ol")  # rare (a dense tensor not in row-major order): one lookup in the common case
    if layout is not None and _layout_problem(layout, shape) is not None:
        return False
    ev = get("ev")
    return ev is None or ev in EVIDENCE_LEVELS


def _layout_problem(layout: Any, shape: Any) -> str | None:
    """What is wrong with a memory layout ``ol`` (a dim order: a permutation of the shape's dims),
    or None. ``shape`` is the entry's ``s`` (None: not recorded; then any permutation)."""
    if layout.__class__ is not list or any(d.__class__ is not int or d < 0 for d in layout):
        return f"memory layout 'ol' must be a list of non-negative integers, got {_brief(layout)}"
    if sorted(layout) != list(range(len(layout))):
        return f"memory layout 'ol' {_brief(layout)} is not a permutation of 0..{len(layout) - 1}"
    if shape.__class__ is list and len(shape) != len(layout):
        return f"memory layout 'ol' {_brief(layout)} has {len(layout)} dims, shape {_brief(shape)} has {len(shape)}"
    return None


def _check_entry(obj: Any, path: Path, line: int) -> None:
    """Types and consistency of one tensor entry (BadInput naming file and line)."""
    if _entry_ok(obj):
        return
    if obj.__class__ is not dict:
        raise BadInput(path, f"tensor entry is {type(obj).__name__}, expected an object or null", line)
    shape = obj.get("s")
    chunks = obj.get("c")
    numel, digest, dtype, ordered = obj.get("n"), obj.get("h"), obj.get("t"), obj.get("o")
    if shape is not None:
        if shape.__class__ is not list or any(d.__class__ is not int or d < 0 for d in shape):
            raise _bad_tensor(path, line, f"shape 's' must be a list of non-negative integers, got {_brief(shape)}")
    elif obj.get("t") not in _SHAPELESS and (digest is not None or ordered is not None):
        raise _bad_tensor(path, line, f"shape 's' missing in a {_brief(obj.get('t'))} entry that carries a digest "
                                      "(only 'args' and 'generator' entries have none)")
    if numel is not None:
        if numel.__class__ is not int or numel < 0:
            raise _bad_tensor(path, line, f"numel 'n' must be a non-negative integer, got {_brief(numel)}")
        if shape is not None and math.prod(shape) != numel:
            raise _bad_tensor(path, line, f"numel {numel} does not match shape {shape}")
    if dtype.__class__ is not str and "t" in obj:  # absent: read, its equality unproven (TensorDigest.unrecorded)
        raise _bad_tensor(path, line, f"dtype 't' must be a string, got {_brief(dtype)}")
    if digest is not None and digest.__class__ is not str:
        raise _bad_tensor(path, line, f"digest 'h' must be a string, got {_brief(digest)}")
    if ordered is not None and ordered.__class__ is not str:
        raise _bad_tensor(path, line, f"order-sensitive digest 'o' must be a string, got {_brief(ordered)}")
    if chunks is not None and (chunks.__class__ is not list or any(c.__class__ is not str for c in chunks)):
        raise _bad_tensor(path, line, f"chunk digests 'c' must be a list of strings, got {_brief(chunks)}")
    grown = obj.get("g")
    if grown is not None and grown.__class__ is not str:
        raise _bad_tensor(path, line, f"grown-storage mark 'g' must be a string, got {_brief(grown)}")
    layout = obj.get("ol")
    if layout is not None:
        problem = _layout_problem(layout, shape)
        if problem is not None:
            raise _bad_tensor(path, line, problem)
    if obj.get("ev") is None or obj.get("ev") in EVIDENCE_LEVELS:
        return  # only the dtype is missing: a record read with lowered evidence
    raise _bad_tensor(path, line, f"evidence 'ev' must be one of {', '.join(EVIDENCE_LEVELS)}, got {_brief(obj.get('ev'))}")


def _tensor(obj: Any, path: Path, line: int) -> TensorDigest | None:
    if obj is None:
        return None
    _check_entry(obj, path, line)
    shape, chunks, layout = obj.get("s"), obj.get("c"), obj.get("ol")
    if layout is not None:
        # the identity order is row-major: the same digest as an entry without "ol"
        layout = None if layout == list(range(len(layout))) else tuple(layout)
    t = _new(TensorDigest)  # frozen dataclass without its per-field __setattr__ cost (hot path)
    t.__dict__.update(shape=tuple(shape) if shape is not None else None, dtype=obj.get("t"), numel=obj.get("n"),
                      digest=obj.get("h"), chunks=tuple(chunks) if chunks is not None else None,
                      evidence=obj.get("ev", "full"), ordered=obj.get("o"), layout=layout, grown=obj.get("g"),
                      unrecorded=None if "t" in obj else "dtype")
    return t


class LazyTensors(list):
    """A record's tensor list, parsed on first use (the differ reads inputs only when outputs differ)."""

    __slots__ = ("_raw", "_where")

    def __init__(self, iterable: Any = (), raw: list | None = None, where: tuple[Path, int] | None = None) -> None:
        super().__init__(iterable)
        self._raw, self._where = raw, where

    def _load(self) -> None:
        raw, self._raw = self._raw, None
        if raw:
            path, line = self._where
            list.extend(self, [_tensor(t, path, line) for t in raw])

    def __len__(self) -> int:
        if self._raw is not None:
            self._load()
        return list.__len__(self)

    def __iter__(self):  # noqa: ANN204
        if self._raw is not None:
            self._load()
        return list.__iter__(self)

    def __getitem__(self, i):  # noqa: ANN001, ANN204
        if self._raw is not None:
            self._load()
        return list.__getitem__(self, i)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __eq__(self, other: object) -> bool:
        if self._raw is not None:
            self._load()
        return list.__eq__(self, other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self._raw is not None:
            self._load()
        return list.__repr__(self)

    def same_full_digests(self, other: object, use_ordered: bool = True) -> bool:
        """Fast path for the differ: True when both lists are still unparsed, recorded identically,
        and every entry is a valid full-evidence digest. False means "compare the parsed digests"
        (not "different"). Equal entries are equal as far as their digests go; whether that proves
        equality (an order-sensitive digest) or is a screen is decided where it matters. Entries
        are checked here too (Python's ``4 == 4.0`` must not let a wrong type pass as equal)."""
        if not isinstance(other, LazyTensors) or self._raw is None or other._raw is None:
            return False
        raw = self._raw
        if raw != other._raw:
            return False
        ok = _entry_ok
        weak = False
        for t in raw:
            if t is None:
                continue
            if not ok(t):
                _check_entry(t, *self._where)
                weak = True  # read, yet lacking a field (its dtype): compared entry by entry
            if "ev" in t or ("h" not in t and not (use_ordered and "o" in t)):
                weak = True
        for t in other._raw:  # equal by ==, yet 4.0 == 4: the other side's types are checked too
            if t is not None and not ok(t):
                _check_entry(t, *other._where)
        return not weak


def _check_record(obj: dict, path: Path, line: int) -> None:
    """Types of a record's own fields (its tensor entries are checked when parsed)."""
    identity, name, kind, step, phase, meta = (obj.get("id"), obj.get("op"), obj.get("kind", "op"), obj.get("step"),
                                               obj.get("phase"), obj.get("meta"))
    if identity.__class__ is not str or not identity:
        raise BadInput(path, f"record id must be a non-empty string, got {_brief(identity)}", line)
    if name.__class__ is not str or not name:
        raise BadInput(path, f"record op must be a non-empty string, got {_brief(name)}", line)
    if kind.__class__ is not str:
        raise BadInput(path, f"record kind must be a string, got {_brief(kind)}", line)
    if step is not None and (step.__class__ is not int or step < 0):
        raise BadInput(path, f"record step must be a non-negative integer or null, got {_brief(step)}", line)
    if phase is not None and phase.__class__ is not str:
        raise BadInput(path, f"record phase must be a string or null, got {_brief(phase)}", line)
    if meta is not None and meta.__class__ is not dict:
        raise BadInput(path, f"record meta must be an object, got {type(meta).__name__}", line)


def iter_records(path: Path, rank: int | None = None, end: StreamEnd | None = None,
                 start: Any = None) -> Iterator[TraceRecord]:
    """Records of one rank file, in seq order; BadInput (file:line) on anything malformed.

    A file without a footer is read up to its last complete line (a cut last line is dropped):
    the process was killed. ``end`` (from :func:`stream_end_of`) is updated with what was read.
    ``start`` (a :class:`forensics.tracediff.columnar.Resume`: byte offset, line number, the seq
    before it and the records before it) reads from a later line, as if the lines before it had
    been read."""
    path = Path(path)
    header = read_header(path)
    rank = int(header.get("rank", 0)) if rank is None else rank
    if end is None:
        end = stream_end_of(path)
    has_footer = end.how != "truncated"
    src = str(path)
    footer_seen = False
    loads, new, lazy_new, record_cls, lazy_cls = _loads, _new, list.__new__, TraceRecord, LazyTensors
    check = _check_record
    n_records = 0
    with open(path, "rb") as f:
        f.readline()
        line_no = 1
        last_seq = -1
        if start is not None:
            f.seek(start.offset)
            line_no, last_seq, n_records = start.line - 1, start.last_seq, start.records
        for raw in f:
            line_no += 1
            if footer_seen:
                raise BadInput(path, "data after the footer", line_no)
            if raw[-1:] != b"\n":
                if not has_footer:
                    break  # the process was killed mid-write: the cut line is not read
                raise BadInput(path, "truncated: last line is incomplete", line_no)
            try:
                obj = loads(raw)
            except _JSONError:
                if not raw.strip():
                    continue
                raise BadInput(path, "corrupt line: not JSON", line_no) from None
            if obj.__class__ is not dict:
                raise BadInput(path, "corrupt line: not a JSON object", line_no)
            typ = obj.get("type")
            if typ is not None and typ != "op":
                if typ == "footer":
                    footer_seen = True
                    continue
                if typ == "header":
                    raise BadInput(path, "second header inside the file (two traces concatenated?)", line_no)
                raise BadInput(path, f"unknown line type {_brief(typ)}", line_no)
            try:
                seq, identity, name = obj["seq"], obj["id"], obj["op"]
            except KeyError as e:
                raise BadInput(path, f"record lacks field {_brief(e.args[0])}", line_no) from None
            if seq.__class__ is not int or seq <= last_seq:
                raise BadInput(path, f"seq {_brief(seq)} is not increasing (previous {last_seq})", line_no)
            check(obj, path, line_no)
            last_seq = seq
            raw_in, raw_out = obj.get("in", _NONE), obj.get("out", _NONE)
            if raw_in.__class__ is not list or raw_out.__class__ is not list:
                raw_in, raw_out = _in_out(raw_in, raw_out, path, line_no)
            where = (path, line_no)
            ins = lazy_new(lazy_cls)
            ins._raw, ins._where = raw_in, where
            outs = lazy_new(lazy_cls)
            outs._raw, outs._where = raw_out, where
            rec = new(record_cls)  # hot path: skip the dataclass __init__
            rec.__dict__ = {
                "rank": rank, "seq": seq, "identity": identity, "name": name, "kind": obj.get("kind", "op"),
                "step": obj.get("step"), "phase": obj.get("phase"), "inputs": ins, "outputs": outs,
                "source": f"{src}:{line_no}", "extra": obj.get("meta") or {},
            }
            n_records += 1
            yield rec
    if has_footer and not footer_seen:  # the footer vanished while reading (file rewritten?)
        raise BadInput(path, "no footer at the end of the read (the file changed while it was read?)", line_no)
    if end.how == "truncated" and end.records != n_records:
        end.records = n_records
        end.reason = f"truncated at record {n_records} (no footer): partial"


_NONE: list = []


def _in_out(raw_in: Any, raw_out: Any, path: Path, line_no: int) -> tuple[list, list]:
    """A record's 'in' and 'out': lists (absent: none recorded); null, 0 or text are bad input."""
    for key, v in (("in", raw_in), ("out", raw_out)):
        if v.__class__ is not list:
            raise BadInput(path, f"record '{key}' must be a list, got {_brief(v)}", line_no)
    return raw_in, raw_out


def record_from_line(raw: bytes, path: Path, line_no: int, rank: int) -> TraceRecord:
    """One record line (already read by the columnar path) as a record, with the reader's checks."""
    obj = _loads(raw)
    if obj.__class__ is not dict:
        raise BadInput(path, "corrupt line: not a JSON object", line_no)
    _check_record(obj, path, line_no)
    raw_in, raw_out = obj.get("in", _NONE), obj.get("out", _NONE)
    if raw_in.__class__ is not list or raw_out.__class__ is not list:
        raw_in, raw_out = _in_out(raw_in, raw_out, path, line_no)
    ins, outs = list.__new__(LazyTensors), list.__new__(LazyTensors)
    ins._raw, ins._where = raw_in, (path, line_no)
    outs._raw, outs._where = raw_out, (path, line_no)
    rec = _new(TraceRecord)
    rec.__dict__ = {
        "rank": rank, "seq": obj["seq"], "identity": obj["id"], "name": obj["op"], "kind": obj.get("kind", "op"),
        "step": obj.get("step"), "phase": obj.get("phase"), "inputs": ins, "outputs": outs,
        "source": f"{path}:{line_no}", "extra": obj.get("meta") or {},
    }
    return rec


def open_rank(file: Path, rank: int) -> RankStream:
    """One rank file as a lazy record stream that the differ's columnar path can resume later."""
    file = Path(file)
    end = stream_end_of(file)
    steps = read_header(file).get("steps")
    return RankStream(iter_records(file, rank, end), end, path=file,
                      reopen=lambda start: iter_records(file, rank, end, start),
                      parse=lambda raw, line_no: record_from_line(raw, file, line_no, rank),
                      steps=steps if isinstance(steps, str) else None)


def iter_ranks(path: Path) -> Iterator[tuple[int, RankStream]]:
    """``(rank, lazy record stream)`` per rank file, ranks in order; each stream's ``end`` says
    whether the file is complete or partial (and why) before a record is read."""
    for rank, file in sorted(rank_files(Path(path)).items()):
        yield rank, open_rank(file, rank)


def _header_ok(path: Path, header: dict) -> None:
    for key in ("rank", "world_size"):
        v = header.get(key)
        if v is not None and (v.__class__ is not int or v < 0):
            raise BadInput(path, f"header {key} must be a non-negative integer, got {_brief(v)}", 1)
    for key in ("versions", "env", "program", "packages", "switches"):
        v = header.get(key)
        if v is not None and not isinstance(v, dict):
            raise BadInput(path, f"header {key} must be an object, got {type(v).__name__}", 1)


def _merge_footer(info: dict[str, Any], foot: dict[str, Any]) -> None:
    """What the footer adds to the header's run info: the local files and packages imported after
    the header was written (``imported``, into ``program.modules``/``program.packages``), and the
    switches as the run left them: one that changed during the run reads ``"FIRST -> LAST"``."""
    imported = foot.get("imported")
    program = info.get("program")
    if isinstance(imported, dict) and isinstance(program, dict):
        for key in ("modules", "packages"):
            if isinstance(imported.get(key), dict) and isinstance(program.get(key), dict):
                program[key] = {**program[key], **imported[key]}
        if isinstance(imported.get("modules_left_out"), int):
            program["modules_left_out"] = imported["modules_left_out"]
    first, last = info.get("switches"), foot.get("switches")
    if isinstance(first, dict) and isinstance(last, dict) and "note" not in first and "note" not in last:
        info["switches"] = {**{k: v for k, v in last.items() if k not in first},
                            **{k: (v if k not in last or last[k] == v else f"{v!r} -> {last[k]!r}")
                               for k, v in first.items()}}


def run_info(path: Path) -> dict[str, Any]:
    """What the run recorded about itself (rank 0's header, or the lowest rank's), the packages its
    footers add, per-rank drops, and how each rank's stream ended (``_ends``: partial or not)."""
    files = rank_files(Path(path))
    headers = {r: read_header(f) for r, f in files.items()}
    for r, h in headers.items():
        _header_ok(files[r], h)
    first = headers[min(headers)]
    info = {k: v for k, v in first.items() if k not in ("type", "schema", "rank", "pid", "started")}
    info["schema_version"] = first.get("version")
    info.pop("version", None)
    info["evidence"] = optrace_format.evidence_of(first)  # version 1 traces: full
    info["at"] = first.get("at") if first.get("at") in optrace_format.GRANULARITIES else "ops"
    info["optimizer"] = optrace_format.optimizer_of(first)  # what older traces did
    info["views"] = optrace_format.views_of(first)
    info["traced_ranks"] = sorted(files)
    dropped, ends = {}, {}
    packages = dict(first.get("packages") or {})
    for r, f in sorted(files.items()):
        foot = read_footer(f)
        ends[r] = stream_end_of(f)
        if foot and foot.get("dropped"):
            d = foot["dropped"]
            if d.__class__ is not int or d < 0:
                raise BadInput(f, f"footer dropped must be a non-negative integer, got {_brief(d)}")
            dropped[r] = d
        if foot and isinstance(foot.get("seeds"), dict) and "seeds" not in info:
            info["seeds"] = foot["seeds"]  # known only at the end of the run
        if foot and isinstance(foot.get("packages"), dict) and r == min(files):
            packages.update(foot["packages"])
        if foot and r == min(files):
            _merge_footer(info, foot)
    if packages:
        info["packages"] = packages
    info["_dropped"] = dropped
    info["_ends"] = ends
    info["_complete"] = {r: not e.partial for r, e in ends.items()}
    return info


def read(path: Path) -> Trace:
    """The whole trace in memory (use :func:`iter_ranks` to stream)."""
    return Trace(format="native", path=Path(path),
                 ranks={r: list(it) for r, it in iter_ranks(path)}, run_info=run_info(path))


def detect(path: Path) -> bool:
    path = Path(path)
    if path.is_dir():
        cands = [path / FILE_NAME] + sorted(path.glob(f"rank*/{FILE_NAME}"))[:1]
    else:
        cands = [path]
    for c in cands:
        if c.is_file():
            with open(c, "rb") as f:
                first = f.readline(65536)
            return b'"schema"' in first and SCHEMA.encode() in first
    return False


READER = register_reader(Reader(name="native", detect=detect, read=read, iter_ranks=iter_ranks, run_info=run_info))
