"""rocmProfileData's ``.rpd`` SQLite database (``runTracer.sh``, ``rpd_tracer``; plain or gzipped) -> a launch frame.

The schema, as ROCm/rocmProfileData creates it (``rpd_tracer/*Table.cpp``, the ``rocpd_*`` tables its
``rocpd_python`` schema defines; the ``kernel`` view joins the same tables), at commit
e943e7a5e87850cdf8b2223e0afa785849e6bbc0:

* ``rocpd_op``: one row per GPU operation: ``gpuId``, ``queueId``, ``start``/``end`` (GPU, ns),
  ``opType_id`` (a ``rocpd_string``: ``KernelExecution`` for a kernel, ``CopyDeviceToHost``...);
* ``rocpd_api``: one row per HIP API call: ``pid``, ``tid``, ``start``/``end``, ``apiName_id``;
* ``rocpd_api_ops``: which call made which op; ``rocpd_kernelapi``: the launching call's
  ``gridX/Y/Z``, ``workgroupX/Y/Z``, ``stream`` and ``kernelName_id``.

One launch per ``KernelExecution`` op. ``launch_ns``, ``pid`` and ``tid`` are the launching call's;
``correlation_id`` is its ``rocpd_api.id`` (rpd's link between a call and its op). The grid's unit
is the launching call's, as rpd's roctracer source records it (``rpd_tracer/RoctracerDataSource.cpp``):
``hipExtModuleLaunchKernel`` and ``hipHccModuleLaunchKernel`` (Tensile and hipBLASLt kernels) give
the global work size in **work-items**; ``hipLaunchKernel``, ``hipModuleLaunchKernel`` and the other
launches give **workgroups**. rpd's rocprofiler-sdk source (``RocprofDataSource.cpp``, built on ROCm 7)
records work-items for every launch and the file does not say which source wrote it: when nothing in
the file tells them apart, ``attrs["problems"]`` says so. A kernel op whose launching call is none of
these (or absent) keeps its numbers as ``grid_size`` and has no ``grid``.

ROCTx push/pop ranges (``rocpd_api`` rows named ``UserMarker``, the message in ``args``: what
``RoctracerDataSource.cpp`` writes) are read by :func:`read_ranges`; :func:`read_attributed` gives each
launch the innermost ``SITE#N`` range around its launching call (same process and thread).

Not read: copies, barriers, ``roctxMarkA`` points, ``rocpd_monitor``, stack frames, autograd tables. An
``.rpd`` recorded through CUPTI on NVIDIA (``cudaLaunchKernel`` calls) is refused.
"""
from __future__ import annotations

from os import PathLike
from pathlib import Path

import pandas as pd

from forensics.core.errors import BadInput
from forensics.core.model import LAUNCH_COLUMNS, RANGE_COLUMNS, conform, dim3, empty_frame

from ._rocm_db import MAX_LAUNCHES, as_int, as_text, launch_row, require_columns, sqlite_file, tables
from .rocm_schema import RPD_TABLES as TABLES

INSTRUMENT = "rpd"
WHAT = "rocmProfileData .rpd database"
KERNEL_OP = "KernelExecution"
#: Launching calls whose grid rpd's roctracer source records in work-items (the global work size).
WORK_ITEM_APIS = frozenset({"hipExtModuleLaunchKernel", "hipHccModuleLaunchKernel"})
#: Launching calls whose grid it records in workgroups (gridDim / numBlocks).
WORKGROUP_APIS = frozenset({"hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel",
                            "hipLaunchCooperativeKernel", "hipLaunchCooperativeKernelMultiDevice",
                            "hipExtLaunchMultiKernelMultiDevice"})

EXTRA_COLUMNS: dict[str, str] = {
    "row": "Int64",  # rocpd_op.id
    "api": "string",  # the launching call's name
    "queue_id": "Int64",
    "thread_id": "Int64",
    "stream": "string",  # the HIP stream as rpd prints it ("0x0")
    "grid_size": "string",
    "grid_unit": "string",
}


def read_database(path: str | PathLike[str], with_ranges: bool = False) -> pd.DataFrame:
    """One launch row per ``KernelExecution`` op of an ``.rpd`` (plain or gzipped); ``with_ranges``: its
    ROCTx ranges too, as ``attrs["ranges"]`` (:func:`read_ranges`'s frame), from the same opening.

    ``attrs``: ``problems`` (the grid unit when the file cannot say it, ops without a launching call),
    ``losses`` (ops that are not kernels: copies, barriers, per type). Bad input naming the file and the
    table row: not this schema, a value of the wrong type, an op tied to two calls, a CUPTI-recorded
    file, more than :data:`parsers._rocm_db.MAX_LAUNCHES` kernel ops.
    """
    p = Path(path)
    with sqlite_file(p) as conn:
        df = _launches(conn, p)
        if with_ranges:
            df.attrs["ranges"] = _ranges(conn, p)
    return df


def _launches(conn, p: Path) -> pd.DataFrame:
    """The launch frame of an open .rpd (read_database's body)."""
    names = tables(conn, p)
    missing = [t for t in TABLES if t not in names]
    if missing:
        raise BadInput(p, f"no {', '.join(missing)} table: not {WHAT}")
    require_columns(conn, p, "rocpd_op", ("id", "gpuId", "queueId", "start", "end", "opType_id",
                                          "description_id"), WHAT)
    require_columns(conn, p, "rocpd_api", ("id", "pid", "tid", "start", "apiName_id"), WHAT)
    require_columns(conn, p, "rocpd_kernelapi", ("api_ptr_id", "stream", "gridX", "gridY", "gridZ", "workgroupX",
                                                 "workgroupY", "workgroupZ", "kernelName_id"), WHAT)
    kinds = conn.execute("SELECT S.string, count(*) FROM rocpd_op O LEFT JOIN rocpd_string S ON S.id = O.opType_id "
                         "GROUP BY S.string").fetchall()
    n = sum(c for k, c in kinds if k == KERNEL_OP)
    if n > MAX_LAUNCHES:
        raise BadInput(p, f"{n} kernel ops, more than {MAX_LAUNCHES} (the reader's ceiling, "
                          "parsers._rocm_db.MAX_LAUNCHES): not read")
    sql = ("SELECT O.id, O.gpuId, O.queueId, O.start, O.\"end\", D.string, A.id, A.pid, A.tid, A.start, AN.string, "
           "K.api_ptr_id, K.stream, K.gridX, K.gridY, K.gridZ, K.workgroupX, K.workgroupY, K.workgroupZ, KN.string "
           "FROM rocpd_op O JOIN rocpd_string OT ON OT.id = O.opType_id "
           "LEFT JOIN rocpd_string D ON D.id = O.description_id "
           "LEFT JOIN rocpd_api_ops AO ON AO.op_id = O.id "
           "LEFT JOIN rocpd_api A ON A.id = AO.api_id "
           "LEFT JOIN rocpd_string AN ON AN.id = A.apiName_id "
           "LEFT JOIN rocpd_kernelapi K ON K.api_ptr_id = AO.api_id "
           "LEFT JOIN rocpd_string KN ON KN.id = K.kernelName_id "
           f"WHERE OT.string = '{KERNEL_OP}' ORDER BY O.start, O.id")
    rows: list[dict] = []
    seen: set[int] = set()
    no_call = unknown_unit = 0
    block_rows = block_proof = 0
    for r in conn.execute(sql):
        oid = as_int(p, "rocpd_op: id", r[0])
        w = f"rocpd_op row {oid}"
        if oid in seen:
            raise BadInput(p, f"{w} is tied to more than one call in rocpd_api_ops: not one launch")
        seen.add(oid)
        gpu = as_int(p, f"{w}: gpuId", r[1])
        queue = as_int(p, f"{w}: queueId", r[2], null=True)
        start, end = as_int(p, f"{w}: start", r[3]), as_int(p, f"{w}: end", r[4])
        description = as_text(p, f"{w}: description", r[5], null=True)
        api = as_text(p, f"rocpd_api row {r[6]}: apiName", r[10], null=True)
        if api and api.startswith("cu"):
            raise BadInput(p, f"{w} was launched by {api}: an .rpd recorded through CUPTI on an NVIDIA GPU, not "
                              "read as an AMD capture (read that run's nsys export or CUPTI records)")
        name = as_text(p, f"rocpd_kernelapi row {r[11]}: kernelName", r[19], null=True) if r[11] is not None else None
        name = name or description
        if r[6] is None:
            no_call += 1
        extra = dict(pid=as_int(p, f"rocpd_api row {r[6]}: pid", r[7], null=True),
                     thread_id=as_int(p, f"rocpd_api row {r[6]}: tid", r[8], null=True),
                     launch_ns=as_int(p, f"rocpd_api row {r[6]}: start", r[9], null=True),
                     correlation_id=r[6] if isinstance(r[6], int) else None, device_id=gpu, queue_id=queue,
                     row=oid, api=api)
        if r[11] is None:  # no launch arguments: the op's own name, no grid
            if not name:
                raise BadInput(p, f"{w}: a kernel op with no kernel name (no rocpd_kernelapi row, empty description)")
            unknown_unit += 1
            rows.append(launch_row(p, w, instrument=INSTRUMENT, mangled=None, demangled=name, start=start, end=end,
                                   workgroup=(1, 1, 1), grid=(0, 0, 0), grid_in_items=False, **extra)
                        | {"grid": None, "block": None, "grid_size": None, "grid_unit": None})
            continue
        kw = f"rocpd_kernelapi row {r[11]}"
        grid = tuple(as_int(p, f"{kw}: grid{a}", v) for a, v in zip("XYZ", r[13:16]))
        wg = tuple(as_int(p, f"{kw}: workgroup{a}", v) for a, v in zip("XYZ", r[16:19]))
        stream = as_text(p, f"{kw}: stream", r[12], null=True)
        if api in WORK_ITEM_APIS or api in WORKGROUP_APIS:
            row = launch_row(p, w, instrument=INSTRUMENT, mangled=None, demangled=name, start=start, end=end,
                             workgroup=wg, grid=grid, grid_in_items=api in WORK_ITEM_APIS, stream=stream, **extra)
            if api in WORKGROUP_APIS:
                block_rows += 1
                block_proof += any(g < w_ or g % w_ for g, w_ in zip(grid, wg) if g)
        else:
            unknown_unit += 1
            row = launch_row(p, w, instrument=INSTRUMENT, mangled=None, demangled=name, start=start, end=end,
                             workgroup=wg, grid=grid, grid_in_items=False, stream=stream, **extra)
            row.update(grid=None, grid_unit=None, grid_size=dim3(*grid))
        rows.append(row)
    problems = []
    if block_rows and not block_proof:
        problems.append(f"{block_rows} launch(es) by hipLaunchKernel-family calls read with their grid in workgroups, "
                        "as rpd's roctracer source records it; rpd's rocprofiler-sdk source (ROCm 7 builds) records "
                        "work-items there, and nothing in this file tells the two apart")
    if unknown_unit:
        problems.append(f"{unknown_unit} kernel op(s) whose launching call records no grid rpd's sources agree on "
                        "(no call, or a call of another name): grid left empty")
    if no_call:
        problems.append(f"{no_call} kernel op(s) without a launching call in rocpd_api_ops: no host time, pid or tid")
    losses = [f"{c} rocpd_op row(s) of type {k!r} are not kernel launches; skipped" for k, c in kinds if k != KERNEL_OP]
    cols = {**LAUNCH_COLUMNS, **EXTRA_COLUMNS}
    df = conform(pd.DataFrame(rows), cols) if rows else empty_frame(cols)
    df.attrs["problems"] = problems + losses + ([] if rows else ["no KernelExecution op: the database holds no kernel launch"])
    df.attrs["losses"] = losses
    return df


#: rpd's name for a ROCTx call's rocpd_api row (RoctracerDataSource.cpp: roctxMarkA, roctxRangePushA/Pop).
MARKER_API = "UserMarker"


def _ranges(conn, p: Path) -> pd.DataFrame:
    """ROCTx push/pop ranges: ``rocpd_api`` rows named ``UserMarker`` whose end is after their start (a
    ``roctxMarkA`` point has end = start and is no range), their message the row's ``args``."""
    sql = ("SELECT A.id, A.pid, A.tid, A.start, A.\"end\", S.string FROM rocpd_api A "
           "JOIN rocpd_string N ON N.id = A.apiName_id LEFT JOIN rocpd_string S ON S.id = A.args_id "
           f"WHERE N.string = '{MARKER_API}' ORDER BY A.start, A.id")
    rows = []
    points = 0
    for r in conn.execute(sql):
        w = f"rocpd_api row {r[0]}"
        start, end = as_int(p, f"{w}: start", r[3]), as_int(p, f"{w}: end", r[4])
        if end <= start:
            points += 1
            continue
        rows.append({"instrument": INSTRUMENT, "file": str(p), "name": as_text(p, f"{w}: args", r[5], null=True),
                     "domain": None, "kind": "pushpop", "start_ns": start, "end_ns": end,
                     "pid": as_int(p, f"{w}: pid", r[1], null=True), "tid": as_int(p, f"{w}: tid", r[2], null=True)})
    out = conform(pd.DataFrame(rows), RANGE_COLUMNS) if rows else empty_frame(RANGE_COLUMNS)
    out.attrs["points"] = points
    return out


def read_ranges(path: str | PathLike[str]) -> pd.DataFrame:
    """The ROCTx ranges of an ``.rpd`` as a range frame (``forensics.core.model.RANGE_COLUMNS``), push/pop."""
    p = Path(path)
    with sqlite_file(p) as conn:
        if not all(t in tables(conn, p) for t in TABLES):
            raise BadInput(p, f"not {WHAT}: no rocpd_api/rocpd_string")
        return _ranges(conn, p)


def read_attributed(path: str | PathLike[str]) -> pd.DataFrame:
    """Launches with ``site_label``: the innermost ``SITE#N`` ROCTx range around each launch's launching call,
    same process and thread (as nsys attributes NVTX push/pop ranges: ``parsers.nsys.attribute``)."""
    from .nsys import attribute  # the NVTX range attribution, reused for ROCTx ranges

    df = read_database(path, with_ranges=True)
    ranges = df.attrs.pop("ranges")
    attrs = dict(df.attrs)
    timed = df.assign(tid=df["thread_id"])
    out = attribute(timed, ranges).drop(columns="tid")
    out.attrs = attrs
    return out
