"""Which implementation ops below the dispatcher a CPU library serves: the CPU backend's kernel classifier.

On the CPU backend the torch.profiler plays CUPTI's part and an *implementation op* (the aten op
that calls into a library: ``aten::mkldnn_convolution``, ``aten::_slow_conv2d_forward``,
``aten::mm``) plays the kernel's. A library's verbose log can confirm only the ops that call that
library, as the cuBLASLt log confirms only cuBLAS GEMM kernels (:mod:`forensics.core.kernel_names`).
The tables follow PyTorch's CPU sources (aten/src/ATen/native): the thnn convolution
(``slow_conv2d``) and the CPU BLAS wrappers (``cpublas::gemm``, ``addmm_impl_cpu_``) call oneMKL
in the PyPI wheel; every ``mkldnn_*`` op calls oneDNN; ``mm``/``addmm``/``bmm``/``linear`` may
also go to oneDNN (bf16/fp16 and some shapes take ``mkldnn_matmul``), so they are oneDNN
candidates too. An op no library serves (a native kernel) is not an implementation op here.
"""
from __future__ import annotations

import json
import re
from typing import Any

from forensics.core.kernel_names import CONFLICTS, CONSISTENT, PRIMARY, UNCHECKED, FieldCheck
from forensics.core.ops import BLAS_VECTOR

#: The profiler's names of the matrix-vector and vector products (:data:`forensics.core.ops.BLAS_VECTOR`).
_BLAS_VECTOR_OPS = frozenset(f"aten::{p}" for p in BLAS_VECTOR)
#: The GEMMs of :data:`forensics.core.ops.GEMM` whose CPU kernel calls the BLAS itself, in-place
#: variants included (``main_grad.addmm_(dy.t(), x)`` runs one oneMKL SGEMM under ``aten::addmm_``,
#: no ``aten::addmm`` below it); not ``matmul`` (a composite: the profiler shows the ``mm``/``bmm``
#: under it) nor ``_scaled_mm``.
_BLAS_GEMM_OPS = frozenset(f"aten::{p}" for p in ("mm", "addmm", "addmm_", "bmm", "baddbmm", "baddbmm_", "addbmm",
                                                   "addbmm_"))
#: Ops whose CPU kernels call oneMKL (BLAS) in the PyPI wheel.
MKL_OPS = _BLAS_VECTOR_OPS | _BLAS_GEMM_OPS | frozenset({
    "aten::_slow_conv2d_forward", "aten::_slow_conv2d_backward",
    "aten::slow_conv3d_forward", "aten::_slow_conv3d_forward", "aten::slow_conv_transpose2d",
    "aten::slow_conv_transpose3d", "aten::slow_conv_dilated2d", "aten::slow_conv_dilated3d",
})
#: GEMM-like ops that oneDNN may serve as well (mkldnn_matmul).
ONEDNN_GEMM_OPS = _BLAS_GEMM_OPS | {"aten::linear", "aten::_addmm_activation"}
ONEDNN_PREFIXES = ("aten::mkldnn_", "aten::_mkldnn_", "mkldnn::", "onednn::")

#: Library names as a user reads them.
LIBRARY = {"mkl": "oneMKL", "onednn": "oneDNN"}


def _name(op: str | None) -> str:
    return op.strip() if isinstance(op, str) else ""


def serves_mkl(op: str | None) -> bool:
    """An op whose CPU kernel calls oneMKL."""
    return _name(op) in MKL_OPS


def serves_onednn(op: str | None) -> bool:
    """An op whose CPU kernel calls oneDNN (``mkldnn_*``), or a GEMM op oneDNN may serve."""
    name = _name(op)
    return name.startswith(ONEDNN_PREFIXES) or name in ONEDNN_GEMM_OPS


def is_implementation_op(op: str | None) -> bool:
    """An op below the dispatcher that some CPU library serves: what the profiler reader keeps."""
    return serves_mkl(op) or serves_onednn(op)


def mkl_launch_role(op: str | None) -> str | None:
    """PRIMARY when the oneMKL log can confirm ``op`` (it calls oneMKL), else None."""
    return PRIMARY if serves_mkl(op) else None


def onednn_launch_role(op: str | None) -> str | None:
    """PRIMARY when the oneDNN log can confirm ``op`` (it calls oneDNN), else None."""
    return PRIMARY if serves_onednn(op) else None


# --------------------------------------------------------------------------- identity: op vs library call
#: What an implementation op computes, by name.
GEMM_OPS = _BLAS_VECTOR_OPS | ONEDNN_GEMM_OPS


def op_kind(op: str | None) -> str | None:
    """``gemm`` (BLAS-like ops), ``convolution`` (thnn and oneDNN convolutions), None when unknown."""
    name = _name(op)
    if name in GEMM_OPS or name.startswith(("aten::mkldnn_linear", "aten::mkldnn_matmul")):
        return "gemm"
    if "conv" in name:
        return "convolution"
    return None


def call_kind(call: dict, instrument: str) -> str | None:
    """What one library call computes: oneMKL ``SGEMM``/``SGEMV`` -> gemm; oneDNN ``convolution``/
    ``deconvolution`` -> convolution, ``matmul``/``inner_product`` -> gemm; a reorder -> None."""
    if instrument == "mkl":
        fam = str(call.get("family") or "")
        return "gemm" if fam in ("gemm", "gemv", "dot") or "GEMM" in str(call.get("routine") or "").upper() else None
    prim = str(call.get("primitive") or "")
    if prim in ("convolution", "deconvolution"):
        return "convolution"
    if prim in ("matmul", "inner_product"):
        return "gemm"
    return None


#: Which op kind may issue which library call kind: a thnn convolution is im2col + SGEMM.
_MAY_ISSUE = {("gemm", "gemm"), ("convolution", "convolution"), ("convolution", "gemm")}


#: The profiler's ``Input type`` words -> canonical precision (forensics.core.kernel_names.PRECISION words).
_PROFILER_TYPE = {"float": "fp32", "double": "fp64", "c10::Half": "fp16", "c10::BFloat16": "bf16",
                  "c10::complex<float>": "complex64", "c10::complex<double>": "complex128"}
_MKL_LETTER = {"S": "fp32", "D": "fp64", "C": "complex64", "Z": "complex128", "H": "fp16", "B": "bf16"}


def _letter(shape: list, strides: list) -> str:
    """cuBLAS/BLAS op letter of a PyTorch matrix operand (docs/gemm-naming.md): row-major or a copy
    N, column-major (a transposed view) T; size-1 dimensions count as row-major."""
    rows, cols = shape[-2], shape[-1]
    s_row, s_col = strides[-2], strides[-1]
    if s_col == 1 or cols == 1:
        return "N"
    if s_row == 1 and s_col >= max(rows, 1):
        return "T"
    return "N"  # neither: PyTorch copies it row-major first


def _dims(launch: dict, key: str = "input_dims") -> list | None:
    v = launch.get(key)
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except ValueError:
            return None
    return v if isinstance(v, list) else None


def _size(v: Any) -> int | None:
    """A GEMM dimension a library log gave (an int, or its text), else None: a log line missing
    one of m, n, k (a damaged line) leaves the problem size unchecked, never an internal error."""
    if v is None or isinstance(v, bool):
        return None
    try:
        return int(v) if str(v) not in ("nan", "<NA>") else None
    except (TypeError, ValueError, OverflowError):
        return None


def check_op(launch: dict, calls: list[dict], instrument: str) -> list[FieldCheck]:
    """Compare an implementation op the profiler saw with the library calls the log matched to it.

    * **operation**: the op's kind (gemm, convolution) vs each call's (``SGEMM`` gemm, oneDNN
      ``convolution``); a thnn convolution may issue GEMMs (im2col + SGEMM), a GEMM op never a
      convolution, a oneDNN convolution op never a oneDNN matmul.
    * **problem size**: ``aten::mm``/``aten::addmm``/``aten::addmm_`` input shapes ``[M, K] x [K, N]`` vs the
      oneMKL call's ``m, n, k``: PyTorch calls column-major BLAS for a row-major product, so
      ``m = N, n = M, k = K`` (docs/gemm-naming.md).
    * **layout**: for ``aten::mm``/``aten::addmm``/``aten::addmm_``, the op letters the input strides give
      (letter of the second operand, then of the first: row-major N, a transposed view T) vs the
      oneMKL call's transa, transb.
    * **precision**: the profiler's ``Input type`` (``float``: fp32) vs the oneMKL routine's letter
      (``SGEMM``: fp32) or oneDNN's ``src:f32``.
    """
    op = launch.get("kernel")
    kind = op_kind(op)
    lib = LIBRARY.get(instrument, instrument)
    out: list[FieldCheck] = []
    kinds = [(c, call_kind(c, instrument)) for c in calls]
    kinds = [(c, k) for c, k in kinds if k is not None]
    if kind and kinds:
        for c, k in kinds:
            label = str(c.get("routine") or c.get("primitive") or k)
            ok = (kind, k) in _MAY_ISSUE and not (instrument == "onednn" and kind == "convolution" and k == "gemm"
                                                   and _name(op).startswith(ONEDNN_PREFIXES))
            out.append(FieldCheck("operation", CONSISTENT if ok else CONFLICTS, f"{op} ({kind})", f"{lib} {label} ({k})",
                                  "" if ok else f"a {kind} op does not issue {lib} {k} calls"))
    else:
        out.append(FieldCheck("operation", UNCHECKED, op, None,
                              "the op's kind is not known" if not kind else f"{lib} logged no compute call for it"))
    dims = _dims(launch)
    name = _name(op)
    shaped = None
    if dims and name in ("aten::mm", "aten::addmm", "aten::addmm_"):
        mats = [d for d in dims if isinstance(d, list) and len(d) == 2]
        if len(mats) >= 2 and mats[-2][1] == mats[-1][0]:
            (mm, kk), (_, nn) = mats[-2], mats[-1]
            shaped = (nn, mm, kk)
    gemms = [c for c, k in kinds if k == "gemm" and all(_size(c.get(d)) is not None for d in "mnk")]
    if shaped and instrument == "mkl" and gemms:
        for c in gemms:
            log = (_size(c["m"]), _size(c["n"]), _size(c["k"]))
            out.append(FieldCheck("problem size", CONSISTENT if log == shaped else CONFLICTS,
                                  f"{op} {dims} -> m,n,k={shaped[0]},{shaped[1]},{shaped[2]}",
                                  f"{lib} {c.get('routine')} m,n,k={log[0]},{log[1]},{log[2]}"))
    else:
        out.append(FieldCheck("problem size", UNCHECKED, None, None,
                              "compared for aten::mm/addmm/addmm_ against oneMKL GEMMs only"))
    strides = _dims(launch, "input_strides")
    if shaped and instrument == "mkl" and gemms and strides:
        mats = [(d, st) for d, st in zip(dims, strides) if isinstance(d, list) and len(d) == 2
                and isinstance(st, list) and len(st) == 2]
        if len(mats) >= 2:
            (d1, s1), (d2, s2) = mats[-2], mats[-1]
            want = _letter(d2, s2) + _letter(d1, s1)  # cuBLAS/BLAS A is PyTorch's second operand
            flip = {"N": "T", "T": "N"}
            transposed = flip[want[1]] + flip[want[0]]  # Cᵀ = Bᵀ·Aᵀ: a column-major output (out=) is issued so
            for c in gemms:
                log = f"{c.get('transa')}{c.get('transb')}"
                out.append(FieldCheck("layout", CONSISTENT if log in (want, transposed) else CONFLICTS,
                                      f"{op} strides {s1}, {s2} -> {want}", f"{lib} {c.get('routine')} {log}",
                                      "as the transposed problem" if log != want and log == transposed else ""))
    else:
        out.append(FieldCheck("layout", UNCHECKED, None, None,
                              "compared for aten::mm/addmm/addmm_ (input strides) against oneMKL GEMMs only"))
    types = _dims(launch, "input_types")
    op_prec = sorted({_PROFILER_TYPE[t] for t in (types or []) if isinstance(t, str) and t in _PROFILER_TYPE})
    log_prec = sorted({p for c, _ in kinds if (p := _call_precision(c, instrument))})
    if len(op_prec) == 1 and log_prec:
        ok = log_prec == op_prec
        out.append(FieldCheck("precision", CONSISTENT if ok else CONFLICTS, f"{op} {op_prec[0]}",
                              f"{lib} {'/'.join(log_prec)}"))
    else:
        out.append(FieldCheck("precision", UNCHECKED, None, None,
                              "the profiler trace records no input types (record_shapes off)" if not types else
                              "the op's inputs have several or unknown types" if len(op_prec) != 1 else
                              f"the {lib} calls state no type"))
    return out


def _call_precision(call: dict, instrument: str) -> str | None:
    """A library call's data precision: oneMKL's routine letter (``SGEMM``: fp32), oneDNN's ``src:f32``."""
    if instrument == "mkl":
        routine = str(call.get("routine") or "")
        return _MKL_LETTER.get(routine[:1]) if routine[1:].upper().startswith(("GEMM", "GEMV", "DOT")) else None
    m = re.search(r"src:(\w+)", str(call.get("dtypes") or ""))
    return {"f32": "fp32", "f64": "fp64", "bf16": "bf16", "f16": "fp16", "s8": "int8", "u8": "uint8"}.get(m.group(1)) \
        if m else None
