"""Nsight Systems: its own pass of the first arm (``nsys profile`` over the cudaProfilerStart/Stop
window, then ``nsys export --type sqlite``), read from the SQLite export. CUPTI family."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from forensics.instruments.base import CUDA, LAUNCHES, UNREAD, Head, Instrument, OwnPass, Switch

NSYS_GLOBS = ("/usr/local/cuda*/bin/nsys", "/opt/nvidia/nsight-systems/*/bin/nsys",
              "/usr/local/cuda*/nsight-systems*/bin/nsys")


def nsys_argv(nsys: str, report: Path, command: list[str], **_: Any) -> list[str]:
    """``nsys profile`` over the cudaProfilerStart/Stop window, CUDA + NVTX + cuBLAS traces."""
    return [nsys, "profile", "-t", "cuda,nvtx,cublas", "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop", "--sample=none", "--cpuctxsw=none", "-o", str(report)] + list(command)


def nsys_export_argv(nsys: str, report: Path) -> list[str]:
    """``nsys export --type sqlite`` of ``<report>.nsys-rep`` to ``<report>.sqlite`` (never over a file)."""
    return [nsys, "export", "--type", "sqlite", "-o", f"{report}.sqlite", f"{report}.nsys-rep"]


#: Tables of an nsys export beside StringIds when it holds no CUPTI activity table.
_NSYS_META = frozenset({"TARGET_INFO_GPU", "EXPORT_META_DATA", "META_DATA_EXPORT", "TARGET_INFO_SESSION_START_TIME",
                        "ThreadNames"})


def export_tables(head: Head) -> str | None:
    """An SQLite file is nsys's export when it holds nsys's tables (StringIds and CUPTI_ACTIVITY_KIND_*)."""
    if head.tables is None:
        return None
    cupti = sorted(t for t in head.tables if t.startswith("CUPTI_ACTIVITY_KIND_"))
    if "StringIds" not in head.tables or not (cupti or head.tables & _NSYS_META):
        return None
    kernels = ("CUPTI_ACTIVITY_KIND_KERNEL" if "CUPTI_ACTIVITY_KIND_KERNEL" in head.tables
               else f"no kernel table; {len(cupti)} CUPTI_ACTIVITY_KIND_* tables")
    return f"SQLite with nsys tables (StringIds, {kernels})"


def report_title(head: Head) -> str | None:
    """An ``.nsys-rep``/``.qdrep`` starts with a title naming an NVIDIA report."""
    if head.tables is not None or not (head.data.startswith(b"NVIDIA") and b"Report" in head.data[:64]):
        return None
    title = head.data[:64].split(b"\n", 1)[0].decode("ascii", "replace").strip()
    return f"Nsight Systems report ({title}); run `nsys export --type sqlite` to read it"


def read_attributed(path: Any) -> Any:
    from parsers.nsys import read_attributed as read  # heavy: pandas, only when a file is read

    return read(path)


NSYS = Instrument(
    "nsys", LAUNCHES, ("*.sqlite",), CUDA, "cupti", read_attributed, "Nsight Systems SQLite export",
    names=("kernel symbol (mangled where the export has it, demangled, short)", "grid/block", "stream",
           "device", "NVTX range (site occurrence)"),
    content=export_tables, switch=Switch(order=40, own_pass=OwnPass(
        "nsys", NSYS_GLOBS, "nsys (Nsight Systems) not found on PATH, /usr/local/cuda*/bin or /opt/nvidia",
        nsys_argv, post=lambda tool, report: [nsys_export_argv(tool, report)])))
#: The report itself: recognised, never read (it must be exported first).
NSYS_REP = Instrument("nsys_rep", UNREAD, ("*.nsys-rep", "*.qdrep"), CUDA,
                      label="Nsight Systems report (run `nsys export --type sqlite`)", content=report_title)

INSTRUMENTS = (NSYS, NSYS_REP)
