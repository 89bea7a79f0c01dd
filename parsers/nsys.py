"""Nsight Systems SQLite export (``nsys export --type sqlite``): kernels, runtime calls, NVTX ranges.

Handles the 2021 schema (no ``mangledName``, no ``EXPORT_META_DATA``) and the 2022+ one; strings
come from ``StringIds`` decoded with ``errors="replace"`` (real exports carry invalid UTF-8).
The file is opened read-only. docs/parsers/nsys.md describes the columns.
"""
from __future__ import annotations

import functools
import re
import sqlite3
from contextlib import closing
from os import PathLike
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pandas as pd

from forensics.core.errors import BadInput
from forensics.core.model import LAUNCH_COLUMNS, RANGE_COLUMNS, conform, empty_frame
from forensics.core.site import is_occurrence_label
from forensics.core.demangle import canonical_kernel
from forensics.runtime.inputs import RecordBudget
from parsers._columns import conform_columns
from parsers._rocm_db import check_pages


def one_line(e: BaseException) -> str:
    """SQLite's message, which quotes the damaged schema text (newlines and all), as one line."""
    return " ".join(repr(x)[1:-1] if x.strip() else "" for x in str(e).splitlines()).strip() or type(e).__name__


SQLITE_MAGIC = b"SQLite format 3\x00"
KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_TABLE = "NVTX_EVENTS"
KERNEL_REQUIRED = (
    "start", "end", "deviceId", "streamId", "correlationId", "globalPid", "demangledName", "shortName",
    "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ",
)
RUNTIME_REQUIRED = ("start", "end", "globalTid", "correlationId", "nameId")
NVTX_REQUIRED = ("start", "end", "eventType", "text", "globalTid", "textId", "domainId")
#: The typed border of an export: per table, the columns nsys declares NOT NULL (read from the
#: real exports of ../shared/corpus/nsys, nsys 2021-2023: ``PRAGMA table_info``) that the reader
#: uses. An export built without those constraints can hold NULL there: bad input naming the
#: table, the column and the row, never a failed cast (the other used columns are nullable there:
#: correlationId, globalPid, globalTid, mangledName, an NVTX end, text, textId, domainId).
NOT_NULL = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "deviceId", "streamId", "demangledName", "shortName",
                                   "gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "nameId"),
    "NVTX_EVENTS": ("start", "eventType"),
}
#: NVTX_EVENTS.eventType values (nsys report scripts, exporter docs).
NVTX_PUSHPOP, NVTX_STARTEND, NVTX_DOMAIN_CREATE = 59, 60, 75
#: Serialized GlobalId masks: pid in bits 24..47, tid in bits 0..23.
PROCESS_MASK = 0xFFFFFFFFFF000000


# --------------------------------------------------------------------------- opening
def _check_file(path: Path) -> None:
    """BadInput unless ``path`` is a complete SQLite file (magic and page count vs size)."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(100)
    except FileNotFoundError:
        raise BadInput(path, "file not found") from None
    except IsADirectoryError:
        raise BadInput(path, "is a directory, not an nsys SQLite export") from None
    if size == 0:
        raise BadInput(path, "empty file: expected an nsys SQLite export")
    if not head.startswith(SQLITE_MAGIC):
        raise BadInput(path, "not an SQLite database: expected an nsys SQLite export (nsys export --type sqlite)")
    check_pages(path, size, head)


def _connect(path: str | PathLike[str]) -> sqlite3.Connection:
    path = Path(path)
    _check_file(path)
    uri = "file:" + quote(str(path.resolve())) + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as e:
        raise BadInput(path, f"cannot open SQLite file: {one_line(e)}") from None
    conn.text_factory = lambda b: b.decode("utf-8", errors="replace")
    return conn


def _tables(conn: sqlite3.Connection, path: Path) -> set[str]:
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    except sqlite3.DatabaseError as e:
        raise BadInput(path, f"corrupt SQLite file: {one_line(e)}") from None
    except UnicodeDecodeError as e:  # SQLite's message about a damaged schema, in bytes that are not UTF-8
        raise BadInput(path, f"corrupt SQLite file: its schema holds bytes that are not UTF-8 "
                             f"({e.reason}, byte 0x{e.object[e.start]:02x})") from None


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def _require(conn, path: Path, table: str, required: tuple[str, ...]) -> list[str]:
    cols = _columns(conn, table)
    missing = [c for c in required if c not in cols]
    if missing:
        raise BadInput(path, f"foreign nsys schema: {table} lacks column(s) {', '.join(missing)}")
    return cols


def _open_export(path: str | PathLike[str], need_kernels: bool) -> tuple[sqlite3.Connection, set[str]]:
    """A read-only connection to a checked nsys export and its table names."""
    path = Path(path)
    conn = _connect(path)
    tables = _tables(conn, path)
    if "StringIds" not in tables:
        conn.close()
        raise BadInput(path, "not an nsys SQLite export: no StringIds table")
    if need_kernels and KERNEL_TABLE not in tables:
        conn.close()
        raise BadInput(
            path, f"no {KERNEL_TABLE} table: not an nsys export, or one recorded without CUDA tracing (-t cuda)"
        )
    return conn, tables


def _check_not_null(conn, path: Path, table: str, present: list[str]) -> None:
    """BadInput naming table, column and rowid when a column of :data:`NOT_NULL` holds NULL."""
    for col in NOT_NULL.get(table, ()):
        if col not in present:
            continue
        try:
            row = conn.execute(f'SELECT rowid FROM {table} WHERE "{col}" IS NULL LIMIT 1').fetchone()
        except sqlite3.DatabaseError as e:
            raise BadInput(path, f"corrupt or truncated SQLite file: {one_line(e)}") from None
        if row is not None:
            raise BadInput(path, f"{table} row {row[0]}: {col} is NULL (nsys writes it NOT NULL): a damaged export")


#: Rows fetched at a time: a batch becomes columns (int64 arrays, a mask, shared strings) before the next.
FETCH_ROWS = 8192


def _query(conn, path: Path, sql: str, ints: tuple[str, ...] = (), order_by: str | None = None,
           what: str = "rows") -> pd.DataFrame:
    """Run ``sql``; its rows come ``fetchmany`` at a time into columns (integer columns exact: no
    per-row tuple of the whole table is held, issue 44); corrupt pages -> BadInput.

    Columns named in ``ints`` must hold integers or NULL (SQLite stores any type in any column: a
    text, real or blob value there is a damaged or foreign export, said as bad input). ``order_by``:
    an integer column the rows are put in order of (a stable sort), each column as it is built.
    ``what`` names the rows in the refusal past the record ceiling (``forensics --max-records``)."""
    budget = RecordBudget(path, what)
    try:
        cur = conn.execute(sql)
        names = [d[0] for d in cur.description]
        cols = [_Col() for _ in names]
        while True:
            rows = cur.fetchmany(FETCH_ROWS)
            if not rows:
                break
            budget.take(len(rows))
            grid = np.empty((len(rows), len(names)), dtype=object)
            grid[:] = rows  # one C-level pass; columns are then object-array slices
            del rows
            for j, col in enumerate(cols):
                col.add(grid[:, j], names[j] in ints)
            del grid
    except sqlite3.DatabaseError as e:
        raise BadInput(path, f"corrupt or truncated SQLite file: {one_line(e)}") from None
    if not cols or not cols[0].n:
        return pd.DataFrame({n: np.array([], dtype=np.int64) for n in names})
    for n, col in zip(names, cols):
        if col.odd is not _NONE:
            raise BadInput(path, f"column {n} holds {type(col.odd).__name__} {col.odd!r:.40}, not an integer: "
                           "a damaged or foreign export")
    order = None
    if order_by is not None:
        key = cols[names.index(order_by)].build()
        order = np.argsort(np.asarray(key, dtype=np.int64), kind="stable")
        del key
    out = {}
    for n, col in zip(names, cols):
        values = col.build()
        col.parts = []  # this column's batches, released as it is built
        out[n] = values if order is None else values.take(order) if not isinstance(values, pd.Series) else \
            pd.Series(values.to_numpy().take(order), dtype=object)
        del values
    return pd.DataFrame(out, copy=False)


_NONE = object()
_INTISH = frozenset({int, type(None)})


class _Col:
    """One result column, batch by batch: integers (and NULLs) as int64 arrays and masks, anything
    else as object arrays with one ``str`` per distinct text; :meth:`build` gives what a column of
    all the values gave at once (int64, nullable Int64, string, or object)."""

    __slots__ = ("parts", "kinds", "odd", "n", "_text")

    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, np.ndarray | None]] = []
        self.kinds: set[type] = set()
        self.odd = _NONE  # the first value that is not an integer, in an integer column
        self.n = 0
        self._text: dict[str, str] = {}

    def add(self, values: np.ndarray, integer: bool) -> None:
        kinds = set(map(type, values))
        self.kinds |= kinds
        self.n += len(values)
        if integer and self.odd is _NONE and not kinds <= _INTISH:
            self.odd = next(v for v in values if v is not None and type(v) is not int)
        if kinds <= _INTISH and int in kinds:
            if type(None) in kinds:
                mask = values == None  # noqa: E711  (elementwise on an object array)
                data = values.copy()
                data[mask] = 0
                self.parts.append((data.astype(np.int64), mask))
            else:
                self.parts.append((values.astype(np.int64), None))
            return
        if str in kinds:
            text = self._text
            values = np.array([text.setdefault(v, v) if type(v) is str else v for v in values.tolist()], dtype=object)
        else:
            values = values.copy()
        self.parts.append((values, None))

    def build(self):
        """The column, from its batches."""
        kinds, parts = self.kinds, self.parts
        if kinds <= _INTISH and int in kinds:
            data = np.concatenate([d for d, _ in parts])
            if type(None) not in kinds:
                return data
            mask = np.concatenate([m if m is not None else np.zeros(len(d), dtype=bool) for d, m in parts])
            return pd.arrays.IntegerArray(data, mask)
        if kinds == {type(None)}:
            return pd.array([pd.NA] * self.n, dtype="Int64")
        values = np.concatenate([_objects(d, m) for d, m in parts])
        if kinds <= {str, type(None)}:
            return pd.array(values, dtype="string")
        return pd.Series(values, dtype=object)


def _objects(data: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """A batch as an object array (an integer batch back to Python ints and None)."""
    if data.dtype == object:
        return data
    out = data.astype(object)
    if mask is not None:
        out[mask] = None
    return out


def _strings(conn, path: Path, ids) -> dict[int, str]:
    """``StringIds`` values of the given ids (each decoded once)."""
    wanted = sorted({int(i) for i in ids if not pd.isna(i)})
    out: dict[int, str] = {}
    for lo in range(0, len(wanted), 5000):
        chunk = ",".join(map(str, wanted[lo : lo + 5000]))
        try:
            found = conn.execute(f"SELECT id, value FROM StringIds WHERE id IN ({chunk})").fetchall()
        except sqlite3.DatabaseError as e:
            raise BadInput(path, f"corrupt or truncated SQLite file: {one_line(e)}") from None
        for i, v in found:
            if not isinstance(v, str):
                raise BadInput(path, f"StringIds id {i} holds {type(v).__name__} {v!r:.40}, not text: a damaged export")
        out.update(found)
    return out


def _require_names(path: Path, df: pd.DataFrame, names: dict[int, str]) -> None:
    """Every kernel has a name: its shortName and demangledName ids are in StringIds (a missing id
    is a damaged export, never a launch counted without a kernel name)."""
    for col in ("shortName", "demangledName"):
        ids = pd.Series(df[col])
        for pos, i in enumerate(ids.tolist()):
            if i is None or pd.isna(i) or int(i) not in names:
                corr = df["correlationId"].iloc[pos] if "correlationId" in df.columns else None
                raise BadInput(path, f"kernel launch (correlationId {corr}) has {col} id {i} that StringIds does "
                               "not hold: a corrupt or incomplete export")
    for col in ("shortName", "demangledName", "mangledName"):  # a symbol never starts with a digit
        for i in pd.Series(df[col]).dropna().unique().tolist():
            name = names.get(int(i))
            if isinstance(name, str) and name[:1].isdigit():
                raise BadInput(path, f"kernel {col} (StringIds id {int(i)}) is {name[:40]!r}, a number, not a kernel "
                                     "symbol: a damaged export (StringIds values replaced by numbers?)")


def _map_ids(ids, table: dict[int, str]) -> pd.arrays.StringArray:
    """Map a StringIds id column to its strings (NULL or unknown id -> NA), one lookup per id."""
    series = pd.Series(ids)
    codes, uniques = pd.factorize(series, use_na_sentinel=True)
    values = np.array([table.get(int(u)) for u in uniques] + [None], dtype=object)
    return pd.array(values[codes], dtype="string")  # code -1 (NULL) picks the trailing None


def _global_id_part(values, shift: int) -> pd.arrays.IntegerArray:
    """``(g >> shift) & 0xFFFFFF`` of a serialized GlobalId column (pid: shift 24, tid: 0)."""
    arr = pd.array(values, dtype="Int64")
    mask = np.asarray(arr.isna())
    data = np.asarray(arr.fillna(0), dtype=np.int64)
    return pd.arrays.IntegerArray((data >> shift) & 0xFFFFFF, mask)


def _dim3(x, y, z) -> pd.arrays.StringArray:
    """``"(x, y, z)"`` strings for integer columns, formatted once per distinct triple."""
    key = (np.asarray(x, dtype=np.int64) << 32) | (np.asarray(y, dtype=np.int64) << 16) | np.asarray(z, dtype=np.int64)
    uniq, inverse = np.unique(key, return_inverse=True)
    text = np.array([f"({u >> 32}, {(u >> 16) & 0xFFFF}, {u & 0xFFFF})" for u in uniq.tolist()], dtype=object)
    return pd.array(text[inverse], dtype="string")


def _int64(df: pd.DataFrame, cols) -> None:
    for c in cols:
        if c in df.columns:
            df[c] = df[c].astype("Int64")


def _sqlite_errors_are_bad_input(fn):
    """Any SQLite error while reading an export is a BadInput naming the file (never a traceback)."""

    @functools.wraps(fn)
    def wrapper(path, *args, **kwargs):
        try:
            return fn(path, *args, **kwargs)
        except sqlite3.Error as e:
            raise BadInput(path, f"corrupt or unreadable SQLite file: {one_line(e)}") from None
        except UnicodeDecodeError as e:  # a flipped byte in the schema's own text (sqlite_master)
            raise BadInput(path, f"corrupt SQLite file: its schema holds bytes that are not UTF-8 "
                                 f"({e.reason}, byte 0x{e.object[e.start]:02x})") from None

    return wrapper


# --------------------------------------------------------------------------- public API
#: Capture settings never copied out of META_DATA_CAPTURE (they hold the captured process's environment).
_CAPTURE_SECRET_KEYS = ("ENVIRONMENT_VARIABLE",)


@_sqlite_errors_are_bad_input
def schema_info(path: str | PathLike[str]) -> dict:
    """``{"meta", "capture", "tables", "schema_version", "product_version", "kernel_columns",
    "has_mangled_name"}``.

    ``meta`` is the export metadata: ``EXPORT_META_DATA`` (2022 to 2024.5 exports) or
    ``META_DATA_EXPORT`` (2024.6 and later); {} in 2021 exports. ``capture`` holds
    ``META_DATA_CAPTURE`` (2024.6+: capture settings; a key seen several times, such as
    ``CAPTURE_EVENT_TYPE``, becomes a list) without the captured process's environment variables.
    """
    path = Path(path)
    conn, tables = _open_export(path, need_kernels=False)
    with closing(conn):
        meta = _name_values(conn, path, "EXPORT_META_DATA" if "EXPORT_META_DATA" in tables else
                            "META_DATA_EXPORT" if "META_DATA_EXPORT" in tables else None)
        capture = _name_values(conn, path, "META_DATA_CAPTURE" if "META_DATA_CAPTURE" in tables else None)
        kcols = _columns(conn, KERNEL_TABLE) if KERNEL_TABLE in tables else []
    capture = {k: v for k, v in capture.items() if not k.endswith(_CAPTURE_SECRET_KEYS)}
    return {
        "meta": {k: v[0] if isinstance(v, list) else v for k, v in meta.items()},
        "capture": capture,
        "tables": sorted(tables),
        "schema_version": _one(meta.get("EXPORT_SCHEMA_VERSION")),
        "product_version": _one(meta.get("EXPORT_PRODUCT_VERSION")),
        "kernel_columns": kcols,
        "has_mangled_name": "mangledName" in kcols,
    }


def _name_values(conn: sqlite3.Connection, path: Path, table: str | None) -> dict[str, Any]:
    """A (name, value) metadata table as a dict; a repeated name collects its values in a list."""
    out: dict[str, Any] = {}
    if table is None:
        return out
    try:
        rows = conn.execute(f"SELECT name, value FROM {table}").fetchall()
    except sqlite3.DatabaseError as e:
        raise BadInput(path, f"corrupt SQLite file: {table}: {one_line(e)}") from None
    for name, value in rows:
        key = str(name)
        if key in out:
            prev = out[key]
            out[key] = (prev if isinstance(prev, list) else [prev]) + [value]
        else:
            out[key] = value
    return out


def _one(value: Any) -> Any:
    return value[0] if isinstance(value, list) else value


def kernels_sql(has_runtime: bool) -> str:
    """The kernel query: every kernel column plus the launching runtime/driver call by the canonical
    correlationId + globalPid join (the earliest call when a correlationId repeats in one process,
    as in 2021 exports). Names stay StringIds ids here; ``read_kernels`` maps each distinct id once."""
    if not has_runtime:
        return f"SELECT k.*, NULL AS launch_ns, NULL AS launch_tid, NULL AS api_id FROM {KERNEL_TABLE} AS k"
    return f"""
        SELECT k.*, r.start AS launch_ns, r.globalTid AS launch_tid, r.nameId AS api_id
        FROM {KERNEL_TABLE} AS k
        LEFT JOIN (SELECT correlationId, globalTid, nameId, min(start) AS start
                   FROM {RUNTIME_TABLE} GROUP BY correlationId, globalTid & {PROCESS_MASK:#x}) AS r
               ON r.correlationId = k.correlationId AND (r.globalTid & {PROCESS_MASK:#x}) = k.globalPid"""


_KERNEL_RENAME = {
    "start": "start_ns", "end": "end_ns", "correlationId": "correlation_id", "streamId": "stream_id",
    "deviceId": "device_id", "globalPid": "global_pid",
}
_KERNEL_IDS = ("demangledName", "shortName", "mangledName", "api_id")


@_sqlite_errors_are_bad_input
def read_kernels(path: str | PathLike[str]) -> pd.DataFrame:
    """Launch frame (``LAUNCH_COLUMNS``) of every ``CUPTI_ACTIVITY_KIND_KERNEL`` row, by start.

    ``kernel`` = the mangled symbol demangled by cxxfilt when the export has ``mangledName``,
    else nsys's ``demangledName`` (kept as ``demangled_nsys``); ``short_name`` = nsys
    ``shortName``; ``pid`` from ``globalPid``; ``launch_ns``/``tid``/``api_name`` from the
    launching call (None when the export has no such call); every other kernel column is kept.
    """
    path = Path(path)
    conn, tables = _open_export(path, need_kernels=True)
    with closing(conn):
        kcols = _require(conn, path, KERNEL_TABLE, KERNEL_REQUIRED)
        _check_not_null(conn, path, KERNEL_TABLE, kcols)
        has_runtime = RUNTIME_TABLE in tables
        if has_runtime:
            _check_not_null(conn, path, RUNTIME_TABLE, _require(conn, path, RUNTIME_TABLE, RUNTIME_REQUIRED))
        df = _query(conn, path, kernels_sql(has_runtime),
                    ints=KERNEL_REQUIRED + ("mangledName", "launch_ns", "launch_tid", "api_id"), order_by="start",
                    what=f"{KERNEL_TABLE} rows")
        if "mangledName" not in kcols:
            df["mangledName"] = pd.array([pd.NA] * len(df), dtype="Int64")
        ids = np.concatenate([pd.Series(df[c]).dropna().unique() for c in _KERNEL_IDS]) if len(df) else []
        names = _strings(conn, path, ids)
    _require_names(path, df, names)
    df["demangled_nsys"] = _map_ids(df["demangledName"], names)
    df["short_name"] = _map_ids(df["shortName"], names)
    df["mangled"] = _map_ids(df["mangledName"], names)
    df["api_name"] = _map_ids(df["api_id"], names)
    mangled_id = np.asarray(pd.array(df["mangledName"], dtype="Int64").fillna(-1), dtype=np.int64)
    pair = ((mangled_id + 1) << 32) | np.asarray(df["demangledName"], dtype=np.int64)  # ids < 2**31
    uniq, inverse = np.unique(pair, return_inverse=True)
    canon = [canonical_kernel(names.get((u >> 32) - 1), names.get(u & 0xFFFFFFFF)) for u in uniq.tolist()]
    df["kernel"] = pd.array(np.array(canon, dtype=object)[inverse], dtype="string")
    for col, top in (("gridX", 2**31 - 1), ("gridY", 65535), ("gridZ", 65535), ("blockX", 1024), ("blockY", 1024),
                     ("blockZ", 64)):  # CUDA's limits: anything else is a damaged export, not a launch shape
        bad = df[(df[col] < 0) | (df[col] > top)] if len(df) else df
        if len(bad):
            raise BadInput(path, f"kernel launch (correlationId {bad['correlationId'].iloc[0]}) has {col}="
                           f"{bad[col].iloc[0]}, outside CUDA's 0..{top}: a damaged export")
    df["grid"] = _dim3(df["gridX"], df["gridY"], df["gridZ"])
    df["block"] = _dim3(df["blockX"], df["blockY"], df["blockZ"])
    df["pid"] = _global_id_part(df["globalPid"], 24)
    df["tid"] = _global_id_part(df["launch_tid"], 0)
    df = df.drop(columns=list(_KERNEL_IDS) + ["launch_tid"]).rename(columns=_KERNEL_RENAME)
    df["instrument"] = "nsys"
    df["file"] = str(path)
    return conform_columns(df, LAUNCH_COLUMNS)


@_sqlite_errors_are_bad_input
def read_runtime(path: str | PathLike[str]) -> pd.DataFrame:
    """Every ``CUPTI_ACTIVITY_KIND_RUNTIME`` row (runtime and driver calls): ``start_ns``,
    ``end_ns``, ``name`` (with its ``_vNNNN`` suffix), ``correlation_id``, ``pid``, ``tid``,
    ``event_class``, ``return_value``, ``global_tid``; empty when the table is absent."""
    path = Path(path)
    conn, tables = _open_export(path, need_kernels=False)
    cols = ["start_ns", "end_ns", "name", "correlation_id", "pid", "tid", "event_class", "return_value", "global_tid"]
    with closing(conn):
        if RUNTIME_TABLE not in tables:
            return pd.DataFrame({c: pd.Series(dtype="Int64" if c != "name" else "string") for c in cols})
        rcols = _require(conn, path, RUNTIME_TABLE, RUNTIME_REQUIRED)
        _check_not_null(conn, path, RUNTIME_TABLE, rcols)
        ec = "r.eventClass" if "eventClass" in rcols else "NULL"
        rv = "r.returnValue" if "returnValue" in rcols else "NULL"
        df = _query(
            conn, path,
            f"""SELECT r.start AS start_ns, r.end AS end_ns, n.value AS name, r.correlationId AS correlation_id,
                       (r.globalTid >> 24) & 0xFFFFFF AS pid, r.globalTid & 0xFFFFFF AS tid,
                       {ec} AS event_class, {rv} AS return_value, r.globalTid AS global_tid
                FROM {RUNTIME_TABLE} AS r LEFT JOIN StringIds AS n ON n.id = r.nameId ORDER BY r.start""",
            ints=("start_ns", "end_ns", "correlation_id", "global_tid", "event_class", "return_value", "pid", "tid"),
            what=f"{RUNTIME_TABLE} rows",
        )
    _int64(df, [c for c in cols if c != "name"])
    df["name"] = df["name"].astype("string")
    return df


@_sqlite_errors_are_bad_input
def read_ranges(path: str | PathLike[str]) -> pd.DataFrame:
    """NVTX ranges (``RANGE_COLUMNS``): push/pop (eventType 59, ``kind`` "pushpop") and start/end
    (60, "startend"). ``name`` = registered string (``textId``) or inline ``text``; ``domain`` =
    the name of the eventType-75 row with the same ``domainId`` in the same process (None for the
    default domain); ``end_ns`` None for an unended range. Extra: ``range_id``, ``event_type``,
    ``domain_id``, ``global_tid``, ``end_global_tid``, ``category``, ``color``."""
    path = Path(path)
    conn, tables = _open_export(path, need_kernels=False)
    with closing(conn):
        if NVTX_TABLE not in tables:
            return conform(empty_frame(RANGE_COLUMNS), RANGE_COLUMNS)
        ncols = _require(conn, path, NVTX_TABLE, NVTX_REQUIRED)
        _check_not_null(conn, path, NVTX_TABLE, ncols)
        opt = {c: (f"e.{c}" if c in ncols else "NULL") for c in ("rangeId", "endGlobalTid", "category", "color")}
        df = _query(
            conn, path,
            f"""SELECT coalesce(s.value, e.text) AS name, coalesce(ds.value, dom.text) AS domain,
                       CASE e.eventType WHEN {NVTX_PUSHPOP} THEN 'pushpop' ELSE 'startend' END AS kind,
                       e.start AS start_ns, e.end AS end_ns,
                       (e.globalTid >> 24) & 0xFFFFFF AS pid, e.globalTid & 0xFFFFFF AS tid,
                       {opt['rangeId']} AS range_id, e.eventType AS event_type, e.domainId AS domain_id,
                       e.globalTid AS global_tid, {opt['endGlobalTid']} AS end_global_tid,
                       {opt['category']} AS category, {opt['color']} AS color
                FROM {NVTX_TABLE} AS e
                LEFT JOIN StringIds AS s ON s.id = e.textId
                LEFT JOIN {NVTX_TABLE} AS dom
                       ON dom.eventType = {NVTX_DOMAIN_CREATE} AND dom.domainId = e.domainId AND e.domainId != 0
                      AND (dom.globalTid & 0xFFFFFF000000) = (e.globalTid & 0xFFFFFF000000)
                LEFT JOIN StringIds AS ds ON ds.id = dom.textId
                WHERE e.eventType IN ({NVTX_PUSHPOP}, {NVTX_STARTEND})
                ORDER BY e.start""",
            ints=("start_ns", "end_ns", "range_id", "event_type", "domain_id", "global_tid", "end_global_tid",
                  "category", "color", "pid", "tid"),
            what=f"{NVTX_TABLE} ranges",
        )
    for col in ("name", "domain"):  # range names are text (a blob or number there is damage)
        odd = next((v for v in df[col] if v is not None and not isinstance(v, str) and not pd.isna(v)), None)
        if odd is not None:
            raise BadInput(path, f"an NVTX range {col} is {type(odd).__name__} {odd!r:.40}, not text: a damaged export")
    _int64(df, ("range_id", "event_type", "domain_id", "global_tid", "end_global_tid", "category", "color"))
    df["instrument"] = "nsys"
    df["file"] = str(path)
    return conform_columns(df, RANGE_COLUMNS)


# --------------------------------------------------------------------------- attribution


def attribute(kernels: pd.DataFrame, ranges: pd.DataFrame, pattern: str | re.Pattern | None = None) -> pd.DataFrame:
    """``kernels`` with ``site_label`` = the innermost matching range around each launch.

    A range claims a kernel when the kernel's ``launch_ns`` (the launching call's start, as nsys
    attributes) lies in ``[start_ns, end_ns]`` (an unended range is open to the right), in the same
    process (``pid``); push/pop ranges also need the same thread (``tid``). Only ranges whose name
    is a site occurrence ``SITE#N`` (or, with ``pattern``, whose whole name matches that regex)
    count. Innermost = the latest-starting claiming range. A pid/tid of None matches any.
    Kernels without ``launch_ns`` get no label.
    """
    out = kernels.copy()
    labels = np.full(len(out), None, dtype=object)
    if len(out) and len(ranges):
        if pattern is None:
            names = ranges["name"].astype(object)
            keep = names.map(is_occurrence_label)
        else:
            rx = re.compile(pattern) if isinstance(pattern, str) else pattern
            keep = ranges["name"].astype(object).map(lambda n: isinstance(n, str) and rx.fullmatch(n) is not None)
        sel = ranges[keep.astype(bool).to_numpy()].sort_values("start_ns", kind="stable")
        launch = pd.to_numeric(out["launch_ns"], errors="coerce").astype("Int64")
        has_launch = launch.notna().to_numpy()
        launch_np = launch.fillna(0).to_numpy(dtype=np.int64)
        kpid = out["pid"].astype("Int64") if "pid" in out.columns else pd.Series(pd.NA, index=out.index, dtype="Int64")
        ktid = out["tid"].astype("Int64") if "tid" in out.columns else pd.Series(pd.NA, index=out.index, dtype="Int64")
        order = np.argsort(launch_np, kind="stable")
        sorted_launch = launch_np[order]
        for r in sel.itertuples(index=False):
            lo = np.searchsorted(sorted_launch, int(r.start_ns), side="left")
            hi = len(sorted_launch) if pd.isna(r.end_ns) else np.searchsorted(sorted_launch, int(r.end_ns), side="right")
            if hi <= lo:
                continue
            idx = order[lo:hi]
            mask = has_launch[idx]
            if not pd.isna(r.pid):
                mask &= (kpid.iloc[idx] == r.pid).fillna(True).to_numpy(dtype=bool)
            if r.kind == "pushpop" and not pd.isna(r.tid):
                mask &= (ktid.iloc[idx] == r.tid).fillna(True).to_numpy(dtype=bool)
            labels[idx[mask]] = r.name
    out["site_label"] = pd.array(labels, dtype="string")
    return out


def read_attributed(path: str | PathLike[str], pattern: str | None = None) -> pd.DataFrame:
    """``attribute(read_kernels(path), read_ranges(path), pattern)``; an export with no kernel table
    is 0 launches, and ``attrs["problems"]`` says why (:func:`no_kernel_table_reason`)."""
    path = Path(path)
    conn, tables = _open_export(path, need_kernels=False)
    conn.close()
    if KERNEL_TABLE not in tables:
        df = empty_frame(LAUNCH_COLUMNS)
        df.attrs["problems"] = [no_kernel_table_reason(path)]
        return df
    return attribute(read_kernels(path), read_ranges(path), pattern)


_LAUNCH_CALL = re.compile(r"^(?:cuda|cu)(?:LaunchKernel|LaunchCooperativeKernel|GraphLaunch|LaunchKernelEx)", re.I)


def no_kernel_table_reason(path: str | PathLike[str]) -> str:
    """Why an nsys export has no ``CUPTI_ACTIVITY_KIND_KERNEL`` table, from what it does hold: the
    capture settings (2024.6+ exports list ``CAPTURE_EVENT_TYPE``) and the runtime calls recorded."""
    info = schema_info(path)
    events = info["capture"].get("CAPTURE_EVENT_TYPE")
    events = [events] if isinstance(events, str) else list(events or [])
    runtime = read_runtime(path)
    names = list(dict.fromkeys(str(n) for n in runtime["name"].dropna())) if len(runtime) else []
    launches = [n for n in names if _LAUNCH_CALL.match(n)]
    shown = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    if "Cuda" in events or len(runtime):
        traced = ("CUDA tracing was on (capture settings: CAPTURE_EVENT_TYPE " + ", ".join(events) + ")"
                  if "Cuda" in events else "CUDA calls were traced")
        if launches:
            return (f"0 kernels: {traced} and {len(runtime)} runtime calls include {', '.join(launches[:3])}, yet the "
                    "export has no CUPTI_ACTIVITY_KIND_KERNEL table (kernel activity lost or not exported)")
        return (f"0 kernels: {traced}, and no kernel ran while nsys recorded (no CUPTI_ACTIVITY_KIND_KERNEL table; "
                f"the {len(runtime)} runtime call(s) recorded launch nothing: {shown or 'none'})")
    if events:
        return ("0 kernels: CUDA tracing was off (capture settings: CAPTURE_EVENT_TYPE " + ", ".join(events)
                + "): record with `nsys profile -t cuda`")
    return ("0 kernels: no CUPTI_ACTIVITY_KIND_KERNEL table and no CUDA runtime call recorded (CUDA tracing off, "
            "`nsys profile -t cuda`, or no CUDA work in the recorded span)")


def is_nsys_export(path: str | PathLike[str]) -> bool:
    """True when ``path`` opens as an nsys export with a kernel table."""
    try:
        conn, _ = _open_export(path, need_kernels=True)
        conn.close()
        return True
    except BadInput:
        return False


__all__ = [
    "read_kernels", "read_runtime", "read_ranges", "attribute", "schema_info", "read_attributed",
    "kernels_sql", "is_nsys_export",
]
