"""hipBLASLt log (``HIPBLASLT_LOG_LEVEL`` / ``HIPBLASLT_LOG_MASK``) -> a matmul-call frame.

hipBLASLt is AMD's cuBLASLt, and its log the counterpart of the cuBLASLt log: an instrument
independent of rocprofv3's launch records. Two kinds of line name a matmul call:

* a ``[Trace][rocblaslt_matmul]`` line (``[<date> <time>][HIPBLASLT][<pid>][Trace][rocblaslt_matmul]
  A=... Adesc=[type=R_16BF rows=48 cols=1024 ld=48] ...  (a batched matrix adds ``batch_count=N
  batch_stride=S``, newer versions ``order=col|row``: hipBLASLt's rocblaslt_matrix_layout_to_string) computeDesc=[computeType=COMPUTE_32F
  scaleType=R_32F transA=OP_N transB=OP_T epilogue=EPILOGUE_DEFAULT ...] ... alpha=1 beta=0
  stream=0``): the problem descriptor, column-major like cuBLASLt's: m, n from D (C when D has
  no descriptor), k from op(A);
* a bench line (``HIPBLASLT_LOG_MASK=32``): ``hipblaslt-bench --api_method c -m 48 -n 176 -k 1024
  ... --algo_method index --solution_index 218160 ...``, the same problem plus the **solution
  index** the library ran, and the command that replays it (the bundle's repro for a hipBLASLt
  site).

Every other hipBLASLt line (``[Api]``, ``[Info]``, ``[Hints]``, ``[Error]``) is counted per level
and function; lines that are not hipBLASLt's (the program's own output on the same stream) are
counted and skipped. :func:`read_calls` gives one row per call: the trace lines, with the
solution index of the bench line paired to each when the log has both, one to one in order with
the same problem; else the bench lines. tests/fixtures/amd/PROVENANCE.md lists the real logs read.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

import pandas as pd

from forensics.core.errors import BadInput

from ._amd import canonical_type, fold_bench_options, op_letter, parse_bench_args
from ._text import TokenError, iter_line_chunks, preview, tokenize_kv

WHAT = "hipBLASLt log"

HEADER = re.compile(r"\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\]\[HIPBLASLT\](?:\[(?P<pid>\d+)\])?"
                    r"\[(?P<level>[A-Za-z]+)\]\[(?P<function>\w+)\] ?")
#: A line that starts like a hipBLASLt header but does not parse as one: damage, not program output.
DAMAGED = re.compile(r"^\[\d{4}-\d\d-\d\d[^\]]*\]\[HIPBLASLT\]")
BENCH = re.compile(r"^(?:\S*/)?hipblaslt-bench(?:\s+(?P<args>.*?))?\s*$")
MATMUL_FUNCTIONS = ("rocblaslt_matmul",)

_MATRICES = ("a", "b", "c", "d")
#: One row per matmul call.
CALL_COLUMNS: dict[str, str] = {
    "line": "Int64",  # 1-based line in the log
    "pid": "Int64",
    "timestamp": "string",  # as printed; None for a bench line
    "source": "string",  # "trace" | "bench": the line kind the row was read from
    "function": "string",  # rocblaslt_matmul | hipblaslt-bench
    "m": "Int64", "n": "Int64", "k": "Int64",
    "transa": "string", "transb": "string", "layout": "string",  # N | T | C; layout = transa + transb
    **{f"{x}_type": "string" for x in _MATRICES},  # as printed (R_16BF, bf16_r)
    "precision": "string",  # canonical type of A (and B, "bf16/fp8" when they differ)
    "out_precision": "string",  # canonical type of D
    **{f"{x}_order": "string" for x in _MATRICES},  # col | row, when the line prints it (newer hipBLASLt)
    **{f"ld{x}": "Int64" for x in _MATRICES},
    **{f"stride_{x}": "Int64" for x in _MATRICES},
    "batch_count": "Int64",
    "compute_type": "string",
    "scale_type": "string",
    "epilogue": "string",  # trace: epilogue; bench: activation_type
    "alpha": "string", "beta": "string",
    "solution_index": "Int64",  # the bench line's --solution_index (paired onto a trace row)
    "algo_method": "string",
    "bench": "string",  # the replayable hipblaslt-bench command line, as printed
    "consistent": "boolean",  # the descriptors agree on m, n, k (None when not checkable)
    "extra": "object",  # every other field, nested blocks flattened as "desc.key"
    "raw": "string",
}
#: The problem descriptor two readings of one call share (trace line vs bench line).
PROBLEM_KEY = ("m", "n", "k", "transa", "transb", "precision", "out_precision", "batch_count")

_BENCH_INTS = {"m": "m", "sizem": "m", "n": "n", "sizen": "n", "k": "k", "sizek": "k",
               **{f"ld{x}": f"ld{x}" for x in _MATRICES}, **{f"stride_{x}": f"stride_{x}" for x in _MATRICES},
               "batch_count": "batch_count", "solution_index": "solution_index"}
_BENCH_STRS = {"transA": "transa", "transB": "transb", **{f"{x}_type": f"{x}_type" for x in _MATRICES},
               "compute_type": "compute_type", "scale_type": "scale_type", "activation_type": "epilogue",
               "alpha": "alpha", "beta": "beta", "algo_method": "algo_method"}


@dataclass
class HipblasltLog:
    """Everything one hipBLASLt log says."""

    path: str
    trace_calls: pd.DataFrame  # [Trace][rocblaslt_matmul] lines (CALL_COLUMNS)
    bench_calls: pd.DataFrame  # hipblaslt-bench lines (CALL_COLUMNS)
    level_counts: dict[str, int] = field(default_factory=dict)  # hipBLASLt lines per [Level]
    functions: dict[str, int] = field(default_factory=dict)  # "[Level][function]" -> lines
    skipped_lines: int = 0  # lines that are not hipBLASLt's (the program's own output)
    problems: list[str] = field(default_factory=list)


def _int(path: str, lineno: int, key: str, value: Any) -> int:
    try:
        return int(str(value), 0) if str(value)[:2].lower() == "0x" else int(str(value))
    except ValueError:
        raise BadInput(path, f"{key}={value!r} is not an integer", line=lineno) from None


def _flatten(out: dict, key: str, value: Any) -> None:
    if isinstance(value, list):
        for k, v in value:
            _flatten(out, f"{key}.{k}", v)
    else:
        out[key] = value


def _trace_row(path: str, lineno: int, m: re.Match, rest: str, raw: str) -> dict[str, Any]:
    try:
        pairs = tokenize_kv(rest.strip())
    except TokenError as e:
        raise BadInput(path, f"column {e.column + m.end()}: {e}: {preview(raw, 80)}", line=lineno) from None
    row: dict[str, Any] = {"line": lineno, "pid": int(m["pid"]) if m["pid"] else None, "timestamp": m["ts"],
                           "source": "trace", "function": m["function"], "raw": raw}
    extra: dict[str, Any] = {}
    dims: dict[str, dict[str, Any]] = {}
    for key, value in pairs:
        x = key[0].lower() if re.fullmatch(r"[ABCD]desc", key) else None
        if x and isinstance(value, list):
            d = dims.setdefault(x, {})
            for k, v in value:
                if k == "type":
                    row[f"{x}_type"] = v
                elif k in ("rows", "cols"):
                    d[k] = _int(path, lineno, f"{key}.{k}", v)
                elif k == "ld":
                    row[f"ld{x}"] = _int(path, lineno, f"{key}.{k}", v)
                elif k == "batch_count":  # printed only when > 1 (hipBLASLt's rocblaslt_matrix_layout_to_string)
                    n = _int(path, lineno, f"{key}.{k}", v)
                    if row.setdefault("batch_count", n) != n:
                        row["consistent"] = False
                elif k == "batch_stride":
                    row[f"stride_{x}"] = _int(path, lineno, f"{key}.{k}", v)
                elif k == "order":  # newer hipBLASLt: order=col|row
                    row[f"{x}_order"] = v
                else:
                    _flatten(extra, f"{key}.{k}", v)
        elif key == "computeDesc" and isinstance(value, list):
            for k, v in value:
                if k in ("transA", "transB"):
                    letter = op_letter(v)
                    if letter is None:
                        raise BadInput(path, f"computeDesc.{k}={v!r} is not OP_N, OP_T or OP_C", line=lineno)
                    row[k.lower()] = letter
                elif k == "computeType":
                    row["compute_type"] = v
                elif k == "scaleType":
                    row["scale_type"] = v
                elif k == "epilogue":
                    row["epilogue"] = v
                else:
                    _flatten(extra, f"{key}.{k}", v)
        elif key in ("alpha", "beta") and not isinstance(value, list):
            row[key] = value
        else:
            _flatten(extra, key, value)
    row["extra"] = extra
    _derive(row, dims)
    return row


def _derive(row: dict[str, Any], dims: dict[str, dict[str, Any]]) -> None:
    """m, n from D (C when D has none), k from op(A), and whether A, B agree (column-major)."""
    ta = row.setdefault("transa", "N")
    tb = row.setdefault("transb", "N")
    row["layout"] = ta + tb
    out = dims.get("d") or dims.get("c") or {}
    a, b = dims.get("a", {}), dims.get("b", {})
    m, n = out.get("rows"), out.get("cols")
    a_m, a_k = (a.get("rows"), a.get("cols")) if ta == "N" else (a.get("cols"), a.get("rows"))
    b_k, b_n = (b.get("rows"), b.get("cols")) if tb == "N" else (b.get("cols"), b.get("rows"))
    row["m"], row["n"] = m, n
    row["k"] = a_k if a_k is not None else b_k
    checks = [(a_m, m), (a_k, b_k), (b_n, n)]
    if row.get("consistent") is not False:  # a batch count that differs between matrices already said False
        row["consistent"] = None if any(x is None or y is None for x, y in checks) else all(x == y for x, y in checks)
    fill_precisions(row)


def fill_precisions(row: dict[str, Any]) -> None:
    """``precision`` (A, and B when it differs) and ``out_precision`` (D, else C) in one vocabulary."""
    ab = [canonical_type(row.get(f"{x}_type")) for x in ("a", "b")]
    ab = [t for t in ab if t is not None]
    row["precision"] = "/".join(dict.fromkeys(ab)) if ab else None
    row["out_precision"] = canonical_type(row.get("d_type") or row.get("c_type"))


def bench_row(path: str, lineno: int, args: str, raw: str, tool: str = "hipblaslt-bench") -> dict[str, Any]:
    """One bench line -> a call row (CALL_COLUMNS keys)."""
    opts, stray = parse_bench_args(args)
    if stray:
        raise BadInput(path, f"{tool} line: {stray[0]!r} is no option's value: {preview(raw, 80)}", line=lineno)
    row: dict[str, Any] = {"line": lineno, "pid": None, "timestamp": None, "source": "bench", "function": tool,
                           "bench": raw.strip(), "raw": raw}
    extra: dict[str, Any] = {}
    extra.update(fold_bench_options(path, lineno, opts, _BENCH_INTS, _BENCH_STRS, row, _int))
    for need in ("m", "n", "k"):
        if row.get(need) is None:
            raise BadInput(path, f"{tool} line without -{need}: {preview(raw, 80)}", line=lineno)
    row.setdefault("transa", "N")
    row.setdefault("transb", "N")
    row["layout"] = row["transa"] + row["transb"]
    row["extra"] = extra
    fill_precisions(row)
    return row


def call_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Row dicts -> a frame with exactly :data:`CALL_COLUMNS` (the rocBLAS reader uses it too)."""
    return pd.DataFrame({c: pd.Series([r.get(c) for r in rows], dtype=t) for c, t in CALL_COLUMNS.items()})


#: Values a bench line's last option may end with, whole: a number, or a word of the option's own set.
_WHOLE_VALUE = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?|none|relu|gelu|swish|sigmoid|clamp|silu|index|heuristic|all|"
                          r"[NTC]|[a-z0-9]+_[rc]", re.I)


def _whole(text: str) -> bool:
    """A last line without its newline is whole when its layout is: a matmul ``[Trace]`` line ends
    with the ``stream=`` field hipBLASLt prints last (any other header line is only counted); a bench
    line names m, n and k and ends with an option's whole value (a number, a type, an enum word),
    no option left without its value. A cut inside a number's digits cannot be told from a whole line."""
    m = HEADER.match(text)
    if m:
        return not (m["level"] == "Trace" and m["function"] in MATMUL_FUNCTIONS) or bool(
            re.search(r"\bstream=\S+\s*$", text))
    b = BENCH.match(text)
    opts, stray = parse_bench_args((b["args"] or "") if b else "")
    if stray or not opts or not {"m", "n", "k"} <= set(opts):
        return False
    last = list(opts.values())[-1]
    return last is not True and bool(_WHOLE_VALUE.fullmatch(str(last)))


def read_log(path: str | PathLike[str]) -> HipblasltLog:
    """Every line of a hipBLASLt log; ``BadInput`` (file:line) for a damaged line or a file that holds none."""
    p = str(path)
    trace: list[dict] = []
    bench: list[dict] = []
    levels: dict[str, int] = {}
    functions: dict[str, int] = {}
    skipped, first_skipped, problems = 0, None, []
    for first, lines, cut_tail in iter_line_chunks(p, WHAT):
        for i, raw in enumerate(lines):
            lineno = first + i
            text = raw.rstrip()
            if cut_tail and i == len(lines) - 1 and (HEADER.match(text) or BENCH.match(text)):
                if not _whole(text):
                    raise BadInput(p, f"last line is cut short (no newline at end of file; truncated log?): "
                                      f"{preview(raw)}", line=lineno)
                problems.append(f"line {lineno}, the last, has no newline at end of file; it is whole by its layout "
                                "and read (a file cut just after a whole value would look the same)")
            m = HEADER.match(text)
            if m:
                level, function = m["level"], m["function"]
                levels[level] = levels.get(level, 0) + 1
                functions[f"[{level}][{function}]"] = functions.get(f"[{level}][{function}]", 0) + 1
                if level == "Trace" and function in MATMUL_FUNCTIONS:
                    trace.append(_trace_row(p, lineno, m, text[m.end():], text))
                continue
            b = BENCH.match(text)
            if b:
                bench.append(bench_row(p, lineno, b["args"] or "", text))
                continue
            if DAMAGED.match(text):
                raise BadInput(p, f"damaged hipBLASLt line header: {preview(raw)}", line=lineno)
            if text.strip():
                skipped += 1
                first_skipped = first_skipped or lineno
    if not levels and not bench:
        where = f" (first other line: {first_skipped})" if first_skipped else ""
        raise BadInput(p, f"no hipBLASLt log line and no hipblaslt-bench line found{where}; not a {WHAT}?",
                       line=first_skipped)
    if skipped:
        problems.append(f"{skipped} lines are not hipBLASLt log lines (first at line {first_skipped}); "
                        "skipped (the program's own output?)")
    return HipblasltLog(p, call_frame(trace), call_frame(bench), levels, functions, skipped, problems)


def problem_key(row: Any) -> tuple:
    """The hashable problem of a call row (:data:`PROBLEM_KEY`); a batch count the line does not print is 1."""
    out = []
    for c in PROBLEM_KEY:
        v = row[c] if c in row else None
        if v is None or v is pd.NA or (isinstance(v, float) and v != v):
            v = 1 if c == "batch_count" else None
        out.append(v)
    return tuple(out)


def read_calls(path: str | PathLike[str]) -> pd.DataFrame:
    """One row per matmul call (:data:`CALL_COLUMNS`).

    The trace lines when the log has them; a bench line's ``solution_index``, ``algo_method`` and
    command are copied onto the trace rows when trace and bench lines are equally many and agree on
    the problem one by one, in order (said in ``attrs["problems"]`` otherwise). A log with bench
    lines only gives one row per bench line. ``attrs``: ``problems``, ``losses`` (nothing is lost
    by these rules: a log without calls says so in ``problems``), ``holds`` (lines per [Level][function]).
    """
    log = read_log(path)
    problems = list(log.problems)
    t, b = log.trace_calls, log.bench_calls
    if len(t) and len(b):
        tk = [problem_key(r) for _, r in t.iterrows()]
        bk = [problem_key(r) for _, r in b.iterrows()]
        if tk == bk:
            calls = t.copy()
            for col in ("solution_index", "algo_method", "bench"):
                calls[col] = b[col].to_numpy()
        else:
            calls = t
            if len(t) != len(b):
                why = f"{len(t)} trace call(s), {len(b)} bench line(s)"
            else:
                i = next(i for i, (x, y) in enumerate(zip(tk, bk)) if x != y)
                why = f"call {i + 1} differs: trace {tk[i]} vs bench {bk[i]}"
            problems.append(f"trace and bench lines not paired ({why}): the calls are the trace lines, "
                            "without solution index")
    elif len(b):
        calls = b
    else:
        calls = t
        if not len(t):
            held = ", ".join(f"{k} x{n}" for k, n in log.functions.items())
            problems.append("no matmul call: no [Trace][rocblaslt_matmul] line (HIPBLASLT_LOG_LEVEL 2 or more prints "
                            "them) and no hipblaslt-bench line (HIPBLASLT_LOG_MASK=32); the log holds: " + held)
    calls = calls.reset_index(drop=True)
    calls.attrs["problems"] = problems
    calls.attrs["losses"] = []
    calls.attrs["holds"] = dict(log.functions)
    return calls
