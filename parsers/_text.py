"""Text helpers shared by the line-oriented log parsers (cuBLASLt, legacy cuBLAS).

- :func:`iter_line_chunks` reads a text log in bounded chunks, with line numbers, and turns
  binary data, bad UTF-8 and foreign files (SQLite, gzip, JSON, ncu reports) into ``BadInput``.
- :func:`tokenize_kv` is the bracket-depth ``key=value`` tokenizer (values may be ``[...]``
  blocks, keys may carry a ``[out]`` suffix); :func:`flat_pairs` is its cached fast path.
"""
from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from functools import lru_cache
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided
import pyarrow as pa
import pyarrow.compute as pc

from forensics.core.errors import BadInput

#: Bytes read per chunk; lines are never split across chunks.
CHUNK_BYTES = 8 << 20

#: A block value: list of ``(key, value)`` pairs, value being ``str`` or a nested block.
Pairs = list[tuple[str, "str | Pairs"]]

_MAGIC: list[tuple[bytes, str]] = [
    (b"SQLite format 3\x00", "an SQLite database (nsys export?)"),
    (b"\x1f\x8b", "a gzip-compressed file (Kineto trace?)"),
    (b"NVR\x00", "an Nsight Compute report (.ncu-rep)"),
    (b"PK\x03\x04", "a zip archive"),
    (b"\x7fELF", "an ELF binary"),
]


class TokenError(ValueError):
    """A ``key=value`` text that does not tokenize; ``column`` is 1-based within the text."""

    def __init__(self, message: str, column: int):
        super().__init__(message)
        self.column = column


def sniff_foreign(head: bytes) -> str | None:
    """What a file is when its first bytes show it is not a text log (else None)."""
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return what
    text = head.lstrip()
    if text[:1] == b"{" or re.match(rb"\[\s*(?:[{\[\"\]]|$)", text):
        return "a JSON document"
    return None


#: The longest line a text reader accepts (a real log line is a few KiB; a file of one endless line is not text).
MAX_LINE_BYTES = 64 << 20


def _no_nul(path: Path, chunk: bytes, first_line: int, what: str) -> None:
    nul = chunk.find(b"\x00")
    if nul >= 0:
        raise BadInput(path, f"binary data (NUL byte), not a {what}", line=first_line + chunk.count(b"\n", 0, nul))


def iter_line_chunks(
    path: str | PathLike[str], what: str, chunk_bytes: int | None = None
) -> Iterator[tuple[int, list[str], bool]]:
    """Yield ``(first_line_number, lines, cut_tail)`` for a UTF-8 text file, chunk by chunk.

    Lines carry no newline. ``cut_tail`` is True only on the last chunk when the file does not
    end with a newline: its last line was cut mid-way. ``what`` names the expected format in
    errors ("cuBLASLt log"). Raises ``BadInput`` for a missing, empty, binary or foreign file.
    """
    p = Path(path)
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    try:
        f = p.open("rb")
    except OSError as e:
        raise BadInput(p, f"cannot read {what}: {e.strerror or e}") from None
    with f:
        head = f.read(chunk_bytes)
        if not head.strip():
            raise BadInput(p, f"empty file: no {what} lines")
        foreign = sniff_foreign(head[:64])
        if foreign:
            raise BadInput(p, f"this is {foreign}, not a {what}", line=1)
        lineno = 1
        _no_nul(p, head, lineno, what)  # a binary file is refused on its first chunk, never read whole
        pending = head
        while True:
            more = f.read(chunk_bytes)
            if not pending and not more:  # end of file (a chunk that ended on a newline leaves nothing pending)
                break
            _no_nul(p, more, lineno + pending.count(b"\n"), what)
            buf = pending + more if more else pending
            cut = buf.rfind(b"\n")
            if more and cut < 0:  # a single line longer than a chunk: keep reading, up to a ceiling
                if len(buf) > MAX_LINE_BYTES:
                    raise BadInput(p, f"a line longer than {MAX_LINE_BYTES >> 20} MiB: not a {what}", line=lineno)
                pending = buf
                continue
            if more:
                body, pending = buf[: cut + 1], buf[cut + 1 :]
            else:
                body, pending = buf, b""
            text = _decode(p, body, lineno, what)
            if "\r" in text:  # CRLF files (logs copied from Windows hosts)
                text = text.replace("\r\n", "\n")
            lines = text.split("\n")
            cut_tail = False
            if lines[-1] == "":
                lines.pop()
            elif not more:
                cut_tail = True
            yield lineno, lines, cut_tail
            lineno += len(lines)


_NON_SPACE = re.compile(rb"\S")


def iter_byte_chunks(
    path: str | PathLike[str], what: str, chunk_bytes: int | None = None, pad: int = 0, buffers: int = 1
) -> Iterator[tuple[int, bytearray, int, bool]]:
    """Yield ``(first_line_number, buf, length, cut_tail)``: ``buf[:length]`` is whole lines, undecoded.

    Same checks as :func:`iter_line_chunks` (missing, empty or foreign file). ``buf`` holds at
    least ``pad`` more (arbitrary) bytes after ``length``, so fixed-width probes need no bounds
    checks. Buffers are reused in turn (``buffers`` of them: a chunk's ``buf`` is overwritten
``buffers`` chunks later): copy what you keep. ``cut_tail`` is True only
    for the last chunk of a file that does not end with a newline.
    """
    p = Path(path)
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    try:
        f = p.open("rb")
    except OSError as e:
        raise BadInput(p, f"cannot read {what}: {e.strerror or e}") from None
    with f:
        chunk_bytes = max(1, min(chunk_bytes, os.fstat(f.fileno()).st_size + 1))  # small files, small buffer
        bufs = [bytearray(chunk_bytes + pad)] + [bytearray(0)] * (buffers - 1)
        turn = 0
        buf = bufs[0]
        filled = f.readinto(memoryview(buf)[:chunk_bytes])
        if _NON_SPACE.search(buf, 0, filled) is None:
            raise BadInput(p, f"empty file: no {what} lines")
        foreign = sniff_foreign(bytes(buf[:min(64, filled)]))
        if foreign:
            raise BadInput(p, f"this is {foreign}, not a {what}", line=1)
        lineno, pending = 1, 0
        while True:
            if filled == pending:  # end of file
                if pending:
                    yield lineno, buf, pending, True
                return
            cut = buf.rfind(b"\n", pending, filled)
            if cut >= 0:
                length = cut + 1
                yield lineno, buf, length, False
                # numpy counts 8 MiB in 1.2 ms, bytearray.count took 2.9
                lineno += int(np.count_nonzero(np.frombuffer(buf, np.uint8, length) == 10))
                pending = filled - length
                turn = (turn + 1) % buffers
                if len(bufs[turn]) - pad - pending < chunk_bytes // 2:
                    bufs[turn] = bytearray(pending + chunk_bytes + pad)
                bufs[turn][:pending] = buf[length:filled]
                buf = bufs[turn]
            else:  # a line longer than a chunk: keep reading
                pending = filled
            room = len(buf) - pad - pending
            if room < chunk_bytes // 2:
                grown = bytearray(pending + chunk_bytes + pad)
                grown[:pending] = buf[:pending]
                buf = bufs[turn] = grown
                room = chunk_bytes
            filled = pending + f.readinto(memoryview(buf)[pending:pending + room])


@lru_cache(maxsize=None)
def arrow_views_work() -> bool:
    """Whether this host and pyarrow take :func:`view_array`'s views (a little-endian host: their
    16-byte layout is written as little-endian words) and whether this pyarrow builds
    ``string_view``/``binary_view`` arrays over our own buffers
    (``Array.from_buffers`` with the views and one data buffer), hashes them and casts them to
    ``binary``: pyarrow 26 does; pyarrow 17 takes no data buffer in ``from_buffers`` (ValueError).
    Where it does not, the readers slice the ranges into an offsets array instead (one copy, the
    same values)."""
    if sys.byteorder != "little":
        return False
    try:
        data = pa.py_buffer(b"abcdefghijklmnopqrstuvwxyz0123456789")
        views = np.zeros((2, 2), dtype="<u8")
        views[0, 0] = 1 | (ord("a") << 32)  # "a", inline
        views[1, 0] = 20 | (int.from_bytes(b"bcde", "little") << 32)  # "bcdefghijklmnopqrstu": prefix, buffer 0, offset 1
        views[1, 1] = 1 << 32
        for kind, want in ((pa.string_view(), ["a", "bcdefghijklmnopqrstu"]),
                           (pa.binary_view(), [b"a", b"bcdefghijklmnopqrstu"])):
            arr = pa.Array.from_buffers(kind, 2, [None, pa.py_buffer(views), data])
            if arr.to_pylist() != want or pc.dictionary_encode(arr).indices.to_pylist() != [0, 1]:
                return False
            if arr.cast(pa.binary()).to_pylist() != [w if isinstance(w, bytes) else w.encode() for w in want]:
                return False
        return True
    except (AttributeError, ValueError, TypeError, pa.ArrowException):
        return False


_LOW_BYTES = np.array([(1 << (8 * i)) - 1 for i in range(8)] + [(1 << 64) - 1], dtype=np.uint64)  # i low bytes kept


def view_array(kind: pa.DataType, data: Any, buf: np.ndarray, starts: np.ndarray, lens: np.ndarray,
               valid: np.ndarray | None = None) -> pa.Array:
    """The byte ranges ``data[start:start + len]`` as an Arrow ``kind`` (``pa.string_view()`` or
    ``pa.binary_view()``) array over ``data`` itself: no byte is copied (each view is 16 bytes,
    little-endian: the length, then up to 12 bytes inline or a 4-byte prefix, buffer 0 and the
    offset); null where ``valid`` is false. ``buf`` is ``data`` as a uint8 array and must hold 16
    bytes after every start; ``data`` must stay unchanged while the array is used; for a string
    view each range must be UTF-8. Only where :func:`arrow_views_work`."""
    n = len(starts)
    if valid is not None:
        lens, starts = np.where(valid, lens, 0), np.where(valid, starts, 0)
    length = lens.astype(np.uint64)
    words = as_strided(buf[:0].view(np.uint64), shape=(len(buf) - 7,), strides=(1,))  # buf[i:i + 8] as one word
    w0 = words[starts] & _LOW_BYTES[np.minimum(length, 8)]
    w1 = words[starts + 8] & _LOW_BYTES[np.clip(length, 8, 12) - 8]
    views = np.empty((n, 2), dtype="<u8")
    short = length <= 12
    views[:, 0] = length | (w0 << np.uint64(32))  # the length, then the first 4 bytes (inline or prefix)
    views[:, 1] = np.where(short, (w0 >> np.uint64(32)) | (w1 << np.uint64(32)), starts.astype(np.uint64) << np.uint64(32))
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(kind, n, [bitmap, pa.py_buffer(views), pa.py_buffer(data)])


def spans_array(buf: bytes | bytearray, starts: np.ndarray, ends: np.ndarray, valid: np.ndarray | None = None) -> pa.LargeStringArray:
    """The byte ranges ``buf[starts[i]:ends[i]]`` as one Arrow string array (null where not ``valid``).

    Ranges must be sorted and must not overlap; an invalid range should be empty. The bytes
    are copied once, by Arrow (no Python object per string).
    """
    k = len(starts)
    offsets = np.empty(2 * k + 1, dtype=np.int64)
    offsets[0] = 0
    offsets[1::2] = starts
    offsets[2::2] = ends
    both = pa.LargeStringArray.from_buffers(2 * k, pa.py_buffer(offsets), pa.py_buffer(buf))
    picks = np.arange(1, 2 * k, 2, dtype=np.int64)
    return both.take(pa.array(picks, mask=None if valid is None else ~valid))


def _decode(path: Path, body: bytes, first_line: int, what: str) -> str:
    """Decode one chunk; NUL bytes or bad UTF-8 become ``BadInput`` at the offending line."""
    nul = body.find(b"\x00")
    if nul >= 0:
        raise BadInput(path, f"binary data (NUL byte), not a {what}", line=first_line + body.count(b"\n", 0, nul))
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        line = first_line + body.count(b"\n", 0, e.start)
        raise BadInput(path, f"not UTF-8 text (byte 0x{body[e.start]:02x}): binary data, not a {what}", line=line) from None


def preview(text: str, width: int = 60) -> str:
    """A short printable excerpt of a line for error messages."""
    s = text.strip()
    return repr(s if len(s) <= width else s[:width] + "...")


# --- key=value tokenizing -------------------------------------------------------------------

_KEY = r"[^\s=\[\]]+(?:\[[^\s\[\]=]*\])?"
#: One flat pair (block values without nested brackets) or one stray token (group 3).
_PAIR_OR_STRAY = re.compile(rf"({_KEY})=(\[[^\[\]]*\]|[^\s\[\]]*)(?=\s|$)|(\S+)")


def flat_pairs(text: str) -> Pairs:
    """Tokenize ``key=value ...`` where blocks have no nested brackets; fall back otherwise.

    Equivalent to :func:`tokenize_kv`, but runs in C for the common case and caches each
    block's contents (descriptor blocks repeat from call to call).
    """
    out: Pairs = []
    for key, value, stray in _PAIR_OR_STRAY.findall(text):
        if stray:
            return tokenize_kv(text)
        if value[:1] == "[":
            out.append((key, _block(value[1:-1])))
        else:
            out.append((key, value))
    return out


@lru_cache(maxsize=4096)
def _block_cached(content: str) -> tuple[tuple[str, object], ...]:
    return tuple(flat_pairs(content))


def _block(content: str) -> Pairs:
    return list(_block_cached(content))


def tokenize_kv(text: str) -> Pairs:
    """Bracket-depth tokenizer for ``key=value key=[k=v ...] ...``.

    Whitespace separates pairs; a value is a ``[...]`` block (tokenized recursively, any depth)
    or a run of non-space characters (``beta=?`` and ``val=a=b`` are legal). A key may end in a
    bracketed suffix (``matmulDesc[out]=0x...``). Raises :class:`TokenError` for an unterminated
    ``[``, a stray ``]``, or a token that is not ``key=value``.
    """
    pairs, _ = _tokenize(text, 0, opened=None)
    return pairs


def _tokenize(text: str, i: int, opened: int | None) -> tuple[Pairs, int]:
    """Pairs from ``text[i:]`` up to the ``]`` closing the block opened at index ``opened``."""
    nested = opened is not None
    out: Pairs = []
    n = len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            if nested:
                raise TokenError(f"unterminated '[' opened at column {opened + 1} (line cut short?)", opened + 1)
            return out, i
        if text[i] == "]":
            if nested:
                return out, i + 1
            raise TokenError("stray ']' outside a block", i + 1)
        start = i
        while i < n and text[i] not in "=[] \t\r\n\f\v":
            i += 1
        if i < n and text[i] == "[" and i > start:  # key suffix such as matmulDesc[out]
            close = text.find("]", i)
            if close < 0 or any(c.isspace() or c in "=[" for c in text[i + 1 : close]):
                raise TokenError(f"expected key=value, got {preview(text[start:])}", start + 1)
            i = close + 1
        if i >= n or text[i] != "=" or i == start:
            raise TokenError(f"expected key=value, got {preview(text[start:start + 40])}", start + 1)
        key = text[start:i]
        i += 1
        if i < n and text[i] == "[":
            value, i = _tokenize(text, i + 1, opened=i)
            out.append((key, value))
        else:
            vstart = i
            while i < n and not text[i].isspace() and text[i] not in "[]":
                i += 1
            if i < n and text[i] == "[":
                raise TokenError(f"'[' inside the value of {key!r}", i + 1)
            out.append((key, text[vstart:i]))
        if i < n and not text[i].isspace() and text[i] != "]":
            raise TokenError(f"expected whitespace after {key}=...", i + 1)


def format_kv(pairs: Pairs) -> str:
    """Inverse of :func:`tokenize_kv`: ``[("a", "1"), ("d", [("t", "x")])]`` -> ``"a=1 d=[t=x]"``."""
    return " ".join(f"{k}=[{format_kv(v)}]" if isinstance(v, list) else f"{k}={v}" for k, v in pairs)
