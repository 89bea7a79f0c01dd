"""Which GPU vendor's runtime a Kineto (PyTorch profiler) trace recorded: CUDA (CUPTI) or ROCm
(roctracer / ROCprofiler-SDK). Light: no pandas, so recognition can ask it.

PyTorch on ROCm writes the same Chrome trace as on CUDA (categories ``kernel``, ``cuda_runtime``...),
so the vendor is told by the trace's own signals, wherever in the file they are:

* top-level keys Kineto adds on ROCm: ``roctracer_version``, ``hip_runtime_version``,
  ``hip_driver_version`` (``rocprofiler-sdk_version`` with the newer tracer); on CUDA:
  ``cupti_version``, ``cuda_runtime_version``, ``cuda_driver_version``;
* ``deviceProperties`` whose device names are AMD's (``AMD Instinct MI300X``, ``AMD Radeon Graphics``);
* runtime events named after the HIP API (``hipLaunchKernel``, ``hipExtModuleLaunchKernel``,
  ``hipMemcpyWithStream``, ``hipGraphLaunch``) vs CUDA's (``cudaLaunchKernel``, ``cuLaunchKernel``).

PyTorch writes ``deviceProperties`` and the version keys before ``traceEvents``, but a trace
re-saved by another tool may hold them after it (AMD-AGI/TraceLens's MI300X traces:
``metadata``, ``traceEvents``, then ``deviceProperties``): :func:`scan` reads the whole file
(gzip decompressed as a stream, a bounded window kept) when the head says neither vendor.
"""
from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping
from os import PathLike
from typing import Any

ROCM, CUDA = "rocm", "cuda"

ROCM_KEYS = ("roctracer_version", "hip_runtime_version", "hip_driver_version", "rocprofiler-sdk_version")
CUDA_KEYS = ("cupti_version", "cuda_runtime_version", "cuda_driver_version")
#: HIP runtime calls that launch or copy (what a ROCm trace's ``cuda_runtime`` events are named).
HIP_CALL = re.compile(r"^hip(?:Ext)?(?:Module)?LaunchKernel$|^hipLaunchCooperativeKernel|^hipGraphLaunch$|^hipMemcpy\w*$|"
                      r"^hipMemset\w*$")
CUDA_CALL = re.compile(r"^cuda(?:LaunchKernel|LaunchKernelExC|GraphLaunch|Memcpy\w*|Memset\w*)(?:_v\d+)?$|^cuLaunchKernel\w*$")

_ROCM_KEY = re.compile(rb'"(' + b"|".join(re.escape(k.encode()) for k in ROCM_KEYS) + rb')"\s*:')
_CUDA_KEY = re.compile(rb'"(' + b"|".join(re.escape(k.encode()) for k in CUDA_KEYS) + rb')"\s*:')
_AMD_DEVICE = re.compile(rb'"deviceProperties"\s*:\s*\[\s*\{[^\]]*?"name"\s*:\s*"AMD ')
#: NVIDIA's device names as CUDA reports them ("NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-16GB", "GeForce ...");
#: a name of neither vendor says nothing.
_NVIDIA_NAME = r"(?:NVIDIA|Tesla|GeForce|Quadro|TITAN)\b"
_NVIDIA_DEVICE = re.compile(rb'"deviceProperties"\s*:\s*\[\s*\{[^\]]*?"name"\s*:\s*"' + _NVIDIA_NAME.encode())
_HIP_EVENT = re.compile(rb'"name"\s*:\s*"(hip(?:Ext)?(?:Module)?LaunchKernel|hipGraphLaunch|hipMemcpy\w*)"')
_CUDA_EVENT = re.compile(rb'"name"\s*:\s*"(cuda(?:LaunchKernel\w*|GraphLaunch|Memcpy\w*)|cuLaunchKernel\w*)"')

#: Bytes read (decompressed) per step of :func:`scan`, and kept from the step before so that a
#: signal cut by a step's border is still seen whole.
CHUNK = 1 << 20
OVERLAP = 4 << 10


def signals(data: bytes) -> tuple[str | None, str]:
    """(vendor, what was seen) from some bytes of a trace; (None, "") when they say neither."""
    m = _ROCM_KEY.search(data)
    if m:
        return ROCM, f"a {m.group(1).decode()} key"
    if _AMD_DEVICE.search(data):
        return ROCM, "an AMD device in deviceProperties"
    m = _HIP_EVENT.search(data)
    if m:
        return ROCM, f"HIP runtime events ({m.group(1).decode()})"
    m = _CUDA_KEY.search(data)
    if m:
        return CUDA, f"a {m.group(1).decode()} key"
    m = _CUDA_EVENT.search(data)
    if m:
        return CUDA, f"CUDA runtime events ({m.group(1).decode()})"
    if _NVIDIA_DEVICE.search(data):
        return CUDA, "an NVIDIA device in deviceProperties"
    return None, ""


def scan(path: str | PathLike[str]) -> tuple[str | None, str]:
    """:func:`signals` over the whole file, step by step (a gzip decompressed as a stream), stopping
    at the first step that says a vendor; memory stays under two steps whatever the file's size.
    A file that cannot be read or decompressed says neither (its reader says why)."""
    tail = b""
    try:
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
            f.seek(0)
            d = zlib.decompressobj(16 + zlib.MAX_WBITS) if gz else None
            while True:
                raw = f.read(CHUNK)
                if not raw:
                    break
                data = d.decompress(raw, CHUNK) if d is not None else raw
                while True:
                    window = tail + data
                    vendor, why = signals(window)
                    if vendor:
                        return vendor, why + " (beyond the first bytes)"
                    tail = window[-OVERLAP:]
                    if d is None or not d.unconsumed_tail:
                        break
                    data = d.decompress(d.unconsumed_tail, CHUNK)
                if d is not None and d.eof:
                    break
    except (OSError, zlib.error):
        return None, ""
    return None, ""


def of_trace(meta: Mapping[str, Any], runtime_names: Iterable[Any]) -> tuple[str | None, str]:
    """(vendor, what was seen) from a parsed trace: its top-level keys (``meta``: everything but
    ``traceEvents``, wherever it stood), its devices and its runtime events' names."""
    key = next((k for k in ROCM_KEYS if k in meta), None)
    if key:
        return ROCM, f"a {key} key"
    devices = meta.get("deviceProperties")
    names = [d.get("name") for d in devices if isinstance(d, dict)] if isinstance(devices, list) else []
    if any(isinstance(n, str) and n.startswith("AMD ") for n in names):
        return ROCM, "an AMD device in deviceProperties"
    runtime = [n for n in runtime_names if isinstance(n, str)]
    hip = next((n for n in runtime if HIP_CALL.match(n)), None)
    if hip:
        return ROCM, f"HIP runtime events ({hip})"
    key = next((k for k in CUDA_KEYS if k in meta), None)
    if key:
        return CUDA, f"a {key} key"
    cuda = next((n for n in runtime if CUDA_CALL.match(n)), None)
    if cuda:
        return CUDA, f"CUDA runtime events ({cuda})"
    if any(isinstance(n, str) and re.match(_NVIDIA_NAME, n) for n in names):
        return CUDA, "an NVIDIA device in deviceProperties"
    return None, ""
