"""rocprofv3 (ROCprofiler-SDK) on AMD GPUs: the kernel dispatch trace, a launch counter, CUPTI's
counterpart (docs/amd.md). It wraps every arm's command (``rocprofv3 --kernel-trace
--marker-trace --hip-runtime-trace --output-format csv -d ARM -o %pid% -- CMD``), as CUPTI's probe
runs in every arm, so a launch and the hipBLASLt call that made it come from one process; the
older rocprof's ``results.csv`` is read too (``parsers.rocprofv3``).

Family ``rocprofiler``: rocprofv3 and PyTorch's profiler on ROCm both take their launches from AMD's
runtime tracing (roctracer / ROCprofiler-SDK, as CUPTI, Kineto and nsys share CUPTI), so a
Kineto trace of a ROCm run is this family's member (``kineto_rocm``, recognised by the trace's own
ROCm signals wherever they stand: parsers.kineto_vendor) and never confirms rocprofv3. The ROCTx marker trace and the HIP API trace
beside a kernel trace are context: read with it, they give each launch its launching call's host
time and its ``SITE#N`` range (the NVTX counterpart), never counted.
"""
from __future__ import annotations

import glob
import re
from pathlib import Path
from typing import Any

from forensics.instruments.base import CONTEXT, LAUNCHES, ROCM, Family, Head, Instrument, OwnPass, Switch
from parsers import kineto_vendor  # light: no pandas

FAMILY = Family("rocprofiler", "ROCprofiler family (rocprofv3/Kineto on ROCm)", "ROCprofiler family", ROCM,
                "no rocprofv3 kernel trace (rocprofv3 --kernel-trace): no launch counted from AMD's runtime tracing")

ROCPROFV3_GLOBS = ("/opt/rocm/bin/rocprofv3", "/opt/rocm-*/bin/rocprofv3")

#: Sibling files rocprofv3 writes beside ``<prefix>kernel_trace.csv`` in one run.
MARKER_SUFFIX = "marker_api_trace.csv"
API_SUFFIXES = ("hip_api_trace.csv", "hip_runtime_api_trace.csv", "hip_runtime_trace.csv")


def rocprofv3_argv(tool: str, report: Path, command: list[str], **_: Any) -> list[str]:
    """Kernel dispatches, ROCTx ranges (the site probe's occurrence ranges) and the HIP runtime calls
    (their start is a launch's host time, what a range is matched against), as CSV (ROCm 7 writes
    its rocpd database otherwise), one ``<pid>_*.csv`` set per process in the arm's folder. The
    whole run is traced (no profiler start/stop window): the ``SITE#N`` ranges select the window."""
    return [tool, "--kernel-trace", "--marker-trace", "--hip-runtime-trace", "--output-format", "csv",
            "-d", str(report.parent), "-o", "%pid%", "--"] + list(command)


def rocm_status() -> tuple[bool, str]:
    """An AMD GPU is visible when the ROCm kernel driver's nodes are: ``/dev/kfd`` and a render node
    under ``/dev/dri`` (what the HIP runtime opens); no ROCm library is loaded to ask."""
    if not Path("/dev/kfd").exists():
        return False, "no ROCm device (no /dev/kfd: the amdgpu kernel driver's compute node is absent)"
    if not glob.glob("/dev/dri/renderD*"):
        return False, "no ROCm device (/dev/kfd but no /dev/dri/renderD* render node)"
    return True, ""


def _sibling(path: Path, suffixes: tuple[str, ...]) -> Path | None:
    name = path.name
    if not name.endswith("kernel_trace.csv"):
        return None
    prefix = name[: -len("kernel_trace.csv")]
    for suffix in suffixes:
        p = path.with_name(prefix + suffix)
        if p.is_file():
            return p
    return None


def read_attributed(path: Any) -> Any:
    """Launches of a kernel trace; with the same run's marker and HIP API traces beside it, each
    launch's ``launch_ns`` and ``site_label`` (the innermost ``SITE#N`` ROCTx range around its
    launching call, as nsys attributes NVTX ranges); without them, no label (the window is judged)
    and ``attrs["problems"]`` says which file was missing."""
    from parsers import rocprofv3  # heavy: pandas, only when a file is read
    from parsers.nsys import attribute  # the NVTX range attribution, reused for ROCTx ranges

    p = Path(path)
    df = rocprofv3.read_kernel_trace(p)
    marker, api = _sibling(p, (MARKER_SUFFIX,)), _sibling(p, API_SUFFIXES)
    if marker is None:
        return df
    problems = list(df.attrs.get("problems") or [])
    if api is None:
        df.attrs["problems"] = problems + [
            f"a ROCTx marker trace ({marker.name}) but no HIP API trace beside it: launches have no host time, "
            "no site range is matched (the window is judged)"]
        return df
    attrs = dict(df.attrs)
    ranges = rocprofv3.read_marker_trace(marker)
    # the CSV does not tell push/pop from start/end: matched as start/end ranges (same process, any thread)
    ranges["kind"] = ranges["kind"].fillna("startend")
    timed = rocprofv3.with_launch_times(df, rocprofv3.read_api_trace(api))
    if "tid" not in timed.columns and "thread_id" in timed.columns:
        timed["tid"] = timed["thread_id"]
    out = attribute(timed, ranges)
    out.attrs = {**attrs, "problems": list(timed.attrs.get("problems") or problems)}
    return out


def read_kineto(path: Any) -> Any:
    from parsers.kineto import read_kernels as read  # heavy: pandas, only when a file is read

    return read(path)


def kineto_on_rocm(head: Head) -> str | None:
    """A PyTorch profiler trace of a ROCm run: Chrome trace JSON whose own signals say ROCm
    (parsers.kineto_vendor: a roctracer/HIP version key, AMD devices, HIP runtime events), in its
    first bytes or, when those say neither vendor, anywhere in the file (a re-saved trace may hold
    ``deviceProperties`` and the version keys after its events)."""
    text = head.data.lstrip()
    if head.tables is not None or not text.startswith(b"{") or b'"traceEvents"' not in text:
        return None
    vendor, seen = kineto_vendor.signals(text)
    if vendor is None and head.path is not None:
        vendor, seen = kineto_vendor.scan(head.path)
    if vendor != kineto_vendor.ROCM:
        return None
    gz = " (gzip)" if head.gz else ""
    return f"Chrome trace JSON{gz} with {seen}: a PyTorch profiler (Kineto) trace of a ROCm run"


ROCPROFV3 = Instrument(
    "rocprofv3", LAUNCHES, ("*kernel_trace.csv", "results.csv"), ROCM, "rocprofiler", read_attributed,
    "rocprofv3 kernel trace (or rocprof's results.csv)",
    names=("kernel symbol (as the code object names it)", "workgroup and grid (work-items; grid in workgroups)",
           "queue", "stream", "agent", "ROCTx range (site occurrence, with the marker and HIP API traces)"),
    # the header rocprofv3 writes (any version: Kind ... Kernel_Name), rocprof v1's results.csv, and a
    # per-kernel summary (the reader refuses it with a line naming the file to read)
    line_form=re.compile(rb'^(?:"?Guid"?,)?"?Kind"?,"?Agent_Id"?,[^\n]*"?Kernel_Name"?'
                         rb'|^"?Index"?,"?KernelName"?,"?gpu-id"?|^"?Name"?,"?Calls"?,"?TotalDurationNs"?', re.M | re.I),
    line_why="CSV with rocprofv3's kernel-trace header (Kind, Agent_Id, ..., Kernel_Name) or rocprof's results.csv",
    switch=Switch(order=50, own_pass=OwnPass(
        "rocprofv3", ROCPROFV3_GLOBS, "rocprofv3 (ROCprofiler-SDK) not found on PATH or /opt/rocm*/bin",
        rocprofv3_argv, profiler_window=lambda mode: False, device_status=lambda: rocm_status(), wraps_arms=True)))
KINETO_ROCM = Instrument(
    "kineto_rocm", LAUNCHES, (), ROCM, "rocprofiler", read_kineto, "PyTorch profiler (Kineto) trace on ROCm",
    names=("kernel symbol (demangled)", "stream", "launching op (external id)"), content=kineto_on_rocm)
#: Read with the kernel trace beside them (read_attributed), never counted.
MARKER = Instrument(
    "rocprofv3_marker", CONTEXT, ("*marker_api_trace.csv",), label="rocprofv3 ROCTx marker trace",
    line_form=re.compile(rb'^"?Domain"?,"?Function"?,[^\n]*\n"?MARKER_', re.I),
    line_why="CSV with rocprofv3's API-trace header and MARKER_* rows (ROCTx ranges)")
API = Instrument(
    "rocprofv3_api", CONTEXT, ("*hip_api_trace.csv", "*hip_runtime_api_trace.csv", "*hip_runtime_trace.csv"),
    label="rocprofv3 HIP API trace",
    line_form=re.compile(rb'^"?Domain"?,"?Function"?,[^\n]*\n"?(?:HIP|HSA)_', re.I),
    line_why="CSV with rocprofv3's API-trace header and HIP_*/HSA_* rows (runtime calls)")

INSTRUMENTS = (ROCPROFV3, KINETO_ROCM, MARKER, API)
