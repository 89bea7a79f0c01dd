"""rocprofv3's JSON output (``rocprofv3 --kernel-trace --output-format json``: ``<prefix>_results.json``),
a launch counter read only (``parsers.rocprofv3_json``; docs/parsers/rocprofv3-json.md).

Family ``rocprofiler``: the same kernel dispatch records as rocprofv3's kernel trace CSV (ROCprofiler-SDK's
buffer tracing), written in another format; a JSON and a CSV of one run are one source, never two, and
the CSV, registered first, is the member counted when both are present.
"""
from __future__ import annotations

from typing import Any

from forensics.instruments.base import LAUNCHES, ROCM, Head, Instrument
from parsers.rocm_schema import JSON_TOP

TOP_KEY = f'"{JSON_TOP}"'.encode()


# No file-name pattern: a name is only a fallback for files whose content is not recognised, and
# ``*results.json`` is too common a name to read as rocprofv3's when its content says otherwise.
def results_json(head: Head) -> str | None:
    """A JSON object whose first key is ``rocprofiler-sdk-tool`` (plain or gzipped)."""
    text = head.data.lstrip()
    if head.tables is not None or not text.startswith(b"{") or TOP_KEY not in text[:4096]:
        return None
    return "JSON with the 'rocprofiler-sdk-tool' key" + (" (gzip)" if head.gz else "") + ": rocprofv3's JSON output"


def read(path: Any) -> Any:
    from parsers.rocprofv3_json import read_results  # heavy: pandas, only when a file is read

    return read_results(path)


ROCPROFV3_JSON = Instrument(
    "rocprofv3_json", LAUNCHES, (), ROCM, "rocprofiler", read, "rocprofv3 JSON output",
    names=("kernel symbol (mangled and demangled)", "workgroup and grid (work-items; grid in workgroups)", "queue",
           "agent", "correlation id", "pid"),
    content=results_json)

INSTRUMENTS = (ROCPROFV3_JSON,)
