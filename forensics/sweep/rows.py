"""Which dimension of an op's inputs holds rows the op computes independently (the batch axis).

Batch invariance asks whether row r of an output gets the same bits when the op runs on the first
m rows only. That is a fair question only along a dimension whose rows the op's math keeps apart:

* ``mm`` / ``addmm`` / ``_addmm_activation``: the rows of ``mat1`` (a linear layer's tokens in its
  fprop and dgrad); ``addmm``'s ``self`` is sliced with them when it has those rows (a broadcast
  bias is kept whole);
* ``bmm`` / ``baddbmm``: the batch (dim 0) of every operand that has it;
* ``convolution``: the batch of ``input``;
* ``native_layer_norm``, ``_fused_rms_norm``: the rows before the normalised shape; ``_softmax`` /
  ``_log_softmax``: dim 0 when the softmax runs over another dimension; ``native_group_norm``: the
  batch (its groups never span two samples);
* elementwise ops (:data:`ELEMENTWISE`: ``tanh``, ``add``, ``gelu``, their backwards...): dim 0 of the
  output; every operand of the output's rank whose dim 0 has the full row count is cut with it, a
  broadcast one (lower rank, or size 1 there) is kept whole;
* ``embedding``: the rows of ``indices`` (the table is kept whole).

Random ops (``dropout``, ``bernoulli``...) have no rule: slicing changes what the generator hands
each row.

Never a reduction dimension. A weight gradient (``gemm:NT:acc*:grad1``, ``mm(dy.t(), x)``) sums
over the tokens: they are its K, and slicing them changes the sum; it is refused, and so is every
op with no rule here (``sum``, ``dot``, a norm's backward that reduces over the tokens...).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from forensics.core.errors import BadSite
from forensics.core.site import parse_site, split_label

#: The ops with a row rule (aten overload packets).
ROW_OPS = ("mm", "addmm", "_addmm_activation", "bmm", "baddbmm", "convolution", "native_layer_norm",
           "_fused_rms_norm", "native_group_norm", "_softmax", "_log_softmax", "embedding")
#: Elementwise ops (aten overload packets): each output element is computed from the elements at the
#: same position of its operands, so every row is independent by definition.
ELEMENTWISE = frozenset({
    "abs", "neg", "exp", "exp2", "expm1", "log", "log1p", "log2", "log10", "tanh", "sigmoid", "relu", "gelu", "silu",
    "mish", "elu", "selu", "celu", "leaky_relu", "hardtanh", "hardswish", "hardsigmoid", "softplus", "threshold",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh", "erf", "erfc", "erfinv",
    "sqrt", "rsqrt", "reciprocal", "sign", "sgn", "floor", "ceil", "round", "trunc", "frac", "square", "pow",
    "clamp", "clamp_min", "clamp_max", "clip", "nan_to_num", "logit", "_to_copy", "clone", "add", "sub", "rsub",
    "mul", "div", "remainder", "fmod", "maximum", "minimum", "fmax", "fmin", "atan2", "hypot", "where", "lerp",
    "addcmul", "addcdiv", "masked_fill", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
    "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor", "isnan", "isinf", "gelu_backward", "silu_backward",
    "tanh_backward", "sigmoid_backward", "threshold_backward", "hardtanh_backward", "leaky_relu_backward",
    "elu_backward", "softplus_backward", "mish_backward", "hardswish_backward", "hardsigmoid_backward",
})
#: Ops known to reduce over every row (a clearer refusal than "no rule").
_REDUCTIONS = {"sum", "mean", "dot", "vdot", "norm", "linalg_vector_norm", "amax", "amin", "max", "min",
               "prod", "var", "std", "var_mean", "std_mean", "native_layer_norm_backward", "native_batch_norm",
               "native_batch_norm_backward", "_native_batch_norm_legit", "addbmm", "nll_loss_forward",
               "nll_loss_backward", "mse_loss", "cross_entropy_loss"}


class NotBatchable(ValueError):
    """The site has no dimension of independent rows to slice (the message says why)."""


@dataclass
class RowPlan:
    """How to cut a call to its first ``m`` rows."""

    op: str
    full_rows: int
    sliced: list[tuple[int, int]]  # (argument index, dimension) of every input cut to m rows
    what: str  # which rows, in words
    out_dim: int = 0  # the rows' dimension in every output
    kept_whole: list[str] = field(default_factory=list)  # operands used whole (weights, a broadcast bias)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "full_rows": self.full_rows, "sliced": [list(s) for s in self.sliced],
                "what": self.what, "out_dim": self.out_dim, "kept_whole": self.kept_whole}


def _packet(op: str) -> tuple[str, str]:
    parts = op.split(".")
    if len(parts) >= 3:
        return parts[1], parts[2]
    return (parts[1] if len(parts) > 1 else parts[0]), "default"


def wgrad_reason(label: str) -> str:
    return (f"{label} is a weight gradient (wgrad, dW = dy^T x): the tokens are its K, the reduction "
            "dimension, so slicing them changes the sum itself and no row of dW is computed from fewer "
            "tokens alone; batch invariance does not apply to it (the same layer's fprop gemm:TN:acc0:grad0 "
            "and dgrad gemm:NN:acc0:grad1 have the tokens as rows)")


def refuse_site(site: str) -> str | None:
    """A site refused from its name alone (before anything runs): a GEMM wgrad. None when it may have rows."""
    try:
        parsed = parse_site(split_label(site)[0])
    except BadSite:
        return None  # (the site is checked, and refused, where it is parsed for the run)
    if parsed.is_gemm and parsed.grad == 1 and parsed.layout[1] == "T":
        return wgrad_reason(site)
    return None


class TensorMeta:
    """A kept tensor as its description says (shape, strides): what :func:`plan_rows` reads of a tensor,
    so the sweep plans without loading the tensors (nor importing torch) in its own process."""

    def __init__(self, shape: list[int], strides: list[int]):
        self.shape = tuple(int(x) for x in shape)
        self._strides = tuple(int(x) for x in strides)

    def stride(self, dim: int | None = None) -> Any:
        return self._strides if dim is None else self._strides[dim]

    def dim(self) -> int:
        return len(self.shape)

    def size(self, dim: int | None = None) -> Any:
        return self.shape if dim is None else self.shape[dim]


def from_skeleton(skeleton: Any, tensors: list[dict[str, Any]]) -> tuple[tuple, dict[str, Any]]:
    """(args, kwargs) of a kept call from its description (``site-inputs.json``), tensors as :class:`TensorMeta`."""
    def build(x: Any) -> Any:
        if isinstance(x, dict) and set(x) == {"tensor"}:
            t = tensors[int(x["tensor"])]
            return TensorMeta(t["shape"], t["strides"])
        if isinstance(x, list):
            return [build(v) for v in x]
        if isinstance(x, dict):
            return {k: build(v) for k, v in x.items()}
        return x

    args, kwargs = skeleton
    return tuple(build(a) for a in args), {k: build(v) for k, v in kwargs.items()}


def _is_tensor(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "stride")


def plan_rows(op: str, args: tuple, kwargs: dict[str, Any], meta: dict[str, Any] | None = None,
              label: str | None = None) -> RowPlan:
    """The row plan of one call; :class:`NotBatchable` with the reason when there is none."""
    meta = meta or {}
    label = label or op
    base, overload = _packet(op)
    if base.endswith("_") or overload == "out":
        raise NotBatchable(f"{label}: {op} writes into an existing tensor (in-place or out=); the sweep replays "
                           "functional ops only")
    gemm_site = meta.get("gemm_site") or (meta.get("site") if str(meta.get("site", "")).startswith("gemm:") else None)
    if base in ("mm", "addmm", "_addmm_activation"):
        i = 0 if base == "mm" else 1
        mat1 = args[i]
        wgrad = refuse_site(gemm_site) if gemm_site else None
        if wgrad is None and meta.get("grad") and mat1.dim() == 2 and mat1.stride(0) == 1 and mat1.stride(1) != 1 \
                and mat1.size(1) > 1:
            wgrad = wgrad_reason(label)  # backward GEMM whose mat1 is a transposed view: dy^T
        if wgrad:
            raise NotBatchable(wgrad if wgrad.startswith(label) else wgrad.replace(gemm_site, label, 1))
        n = int(mat1.shape[0])
        sliced = [(i, 0)]
        whole = [f"mat2 {list(args[i + 1].shape)}"]
        if base != "mm":
            s = args[0]
            if _is_tensor(s) and s.dim() == 2 and s.shape[0] == n and n > 1 and s.stride(0) != 0:
                sliced.append((0, 0))
            else:
                whole.append(f"self (bias) {list(s.shape) if _is_tensor(s) else s}")
        return RowPlan(op, n, sliced, f"rows of mat1 {list(mat1.shape)} (m of the GEMM)", 0, whole)
    if base in ("bmm", "baddbmm"):
        first = 0 if base == "bmm" else 1
        b = int(args[first].shape[0])
        sliced = [(first, 0), (first + 1, 0)]
        whole = []
        if base == "baddbmm":
            s = args[0]
            if _is_tensor(s) and s.dim() == 3 and s.shape[0] == b and b > 1 and s.stride(0) != 0:
                sliced.append((0, 0))
            else:
                whole.append("self (broadcast)")
        return RowPlan(op, b, sliced, f"batch of {list(args[first].shape)} (dim 0)", 0, whole)
    if base == "convolution":
        x = args[0]
        return RowPlan(op, int(x.shape[0]), [(0, 0)], f"batch of input {list(x.shape)} (dim 0)", 0,
                       [f"weight {list(args[1].shape)}"])
    if base in ("native_layer_norm", "_fused_rms_norm"):
        x, shape = args[0], list(args[1])
        if x.dim() <= len(shape):
            raise NotBatchable(f"{label}: {op} normalises over every dimension of its input {list(x.shape)}: "
                               "no rows to slice")
        return RowPlan(op, int(x.shape[0]), [(0, 0)], f"rows of input {list(x.shape)} before the normalised "
                       f"shape {shape} (dim 0)", 0, ["weight", "bias"])
    if base in ("_softmax", "_log_softmax"):
        x, dim = args[0], int(args[1])
        if x.dim() < 2 or dim % x.dim() == 0:
            raise NotBatchable(f"{label}: {op} reduces over dim {dim} of {list(x.shape)}, its only row dimension: "
                               "no independent rows to slice")
        return RowPlan(op, int(x.shape[0]), [(0, 0)], f"rows of input {list(x.shape)} (dim 0; softmax over dim {dim})")
    if base == "native_group_norm":
        x = args[0]
        return RowPlan(op, int(x.shape[0]), [(0, 0)], f"batch of input {list(x.shape)} (dim 0; groups within a "
                       "sample)", 0, ["weight", "bias"])
    if base == "embedding":
        w, idx = args[0], args[1]
        if idx.dim() < 1:
            raise NotBatchable(f"{label}: {op} looks up one index: no rows to slice")
        return RowPlan(op, int(idx.shape[0]), [(1, 0)], f"rows of indices {list(idx.shape)} (dim 0)", 0,
                       [f"weight (the table) {list(w.shape)}"])
    if base in ELEMENTWISE:
        return _elementwise_plan(op, args, kwargs, label)
    if base in _REDUCTIONS:
        raise NotBatchable(f"{label}: {op} reduces over its rows (no output row is computed from one input row "
                           "alone): no independent rows to slice")
    raise NotBatchable(no_rule_reason(label, op))


def no_rule_reason(label: str, op: str) -> str:
    return (f"{label}: {op} has no row rule: the sweep slices only dimensions whose rows an op computes independently, "
            f"known for {', '.join(ROW_OPS)} and the elementwise ops (tanh, add, mul, gelu... "
            "forensics.sweep.rows.ELEMENTWISE)")


def _elementwise_plan(op: str, args: tuple, kwargs: dict[str, Any], label: str) -> RowPlan:
    """Dim 0 of the output: every operand of the output's rank with the full row count there is cut."""
    tensors = [(i, a) for i, a in enumerate(args) if _is_tensor(a)]
    if not tensors:
        raise NotBatchable(f"{label}: {op} has no tensor operand: no rows to slice")
    rank = max(a.dim() for _, a in tensors)
    if rank < 1:
        raise NotBatchable(f"{label}: {op} works on 0-d tensors: no rows to slice")
    full = max(int(a.shape[0]) for _, a in tensors if a.dim() == rank)
    sliced, whole = [], []
    for i, a in tensors:
        if a.dim() == rank and int(a.shape[0]) == full and (full == 1 or a.stride(0) != 0):
            sliced.append((i, 0))
        else:
            whole.append(f"argument {i} {list(a.shape)} (broadcast)")
    for k, v in kwargs.items():
        if _is_tensor(v):
            raise NotBatchable(f"{label}: {op} takes the tensor {k}= by keyword: the sweep slices positional "
                               "operands only")
    shape = list(next(a.shape for i, a in tensors if (i, 0) in sliced))
    return RowPlan(op, full, sliced, f"rows of the elementwise operands {shape} (dim 0)", 0, whole)


def refuse_by_name(site: str) -> str | None:
    """A site refused from its name alone, before anything runs (a refusal costs no run): a GEMM wgrad,
    an aten op that writes in place, reduces over its rows or has no row rule. None when it may have rows
    (the kept call decides)."""
    wgrad = refuse_site(site)
    if wgrad:
        return wgrad
    try:
        parsed = parse_site(split_label(site)[0])
    except BadSite:
        return None
    if not parsed.is_aten:
        return None
    op = parsed.name
    base, overload = _packet(op)
    label = site
    if base.endswith("_") or overload == "out":
        return (f"{label}: {op} writes into an existing tensor (in-place or out=); the sweep replays functional ops "
                "only (the --repeat axis replays it)")
    if base in _REDUCTIONS:
        return (f"{label}: {op} reduces over its rows (no output row is computed from one input row alone): no "
                "independent rows to slice")
    if base not in ROW_OPS and base not in ELEMENTWISE:
        return no_rule_reason(label, op)
    return None


def slice_call(plan: RowPlan, args: tuple, kwargs: dict[str, Any], m: int) -> tuple[tuple, dict[str, Any]]:
    """``args`` with every sliced operand cut to its first ``m`` rows (views, strides kept)."""
    out = list(args)
    for i, dim in plan.sliced:
        out[i] = out[i].narrow(dim, 0, m)
    return tuple(out), dict(kwargs)


def outputs(result: Any) -> list[Any]:
    """The tensor outputs of a call, in order."""
    items = result if isinstance(result, (list, tuple)) else [result]
    return [t for t in items if _is_tensor(t)]


def shared_rows(plan: RowPlan, result: Any, m: int) -> list[Any]:
    """The first ``m`` rows of every output of the full call."""
    return [t.narrow(plan.out_dim, 0, m) if t.dim() > plan.out_dim and t.shape[plan.out_dim] == plan.full_rows
            else t for t in outputs(result)]
