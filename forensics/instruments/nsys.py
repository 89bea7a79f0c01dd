"""Nsight Systems: its own pass of the first arm (``nsys profile`` over the cudaProfilerStart/Stop
window, then ``nsys export --type sqlite``), read from the SQLite export. CUPTI family."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from forensics.instruments.base import CUDA, LAUNCHES, UNREAD, Instrument, OwnPass, Switch

NSYS_GLOBS = ("/usr/local/cuda*/bin/nsys", "/opt/nvidia/nsight-systems/*/bin/nsys",
              "/usr/local/cuda*/nsight-systems*/bin/nsys")


def nsys_argv(nsys: str, report: Path, command: list[str], **_: Any) -> list[str]:
    """``nsys profile`` over the cudaProfilerStart/Stop window, CUDA + NVTX + cuBLAS traces."""
    return [nsys, "profile", "-t", "cuda,nvtx,cublas", "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop", "--sample=none", "--cpuctxsw=none", "-o", str(report)] + list(command)


def nsys_export_argv(nsys: str, report: Path) -> list[str]:
    """``nsys export --type sqlite`` of ``<report>.nsys-rep`` to ``<report>.sqlite`` (never over a file)."""
    return [nsys, "export", "--type", "sqlite", "-o", f"{report}.sqlite", f"{report}.nsys-rep"]


def read_attributed(path: Any) -> Any:
    from parsers.nsys import read_attributed as read  # heavy: pandas, only when a file is read

    return read(path)


NSYS = Instrument(
    "nsys", LAUNCHES, ("*.sqlite",), CUDA, "cupti", read_attributed, "Nsight Systems SQLite export",
    names=("kernel symbol (mangled where the export has it, demangled, short)", "grid/block", "stream",
           "device", "NVTX range (site occurrence)"),
    switch=Switch(order=40, own_pass=OwnPass(
        "nsys", NSYS_GLOBS, "nsys (Nsight Systems) not found on PATH, /usr/local/cuda*/bin or /opt/nvidia",
        nsys_argv, post=lambda tool, report: [nsys_export_argv(tool, report)])))
#: The report itself: recognised, never read (it must be exported first).
NSYS_REP = Instrument("nsys_rep", UNREAD, ("*.nsys-rep", "*.qdrep"), CUDA,
                      label="Nsight Systems report (run `nsys export --type sqlite`)")

INSTRUMENTS = (NSYS, NSYS_REP)
