"""oneDNN verbose log (``ONEDNN_VERBOSE=1``, ``ONEDNN_VERBOSE_TIMESTAMP=1``) -> one row per primitive execution.

Real lines (oneDNN v3.12.0 in the torch 2.13 CPU wheel; tests/fixtures/cpu/logs/)::

    onednn_verbose,v1,info,oneDNN v3.12.0 (commit 80afa71049cd69a3df32adcccb623b12cd7baa22)
    onednn_verbose,v1,info,cpu,runtime:OpenMP,nthr:2
    onednn_verbose,v1,info,cpu,isa:Intel AVX2
    onednn_verbose,v1,primitive,info,template:timestamp,operation,engine,primitive,implementation,prop_kind,memory_descriptors,attributes,auxiliary,problem_desc,exec_time
    onednn_verbose,v1,1796100623096.144043,primitive,exec,cpu,convolution,jit_1x1:avx2,forward_training,src:f32:a:blocked:aBcd8b::f0 wei:f32:a:blocked:ABcd8b8a::f0 bia:f32:a:blocked:a::f0 dst:f32:a:blocked:aBcd8b::f0,attr-scratchpad:user,alg:convolution_direct,mb4_ic8oc16_ih1oh1kh1sh1dh0ph0_iw8ow8kw1sw1dw0pw0,0.00805664

Earlier spellings are read too (seen in public issue threads): ``onednn_verbose,primitive,exec,...``
(v3.0-v3.4, no ``v1`` marker) and ``dnnl_verbose,exec,cpu,...`` (v1.x-v2.x, no component, memory
descriptors spelled ``src_f32::blocked:abcd:f0``). The timestamp (when enabled) is the primitive's
start in milliseconds since the Unix epoch with a microsecond fraction: the same clock as Python's
``time.time_ns()``, which is how the CPU backend attributes a line to a site occurrence. The log
has no thread id and no process id.

``execs``: one row per ``exec`` line of a primitive (the implementation that ran, its problem,
its time). ``creates``: ``create:cache_miss``/``cache_hit``/``create_nested`` lines (same
columns). ``others``: every other operation (``create:dispatch``, ``exec:check``, graph lines, ...)
kept raw. Pure: no torch import. A malformed ``onednn_verbose`` line is
:class:`~forensics.core.errors.BadInput` naming file:line; a line from elsewhere (program output on the
same stdout) is an error unless ``foreign="skip"`` (then counted in ``notes``); a cut last line is
dropped and noted.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from os import PathLike
from pathlib import Path
from typing import Any

import pandas as pd

from forensics.core.errors import BadInput

from ._text import iter_line_chunks, preview

WHAT = "oneDNN verbose log (ONEDNN_VERBOSE)"
PREFIXES = ("onednn_verbose,", "dnnl_verbose,")
COMPONENTS = ("primitive", "graph", "common", "ukernel")
_VERSION_MARK = re.compile(r"^v\d+$")
_NUMBER = re.compile(r"^\s*\d+(?:\.\d+)?\s*$")
#: Columns of a primitive line, after the operation (v3.12's template).
PRIMITIVE_FIELDS = ("engine", "primitive", "implementation", "prop_kind", "memory_descriptors", "attributes",
                    "auxiliary", "problem_desc", "exec_time")

COLUMNS: dict[str, str] = {
    "line": "Int64",
    "ts_ns": "Int64",  # primitive start, ns since the Unix epoch (None without ONEDNN_VERBOSE_TIMESTAMP)
    "component": "string",  # primitive (graph lines go to ``others``)
    "operation": "string",  # exec | create:cache_miss | create:cache_hit | create_nested:...
    "engine": "string",  # cpu | gpu
    "primitive": "string",  # convolution, reorder, matmul, inner_product, ...
    "implementation": "string",  # jit_1x1:avx2, brg:avx512_core, gemm:jit, ref:any ...
    "impl_name": "string",  # the part before the last ':' (jit_1x1)
    "isa": "string",  # the part after it (avx2; for reorders a variant such as blk)
    "prop_kind": "string",  # forward_training, backward_data, backward_weights, undef ...
    "memory_descriptors": "string",
    "dtypes": "string",  # "src:f32 wei:f32 bia:f32 dst:f32" from the memory descriptors
    "attributes": "string",
    "auxiliary": "string",  # alg:convolution_direct ...
    "problem_desc": "string",  # benchdnn problem (mb4_ic8oc16_..., 4x8x1x8, 2x1:1x1)
    "duration_ns": "Int64",  # exec (or create) time as printed (ms) in ns
    "raw": "string",
}
OTHER_COLUMNS: dict[str, str] = {"line": "Int64", "ts_ns": "Int64", "component": "string", "operation": "string",
                                 "raw": "string"}


@dataclass
class OnednnLog:
    """One parsed file; ``info`` holds version, commit, runtime, nthr, isa and the templates."""

    path: Path
    execs: pd.DataFrame
    creates: pd.DataFrame
    others: pd.DataFrame
    info: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    foreign_lines: int = 0


def _ns(text: str) -> int | None:
    """Milliseconds with a decimal fraction -> integer ns, exactly."""
    try:
        ns = int((Decimal(text.strip()) * 1_000_000).to_integral_value())
    except InvalidOperation:
        return None
    if not -(1 << 63) <= ns < (1 << 63):  # an Int64 column: a flipped digit gave OverflowError (exit 70)
        raise ValueError(f"{text.strip()!r} ms is out of range (more than 64-bit nanoseconds)")
    return ns


def dtypes_of(mds: str) -> str:
    """``src:f32:a:blocked:... wei:f32:...`` (v3) or ``src_f32::blocked:...`` (v1/v2) -> ``src:f32 wei:f32``."""
    out = []
    for md in mds.split():
        head = md.split(":", 2)
        if "_" in head[0] and len(head[0].split("_", 1)[1]) > 0:  # v1/v2: src_f32::blocked:abcd:f0
            arg, dt = head[0].split("_", 1)
        elif len(head) >= 2:
            arg, dt = head[0], head[1]
        else:
            continue
        out.append(f"{arg}:{dt}")
    return " ".join(out)


def _split_impl(impl: str) -> tuple[str, str]:
    if ":" in impl:
        name, isa = impl.rsplit(":", 1)
        return name, isa
    return impl, ""


def _info(fields: list[str], info: dict[str, Any]) -> None:
    body = ",".join(fields)
    m = re.match(r"^(?:oneDNN|DNNL|Intel MKL-DNN)\s+v(?P<v>[\w.]+)(?:\s+\(commit (?P<c>\w+)\))?", body)
    if m:
        info["version"] = m.group("v")
        if m.group("c"):
            info["commit"] = m.group("c")
        return
    if fields and fields[0].startswith("template:"):
        info.setdefault("templates", {})[info.get("_component", "primitive")] = [fields[0][len("template:"):]] + fields[1:]
        return
    if fields and fields[0] in ("cpu", "gpu"):
        for f in fields[1:]:
            if ":" in f:
                k, v = f.split(":", 1)
                info[f"{fields[0]}_{k}"] = v
    info.setdefault("lines", []).append(body)


def parse_line(text: str, info: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """One verbose line -> ``(kind, fields)``; kind is primitive | other | info. ValueError when malformed."""
    info = {} if info is None else info
    fields = text.split(",")
    i = 1
    if i < len(fields) and _VERSION_MARK.match(fields[i]):
        i += 1
    ts = None
    if i < len(fields) and _NUMBER.match(fields[i]):
        ts = _ns(fields[i])
        i += 1
    component = "primitive"
    if i < len(fields) and fields[i] in COMPONENTS:
        component = fields[i]
        i += 1
    if i >= len(fields) or not fields[i]:
        raise ValueError("no operation field")
    op = fields[i]
    rest = fields[i + 1:]
    if op == "info":
        info["_component"] = component
        _info(rest, info)
        return "info", {}
    if component == "primitive" and (op == "exec" or op.startswith(("create:cache", "create_nested:cache"))):
        if len(rest) < len(PRIMITIVE_FIELDS):
            raise ValueError(f"{op} line has {len(rest)} fields after the operation; expected "
                             f"{len(PRIMITIVE_FIELDS)} ({','.join(PRIMITIVE_FIELDS)})")
        engine, prim, impl, prop, mds, attrs = (x.strip() for x in rest[:6])
        aux = ",".join(rest[6:-2]).strip()
        problem, time_text = rest[-2].strip(), rest[-1]
        if not _NUMBER.match(time_text):
            raise ValueError(f"time {time_text!r} is not a number of milliseconds")
        if engine not in ("cpu", "gpu"):
            raise ValueError(f"engine {engine!r} is not cpu or gpu")
        if not prim or not impl:
            raise ValueError("empty primitive or implementation field")
        name, isa = _split_impl(impl)
        return "primitive", {"ts_ns": ts, "component": component, "operation": op, "engine": engine, "primitive": prim,
                             "implementation": impl, "impl_name": name, "isa": isa, "prop_kind": prop,
                             "memory_descriptors": mds, "dtypes": dtypes_of(mds), "attributes": attrs,
                             "auxiliary": aux, "problem_desc": problem, "duration_ns": _ns(time_text)}
    return "other", {"ts_ns": ts, "component": component, "operation": op}


def _frame(rows: list[dict[str, Any]], columns: dict[str, str]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    for col, dtype in columns.items():
        if col not in df.columns:
            df[col] = pd.Series([None] * len(df), dtype="object")
        df[col] = df[col].astype(dtype)
    return df[list(columns)]


def read_log(path: str | PathLike[str], foreign: str = "error") -> OnednnLog:
    """Parse a oneDNN verbose file. ``foreign="skip"`` tolerates program output between the lines."""
    if foreign not in ("error", "skip"):
        raise ValueError("foreign must be 'error' or 'skip'")
    p = Path(path)
    execs: list[dict[str, Any]] = []
    creates: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    info: dict[str, Any] = {}
    notes: list[str] = []
    n_foreign = 0
    seen_any = False
    for first, lines, cut_tail in iter_line_chunks(p, WHAT):
        for i, text in enumerate(lines):
            lineno = first + i
            last_cut = cut_tail and i == len(lines) - 1
            if not text.strip():
                continue
            if not text.startswith(PREFIXES):
                if last_cut:
                    notes.append(f"{p}:{lineno}: cut last line dropped (the writer stopped mid-line): {preview(text)}")
                    continue
                if foreign == "skip":
                    n_foreign += 1
                    continue
                raise BadInput(p, f"not a oneDNN verbose line (expected 'onednn_verbose,...'): {preview(text)}", lineno)
            seen_any = True
            try:
                kind, row = parse_line(text, info)
            except ValueError as e:
                if last_cut:
                    notes.append(f"{p}:{lineno}: cut last line dropped: {preview(text)}")
                    continue
                raise BadInput(p, f"malformed oneDNN verbose line: {e}: {preview(text)}", lineno) from None
            if kind == "info":
                continue
            if last_cut:
                notes.append(f"{p}:{lineno}: last line has no newline (kept: it parses whole)")
            row.update(line=lineno, raw=text)
            if kind == "primitive":
                (execs if row["operation"] == "exec" else creates).append(row)
            else:
                others.append(row)
    if not seen_any:
        raise BadInput(p, f"no {WHAT} lines" + (f" ({n_foreign} other lines)" if n_foreign else ""))
    if n_foreign:
        notes.append(f"{p}: {n_foreign} line(s) not from oneDNN skipped (program output on the same stream)")
    info.pop("_component", None)
    return OnednnLog(p, _frame(execs, COLUMNS), _frame(creates, COLUMNS), _frame(others, OTHER_COLUMNS), info, notes,
                     n_foreign)


def read_calls(path: str | PathLike[str]) -> pd.DataFrame:
    """One row per primitive execution (``execs`` of :func:`read_log`), the instrument registry's
    reader; notes in ``attrs["problems"]``, version/ISA facts in ``attrs["info"]``."""
    log = read_log(path)
    df = log.execs.copy()
    df.attrs["problems"] = list(log.notes)
    df.attrs["info"] = {k: v for k, v in log.info.items() if k != "lines"}
    return df
