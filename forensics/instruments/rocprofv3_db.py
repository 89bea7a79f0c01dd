"""rocprofv3's rocpd SQLite database (ROCm 7's default output, ``--output-format rocpd``:
``<prefix>_results.db``), a launch counter read only (``parsers.rocprofv3_rocpd``;
docs/parsers/rocprofv3-rocpd.md).

Family ``rocprofiler``: the kernel dispatch records rocprofv3's CSV and JSON hold (ROCprofiler-SDK's
buffer tracing), stored in SQLite; one run's database and CSV are one source, never two (the CSV,
registered first, is the member counted when both are present). Recognised by its tables
(``rocpd_kernel_dispatch`` and ``rocpd_info_kernel_symbol``, views or uuid-named tables).
"""
from __future__ import annotations

from typing import Any

from forensics.instruments.base import LAUNCHES, ROCM, Head, Instrument
from parsers.rocm_schema import is_rocpd


def rocpd_tables(head: Head) -> str | None:
    if head.tables is None or not is_rocpd(head.tables):
        return None
    return "SQLite with rocprofv3's rocpd tables (rocpd_kernel_dispatch, rocpd_info_kernel_symbol)" + (
        " (gzip)" if head.gz else "")


def read(path: Any) -> Any:
    from parsers.rocprofv3_rocpd import read_database  # heavy: pandas, only when a file is read

    return read_database(path)


ROCPROFV3_DB = Instrument(
    "rocprofv3_db", LAUNCHES, ("*_results.db",), ROCM, "rocprofiler", read, "rocprofv3 rocpd database",
    names=("kernel symbol (mangled and display name)", "workgroup and grid (work-items; grid in workgroups)", "queue",
           "stream", "agent", "correlation id", "pid/tid"),
    content=rocpd_tables)

INSTRUMENTS = (ROCPROFV3_DB,)
