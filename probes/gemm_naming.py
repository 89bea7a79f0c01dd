"""Name an aten GEMM call in Transformer Engine's convention: ``gemm:<layout>:acc<a>:grad<g>``.

Pure functions over the call's arguments (tensors are only asked for shape, strides, dtype and
data pointer). docs/gemm-naming.md derives the rules; in short:

* **Operands.** PyTorch computes row-major ``C[m,n] = A[m,k] @ B[k,n]``. cuBLAS is column-major,
  and a row-major ``C`` *is* the column-major ``C^T``, so PyTorch issues ``C^T = B^T A^T``: cuBLAS's
  ``A`` is PyTorch's **second** operand and cuBLAS's ``B`` its **first**. The layout string is
  ``op(cuBLAS A) + op(cuBLAS B)`` = ``letter(mat2) + letter(mat1)``.
* **Letters.** A row-major (C-contiguous) PyTorch operand, read column-major, already is the
  transpose cuBLAS needs: ``N``. A column-major operand (a transposed view, ``w.t()``) is ``T``.
  An operand that is neither is copied to row-major by PyTorch first: ``N``.
  (When the *output* is column-major, PyTorch does not swap: cuBLAS A = mat1, B = mat2, and the
  letters flip: row-major -> ``T``, column-major -> ``N``.)
* **acc1** when the GEMM accumulates into the tensor it writes (``beta != 0`` and the output is
  the ``self``/``input`` operand): ``addmm_``/``baddbmm_``/``addbmm_``, ``.out`` variants with
  ``out`` aliasing ``self``. A functional ``addmm(bias, ...)`` writes a fresh tensor: ``acc0``.
* **grad1** inside the backward pass: ``torch._C._current_graph_task_id() != -1`` (verified on
  torch 2.13: -1 outside backward, the graph task id inside, on the engine's thread too), except a
  forward GEMM that activation checkpointing recomputes there (:func:`backward_gemm`): grad0, as
  Transformer Engine names its own recomputed fprop.

Checked by hand against TE: fprop ``y = x W^T`` -> TN, dgrad ``dx = dy W`` -> NN, wgrad
``dW = dy^T x`` -> NT.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

from forensics.core.ops import GEMM as GEMM_OPS  # the aten packets this module names (.default, .out, in-place)
from forensics.core.ops import GEMM_WITH_SELF as _WITH_SELF

_INPLACE = frozenset({"addmm_", "baddbmm_", "addbmm_"})


@dataclass
class GemmCall:
    """What the probe records about one GEMM call (the ``meta`` of a site record)."""

    site: str
    op: str
    layout: str
    acc: int
    grad: int
    m: int | None
    n: int | None
    k: int | None
    batch: int
    transa: str
    transb: str
    alpha: float
    beta: float
    operands: list[dict[str, Any]] = field(default_factory=list)  # cuBLAS order: A, B (+ C)
    out_dtype: str | None = None

    def meta(self) -> dict[str, Any]:
        return {
            "layout": self.layout, "transa": self.transa, "transb": self.transb, "accumulate": bool(self.acc),
            "grad": bool(self.grad), "m": self.m, "n": self.n, "k": self.k, "batch": self.batch,
            "alpha": self.alpha, "beta": self.beta, "out_dtype": self.out_dtype, "operands": self.operands,
        }


def op_base(func_name: str) -> tuple[str, str]:
    """``"aten.addmm_.default"`` -> ("addmm_", "default"); ``"aten::mm.out"`` -> ("mm", "out")."""
    name = func_name.replace("aten::", "aten.")
    parts = name.split(".")
    if parts and parts[0] == "aten":
        parts = parts[1:]
    base = parts[0] if parts else name
    overload = parts[1] if len(parts) > 1 else "default"
    return base, overload


def is_gemm(func_name: str) -> bool:
    return op_base(func_name)[0] in GEMM_OPS


def matrix_order(shape: tuple[int, ...] | list[int], strides: tuple[int, ...] | list[int]) -> str:
    """``"row"``, ``"col"`` or ``"copy"`` for the last two dims, as PyTorch's cuBLAS path decides.

    Mirrors ``prepare_matrix_for_cublas``: unit stride on the last dim with a leading stride that
    covers a row -> row-major; unit stride on the second-to-last dim -> column-major; otherwise
    PyTorch makes a row-major copy. Size-1 dims are ambiguous; row-major wins, as in PyTorch.
    """
    rows, cols = int(shape[-2]), int(shape[-1])
    s_row, s_col = int(strides[-2]), int(strides[-1])
    if (s_col == 1 or cols == 1) and s_row >= max(1, cols):
        return "row"
    if (s_row == 1 or rows == 1) and s_col >= max(1, rows):
        return "col"
    return "copy"


def _letter(order: str, output_row_major: bool) -> str:
    row_like = order in ("row", "copy")
    if output_row_major:
        return "N" if row_like else "T"
    return "T" if row_like else "N"


def _ld(shape: list[int], strides: list[int], order: str) -> int:
    if order == "row":
        return max(1, int(strides[-2]))
    if order == "col":
        return max(1, int(strides[-1]))
    return max(1, int(shape[-1]))


def _is_tensor(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "stride") and hasattr(x, "dtype")


def _desc(t: Any) -> dict[str, Any]:
    return {"shape": list(t.shape), "strides": list(t.stride()), "dtype": str(t.dtype).replace("torch.", "")}


def _same_tensor(a: Any, b: Any) -> bool:
    try:
        return (a is b) or (a.data_ptr() == b.data_ptr() and tuple(a.shape) == tuple(b.shape)
                            and tuple(a.stride()) == tuple(b.stride()))
    except Exception:  # noqa: BLE001
        return False


def _scalar(kwargs: dict[str, Any], args: tuple, name: str, pos: int, default: float) -> float:
    v = kwargs.get(name, args[pos] if len(args) > pos else default)
    try:
        return float(v)
    except (TypeError, ValueError):
        return default


def name_gemm(func_name: str, args: tuple, kwargs: dict[str, Any] | None, in_backward: bool,
              result: Any = None, describe: bool = True) -> GemmCall | None:
    """Name one aten GEMM call; None when it is not a GEMM (or not a 2-D/3-D one we can name).

    ``result`` (the output tensor, when known) decides the output orientation; a fresh output is
    row-major. ``describe=False`` leaves ``operands`` and ``out_dtype`` out (the op tracer records
    the site and the problem size only, on every GEMM).
    """
    kwargs = kwargs or {}
    base, overload = op_base(func_name)
    if base not in GEMM_OPS:
        return None
    if base in _WITH_SELF:
        self_t = kwargs.get("self", kwargs.get("input", args[0] if args else None))
        mat1 = kwargs.get("mat1", kwargs.get("batch1", args[1] if len(args) > 1 else None))
        mat2 = kwargs.get("mat2", kwargs.get("batch2", args[2] if len(args) > 2 else None))
        beta = _scalar(kwargs, args, "beta", 3, 1.0)
        alpha = _scalar(kwargs, args, "alpha", 4, 1.0)
    else:
        self_t = None
        mat1 = kwargs.get("self", kwargs.get("input", args[0] if args else None))
        mat2 = kwargs.get("mat2", kwargs.get("other", args[1] if len(args) > 1 else None))
        alpha, beta = 1.0, 0.0
    if not (_is_tensor(mat1) and _is_tensor(mat2)) or mat1.dim() < 2 or mat2.dim() < 2:
        return None
    out = kwargs.get("out")
    if base in _INPLACE:
        out = self_t
    accumulate = False
    if self_t is not None and beta != 0.0 and _is_tensor(self_t) and out is not None and _is_tensor(out):
        accumulate = _same_tensor(self_t, out)
    target = out if _is_tensor(out) else (result if _is_tensor(result) else None)
    out_row = True
    if target is not None and target.dim() >= 2:
        out_row = matrix_order(target.shape, target.stride()) != "col"
    o1 = matrix_order(mat1.shape, mat1.stride())  # any sequence: no list copies on the tracer's path
    o2 = matrix_order(mat2.shape, mat2.stride())
    l1, l2 = _letter(o1, out_row), _letter(o2, out_row)
    m_pt, k_pt, n_pt = int(mat1.shape[-2]), int(mat1.shape[-1]), int(mat2.shape[-1])
    batch = int(mat1.shape[0]) if mat1.dim() == 3 else 1
    if out_row:  # C^T = B^T A^T: cuBLAS A = mat2, B = mat1; m, n are PyTorch's n, m
        layout, m, n = l2 + l1, n_pt, m_pt
    else:
        layout, m, n = l1 + l2, m_pt, n_pt
    acc, grad = int(accumulate), int(bool(in_backward))
    call = GemmCall(site=f"gemm:{layout}:acc{acc}:grad{grad}", op=f"aten.{base}.{overload}", layout=layout,
                    acc=acc, grad=grad, m=m, n=n, k=k_pt, batch=batch, transa=layout[0], transb=layout[1],
                    alpha=alpha, beta=beta if self_t is not None else 0.0)
    if not describe:
        return call
    d1 = dict(_desc(mat1), role="mat1", order=o1, ld=_ld(list(mat1.shape), list(mat1.stride()), o1))
    d2 = dict(_desc(mat2), role="mat2", order=o2, ld=_ld(list(mat2.shape), list(mat2.stride()), o2))
    if out_row:
        call.operands = [dict(d2, cublas="A", trans=l2), dict(d1, cublas="B", trans=l1)]
    else:
        call.operands = [dict(d1, cublas="A", trans=l1), dict(d2, cublas="B", trans=l2)]
    if _is_tensor(self_t):
        call.operands.append(dict(_desc(self_t), role="self", cublas="C"))
    if base == "_scaled_mm":
        od = kwargs.get("out_dtype", args[6] if len(args) > 6 else None)
        call.out_dtype = str(od).replace("torch.", "") if od is not None else None
    if call.out_dtype is None and target is not None:
        call.out_dtype = str(target.dtype).replace("torch.", "")
    return call


#: where activation checkpointing recomputes a forward (``torch.utils.checkpoint``: the unpack hook of
#: ``use_reentrant=False``, ``CheckpointFunction.backward`` of ``use_reentrant=True``)
_CHECKPOINT_FILE = os.path.join("torch", "utils", "checkpoint.py")
_MAX_FRAMES = 256


def backward_gemm(in_backward: bool) -> bool:
    """Whether a GEMM running now is a backward GEMM (grad1): inside the backward pass, and not a
    forward recomputed there by activation checkpointing. A recomputed forward runs inside backward
    with grad mode on, called from ``torch/utils/checkpoint.py``; a backward node's own GEMMs run
    with grad mode off (on only under ``create_graph``, and then not from the checkpoint module).
    Before this rule a checkpointed program's recomputed fprop GEMMs were named grad1."""
    if not in_backward:
        return False
    import torch  # noqa: PLC0415

    if not torch.is_grad_enabled():
        return True
    try:
        frame = sys._getframe(1)
        for _ in range(_MAX_FRAMES):
            if frame is None:
                return True
            if frame.f_code.co_filename.endswith(_CHECKPOINT_FILE):
                return False
            frame = frame.f_back
    except Exception:  # noqa: BLE001 - no frames: the engine's word
        pass
    return True


def in_backward() -> bool:
    """True inside an autograd backward pass (any thread the engine runs it on)."""
    import torch  # noqa: PLC0415

    return torch._C._current_graph_task_id() != -1


def te_site(layout: str, accumulate: bool, grad: bool) -> str:
    """Site name from Transformer Engine's own GEMM arguments (``layout="TN"``, ``accumulate``, ``grad``)."""
    layout = str(layout).upper()
    if layout not in ("NN", "NT", "TN", "TT"):
        raise ValueError(f"TE layout {layout!r} is not one of NN, NT, TN, TT")
    return f"gemm:{layout}:acc{int(bool(accumulate))}:grad{int(bool(grad))}"
