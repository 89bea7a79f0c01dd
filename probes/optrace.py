"""The op-level tracer: every ATen op of this rank, fingerprinted, into ``rank<R>/trace.jsonl``.

A :class:`~torch.utils._python_dispatch.TorchDispatchMode` sees every op below autograd (backward
ops included). Each record gets the identity ``op:occurrence`` (counted per op name on this rank,
so two runs align offline whatever the arrival order), input digests taken *before* the op runs
and output digests after, with shape/dtype/numel. Digests are ``torch.hash_tensor`` results kept
on the tensor's device; at flush they are concatenated and read with ONE host transfer.

``torch.hash_tensor`` is an XOR: order-independent, so equal digests are a screen, not proof. An
**order-sensitive** digest (``o``) can prove equality. CPU tensors, inputs and outputs, carry it
*instead of* the XOR (one pass over the bytes: xxh3-64 on the host, over the row-major bytes, or
over the memory of a dense permuted layout such as a transposed weight, whose dim order is then
``ol``). Other devices' tensors carry the XOR, and also ``o`` (a position-keyed mix on the device)
on inputs with ``ordered_digests`` = ``inputs``, on inputs and outputs with ``all``; ``off`` records
XOR digests only, everywhere; ``auto`` is the default. Ops whose failure mode is reordering
(:data:`CHUNKED_OPS`) get position-weighted chunk digests and keep the XOR (equal XOR, different
``o``: the values were reordered). Semantic records mark known boundaries: torch.distributed collectives
(``collective.<fn>``), optimizer step, backward start/end; backward records name the autograd
node that issued them and the forward op that created it.

Records reach the file in bounded batches (every :data:`FLUSH_EVERY` records or
:data:`FLUSH_SECONDS`), so a killed process keeps all but its last moments. A write that fails
(disk full) stops the recording with one message; the program is never broken. A process stopped
by a signal or an uncaught exception gets a footer that says so (``stopped``).

Off unless ``optrace`` is in the probe config; no collective is ever added; the step window, the
rank filter and the record budget bound what is written. docs/trace-format.md describes the file.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import signal
import sys
import threading
import time
import weakref
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_leaves

from forensics.core.ops import RANDOM as RANDOM_OPS  # ops that draw random numbers (the differ reads the same)
from probes import forks as _forks
from probes.config import ProbeConfig
from probes.digests import _GOLDEN, _INT_OF_SIZE, holds_elements, ordered_device, plain_real, row_major_pieces  # noqa: F401  (ordered_device: part of this module's API)
from probes.window import StepWindow, world_size

try:
    from probes import gemm_naming as _gemm_naming
except ImportError:  # pragma: no cover - GEMM records then carry no site
    _gemm_naming = None  # type: ignore[assignment]

#: Signals whose Python handlers (SIGTERM: footer; SIGINT: KeyboardInterrupt) must not run in the
#: middle of a batch write: a handler writing to the same buffered file then fails ("reentrant
#: call"), and the trace loses its footer. They are held for the few microseconds of the write.
_DEFERRED_SIGNALS = {signal.SIGTERM, signal.SIGINT}


class _signals_deferred:
    """Block SIGTERM/SIGINT in this thread while a batch is written; delivered right after."""

    def __enter__(self) -> None:
        self.old = None
        try:
            self.old = signal.pthread_sigmask(signal.SIG_BLOCK, _DEFERRED_SIGNALS)
        except (AttributeError, OSError, ValueError):  # no pthread_sigmask on this platform
            pass

    def __exit__(self, *exc: object) -> None:
        if self.old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self.old)

try:  # order-sensitive digests of CPU tensors; without it CPU tensors carry the XOR digest only
    from xxhash import xxh3_64 as _xxh3_stream
    from xxhash import xxh3_64_hexdigest as _xxh3  # 16 hex digits, made in C (a "%016x" costs as much)
except ImportError:  # pragma: no cover - depends on the environment
    _xxh3 = _xxh3_stream = None

try:  # records are written with orjson when present (the same compact JSON, several times faster)
    import orjson as _orjson

    _LINE = _orjson.OPT_APPEND_NEWLINE

    def _dumps(rec: dict[str, Any]) -> bytes:
        """One record as a line of UTF-8 JSON, newline included (bytes: the file is binary, nothing
        is re-encoded)."""
        try:
            return _orjson.dumps(rec, default=str, option=_LINE)
        except TypeError:
            try:  # a key that is not a string (slower option, so only when needed)
                return _orjson.dumps(rec, default=str, option=_LINE | _orjson.OPT_NON_STR_KEYS)
            except TypeError:  # an integer beyond 64 bits...: the standard encoder
                return (json.dumps(rec, separators=(",", ":"), default=str) + "\n").encode()
except ImportError:  # pragma: no cover - depends on the environment
    def _dumps(rec: dict[str, Any]) -> bytes:
        return (json.dumps(rec, separators=(",", ":"), default=str) + "\n").encode()

#: what a random op's ``{"t": "generator"}`` input entry digests (header ``generators``; traces
#: without it record no generator state, so their random ops have one input entry fewer)
GENERATORS_NAME = "blake2b-64 of the state of the generator a random op draws from (given, else the device default)"
#: events recorded beside the dispatcher's ops (header ``storage_events``; older traces have none)
STORAGE_EVENTS = ["storage.resize_"]
SCHEMA = "forensics.optrace"
SCHEMA_VERSION = 1
HASH_NAME = "torch.hash_tensor(xor,float64-bits)"
#: the XOR digest of CPU tensors whose elements are 4 or 8 bytes (numpy, ~6x faster than hash_tensor
#: there): XOR of the elements' own bits. Order-independent like hash_tensor's, recorded in the header
HASH_NAME_CPU = f"{HASH_NAME}; CPU tensors of 4- and 8-byte real elements: xor(element bits)"
_XOR_WORD = {4: np.uint32, 8: np.uint64}
#: dtypes digested on the fast CPU path (their numpy view has the tensor's own bytes)
_FAST_WORD = {torch.float32: np.uint32, torch.int32: np.uint32, torch.float64: np.uint64, torch.int64: np.uint64}
#: the same dtypes' entry names and element sizes (the in-place fast path asks one dict)
_FAST_INFO = {dtype: (str(dtype).removeprefix("torch."), torch.empty((), dtype=dtype).element_size())
              for dtype in _FAST_WORD}
_PLAIN = (torch.Tensor, torch.nn.Parameter)
#: a lazy module's parameter before its first forward (``nn.LazyLinear``...): its shape, numel and
#: data raise by design until ``materialize``; the tracer records what it has (dtype) and no shape
_UNINITIALIZED = getattr(torch.nn.parameter, "UninitializedTensorMixin", ())
_STRIDED = torch.strided
CHUNK_NAME = "position-weighted int64 sum, 16 chunks"
ORDERED_CPU = "xxh3_64(bytes in memory order; 'ol' gives the dim order when not row-major)"
ORDERED_DEVICE = "fmix64(bits^position) sum mod 2^64"
ORDERED_MODES = ("auto", "inputs", "all", "off")
#: what torch.compile'd code does under the tracer (config ``extra.compiled``, header ``compiled``):
#: "compiled" runs it compiled, as it runs untraced (the mode is off while dynamo compiles and sees
#: the ATen calls the compiled code makes; its fused kernels are below the dispatcher); "eager"
#: makes torch.compile fall back to eager so every op is seen (torch's default for a dispatch mode),
#: which runs other kernels than the program does
COMPILED_MODES = ("compiled", "eager")
#: which CPU tensors carry ``o`` (header ``ordered.cpu_sides``): one kind of digest on both sides of
#: every op, so a producer's output and its consumer's input compare (and link) by the same digest
CPU_SIDES = ("inputs and outputs, in every mode but off; with it no XOR digest 'h' (one pass over the bytes), "
             "except on chunked ops, which keep 'h' and 'c' to tell a reordering")

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
N_CHUNKS = 16
FLUSH_EVERY = 2048  # records kept pending (digests on device) before one host transfer and write
FLUSH_SECONDS = 1.0  # ... or this long since the last write, whichever comes first
#: the trace file's write buffer: a batch's lines are copied into it and go to the OS in one write
#: at the end of the batch (a buffer allocated once, not a joined copy of every batch)
WRITE_BUFFER = 1 << 20
MAX_FORWARD_NODES = 1 << 20  # autograd sequence numbers remembered to name a backward op's forward op
_MASK = (1 << 64) - 1


def _dynamo_callback() -> Any:
    """The frame-evaluation callback torch._dynamo has installed in this thread (None: no frame is
    being compiled, and running the handler without ``torch._dynamo.disable`` is the same thing).
    Where torch does not say, a non-None answer keeps the disabled path."""
    return True


try:
    from torch._C._dynamo.eval_frame import get_eval_frame_callback as _dynamo_callback  # noqa: F811
except Exception:  # noqa: BLE001 - private API: without it the handler always takes the disabled path
    pass


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
                 "written", "out_names", "overwrites", "receivable", "draws", "writes")

    def __init__(self, func: Any) -> None:
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


def _generator_entry(tensors: list, others: list, kwargs: dict) -> dict[str, Any] | None:
    """The input entry of the generator a random op is about to draw from (the one it was given,
    else its device's default generator): a digest of its state (``{"t": "generator"}``), or None
    when there is no generator we can read (a device without a default one). The state is an input
    of the op as much as its tensors: equal tensors and another state give other bits."""
    try:
        gen = next((v for v in others if isinstance(v, torch.Generator)), None)
        if gen is None:
            device = tensors[0].device if tensors else torch.device(kwargs.get("device") or "cpu")
            if device.type == "cpu":
                gen = torch.default_generator
            elif device.type == "cuda" and torch.cuda.is_initialized():
                index = device.index if device.index is not None else torch.cuda.current_device()
                gen = torch.cuda.default_generators[index]
            else:
                return None
        state = gen.get_state()
        return {"s": None, "t": "generator", "n": 1,
                "h": hashlib.blake2b(state.numpy().tobytes(), digest_size=8).hexdigest()}
    except Exception:  # noqa: BLE001 - not recorded: the differ says the state is unknown
        return None


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


#: the autograd graph task running on this thread (-1: none, so not inside a backward pass); a torch
#: without this private API reads as never in backward (no op breaks over it)
_graph_task_id = getattr(torch._C, "_current_graph_task_id", None) or (lambda: -1)
#: autograd's private accessors, looked up once (a torch without one records no autograd metadata)
_autograd_node = getattr(torch._C, "_current_autograd_node", None) or (lambda: None)
_grad_enabled = torch.is_grad_enabled
_sequence_nr = getattr(getattr(torch._C, "_autograd", None), "_get_sequence_nr", None) or (lambda: None)

_OP_INFO: dict[Any, _OpInfo] = {}
_DTYPE_NAME: dict[Any, str] = {}


def _dtype_name(dtype: Any) -> str:
    name = _DTYPE_NAME.get(dtype)
    if name is None:
        name = _DTYPE_NAME[dtype] = str(dtype).removeprefix("torch.")
    return name


#: ctypes byte-array types by length (the fast CPU digest reads a tensor's bytes where they lie); bounded
_BYTES_AT: dict[int, Any] = {}
_BYTES_AT_MAX = 1 << 12


def _bytes_type(nbytes: int) -> Any:
    """``ctypes.c_char * nbytes``, made once per size (bounded cache :data:`_BYTES_AT`)."""
    buf = _BYTES_AT.get(nbytes)
    if buf is None:
        if len(_BYTES_AT) >= _BYTES_AT_MAX:
            _BYTES_AT.clear()
        buf = _BYTES_AT[nbytes] = ctypes.c_char * nbytes
    return buf


def _packet(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[0] in ("aten", "c10d", "prims")) else parts[0]


def _hash_bits(x: torch.Tensor) -> torch.Tensor:
    """``hash_tensor`` of :func:`_bits` (for dtypes hash_tensor refuses), over bounded pieces XORed
    together: the XOR of every word, the same value as over one copy of the whole tensor."""
    total = torch.zeros((), dtype=torch.int64, device=x.device)
    for _start, piece in row_major_pieces(x):
        h = torch.hash_tensor(_bits(piece))
        total = total ^ (h if h.dtype == torch.int64 else h.view(torch.int64))
    return total


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's values as int64 words, the way hash_tensor sees them (floats via float64 bits)."""
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.is_floating_point():
        return t.to(torch.float64).view(torch.int64)
    return t.to(torch.int64)


def _raw(x: torch.Tensor) -> Any:
    """A contiguous CPU tensor's bytes, read in place through ctypes (a buffer xxh3 reads). Never
    ``x.numpy()``: that marks the tensor's storage not resizable for good, and FSDP resizes an
    unsharded parameter's storage to nothing after use; a traced FSDP program died there
    ("Trying to resize storage that is not resizable")."""
    _check_readable(x)
    n = x.numel() * x.element_size()
    return _bytes_type(n).from_address(x.data_ptr()) if n else b""


def _check_readable(x: torch.Tensor) -> None:
    """Raise unless ``x`` is a plain strided CPU tensor whose storage holds every element it reaches:
    anything else (a DTensor, as FSDP2's parameters are; a freed storage) has no memory of its own
    at ``data_ptr`` to read, and reading there kills the process."""
    if x.__class__ not in _PLAIN or not x.is_cpu or x.layout is not _STRIDED or not holds_elements(x):
        raise TypeError("no memory of its own to read in place")


def _np_words(x: torch.Tensor, word: Any) -> np.ndarray:
    """A CPU tensor's elements as unsigned words of its element size (numpy ``word``), a read-only
    view with its own strides over its memory, through ctypes (see :func:`_raw`)."""
    _check_readable(x)
    if x.numel() == 0:
        return np.empty(tuple(x.shape), dtype=word)
    size = x.element_size()
    span = 1 + sum((n - 1) * st for n, st in zip(x.shape, x.stride()))
    base = np.frombuffer(_bytes_type(span * size).from_address(x.data_ptr()), dtype=word, count=span)
    return np.lib.stride_tricks.as_strided(base, shape=tuple(x.shape), strides=tuple(st * size for st in x.stride()),
                                           writeable=False)


def ordered_cpu(t: torch.Tensor) -> str | None:
    """Order-sensitive digest of a CPU tensor: xxh3-64 over its bytes in row-major order (a
    non-contiguous tensor is read in bounded row-major pieces, :func:`row_major_pieces`, fed to
    one streaming xxh3: the same value as over a contiguous copy, without one). None when xxhash
    is missing or the dtype has no bytes."""
    if _xxh3 is None:
        return None
    x = plain_real(t)
    size = x.element_size()
    if size not in _INT_OF_SIZE:
        return None
    if x.is_contiguous():
        return _xxh3(_raw(x))
    h = _xxh3_stream()
    for _start, piece in row_major_pieces(x):
        h.update(_raw(piece.contiguous()))  # pieces are row-major already: contiguous() is no copy
    return h.hexdigest()


def dense_order(t: torch.Tensor) -> list[int] | None:
    """The dim order of a dense, non-overlapping tensor that is not row-major (``t.permute(order)``
    is row-major contiguous: its row-major bytes are ``t``'s memory, read in place); None for a
    row-major tensor or one with gaps or overlaps (broadcast, strided slices). Size-1 dims, whose
    strides carry no layout, go first in index order, so equal layouts give equal orders."""
    if t.is_contiguous():
        return None
    shape, stride = t.shape, t.stride()
    order = sorted(range(t.dim()), key=lambda d: (0, 0, d) if shape[d] == 1 else (1, -stride[d], d))
    return order if t.permute(order).is_contiguous() else None


def ordered_cpu_layout(t: torch.Tensor) -> tuple[str | None, list[int] | None]:
    """``(digest, layout)``: :func:`ordered_cpu`, except that a dense tensor in a permuted layout (a
    transposed weight) is read in memory order, without a copy, and ``layout`` is its dim order
    (the entry's ``ol``); None for row-major bytes."""
    if _xxh3 is None:
        return None, None
    x = plain_real(t)
    order = dense_order(x) if x.dim() > 1 else None
    if order is None:
        return ordered_cpu(x), None
    size = x.element_size()
    if size not in _INT_OF_SIZE:
        return None, None
    return _xxh3(_raw(x.permute(order))), order  # dense: its memory, read in place


def xor_cpu(t: torch.Tensor) -> str | None:
    """Order-independent digest of a CPU tensor of 4- or 8-byte real elements: the XOR of every
    element's bits (strided views read in place, no copy). None for other tensors (hash_tensor's)."""
    x = t.detach()
    size = x.element_size()
    if size not in _XOR_WORD or x.is_complex() or x.is_conj() or x.is_neg() or x.dtype == torch.bool:
        return None
    return format(int(np.bitwise_xor.reduce(_np_words(x, _XOR_WORD[size]), axis=None)), "016x")


class _Digest:
    """A digest still on its device (an int64 tensor of 1 or N values), resolved at the flush that
    writes its record. Entries hold these, not indexes, so a record whose digests were taken
    before other records were flushed (a collective's or an optimizer step's inputs) is resolved
    with its own values."""

    __slots__ = ("tensor", "many")
    #: how many were ever made and resolved (in this process, all tracers): while they are equal, no
    #: record anywhere holds one (CPU digests are text from the start) and a flush skips the search
    made = 0
    resolved = 0
    count_lock = threading.Lock()  # exact counts from any thread (a device digest costs far more)

    def __init__(self, tensor: torch.Tensor, many: bool = False) -> None:
        flat = tensor.reshape(-1)
        self.tensor = flat if flat.dtype == torch.int64 else flat.view(torch.int64)
        self.many = many
        with _Digest.count_lock:
            _Digest.made += 1


def _resolve(records: list[dict[str, Any]]) -> None:
    """Replace every :class:`_Digest` in ``records`` by hex text: one host transfer per device."""
    slots: list[tuple[dict, str, _Digest]] = []
    for rec in records:
        for side in ("in", "out"):
            for e in rec[side]:
                if e is None:
                    continue
                for key in ("h", "o", "c"):
                    v = e.get(key)
                    if v.__class__ is _Digest:
                        slots.append((e, key, v))
    if not slots:
        return
    with _Digest.count_lock:
        _Digest.resolved += len({id(d) for _, _, d in slots})  # one digest can fill two entries (a view's)
    by_device: dict[Any, list[int]] = {}
    for i, (_, _, d) in enumerate(slots):
        by_device.setdefault(d.tensor.device, []).append(i)
    values: list[list[int] | None] = [None] * len(slots)
    for idx in by_device.values():
        flat = torch.cat([slots[i][2].tensor for i in idx]).tolist()  # one device-to-host transfer
        pos = 0
        for i in idx:
            n = slots[i][2].tensor.numel()
            values[i] = flat[pos:pos + n]
            pos += n
    for (e, key, d), vals in zip(slots, values):
        hexes = [format(v & _MASK, "016x") for v in vals or []]
        e[key] = hexes if d.many else hexes[0]


class OpTracer(TorchDispatchMode):
    """The dispatch mode plus the rank-local writer."""

    def __init__(self, cfg: ProbeConfig, window: StepWindow, out_dir: Path, rank: int) -> None:
        super().__init__()
        self.cfg, self.window, self.rank = cfg, window, rank
        self.pid = os.getpid()
        self.max_records = int(cfg.max_records)
        self.chunk_digests = bool(cfg.chunk_digests)
        self.lock = threading.RLock()
        self.seq = 0
        self.dropped = 0
        self.counts: dict[str, int] = {}
        #: pending records: a line of JSON already (bytes) when it held no device digest, else the
        #: record itself, its device digests resolved and the line made at the flush
        self.records: list[bytes | dict[str, Any]] = []
        self.phase_stack: list[str] = []
        self.closed = False
        self.entered = False
        self._guarded: Any = None
        self.out_dir = Path(out_dir)
        self.file: Any = None  # opened at the first flush with records (a launcher that runs no op writes nothing)
        self.path: Path | None = None
        extra = cfg.extra if isinstance(cfg.extra, dict) else {}
        mode = extra.get("ordered_digests", "auto")
        self.ordered_mode = mode if mode in ORDERED_MODES else "auto"
        compiled = extra.get("compiled", "compiled")
        self.compiled_mode = compiled if compiled in COMPILED_MODES else "compiled"
        type(self)._runs_compiled = self.compiled_mode == "compiled"  # read by ignore_compile_internals
        #: (step number, whether the window holds it): what _recording last asked the window; one
        #: attribute, replaced whole, so a thread never reads one step's number with another's answer
        self._active_for: tuple[Any, bool] = (None, False)
        self.last_flush = time.monotonic()
        self.written = 0  # records in the file
        self.failed: str | None = None  # the write error that stopped the recording
        self.in_write = False  # inside add_record/flush (a signal handler closing now must not re-enter)
        self.uncaught: str | None = None  # the exception type that ended the program, if any
        self.fwd_by_seq: dict[int, str] = {}  # autograd sequence number -> forward op identity
        #: storages a storage-level resize grew (``UntypedStorage.resize_``, FSDP2's alloc_storage) that
        #: no traced op has written since: id(storage) -> (weakref to it, the resize record's identity,
        #: bytes kept from before the resize). Their bytes past those are uninitialised memory; a traced
        #: op's tensor entry on one gets "g". Empty in almost every program: the per-op cost is one test.
        self.grown: dict[int, tuple[Any, str, int]] = {}
        try:
            from probes.optrace_program import Issuers  # noqa: PLC0415

            self.issuers: Any = Issuers()
        except Exception:  # noqa: BLE001 - the fingerprint is best effort
            self.issuers = None

    # ------------------------------------------------------------------ file
    def _ensure_open(self) -> None:
        if self.file is None:
            self.path = self._open(self.out_dir)
            self._write_header()

    def _open(self, out_dir: Path) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "trace.jsonl"
        try:
            self.file = open(path, "xb", buffering=WRITE_BUFFER)  # never overwrite a capture; UTF-8 JSON lines
        except FileExistsError:  # a second process on this rank (spawned worker): its own file
            path = out_dir / f"trace.{self.pid}.jsonl"
            self.file = open(path, "xb", buffering=WRITE_BUFFER)
        return path

    def _write_header(self) -> None:
        from forensics.core.environment import relevant_env  # noqa: PLC0415 (pure stdlib, no torch)

        command = self.cfg.extra.get("command") if isinstance(self.cfg.extra, dict) else None
        header = {
            "type": "header", "schema": SCHEMA, "version": SCHEMA_VERSION, "rank": self.rank,
            "world_size": world_size(), "argv": command or list(getattr(sys, "orig_argv", sys.argv)),
            "script_argv": list(sys.argv), "pid": self.pid,
            "versions": {"torch": torch.__version__, "python": sys.version.split()[0]},
            "env": relevant_env(), "steps": self.cfg.steps, "ranks": self.cfg.ranks,
            "max_records": self.max_records, "hash": HASH_NAME_CPU,
            "chunks": CHUNK_NAME if self.chunk_digests else None,
            "chunked_ops": sorted(CHUNKED_OPS) if self.chunk_digests else [],
            "ordered": self._ordered_info(),
            "compiled": self.compiled_mode,
            "generators": GENERATORS_NAME,
            "storage_events": STORAGE_EVENTS,
        }
        header.update(self._program_info())
        self.file.write((json.dumps(header, default=str) + "\n").encode())

    def _ordered_info(self) -> dict[str, Any]:
        mode = self.ordered_mode
        cpu = ORDERED_CPU if mode != "off" and _xxh3 is not None else None
        return {"mode": mode, "cpu": cpu, "device": ORDERED_DEVICE if mode in ("inputs", "all") else None,
                "outputs": mode == "all", **({"cpu_sides": CPU_SIDES} if cpu else {}),
                **({"note": "xxhash is not installed: CPU tensors carry the order-independent digest only"}
                   if mode != "off" and _xxh3 is None else {})}

    def _program_info(self) -> dict[str, Any]:
        """``program`` (script hash, interpreter, the local files and packages imported so far, git
        commit, local sources), ``packages`` (versions of the packages whose code issued traced ops
        so far; the footer has the complete sets) and ``switches`` (the in-process switches now)."""
        out: dict[str, Any] = {}
        try:
            from probes.optrace_program import program, script_path  # noqa: PLC0415

            iss = self.issuers
            sources = iss.source_hashes(exclude=script_path()) if iss is not None else {}
            out["program"] = program(sources, iss, exclude=(str(self._own_root()),))
            out["packages"] = iss.package_versions() if iss is not None else {}
        except Exception as e:  # noqa: BLE001 - best effort: never break the program
            out["program"] = {"note": f"not recorded: {type(e).__name__}"}
        out["switches"] = self._switches()
        return out

    def _own_root(self) -> Path:
        """The folder this trace is written under (``forensics trace --out DIR``): the tool's own
        output, whose files never count as the program's."""
        return Path(self.cfg.out_dir).resolve()

    @staticmethod
    def _switches() -> dict[str, Any]:
        try:
            from probes.optrace_program import switches  # noqa: PLC0415

            return switches()
        except Exception as e:  # noqa: BLE001 - best effort: never break the program
            return {"note": f"not recorded: {type(e).__name__}"}

    # ------------------------------------------------------------------ digests
    def _ordered_for(self, t: torch.Tensor, side: str) -> bool:
        """Whether this tensor gets an order-sensitive digest (``ordered_digests`` mode): a CPU tensor,
        input or output, in every mode but ``off`` (:data:`CPU_SIDES`); another device's inputs in
        ``inputs`` and ``all``, its outputs in ``all``."""
        mode = self.ordered_mode
        if mode == "off":
            return False
        if t.is_cpu:
            return True
        return mode == "all" or (side == "in" and mode == "inputs")

    def _digest(self, t: torch.Tensor, chunks: bool, ordered: bool = False, xor: bool = False) -> dict[str, Any]:
        """The entry of one tensor: shape, dtype, numel and digests. A CPU tensor with an
        order-sensitive digest gets no XOR digest unless ``xor`` (or chunk digests) ask for one. A
        tensor whose storage does not hold its elements (freed, as FSDP frees unsharded parameters
        between uses) has no bytes to read: metadata only."""
        dtype = t.dtype
        fast = _FAST_INFO.get(dtype)
        if (fast is not None and ordered and not xor and not chunks and _xxh3 is not None and t.__class__ in _PLAIN
                and t.is_cpu and t.layout is _STRIDED and t.is_contiguous() and not t.is_neg()):
            # the common case: a row-major CPU tensor's bytes, read in place (no numpy view, no detach)
            try:
                numel = t.numel()
                size = fast[1]
                nbytes = numel * size
                if numel and (t.storage_offset() * size + nbytes <= t.untyped_storage().nbytes()):  # holds_elements, row-major
                    buf = _BYTES_AT.get(nbytes) or _bytes_type(nbytes)
                    return {"s": list(t.shape), "t": fast[0], "n": numel,
                            "o": _xxh3(buf.from_address(t.data_ptr()))}
            except Exception:  # noqa: BLE001 - the general path below decides, and never raises
                pass
        if t.__class__ not in _PLAIN and isinstance(t, _UNINITIALIZED):  # no shape yet: reading one raises
            return {"s": None, "t": _DTYPE_NAME.get(dtype) or _dtype_name(dtype), "n": None, "ev": "metadata"}
        word = _FAST_WORD.get(dtype)
        numel = t.numel()
        entry: dict[str, Any] = {"s": list(t.shape), "t": _DTYPE_NAME.get(dtype) or _dtype_name(dtype), "n": numel}
        if numel and not holds_elements(t):
            entry["ev"] = "metadata"
            return entry
        if (word is not None and numel and not chunks and t.is_cpu and t.__class__ in _PLAIN and t.layout is _STRIDED
                and not t.is_neg()):  # its memory in place: the XOR digest, or a transposed weight in memory order
            try:
                x = t
                if not ordered or _xxh3 is None or xor:
                    entry["h"] = format(int(np.bitwise_xor.reduce(_np_words(x, word), axis=None)), "016x")
                if ordered and _xxh3 is not None:  # alone, it proves equality and difference
                    if x.is_contiguous():  # its bytes, read in place
                        entry["o"] = _xxh3(_raw(x))
                    else:  # a transposed weight in memory order (its "ol"), or a row-major copy
                        o, layout = ordered_cpu_layout(x)
                        if o is None:
                            raise ValueError("no order-sensitive digest")  # the general path decides
                        entry["o"] = o
                        if layout is not None:
                            entry["ol"] = layout
                return entry
            except Exception:  # noqa: BLE001 - the general path below decides
                entry = {"s": entry["s"], "t": entry["t"], "n": numel}
        if t.is_sparse or t.is_quantized or t.device.type == "meta" or t.__class__ not in _PLAIN:  # a DTensor too:
            # no memory of its own, and a digest through its ops would add collectives to the step
            entry["ev"] = "metadata"
            return entry
        try:
            if ordered and not xor and t.device.type == "cpu" and not (chunks and self.chunk_digests):
                o, layout = ordered_cpu_layout(t)
                if o is not None:  # the order-sensitive digest alone, as on the fast path
                    entry["o"] = o
                    if layout is not None:
                        entry["ol"] = layout
                    return entry
            if t.numel() == 0:
                entry["h"] = "0" * 16
            else:
                x = t.detach()
                h = xor_cpu(x) if t.device.type == "cpu" else None
                if h is not None:
                    entry["h"] = h
                else:
                    try:
                        hd = torch.hash_tensor(x)
                    except (RuntimeError, NotImplementedError):
                        hd = _hash_bits(x)
                    entry["h"] = _Digest(hd)
                if chunks and self.chunk_digests:
                    entry["c"] = _Digest(self._chunks(x), many=True)
            if ordered:
                if t.device.type == "cpu":
                    o, layout = ordered_cpu_layout(t)
                    if o is not None:
                        entry["o"] = o
                        if layout is not None:
                            entry["ol"] = layout
                else:
                    entry["o"] = _Digest(ordered_device(t))
        except Exception:  # noqa: BLE001 - never let a digest break the user's op
            entry.pop("h", None)
            entry.pop("c", None)
            entry.pop("o", None)
            entry.pop("ol", None)
            entry["ev"] = "metadata"
            return entry
        return entry

    def _view_entry(self, in0: dict[str, Any], x: torch.Tensor, out: torch.Tensor, order_view: bool) -> dict[str, Any] | None:
        """The entry of a same-element view's output made from its input's digests, or None (digest
        it). The XOR holds the same elements whatever the order. The order-sensitive digest is the
        same value when the view keeps the row-major order of a row-major input, and, on the CPU,
        when input and output are dense over the same bytes (``t`` of a weight): its memory order is
        the input's, with the output's own dim order (``ol``). Nothing runs between the two reads but
        the view, which writes nothing."""
        ordered_out = self._ordered_for(out, "out")
        entry: dict[str, Any] = {"s": list(out.shape), "t": in0["t"], "n": out.numel()}
        if "h" in in0:
            entry["h"] = in0["h"]
        elif not ordered_out:
            return None
        if not ordered_out:
            return entry
        o = in0.get("o")
        if o is None:
            return None
        if order_view and "ol" not in in0:
            entry["o"] = o
            return entry
        if o.__class__ is not str or not out.is_cpu or out.data_ptr() != x.data_ptr():
            return None  # a device digest follows the row-major order: no memory-order shortcut
        x_dense = "ol" in in0 or x.is_contiguous()  # "o" read x's memory (not a row-major copy)
        if not x_dense:
            return None
        out_order = dense_order(out)
        if out_order is None and not out.is_contiguous():
            return None  # gaps or overlaps: not the same bytes
        entry["o"] = o
        if out_order is not None:
            entry["ol"] = out_order
        return entry

    def _digest_once(self, tensors: list[torch.Tensor], chunks: bool, every: bool, cpu: bool) -> list[dict[str, Any]]:
        """Input entries of an op that takes one tensor object more than once: digested once (the same
        object, read at the same moment, holds the same bytes), its entry repeated."""
        done: dict[int, dict[str, Any]] = {}
        out = []
        for x in tensors:
            entry = done.get(id(x))
            if entry is None:
                entry = done[id(x)] = self._digest(x, chunks, every or (cpu and x.is_cpu))
            out.append(entry)
        return out

    @staticmethod
    def _chunks(x: torch.Tensor) -> torch.Tensor:
        """Position-weighted digests of N_CHUNKS contiguous chunks (a permutation changes them):
        chunk j sums ``bits[p] * (p * GOLDEN | 1)`` mod 2^64 over its row-major positions p.
        Summed over bounded pieces (:func:`row_major_pieces`; sums mod 2^64 do not depend on the
        grouping), so the int64 temporaries stay at :data:`probes.digests.CHUNK` elements however
        large the tensor (an embedding table, a MoE buffer)."""
        if x.is_complex():
            x = torch.view_as_real(x)
        n = x.numel()
        k = min(N_CHUNKS, n)
        size = -(-n // k)
        sums = torch.zeros(k, dtype=torch.int64, device=x.device)
        for start, piece in row_major_pieces(x):
            end = start + piece.numel()
            prod = _bits(piece) * torch.arange(start, end, device=x.device, dtype=torch.int64).mul_(_GOLDEN).bitwise_or_(1)
            pos = start
            head = min(end, -(-start // size) * size)  # the first chunk boundary at or after start
            if head > start:  # the tail of a chunk begun in an earlier piece
                sums[start // size] += prod[:head - start].sum()
                pos = head
            full = (end - pos) // size
            if full:  # whole chunks: one reduction
                j = pos // size
                sums[j:j + full] += prod[pos - start:pos - start + full * size].view(full, size).sum(1)
                pos += full * size
            if pos < end:  # the head of a chunk the next piece finishes
                sums[pos // size] += prod[pos - start:].sum()
        return sums

    @staticmethod
    def _args_digest(values: list[Any]) -> dict[str, Any] | None:
        """Non-tensor arguments (scalars, sizes, dtypes) as one stable digest; None when none. Equal
        argument lists share one entry (nothing changes an entry once made)."""
        if not values:
            return None
        key = _args_key(values)
        entry = _ARGS_SEEN.get(key) if key is not None else None
        if entry is None:
            text = "|".join(_stable_repr(v) for v in values)
            entry = {"s": None, "t": "args", "n": len(values), "h": format(zlib.crc32(text.encode()), "016x")}
            if key is not None:
                if len(_ARGS_SEEN) >= _ARGS_SEEN_MAX:
                    _ARGS_SEEN.clear()
                _ARGS_SEEN[key] = entry
        return entry

    # ------------------------------------------------------------------ recording
    def _recording(self) -> bool:
        step = self.window.step
        asked = self._active_for
        if step != asked[0]:  # the window's answer, asked once per step number
            asked = self._active_for = (step, step in self.window.steps)
        return asked[1] and not self.closed and self.failed is None and not _forks.foreign(self.pid)

    def _phase(self, backward: bool | None = None) -> str:
        if self.phase_stack:
            return self.phase_stack[-1]
        if backward is None:
            backward = _graph_task_id() != -1
        return "backward" if backward else "forward"

    def _budget_ok(self) -> bool:
        if self.seq >= self.max_records:
            self.dropped += 1
            return False
        return True

    def add_record(self, name: str, kind: str, inputs: list, outputs: list, meta: dict | None = None,
                   autograd_seq: int | None = None, backward: bool | None = None, scope: str | None = None) -> None:
        with self.lock:
            if self.failed is not None or self.closed:
                return
            if self.seq >= self.max_records:  # _budget_ok, inline on the hot path
                self.dropped += 1
                return
            self.in_write = True
            try:
                counts = self.counts  # the identity op:occurrence, counted per op name on this rank
                key = name if scope is None else f"{name}@{scope}"  # a scope counts apart (received data)
                n = counts[key] = counts.get(key, 0) + 1
                identity = f"{key}:{n}"
                stack = self.phase_stack  # _phase, inline on the hot path
                phase = stack[-1] if stack else self._phase(backward)
                rec = {"seq": self.seq, "id": identity, "op": name, "kind": kind,
                       "step": self.window.step, "phase": phase, "in": inputs, "out": outputs}
                if meta:
                    rec["meta"] = meta
                if autograd_seq is not None and autograd_seq not in self.fwd_by_seq:
                    if len(self.fwd_by_seq) >= MAX_FORWARD_NODES:
                        self.fwd_by_seq.clear()
                    self.fwd_by_seq[autograd_seq] = identity  # the first op at this number created the node
                self.seq += 1
                if _Digest.made == _Digest.resolved:  # no device digest pending anywhere, so none in rec:
                    try:  # its line now, while it is in the cache; the dicts are freed and reused at once
                        rec = _dumps(rec)
                    except Exception:  # noqa: BLE001 - the flush makes the line (and says why not)
                        pass
                self.records.append(rec)
            finally:
                self.in_write = False
            if len(self.records) >= FLUSH_EVERY or time.monotonic() - self.last_flush >= FLUSH_SECONDS:
                self.flush()

    #: torch.compile'd code runs compiled under this mode (COMPILED_MODES; set from the config)
    _runs_compiled = True

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """True (the default "compiled"): torch.compile compiles under the tracer as without it, the
        mode off while dynamo compiles and on for what the compiled code dispatches. False
        ("eager"): torch.compile falls back to eager, so that every op reaches the tracer."""
        return cls._runs_compiled

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """Do not let TorchDispatchMode wrap our handler in torch._dynamo.disable at class creation:
        that imports torch._dynamo (seconds per process) and adds a frame per op. The handler below
        takes the dynamo-disabled path only once the program itself has loaded dynamo."""
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        guarded = self._guarded
        if guarded is None and "torch._dynamo" in sys.modules:
            import torch._dynamo  # noqa: PLC0415

            guarded = self._guarded = torch._dynamo.disable(self._dispatch, recursive=True)
        if guarded is not None and _dynamo_callback() is not None:  # dynamo is evaluating frames now
            return guarded(func, types, args, kwargs)
        return self._dispatch(func, types, args, kwargs)

    def _dispatch(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202
        kwargs = kwargs or {}
        step, asked = self.window.step, self._active_for  # _recording, inline on the hot path
        if step != asked[0]:
            asked = self._active_for = (step, step in self.window.steps)
        if not asked[1] or self.closed or self.failed is not None or _forks.forked and os.getpid() != self.pid:  # _forks.foreign, inline
            return func(*args, **kwargs)
        info = _OP_INFO.get(func)
        if info is None:
            info = _OP_INFO[func] = _OpInfo(func)
        name, base = info.name, info.base
        if info.skip:
            return info.call(*args, **kwargs)
        if self.seq >= self.max_records:
            self.dropped += 1
            return info.call(*args, **kwargs)
        chunks = info.chunks
        tensor = torch.Tensor
        if info.out_names and kwargs:  # an .out variant: its output buffers are not inputs
            tensors, others = _split(args, {k: v for k, v in kwargs.items() if k not in info.out_names})
        elif info.overwrites and args and isinstance(args[0], tensor):  # self is written whole, not read
            tensors, others = _split(args[1:], kwargs)
        else:
            tensors, others = _split(args, kwargs)
        mode = self.ordered_mode  # _ordered_for(x, "in") and (x, "out"), once per op
        every, cpu, out_every = mode in ("inputs", "all"), mode != "off", mode == "all"
        if info.lift:
            inputs = [self._digest(x, chunks, every or (cpu and x.is_cpu), xor=True) for x in tensors]
        elif len(tensors) > 1 and (tensors[0] is tensors[1] if len(tensors) == 2 else
                                   len({id(x) for x in tensors}) < len(tensors)):
            inputs = self._digest_once(tensors, chunks, every, cpu)  # one tensor twice: addcmul_(g, g)
        else:
            inputs = [self._digest(x, chunks, every or (cpu and x.is_cpu)) for x in tensors]
        grown = self.grown  # storages a resize grew and no traced op wrote since (almost always empty)
        if grown:
            self._mark_grown(tensors, inputs)
        if info.draws:  # the generator's state, before the draw
            gen = _generator_entry(tensors, others, kwargs)
            if gen is not None:
                inputs.append(gen)
        extra = self._args_digest(others)
        if extra is not None:
            inputs.append(extra)
        meta: dict[str, Any] = {}
        out = info.call(*args, **kwargs)
        kind = "op"
        if info.collective:
            kind, outputs = "collective", []  # in flight until waited: the semantic record has the result
            meta["async"] = True
        elif (info.view and isinstance(out, torch.Tensor) and inputs and isinstance(args[0], torch.Tensor)
              and inputs[0].get("s") is not None and out.numel() == args[0].numel() and out.dtype == args[0].dtype
              and (reused := self._view_entry(inputs[0], args[0], out, info.order_view)) is not None):
            outputs = [reused]
        elif info.written:  # a void op that writes its arguments: their digests after it ran
            outputs, meta["written"] = self._written_outputs(info.written, args, kwargs, chunks, out_every, cpu)
        else:
            if out.__class__ is tensor:
                outputs = [self._digest(out, chunks, out_every or (cpu and out.is_cpu))]
            else:
                outputs = [self._digest(x, chunks, out_every or (cpu and x.is_cpu)) if isinstance(x, tensor) else
                           self._args_digest([x]) for x in tree_leaves(out) if x is not None and not _is_opaque(x)]
        if grown:
            self._grown_after(info, args, kwargs, out, outputs)
        if info.copy and _non_blocking(base, args, kwargs):
            meta["non_blocking"] = True
        backward = _graph_task_id() != -1
        gemm = _gemm_meta(name, args, kwargs, out, backward) if info.gemm else None
        if gemm is not None:
            meta["gemm"] = gemm
        autograd_seq = self._autograd_meta(meta, backward) if backward or _grad_enabled() else None
        if self.issuers is not None:
            try:
                self.issuers.note(sys._getframe(1))
            except Exception:  # noqa: BLE001
                pass
        scope = None
        if info.receivable and _received():  # a batch from another process: counted apart (_received)
            scope = "received"
            meta["received"] = True
        self.add_record(name, kind, inputs, outputs, meta, autograd_seq, backward, scope)
        return out

    # ------------------------------------------------------------------ grown storages
    def _grown_of(self, x: Any) -> str | None:
        """The identity of the resize that grew ``x``'s storage when ``x`` reaches bytes of it that no
        traced op has written since (uninitialised), else None."""
        try:
            st = x.untyped_storage()
            entry = self.grown.get(id(st))
            if entry is None or entry[0]() is not st:
                return None
            numel = x.numel()
            if not numel:
                return None
            kept = entry[2]
            if kept:  # only the bytes past what the resize kept are uninitialised
                last = x.storage_offset() + sum((d - 1) * s for d, s in zip(x.shape, x.stride()))
                if (last + 1) * x.element_size() <= kept:
                    return None
            return entry[1]
        except Exception:  # noqa: BLE001 - no storage (a wrapper subclass): nothing to say
            return None

    def _mark_grown(self, tensors: list, entries: list) -> None:
        """``g`` on the entries of tensors read from a grown storage no traced op has written."""
        for x, entry in zip(tensors, entries):
            ident = self._grown_of(x)
            if ident is not None:
                entry["g"] = ident

    def _grown_after(self, info: _OpInfo, args: tuple, kwargs: dict, out: Any, outputs: list) -> None:
        """After an op ran: the storages it wrote (its ``Tensor(a!)`` arguments; a collective's
        returned buffers) are no longer uninitialised; its outputs still on a grown storage (a view
        of one) get ``g``."""
        try:
            grown = self.grown
            written = [args[pos] if pos < len(args) else kwargs.get(name) for pos, name in info.writes]
            if info.collective:
                written.append(out)
            for t in _tensors_of(written):
                try:
                    grown.pop(id(t.untyped_storage()), None)
                except Exception:  # noqa: BLE001
                    pass
            if not grown or info.written or info.collective:
                return
            leaves = [out] if isinstance(out, torch.Tensor) else [
                x for x in tree_leaves(out) if x is not None and not _is_opaque(x)]
            if len(leaves) == len(outputs):  # the entries made above, leaf by leaf
                tensors = [(x, e) for x, e in zip(leaves, outputs) if isinstance(x, torch.Tensor)]
                self._mark_grown([x for x, _ in tensors], [e for _, e in tensors])
        except Exception:  # noqa: BLE001 - bookkeeping never breaks the op
            pass

    def storage_resized(self, storage: Any, old: int) -> None:
        """A storage-level resize (``UntypedStorage.resize_``, outside the dispatcher) ran: a
        ``storage.resize_`` record, and a storage that grew is remembered until a traced op writes
        it (its new bytes are uninitialised). Never raises."""
        try:
            new = storage.nbytes()
            if new == old or not self._recording():
                return
            key = id(storage)
            entry = self.grown.get(key)
            if entry is not None and entry[0]() is not storage:
                entry = None
            device = storage.device.type
            n0 = self.seq
            self.add_record("storage.resize_", "event", [self._args_digest([old, new, device])], [],
                            {"bytes": [old, new], "device": device})
            if new == 0:
                self.grown.pop(key, None)
            elif new > old or entry is not None:
                kept = min(old, new) if entry is None else min(entry[2], new)
                if new > old and self.seq > n0:
                    ident = f"storage.resize_:{self.counts.get('storage.resize_', 0)}"
                elif entry is not None:
                    ident = entry[1]
                else:
                    return
                grown = self.grown

                def forget(ref: Any, key: int = key) -> None:
                    if grown.get(key, (None,))[0] is ref:
                        grown.pop(key, None)

                self.grown[key] = (entry[0] if entry is not None else weakref.ref(storage, forget), ident, kept)
        except Exception:  # noqa: BLE001 - never break the program's resize
            pass

    def _written_outputs(self, written: tuple[tuple[int, str], ...], args: tuple, kwargs: dict, chunks: bool,
                         out_every: bool, cpu: bool) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """Entries of the tensors a void op wrote, argument by argument (a list argument in its
        order), and how many each argument gave (``meta.written``: which output is which)."""
        outputs: list[dict[str, Any]] = []
        counts: dict[str, int] = {}
        for pos, name in written:
            value = args[pos] if pos < len(args) else kwargs.get(name)
            tensors = [x for x in (value if isinstance(value, (list, tuple)) else (value,)) if isinstance(x, torch.Tensor)]
            outputs.extend(self._digest(x, chunks, out_every or (cpu and x.is_cpu)) for x in tensors)
            counts[name] = len(tensors)
        return outputs, counts

    def _autograd_meta(self, meta: dict[str, Any], backward: bool) -> int | None:
        """Backward ops (``backward``: inside autograd's backward pass): ``meta.node`` (the autograd
        node issuing them) and ``meta.fwd`` (the forward op that created it). Forward ops: the
        autograd sequence number they run at (returned), which is the creator's number + 1 for the
        node they create."""
        try:
            if backward:
                node = _autograd_node()
                if node is not None:
                    meta["node"] = node.name()
                    fwd = self.fwd_by_seq.get(node._sequence_nr() + 1)
                    if fwd is not None:
                        meta["fwd"] = fwd
                return None
            if _grad_enabled():
                return int(_sequence_nr())
        except Exception:  # noqa: BLE001 - private APIs: best effort
            pass
        return None

    # ------------------------------------------------------------------ semantic records
    def semantic(self, name: str, kind: str, inputs: list[torch.Tensor], outputs: list[torch.Tensor],
                 meta: dict | None = None) -> None:
        """A boundary record (collective, optimizer, backward) from outside the dispatch mode."""
        if not self._recording() or self.seq >= self.max_records:
            if self._recording():
                self.dropped += 1
            return
        with _disable_current_modes():
            ins = [self._digest(t, False, self._ordered_for(t, "in")) for t in inputs]
            outs = [self._digest(t, False, self._ordered_for(t, "out")) for t in outputs]
        self.add_record(name, kind, ins, outs, meta)

    def digests_now(self, tensors: list[torch.Tensor]) -> list[dict]:
        """Input digests taken before a wrapped call runs (collectives change their inputs)."""
        if not self._recording():
            return []
        with _disable_current_modes():
            return [self._digest(t, False, self._ordered_for(t, "in")) for t in tensors]

    def semantic_digested(self, name: str, kind: str, ins: list[dict], outputs: list[torch.Tensor],
                          meta: dict | None = None) -> None:
        if not self._recording():
            return
        with _disable_current_modes():
            outs = [self._digest(t, False, self._ordered_for(t, "out")) for t in outputs]
        self.add_record(name, kind, ins, outs, meta)

    # ------------------------------------------------------------------ flush / close
    def step_ended(self, _step: int = 0) -> None:
        """At a step's end: write the batch; outside the window no op is traced, so a write there
        would go unseen: grown storages are forgotten (never marked on a later step's reads)."""
        self.flush()
        if self.grown and not self._recording():
            self.grown.clear()

    def flush(self) -> None:
        """Resolve the pending digests (one host transfer) and write the batch; never raises."""
        with self.lock:
            if not self.records or self.in_write:
                return
            if self.failed is not None or _forks.foreign(self.pid):
                self.records = []  # failed, or a fork's copy of its parent's batch (the parent writes it)
                return
            self.in_write = True
            try:
                if _Digest.made != _Digest.resolved:
                    with _disable_current_modes():
                        _resolve([rec for rec in self.records if rec.__class__ is dict])
                lines = [rec if rec.__class__ is bytes else _dumps(rec) for rec in self.records]
                n = len(self.records)
                self.records = []
                self._ensure_open()
                with _signals_deferred():  # a SIGTERM handler never writes into a half-written batch
                    self.file.writelines(lines)  # into the file's buffer (WRITE_BUFFER: no new bytes object)
                    self.file.flush()  # to the OS now: a killed process keeps this batch
                self.written += n
                self.last_flush = time.monotonic()
            except Exception as e:  # noqa: BLE001 - disk full, a vanished directory...: stop, never break
                self._fail(e)
            finally:
                self.in_write = False

    def _fail(self, error: BaseException) -> None:
        """Stop recording after a failed write; say so once on stderr."""
        if self.failed is not None:
            return
        self.failed = f"{type(error).__name__}: {error}"
        self.records = []
        where = self.path or (self.out_dir / "trace.jsonl")
        try:
            sys.stderr.write(f"forensics optrace: rank {self.rank}: writing {where} failed ({self.failed}); "
                             f"tracing stopped after {self.written} records: the trace is partial (no footer). "
                             "The program goes on untraced.\n")
        except Exception:  # noqa: BLE001
            pass

    def _stopped(self) -> str | None:
        """What ended the program early, when something did (a signal, an uncaught exception)."""
        act = sys.modules.get("probes.activate")
        sig = getattr(act, "_state", {}).get("interrupted") if act is not None else None
        if sig:
            try:
                return f"signal {int(sig)} ({signal.Signals(int(sig)).name})"
            except (ValueError, TypeError):
                return f"signal {sig}"
        if self.uncaught:
            return f"uncaught {self.uncaught}"
        return None

    def close(self) -> None:
        """Write the last batch and the footer; a close that interrupts a write (a signal handler
        running in the middle of it) writes the footer only. Never raises."""
        with self.lock:
            if self.closed:
                return
            if _forks.foreign(self.pid):  # a fork's copy of this tracer (its atexit closing it):
                self.closed = True  # the pending batch, the counts and the file are the parent's to write
                self.records = []
                return
            interrupted_write = self.in_write
            if not interrupted_write:
                self.flush()
            self.closed = True
            if not interrupted_write:
                self.leave()
            if self.failed is not None:
                self._close_file()
                return
            if self.file is None and self.seq == 0 and self.dropped == 0:
                return  # nothing traced in this process: no file
            footer: dict[str, Any] = {"type": "footer", "records": self.written, "dropped": self.dropped,
                                      "last_step": self.window.step,
                                      "seeds": {"torch_initial_seed": _initial_seed(),
                                                "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED")},
                                      "stopped": self._stopped(),
                                      "compiled_graphs": _compiled_graphs()}
            if self.seq > self.written:
                footer["unwritten"] = self.seq - self.written  # recorded but lost with the interrupted write
            try:
                if self.issuers is not None:
                    from probes.optrace_program import script_path  # noqa: PLC0415

                    footer["packages"] = self.issuers.package_versions()
                    footer["sources"] = self.issuers.source_hashes(exclude=script_path())
                    script = script_path()
                    footer["imported"] = self.issuers.imported(exclude=(script,) if script else (),
                                                               exclude_dirs=(str(self._own_root()),))
            except Exception:  # noqa: BLE001
                pass
            footer["switches"] = self._switches()
            try:
                self._ensure_open()
                self.file.write((json.dumps(footer, default=str) + "\n").encode())
                self.file.flush()
            except Exception as e:  # noqa: BLE001
                self._fail(e)
            self._close_file()

    def _close_file(self) -> None:
        if self.file is not None:
            try:
                self.file.close()
            except Exception:  # noqa: BLE001
                pass

    # ------------------------------------------------------------------ mode on/off
    def enter(self, _step: int = 0) -> None:
        if not self.entered and not _forks.foreign(self.pid):
            self.__enter__()
            self.entered = True

    def leave(self, _step: int = 0) -> None:
        if self.issuers is not None:
            self.issuers.forget()
        if self.entered:
            self.entered = False
            try:
                self.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - another mode on top, or another thread
                pass


def _stable_repr(v: Any) -> str:
    """A representation that is the same in two processes (no object addresses)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return repr(v)
    if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
        return str(v)
    if isinstance(v, torch.Generator):  # its state is an input of the op that draws from it
        try:
            state = v.get_state()
            return f"Generator({v.device},{zlib.crc32(state.cpu().numpy().tobytes()):08x})"
        except Exception:  # noqa: BLE001
            return f"Generator({v.device})"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_stable_repr(x) for x in v) + "]"
    return type(v).__name__


#: entries of non-tensor argument lists seen before (most ops repeat theirs every step), by
#: :func:`_args_key`; bounded
_ARGS_SEEN: dict[tuple, dict[str, Any]] = {}
_ARGS_SEEN_MAX = 1 << 14
#: immutable argument types whose equal values (same type) always have the same stable repr
_PLAIN_ARGS = frozenset({int, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format})


def _args_key(values: list[Any]) -> tuple | None:
    """A key under which equal argument lists share one digest, or None (not cached): each value with
    its exact type (1, 1.0 and True are equal in Python, not in their reprs); a float only when not
    zero (0.0 == -0.0, reprs differ) and not NaN; nothing mutable or stateful (a Generator's state,
    a list) and nothing whose repr is not its value."""
    key = []
    for v in values:
        c = v.__class__
        if c is float:
            if v == 0.0 or v != v:
                return None
        elif c not in _PLAIN_ARGS:
            return None
        key.append(c)
        key.append(v)
    return tuple(key)


def _compiled_graphs() -> int | None:
    """Graphs torch.compile compiled in this process (None: dynamo never loaded, so none)."""
    if "torch._dynamo" not in sys.modules:
        return None
    try:
        from torch._dynamo.utils import counters  # noqa: PLC0415

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - private API
        return None


def _initial_seed() -> int | None:
    try:
        return int(torch.initial_seed())
    except Exception:  # noqa: BLE001
        return None


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


# ---------------------------------------------------------------------- boundary hooks

_COLLECTIVES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # function -> (parameters read as inputs, parameters written as outputs)
    "all_reduce": (("tensor",), ("tensor",)), "broadcast": (("tensor",), ("tensor",)),
    "reduce": (("tensor",), ("tensor",)), "all_gather": (("tensor",), ("tensor_list",)),
    "all_gather_into_tensor": (("input_tensor",), ("output_tensor",)),
    "reduce_scatter": (("input_list",), ("output",)), "reduce_scatter_tensor": (("input",), ("output",)),
    "all_to_all": (("input_tensor_list",), ("output_tensor_list",)), "all_to_all_single": (("input",), ("output",)),
    "gather": (("tensor",), ("gather_list",)), "scatter": (("scatter_list",), ("tensor",)),
    "send": (("tensor",), ()), "recv": ((), ("tensor",)), "barrier": ((), ()),
}


def _tensors_of(value: Any) -> list[torch.Tensor]:
    return [x for x in tree_leaves(value) if isinstance(x, torch.Tensor)]


def _wrap_collectives(tracer: OpTracer) -> list[tuple[Any, str, Any]]:
    """Wrap torch.distributed's collective functions: one ``collective.<fn>`` record each, inputs
    digested before the call and outputs after it (only when it waited: async calls record no
    outputs). Returns what to restore."""
    try:
        import torch.distributed as dist  # noqa: PLC0415
        from torch.distributed import distributed_c10d as c10d  # noqa: PLC0415
    except ImportError:
        return []
    restore = []
    for fn_name in _COLLECTIVES:
        orig = getattr(dist, fn_name, None)
        if orig is None or getattr(orig, "_forensics_wrapped", False):
            continue

        def make(fn_name: str, orig: Any) -> Any:
            import inspect  # noqa: PLC0415

            try:
                sig = inspect.signature(orig)
            except (TypeError, ValueError):
                sig = None

            @functools.wraps(orig)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                if not tracer._recording() or sig is None:
                    return orig(*args, **kwargs)
                try:
                    bound = sig.bind_partial(*args, **kwargs)
                    in_names, out_names = _COLLECTIVES[fn_name]
                    before = tracer.digests_now(_tensors_of([bound.arguments.get(p) for p in in_names]))
                    outputs = _tensors_of([bound.arguments.get(p) for p in out_names])
                except Exception:  # noqa: BLE001
                    return orig(*args, **kwargs)
                result = orig(*args, **kwargs)
                is_async = bool(bound.arguments.get("async_op", False))
                meta = {"fn": fn_name, "async": is_async}
                tracer.semantic_digested(f"collective.{fn_name}", "collective", before,
                                         [] if is_async else outputs, meta)
                return result

            wrapper._forensics_wrapped = True  # type: ignore[attr-defined]
            return wrapper

        w = make(fn_name, orig)
        for mod in (dist, c10d):
            if getattr(mod, fn_name, None) is orig:
                restore.append((mod, fn_name, orig))
                setattr(mod, fn_name, w)
    return restore


def _wrap_backward(tracer: OpTracer) -> list[tuple[Any, str, Any]]:
    """``backward.start`` / ``backward.end`` records around torch.autograd.backward."""
    import torch.autograd as autograd  # noqa: PLC0415

    orig = autograd.backward

    @functools.wraps(orig)
    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        tracer.semantic("backward.start", "backward", _tensors_of(tensors), [])
        tracer.phase_stack.append("backward")
        try:
            return orig(tensors, *args, **kwargs)
        finally:
            tracer.phase_stack.pop()
            tracer.semantic("backward.end", "backward", [], [])

    autograd.backward = backward
    return [(autograd, "backward", orig)]


def _hook_optimizer(tracer: OpTracer) -> list[Any]:
    """``optimizer.step`` records: inputs = params and grads before, outputs = params after."""
    from torch.optim.optimizer import (  # noqa: PLC0415
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    state: dict[int, list[dict]] = {}

    def params_of(opt: Any) -> list[torch.Tensor]:
        return [p for g in opt.param_groups for p in g["params"] if isinstance(p, torch.Tensor)]

    def pre(opt: Any, *_a: Any, **_k: Any) -> None:
        ps = params_of(opt)
        tracer.phase_stack.append("optimizer")
        state[id(opt)] = tracer.digests_now(ps + [p.grad for p in ps if p.grad is not None])

    def post(opt: Any, *_a: Any, **_k: Any) -> None:
        before = state.pop(id(opt), [])
        tracer.semantic_digested("optimizer.step", "optimizer", before, params_of(opt),
                                 {"optimizer": type(opt).__name__})
        if tracer.phase_stack and tracer.phase_stack[-1] == "optimizer":
            tracer.phase_stack.pop()

    return [register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)]


#: a restore entry's "original" for an attribute the object did not have itself (delete ours on close)
_ABSENT = object()


def _wrap_storage_resize(tracer: OpTracer) -> list[tuple[Any, str, Any]]:
    """``storage.resize_`` records around ``torch.UntypedStorage.resize_``: a storage-level resize
    never reaches the dispatcher (FSDP2 frees an unsharded parameter with ``resize_(0)`` and
    re-allocates it with ``resize_(n)``, whose bytes are then uninitialised). Installed only while
    the tracer is; it costs nothing per op, only per storage resize."""
    cls = getattr(torch, "UntypedStorage", None)
    orig = getattr(cls, "resize_", None)
    if cls is None or orig is None or getattr(orig, "_forensics_wrapped", False):
        return []
    own = cls.__dict__.get("resize_", _ABSENT)

    def resize_(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            old = self.nbytes()
        except Exception:  # noqa: BLE001
            old = None
        result = orig(self, *args, **kwargs)
        if old is not None:
            tracer.storage_resized(self, old)
        return result

    for attr in ("__name__", "__qualname__", "__doc__"):
        try:
            setattr(resize_, attr, getattr(orig, attr))
        except (AttributeError, TypeError):
            pass
    resize_._forensics_wrapped = True  # type: ignore[attr-defined]
    cls.resize_ = resize_
    return [(cls, "resize_", own)]


class _Installed:
    """What :func:`install` returns: ``close()`` flushes, writes the footer and unhooks."""

    def __init__(self, tracer: OpTracer, restore: list, handles: list) -> None:
        self.tracer, self.restore, self.handles = tracer, restore, handles

    def close(self) -> None:
        self.tracer.close()
        for mod, name, orig in self.restore:
            if orig is _ABSENT:  # it was inherited: remove ours, the base class's shows again
                try:
                    delattr(mod, name)
                except AttributeError:
                    pass
            else:
                setattr(mod, name, orig)
        for h in self.handles:
            h.remove()
        self.restore, self.handles = [], []


def install(cfg: ProbeConfig, window: StepWindow, out_dir: Path, rank: int) -> _Installed:
    """Start tracing this rank: the mode is pushed when the window opens and popped when it closes."""
    tracer = OpTracer(cfg, window, Path(out_dir), rank)
    handles = _hook_optimizer(tracer)  # before activate's window hook: records land in this step
    restore = _wrap_collectives(tracer) + _wrap_backward(tracer) + _wrap_storage_resize(tracer)
    window.on_enter.append(tracer.enter)
    window.on_step.append(tracer.step_ended)
    window.on_exit.append(lambda _s: tracer.close())
    restore += _hook_excepthook(tracer)
    return _Installed(tracer, restore, handles)


def _hook_excepthook(tracer: OpTracer) -> list[tuple[Any, str, Any]]:
    """Note an uncaught exception, so the footer says the program did not end normally."""
    previous = sys.excepthook

    def hook(exc_type, exc, tb):  # noqa: ANN001
        tracer.uncaught = getattr(exc_type, "__name__", str(exc_type))
        previous(exc_type, exc, tb)

    sys.excepthook = hook
    return [(sys, "excepthook", previous)]
