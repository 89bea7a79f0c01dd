"""rocprofv3's rocpd SQLite database (``rocprofv3 --kernel-trace`` on ROCm 7, whose default output it is,
or ``--output-format rocpd``: ``<prefix>_results.db``) -> a launch frame, the launches ``rocpd2csv``
would print as ``kernel_trace.csv`` (``parsers.rocprofv3``).

The schema, as rocprofiler-sdk creates it (``source/share/rocprofiler-sdk-rocpd/rocpd_tables.sql`` and
``rocpd_views.sql``, ROCm/rocprofiler-sdk at commit 50c89cbde07fa1890f7b3167bef29297bdae608e; the
``kernels`` view of ``data_views.sql`` joins the same tables): tables named with the session's uuid
(``rocpd_kernel_dispatch_<uuid>``) and a view without it over each. Read here:

* ``rocpd_kernel_dispatch``: one row per dispatch: ``start``/``end`` (GPU, ns), ``workgroup_size_*``,
  ``grid_size_*`` (the HSA grid in **work-items**: the frame's ``grid`` is workgroups), ``dispatch_id``,
  ``queue_id``, ``stream_id``, ``kernel_id``, ``agent_id``, ``pid``/``tid`` (ids of the info tables, not
  OS numbers), ``event_id``;
* ``rocpd_info_kernel_symbol`` (``kernel_name``: the code object's symbol; ``display_name``),
  ``rocpd_info_process`` (the OS ``pid``), ``rocpd_info_thread`` (the OS ``tid``), ``rocpd_info_agent``
  (``absolute_index``, the number rocprofv3's CSV prints as ``Agent_Id``; ``type``, ``type_index``) and
  ``rocpd_event`` (``correlation_id``), each joined on its id and the row's ``guid``.

Not read: API calls (``rocpd_region``), ROCTx markers, memory copies and allocations, counters, samples.
A database holding several uuid table sets without the views (a merge) is refused, naming them.
"""
from __future__ import annotations

from os import PathLike
from pathlib import Path

import pandas as pd

from forensics.core.errors import BadInput
from forensics.core.model import LAUNCH_COLUMNS, conform, empty_frame

from ._rocm_db import MAX_LAUNCHES, as_int, as_text, launch_row, require_columns, sqlite_file, tables
from .rocm_schema import ROCPD_DISPATCH as DISPATCH, ROCPD_INFO as INFO, ROCPD_SYMBOL as SYMBOL, rocpd_base

INSTRUMENT = "rocprofv3_db"
WHAT = "rocprofv3 rocpd database"
DISPATCH_COLUMNS = ("id", "guid", "pid", "tid", "agent_id", "kernel_id", "dispatch_id", "queue_id", "stream_id",
                    "start", "end", "workgroup_size_x", "workgroup_size_y", "workgroup_size_z", "grid_size_x",
                    "grid_size_y", "grid_size_z", "event_id")

EXTRA_COLUMNS: dict[str, str] = {
    "row": "Int64",  # rocpd_kernel_dispatch.id
    "agent": "string",  # "GPU 0" (type and type_index)
    "queue_id": "Int64",
    "thread_id": "Int64",
    "dispatch_id": "Int64",
    "kernel_id": "Int64",
    "grid_size": "string",
    "grid_unit": "string",
}


def _resolve(path: Path, names: set[str], base: str) -> str | None:
    if base in names:
        return base
    found = sorted(t for t in names if t != base and rocpd_base(t) == base)
    if len(found) > 1:
        raise BadInput(path, f"{len(found)} {base} tables ({', '.join(found[:3])}...) and no {base} view: a merged "
                             "database of several sessions is not read; give each session's own database")
    return found[0] if found else None


def read_database(path: str | PathLike[str]) -> pd.DataFrame:
    """One launch row per ``rocpd_kernel_dispatch`` row (plain or gzipped database).

    ``attrs``: ``problems`` (dispatches whose process, agent or event row is missing), ``losses``
    (none). Bad input naming the file and the table row: not this schema, a value of the wrong type,
    a dispatch whose kernel symbol is missing, more than :data:`parsers._rocm_db.MAX_LAUNCHES` rows.
    """
    p = Path(path)
    with sqlite_file(p) as conn:
        names = tables(conn, p)
        t = {b: _resolve(p, names, b) for b in (DISPATCH, SYMBOL, *INFO)}
        if t[DISPATCH] is None or t[SYMBOL] is None:
            raise BadInput(p, f"no {DISPATCH} or {SYMBOL} table: not {WHAT}")
        require_columns(conn, p, t[DISPATCH], DISPATCH_COLUMNS, WHAT)
        require_columns(conn, p, t[SYMBOL], ("id", "guid", "kernel_name", "display_name"), WHAT)
        n = conn.execute(f'SELECT count(*) FROM "{t[DISPATCH]}"').fetchone()[0]
        if n > MAX_LAUNCHES:
            raise BadInput(p, f"{n} kernel dispatches, more than {MAX_LAUNCHES} (the reader's ceiling, "
                              "parsers._rocm_db.MAX_LAUNCHES): not read")
        joins, cols = [], []
        if t["rocpd_info_process"]:
            joins.append(f'LEFT JOIN "{t["rocpd_info_process"]}" P ON P.id = K.pid AND P.guid = K.guid')
            cols.append("P.pid")
        else:
            cols.append("NULL")
        if t["rocpd_info_thread"]:
            joins.append(f'LEFT JOIN "{t["rocpd_info_thread"]}" T ON T.id = K.tid AND T.guid = K.guid')
            cols.append("T.tid")
        else:
            cols.append("NULL")
        if t["rocpd_info_agent"]:
            joins.append(f'LEFT JOIN "{t["rocpd_info_agent"]}" A ON A.id = K.agent_id AND A.guid = K.guid')
            cols += ["A.absolute_index", "A.type", "A.type_index"]
        else:
            cols += ["NULL", "NULL", "NULL"]
        if t["rocpd_event"]:
            joins.append(f'LEFT JOIN "{t["rocpd_event"]}" E ON E.id = K.event_id AND E.guid = K.guid')
            cols.append("E.correlation_id")
        else:
            cols.append("NULL")
        sql = (f'SELECT K.id, K.start, K."end", K.workgroup_size_x, K.workgroup_size_y, K.workgroup_size_z, '
               f'K.grid_size_x, K.grid_size_y, K.grid_size_z, K.dispatch_id, K.queue_id, K.stream_id, K.kernel_id, '
               f'S.id, S.kernel_name, S.display_name, {", ".join(cols)} '
               f'FROM "{t[DISPATCH]}" K LEFT JOIN "{t[SYMBOL]}" S ON S.id = K.kernel_id AND S.guid = K.guid '
               f'{" ".join(joins)} ORDER BY K.start, K.id')
        rows: list[dict] = []
        no_pid = no_agent = no_corr = 0
        for r in conn.execute(sql):
            rid = r[0]
            w = f"{t[DISPATCH]} row {rid}"
            (start, end, wx, wy, wz, gx, gy, gz, disp, queue, stream, kid) = (
                as_int(p, f"{w}: {c}", v, null=c in ("dispatch_id", "queue_id", "stream_id"))
                for c, v in zip(("start", "end", "workgroup_size_x", "workgroup_size_y", "workgroup_size_z",
                                 "grid_size_x", "grid_size_y", "grid_size_z", "dispatch_id", "queue_id", "stream_id",
                                 "kernel_id"), r[1:13]))
            if r[13] is None:
                raise BadInput(p, f"{w}: kernel_id {kid} has no {t[SYMBOL]} row: the kernel is not named")
            mangled = as_text(p, f"{t[SYMBOL]} row {r[13]}: kernel_name", r[14], null=True)
            shown = as_text(p, f"{t[SYMBOL]} row {r[13]}: display_name", r[15], null=True)
            pid = as_int(p, f"{w}: process pid", r[16], null=True)
            tid = as_int(p, f"{w}: thread tid", r[17], null=True)
            absolute = as_int(p, f"{w}: agent absolute_index", r[18], null=True)
            atype = as_text(p, f"{w}: agent type", r[19], null=True)
            tindex = as_int(p, f"{w}: agent type_index", r[20], null=True)
            corr = as_int(p, f"{w}: event correlation_id", r[21], null=True)
            no_pid += pid is None
            no_agent += absolute is None
            no_corr += corr is None
            rows.append(launch_row(
                p, w, instrument=INSTRUMENT, mangled=mangled, demangled=shown, start=start, end=end,
                workgroup=(wx, wy, wz), grid=(gx, gy, gz), grid_in_items=True, pid=pid, thread_id=tid,
                correlation_id=corr, device_id=absolute,
                agent=f"{atype} {tindex}" if atype is not None and tindex is not None else None,
                row=rid, dispatch_id=disp, queue_id=queue, stream_id=stream, kernel_id=kid))
    problems = []
    for n_missing, what in ((no_pid, "no process row (no OS pid)"), (no_agent, "no agent row (no device)"),
                            (no_corr, "no event row (no correlation id)")):
        if n_missing:
            problems.append(f"{n_missing} dispatch(es) with {what}")
    cols = {**LAUNCH_COLUMNS, **EXTRA_COLUMNS}
    df = conform(pd.DataFrame(rows), cols) if rows else empty_frame(cols)
    df.attrs["problems"] = problems + ([] if rows else ["no kernel dispatch: the database holds no kernel launch "
                                                        "(rocprofv3 without --kernel-trace?)"])
    df.attrs["losses"] = []
    return df
