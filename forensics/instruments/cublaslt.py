"""The cuBLASLt log (``CUBLASLT_LOG_LEVEL=5``, one file per process, switched on in every arm) and
the legacy cuBLAS log (``CUBLAS_LOGINFO_DBG``, read only): the library's own host-side record of
its calls, independent of the CUPTI family and of ncu. It names no kernel; it confirms GEMM
launches (:func:`forensics.core.kernel_names.cublas_launch_role`) and carries the algo and problem
descriptors. Its calls attach to site occurrences by host order and problem descriptor
(:func:`forensics.judge.analysis.attribute_calls`, the default)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from forensics.core.kernel_names import cublas_launch_role
from forensics.instruments.base import CALLS, CUDA, Family, Instrument, Switch
from parsers.cublaslt_grammar import ALGO_COLUMNS

FAMILY = Family("cublaslt", "cuBLASLt log", "cuBLASLt", CUDA,
                "no cuBLASLt log (CUBLASLT_LOG_LEVEL): no algo descriptor, no library-side call count")


def cublaslt_env(folder: Path) -> dict[str, str]:
    """cuBLASLt API-trace logging into the arm folder, one file per process (``%i`` = pid)."""
    return {"CUBLASLT_LOG_LEVEL": "5", "CUBLASLT_LOG_FILE": str(folder / "cublaslt.%i.log")}


def read_calls(path: Any) -> Any:
    from parsers.cublaslt import read_calls as read  # heavy: pandas, only when a file is read

    return read(path)


def read_matmul_calls(path: Any) -> Any:
    from parsers.cublas_legacy import read_matmul_calls as read  # heavy: pandas, only when a file is read

    return read(path)


CUBLASLT = Instrument(
    "cublaslt", CALLS, ("cublaslt*.log",), CUDA, "cublaslt", read_calls, "cuBLASLt log (CUBLASLT_LOG_LEVEL)",
    unit="cuBLASLt matmul calls",
    names=("algo descriptor", "problem descriptor (m, n, k, types, layouts)", "library version"),
    launch_role=cublas_launch_role, confirms="GEMM kernels only", algo_columns=ALGO_COLUMNS,
    line_form=re.compile(rb"^(?:\[[^\]\n]*\])?\[cublasLt\]\[\d+\]\[[A-Za-z]+\]", re.M),
    line_why="text with [cublasLt][pid][level] log lines",
    switch=Switch(order=20, env=cublaslt_env))
CUBLAS = Instrument(
    "cublas", CALLS, ("cublas_legacy*.log", "cublas.*.log"), CUDA, "cublaslt", read_matmul_calls,
    "legacy cuBLAS log (CUBLAS_LOGINFO_DBG)", unit="cuBLAS GEMM calls",
    names=("problem descriptor (m, n, k, types, layouts)", "library version"),
    launch_role=cublas_launch_role, confirms="GEMM kernels only",
    line_form=re.compile(rb"^I! cuBLAS \(v[\d.]+\)", re.M),
    line_why="text with 'I! cuBLAS (vX)' records (legacy cuBLAS log)")

INSTRUMENTS = (CUBLASLT, CUBLAS)
