"""Reader of our own op-tracer output (``probes/optrace.py``): ``<dir>/rank<R>/trace.jsonl``.

One JSON object per line: a header (``"type": "header"``, ``"schema": "forensics.optrace"``),
records (``seq``, ``id``, ``op``, ``kind``, ``step``, ``in``, ``out``, ``meta``), and a footer
(``"type": "footer"``, ``records``, ``dropped``). docs/trace-format.md describes every field.
The reader streams: records are parsed one line at a time, one rank file at a time.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from forensics.errors import BadInput
from forensics.tracediff.traces import Reader, TensorDigest, Trace, TraceRecord, register_reader

try:  # orjson is ~3x faster on these lines; json is the fallback
    import orjson

    _loads = orjson.loads
    _JSONError: tuple[type[Exception], ...] = (orjson.JSONDecodeError, ValueError)
except ImportError:  # pragma: no cover - depends on the environment
    _loads = json.loads
    _JSONError = (ValueError,)

SCHEMA = "forensics.optrace"
SCHEMA_VERSION = 1
FILE_NAME = "trace.jsonl"
_RANK_DIR = re.compile(r"^rank(\d+)$")


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
    """The first line of a rank file, checked for schema and version."""
    with open(path, "rb") as f:
        first = f.readline()
    if not first.strip():
        raise BadInput(path, "empty file: no trace header", 1)
    try:
        header = _loads(first)
    except _JSONError:
        raise BadInput(path, "first line is not JSON: not a forensics trace", 1) from None
    if not isinstance(header, dict) or header.get("schema") != SCHEMA or header.get("type") != "header":
        raise BadInput(path, f"foreign schema: first line is not a {SCHEMA} header", 1)
    if header.get("version") != SCHEMA_VERSION:
        raise BadInput(path, f"{SCHEMA} version {header.get('version')!r}; this reader reads version {SCHEMA_VERSION}", 1)
    return header


def read_footer(path: Path) -> dict[str, Any] | None:
    """The last line when it is a footer, else None (the process died before closing the trace)."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - 4096))
        tail = f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    try:
        obj = _loads(tail)
    except _JSONError:
        return None
    return obj if isinstance(obj, dict) and obj.get("type") == "footer" else None


_new = object.__new__


def _tensor(obj: Any, path: Path, line: int) -> TensorDigest | None:
    if obj is None:
        return None
    if not isinstance(obj, dict):
        raise BadInput(path, f"tensor entry is {type(obj).__name__}, expected an object or null", line)
    shape = obj.get("s")
    chunks = obj.get("c")
    if shape is not None and not isinstance(shape, list) or chunks is not None and not isinstance(chunks, list):
        raise BadInput(path, "tensor entry: 's' and 'c' must be lists", line)
    t = _new(TensorDigest)  # frozen dataclass without its per-field __setattr__ cost (hot path)
    t.__dict__.update(shape=tuple(shape) if shape is not None else None, dtype=obj.get("t"), numel=obj.get("n"),
                      digest=obj.get("h"), chunks=tuple(chunks) if chunks is not None else None,
                      evidence=obj.get("ev", "full"))
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

    def same_full_digests(self, other: object) -> bool:
        """Fast path for the differ: True when both lists are still unparsed, their recorded
        entries are identical, and every entry is a full-evidence digest. False means "compare
        the parsed digests" (not "different")."""
        if not isinstance(other, LazyTensors) or self._raw is None or other._raw is None:
            return False
        raw = self._raw
        if raw != other._raw:
            return False
        for t in raw:
            if t is not None and (not isinstance(t, dict) or "ev" in t or "h" not in t):
                return False
        return True


def iter_records(path: Path, rank: int | None = None) -> Iterator[TraceRecord]:
    """Records of one rank file, in seq order; BadInput (file:line) on anything malformed."""
    path = Path(path)
    header = read_header(path)
    rank = int(header.get("rank", 0)) if rank is None else rank
    src = str(path)
    footer_seen = False
    loads, new, lazy_new, record_cls, lazy_cls = _loads, _new, list.__new__, TraceRecord, LazyTensors
    with open(path, "rb") as f:
        f.readline()
        line_no = 1
        last_seq = -1
        for raw in f:
            line_no += 1
            if footer_seen:
                raise BadInput(path, "data after the footer", line_no)
            if raw[-1:] != b"\n":
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
            try:
                seq, identity, name = obj["seq"], obj["id"], obj["op"]
            except KeyError as e:
                raise BadInput(path, f"record lacks field {e.args[0]!r}", line_no) from None
            if seq.__class__ is not int or seq <= last_seq:
                raise BadInput(path, f"seq {seq!r} is not increasing (previous {last_seq})", line_no)
            last_seq = seq
            raw_in, raw_out = obj.get("in") or [], obj.get("out") or []
            if raw_in.__class__ is not list or raw_out.__class__ is not list:
                raise BadInput(path, "'in' and 'out' must be lists", line_no)
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
            yield rec
    if not footer_seen:
        raise BadInput(path, "no footer: the trace was cut short (the process died before it closed?)", line_no)


def iter_ranks(path: Path) -> Iterator[tuple[int, Iterator[TraceRecord]]]:
    """``(rank, lazy record iterator)`` per rank file, ranks in order."""
    for rank, file in sorted(rank_files(Path(path)).items()):
        yield rank, iter_records(file, rank)


def run_info(path: Path) -> dict[str, Any]:
    """What the run recorded about itself (rank 0's header, or the lowest rank's) plus per-rank
    record counts and drops from the footers."""
    files = rank_files(Path(path))
    headers = {r: read_header(f) for r, f in files.items()}
    first = headers[min(headers)]
    info = {k: v for k, v in first.items() if k not in ("type", "schema", "rank", "pid", "started")}
    info["schema_version"] = first.get("version")
    info.pop("version", None)
    info["traced_ranks"] = sorted(files)
    dropped, complete = {}, {}
    for r, f in sorted(files.items()):
        foot = read_footer(f)
        complete[r] = foot is not None
        if foot and foot.get("dropped"):
            dropped[r] = int(foot["dropped"])
        if foot and isinstance(foot.get("seeds"), dict) and "seeds" not in info:
            info["seeds"] = foot["seeds"]  # known only at the end of the run
    info["_dropped"] = dropped
    info["_complete"] = complete
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
