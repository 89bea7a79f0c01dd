"""CUPTI JSONL: one CUPTI activity record per line (the project's own format).

Written by ``cupti-python`` activity callbacks (our probes, and the project's device campaign script):
every public scalar field of the record under cupti-python's snake_case name, plus ``kind_name``
(``cupti.ActivityKind(kind).name``, e.g. ``CONCURRENT_KERNEL``) and, for RUNTIME/DRIVER records,
``api_name``. Optional first line ``{"event": "header", "schema": "forensics.cupti", "version": 1}``,
optional ``{"event": "dropped", "dropped": N}`` lines and an optional last
``{"event": "summary", "dropped": N}``. docs/parsers/cupti-jsonl.md has the full description.
"""
from __future__ import annotations

from os import PathLike
from pathlib import Path

import pandas as pd

from forensics.core.errors import BadInput
from forensics.core.model import LAUNCH_COLUMNS, RANGE_COLUMNS, conform, dim3, empty_frame
from parsers._types import check_cupti_record
from parsers._jsonl import read_jsonl, records_frame
from forensics.core.demangle import demangle, short_name

SCHEMA = "forensics.cupti"
WHAT = "CUPTI JSONL"
META_EVENTS = ("header", "summary", "dropped", "unavailable")  # unavailable: probes/cupti.py without CUDA/cupti
KERNEL_KINDS = ("CONCURRENT_KERNEL", "KERNEL")
LAUNCH_KINDS = ("RUNTIME", "DRIVER")
#: CUpti_ActivityKind values, used only when a record lacks ``kind_name``.
KIND_NAMES = {
    1: "MEMCPY", 2: "MEMSET", 3: "KERNEL", 4: "DRIVER", 5: "RUNTIME", 10: "CONCURRENT_KERNEL",
    11: "NAME", 12: "MARKER", 13: "MARKER_DATA", 38: "SYNCHRONIZATION", 39: "EXTERNAL_CORRELATION",
}
#: CUpti_ActivityFlag bits of MARKER records.
MARKER_INSTANTANEOUS, MARKER_START, MARKER_END = 1, 2, 4
#: CUpti_ActivityObjectKind of MARKER records: push/pop ranges are per thread, start/end per process.
OBJECT_PROCESS, OBJECT_THREAD = 1, 2
#: CUpti_ExternalCorrelationKind CUSTOM0: the kind our site recorder pushes (campaign.py, probes).
EXTERNAL_KIND_CUSTOM0 = 3


def _kind_name(obj: dict) -> str | None:
    name = obj.get("kind_name")
    if isinstance(name, str) and name:
        name = name.rsplit(".", 1)[-1]
        return name.removeprefix("CUPTI_ACTIVITY_KIND_")
    kind = obj.get("kind")
    if isinstance(kind, int):
        return KIND_NAMES.get(kind, f"KIND_{kind}")
    return None


def _load(path: str | PathLike[str]):
    """(records with kind_name and line, meta lines) of one file; BadInput on anything foreign."""
    f = read_jsonl(path, SCHEMA, WHAT)
    records, meta = [], []
    for number, obj in f.lines:
        event = obj.get("event")
        if event is not None:
            if event in META_EVENTS:
                meta.append((number, obj))
                continue
            raise BadInput(f.path, f"not a {WHAT}: record has event={event!r} (a site JSONL?)", number)
        kind = _kind_name(obj)
        if kind is None:
            raise BadInput(f.path, f"not a {WHAT}: record has neither kind_name nor kind", number)
        check_cupti_record(obj, f.path, number, kind)  # wrong-typed values are bad input (forensics faults)
        rec = dict(obj)
        rec["kind_name"] = kind
        rec["line"] = number
        records.append(rec)
    return f, records, meta


def read_records(path: str | PathLike[str]) -> pd.DataFrame:
    """Every activity record, all fields kept, plus ``kind_name`` and ``line`` (1-based)."""
    _, records, _ = _load(path)
    if not records:
        return pd.DataFrame({"kind_name": pd.Series(dtype="string"), "line": pd.Series(dtype="Int64")})
    return records_frame(records)


def read_meta(path: str | PathLike[str]) -> dict:
    """The header and summary lines (``None`` when absent) and the per-buffer ``dropped`` lines."""
    f, _, meta = _load(path)
    summary = next((o for _, o in meta if o.get("event") == "summary"), None)
    drops = [o for _, o in meta if o.get("event") == "dropped"]
    return {"header": f.header, "summary": summary, "dropped_events": drops}


def dropped(path: str | PathLike[str]) -> int:
    """Records CUPTI reported as dropped.

    The summary line's ``dropped`` is the total when present; otherwise the sum of ``dropped``
    over ``{"event": "dropped"}`` lines; 0 when the file reports none (campaign.py files never do).
    """
    meta = read_meta(path)
    if meta["summary"] is not None and meta["summary"].get("dropped") is not None:
        return int(meta["summary"]["dropped"])
    return sum(int(o.get("dropped") or o.get("count") or 0) for o in meta["dropped_events"])


def _of_kind(records: list[dict], kinds: tuple[str, ...]) -> list[dict]:
    return [r for r in records if r["kind_name"] in kinds]


def _external_ids(records: list[dict]) -> dict[int, int]:
    """correlation_id -> external_id; CUSTOM0 (our site ids) wins over other external kinds."""
    best: dict[int, tuple[bool, int]] = {}
    for r in _of_kind(records, ("EXTERNAL_CORRELATION",)):
        corr, ext = r.get("correlation_id"), r.get("external_id")
        if corr is None or ext is None:
            continue
        ours = r.get("external_kind") == EXTERNAL_KIND_CUSTOM0
        if corr not in best or ours or not best[corr][0]:
            best[corr] = (ours, int(ext))
    return {c: e for c, (_, e) in best.items()}


def _launches(records: list[dict]) -> dict[int, dict]:
    """correlation_id -> the earliest RUNTIME/DRIVER record (the outermost launching call)."""
    out: dict[int, dict] = {}
    for r in _of_kind(records, LAUNCH_KINDS):
        corr = r.get("correlation_id")
        if corr is None:
            continue
        if corr not in out or (r.get("start") or 0) < (out[corr].get("start") or 0):
            out[corr] = r
    return out


_RENAMED = {"start": "start_ns", "end": "end_ns", "name": "mangled"}


def read_kernels(path: str | PathLike[str]) -> pd.DataFrame:
    """Launch frame (``forensics.core.model.LAUNCH_COLUMNS``) from CONCURRENT_KERNEL/KERNEL records.

    ``mangled`` is the raw ``name``; ``kernel`` its demangled form; ``external_id`` via the
    EXTERNAL_CORRELATION records; ``launch_ns``, ``pid``, ``tid``, ``api_name`` from the
    RUNTIME/DRIVER record of the same ``correlation_id``. Other record fields are kept.
    """
    f, records, meta = _load(path)
    losses = _losses(f, meta)
    kernels = _of_kind(records, KERNEL_KINDS)
    if not kernels:
        df = conform(empty_frame(LAUNCH_COLUMNS), LAUNCH_COLUMNS)
        df.attrs["losses"] = df.attrs["problems"] = losses
        return df
    ext, launch = _external_ids(records), _launches(records)
    rows = []
    for r in kernels:
        row = {_RENAMED.get(k, k): v for k, v in r.items()}
        corr = r.get("correlation_id")
        raw = r.get("name")
        row["kernel"] = demangle(raw) if isinstance(raw, str) else raw
        row["short_name"] = short_name(row["kernel"]) if isinstance(raw, str) else None
        if all(r.get(k) is not None for k in ("grid_x", "grid_y", "grid_z")):
            row["grid"] = dim3(r["grid_x"], r["grid_y"], r["grid_z"])
        if all(r.get(k) is not None for k in ("block_x", "block_y", "block_z")):
            row["block"] = dim3(r["block_x"], r["block_y"], r["block_z"])
        row["external_id"] = ext.get(corr)
        api = launch.get(corr)
        row["launch_ns"] = api.get("start") if api else None
        row["pid"] = api.get("process_id") if api else None
        row["tid"] = api.get("thread_id") if api else None
        row["api_name"] = api.get("api_name") if api else None
        rows.append(row)
    df = records_frame(rows)
    df["instrument"] = "cupti"
    df["file"] = str(f.path)
    df = conform(df, LAUNCH_COLUMNS)
    df.attrs["losses"] = df.attrs["problems"] = losses
    return df


def _losses(f, meta: list) -> list[str]:
    """What the file says was not recorded: CUPTI's (and the probe's budget's) dropped records, or a
    file that stops without its summary line (the traced run was killed)."""
    summary = next((o for _, o in meta if o.get("event") == "summary"), None)
    drops = [o for _, o in meta if o.get("event") == "dropped"]
    n = summary.get("dropped") if summary is not None else None
    if not isinstance(n, int):
        n = sum(int(o.get("dropped") or o.get("count") or 0) for o in drops if isinstance(o.get("dropped") or o.get("count") or 0, int))
    out = [f"CUPTI dropped {n} activity record(s): launch counts from this file may be low"] if n else []
    if summary is None and f.header is not None:
        out.append("no summary line: the traced run stopped before the probe closed its file; "
                   "launch counts from this file may be low")
    return out


def read_runtime(path: str | PathLike[str]) -> pd.DataFrame:
    """RUNTIME and DRIVER records (``start``/``end`` in ns, ``api_name``, ``correlation_id``...)."""
    df = read_records(path)
    if df.empty:
        return df
    return df[df["kind_name"].isin(LAUNCH_KINDS)].reset_index(drop=True)


def read_markers(path: str | PathLike[str]) -> pd.DataFrame:
    """NVTX ranges from MARKER records (RANGE_COLUMNS), start and end records paired by ``id``.

    ``kind`` is ``pushpop`` for thread-object markers, ``startend`` for process-object markers
    (None when the record has no ``object_kind``); instantaneous marks are skipped; a range with
    no end record has ``end_ns`` None. The campaign's records carry no pid/tid (CUPTI keeps them in
    a union cupti-python does not flatten), so ``pid``/``tid`` are filled only when present.
    """
    f, records, _ = _load(path)
    opened: dict[tuple, dict] = {}
    ranges: list[dict] = []
    for r in _of_kind(records, ("MARKER",)):
        flags = int(r.get("flags") or 0)
        key = r.get("id")  # CUPTI end records carry the id only (no name, often no domain)
        if flags & MARKER_START:
            obj = r.get("object_kind")
            row = {
                "name": r.get("name"),
                "domain": r.get("domain") or None,
                "kind": {OBJECT_THREAD: "pushpop", OBJECT_PROCESS: "startend"}.get(obj),
                "start_ns": r.get("timestamp"),
                "end_ns": None,
                "pid": r.get("process_id"),
                "tid": r.get("thread_id"),
                "id": r.get("id"),
                "line": r["line"],
            }
            ranges.append(row)
            opened[key] = row
        elif flags & MARKER_END:
            row = opened.pop(key, None)
            if row is not None:
                row["end_ns"] = r.get("timestamp")
    if not ranges:
        return conform(empty_frame(RANGE_COLUMNS), RANGE_COLUMNS)
    df = records_frame(ranges)
    df["instrument"] = "cupti"
    df["file"] = str(f.path)
    return conform(df, RANGE_COLUMNS)


def is_cupti_jsonl(path: str | PathLike[str]) -> bool:
    """True when the file reads as CUPTI JSONL (no exception)."""
    try:
        _load(Path(path))
        return True
    except BadInput:
        return False
