"""The rocBLAS log on AMD GPUs (``ROCBLAS_LAYER=3``: trace and bench lines, in every arm): a call
log of the ``hipblaslt`` family (:mod:`.hipblaslt`), read when the hipBLASLt log is absent. Its
GEMM calls launch Tensile kernels, checked call by call as hipBLASLt's are.

rocBLAS writes trace and bench lines to two paths (``ROCBLAS_LOG_TRACE_PATH``,
``ROCBLAS_LOG_BENCH_PATH``) and documents no ``%i`` in them: processes sharing one environment
share one file. A file of bench lines only (``rocblas_bench``: ``ROCBLAS_LAYER=2``, or the bench
half of layer 3) is a call log too, each bench line one call with its whole problem: it is the
family's last choice, counted only where no hipBLASLt log and no rocBLAS trace file stand beside
it (there each of its lines repeats a trace line's call, and it is read and said "not counted")."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from forensics.core.kernel_names import check_amd_call, tensile_launch_role
from forensics.instruments.base import CALLS, ROCM, Instrument, Switch


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
    library="rocBLAS", algo_columns=("solution_index",),
    line_form=re.compile(rb"^rocblas_\w+,|^-\s*\{\s*rocblas_function:", re.M),
    line_why="text with rocblas_<function>,... trace lines or rocBLAS profile lines",
    switch=Switch(order=26, env=rocblas_env))
#: ROCBLAS_LOG_BENCH_PATH's file, or a ROCBLAS_LAYER=2 log: bench lines only (a trace file, or a combined
#: log, is ROCBLAS's). After ROCBLAS in the registry: the family counts it only where no trace file is read.
ROCBLAS_BENCH = Instrument(
    "rocblas_bench", CALLS, ("rocblas_bench*.log",), ROCM, "hipblaslt", read_calls,
    "rocBLAS bench lines (ROCBLAS_LAYER=2, ROCBLAS_LOG_BENCH_PATH)",
    unit="rocBLAS GEMM calls", names=("problem descriptor (m, n, k, types, layouts, batch)", "bench line"),
    launch_role=tensile_launch_role, confirms="Tensile GEMM kernels only", identity=check_amd_call,
    library="rocBLAS", algo_columns=("solution_index",),
    line_form=re.compile(rb"^(?:\S*/)?rocblas-bench ", re.M),
    line_why="text with rocblas-bench lines only (ROCBLAS_LAYER=2: one replayable bench line per call)")

INSTRUMENTS = (ROCBLAS, ROCBLAS_BENCH)
