"""Shared reader for the project's JSONL formats (CUPTI JSONL, site JSONL).

One JSON object per line; an optional first header line ``{"event": "header", "schema": S,
"version": V, ...}``; an optional last ``{"event": "summary", ...}`` line. Files may be gzipped.
Every failure is a :class:`forensics.core.errors.BadInput` naming the file and line.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

from forensics.core.errors import BadInput
from forensics.runtime.inputs import read_bounded

SUPPORTED_VERSION = 1


@dataclass
class JsonlFile:
    """The decoded lines of one JSONL file: ``(line_number, object)`` pairs plus the header."""

    path: Path
    lines: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    header: dict[str, Any] | None = None


def _read_text(path: Path) -> str:
    try:
        raw = read_bounded(path)  # a ceiling on the file and on its decompressed size (gzip)
    except FileNotFoundError:
        raise BadInput(path, "file not found") from None
    except IsADirectoryError:
        raise BadInput(path, "is a directory, not a JSONL file") from None
    if raw.startswith(b"SQLite format 3\x00"):
        raise BadInput(path, "is an SQLite database (an nsys export?), not a JSONL file")
    from forensics.runtime.inputs import decode_utf8  # noqa: PLC0415 - our formats are UTF-8: a bad byte is corruption

    return decode_utf8(raw, path)


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def read_jsonl(path: str | PathLike[str], schema: str, what: str) -> JsonlFile:
    """Decode every line; check the optional header's ``schema`` and ``version``.

    ``what`` names the format in messages ("CUPTI JSONL", "site JSONL").
    """
    path = Path(path)
    text = _read_text(path)
    if not text.strip():
        raise BadInput(path, f"empty file: expected a {what} (one JSON object per line)")
    out = JsonlFile(path)
    decode = json.JSONDecoder(parse_constant=_not_json).decode  # NaN/Infinity are not JSON
    all_lines = text.split("\n")
    last = len(all_lines)
    for number, line in enumerate(all_lines, start=1):
        if not line.strip():
            continue
        try:
            obj = decode(line)
        except json.JSONDecodeError as e:
            cut = number == last and not text.endswith("\n")
            hint = "truncated last line" if cut else ("trailing data after the JSON object" if e.msg == "Extra data"
                                                      else "malformed JSON")
            raise BadInput(path, f"{hint} in {what}: {e.msg} (column {e.colno})", number) from None
        except (ValueError, RecursionError) as e:  # NaN/Infinity, or nesting deeper than Python reads
            why = str(e) if isinstance(e, ValueError) else "JSON nested too deeply"
            raise BadInput(path, f"{why} in {what}", number) from None
        if not isinstance(obj, dict):
            raise BadInput(path, f"not a {what}: line is a JSON {type(obj).__name__}, not an object", number)
        if obj.get("event") == "header":
            if out.lines or out.header is not None:
                raise BadInput(path, "header line must be the first record", number)
            if obj.get("schema") != schema:
                raise BadInput(path, f"not a {what}: header schema {obj.get('schema')!r}, expected {schema!r}", number)
            if obj.get("version") != SUPPORTED_VERSION:
                raise BadInput(
                    path, f"{what} version {obj.get('version')!r} is not supported (this reader knows {SUPPORTED_VERSION})", number
                )
            out.header = obj
        out.lines.append((number, obj))
    return out


def records_frame(rows: list[dict[str, Any]]) -> "pd.DataFrame":
    """A frame from dict records that keeps integers exact.

    A column whose non-null values are all ``int`` becomes nullable ``Int64`` (a plain
    constructor would turn a column with gaps into float64 and lose nanoseconds past 2**53;
    values past the int64 range stay Python ints in an object column). Other columns are inferred.
    """
    import pandas as pd

    columns: dict[str, list[Any]] = {}
    for i, row in enumerate(rows):
        for key, value in row.items():
            col = columns.get(key)
            if col is None:
                col = columns[key] = [None] * i
            col.append(value)
        for key, col in columns.items():
            if len(col) <= i:
                col.append(None)
    data = {}
    for key, col in columns.items():
        present = [v for v in col if v is not None]
        if present and all(type(v) is int for v in present):
            if all(-(1 << 63) <= v < (1 << 63) for v in present):
                data[key] = pd.array(col, dtype="Int64")
                continue
            data[key] = pd.Series(col, dtype=object)
            continue
        if present and all(isinstance(v, (list, dict)) for v in present):
            data[key] = pd.Series(col, dtype=object)
            continue
        data[key] = pd.Series(col)
    return pd.DataFrame(data)
