"""What the readers of AMD's structured outputs share (rocprofv3's JSON and rocpd SQLite, rocmProfileData's
``.rpd``): bounded reading of a plain or gzipped file, a read-only SQLite connection to a checked
file, the typed border (a value that is not an integer is bad input naming the table or JSON path
and the row), and one launch row in the form the rocprofv3 CSV reader gives.

Ceilings (docs/parsers/rpd.md, rocprofv3-rocpd.md): :data:`MAX_BYTES` bytes of a database, after gzip
decompression, and :data:`MAX_LAUNCHES` launch rows; past either the file is refused with a line
naming the limit, never read in part. rocprofv3's JSON is streamed (issue 44) under the streamed-read
ceilings of ``forensics.runtime.inputs`` (``--max-input-bytes``, ``--max-records``), not these.
"""
from __future__ import annotations

import contextlib
import math
import os
import sqlite3
import struct
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from forensics.core.demangle import canonical_kernel, short_name
from forensics.core.errors import BadInput
from forensics.core.model import dim3


def one_line(e: BaseException) -> str:
    """SQLite's message, which quotes the damaged schema text (newlines and all), as one line."""
    return " ".join(repr(x)[1:-1] if x.strip() else "" for x in str(e).splitlines()).strip() or type(e).__name__


SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
#: Bytes of one file read at most (after gzip decompression): past it the file is refused.
MAX_BYTES = 4 << 30
#: Bytes of one JSON file read whole at most (main's rocprofv3 JSON reader; the streamed one does not use it).
MAX_JSON_BYTES = 1 << 30
#: Launch rows of one file read at most: past it the file is refused.
MAX_LAUNCHES = 20_000_000
_CHUNK = 1 << 20
_INT64 = (-(1 << 63), (1 << 63) - 1)


def _gib(n: int) -> str:
    return f"{n / (1 << 30):g} GiB"


def is_gzip(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == GZIP_MAGIC
    except OSError as e:
        raise BadInput(path, f"cannot read: {e.strerror or e}") from None


def _copy_gunzip(path: Path, out, limit: int) -> int:
    """Decompress ``path`` into the open binary file ``out``; BadInput when it is damaged or larger than ``limit``."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    total = 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            try:
                data = d.decompress(chunk)
            except zlib.error as e:
                raise BadInput(path, f"a gzip file that does not decompress ({e}): corrupt") from None
            total += len(data)
            if total > limit:
                raise BadInput(path, f"decompresses to more than {_gib(limit)} (the ceiling on what is decompressed): "
                                     "not read; decompress it yourself")
            out.write(data)
            if d.eof:
                if d.unused_data.strip(b"\x00"):  # a second gzip member: concatenated files are not one database
                    raise BadInput(path, "more than one gzip member: not one file")
                break
    if not d.eof:
        raise BadInput(path, f"the gzip stream ends early after {total} decompressed bytes: truncated")
    return total


def gunzip_to(path: str | os.PathLike[str], out: Path, limit: int = MAX_BYTES) -> int:
    """Decompress a gzip file into ``out`` (at most ``limit`` bytes, else BadInput naming the limit)."""
    with open(out, "wb") as f:
        return _copy_gunzip(Path(path), f, limit)


def read_bytes(path: str | os.PathLike[str], what: str, limit: int = MAX_BYTES) -> bytes:
    """The whole of a (possibly gzipped) text file, at most ``limit`` bytes, else BadInput naming the limit."""
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError as e:
        raise BadInput(p, f"cannot read {what}: {e.strerror or e}") from None
    if size == 0:
        raise BadInput(p, f"empty file: expected {what}")
    if is_gzip(p):
        import io

        buf = io.BytesIO()
        _copy_gunzip(p, buf, limit)
        return buf.getvalue()
    if size > limit:
        raise BadInput(p, f"{size} bytes, more than {_gib(limit)} (the reader's ceiling): not read")
    return p.read_bytes()


def check_sqlite(path: Path, shown: Path | None = None) -> None:
    """BadInput unless ``path`` is a whole SQLite file: its magic, and its size a whole number of pages
    no shorter than the header's page count (a cut copy); ``shown`` is the name said in the error."""
    shown = shown or path
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(100)
    except OSError as e:
        raise BadInput(shown, f"cannot read: {e.strerror or e}") from None
    if not head.startswith(SQLITE_MAGIC):
        raise BadInput(shown, "not an SQLite database (no 'SQLite format 3' header)")
    check_pages(shown, size, head)


def check_pages(shown: Path, size: int, head: bytes) -> None:
    """BadInput unless an SQLite file of ``size`` bytes whose first 100 bytes are ``head`` is whole: the
    header itself, a whole number of pages, no fewer than the header's page count (a cut copy)."""
    if len(head) < 100:
        raise BadInput(shown, f"truncated SQLite file: {size} bytes, shorter than the 100-byte header")
    page_size = struct.unpack(">H", head[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    change_counter, page_count = struct.unpack(">II", head[24:32])
    valid_for = struct.unpack(">I", head[92:96])[0]
    if page_size < 512 or size % page_size:
        raise BadInput(shown, f"truncated SQLite file: {size} bytes is not a whole number of {page_size}-byte pages")
    if valid_for == change_counter and page_count and size < page_count * page_size:
        raise BadInput(shown, f"truncated SQLite file: {size} bytes, the header says {page_count} pages of "
                              f"{page_size} bytes")


@contextlib.contextmanager
def sqlite_file(path: str | os.PathLike[str], limit: int = MAX_BYTES) -> Iterator[sqlite3.Connection]:
    """A read-only connection to a checked SQLite file; a gzipped one is decompressed (at most ``limit``
    bytes) into a temporary file that is removed afterwards. Strings decode with ``errors="replace"``."""
    p = Path(path)
    with contextlib.ExitStack() as stack:
        real = p
        if is_gzip(p):
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="forensics-sqlite-"))
            real = Path(tmp) / "db.sqlite"
            gunzip_to(p, real, limit)
        else:
            try:
                size = p.stat().st_size
            except OSError as e:
                raise BadInput(p, f"cannot read: {e.strerror or e}") from None
            if size > limit:
                raise BadInput(p, f"{size} bytes, more than {_gib(limit)} (the reader's ceiling, "
                                  "parsers._rocm_db.MAX_BYTES): not read")
        check_sqlite(real, p)
        uri = "file:" + quote(str(real.resolve())) + "?mode=ro&immutable=1"
        try:
            conn = sqlite3.connect(uri, uri=True)
        except sqlite3.Error as e:
            raise BadInput(p, f"cannot open SQLite file: {one_line(e)}") from None
        stack.callback(conn.close)
        conn.text_factory = lambda b: b.decode("utf-8", errors="replace")
        try:
            yield conn
        except sqlite3.DatabaseError as e:
            raise BadInput(p, f"corrupt SQLite file: {one_line(e)}") from None
        except UnicodeDecodeError:  # SQLite's own message about a damaged schema, in bytes that are not UTF-8
            raise BadInput(p, "corrupt SQLite file: its schema does not parse") from None


def tables(conn: sqlite3.Connection, path: Path) -> set[str]:
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    except sqlite3.DatabaseError as e:
        raise BadInput(path, f"corrupt SQLite file: {one_line(e)}") from None
    except UnicodeDecodeError:  # SQLite's message about a damaged schema, in bytes that are not UTF-8
        raise BadInput(path, "corrupt SQLite file: its schema does not parse") from None


def columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]


def require_columns(conn: sqlite3.Connection, path: Path, table: str, need: tuple[str, ...], what: str) -> None:
    have = columns(conn, table)
    missing = [c for c in need if c not in have]
    if missing:
        raise BadInput(path, f"{table} lacks column(s) {', '.join(missing)}: not the {what} schema this reader knows")


def as_int(path: Path, where: str, value: Any, *, null: bool = False, line: int | None = None) -> int | None:
    """``value`` as an int64; ``where`` names it (``rocpd_op row 7: start``). A float with no fraction
    is taken (JSON writers print ``1.0``); a bool, text or a fraction is bad input, and NULL unless ``null``."""
    if value is None:
        if null:
            return None
        raise BadInput(path, f"{where} is missing (null) where an integer is required", line=line)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadInput(path, f"{where} is {value!r} ({type(value).__name__}), not an integer", line=line)
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise BadInput(path, f"{where} is {value!r}, not an integer", line=line)
        value = int(value)
    if not _INT64[0] <= value <= _INT64[1]:
        raise BadInput(path, f"{where} is {value}, past int64", line=line)
    return value


def as_text(path: Path, where: str, value: Any, *, null: bool = False, line: int | None = None) -> str | None:
    if value is None and null:
        return None
    if not isinstance(value, str):
        raise BadInput(path, f"{where} is {value!r} ({type(value).__name__}), not text", line=line)
    return value


def strip_kd(symbol: str | None) -> str | None:
    """A code object's kernel symbol (``_Z...kd`` / ``name.kd``) without the kernel-descriptor suffix."""
    if symbol and symbol.endswith(".kd"):
        return symbol[:-3]
    return symbol


def launch_row(path: Path, where: str, *, instrument: str, mangled: str | None, demangled: str | None,
               start: int, end: int, workgroup: tuple[int, int, int], grid: tuple[int, int, int],
               grid_in_items: bool, line: int | None = None, **extra: Any) -> dict:
    """One launch frame row. ``grid`` is what the file holds: work-items when ``grid_in_items`` (the HSA
    dispatch packet's grid, rocprofv3), else workgroups; the frame's ``grid`` is always workgroups per
    dimension (``ceil(items / workgroup)``, CUDA's meaning, as the CSV reader gives) and the file's
    numbers are kept as ``grid_size``."""
    if any(w <= 0 for w in workgroup):
        raise BadInput(path, f"{where}: workgroup size {workgroup} has a zero or negative dimension", line=line)
    if any(g < 0 for g in grid):
        raise BadInput(path, f"{where}: grid {grid} has a negative dimension", line=line)
    if end < start:
        raise BadInput(path, f"{where}: ends before it starts ({end} < {start})", line=line)
    mangled = strip_kd(mangled) or None
    demangled = strip_kd(demangled) or None
    if mangled is None and demangled is not None and demangled.startswith("_Z"):  # a "name" column holding the symbol
        mangled, demangled = demangled, None
    kernel = canonical_kernel(mangled if mangled and mangled.startswith("_Z") else None, demangled or mangled)
    if not kernel:
        raise BadInput(path, f"{where}: no kernel name", line=line)
    groups = tuple(math.ceil(g / w) for g, w in zip(grid, workgroup)) if grid_in_items else grid
    return {"instrument": instrument, "file": str(path), "kernel": kernel,
            "mangled": mangled if mangled and mangled != kernel else None,
            "short_name": short_name(kernel) or kernel, "start_ns": start, "end_ns": end,
            "grid": dim3(*groups), "block": dim3(*workgroup), "grid_size": dim3(*grid),
            "grid_unit": "work-items" if grid_in_items else "workgroups", **extra}
