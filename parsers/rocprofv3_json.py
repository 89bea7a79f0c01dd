"""rocprofv3's JSON output (``rocprofv3 --kernel-trace --output-format json``: ``<prefix>_results.json``)
-> a launch frame, the same launches its kernel trace CSV holds (``parsers.rocprofv3``).

The file is one JSON object ``{"rocprofiler-sdk-tool": [PROCESS, ...]}`` (one element per profiled
process; an object in place of the list is taken as one process). The fields read, as rocprofiler-sdk
writes them (``source/lib/rocprofiler-sdk-tool/generateJSON.cpp`` and the serialisers of
``source/include/rocprofiler-sdk/cxx/serialization.hpp``; documented by ``source/docs/rocprofv3-schema.json``,
ROCm/rocprofiler-sdk at commit 8ab1ed78d8c2afb25fedddb7684aff08d1233c5c):

* ``metadata.pid``: the process id of every launch of that element;
* ``agents[]``: ``id.handle`` -> ``node_id`` (the number rocprofv3's CSV prints as ``Agent_Id``), its device;
* ``kernel_symbols[]``: ``kernel_id`` -> ``kernel_name`` (the code object's symbol, mangled, ``.kd`` suffix),
  ``demangled_kernel_name`` / ``formatted_kernel_name``;
* ``buffer_records.kernel_dispatch[]``: one record per kernel dispatch: ``correlation_id.internal``
  (the CSV's ``Correlation_Id``) and ``.external``, ``start_timestamp``/``end_timestamp`` (GPU, ns),
  ``thread_id``, ``dispatch_info`` with ``agent_id.handle``, ``queue_id.handle``, ``kernel_id``,
  ``dispatch_id``, ``workgroup_size`` and ``grid_size`` (``x``/``y``/``z``). ``grid_size`` is the HSA
  dispatch's grid in **work-items**, as in the CSV: the frame's ``grid`` is workgroups.

Not read: the other buffer records (HIP/HSA/marker/RCCL API calls, memory copies, scratch memory),
counter collection, PC samples, code objects, ``strings``. A value of the wrong JSON type is bad input
naming its JSON path (``rocprofiler-sdk-tool[0].buffer_records.kernel_dispatch[3].dispatch_info.grid_size.x``).

The file is streamed with ``ijson`` (issue 44), never held whole: :func:`read_results` says how.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

import ijson
import pandas as pd

from forensics.core.errors import BadInput
from forensics.core.model import LAUNCH_COLUMNS, conform, empty_frame
from forensics.runtime.inputs import RecordBudget, open_stream

from ._columns import Columns
from ._rocm_db import as_int, as_text, launch_row, read_bytes
from .rocm_schema import JSON_TOP

INSTRUMENT = "rocprofv3_json"
WHAT = "rocprofv3 JSON output (rocprofiler-sdk-tool)"
TOP = JSON_TOP

EXTRA_COLUMNS: dict[str, str] = {
    "record": "string",  # the dispatch's JSON path in the file
    "agent": "string",  # the agent as the file names it ("node 2", or "handle N" without node_id)
    "queue_id": "Int64",
    "thread_id": "Int64",
    "dispatch_id": "Int64",
    "kernel_id": "Int64",
    "grid_size": "string",  # grid_size x/y/z as the file holds it: work-items
    "grid_unit": "string",
}


def _obj(path: Path, where: str, value: Any) -> Mapping:
    if not isinstance(value, Mapping):
        raise BadInput(path, f"{where} is {type(value).__name__}, not a JSON object")
    return value


def _list(path: Path, where: str, value: Any) -> list:
    if isinstance(value, Mapping):  # a map written as {"id": {...}}: its values
        return list(value.values())
    if not isinstance(value, list):
        raise BadInput(path, f"{where} is {type(value).__name__}, not a JSON array")
    return value


def _dim(path: Path, where: str, value: Any) -> tuple[int, int, int]:
    d = _obj(path, where, value)
    out = []
    for axis in "xyz":
        if axis not in d:
            raise BadInput(path, f"{where} has no {axis}")
        out.append(as_int(path, f"{where}.{axis}", d[axis]))
    return out[0], out[1], out[2]


def _handle(path: Path, where: str, value: Any) -> int:
    if isinstance(value, Mapping):
        if "handle" not in value:
            raise BadInput(path, f"{where} has no handle")
        return as_int(path, f"{where}.handle", value["handle"])
    return as_int(path, where, value)


def _need(path: Path, where: str, d: Mapping, key: str) -> Any:
    if key not in d:
        raise BadInput(path, f"{where} has no {key!r}")
    return d[key]


def _symbols(path: Path, where: str, node: Mapping) -> dict[int, tuple[str | None, str | None]]:
    out: dict[int, tuple[str | None, str | None]] = {}
    for i, sym in enumerate(_list(path, where, node.get("kernel_symbols", []))):
        w = f"{where}[{i}]"
        sym = _obj(path, w, sym)
        kid = as_int(path, f"{w}.kernel_id", _need(path, w, sym, "kernel_id"))
        mangled = as_text(path, f"{w}.kernel_name", sym.get("kernel_name"), null=True)
        shown = None
        for key in ("demangled_kernel_name", "formatted_kernel_name", "truncated_kernel_name"):
            shown = as_text(path, f"{w}.{key}", sym.get(key), null=True) or None
            if shown:
                break
        out[kid] = (mangled, shown)
    return out


def _agents(path: Path, where: str, node: Mapping) -> dict[int, tuple[int | None, str]]:
    out: dict[int, tuple[int | None, str]] = {}
    for i, ag in enumerate(_list(path, where, node.get("agents", []))):
        w = f"{where}[{i}]"
        ag = _obj(path, w, ag)
        handle = _handle(path, f"{w}.id", _need(path, w, ag, "id"))
        nid = as_int(path, f"{w}.node_id", ag.get("node_id"), null=True)
        out[handle] = (nid, f"node {nid}" if nid is not None else f"handle {handle}")
    return out


def read_results(path: str | PathLike[str]) -> pd.DataFrame:
    """One launch row per ``buffer_records.kernel_dispatch`` record of every process in the file.

    Streamed (issue 44): the file is read twice, never whole. The first pass (``ijson`` events)
    checks the whole document's syntax and keeps each process's small sections (``metadata``,
    ``kernel_symbols``, ``agents``, in whatever order the file has them) and the number of its
    dispatch records; the second builds one dispatch record at a time (``ijson`` items) and keeps its
    launch row as columns. Peak memory follows the launches kept, not the JSON text.

    ``attrs``: ``problems`` (a process without kernel dispatches, a dispatch whose agent the file does
    not list), ``losses`` (none: every dispatch is a row). Bad input (file, and the JSON line of a
    syntax error): not JSON, no ``rocprofiler-sdk-tool``, a value of the wrong type, a dispatch whose
    ``kernel_id`` no kernel symbol has, more dispatches than the record ceiling
    (``forensics --max-records``), more bytes than the streamed-input ceiling (``--max-input-bytes``).
    """
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError as e:
        raise BadInput(p, f"cannot read {WHAT}: {e.strerror or e}") from None
    if size == 0:
        raise BadInput(p, f"empty file: expected {WHAT}")
    doc, backend = _scan(p)
    if doc.type != "dict" or not doc.has_top:
        keys = ", ".join(doc.keys[:6]) if doc.type == "dict" else doc.type
        raise BadInput(p, f"no {TOP!r} key at the top (it has {keys}): not {WHAT}", line=1)
    if doc.top_type == "dict":
        nodes = doc.nodes
    elif doc.top_type == "list":
        nodes = doc.nodes
    else:
        raise BadInput(p, f"{TOP} is {doc.top_type}, not a JSON array")
    total = 0
    for pi, node in enumerate(nodes):
        if node.type != "dict":
            raise BadInput(p, f"{TOP}[{pi}] is {node.type}, not a JSON object")
        if node.br_type is not None and node.br_type != "dict":
            raise BadInput(p, f"{TOP}[{pi}].buffer_records is {node.br_type}, not a JSON object")
        if node.kd is not None and node.kd.form not in ("list", "dict"):
            raise BadInput(p, f"{TOP}[{pi}].buffer_records.kernel_dispatch is {node.kd.form}, not a JSON array")
        total += node.kd.count if node.kd is not None else 0
    RecordBudget(p, "kernel dispatches").take(total)  # refused before the second pass, not part-way
    rows = Columns()
    problems: list[str] = []
    feeds = _Feeds(p, doc.runs, backend)
    try:
        for pi, node in enumerate(nodes):
            _process(p, pi, node, feeds, rows, problems)
    finally:
        feeds.close()
    cols = {**LAUNCH_COLUMNS, **EXTRA_COLUMNS}
    kept = len(rows)
    df = rows.frame(cols) if kept else conform(empty_frame(cols), cols)
    if kept:  # each row's JSON path, written once into the frame's column (not held as a str a row)
        df["record"] = _paths([(f"{TOP}[{pi}]", node.kd.count) for pi, node in enumerate(nodes)
                               if node.kd is not None and node.kd.count])
    df.attrs["problems"] = problems + ([] if kept else ["no kernel dispatch: the file holds no kernel launch"])
    df.attrs["losses"] = []
    df.attrs["processes"] = len(nodes)
    return df


def _process(p: Path, pi: int, node: "_Node", feeds: "_Feeds", rows: Columns, problems: list[str]) -> None:
    """One process: its sections checked (as the whole-file reader did, in its order), then its
    dispatch records, one at a time from the second pass."""
    base = f"{TOP}[{pi}]"
    fields = node.fields
    meta = _obj(p, f"{base}.metadata", fields.get("metadata", {}))
    pid = as_int(p, f"{base}.metadata.pid", meta.get("pid"), null=True)
    symbols = _symbols(p, f"{base}.kernel_symbols", fields)
    agents = _agents(p, f"{base}.agents", fields)
    count = node.kd.count if node.kd is not None else 0
    if not count:
        problems.append(f"{base}: no kernel_dispatch record (rocprofv3 without --kernel-trace?)")
        return
    unknown_agents = 0
    for i, rec in enumerate(feeds.take(node.kd)):
        w = f"{base}.buffer_records.kernel_dispatch[{i}]"
        fast = _usual(rec, symbols)
        if fast is not None:  # every field of its usual type: the checks below would pass as they are
            kid, handle = fast[0], fast[1]
            device, agent = agents.get(handle, (None, f"handle {handle}"))
            if handle not in agents:
                unknown_agents += 1
            mangled, demangled = symbols[kid]
            rows.add(launch_row(p, w, instrument=INSTRUMENT, mangled=mangled, demangled=demangled, start=fast[2],
                                end=fast[3], workgroup=fast[4], grid=fast[5], grid_in_items=True, pid=pid,
                                correlation_id=fast[6], external_id=fast[7] or None, device_id=device, agent=agent,
                                queue_id=fast[8], thread_id=fast[9], dispatch_id=fast[10], stream_id=fast[11],
                                kernel_id=kid))
            continue
        rec = _obj(p, w, rec)
        info = _obj(p, f"{w}.dispatch_info", _need(p, w, rec, "dispatch_info"))
        corr = _need(p, w, rec, "correlation_id")
        if isinstance(corr, Mapping):
            internal = as_int(p, f"{w}.correlation_id.internal", _need(p, f"{w}.correlation_id", corr, "internal"))
            external = as_int(p, f"{w}.correlation_id.external", corr.get("external"), null=True)
        else:
            internal, external = as_int(p, f"{w}.correlation_id", corr), None
        kid = as_int(p, f"{w}.dispatch_info.kernel_id", _need(p, f"{w}.dispatch_info", info, "kernel_id"))
        if kid not in symbols:
            raise BadInput(p, f"{w}: kernel_id {kid} has no entry in {base}.kernel_symbols (a cut or mixed file)")
        handle = _handle(p, f"{w}.dispatch_info.agent_id", _need(p, f"{w}.dispatch_info", info, "agent_id"))
        device, agent = agents.get(handle, (None, f"handle {handle}"))
        if handle not in agents:
            unknown_agents += 1
        mangled, demangled = symbols[kid]
        rows.add(launch_row(
            p, w, instrument=INSTRUMENT, mangled=mangled, demangled=demangled,
            start=as_int(p, f"{w}.start_timestamp", _need(p, w, rec, "start_timestamp")),
            end=as_int(p, f"{w}.end_timestamp", _need(p, w, rec, "end_timestamp")),
            workgroup=_dim(p, f"{w}.dispatch_info.workgroup_size", _need(p, f"{w}.dispatch_info", info, "workgroup_size")),
            grid=_dim(p, f"{w}.dispatch_info.grid_size", _need(p, f"{w}.dispatch_info", info, "grid_size")),
            grid_in_items=True, pid=pid, correlation_id=internal, external_id=external or None,
            device_id=device, agent=agent,
            queue_id=_handle(p, f"{w}.dispatch_info.queue_id", info.get("queue_id", 0)),
            thread_id=as_int(p, f"{w}.thread_id", rec.get("thread_id"), null=True),
            dispatch_id=as_int(p, f"{w}.dispatch_info.dispatch_id", info.get("dispatch_id"), null=True),
            stream_id=as_int(p, f"{w}.stream_id", (rec.get("stream_id") or {}).get("handle")
                             if isinstance(rec.get("stream_id"), Mapping) else rec.get("stream_id"), null=True),
            kernel_id=kid))
    if unknown_agents:
        problems.append(f"{base}: {unknown_agents} dispatch(es) on an agent the file does not list: no device id")


_LO, _HI = -(1 << 63), (1 << 63) - 1


def _usual(rec: Any, symbols: Mapping) -> tuple | None:
    """A dispatch record's values when each has its usual JSON type (objects where objects are, ints
    within int64, a known kernel_id), in the order :func:`_process` uses them; None otherwise, and
    the checked path then reads the record and names what is wrong. The same values either way."""
    if type(rec) is not dict:
        return None
    info, corr = rec.get("dispatch_info"), rec.get("correlation_id")
    if type(info) is not dict or type(corr) is not dict:
        return None
    agent, queue, wg, gs = info.get("agent_id"), info.get("queue_id", 0), info.get("workgroup_size"), info.get("grid_size")
    if type(agent) is dict:
        agent = agent.get("handle")
    if type(queue) is dict:
        queue = queue.get("handle")
    if type(wg) is not dict or type(gs) is not dict:
        return None
    stream = rec.get("stream_id")
    if type(stream) is dict:
        stream = stream.get("handle")
    vals = (info.get("kernel_id"), agent, rec.get("start_timestamp"), rec.get("end_timestamp"),
            wg.get("x"), wg.get("y"), wg.get("z"), gs.get("x"), gs.get("y"), gs.get("z"), corr.get("internal"), queue)
    for v in vals:
        if type(v) is not int or not _LO <= v <= _HI:
            return None
    opt = (corr.get("external"), rec.get("thread_id"), info.get("dispatch_id"), stream)
    for v in opt:
        if v is not None and (type(v) is not int or not _LO <= v <= _HI):
            return None
    if vals[0] not in symbols:
        return None
    return (vals[0], vals[1], vals[2], vals[3], vals[4:7], vals[7:10], vals[10], opt[0], vals[11], opt[1], opt[2], opt[3])


def _paths(processes: list[tuple[str, int]]) -> pd.arrays.ArrowStringArray:
    """The ``record`` column: ``BASE.buffer_records.kernel_dispatch[i]`` for each process's dispatches,
    built 65,536 at a time into pyarrow (the ``string`` dtype's storage)."""
    import pyarrow as pa  # noqa: PLC0415 - pandas' own string storage, loaded with it

    chunks = []
    for base, count in processes:
        for lo in range(0, count, 1 << 16):
            chunks.append(pa.array([f"{base}.buffer_records.kernel_dispatch[{i}]"
                                    for i in range(lo, min(count, lo + (1 << 16)))], type=pa.large_string()))
    return pd.array(pa.chunked_array(chunks, type=pa.large_string()), dtype="string")


# --------------------------------------------------------------------------- the two passes
#: Sections of a process kept whole by the first pass (small: a few entries per kernel and agent).
_KEPT = frozenset({"metadata", "kernel_symbols", "agents"})
_STARTS = frozenset({"start_map", "start_array", "string", "number", "boolean", "null"})
_TYPE = {"start_map": "dict", "start_array": "list", "string": "str", "boolean": "bool", "null": "NoneType"}
#: A document this size or smaller that yajl refuses is read again by ``json`` for the message the
#: whole-file reader gave (its words, line and column); a larger one gets yajl's reason.
_RESAY_BYTES = 64 << 20
_BUF = 256 << 10


def _tname(event: str, value: Any) -> str:
    return _TYPE.get(event) or type(value).__name__


class _Run:
    """One ``kernel_dispatch`` value met by the first pass: its events' prefix, its JSON type and records."""

    __slots__ = ("kdp", "form", "count")

    def __init__(self, kdp: str, form: str) -> None:
        self.kdp, self.form, self.count = kdp, form, 0


class _Node:
    """What the first pass keeps of one process: its JSON type, its small sections, the type of its
    ``buffer_records`` and its (last) ``kernel_dispatch`` run."""

    __slots__ = ("type", "fields", "br_type", "kd")

    def __init__(self, type_: str) -> None:
        self.type, self.fields, self.br_type, self.kd = type_, {}, None, None


class _Doc:
    __slots__ = ("type", "keys", "has_top", "top_type", "nodes", "runs")

    def __init__(self) -> None:
        self.type, self.keys, self.has_top, self.top_type = None, [], False, None
        self.nodes: list[_Node] = []
        self.runs: list[_Run] = []


class _Lines:
    """The stream ijson reads, counting newlines (a syntax error's line) and dropping a UTF-8 BOM."""

    def __init__(self, raw) -> None:  # noqa: ANN001
        self.raw, self.lines, self.bytes, self.first = raw, 0, 0, True

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        if self.first:
            self.first = False
            if data.startswith(b"\xef\xbb\xbf"):
                data = data[3:]
        self.lines += data.count(b"\n")
        self.bytes += len(data)
        return data


def _scan(p: Path):  # noqa: ANN202
    """The first pass: the whole document's syntax, its top keys, and per process what :class:`_Node`
    keeps; and the ijson backend that reads it. yajl (the C backend) refuses an integer past int64
    anywhere in the file ("integer overflow"), which is JSON (a uint64 handle, say): such a file is
    read by ijson's pure-Python backend, slower, the same values. (A number past a double, 1e400, is
    refused by both, as not strict JSON; Python's json read it as inf.)"""
    backend = ijson
    while True:
        doc = _Doc()
        with open_stream(p, WHAT) as raw:
            stream = _Lines(raw)
            try:
                _events(doc, backend.parse(stream, buf_size=_BUF, use_float=True))
                return doc, backend
            except (ijson.JSONError, UnicodeDecodeError) as e:
                if backend is ijson and "integer overflow" in str(e):
                    backend = ijson.get_backend("python")
                    continue
                _syntax(p, e, stream)


def _events(doc: _Doc, events) -> None:  # noqa: ANN001, C901 - one state machine over the event stream
    top = TOP
    np_ = None  # the prefix of a process's keys
    node: _Node | None = None
    run: _Run | None = None
    await_ = None  # what the next event starts the value of
    builder, depth, kept = None, 0, None
    first = True
    skip = item = "\x00"  # the prefixes inside the current run's records, and of a record (list form)
    for prefix, event, value in events:
        if prefix.startswith(skip):  # inside a dispatch record: the second pass reads it
            continue
        if prefix == item:
            if event in _STARTS:
                run.count += 1
            continue
        if builder is not None:
            builder.event(event, value)
            if event == "start_map" or event == "start_array":
                depth += 1
            elif event == "end_map" or event == "end_array":
                depth -= 1
            if depth == 0:
                node.fields[kept] = builder.value
                builder = None
            continue
        if await_ is not None:
            what, await_ = await_, None
            t = _tname(event, value)
            if what == "top":
                doc.top_type, doc.nodes, node, run = t, [], None, None
                skip = item = "\x00"
                np_ = top + ".item" if t == "list" else top if t == "dict" else None
                if t == "dict":
                    node = _Node("dict")
                    doc.nodes.append(node)
                continue
            if what == "br":
                node.br_type = t
                continue
            if what == "kd":
                run = _Run(np_ + ".buffer_records.kernel_dispatch", t)
                doc.runs.append(run)
                node.kd = run
                if t == "list":
                    item = run.kdp + ".item"
                    skip = item + "."
                elif t == "dict":
                    skip = run.kdp + "."
                continue
        if first:
            first = False
            doc.type = _tname(event, value)
            continue
        if run is not None and run.form == "dict" and event == "map_key" and prefix == run.kdp:
            run.count += 1
            continue
        if event == "map_key":
            if prefix == "":
                if value not in doc.keys:
                    doc.keys.append(value)
                if value == top:
                    doc.has_top = True
                    await_ = "top"
            elif prefix == np_ and node is not None and node.type == "dict":
                if value in _KEPT:
                    builder, depth, kept = ijson.ObjectBuilder(), 0, value
                elif value == "buffer_records":
                    node.br_type, node.kd, run = None, None, None
                    skip = item = "\x00"
                    await_ = "br"
            elif node is not None and node.br_type == "dict" and prefix == np_ + ".buffer_records" \
                    and value == "kernel_dispatch":
                await_ = "kd"
            continue
        if doc.top_type == "list" and prefix == np_ and event in _STARTS:
            node, run = _Node(_tname(event, value)), None
            skip = item = "\x00"
            doc.nodes.append(node)


def _syntax(p: Path, e: Exception, stream: _Lines) -> None:
    """BadInput for a document yajl refuses: a small one read again by ``json`` for the words and line
    the whole-file reader gave; a larger one with yajl's reason and where it was."""
    reason = str(e).split("\n", 1)[0].split("\\n", 1)[0].removeprefix("b'").removeprefix('b"')
    raw = None
    if stream.bytes <= _RESAY_BYTES:
        try:
            raw = read_bytes(p, WHAT, _RESAY_BYTES)
        except BadInput:  # the error came early in a larger file: yajl's words below
            raw = None
    if raw is not None:
        try:
            json.loads(raw)
        except UnicodeDecodeError as u:
            raise BadInput(p, f"not UTF-8 text at byte {u.start}: not {WHAT}") from None
        except json.JSONDecodeError as j:
            raise BadInput(p, f"not JSON ({j.msg}, column {j.colno}): cut short or not {WHAT}", line=j.lineno) from None
        except RecursionError:
            raise BadInput(p, f"JSON nested too deep: not {WHAT}") from None
        else:  # Python's json takes NaN, Infinity, 1e400 (inf): not JSON, and yajl refuses them
            raise BadInput(p, f"not strict JSON ({reason}; NaN, Infinity and numbers past a double are not JSON): "
                              f"not {WHAT}") from None
    raise BadInput(p, f"not JSON ({reason}, in the {_BUF >> 10} KiB read before line {stream.lines + 1}): "
                      f"cut short or not {WHAT}") from None


class _Feeds:
    """The second pass: the dispatch records of each run, one at a time, from one ijson items (list
    form) or kvitems (object form) stream per prefix and form, records of a run the document
    replaced (a repeated key: the last one counts, as ``json`` keeps it) skipped."""

    def __init__(self, p: Path, runs: list[_Run], backend) -> None:  # noqa: ANN001
        self.p, self.runs, self.open, self.backend = p, runs, {}, backend

    def take(self, run: _Run):
        key = (run.kdp, run.form)
        if key not in self.open:
            stream = open_stream(self.p, WHAT)
            lines = _Lines(stream)
            be = self.backend
            it = (be.items(lines, run.kdp + ".item", buf_size=_BUF, use_float=True) if run.form == "list" else
                  (v for _, v in be.kvitems(lines, run.kdp, buf_size=_BUF, use_float=True)))
            self.open[key] = [stream, it, [r for r in self.runs if (r.kdp, r.form) == key], 0]
        state = self.open[key]
        _, it, queue, pos = state
        while queue[pos] is not run:
            for _ in range(queue[pos].count):
                next(it)
            pos += 1
        state[3] = pos + 1
        for _ in range(run.count):
            yield next(it)

    def close(self) -> None:
        for stream, *_ in self.open.values():
            stream.close()
