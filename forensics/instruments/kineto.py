"""The PyTorch profiler's (Kineto) Chrome trace of a CUDA run: CUPTI family, read only (a capture
of ours uses the CUPTI probe instead)."""
from __future__ import annotations

from typing import Any

from forensics.instruments.base import CUDA, LAUNCHES, Instrument


def read_kernels(path: Any) -> Any:
    from parsers.kineto import read_kernels as read  # heavy: pandas, only when a file is read

    return read(path)


KINETO = Instrument(
    "kineto", LAUNCHES, ("*kineto*.json*", "*.pt.trace.json*", "*trace*.json.gz"), CUDA, "cupti", read_kernels,
    "PyTorch profiler (Kineto) trace",
    names=("kernel symbol (demangled)", "grid/block", "stream", "launching op (external id)"))

INSTRUMENTS = (KINETO,)
