"""torch.profiler on the CPU backend, in CUPTI's part: the CPU probe records the implementation
ops below the dispatcher inside each site occurrence (``record_function``), one row per op
execution. docs/cpu-backend.md."""
from __future__ import annotations

from typing import Any

from forensics.instruments.base import CPU, LAUNCHES, Family, Instrument, Switch

FAMILY = Family("torch_profiler", "torch.profiler (CPU ops)", "profiler", CPU,
                "no torch.profiler CPU trace (torchprof.<pid>.json.gz): no implementation op per site occurrence")


def read_ops(path: Any) -> Any:
    from parsers.torch_profiler_cpu import read_ops as read  # heavy: pandas, only when a file is read

    return read(path)


TORCH_PROFILER = Instrument(
    "torch_profiler", LAUNCHES, ("torchprof*.json*",), CPU, "torch_profiler", read_ops,
    "torch.profiler CPU trace (record_function per site occurrence)",
    names=("implementation op below the dispatcher", "input shapes", "thread", "site occurrence (range)"),
    unit="implementation-op execution(s)", switch=Switch(order=10, probe="cpu"))

INSTRUMENTS = (TORCH_PROFILER,)
