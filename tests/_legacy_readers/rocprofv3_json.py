# The reader parsers/rocprofv3_json.py as main had it before the streamed reader (issue 44): kept only for
# tests/test_streamed_readers_equivalence.py. Not used by the package.
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
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

import pandas as pd

from forensics.core.errors import BadInput
from forensics.core.model import LAUNCH_COLUMNS, conform, empty_frame

from parsers._rocm_db import MAX_JSON_BYTES, MAX_LAUNCHES, as_int, as_text, launch_row, read_bytes
from parsers.rocm_schema import JSON_TOP

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

    ``attrs``: ``problems`` (a process without kernel dispatches, a dispatch whose agent the file does
    not list), ``losses`` (none: every dispatch is a row). Bad input (file, and the JSON line of a
    syntax error): not JSON, no ``rocprofiler-sdk-tool``, a value of the wrong type, a dispatch whose
    ``kernel_id`` no kernel symbol has, more than :data:`parsers._rocm_db.MAX_LAUNCHES` dispatches.
    """
    p = Path(path)
    raw = read_bytes(p, WHAT, MAX_JSON_BYTES)
    try:
        doc = json.loads(raw)
    except UnicodeDecodeError as e:
        raise BadInput(p, f"not UTF-8 text at byte {e.start}: not {WHAT}") from None
    except json.JSONDecodeError as e:
        raise BadInput(p, f"not JSON ({e.msg}, column {e.colno}): cut short or not {WHAT}", line=e.lineno) from None
    except RecursionError:
        raise BadInput(p, f"JSON nested too deep: not {WHAT}") from None
    if not isinstance(doc, Mapping) or TOP not in doc:
        keys = ", ".join(list(doc)[:6]) if isinstance(doc, Mapping) else type(doc).__name__
        raise BadInput(p, f"no {TOP!r} key at the top (it has {keys}): not {WHAT}", line=1)
    nodes = doc[TOP]
    nodes = [nodes] if isinstance(nodes, Mapping) else _list(p, TOP, nodes)
    total = 0
    for pi, node in enumerate(nodes):
        node = _obj(p, f"{TOP}[{pi}]", node)
        recs = _obj(p, f"{TOP}[{pi}].buffer_records", node.get("buffer_records", {}))
        total += len(_list(p, f"{TOP}[{pi}].buffer_records.kernel_dispatch", recs.get("kernel_dispatch", [])))
    if total > MAX_LAUNCHES:
        raise BadInput(p, f"{total} kernel dispatches, more than {MAX_LAUNCHES} (the reader's ceiling, "
                          "parsers._rocm_db.MAX_LAUNCHES): not read")
    rows: list[dict] = []
    problems: list[str] = []
    for pi, node in enumerate(nodes):
        base = f"{TOP}[{pi}]"
        meta = _obj(p, f"{base}.metadata", node.get("metadata", {}))
        pid = as_int(p, f"{base}.metadata.pid", meta.get("pid"), null=True)
        symbols = _symbols(p, f"{base}.kernel_symbols", node)
        agents = _agents(p, f"{base}.agents", node)
        dispatches = _list(p, f"{base}.buffer_records.kernel_dispatch", node.get("buffer_records", {}).get("kernel_dispatch", []))
        if not dispatches:
            problems.append(f"{base}: no kernel_dispatch record (rocprofv3 without --kernel-trace?)")
        unknown_agents = 0
        for i, rec in enumerate(dispatches):
            w = f"{base}.buffer_records.kernel_dispatch[{i}]"
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
            mangled, shown = symbols[kid]
            rows.append(launch_row(
                p, w, instrument=INSTRUMENT, mangled=mangled, demangled=shown,
                start=as_int(p, f"{w}.start_timestamp", _need(p, w, rec, "start_timestamp")),
                end=as_int(p, f"{w}.end_timestamp", _need(p, w, rec, "end_timestamp")),
                workgroup=_dim(p, f"{w}.dispatch_info.workgroup_size", _need(p, f"{w}.dispatch_info", info, "workgroup_size")),
                grid=_dim(p, f"{w}.dispatch_info.grid_size", _need(p, f"{w}.dispatch_info", info, "grid_size")),
                grid_in_items=True, pid=pid, correlation_id=internal, external_id=external or None,
                device_id=device, agent=agent, record=w,
                queue_id=_handle(p, f"{w}.dispatch_info.queue_id", info.get("queue_id", 0)),
                thread_id=as_int(p, f"{w}.thread_id", rec.get("thread_id"), null=True),
                dispatch_id=as_int(p, f"{w}.dispatch_info.dispatch_id", info.get("dispatch_id"), null=True),
                stream_id=as_int(p, f"{w}.stream_id", (rec.get("stream_id") or {}).get("handle")
                                 if isinstance(rec.get("stream_id"), Mapping) else rec.get("stream_id"), null=True),
                kernel_id=kid))
        if unknown_agents:
            problems.append(f"{base}: {unknown_agents} dispatch(es) on an agent the file does not list: no device id")
    cols = {**LAUNCH_COLUMNS, **EXTRA_COLUMNS}
    df = conform(pd.DataFrame(rows), cols) if rows else empty_frame(cols)
    df.attrs["problems"] = problems + ([] if rows else ["no kernel dispatch: the file holds no kernel launch"])
    df.attrs["losses"] = []
    df.attrs["processes"] = len(nodes)
    return df
