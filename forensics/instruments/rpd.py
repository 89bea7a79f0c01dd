"""rocmProfileData's ``.rpd`` SQLite database (``runTracer.sh`` / ``rpd_tracer``; plain or gzipped), a
launch counter read only (``parsers.rpd``; docs/parsers/rpd.md).

Family ``rocprofiler``: rpd_tracer records through AMD's runtime tracing, roctracer on ROCm 6 (the activity
source PyTorch's profiler uses on ROCm: Kineto-on-ROCm and an .rpd of one run are one source) and
ROCprofiler-SDK from ROCm 7 (rocprofv3's source), so it never confirms rocprofv3 or Kineto-on-ROCm.
An .rpd recorded through CUPTI on NVIDIA is refused by the reader. Recognised by its tables (rocpd_op,
rocpd_api, rocpd_api_ops, rocpd_kernelapi, rocpd_string), a gzipped one by the tables in its first bytes.
"""
from __future__ import annotations

from typing import Any

from forensics.instruments.base import LAUNCHES, ROCM, Head, Instrument
from parsers.rocm_schema import is_rpd


def rpd_tables(head: Head) -> str | None:
    if head.tables is None or not is_rpd(head.tables):
        return None
    return "SQLite with rocmProfileData's tables (rocpd_op, rocpd_api, rocpd_kernelapi)" + (" (gzip)" if head.gz else "")


def read(path: Any) -> Any:
    """Launches, each with the ``SITE#N`` ROCTx range (rpd's ``UserMarker`` rows) around its launching call."""
    from parsers.rpd import read_attributed  # heavy: pandas, only when a file is read

    return read_attributed(path)


RPD = Instrument(
    "rpd", LAUNCHES, ("*.rpd", "*.rpd.gz"), ROCM, "rocprofiler", read, "rocmProfileData .rpd database",
    names=("kernel symbol (demangled)", "workgroup and grid (unit from the launching call)", "queue", "stream",
           "launching HIP call, its host time, pid/tid", "ROCTx range (site occurrence)"),
    content=rpd_tables)

INSTRUMENTS = (RPD,)
