"""What the AMD library logs share: their type spellings and their replayable bench lines.

hipBLASLt's ``[Trace]`` lines spell types as hipDataType names (``R_16BF``, ``R_32F``); its bench
lines (``HIPBLASLT_LOG_MASK=32``) and rocBLAS's logs as bench types (``bf16_r``, ``f32_r``).
:func:`canonical_type` maps both to one vocabulary (``bf16``, ``fp32``...), so a call read from a
trace line and the same call read from a bench line have one problem key.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from forensics.core.errors import BadInput

#: Bench / rocBLAS type spellings and rocBLAS's one-letter ``-r`` shorthand -> canonical.
_BENCH_TYPES = {
    "f16_r": "fp16", "h": "fp16", "f32_r": "fp32", "s": "fp32", "f64_r": "fp64", "d": "fp64", "bf16_r": "bf16",
    "f16_c": "complex32", "f32_c": "complex64", "c": "complex64", "f64_c": "complex128", "z": "complex128",
    "i8_r": "int8", "i32_r": "int32", "u8_r": "uint8", "u32_r": "uint32", "xf32_r": "xf32",
    "f8_r": "fp8_e4m3", "bf8_r": "fp8_e5m2", "f8_fnuz_r": "fp8_e4m3_fnuz", "bf8_fnuz_r": "fp8_e5m2_fnuz",
    "f32_bf16_r": "fp32", "f32_f16_r": "fp32",  # compute types: fp32 accumulation of bf16 / fp16 inputs
}
#: hipDataType / hipblasComputeType names (without the ``HIP_`` prefix) -> canonical.
_HIP_TYPES = {
    "R_16F": "fp16", "R_32F": "fp32", "R_64F": "fp64", "R_16BF": "bf16", "C_32F": "complex64", "C_64F": "complex128",
    "R_8I": "int8", "R_32I": "int32", "R_8U": "uint8", "R_8F_E4M3": "fp8_e4m3", "R_8F_E5M2": "fp8_e5m2",
    "R_8F_E4M3_FNUZ": "fp8_e4m3_fnuz", "R_8F_E5M2_FNUZ": "fp8_e5m2_fnuz",
    "COMPUTE_16F": "fp16", "COMPUTE_32F": "fp32", "COMPUTE_64F": "fp64", "COMPUTE_32I": "int32",
    "COMPUTE_32F_FAST_TF32": "xf32", "COMPUTE_32F_FAST_16F": "fp32", "COMPUTE_32F_FAST_16BF": "fp32",
}


def canonical_type(text: str | None) -> str | None:
    """``R_16BF`` / ``HIP_R_16BF`` / ``bf16_r`` -> ``bf16``; None for None; unknown text unchanged (lower case)."""
    if text is None:
        return None
    t = text.strip()
    key = re.sub(r"^(?:HIP_|HIPBLAS_)", "", t.upper())
    if key in _HIP_TYPES:
        return _HIP_TYPES[key]
    return _BENCH_TYPES.get(t.lower(), t.lower())


_SHORT_OPTION = re.compile(r"^-[A-Za-z]")


def parse_bench_args(text: str) -> tuple[dict[str, str | bool], list[str]]:
    """``-m 48 --transA N --any_stride`` -> ``({"m": "48", "transA": "N", "any_stride": True}, [])``.

    A token starting with ``--`` or with ``-`` and a letter is an option (``--alpha -1``: ``-1``
    is a value); an option without a value is a flag (True). The second item lists tokens that
    are no option's value (stray words), which the caller reports. A repeated option keeps its
    last value, as the bench clients' argument parsers do.
    """
    out: dict[str, str | bool] = {}
    stray: list[str] = []
    tokens = text.split()
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("--") or _SHORT_OPTION.match(tok):
            key = tok.lstrip("-")
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            if nxt is not None and not (nxt.startswith("--") or _SHORT_OPTION.match(nxt)):
                out[key] = nxt
                i += 2
                continue
            out[key] = True
        else:
            stray.append(tok)
        i += 1
    return out, stray


def op_letter(text: str | None) -> str | None:
    """``OP_T`` / ``HIPBLAS_OP_T`` / ``T`` / rocBLAS's enum ``112`` -> ``T`` (``111`` N, ``113`` C); None if unknown."""
    if text is None:
        return None
    t = str(text).strip().upper()
    t = {"111": "N", "112": "T", "113": "C"}.get(t, t)
    t = t.rsplit("_", 1)[-1]
    return t if t in ("N", "T", "C") else None


def fold_bench_options(path: str, lineno: int, opts: Mapping[str, Any], ints: Mapping[str, str],
                       strs: Mapping[str, str], row: dict[str, Any],
                       integer: Callable[[str, int, str, Any], int]) -> dict[str, Any]:
    """A bench line's options into ``row`` (hipblaslt-bench and rocblas-bench share the form): an
    option of ``ints`` as an integer (read by ``integer``, which raises BadInput), one of ``strs``
    as text (transposes as their letter, N/T/C); the rest returned, as the line printed them."""
    extra: dict[str, Any] = {}
    for key, value in opts.items():
        if key in ints:
            row[ints[key]] = integer(path, lineno, f"--{key}", value)
        elif key in strs:
            col = strs[key]
            if col in ("transa", "transb"):
                letter = op_letter(str(value))
                if letter is None:
                    raise BadInput(path, f"--{key} {value!r} is not N, T or C", line=lineno)
                value = letter
            row[col] = value
        else:
            extra[key] = value
    return extra
