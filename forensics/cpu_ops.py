"""Which implementation ops below the dispatcher a CPU library serves: the CPU backend's kernel classifier.

On the CPU backend the torch.profiler plays CUPTI's part and an *implementation op* (the aten op
that calls into a library: ``aten::mkldnn_convolution``, ``aten::_slow_conv2d_forward``,
``aten::mm``) plays the kernel's. A library's verbose log can confirm only the ops that call that
library, as the cuBLASLt log confirms only cuBLAS GEMM kernels (:mod:`forensics.kernel_names`).
The tables follow PyTorch's CPU sources (aten/src/ATen/native): the thnn convolution
(``slow_conv2d``) and the CPU BLAS wrappers (``cpublas::gemm``, ``addmm_impl_cpu_``) call oneMKL
in the PyPI wheel; every ``mkldnn_*`` op calls oneDNN; ``mm``/``addmm``/``bmm``/``linear`` may
also go to oneDNN (bf16/fp16 and some shapes take ``mkldnn_matmul``), so they are oneDNN
candidates too. An op no library serves (a native kernel) is not an implementation op here.
"""
from __future__ import annotations

from forensics.kernel_names import PRIMARY

#: Ops whose CPU kernels call oneMKL (BLAS) in the PyPI wheel.
MKL_OPS = frozenset({
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "aten::addmv", "aten::mv",
    "aten::dot", "aten::vdot", "aten::addr", "aten::_slow_conv2d_forward", "aten::_slow_conv2d_backward",
    "aten::slow_conv3d_forward", "aten::_slow_conv3d_forward", "aten::slow_conv_transpose2d",
    "aten::slow_conv_transpose3d", "aten::slow_conv_dilated2d", "aten::slow_conv_dilated3d",
})
#: GEMM-like ops that oneDNN may serve as well (mkldnn_matmul).
ONEDNN_GEMM_OPS = frozenset({"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm",
                             "aten::linear", "aten::_addmm_activation"})
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
