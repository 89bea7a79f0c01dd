"""CUPTI activity records written by our CUPTI probe (cupti-python) in each arm: the head of the
CUPTI family (cupti, nsys, kineto: one source, never confirming each other)."""
from __future__ import annotations

from typing import Any

from forensics.instruments.base import CUDA, LAUNCHES, Family, Instrument, Switch

FAMILY = Family("cupti", "CUPTI family (cupti/kineto/nsys)", "CUPTI family", CUDA,
                "no CUPTI-family instrument (cupti.jsonl, kineto trace or nsys .sqlite)")


def read_kernels(path: Any) -> Any:
    from parsers.cupti_jsonl import read_kernels as read  # heavy: pandas, only when a file is read

    return read(path)


CUPTI = Instrument(
    "cupti", LAUNCHES, ("cupti*.jsonl",), CUDA, "cupti", read_kernels, "CUPTI activity records (cupti-python)",
    names=("kernel symbol (mangled)", "grid/block", "stream", "device", "external id (site occurrence)"),
    switch=Switch(order=10, probe="cupti"))

INSTRUMENTS = (CUPTI,)
