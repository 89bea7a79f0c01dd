"""Families of aten ops, stated once: which ops run a GEMM, which draw random numbers, which leave
memory uninitialised, ... Names are overload packets (``aten.<packet>[.<overload>]``, the
profiler's ``aten::<packet>``); :func:`packet` reads one from an op name.

Each family says what it is for; a question about a different set is a different family, never a
local copy with other members."""
from __future__ import annotations

import re

#: aten ops that run one GEMM (a batch of them for ``bmm``/``baddbmm``) per call, in-place variants
#: included: the ops whose call the site probe describes as one GEMM problem (m, n, k, layout,
#: types: ``probes/gemm_naming.py``), whose site a bundle's repro rebuilds, and whose site
#: occurrences the cuBLASLt log's calls are attributed to. ``matmul`` too (a composite: the
#: dispatcher usually decomposes it into ``mm``/``bmm`` first).
GEMM = frozenset({
    "mm", "addmm", "addmm_", "bmm", "baddbmm", "baddbmm_", "addbmm", "addbmm_", "_scaled_mm",
    "_addmm_activation", "matmul",
})
#: every op whose code path is a BLAS GEMM library's (which env knobs can reach it): the GEMMs, and
#: ``linear`` (a site named by its module-level op) and ``_grouped_mm`` (MoE grouped GEMMs), whose
#: calls the site probe does not describe as one problem.
GEMM_PATH = GEMM | {"linear", "_grouped_mm"}
#: GEMMs whose first operand is ``self`` (C, added to the product: they accumulate).
GEMM_WITH_SELF = frozenset({"addmm", "addmm_", "baddbmm", "baddbmm_", "addbmm", "addbmm_", "_addmm_activation"})
#: GEMMs of two 2-D matrices whose layout letters their strides give (a trace that records operand
#: strides names their site ``gemm:<layout>:acc<0|1>:grad<0|1>``); ``addmm`` accumulates.
GEMM_2D = frozenset({"mm", "addmm"})
#: matrix-vector and vector products: no GEMM, but a BLAS call (oneMKL on the CPU).
BLAS_VECTOR = frozenset({"addmv", "mv", "dot", "vdot", "addr"})

#: ops whose outputs are uninitialised memory: a difference there is a probe artifact.
UNINITIALISED = re.compile(r"(^|\.)(empty|empty_like|empty_strided|empty_permuted|new_empty|new_empty_strided)(\.|$)")
#: ops whose output holds bytes the record does not hold as an input. ``Tensor.set_(storage, ...)``
#: points a tensor at a storage: a DataLoader worker's batch arrives in the training process this
#: way (rebuilt from shared memory written by the worker, in the order the workers finish), and so
#: does any tensor set onto a storage filled outside the traced ops. ``torch.from_file`` reads a file.
EXTERNAL_DATA = re.compile(r"(^|\.)(set_\.source_Storage|from_file(\.|$))")
#: resizes: a resize that grows a tensor leaves its new elements uninitialised.
RESIZE = re.compile(r"(^|\.)(resize_|resize_as_)(\.|$)")
#: outputs that are a library's opaque workspace, kept for the backward pass (by packet: the
#: indexes of those outputs): oneDNN's and cuDNN's RNN workspaces hold scratch the library never
#: initialises in full, so identical runs differ there while the op's real outputs match.
WORKSPACE_OUTPUTS = {"mkldnn_rnn_layer": frozenset({3}), "_cudnn_rnn": frozenset({3}), "miopen_rnn": frozenset({3})}
#: copies that may be read by the tracer while still in flight when ``non_blocking=True``.
ASYNC_COPY = re.compile(r"(^|\.)(_to_copy|copy_|copy|to)(\.|$)")
#: ops that cannot by themselves make a difference from equal inputs (one-hop-later rule).
TRIVIAL = frozenset({
    "view", "_unsafe_view", "reshape", "slice", "select", "narrow", "expand", "t", "transpose",
    "permute", "squeeze", "unsqueeze", "flatten", "unflatten", "split", "split_with_sizes", "chunk",
    "unbind", "as_strided", "alias", "detach", "clone", "contiguous", "_reshape_alias", "view_as",
    "add", "add_", "sub", "sub_", "mul", "mul_", "neg", "cat", "stack", "fill_", "zero_", "zeros_like",
    "ones_like", "lift_fresh", "copy_", "_to_copy", "to",
})
#: ops whose output depends on generator state, not only on their tensor inputs (searched in the
#: packet: ``rand``, ``randn``, ``randint``, ``randperm`` and ``native_dropout`` take no generator
#: argument and draw from the default one).
RANDOM = re.compile(r"(rand|normal|uniform|bernoulli|dropout|multinomial|exponential|cauchy|geometric|log_normal)")

#: namespaces whose op names read ``<namespace>.<packet>[.<overload>]``
_PACKET_NAMESPACES = ("aten", "prims", "c10d", "_c10d_functional")


def packet(name: str) -> str:
    """``aten.add_.Tensor`` -> ``add_``; ``add`` -> ``add``."""
    parts = name.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] in _PACKET_NAMESPACES else parts[0]


def aten_packet(name: str) -> str | None:
    """The packet of an aten op name (``aten.mm.default``, the profiler's ``aten::mm``), None for
    another namespace."""
    if name.startswith("aten::"):
        return name[6:].split(".", 1)[0]
    return packet(name) if name.startswith("aten.") else None
