"""GEMM site naming of real torch calls on CPU tensors, values checked by hand.

Hand derivation (docs/gemm-naming.md): PyTorch's row-major C = mat1 @ mat2 is cuBLAS's
column-major C^T = mat2^T mat1^T, so the layout is letter(mat2) + letter(mat1), a row-major
operand being N and a transposed (column-major) one T; cuBLAS m = C's columns, n = C's rows.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from probes.gemm_naming import in_backward, is_gemm, matrix_order, name_gemm, op_base, te_site


class Names(TorchDispatchMode):
    """Records (op, site, meta) for every GEMM the real dispatcher runs."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        call = name_gemm(str(func), args, kwargs, in_backward()) if is_gemm(str(func)) else None
        if call is not None:
            self.calls.append(call)
        return func(*args, **kwargs)


def names(fn):
    with Names() as m:
        fn()
    return [c.site for c in m.calls], m.calls


X = torch.randn(8, 4)  # tokens x in_features
W = torch.randn(6, 4)  # out_features x in_features
DY = torch.randn(8, 6)


def test_te_fprop_is_TN_with_cublas_mnk():
    sites, calls = names(lambda: torch.mm(X, W.t()))  # y = x W^T
    assert sites == ["gemm:TN:acc0:grad0"]
    c = calls[0]
    assert (c.transa, c.transb) == ("T", "N")  # cuBLAS A = W^T view (column-major) -> T; B = x -> N
    assert (c.m, c.n, c.k) == (6, 8, 4)  # m = y's columns, n = y's rows, k = in_features
    assert [o["role"] for o in c.operands] == ["mat2", "mat1"]  # cuBLAS A is PyTorch's second operand


def test_te_dgrad_is_NN():
    sites, calls = names(lambda: torch.mm(DY, W))  # dx = dy W
    assert sites == ["gemm:NN:acc0:grad0"]  # grad0: not inside autograd backward here
    assert (calls[0].m, calls[0].n, calls[0].k) == (4, 8, 6)


def test_te_wgrad_is_NT():
    sites, calls = names(lambda: torch.mm(DY.t(), X))  # dW = dy^T x
    assert sites == ["gemm:NT:acc0:grad0"]
    assert (calls[0].m, calls[0].n, calls[0].k) == (4, 6, 8)


def test_both_transposed_is_TT():
    a, b = torch.randn(4, 8), torch.randn(6, 4)
    assert names(lambda: torch.mm(a.t(), b.t()))[0] == ["gemm:TT:acc0:grad0"]


def test_linear_forward_and_backward_sites():
    x = torch.randn(8, 4, requires_grad=True)
    w = torch.randn(6, 4, requires_grad=True)
    dy = torch.randn(8, 6)

    def step():
        y = F.linear(x, w)
        y.backward(dy)

    sites, calls = names(step)
    # aten's mm backward: grad_mat2 = mat1^T @ dy = x^T dy (mat1 = x^T column-major -> T, dy -> N:
    # layout N+T = NT, the wgrad), grad_self = dy @ (W^T)^T = dy W (both row-major: NN, the dgrad)
    assert sites == ["gemm:TN:acc0:grad0", "gemm:NT:acc0:grad1", "gemm:NN:acc0:grad1"]
    assert [c.grad for c in calls] == [0, 1, 1]


def test_grad_flag_inside_custom_backward():
    class Lin(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return torch.mm(x, w.t())

        @staticmethod
        def backward(ctx, dy):
            x, w = ctx.saved_tensors
            return torch.mm(dy, w), torch.mm(dy.t(), x)

    x = torch.randn(8, 4, requires_grad=True)
    w = torch.randn(6, 4, requires_grad=True)
    sites, _ = names(lambda: Lin.apply(x, w).backward(torch.randn(8, 6)))
    assert sites == ["gemm:TN:acc0:grad0", "gemm:NN:acc0:grad1", "gemm:NT:acc0:grad1"]


def test_accumulate_into_main_grad_is_acc1():
    main_grad = torch.zeros(6, 4)
    sites, calls = names(lambda: main_grad.addmm_(DY.t(), X))
    assert sites == ["gemm:NT:acc1:grad0"]
    assert calls[0].beta == 1.0 and calls[0].op == "aten.addmm_.default"
    assert [o["cublas"] for o in calls[0].operands] == ["A", "B", "C"]


def test_beta_zero_in_place_is_acc0():
    out = torch.zeros(6, 4)
    assert names(lambda: out.addmm_(DY.t(), X, beta=0))[0] == ["gemm:NT:acc0:grad0"]


def test_functional_addmm_with_bias_is_acc0():
    b = torch.randn(6)
    sites, calls = names(lambda: F.linear(X, W, b))  # addmm(bias, x, W^T) into a fresh tensor
    assert sites == ["gemm:TN:acc0:grad0"]
    assert calls[0].op == "aten.addmm.default"


def test_out_variant_accumulates_only_when_out_is_self():
    c = torch.zeros(6, 4)
    assert names(lambda: torch.addmm(c, DY.t(), X, out=c))[0] == ["gemm:NT:acc1:grad0"]
    o = torch.empty(6, 4)
    assert names(lambda: torch.addmm(c, DY.t(), X, out=o))[0] == ["gemm:NT:acc0:grad0"]
    assert names(lambda: torch.mm(DY.t(), X, out=o))[0] == ["gemm:NT:acc0:grad0"]


def test_batched_bmm_and_baddbmm():
    a, b = torch.randn(3, 8, 4), torch.randn(3, 6, 4)
    sites, calls = names(lambda: torch.bmm(a, b.transpose(1, 2)))
    assert sites == ["gemm:TN:acc0:grad0"] and calls[0].batch == 3
    acc = torch.zeros(3, 8, 6)
    assert names(lambda: acc.baddbmm_(a, b.transpose(1, 2)))[0] == ["gemm:TN:acc1:grad0"]


def test_matmul_3d_folds_to_mm():
    x3 = torch.randn(2, 3, 4)
    sites, calls = names(lambda: torch.matmul(x3, W.t()))
    assert sites == ["gemm:TN:acc0:grad0"]
    assert (calls[0].m, calls[0].n, calls[0].k) == (6, 6, 4)  # n = 2*3 folded rows


def test_column_major_output_flips_letters():
    # PyTorch does not swap operands when C is column-major: cuBLAS A = mat1, B = mat2,
    # and a row-major operand then needs op T. Pure call: real tensors, no dispatch.
    a, b = torch.randn(8, 4), torch.randn(4, 6)
    out_t = torch.empty(6, 8).t()  # 8x6, column-major
    call = name_gemm("aten.mm.out", (a, b), {"out": out_t}, False)
    assert call.site == "gemm:TT:acc0:grad0"
    assert (call.m, call.n, call.k) == (8, 6, 4)


def test_expanded_operand_is_copied_row_major():
    ones = torch.ones(1, 1).expand(6, 8)  # strides (0, 0): PyTorch copies it to row-major first
    assert matrix_order([6, 8], list(ones.stride())) == "copy"
    assert name_gemm("aten.mm.default", (ones, X), {}, True).site == "gemm:NN:acc0:grad1"


def test_scaled_mm_names_from_strides():
    a = torch.randn(16, 32).to(torch.float8_e4m3fn)
    b = torch.randn(16, 32).to(torch.float8_e4m3fn)
    s = torch.ones(())
    call = name_gemm("aten._scaled_mm.default", (a, b.t(), s, s), {"out_dtype": torch.bfloat16}, False)
    assert call.site == "gemm:TN:acc0:grad0"  # the FP8 TN layout cuBLASLt requires
    assert call.out_dtype == "bfloat16"


def test_non_gemm_and_helpers():
    assert name_gemm("aten.add.Tensor", (X, X), {}, False) is None
    assert op_base("aten::addmm_.default") == ("addmm_", "default")
    assert not is_gemm("aten.mv.default")
    assert te_site("nt", False, True) == "gemm:NT:acc0:grad1"
    with pytest.raises(ValueError):
        te_site("XY", False, False)
    assert in_backward() is False


def test_meta_carries_the_problem_descriptor():
    call = name_gemm("aten.mm.default", (X, W.t()), {}, False)
    meta = call.meta()
    assert meta["layout"] == "TN" and meta["m"] == 6 and meta["n"] == 8 and meta["k"] == 4
    a_desc = meta["operands"][0]
    assert a_desc["strides"] == [1, 4] and a_desc["ld"] == 4 and a_desc["trans"] == "T"


class Calls(TorchDispatchMode):
    """Keeps every GEMM call's (op, args, kwargs, result, backward) for naming afterwards."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if is_gemm(str(func)):
            self.calls.append((str(func), args, kwargs, out, in_backward()))
        return out


def test_the_tracers_gemm_cache_names_every_call_as_naming_afresh_does():
    """The op tracer names a GEMM once per call shape (probes.optrace._gemm_meta): every call whose
    naming depends on more than shapes and strides (an out= tensor that may alias self, beta=0 in
    place, the backward pass, a column-major output) must read as named afresh, in any order."""
    from probes import optrace

    c, o, main_grad = torch.zeros(6, 4), torch.empty(6, 4), torch.zeros(6, 4)
    w = W.clone().requires_grad_(True)
    x = X.clone().requires_grad_(True)

    def program():
        F.linear(x, w, torch.randn(6)).sum().backward()  # fprop TN, dgrad NN, wgrad NT
        F.linear(x, w).sum().backward()
        main_grad.addmm_(DY.t(), X)  # acc1
        main_grad.addmm_(DY.t(), X, beta=0)  # same shapes, acc0
        torch.addmm(c, DY.t(), X, out=c)  # out aliases self: acc1
        torch.addmm(c, DY.t(), X, out=o)  # same shapes, acc0
        torch.mm(DY.t(), X)
        torch.mm(DY.t().contiguous(), X)  # same shapes, other strides
        torch.mm(X.t(), DY).t()
        torch.bmm(torch.randn(3, 8, 4), torch.randn(3, 6, 4).transpose(1, 2))
        torch.bmm(torch.randn(3, 8, 4), torch.randn(3, 4, 6))

    with Calls() as m:
        program()
        program()  # every call again: named from the cache now
    optrace._GEMM_SEEN.clear()
    fresh = [optrace._gemm_name(*call) for call in m.calls]
    cached = [optrace._gemm_meta(*call) for call in m.calls]
    assert cached == fresh
    assert len({f["site"] for f in fresh}) >= 5  # the program covers distinct sites
    assert any(f["acc"] for f in fresh) and any(f["grad"] for f in fresh)
    optrace._GEMM_SEEN.clear()
    reversed_order = [optrace._gemm_meta(*call) for call in reversed(m.calls)]
    assert reversed_order[::-1] == fresh


def test_the_gemm_cache_keeps_a_recomputed_forward_apart_from_a_backward_gemm():
    """One call shape inside backward is grad1, or grad0 when activation checkpointing recomputes a
    forward (called from torch/utils/checkpoint.py with grad mode on): the cache keys on that."""
    import os

    from probes import optrace

    b, x, w = torch.randn(6), torch.randn(8, 4), torch.randn(6, 4)
    args = (b, x, w.t())
    out = torch.addmm(*args)
    ns: dict = {}
    exec(compile("def recompute(fn):\n    return fn()\n", os.path.join("site", "torch", "utils", "checkpoint.py"),
                 "exec"), ns)
    optrace._GEMM_SEEN.clear()
    backward = optrace._gemm_meta("aten.addmm.default", args, {}, out, True)  # not under checkpoint: grad1
    recomputed = ns["recompute"](lambda: optrace._gemm_meta("aten.addmm.default", args, {}, out, True))
    assert backward["grad"] == 1 and recomputed["grad"] == 0
    optrace._GEMM_SEEN.clear()
    recomputed = ns["recompute"](lambda: optrace._gemm_meta("aten.addmm.default", args, {}, out, True))
    backward = optrace._gemm_meta("aten.addmm.default", args, {}, out, True)
    assert backward["grad"] == 1 and recomputed["grad"] == 0
    optrace._GEMM_SEEN.clear()
