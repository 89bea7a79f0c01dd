"""Reading input files defensively: one :class:`~forensics.core.errors.BadInput` line, never a hang or a traceback.

* :func:`regular_file` refuses what would hang or mislead a reader: a FIFO (``open`` blocks
  forever), a socket, a device, a directory, a symbolic-link loop, a missing file.
* :func:`read_bytes` / :func:`read_utf8` add a size limit and strict UTF-8 (the line of the
  first bad byte is named).
* :func:`loads_json` / :func:`read_json` are strict JSON: no ``NaN``/``Infinity`` (not JSON,
  and they poison counts and comparisons), a nesting limit (deep nesting is refused, not a
  RecursionError), and messages that tell a truncated document from trailing data.
* :func:`json_error` turns a ``JSONDecodeError`` into that message for readers of their own.
"""
from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from forensics.core.errors import BadInput

#: Deepest JSON nesting accepted (real instrument records nest a few levels).
MAX_JSON_DEPTH = 64
#: Default size limit for whole-file reads of small structured files (manifests, environment.json).
SMALL_FILE_LIMIT = 64 << 20


#: The most bytes a reader that holds its whole input in memory (a Chrome/Kineto JSON, a JSONL
#: file) takes: the file's size, or a gzip file's size once decompressed. A 4 GiB gzip bomb is
#: refused after 1 GiB is decompressed, not read at 8 GB of memory; a real trace over it is read by
#: raising the ceiling (``forensics --max-input-bytes N`` or this variable).
DEFAULT_MAX_INPUT_BYTES = 1 << 30
MAX_INPUT_ENV = "FORENSICS_MAX_INPUT_BYTES"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """``1073741824``, ``512M``, ``4G``, ``4GiB`` -> bytes (ValueError otherwise)."""
    t = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    num, unit = (t[:-1], t[-1]) if t[-1:] in _UNITS and t[-1:] else (t, "")
    if not num.isdigit() or int(num) < 1:
        raise ValueError(f"{text!r} is not a size (bytes, or with K/M/G/T: 512M, 4G)")
    return int(num) * _UNITS[unit]


def max_input_bytes() -> int:
    """The ceiling in force: ``FORENSICS_MAX_INPUT_BYTES`` (set by ``forensics --max-input-bytes``), else 1 GiB."""
    try:
        return parse_size(os.environ[MAX_INPUT_ENV])
    except (KeyError, ValueError):
        return DEFAULT_MAX_INPUT_BYTES


def _over(path: str | os.PathLike[str], what: str, limit: int) -> BadInput:
    return BadInput(path, f"{what}: over the {limit:,}-byte ceiling on an input read whole (raise it: "
                          f"forensics --max-input-bytes N, or {MAX_INPUT_ENV}=N)")


def read_upto(fh, n: int, chunk: int = 16 << 20) -> bytes:
    """At most ``n`` bytes of ``fh``, read in chunks: ``fh.read(n)`` allocates ``n`` bytes up front,
    a MemoryError (an internal error) when the ceiling is raised past the machine's memory
    (``--max-input-bytes 64G`` on a small file)."""
    parts: list[bytes] = []
    left = n
    while left > 0:
        part = fh.read(min(chunk, left))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_bounded(path: str | os.PathLike[str], raw: bytes | None = None) -> bytes:
    """A whole input's bytes, gunzipped when it is gzip, under :func:`max_input_bytes`: refused as
    soon as the file, or its decompressed stream, passes the ceiling (naming it and how to raise
    it). ``raw``: the file's bytes when already read. OSError is the caller's to word."""
    import gzip  # noqa: PLC0415
    import io  # noqa: PLC0415
    import zlib  # noqa: PLC0415

    limit = max_input_bytes()
    if raw is None:
        size = os.stat(path).st_size
        if size > limit:
            raise _over(path, f"{size:,} bytes", limit)
        with open(path, "rb") as fh:
            raw = read_upto(fh, limit + 1)
        if len(raw) > limit:
            raise _over(path, f"more than {limit:,} bytes", limit)
    if raw[:2] != b"\x1f\x8b":
        return raw
    out = bytearray()
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as gz:
            while True:
                chunk = gz.read(16 << 20)
                if not chunk:
                    break
                out += chunk
                if len(out) > limit:
                    raise _over(path, f"its gzip stream decompresses to more than {limit:,} bytes", limit)
    except (EOFError, OSError, zlib.error) as e:
        raise BadInput(path, f"truncated or corrupt gzip: {e}") from None
    return bytes(out)


#: Streamed readers (Kineto/Chrome JSON, rocprofv3 CSV/JSON, nsys tables) hold the rows they keep,
#: not the text, so their byte ceiling is far higher than a whole read's: it bounds the time a read
#: takes, not its memory. An explicit ``--max-input-bytes`` / FORENSICS_MAX_INPUT_BYTES applies to
#: them too; without one they stop at 64 GiB of (decompressed) input.
DEFAULT_MAX_STREAM_BYTES = 64 << 30
#: The most rows a streamed reader keeps from one file (every frame together): what bounds its
#: memory. ``forensics --max-records N`` or this variable raises it.
DEFAULT_MAX_RECORDS = 50_000_000
MAX_RECORDS_ENV = "FORENSICS_MAX_RECORDS"


def max_stream_bytes() -> int:
    """The byte ceiling of a streamed read: FORENSICS_MAX_INPUT_BYTES when set, else 64 GiB."""
    try:
        return parse_size(os.environ[MAX_INPUT_ENV])
    except (KeyError, ValueError):
        return DEFAULT_MAX_STREAM_BYTES


def parse_count(text: str) -> int:
    """``50000000``, ``50_000_000``, ``50,000,000`` -> the count (ValueError unless a whole number >= 1)."""
    t = str(text).strip().replace("_", "").replace(",", "")
    if not t.isdigit() or int(t) < 1:
        raise ValueError(f"{text!r} is not a count of rows (a whole number, 1 or more)")
    return int(t)


def max_records() -> int:
    """The row ceiling of a streamed read: FORENSICS_MAX_RECORDS (``forensics --max-records``), else 50 million."""
    try:
        return parse_count(os.environ[MAX_RECORDS_ENV])
    except (KeyError, ValueError):
        return DEFAULT_MAX_RECORDS


class RecordBudget:
    """Rows a streamed reader may still keep from ``path``: :meth:`take` refuses (BadInput naming
    the ceiling and how to raise it) past :func:`max_records`."""

    __slots__ = ("path", "limit", "kept", "what")

    def __init__(self, path: str | os.PathLike[str], what: str = "rows") -> None:
        self.path, self.limit, self.kept, self.what = path, max_records(), 0, what

    def take(self, n: int = 1) -> None:
        self.kept += n
        if self.kept > self.limit:
            raise BadInput(self.path, f"more than {self.limit:,} {self.what} kept: over the ceiling on the rows a "
                                      f"streamed read keeps (raise it: forensics --max-records N, or {MAX_RECORDS_ENV}=N)")


class _Counted:
    """A binary stream that refuses (BadInput) once more than ``limit`` bytes came through it."""

    def __init__(self, raw, path: str | os.PathLike[str], limit: int, gz: bool, file=None) -> None:  # noqa: ANN001
        self.raw, self.path, self.limit, self.gz, self.count = raw, path, limit, gz, 0
        self.file = file  # the file under a GzipFile (which does not close what it was given)

    def read(self, n: int = -1) -> bytes:
        import zlib  # noqa: PLC0415

        try:
            data = self.raw.read(n if n is not None and n >= 0 else 16 << 20)
        except (EOFError, zlib.error) as e:
            raise BadInput(self.path, f"truncated or corrupt gzip: {e}") from None
        except OSError as e:
            if self.gz:
                raise BadInput(self.path, f"truncated or corrupt gzip: {e}") from None
            raise BadInput(self.path, f"cannot read: {e.strerror or e}") from None
        self.count += len(data)
        if self.count > self.limit:
            what = "its gzip stream decompresses to more than" if self.gz else "more than"
            raise BadInput(self.path, f"{what} {self.limit:,} bytes: over the {self.limit:,}-byte ceiling on a streamed "
                                      f"input (raise it: forensics --max-input-bytes N, or {MAX_INPUT_ENV}=N)")
        return data

    def close(self) -> None:
        self.raw.close()
        if self.file is not None:
            self.file.close()

    def __enter__(self) -> "_Counted":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_stream(path: str | os.PathLike[str], what: str = "file") -> _Counted:
    """``path`` opened for a streamed read: a binary stream (gunzipped when the file is gzip) whose
    ``read`` refuses, with one BadInput line naming the ceiling and the flag that raises it, once
    more than :func:`max_stream_bytes` came through. Use as a context manager."""
    import gzip  # noqa: PLC0415

    path = regular_file(path, what)
    limit = max_stream_bytes()
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed by the returned stream
    except OSError as e:
        raise BadInput(path, f"cannot read: {e.strerror or e}") from None
    gz = fh.read(2) == b"\x1f\x8b"
    fh.seek(0)
    if gz:
        return _Counted(gzip.GzipFile(fileobj=fh, mode="rb"), path, limit, True, fh)
    size = os.fstat(fh.fileno()).st_size
    if size > limit:
        fh.close()
        raise BadInput(path, f"{size:,} bytes: over the {limit:,}-byte ceiling on a streamed input (raise it: "
                             f"forensics --max-input-bytes N, or {MAX_INPUT_ENV}=N)")
    return _Counted(fh, path, limit, False)


def regular_file(path: str | os.PathLike[str], what: str = "file") -> Path:
    """``path`` if it is a readable regular file (links followed), else BadInput saying what it is."""
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise BadInput(path, f"dangling symbolic link (the {what} it points at does not exist)") from None
        raise BadInput(path, f"no such {what}") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise BadInput(path, "symbolic link loop (it points back at itself)") from None
        raise BadInput(path, f"cannot read: {e.strerror}") from None
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise BadInput(path, f"is a directory, not a {what}")
    if stat.S_ISFIFO(mode):
        raise BadInput(path, f"is a FIFO (named pipe), not a {what}: reading it would wait forever")
    if stat.S_ISSOCK(mode) or stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        raise BadInput(path, f"is a socket or device, not a {what}")
    if not stat.S_ISREG(mode):
        raise BadInput(path, f"is not a regular file, not a {what}")
    return path


def read_bytes(path: str | os.PathLike[str], limit: int = SMALL_FILE_LIMIT, what: str = "file") -> bytes:
    path = regular_file(path, what)
    try:
        size = path.stat().st_size
        if size > limit:
            raise BadInput(path, f"{size} bytes: larger than the {limit >> 20} MiB a {what} may have")
        with open(path, "rb") as fh:
            data = read_upto(fh, limit + 1)
    except OSError as e:
        raise BadInput(path, f"cannot read: {e.strerror or e}") from None
    if len(data) > limit:
        raise BadInput(path, f"larger than the {limit >> 20} MiB a {what} may have")
    return data


def decode_utf8(data: bytes, path: str | os.PathLike[str]) -> str:
    """Strict UTF-8 (a leading BOM is dropped); BadInput names the line of the first bad byte."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise BadInput(path, f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})", line) from None
    return text[1:] if text.startswith("\ufeff") else text


def read_utf8(path: str | os.PathLike[str], limit: int = SMALL_FILE_LIMIT, what: str = "file") -> str:
    return decode_utf8(read_bytes(path, limit, what), path)


def json_error(e: json.JSONDecodeError, text: str) -> str:
    """What went wrong, in words: truncated, trailing data, or malformed (with the column)."""
    if e.msg == "Extra data":
        return f"trailing data after the JSON value (column {e.colno})"
    if e.pos >= len(text.rstrip()) or e.msg.startswith("Unterminated string"):
        return f"truncated JSON: {e.msg} (column {e.colno})"
    return f"malformed JSON: {e.msg} (column {e.colno})"


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (NaN and Infinity are refused)")


def depth(obj: Any, limit: int = MAX_JSON_DEPTH) -> int:
    """Nesting depth of a parsed JSON value, stopping at ``limit + 1`` (iterative: no recursion)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        if isinstance(o, (dict, list)):
            deepest = max(deepest, d)
            if deepest > limit:
                return deepest
            stack.extend((v, d + 1) for v in (o.values() if isinstance(o, dict) else o))
    return deepest


def loads_json(text: str, path: str | os.PathLike[str], line: int | None = None,
               max_depth: int = MAX_JSON_DEPTH) -> Any:
    """Strict ``json.loads``: BadInput(path, reason, line) for anything that is not plain JSON."""
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        where = (line if line is not None else e.lineno)
        raise BadInput(path, json_error(e, text), where) from None
    except ValueError as e:  # NaN / Infinity
        raise BadInput(path, str(e), line) from None
    except RecursionError:
        raise BadInput(path, f"JSON nested deeper than Python can read (limit {max_depth} levels)", line) from None
    if depth(obj, max_depth) > max_depth:
        raise BadInput(path, f"JSON nested deeper than {max_depth} levels", line)
    return obj


def read_json(path: str | os.PathLike[str], limit: int = SMALL_FILE_LIMIT, what: str = "JSON file") -> Any:
    text = read_utf8(path, limit, what)
    if not text.strip():
        raise BadInput(path, f"empty file: expected a {what}")
    return loads_json(text, path)
