"""What the tracer knows about ops: which are chunked, views, lifts, overwrites, receipts, random
draws or skipped; what an op writes and which of its arguments are outputs; the GEMM name a GEMM
record carries; how an op's arguments split into tensors and the rest. Worked out once per
OpOverload (:class:`_OpInfo`)."""
from __future__ import annotations

import os
import sys
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from forensics.core.ops import RANDOM as RANDOM_OPS  # one pattern with the differ's
from probes.optrace.digest import _PLAIN

try:
    from probes import gemm_naming as _gemm_naming
except ImportError:  # pragma: no cover - GEMM records then carry no site
    _gemm_naming = None  # type: ignore[assignment]

#: Ops whose failure mode is reordering: inputs and outputs get chunk digests. The one list.
CHUNKED_OPS = frozenset({
    "sort", "argsort", "msort", "topk", "kthvalue", "unique", "_unique", "_unique2", "unique_consecutive",
    "unique_dim", "randperm", "nonzero", "nonzero_static", "masked_select",
    "index", "index_select", "index_put", "index_put_", "_index_put_impl_", "index_add", "index_add_",
    "index_copy", "index_copy_", "index_fill", "index_fill_", "index_reduce", "index_reduce_",
    "scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_",
    "gather", "take", "take_along_dim", "embedding", "embedding_dense_backward",
    "bincount", "histc", "searchsorted", "bucketize", "repeat_interleave", "_segment_reduce",
    "moe_permute", "moe_unpermute", "all_to_all_single",  # MoE dispatch-like
})
#: Views whose output holds exactly the input's elements (same multiset): an order-independent
#: digest of the output equals the input's, so it is reused instead of recomputed.
SAME_ELEMENT_VIEWS = frozenset({
    "t", "transpose", "permute", "view", "_unsafe_view", "reshape", "_reshape_alias", "detach", "alias",
    "squeeze", "unsqueeze", "flatten", "unflatten", "view_as", "numpy_T", "mT", "adjoint", "movedim",
    "swapaxes", "swapdims", "lift_fresh",
})
#: The subset of SAME_ELEMENT_VIEWS that also keeps the row-major order (an order-sensitive digest
#: of the output equals the input's); t/transpose/permute... reorder and are digested anew.
ORDER_PRESERVING_VIEWS = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "detach", "alias", "squeeze", "unsqueeze",
    "flatten", "unflatten", "view_as", "lift_fresh",
})
#: Ops that bring a tensor made outside the dispatcher in (``torch.from_numpy``, ``torch.tensor``): no
#: traced op produced their input, so a CPU input keeps its XOR digest beside ``o`` (equal XOR,
#: different ``o``: an untraced producer reordered the values).
LIFT_OPS = frozenset({"lift_fresh", "lift", "lift_fresh_copy"})
#: In-place ops that write every element of ``self`` from their other arguments alone: ``self``'s
#: contents before the op are no input of it (like an ``.out`` variant's buffer), so they are not
#: digested. A buffer from ``empty`` (garbage) filled by ``copy_`` read as a differing input between
#: identical runs whenever the uninitialised-memory trail could not follow it (a DataLoader's
#: receipts shift the occurrence numbers of ``empty``).
OVERWRITING_OPS = frozenset({"copy_", "fill_", "zero_", "random_", "uniform_", "normal_", "cauchy_", "log_normal_",
                             "exponential_", "geometric_", "bernoulli_"})
#: In-place ops that change only a tensor's metadata (which storage, sizes, strides): ``Tensor(a!)``
#: in their schema, yet they write no byte, so a grown storage stays uninitialised after them.
METADATA_INPLACE_OPS = frozenset({"set_", "resize_", "resize_as_", "as_strided_", "squeeze_", "unsqueeze_",
                                  "transpose_", "t_", "swapdims_", "swapaxes_", "detach_", "_coalesced_"})
#: Ops with which torch rebuilds a tensor received from another process (``torch.empty((0,))`` then
#: ``set_`` onto the shared storage: a DataLoader worker's batch). How many batches arrive before a
#: given op depends on which worker finishes first, so these are counted apart, identities
#: ``aten.empty.memory_format@received:N``: the program's own ``empty``s keep the same occurrence
#: numbers in every run (one shifted count misaligned every later ``empty`` and broke the trail of
#: uninitialised memory into, e.g., DDP's gradient buckets).
RECEIPT_OPS = frozenset({"empty", "set_"})
#: where torch rebuilds received tensors (``rebuild_tensor``, ``rebuild_storage_fd``...)
_RECEIPT_FILE = os.path.join("torch", "multiprocessing", "reductions.py")
#: Ops never recorded (the tracer's own work, or pure metadata queries).
SKIPPED_OPS = frozenset({"hash_tensor", "_local_scalar_dense", "sym_size", "sym_stride", "sym_numel",
                         "sym_storage_offset", "is_same_size", "_has_compatible_shallow_copy_type"})


def _op_name(func: Any) -> str:
    return str(func)  # "aten.mm.default"


_CONTAINERS = (list, tuple, dict)


def _split(args: tuple, kwargs: dict) -> tuple[list, list]:
    """The leaves of ``(args, kwargs)`` in ``tree_leaves`` order, as (tensors, everything else),
    without pytree's per-leaf cost. No argument a container (the common case): the arguments
    themselves, a ``torch.Size`` one leaf. Otherwise pytree's leaves (a ``torch.Size`` its ints),
    plain lists and tuples (sizes, dims, a list of tensors) walked here in pytree's order, any other
    container (a dict, a namedtuple...) left to pytree."""
    tensor, size = torch.Tensor, torch.Size
    tensors, others = [], []
    for a in (args if not kwargs else (*args, *kwargs.values())):
        if isinstance(a, tensor):
            tensors.append(a)
        elif isinstance(a, _CONTAINERS) and a.__class__ is not size:
            tensors, others = [], []
            if _split_into(args, tensors, others) and (not kwargs or _split_into(kwargs.values(), tensors, others)):
                return tensors, others
            return _split_tree(args, kwargs)
        else:
            others.append(a)
    return tensors, others


def _split_into(values: Any, tensors: list, others: list) -> bool:
    """pytree's leaves of ``values`` into ``tensors`` and ``others``; False at a container other
    than a plain list, tuple or ``torch.Size`` (the caller then asks pytree)."""
    for a in values:
        cls = a.__class__
        if cls in _PLAIN or isinstance(a, torch.Tensor):
            tensors.append(a)
        elif cls is list or cls is tuple or cls is torch.Size:
            if not _split_into(a, tensors, others):
                return False
        elif isinstance(a, _CONTAINERS):
            return False
        else:
            others.append(a)
    return True


def _split_tree(args: tuple, kwargs: dict) -> tuple[list, list]:
    tensors, others = [], []
    for x in tree_leaves((args, kwargs)):
        (tensors if isinstance(x, torch.Tensor) else others).append(x)
    return tensors, others


class _OpInfo:
    """What the tracer needs to know about an op, worked out once per OpOverload."""

    __slots__ = ("name", "base", "skip", "chunks", "gemm", "collective", "copy", "view", "order_view", "lift", "call",
                 "written", "out_names", "overwrites", "receivable", "draws", "writes", "func")

    def __init__(self, func: Any) -> None:
        self.func = func  # held: the id the tracer looks this up by (_OP_BY_ID) stays this op's
        #: what runs the op: an OpOverload's own C++ callable (its __call__ is one Python frame around it)
        self.call = func._op if type(func) is torch._ops.OpOverload and callable(getattr(func, "_op", None)) else func
        self.name = name = _op_name(func)
        self.base = base = _packet(name)
        self.skip = base in SKIPPED_OPS or name.startswith("profiler.")
        self.chunks = base in CHUNKED_OPS
        try:
            self.gemm = _gemm_naming is not None and bool(_gemm_naming.is_gemm(name))
        except Exception:  # noqa: BLE001
            self.gemm = False
        self.collective = name.startswith(("c10d.", "_c10d_functional."))
        self.copy = base in ("_to_copy", "copy_", "copy")
        self.view = base in SAME_ELEMENT_VIEWS
        self.order_view = base in ORDER_PRESERVING_VIEWS
        self.lift = base in LIFT_OPS
        self.written = _written_args(func)
        self.out_names = _out_names(func)
        self.overwrites = base in OVERWRITING_OPS
        self.receivable = base in RECEIPT_OPS
        self.draws = _draws(func, base)
        self.writes = () if base in METADATA_INPLACE_OPS else _write_args(func)


def _out_names(func: Any) -> frozenset[str]:
    """Names of an ``.out`` variant's output arguments (``out``, ``values``/``indices``...): written,
    never read, so their contents before the op are no input of it. A buffer allocated outside the
    traced ops (torch.compile's generated code allocates in C++) holds garbage there, which would
    read as differing inputs; they are recorded as the op's outputs (it returns them)."""
    try:
        return frozenset(a.name for a in func._schema.arguments if a.is_out)
    except Exception:  # noqa: BLE001 - no schema: every argument is an input
        return frozenset()


def _received() -> bool:
    """Whether the op being dispatched was called while torch rebuilt a tensor received from another
    process: ``torch/multiprocessing/reductions.py`` among the few Python frames above the handler."""
    try:
        frame = sys._getframe(2)
        for _ in range(8):
            if frame is None:
                return False
            if frame.f_code.co_filename.endswith(_RECEIPT_FILE):
                return True
            frame = frame.f_back
    except Exception:  # noqa: BLE001 - no frames: counted with the program's own ops
        pass
    return False


def _draws(func: Any, base: str) -> bool:
    """Whether the op draws random numbers: a ``Generator?`` or ``dropout_p`` argument in its schema
    (attention kernels draw their dropout mask from the default generator), or a random op's name
    (:data:`RANDOM_OPS`), but not a backward (``native_dropout_backward`` reads a mask), an op that
    says it has no dropout, or a ``_philox_*`` op (its key is an argument)."""
    try:
        if any(a.name == "dropout_p" or "Generator" in str(a.type) for a in func._schema.arguments):
            return True
    except Exception:  # noqa: BLE001 - no schema: the name decides
        pass
    if base.endswith("_backward") or "no_dropout" in base or base.startswith("_philox"):
        return False
    return bool(RANDOM_OPS.search(base))


def _written_args(func: Any) -> tuple[tuple[int, str], ...]:
    """(position, name) of the arguments an op writes when it returns nothing (``Tensor(a!)`` in its
    schema: ``_foreach_add_``, ``_fused_adamw_``, GradScaler's unscale), else (): what such an op
    did is only in those arguments, so they are its outputs. An op that returns what it writes
    (``add_``, ``mm.out``) has its outputs already."""
    try:
        schema = func._schema
        if schema.returns:
            return ()
        return tuple((i, a.name) for i, a in enumerate(schema.arguments)
                     if a.alias_info is not None and a.alias_info.is_write)
    except Exception:  # noqa: BLE001 - no schema (a Python-defined op): its returned values only
        return ()


def _write_args(func: Any) -> tuple[tuple[int, str], ...]:
    """(position, name) of every argument an op writes (``Tensor(a!)`` in its schema: ``self`` of an
    in-place op, ``out=``), whatever it returns: what ends a grown storage's uninitialised state."""
    try:
        return tuple((i, a.name) for i, a in enumerate(func._schema.arguments)
                     if a.alias_info is not None and a.alias_info.is_write)
    except Exception:  # noqa: BLE001 - no schema: it writes nothing the tracer can name
        return ()


_OP_INFO: dict[Any, _OpInfo] = {}
#: the same, by ``id(func)``: an OpOverload hashes in Python (a frame per op), ``id`` does not; an entry
#: is this op's only while ``info.func is func`` (the tracer checks)
_OP_BY_ID: dict[int, _OpInfo] = {}


def op_info(func: Any) -> _OpInfo:
    """The :class:`_OpInfo` of ``func``, made at its first call (kept in :data:`_OP_INFO` and :data:`_OP_BY_ID`)."""
    info = _OP_INFO.get(func)
    if info is None:
        info = _OP_INFO[func] = _OpInfo(func)
    _OP_BY_ID[id(func)] = info
    return info


def _packet(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[0] in ("aten", "c10d", "prims")) else parts[0]


def _is_opaque(x: Any) -> bool:
    return not isinstance(x, (torch.Tensor, int, float, bool, str, torch.dtype, torch.device))


def _non_blocking(base: str, args: tuple, kwargs: dict) -> bool:
    if "non_blocking" in kwargs:
        return bool(kwargs["non_blocking"])
    if base == "copy_" and len(args) > 2:
        return bool(args[2])
    return False


#: GEMM records' ``meta.gemm`` by call shape (:func:`_gemm_key`): the naming reads nothing else
_GEMM_SEEN: dict[tuple, dict | None] = {}
_GEMM_SEEN_MAX = 4096


def _gemm_key(name: str, args: tuple, kwargs: dict, out: Any, grad: bool) -> tuple | None:
    """What a GEMM's name and size depend on when no tensor is passed by keyword: the op, ``grad``,
    every argument (a tensor by shape and strides) and the result's shape and strides. An ``out=``
    tensor is left to the naming itself (whether it aliases ``self`` decides ``acc``). None: not
    cached."""
    tensor = torch.Tensor
    if kwargs:
        for v in kwargs.values():
            if isinstance(v, tensor):
                return None
    key: list[Any] = [name, grad, tuple(kwargs.items()) if kwargs else ()]
    for a in args:
        key.append((a.shape, a.stride()) if isinstance(a, tensor) else a)
    if isinstance(out, tensor):
        key.append((out.shape, out.stride()))
    key = tuple(key)
    try:
        hash(key)
    except TypeError:  # a list argument
        return None
    return key


def _gemm_meta(name: str, args: tuple, kwargs: dict, out: Any, backward: bool) -> dict | None:
    """``{"layout", "acc", "grad", "m", "n", "k", ...}`` for GEMM ops (probes.gemm_naming), else None.
    Calls of one shape share one entry (nothing changes an entry once made). Called for GEMM ops
    only (``_OpInfo.gemm``)."""
    if _gemm_naming is None:
        return None
    try:
        grad = _gemm_naming.backward_gemm(backward)  # not a forward that checkpointing recomputes
        key = _gemm_key(name, args, kwargs, out, grad)
    except Exception:  # noqa: BLE001 - named afresh
        grad, key = backward, None
    if key is not None:
        entry = _GEMM_SEEN.get(key, _GEMM_SEEN)
        if entry is not _GEMM_SEEN:
            return entry
    entry = _gemm_name(name, args, kwargs, out, grad)
    if key is not None:
        if len(_GEMM_SEEN) >= _GEMM_SEEN_MAX:
            _GEMM_SEEN.clear()
        _GEMM_SEEN[key] = entry
    return entry


def _gemm_name(name: str, args: tuple, kwargs: dict, out: Any, grad: bool) -> dict | None:
    """The naming itself; ``grad``: a backward GEMM (:func:`probes.gemm_naming.backward_gemm`)."""
    try:
        call = _gemm_naming.name_gemm(name, args, kwargs, grad, out if isinstance(out, torch.Tensor) else None,
                                     describe=False)
    except Exception:  # noqa: BLE001
        return None
    if call is None:
        return None
    return {"site": call.site, "layout": call.layout, "acc": call.acc, "grad": call.grad,
            "m": call.m, "n": call.n, "k": call.k, "batch": call.batch}


def _tensors_of(value: Any) -> list[torch.Tensor]:
    return [x for x in tree_leaves(value) if isinstance(x, torch.Tensor)]


