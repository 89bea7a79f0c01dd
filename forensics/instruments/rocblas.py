"""The rocBLAS log on AMD GPUs (``ROCBLAS_LAYER=3``: trace and bench lines, in every arm): a call
log of the ``hipblaslt`` family (:mod:`.hipblaslt`), read when the hipBLASLt log is absent. Its
GEMM calls launch Tensile kernels, checked call by call as hipBLASLt's are.

rocBLAS writes trace and bench lines to two paths (``ROCBLAS_LOG_TRACE_PATH``,
``ROCBLAS_LOG_BENCH_PATH``) and documents no ``%i`` in them: processes sharing one environment
share one file. The trace file is counted; a file of bench lines only is kept and shown
(``rocblas_bench``), never counted: each of its lines repeats a trace line's call."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from forensics.core.kernel_names import check_amd_call, tensile_launch_role
from forensics.instruments.base import CALLS, CONTEXT, ROCM, Instrument, Switch


def rocblas_env(folder: Path) -> dict[str, str]:
    """Trace (1) and bench (2) lines into the arm folder (rocBLAS takes no per-process pattern)."""
    return {"ROCBLAS_LAYER": "3", "ROCBLAS_LOG_TRACE_PATH": str(folder / "rocblas_trace.log"),
            "ROCBLAS_LOG_BENCH_PATH": str(folder / "rocblas_bench.log")}


def read_calls(path: Any) -> Any:
    from parsers.rocblas_log import read_calls as read  # heavy: pandas, only when a file is read

    return read(path)


ROCBLAS = Instrument(
    "rocblas", CALLS, ("rocblas_trace*.log", "rocblas.log", "rocblas.*.log"), ROCM, "hipblaslt", read_calls,
    "rocBLAS log (ROCBLAS_LAYER)",
    unit="rocBLAS GEMM calls", names=("problem descriptor (m, n, k, types, layouts, batch)", "bench line"),
    launch_role=tensile_launch_role, confirms="Tensile GEMM kernels only", identity=check_amd_call,
    library="rocBLAS",
    line_form=re.compile(rb"^rocblas_\w+,|^-\s*\{\s*rocblas_function:", re.M),
    line_why="text with rocblas_<function>,... trace lines or rocBLAS profile lines",
    switch=Switch(order=26, env=rocblas_env))
#: ROCBLAS_LOG_BENCH_PATH's file: bench lines only (a trace file, or a combined log, is ROCBLAS's).
ROCBLAS_BENCH = Instrument(
    "rocblas_bench", CONTEXT, ("rocblas_bench*.log",), label="rocBLAS bench lines (ROCBLAS_LOG_BENCH_PATH)",
    line_form=re.compile(rb"^(?:\S*/)?rocblas-bench ", re.M),
    line_why="text with rocblas-bench lines only (the bench half of a rocBLAS log; its calls are the trace file's)")

INSTRUMENTS = (ROCBLAS, ROCBLAS_BENCH)
