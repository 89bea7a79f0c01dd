"""Nsight Compute (kernel replay, independent of the CUPTI family): its own pass of the first arm
(``ncu --target-processes all --nvtx`` over the step window or the site's NVTX ranges), read from
the ``.ncu-rep`` or, second in preference, its CSV export (``--page raw|details``)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from forensics.core.errors import BadInput
from forensics.core.site import split_label
from forensics.instruments.base import CUDA, LAUNCHES, Family, Head, Instrument, OwnPass, Switch
from probes.sites import NVTX_DOMAIN  # the site probe's NVTX domain, where its start/end ranges are

FAMILY = Family("ncu", "Nsight Compute", "ncu", CUDA,
                "no Nsight Compute report (.ncu-rep or its CSV export): the independent replay count is missing")

NCU_GLOBS = ("/usr/local/cuda*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda*/nsight-compute*/ncu")
NCU_PERMISSION_MARK = "ERR_NVGPUCTRPERM"
NCU_PERMISSION_REASON = (
    "ncu has no permission to read GPU performance counters (ERR_NVGPUCTRPERM): run as root, or set "
    "NVreg_RestrictProfilingToAdminUsers=0 for the nvidia module (docs/capture.md)"
)


def ncu_permission_denied(log_text: str) -> bool:
    """True when an ncu log says the GPU performance counters are not accessible to this user."""
    return NCU_PERMISSION_MARK in log_text


def ncu_nvtx_include(site: str) -> str:
    """ncu ``--nvtx-include`` expression matching every ``SITE#N`` start/end range (or one occurrence).

    Start/end ranges are written ``Domain@Range`` (no trailing ``/``, which would mean push/pop);
    a whole site needs a regex over its occurrences.
    """
    if split_label(site)[1] is not None:  # one occurrence
        return f"{NVTX_DOMAIN}@{site}"
    return f"regex:{NVTX_DOMAIN}@{re.escape(site)}#[0-9]+"


def ncu_argv(ncu: str, report: Path, command: list[str], *, site: str, mode: str = "window") -> list[str]:
    """The ncu wrapper: all processes, NVTX state per kernel, base units, LaunchStats, ``-o`` report.

    ``mode="window"``: profiling starts off and the probe brackets the step window with
    cudaProfilerStart/Stop (what the GPU campaign used). ``mode="nvtx"``: only kernels inside the
    site's NVTX start/end ranges. Never ``-f``: the report goes into a fresh capture folder.
    """
    argv = [ncu, "--target-processes", "all", "--nvtx"]
    if mode == "window":
        argv += ["--profile-from-start", "off"]
    elif mode == "nvtx":
        argv += ["--nvtx-include", ncu_nvtx_include(site)]
    else:
        raise ValueError(f"ncu mode {mode!r} must be 'window' or 'nvtx'")
    argv += ["--clock-control", "none", "--print-units", "base", "--section", "LaunchStats",
             "--metrics", "gpu__time_duration.sum", "-o", str(report)]
    return argv + list(command)


def report_magic(head: Head) -> str | None:
    """A ``.ncu-rep`` starts with ncu's ``NVR`` magic."""
    return "Nsight Compute report (NVR magic)" if head.tables is None and head.data.startswith(b"NVR\x00") else None


def read_report(path: Any) -> Any:
    from parsers.ncu import read_report as read  # heavy: pandas, only when a file is read

    return read(path)


def read_csv(path: Any) -> Any:
    """The CSV export's launches; a file with no ncu header that is positively something else (an
    `nsys stats` report) says what it is and what to give instead."""
    from forensics.instruments.recognise import recognise  # a cycle: recognise reads the registry
    from parsers.ncu import NO_HEADER, read_csv as read  # heavy: pandas, only when a file is read

    try:
        return read(path)
    except BadInput as e:
        if e.message != NO_HEADER:
            raise
        seen = recognise(path)
        if not seen.known:
            raise
        raise BadInput(e.path, f"not an ncu --csv export: {seen.why}") from None


NCU = Instrument(
    "ncu", LAUNCHES, ("*.ncu-rep",), CUDA, "ncu", read_report, "Nsight Compute report",
    names=("kernel symbol (mangled, demangled)", "grid/block", "NVTX range (site occurrence)", "metrics"),
    content=report_magic, switch=Switch(order=30, own_pass=OwnPass(
        "ncu", NCU_GLOBS, "ncu (Nsight Compute) not found on PATH, /usr/local/cuda*/bin or /opt/nvidia",
        ncu_argv, profiler_window=lambda mode: mode == "window")))
NCU_CSV = Instrument(
    "ncu_csv", LAUNCHES, ("*raw*.csv", "*details*.csv"), CUDA, "ncu", read_csv,
    "Nsight Compute CSV export (--page raw|details)",
    names=("kernel symbol (ncu's demangled text)", "grid/block (raw page)", "NVTX range"),
    line_form=re.compile(rb'^"ID","Process ID","Process Name"', re.M),
    line_why='CSV with the ncu header ("ID","Process ID","Process Name",...)')

INSTRUMENTS = (NCU, NCU_CSV)
