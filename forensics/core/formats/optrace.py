"""The op-trace format (``forensics.optrace``, version 2): one owner for its writer and readers.

The tracer (``probes/optrace/``) writes one file per rank, ``rank<R>/trace.jsonl``: a header line,
record lines, a footer line (docs/trace-format.md describes every field). The readers
(``forensics/tracediff/traces/native.py``, the differ's columnar path
``forensics/tracediff/columnar.py``, the capture's recogniser) take the name, the version, the
file name and the key order from here. The key order is part of the format: the columnar path
reads a record's ``seq`` and ``id`` from the start of its line (:data:`RECORD_HEAD`), so
:func:`record` is the one place a record's keys are put in order.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from forensics.core.errors import BadInput

SCHEMA = "forensics.optrace"
#: 2: the header's ``evidence`` (the level the tracer recorded at, ``forensics trace --evidence``)
#: and tensor entries at the light levels (``ev`` sampled / summary / metadata, :data:`SAMPLED`,
#: :data:`SUMMARY`). Version 1 traces (no ``evidence``: every entry full unless it says ``ev``)
#: are read as they were (:data:`READS`).
VERSION = 2
#: the versions this reader reads
READS = (1, 2)
#: the evidence levels of a trace and of each tensor entry, strongest first: ``full`` digests every
#: element (an order-sensitive digest proves equality), ``sampled`` digests :data:`SAMPLES` elements
#: at fixed row-major positions, ``summary`` records a few statistics, ``metadata`` shape and dtype
#: only. Only ``full`` can prove equal values equal; the other three prove a difference at most.
EVIDENCE_LEVELS = ("full", "sampled", "summary", "metadata")
#: what one record is (header ``at``, ``forensics trace --at``): ``ops``, every ATen op below the
#: dispatcher (the default; a trace that does not say), or ``modules``, every nn.Module call (kind
#: ``module``, identity ``module.<class>:<occurrence>``), the light first pass at scale
GRANULARITIES = ("ops", "modules")
#: how an optimizer step is recorded (header ``optimizer``, ``forensics trace --optimizer``): ``ops``,
#: every ATen op it runs, beside its ``optimizer.step`` record of the parameters and gradients before
#: and the parameters after (the default at ``full`` evidence); ``whole``, one ``optimizer.step``
#: record of the parameters, gradients and optimizer state before and the parameters and state after,
#: its ops not traced (the default at the light levels and at ``--at modules``). A trace that does not
#: say recorded ``ops`` at ``--at ops`` and ``whole`` (without the state) at ``--at modules``.
OPTIMIZER_RECORDS = ("ops", "whole")
#: whether same-element views (``t``, ``view``, ``detach``...: :data:`probes.optrace.ops.SAME_ELEMENT_VIEWS`
#: but the ops that bring outside data in, ``lift_fresh``) are records (header ``views``): ``recorded``
#: at full evidence (a trace that does not say), ``skipped`` at the light levels, where a view, which
#: computes nothing, is left to the op that reads its output (that op digests it)
VIEWS = ("recorded", "skipped")
#: the header's ``evidence`` in a trace that does not say (version 1)
DEFAULT_EVIDENCE = "full"
#: elements a ``sampled`` entry digests: at row-major positions ``i * ceil(n / SAMPLES)``
SAMPLES = 64
#: what a ``sampled`` entry's ``h`` is (header ``evidence_digests.sampled``)
SAMPLED = (f"xxh3_64 of the bytes of at most {SAMPLES} elements, at row-major positions i*ceil(n/{SAMPLES}) "
           "(on other devices: fmix64(bits^position) sum of the same elements, on the device)")
#: what a ``summary`` entry's ``h`` is (header ``evidence_digests.summary``). Two traces whose headers
#: name different summary algorithms compare no summary (the differ grades them as metadata); the
#: first algorithm (``summary:<16 hex digits>``, the sum mod 2^64 of every element's bits upcast to
#: 64 bits) is :data:`SUMMARY_V1`
SUMMARY = ("sum32:<8 hex digits> (elements of 1 to 4 bytes) or sum64:<16 hex digits> (8-byte elements): the sum "
           "of the elements' bit patterns as unsigned integers mod 2^32, resp. mod 2^64 (complex: of its real "
           "pairs), exact and independent of order and layout; on other devices the same sum, computed there")
#: a ``summary`` value of ours, of either algorithm: an exact sum of the elements' bits, the same for
#: equal values in any order. Another producer's summary (Megatron's ``summary:{json}`` statistics,
#: norms) is not one: its float reductions can change bits with their order
EXACT_SUMMARY = re.compile(r"(?:sum32:[0-9a-f]{8}|sum64:[0-9a-f]{16}|summary:[0-9a-f]{16})\Z")
#: the first ``summary`` algorithm (traces written before the 32-bit sum; their values start ``summary:``)
SUMMARY_V1 = ("summary:<16 hex digits>: the sum of the elements' bit patterns as unsigned integers mod 2^64 "
              "(complex: of its real pairs), exact and independent of order and layout; on other devices the same "
              "sum, computed there")
#: one file per rank under ``rank<R>/``; a second process of the same rank writes ``trace.<pid>.jsonl``
FILE_NAME = "trace.jsonl"

#: the header's keys, in the order they are written (``type``, ``schema``, ``version`` first)
HEADER_KEYS = ("type", "schema", "version", "rank", "world_size", "argv", "script_argv", "pid", "versions", "env",
               "steps", "ranks", "max_records", "hash", "chunks", "chunked_ops", "ordered", "compiled", "generators",
               "storage_events", "program", "packages", "switches", "evidence", "evidence_digests", "at",
               "optimizer", "views")
#: a record's keys, in the order they are written (``meta`` only when it has something)
RECORD_KEYS = ("seq", "id", "op", "kind", "step", "phase", "in", "out", "meta")
#: the first two keys of every record line: the columnar reader matches them as text
RECORD_HEAD = RECORD_KEYS[:2]
#: the footer's keys, in the order they are written (``unwritten``, ``packages``, ``sources`` and
#: ``imported`` only when there is something to say)
FOOTER_KEYS = ("type", "records", "dropped", "last_step", "seeds", "stopped", "compiled_graphs", "unwritten",
               "packages", "sources", "imported", "switches")

try:  # records are written with orjson when present (the same compact JSON, several times faster)
    import orjson as _orjson

    loads = _orjson.loads
    JSON_ERRORS: tuple[type[Exception], ...] = (_orjson.JSONDecodeError, ValueError)
    _LINE = _orjson.OPT_APPEND_NEWLINE

    def record_line(rec: dict[str, Any]) -> bytes:
        """One record as a line of UTF-8 JSON, newline included (bytes: the file is binary, nothing
        is re-encoded)."""
        try:
            return _orjson.dumps(rec, default=str, option=_LINE)
        except TypeError:
            try:  # a key that is not a string (slower option, so only when needed)
                return _orjson.dumps(rec, default=str, option=_LINE | _orjson.OPT_NON_STR_KEYS)
            except TypeError:  # an integer beyond 64 bits...: the standard encoder
                return (json.dumps(rec, separators=(",", ":"), default=str) + "\n").encode()
except ImportError:  # pragma: no cover - depends on the environment
    loads = json.loads
    JSON_ERRORS = (ValueError,)

    def record_line(rec: dict[str, Any]) -> bytes:
        return (json.dumps(rec, separators=(",", ":"), default=str) + "\n").encode()


def record(seq: int, identity: str, op: str, kind: str, step: Any, phase: str, inputs: list, outputs: list,
           meta: dict | None = None) -> dict[str, Any]:
    """A record in :data:`RECORD_KEYS` order (``meta`` left out when empty)."""
    rec = {"seq": seq, "id": identity, "op": op, "kind": kind, "step": step, "phase": phase,
           "in": inputs, "out": outputs}
    if meta:
        rec["meta"] = meta
    return rec


def _ordered(kind: str, keys: tuple[str, ...], fields: dict[str, Any]) -> dict[str, Any]:
    unknown = [k for k in fields if k not in keys]
    if unknown:
        raise ValueError(f"{SCHEMA} {kind}: unknown key(s) {', '.join(unknown)}")
    return {k: fields[k] for k in keys if k in fields}


def header_line(fields: dict[str, Any]) -> bytes:
    """The header line: ``type``, ``schema`` and ``version`` first, then ``fields`` in
    :data:`HEADER_KEYS` order (a key the format does not have is a ValueError: the writer's bug)."""
    header = _ordered("header", HEADER_KEYS, {"type": "header", "schema": SCHEMA, "version": VERSION, **fields})
    return (json.dumps(header, default=str) + "\n").encode()


def footer_line(fields: dict[str, Any]) -> bytes:
    """The footer line: ``type`` first, then ``fields`` in :data:`FOOTER_KEYS` order."""
    footer = _ordered("footer", FOOTER_KEYS, {"type": "footer", **fields})
    return (json.dumps(footer, default=str) + "\n").encode()


def is_header(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("schema") == SCHEMA and obj.get("type") == "header"


def is_footer(obj: Any) -> bool:
    return isinstance(obj, dict) and obj.get("type") == "footer"


def read_header(path: Path, brief: Any = repr) -> dict[str, Any]:
    """The first line of a rank file, checked for schema and version (BadInput naming the file and
    line 1 otherwise); ``brief`` shortens a foreign value for the message."""
    with open(path, "rb") as f:
        first = f.readline()
    if not first.strip():
        raise BadInput(path, "empty file: no trace header", 1)
    try:
        header = loads(first)
    except JSON_ERRORS:
        raise BadInput(path, "first line is not JSON: not a forensics trace", 1) from None
    if not is_header(header):
        raise BadInput(path, f"foreign schema: first line is not a {SCHEMA} header", 1)
    if header.get("version") not in READS:
        raise BadInput(path, f"{SCHEMA} version {brief(header.get('version'))}; this reader reads versions "
                             f"{', '.join(map(str, READS))}", 1)
    level = header.get("evidence", DEFAULT_EVIDENCE)
    if level not in EVIDENCE_LEVELS:
        raise BadInput(path, f"header evidence {brief(level)}: one of {', '.join(EVIDENCE_LEVELS)}", 1)
    return header


def evidence_of(header: dict[str, Any]) -> str:
    """The level a trace was recorded at (``full`` for a version 1 trace, which does not say)."""
    level = header.get("evidence", DEFAULT_EVIDENCE)
    return level if level in EVIDENCE_LEVELS else DEFAULT_EVIDENCE


def optimizer_of(header: dict[str, Any]) -> str:
    """How a trace recorded its optimizer steps (:data:`OPTIMIZER_RECORDS`): the header's
    ``optimizer``, else what its tracer did (``whole`` at ``--at modules``, ``ops`` otherwise)."""
    value = header.get("optimizer")
    if value in OPTIMIZER_RECORDS:
        return value
    return "whole" if header.get("at") == "modules" else "ops"


def default_optimizer(evidence: str, at: str) -> str:
    """``forensics trace --optimizer``'s default: ``ops`` at full evidence op by op (every op proven),
    ``whole`` at the light levels (a first pass: a difference inside the step is a candidate that the
    full rerun of its window names) and at ``--at modules`` (no dispatch mode)."""
    return "ops" if evidence == "full" and at == "ops" else "whole"


def views_of(header: dict[str, Any]) -> str | None:
    """Whether a trace's op records include same-element views (:data:`VIEWS`): the header's
    ``views``, else ``recorded``; None for a trace of module calls (no op records)."""
    if header.get("at") == "modules":
        return None
    value = header.get("views")
    return value if value in VIEWS else "recorded"
