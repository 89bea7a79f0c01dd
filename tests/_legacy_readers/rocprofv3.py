# The reader parsers/rocprofv3.py as main had it before the streamed reader (issue 44): kept only for
# tests/test_streamed_readers_equivalence.py. Not used by the package.
"""rocprofv3 kernel traces (``rocprofv3 --kernel-trace --output-format csv``) -> a launch frame.

rocprofv3 (ROCprofiler-SDK) is AMD's counterpart of CUPTI: one row per kernel dispatch, with the
kernel's name, its workgroup and grid sizes, the dispatch's correlation id, queue and stream, and
GPU start/end timestamps. Its CSV header changed between releases; every version seen in public
output is in :data:`HEADER_VERSIONS` (tests/fixtures/amd/PROVENANCE.md says where each was seen).
Columns are matched by name, case-insensitively (``rocpd convert`` writes ``Lds_Block_Size`` where
rocprofv3 wrote ``LDS_Block_Size``); unknown columns are kept, a missing required one is bad input.

``Grid_Size_*`` is the HSA dispatch's grid in **work-items**, not in workgroups: the launch frame's
``grid`` is the number of workgroups per dimension (``ceil(grid / workgroup)``), CUDA's meaning of
a grid, and the work-item sizes are kept as ``grid_size``. ``Agent_Id`` is printed as ``2`` or
``"Agent 2"`` or ``"GPU 3"`` (rocprofv3's ``--agent-index``: absolute, relative or type-relative: an
agent index, not a HIP device ordinal); its number is ``device_id`` and its text ``agent``. The kernel trace has no process id: a file named
``<pid>_kernel_trace.csv`` (rocprofv3's default) gives it.

Read by their own readers, the same family (issue 40): the ``*_results.db`` SQLite database (rocpd, the
default output from ROCm 7.0: ``parsers.rocprofv3_rocpd``) and the JSON output (``parsers.rocprofv3_json``).
Not read: the Perfetto (``.pftrace``) and OTF2 outputs.
"""
from __future__ import annotations

import csv
import math
import re
from collections.abc import Sequence
from os import PathLike
from pathlib import Path

import pandas as pd

from forensics.core.demangle import short_name
from forensics.core.errors import BadInput
from forensics.core.model import LAUNCH_COLUMNS, RANGE_COLUMNS, conform, dim3, empty_frame

from parsers._text import iter_line_chunks, preview, sniff_foreign

WHAT = "rocprofv3 kernel trace CSV"  # or rocprof v1 results.csv
INSTRUMENT = "rocprofv3"

#: Header versions seen in public rocprofv3 output, oldest first: (name, columns as printed).
HEADER_VERSIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("rocprofv3 2024-07 (no Thread_Id, Dispatch_Id)", (
        "Kind", "Agent_Id", "Queue_Id", "Kernel_Id", "Kernel_Name", "Correlation_Id", "Start_Timestamp",
        "End_Timestamp", "Private_Segment_Size", "Group_Segment_Size", "Workgroup_Size_X", "Workgroup_Size_Y",
        "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z")),
    ("rocprofv3 2024-08 (+ Thread_Id, Dispatch_Id)", (
        "Kind", "Agent_Id", "Queue_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name", "Correlation_Id",
        "Start_Timestamp", "End_Timestamp", "Private_Segment_Size", "Group_Segment_Size", "Workgroup_Size_X",
        "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z")),
    ("rocprofv3 (+ Stream_Id)", (
        "Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
        "Correlation_Id", "Start_Timestamp", "End_Timestamp", "Private_Segment_Size", "Group_Segment_Size",
        "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z", "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z")),
    ("rocprofv3 (+ LDS_Block_Size, Scratch_Size, register counts)", (
        "Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
        "Correlation_Id", "Start_Timestamp", "End_Timestamp", "LDS_Block_Size", "Scratch_Size", "VGPR_Count",
        "Accum_VGPR_Count", "SGPR_Count", "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z",
        "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z")),
    ("rocpd convert / rocpd2csv, ROCm 7 (+ Guid)", (
        "Guid", "Kind", "Agent_Id", "Queue_Id", "Stream_Id", "Thread_Id", "Dispatch_Id", "Kernel_Id", "Kernel_Name",
        "Correlation_Id", "Start_Timestamp", "End_Timestamp", "Lds_Block_Size", "Scratch_Size", "Vgpr_Count",
        "Accum_Vgpr_Count", "Sgpr_Count", "Workgroup_Size_X", "Workgroup_Size_Y", "Workgroup_Size_Z",
        "Grid_Size_X", "Grid_Size_Y", "Grid_Size_Z")),
)

#: rocprof (v1, ROCm 5/6 ``rocprof --stats`` / ``--timestamp on``) ``results.csv``: one row per dispatch too.
ROCPROF_V1_HEADER = ("Index", "KernelName", "gpu-id", "queue-id", "queue-index", "pid", "tid", "grd", "wgr", "lds",
                     "scr", "arch_vgpr", "accum_vgpr", "sgpr", "wave_size", "sig", "obj", "DispatchNs", "BeginNs",
                     "EndNs", "CompleteNs", "DurationNs")
V1_NAME = "rocprof v1 results.csv (ROCm 5.3)"
V1_REQUIRED = ("index", "kernelname", "gpu-id", "pid", "tid", "grd", "wgr", "beginns", "endns")
V1_INTS = ("index", "gpu-id", "queue-id", "queue-index", "pid", "tid", "grd", "wgr", "lds", "scr", "arch_vgpr",
           "accum_vgpr", "vgpr", "sgpr", "wave_size", "dispatchns", "beginns", "endns", "completens", "durationns")
_KD_SUFFIX = re.compile(r"(?: \[clone \.kd\]|\.kd)$")

#: Columns a launch row cannot do without (lower case).
REQUIRED = ("kind", "kernel_name", "correlation_id", "start_timestamp", "end_timestamp",
            "workgroup_size_x", "workgroup_size_y", "workgroup_size_z", "grid_size_x", "grid_size_y", "grid_size_z")
#: Integer columns (lower case); a value that is not an integer is bad input naming line and column.
INTS = ("queue_id", "stream_id", "thread_id", "dispatch_id", "kernel_id", "correlation_id", "start_timestamp",
        "end_timestamp", "private_segment_size", "group_segment_size", "lds_block_size", "scratch_size",
        "vgpr_count", "accum_vgpr_count", "sgpr_count", "workgroup_size_x", "workgroup_size_y", "workgroup_size_z",
        "grid_size_x", "grid_size_y", "grid_size_z")
_INT64_MAX = (1 << 63) - 1
#: ``--agent-index``: absolute or relative ("2", "Agent 7"), type-relative ("GPU 3", "CPU 0")
_AGENT = re.compile(r"(?:(?:Agent|GPU|CPU)\s+)?(\d+)")
_PID_PREFIX = re.compile(r"^(\d+)_")

#: Extra columns of the launch frame (after LAUNCH_COLUMNS).
EXTRA_COLUMNS: dict[str, str] = {
    "line": "Int64",  # 1-based line of the row in the CSV
    "agent": "string",  # Agent_Id as printed ("Agent 2" or "2")
    "queue_id": "Int64",
    "thread_id": "Int64",
    "dispatch_id": "Int64",
    "kernel_id": "Int64",
    "grid_size": "string",  # Grid_Size_X/Y/Z as printed: work-items, not workgroups
    "header_version": "string",
    "kernel_printed": "string",  # the name as the file prints it (rocprof v1 adds " [clone .kd]")
}


def header_version(columns: Sequence[str]) -> str | None:
    """The :data:`HEADER_VERSIONS` name whose columns are exactly ``columns`` (case-insensitive), else None."""
    low = tuple(c.lower() for c in columns)
    for name, cols in HEADER_VERSIONS:
        if tuple(c.lower() for c in cols) == low:
            return name
    return None


def _int(path: Path, lineno: int, col: str, text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise BadInput(path, f"{col}={text!r} is not an integer", line=lineno) from None
    if not -_INT64_MAX - 1 <= v <= _INT64_MAX:
        raise BadInput(path, f"{col}={text} is out of range (past int64)", line=lineno)
    return v


def _check_binary(path: Path) -> None:
    try:
        with path.open("rb") as f:
            head = f.read(64)
    except OSError as e:
        raise BadInput(path, f"cannot read {WHAT}: {e.strerror or e}") from None
    if head.startswith(b"SQLite format 3\x00"):
        raise BadInput(path, "this is an SQLite database (rocprofv3's rocpd output, the default from ROCm 7?), not a "
                             "CSV: read it as a database (parsers.rocprofv3_rocpd; forensics analyze recognises it) or convert it "
                             "with 'rocpd2csv -i FILE'", line=1)
    foreign = sniff_foreign(head)
    if foreign:
        raise BadInput(path, f"this is {foreign}, not a {WHAT}", line=1)


def _csv_rows(p: Path, what: str):
    """``(line, fields, raw line, last line without newline)`` for every non-empty CSV row of a text file."""
    for first, lines, cut_tail in iter_line_chunks(p, what):
        reader = csv.reader(lines, strict=True)
        while True:
            try:
                text = next(reader)
            except StopIteration:
                break
            except csv.Error as e:
                raise BadInput(p, f"not CSV: {e}", line=first + reader.line_num - 1) from None
            i = reader.line_num - 1
            if text:
                yield first + i, text, lines[i], cut_tail and i == len(lines) - 1


def read_kernel_trace(path: str | PathLike[str]) -> pd.DataFrame:
    """One launch row per ``KERNEL_DISPATCH`` row of a rocprofv3 kernel trace CSV, or per row of an
    older rocprof (v1) ``results.csv`` (recognised by its header; its rows name no correlation id
    and no per-dimension grid). Columns the launch frame does not map are kept (lower-case names).

    ``attrs``: ``header_version`` (a :data:`HEADER_VERSIONS` name, or ``"unknown (N columns)"``),
    ``problems`` and ``losses`` (rows of another ``Kind``, a last row without its newline).
    Bad input (``BadInput``, file and line): not a kernel trace header, a required column missing,
    a row with more or fewer fields than the header (a cut file), a value that is not an integer.
    """
    p = Path(path)
    _check_binary(p)
    rows: list[dict] = []
    header: list[str] | None = None
    index: dict[str, int] = {}
    version = None
    problems: list[str] = []
    losses: list[str] = []
    other_kinds: dict[str, int] = {}
    pid = None
    m = _PID_PREFIX.match(p.name)
    if m:
        pid = int(m.group(1))
    for lineno, text, raw_line, last_cut in _csv_rows(p, WHAT):
        if header is None:
            header, index, version = _header(p, text, raw_line)
            continue
        _check_width(p, lineno, text, header, raw_line, last_cut)
        if "kind" not in index:  # rocprof v1 results.csv: every row is a dispatch
            rows.append(_row_v1(p, lineno, text, index, version))
        elif text[index["kind"]] != "KERNEL_DISPATCH":
            kind = text[index["kind"]]
            other_kinds[kind] = other_kinds.get(kind, 0) + 1
            continue
        else:
            rows.append(_row(p, lineno, text, index, pid, version))
        if last_cut:
            problems.append(f"line {lineno}: the last row has no newline (all {len(header)} fields read; "
                            "a number cut short would still read as a value)")
    if header is None:
        raise BadInput(p, f"no header line: not a {WHAT}", line=1)
    for kind, n in other_kinds.items():
        losses.append(f"{n} row(s) of Kind {kind!r} are not kernel dispatches; skipped")
    if not rows:
        problems.append("no KERNEL_DISPATCH row: the trace holds no kernel launch")
    df = pd.DataFrame(rows) if rows else empty_frame({**LAUNCH_COLUMNS, **EXTRA_COLUMNS})
    df = conform(df, {**LAUNCH_COLUMNS, **EXTRA_COLUMNS})
    df.attrs["header_version"] = version
    df.attrs["problems"] = problems + losses
    df.attrs["losses"] = losses
    return df


def _header(path: Path, fields: list[str], raw: str) -> tuple[list[str], dict[str, int], str]:
    low = [f.strip().lower() for f in fields]
    dup = sorted({c for c in low if low.count(c) > 1})
    if dup:
        raise BadInput(path, "header repeats " + ", ".join(dup), line=1)
    if low[:2] == ["name", "calls"]:
        raise BadInput(path, "this is a per-kernel summary (rocprof's results.stats.csv or rocprofv3's kernel_stats.csv), "
                             "not one row per dispatch: read the kernel trace (results.csv / kernel_trace.csv)", line=1)
    if "kernelname" in low and "index" in low:  # rocprof v1 results.csv
        missing = [c for c in V1_REQUIRED if c not in low]
        if missing:
            raise BadInput(path, "rocprof results.csv header lacks " + ", ".join(missing), line=1)
        same = tuple(c.lower() for c in ROCPROF_V1_HEADER) == tuple(low)
        return fields, {c: i for i, c in enumerate(low)}, V1_NAME if same else f"rocprof v1, unknown ({len(fields)} columns)"
    if "kernel_name" not in low or "kind" not in low:
        raise BadInput(path, f"first line is not a rocprofv3 kernel trace header (no Kind, Kernel_Name): {preview(raw)}",
                       line=1)
    missing = [c for c in REQUIRED if c not in low]
    if missing:
        raise BadInput(path, "kernel trace header lacks " + ", ".join(missing), line=1)
    version = header_version(fields) or f"unknown ({len(fields)} columns)"
    return fields, {c: i for i, c in enumerate(low)}, version


def _agent(path: Path, lineno: int, text: str | None) -> int | None:
    if text is None:
        return None
    am = _AGENT.fullmatch(text.strip())
    if not am:
        raise BadInput(path, f"Agent_Id={text!r} is none of N, 'Agent N', 'GPU N', 'CPU N'", line=lineno)
    return int(am.group(1))


def _rest(val: dict[str, str], ints: dict[str, int], used: set[str]) -> dict:
    """Every column the launch frame does not map, kept under its lower-case name (integers as integers)."""
    return {c: ints.get(c, v) for c, v in val.items() if c not in used}


_V3_USED = {"kind", "agent_id", "kernel_name", "start_timestamp", "end_timestamp", "correlation_id", "stream_id",
            "queue_id", "thread_id", "dispatch_id", "kernel_id", *(f"{w}_size_{d}" for w in ("workgroup", "grid") for d in "xyz")}


def _check_width(p: Path, lineno: int, text: list[str], header: list[str], raw_line: str, last_cut: bool) -> None:
    """A CSV row has the header's number of fields; a short last row says the file may be cut."""
    if len(text) != len(header):
        cut = " (the file is cut short?)" if last_cut else ""
        raise BadInput(p, f"{len(text)} fields where the header has {len(header)}{cut}: {preview(raw_line)}",
                       line=lineno)


def _row(path: Path, lineno: int, text: list[str], index: dict[str, int], pid: int | None, version: str) -> dict:
    val = {c: text[i] for c, i in index.items()}
    ints = {c: _int(path, lineno, c, val[c]) for c in INTS if c in val}
    wg = tuple(ints[f"workgroup_size_{d}"] for d in "xyz")
    gs = tuple(ints[f"grid_size_{d}"] for d in "xyz")
    if any(w <= 0 for w in wg):
        raise BadInput(path, f"workgroup size {wg} has a zero or negative dimension", line=lineno)
    name = val["kernel_name"]
    if not name:
        raise BadInput(path, "empty Kernel_Name", line=lineno)
    return {
        "instrument": INSTRUMENT, "file": str(path), "pid": pid, "kernel": name, "mangled": None,
        "short_name": short_name(name) or name,
        "start_ns": ints["start_timestamp"], "end_ns": ints["end_timestamp"],
        "correlation_id": ints["correlation_id"],
        "grid": dim3(*(math.ceil(g / w) for g, w in zip(gs, wg))), "block": dim3(*wg),
        "stream_id": ints.get("stream_id"), "device_id": _agent(path, lineno, val.get("agent_id")),
        "line": lineno, "agent": val.get("agent_id"), "queue_id": ints.get("queue_id"), "thread_id": ints.get("thread_id"),
        "dispatch_id": ints.get("dispatch_id"), "kernel_id": ints.get("kernel_id"), "grid_size": dim3(*gs),
        "header_version": version, "kernel_printed": name,
        **_rest(val, ints, _V3_USED),
    }


_V1_USED = {"index", "kernelname", "gpu-id", "queue-id", "pid", "tid", "beginns", "endns"}


def _row_v1(path: Path, lineno: int, text: list[str], index: dict[str, int], version: str) -> dict:
    """A rocprof v1 row: ``grd``/``wgr`` are total work-items and workgroup size (no x, y, z): the grid
    is not stated per dimension, so ``grid`` stays empty (identity checks say unchecked) and the
    totals are kept (``grid_size``, ``wgr``)."""
    val = {c: text[i] for c, i in index.items()}
    ints = {c: _int(path, lineno, c, val[c]) for c in V1_INTS if c in val}
    if ints["wgr"] <= 0:
        raise BadInput(path, f"wgr={ints['wgr']}: a workgroup has at least one work-item", line=lineno)
    printed = val["kernelname"]
    name = _KD_SUFFIX.sub("", printed)
    if not name:
        raise BadInput(path, "empty KernelName", line=lineno)
    return {
        "instrument": INSTRUMENT, "file": str(path), "pid": ints["pid"], "kernel": name, "mangled": None,
        "short_name": short_name(name) or name, "start_ns": ints["beginns"], "end_ns": ints["endns"],
        "correlation_id": None, "grid": None, "block": None, "stream_id": None, "device_id": ints["gpu-id"],
        "line": lineno, "agent": None, "queue_id": ints.get("queue-id"), "thread_id": ints["tid"],
        "dispatch_id": ints["index"], "kernel_id": None, "grid_size": str(ints["grd"]), "header_version": version,
        "kernel_printed": printed, **_rest(val, ints, _V1_USED),
    }


# --------------------------------------------------------------------------- ROCTx ranges
MARKER_WHAT = "rocprofv3 marker (ROCTx) trace CSV"
MARKER_REQUIRED = ("function", "start_timestamp", "end_timestamp")


def read_marker_trace(path: str | PathLike[str]) -> pd.DataFrame:
    """ROCTx ranges of ``rocprofv3 --marker-trace`` (``*_marker_api_trace.csv``) as a range frame
    (``forensics.core.model.RANGE_COLUMNS``), the counterpart of NVTX ranges.

    ``name`` is the range's message (``Function``); rocprofv3's ``Domain`` (``MARKER_CORE_API``,
    the API, not a user domain) is kept as ``api_domain`` and ``domain`` stays empty. A row whose
    start equals its end is a ``roctxMark`` point, not a range: counted in ``attrs["problems"]``
    and left out. ``kind`` stays empty: the CSV does not say push/pop from start/stop.
    """
    p = Path(path)
    _check_binary(p)
    header: list[str] | None = None
    index: dict[str, int] = {}
    rows: list[dict] = []
    marks = 0
    cut_note = None
    for lineno, text, raw_line, last_cut in _csv_rows(p, MARKER_WHAT):
        if header is None:
            low = [f.strip().lower() for f in text]
            missing = [c for c in MARKER_REQUIRED if c not in low]
            if missing or "kernel_name" in low:
                raise BadInput(p, f"first line is not a rocprofv3 marker trace header (no {', '.join(missing) or 'Function'}): "
                                  f"{preview(raw_line)}", line=1)
            header, index = text, {c: i for i, c in enumerate(low)}
            continue
        _check_width(p, lineno, text, header, raw_line, last_cut)
        val = {c: text[i] for c, i in index.items()}
        if val.get("domain") and not val["domain"].startswith("MARKER"):
            raise BadInput(p, f"Domain {val['domain']!r}: this is an API trace (HIP, HSA, RCCL...), not a ROCTx marker trace",
                           line=lineno)
        ints = {c: _int(p, lineno, c, val[c]) for c in ("process_id", "thread_id", "correlation_id",
                                                         "start_timestamp", "end_timestamp") if c in val}
        if ints["end_timestamp"] < ints["start_timestamp"]:
            raise BadInput(p, f"range ends before it starts ({ints['end_timestamp']} < {ints['start_timestamp']})",
                           line=lineno)
        if last_cut:
            cut_note = f"line {lineno}: the last row has no newline: it may be cut short (a shorter number reads as a value)"
        if ints["end_timestamp"] == ints["start_timestamp"]:
            marks += 1
            continue
        rows.append({"instrument": INSTRUMENT, "file": str(p), "name": val["function"], "domain": None, "kind": None,
                     "start_ns": ints["start_timestamp"], "end_ns": ints["end_timestamp"],
                     "pid": ints.get("process_id"), "tid": ints.get("thread_id"), "line": lineno,
                     "api_domain": val.get("domain"), "correlation_id": ints.get("correlation_id")})
    if header is None:
        raise BadInput(p, f"no header line: not a {MARKER_WHAT}", line=1)
    extra = {"line": "Int64", "api_domain": "string", "correlation_id": "Int64"}
    df = conform(pd.DataFrame(rows), {**RANGE_COLUMNS, **extra}) if rows else empty_frame({**RANGE_COLUMNS, **extra})
    df.attrs["problems"] = ([f"{marks} roctxMark point(s) (start = end): not ranges; left out"] if marks else []) + (
        [cut_note] if cut_note else [])
    df.attrs["losses"] = []
    return df


# --------------------------------------------------------------------------- HIP API calls
API_WHAT = "rocprofv3 API trace CSV"
#: One row per API call (``--hip-trace``, ``--hip-runtime-trace``, ``--hsa-trace``...).
API_COLUMNS: dict[str, str] = {
    "instrument": "string", "file": "string", "line": "Int64", "api_domain": "string", "name": "string",
    "pid": "Int64", "tid": "Int64", "correlation_id": "Int64", "start_ns": "Int64", "end_ns": "Int64",
}


def read_api_trace(path: str | PathLike[str]) -> pd.DataFrame:
    """The calls of a rocprofv3 API trace (``*_hip_api_trace.csv`` and its siblings): one row per call
    (:data:`API_COLUMNS`). A kernel launch's host time is its launching call's start (the same
    correlation id as the kernel dispatch: :func:`with_launch_times`). A ROCTx marker trace, with
    the same columns, is refused: read it with :func:`read_marker_trace`."""
    p = Path(path)
    _check_binary(p)
    header: list[str] | None = None
    index: dict[str, int] = {}
    rows: list[dict] = []
    problems: list[str] = []
    for lineno, text, raw_line, last_cut in _csv_rows(p, API_WHAT):
        if header is None:
            low = [f.strip().lower() for f in text]
            need = ("domain", "function", "correlation_id", "start_timestamp", "end_timestamp")
            missing = [c for c in need if c not in low]
            if missing:
                raise BadInput(p, f"first line is not a rocprofv3 API trace header (no {', '.join(missing)}): "
                                  f"{preview(raw_line)}", line=1)
            header, index = text, {c: i for i, c in enumerate(low)}
            continue
        _check_width(p, lineno, text, header, raw_line, last_cut)
        val = {c: text[i] for c, i in index.items()}
        if val["domain"].startswith("MARKER"):
            raise BadInput(p, f"Domain {val['domain']!r}: this is a ROCTx marker trace (read_marker_trace), "
                              "not an API trace", line=lineno)
        ints = {c: _int(p, lineno, c, val[c]) for c in ("process_id", "thread_id", "correlation_id",
                                                         "start_timestamp", "end_timestamp") if c in val}
        if ints["end_timestamp"] < ints["start_timestamp"]:
            raise BadInput(p, f"call ends before it starts ({ints['end_timestamp']} < {ints['start_timestamp']})",
                           line=lineno)
        if last_cut:
            problems.append(f"line {lineno}: the last row has no newline: it may be cut short (a shorter number reads as a value)")
        rows.append({"instrument": INSTRUMENT, "file": str(p), "line": lineno, "api_domain": val["domain"],
                     "name": val["function"], "pid": ints.get("process_id"), "tid": ints.get("thread_id"),
                     "correlation_id": ints["correlation_id"], "start_ns": ints["start_timestamp"],
                     "end_ns": ints["end_timestamp"]})
    if header is None:
        raise BadInput(p, f"no header line: not a {API_WHAT}", line=1)
    df = conform(pd.DataFrame(rows), API_COLUMNS) if rows else empty_frame(API_COLUMNS)
    df.attrs["problems"] = problems + ([] if rows else ["no API call: the trace is empty"])
    df.attrs["losses"] = []
    return df


def with_launch_times(launches: pd.DataFrame, api: pd.DataFrame) -> pd.DataFrame:
    """``launches`` with ``launch_ns``, ``pid`` and ``tid`` from the API call of the same correlation
    id (the host side of each dispatch, what site ranges are matched against); a launch without
    one keeps them empty and ``attrs["problems"]`` counts it. Correlation ids are per process:
    when both sides carry a pid they must agree too."""
    out = launches.copy()
    calls = api.dropna(subset=["correlation_id"]).drop_duplicates("correlation_id", keep="first")
    by_corr = calls.set_index("correlation_id")
    found = out["correlation_id"].map(by_corr["start_ns"]) if len(by_corr) else pd.Series(pd.NA, index=out.index)
    pid = out["correlation_id"].map(by_corr["pid"]) if len(by_corr) else pd.Series(pd.NA, index=out.index)
    mismatch = out["pid"].notna() & pid.notna() & (out["pid"] != pid)
    found = found.mask(mismatch)
    out["launch_ns"] = found.astype("Int64")
    out["pid"] = out["pid"].fillna(pid.mask(mismatch)).astype("Int64")
    tid = out["correlation_id"].map(by_corr["tid"]) if len(by_corr) else pd.Series(pd.NA, index=out.index)
    out["thread_id"] = out["thread_id"].fillna(tid.mask(mismatch)).astype("Int64") if "thread_id" in out else tid
    missing = int(out["launch_ns"].isna().sum())
    out.attrs = dict(launches.attrs)
    if missing:
        out.attrs["problems"] = list(out.attrs.get("problems") or []) + [
            f"{missing} launch(es) without an API call of the same correlation id (and process): no launch time"]
    return out
