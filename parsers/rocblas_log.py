"""rocBLAS log (``ROCBLAS_LAYER``: 1 trace, 2 bench, 3 both) -> a GEMM-call frame.

rocBLAS is AMD's cuBLAS, and ``ROCBLAS_LAYER`` its counterpart of the legacy cuBLAS log. A
**trace** line is the function name and its arguments, comma separated and positional
(``rocblas_gemm_ex,N,T,m,n,k,alpha,A,a_type,lda,...``); older rocBLAS printed transA/transB as the
enum value (``111`` = none, ``112`` = transpose, ``113`` = conjugate transpose), newer ones the
letter, and newer ones end the line with the handle's atomics mode. A **bench** line is the
``rocblas-bench`` command that replays the call (``./rocblas-bench -f gemm_ex --transposeA N
... --solution_index 0 --flags 0``). With both layers each call has both lines.

The positional layouts read here are those seen in real logs (tests/fixtures/amd/PROVENANCE.md):
``rocblas_gemm_ex`` and ``rocblas_gemm_batched_ex``. A trace line of another GEMM function is
counted and shown, not read (its bench line, when logged, gives the call); a line of a layout read
here whose type fields are not types is bad input. The frame is
:data:`parsers.hipblaslt_log.CALL_COLUMNS`, so a rocBLAS call and a hipBLASLt call compare alike;
``solution_index`` is rocBLAS's (0: the library's own choice).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

import pandas as pd

from forensics.core.errors import BadInput

from ._amd import canonical_type, fold_bench_options, op_letter, parse_bench_args
from ._text import iter_line_chunks, preview
from .hipblaslt_log import CALL_COLUMNS, call_frame, fill_precisions, problem_key

WHAT = "rocBLAS log"

TRACE = re.compile(r"^(?P<function>rocblas_\w+),(?P<args>.*)$")
BENCH = re.compile(r"^(?:\S*/)?rocblas-bench(?:\s+(?P<args>.*?))?\s*$")
PROFILE = re.compile(r"^-\s*\{\s*rocblas_function:")

# positional layouts of the trace line (after the function name), as seen in real logs
_GEMM_EX = ("transa", "transb", "m", "n", "k", "alpha", "pointer_a", "a_type", "lda", "pointer_b", "b_type", "ldb",
            "beta", "pointer_c", "c_type", "ldc", "pointer_d", "d_type", "ldd")
LAYOUTS: dict[str, tuple[str, ...]] = {
    "rocblas_gemm_ex": _GEMM_EX + ("compute_type", "algo", "solution_index", "flags"),
    "rocblas_gemm_batched_ex": _GEMM_EX + ("batch_count", "compute_type", "algo", "solution_index", "flags"),
}
_TRACE_INTS = ("m", "n", "k", "lda", "ldb", "ldc", "ldd", "batch_count", "solution_index")
_TYPES = ("a_type", "b_type", "c_type", "d_type", "compute_type")
#: GEMM functions: their trace lines are calls (read when their layout is in LAYOUTS). Any other
#: function whose name holds "gemm" (gemm_ext2, a damaged name) is counted as a GEMM line not read.
GEMM_FUNCTION = re.compile(r"gemm")

_BENCH_INTS = {"m": "m", "sizem": "m", "n": "n", "sizen": "n", "k": "k", "sizek": "k",
               **{f"ld{x}": f"ld{x}" for x in "abcd"}, **{f"stride_{x}": f"stride_{x}" for x in "abcd"},
               "batch_count": "batch_count", "solution_index": "solution_index"}
_BENCH_STRS = {"transposeA": "transa", "transposeB": "transb", **{f"{x}_type": f"{x}_type" for x in "abcd"},
               "compute_type": "compute_type", "alpha": "alpha", "beta": "beta"}


@dataclass
class RocblasLog:
    path: str
    trace_calls: pd.DataFrame
    bench_calls: pd.DataFrame
    functions: dict[str, int] = field(default_factory=dict)  # trace lines per function (every function)
    bench_functions: dict[str, int] = field(default_factory=dict)  # bench lines per -f
    skipped_lines: int = 0
    problems: list[str] = field(default_factory=list)


def _int(path: str, lineno: int, key: str, value: object) -> int:
    try:
        return int(str(value))  # a bare flag (True) is not an integer
    except ValueError:
        raise BadInput(path, f"{key}={value!r} is not an integer", line=lineno) from None


def _trace_row(path: str, lineno: int, function: str, fields: list[str], raw: str) -> dict[str, Any]:
    layout = LAYOUTS[function]
    extra_fields = fields[len(layout):]
    if len(fields) < len(layout) or len(extra_fields) > 1:
        raise BadInput(path, f"{function} line with {len(fields)} arguments; the layout read has {len(layout)} "
                             f"(+1 atomics mode): {preview(raw, 80)}", line=lineno)
    row: dict[str, Any] = {"line": lineno, "pid": None, "timestamp": None, "source": "trace", "function": function,
                           "raw": raw}
    extra: dict[str, Any] = {}
    for name, value in zip(layout, fields):
        if name in _TRACE_INTS:
            row[name] = _int(path, lineno, name, value)
        elif name in ("transa", "transb"):
            letter = op_letter(value)
            if letter is None:
                raise BadInput(path, f"{name}={value!r} is not N, T, C or 111/112/113", line=lineno)
            row[name] = letter
        elif name in _TYPES:
            if canonical_type(value) == value.lower() and not re.fullmatch(r"[a-z0-9]+_[rc]", value):
                raise BadInput(path, f"{name}={value!r} is not a rocBLAS type: the line does not follow "
                                     f"{function}'s layout: {preview(raw, 80)}", line=lineno)
            row[name] = value
        elif name in ("alpha", "beta"):
            row[name] = value
        else:
            extra[name] = value
    if extra_fields:
        extra["atomics"] = extra_fields[0]
    row["layout"] = row["transa"] + row["transb"]
    row["extra"] = extra
    fill_precisions(row)
    return row


def _bench_row(path: str, lineno: int, args: str, raw: str) -> tuple[str | None, dict[str, Any]]:
    opts, stray = parse_bench_args(args)
    if stray:
        raise BadInput(path, f"rocblas-bench line: {stray[0]!r} is no option's value: {preview(raw, 80)}", line=lineno)
    fn = opts.get("f") or opts.get("function")
    row: dict[str, Any] = {"line": lineno, "pid": None, "timestamp": None, "source": "bench", "function": "rocblas-bench",
                           "bench": raw.strip(), "raw": raw}
    extra: dict[str, Any] = {}
    precision = opts.get("r") or opts.get("precision")
    extra.update(fold_bench_options(path, lineno, opts, _BENCH_INTS, _BENCH_STRS, row, _int))
    if isinstance(precision, str):  # -r sets every type the line does not set itself
        for x in ("a", "b", "c", "d"):
            row.setdefault(f"{x}_type", precision)
    row.setdefault("transa", "N")
    row.setdefault("transb", "N")
    row["layout"] = row["transa"] + row["transb"]
    row["extra"] = extra
    fill_precisions(row)
    return (fn if isinstance(fn, str) else None), row


def _whole(t: re.Match | None, b: re.Match | None) -> bool:
    """A last line without its newline is whole when its layout is: a trace line of a layout read has
    all its arguments, an atomics mode spelled whole (a function not read is only counted); a bench
    line names its function, gives every option a value and ends with a value of its option's kind
    (an integer, a type). A line cut inside an integer's digits is not told from a whole one."""
    if t is not None:
        layout = LAYOUTS.get(t["function"])
        fields = t["args"].split(",")
        if layout is None:
            return True
        if len(fields) == len(layout) + 1:
            return fields[-1].strip() in ("atomics_allowed", "atomics_not_allowed")
        return len(fields) == len(layout) and fields[-1].strip() != ""
    opts, stray = parse_bench_args((b["args"] or "") if b is not None else "")
    fn = opts.get("f") or opts.get("function")
    if not isinstance(fn, str) or stray or any(v is True for v in opts.values()):
        return False
    # every GEMM bench line rocBLAS writes holds these (an _ex line ends with --flags): a line cut
    # between two options is missing one
    if GEMM_FUNCTION.search(fn) and not ({"m", "n", "k", "lda", "ldb", "ldc"} | ({"flags"} if fn.endswith("_ex") else set())) <= set(opts):
        return False
    last_key, last = list(opts.items())[-1]
    if last_key in _BENCH_INTS or last_key in ("flags", "algo", "i", "j"):
        return bool(re.fullmatch(r"-?\d+", str(last)))
    if last_key.endswith("_type") or last_key in ("r", "precision"):
        return canonical_type(str(last)) != str(last).lower()
    return True


def read_log(path: str | PathLike[str]) -> RocblasLog:
    """Every line of a rocBLAS log; ``BadInput`` (file:line) for a damaged GEMM line or a file with no rocBLAS line."""
    p = str(path)
    trace: list[dict] = []
    bench: list[dict] = []
    functions: dict[str, int] = {}
    bench_functions: dict[str, int] = {}
    unread: dict[str, int] = {}
    profile = 0
    skipped, first_skipped, unterminated = 0, None, None
    for first, lines, cut_tail in iter_line_chunks(p, WHAT):
        for i, raw in enumerate(lines):
            lineno = first + i
            text = raw.rstrip()
            t = TRACE.match(text)
            b = None if t else BENCH.match(text)
            if cut_tail and i == len(lines) - 1 and (t or b):
                if not _whole(t, b):
                    raise BadInput(p, f"last line is cut short (no newline at end of file; truncated log?): "
                                      f"{preview(raw)}", line=lineno)
                unterminated = lineno
            if t:
                fn = t["function"]
                functions[fn] = functions.get(fn, 0) + 1
                if fn in LAYOUTS:
                    trace.append(_trace_row(p, lineno, fn, t["args"].split(","), text))
                elif GEMM_FUNCTION.search(fn):
                    unread[fn] = unread.get(fn, 0) + 1
                continue
            if b:
                fn, row = _bench_row(p, lineno, b["args"] or "", text)
                bench_functions[fn or "?"] = bench_functions.get(fn or "?", 0) + 1
                if fn is not None and GEMM_FUNCTION.search(fn):
                    for need in ("m", "n", "k"):
                        if row.get(need) is None:
                            raise BadInput(p, f"rocblas-bench -f {fn} line without -{need}: {preview(raw, 80)}", line=lineno)
                    bench.append(row)
                continue
            if PROFILE.match(text):
                profile += 1
                continue
            if text.strip():
                skipped += 1
                first_skipped = first_skipped or lineno
    if not functions and not bench_functions and not profile:
        where = f" (first other line: {first_skipped})" if first_skipped else ""
        raise BadInput(p, f"no rocBLAS trace or bench line found{where}; not a {WHAT}?", line=first_skipped)
    problems = []
    for fn, n in unread.items():
        problems.append(f"{n} {fn} trace line(s): this layout is not read (no real log of it seen); "
                        "their bench lines give the calls when ROCBLAS_LAYER includes 2")
    if profile:
        problems.append(f"{profile} profile line(s) (ROCBLAS_LAYER=4): counts per problem, not read as calls")
    other_bench = {fn: n for fn, n in bench_functions.items() if not GEMM_FUNCTION.search(fn)}
    if other_bench:
        problems.append("rocblas-bench line(s) of functions that are not GEMMs, not read as calls: "
                        + ", ".join(f"{fn} x{n}" for fn, n in other_bench.items()))
    if skipped:
        problems.append(f"{skipped} lines are not rocBLAS log lines (first at line {first_skipped}); skipped")
    if unterminated is not None:
        problems.append(f"line {unterminated}, the last, has no newline at end of file; it is whole by its layout and "
                        "read (a file cut just after a whole value would look the same)")
    return RocblasLog(p, call_frame(trace), call_frame(bench), functions, bench_functions, skipped, problems)


def _pair(trace: pd.DataFrame, bench: pd.DataFrame) -> list[int | None]:
    """For each trace row, the bench row that replays it: the first bench line after it, before the
    next trace line, with the same problem (ROCBLAS_LAYER=3 prints a call's trace line, then its bench line)."""
    out: list[int | None] = []
    t_lines = trace["line"].tolist() + [None]
    b_lines = bench["line"].tolist()
    for i in range(len(trace)):
        lo, hi = t_lines[i], t_lines[i + 1]
        j = next((j for j, ln in enumerate(b_lines) if ln > lo and (hi is None or ln < hi)), None)
        out.append(j if j is not None and problem_key(trace.iloc[i]) == problem_key(bench.iloc[j]) else None)
    return out


def read_calls(path: str | PathLike[str]) -> pd.DataFrame:
    """One row per GEMM call: the trace lines read, each given its bench command when trace and bench
    GEMM lines are equally many and agree on the problem one by one; else the bench lines when there
    is no trace line read. ``attrs``: ``problems``, ``losses`` (GEMM trace lines not read, when no
    bench line stands for them), ``holds`` (trace lines per function)."""
    log = read_log(path)
    problems, losses = list(log.problems), []
    t, b = log.trace_calls, log.bench_calls
    unread = sum(n for fn, n in log.functions.items() if GEMM_FUNCTION.search(fn) and fn not in LAYOUTS)
    if len(t) and len(b):
        calls = t.copy()
        paired = _pair(t, b)
        calls["bench"] = [b["bench"].iat[j] if j is not None else None for j in paired]
        alone = sum(j is None for j in paired)
        if alone or len(b) > len(t) - alone:
            problems.append(f"{len(t) - alone} of {len(t)} trace call(s) paired with a bench line "
                            f"({len(b)} bench line(s)): the calls are the trace lines")
    elif len(b) and not len(t):
        calls = b
    else:
        calls = t
    if unread and not (len(b) and not len(t)):
        losses.append(f"{unread} GEMM trace line(s) of a layout not read are not among the calls")
    if calls.empty:
        problems.append("no GEMM call read: the log holds " + ", ".join(f"{fn} x{n}" for fn, n in log.functions.items()))
    calls = calls.reset_index(drop=True)
    calls.attrs["problems"] = problems + losses
    calls.attrs["losses"] = losses
    calls.attrs["holds"] = dict(log.functions)
    return calls
