"""The hipBLASLt log on AMD GPUs (``HIPBLASLT_LOG_MASK=34``: trace and bench lines, one file per
process, in every arm): the library's own host-side record of its matmul calls, the cuBLASLt log's
counterpart, independent of the rocprofv3 family. It names no kernel; it confirms Tensile GEMM
launches (:func:`forensics.core.kernel_names.tensile_launch_role`: a call's Tensile kernel and its
PostGSU reduction are one launch group), checked call by call against the launch's name and grid
(:func:`forensics.core.kernel_names.check_amd_call`). Its bench line (``hipblaslt-bench ...
--solution_index N``) is the site's repro. Its calls attach to site occurrences by host order and
problem descriptor, as the cuBLASLt log's do.

Family ``hipblaslt`` with the rocBLAS log (:mod:`.rocblas`): rocBLAS can hand its GEMMs to hipBLASLt
(``ROCBLAS_USE_HIPBLASLT``), so the two logs may record one call twice; like the cuBLASLt and legacy
cuBLAS logs they are one family, the hipBLASLt log preferred."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from forensics.core.kernel_names import check_amd_call, tensile_launch_role
from forensics.instruments.base import CALLS, ROCM, Family, Instrument, Switch

FAMILY = Family("hipblaslt", "hipBLASLt/rocBLAS log", "hipBLASLt/rocBLAS", ROCM,
                "no hipBLASLt or rocBLAS log (HIPBLASLT_LOG_MASK, ROCBLAS_LAYER): no library-side call count, "
                "no problem descriptor, no bench line")


def hipblaslt_env(folder: Path) -> dict[str, str]:
    """Trace (2) and bench (32) lines into the arm folder, one file per process (``%i`` = pid).
    HIPBLASLT_LOG_LEVEL stays unset: hipBLASLt consults the mask only when the level is unset."""
    return {"HIPBLASLT_LOG_MASK": "34", "HIPBLASLT_LOG_FILE": str(folder / "hipblaslt.%i.log")}


def read_calls(path: Any) -> Any:
    from parsers.hipblaslt_log import read_calls as read  # heavy: pandas, only when a file is read

    return read(path)


HIPBLASLT = Instrument(
    "hipblaslt", CALLS, ("hipblaslt*.log",), ROCM, "hipblaslt", read_calls,
    "hipBLASLt log (HIPBLASLT_LOG_MASK)", unit="hipBLASLt matmul calls",
    names=("problem descriptor (m, n, k, types, layouts, batch)", "solution index and bench line (mask 32)"),
    launch_role=tensile_launch_role, confirms="Tensile GEMM kernels only", identity=check_amd_call,
    library="hipBLASLt", algo_columns=("solution_index", "algo_method"),
    line_form=re.compile(rb"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\]\[HIPBLASLT\]|^(?:\S*/)?hipblaslt-bench ", re.M),
    line_why="text with [date][HIPBLASLT] log lines or hipblaslt-bench lines",
    switch=Switch(order=25, env=hipblaslt_env))

INSTRUMENTS = (HIPBLASLT,)
