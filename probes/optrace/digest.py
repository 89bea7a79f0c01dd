"""Digests of tensors, the four kinds, and the entry a record holds for each tensor.

* ``h``: an order-independent XOR (``torch.hash_tensor``; on the CPU, numpy's XOR of 4- and 8-byte
  elements read in place), a screen, not proof;
* ``o``: an order-sensitive digest that proves equality (xxh3-64 of a CPU tensor's bytes in memory
  order, ``ol`` its dim order when not row-major; on other devices a position-keyed mix,
  :func:`probes.digests.ordered_device`);
* ``c``: position-weighted chunk digests on ops whose failure mode is reordering;
* the ``args`` entry (non-tensor arguments) and the ``generator`` entry (a random op's generator
  state).

Device digests stay on their device (:class:`_Digest`) until the flush reads them all with one
host transfer (:func:`_resolve`). The names recorded in the header (:data:`HASH_NAME_CPU`,
:data:`ORDERED_CPU`...) say which algorithm made each digest; changing one changes the format.
"""
from __future__ import annotations

import ctypes
import hashlib
import threading
import zlib
from typing import Any

import numpy as np
import torch

from forensics.core.formats.optrace import SAMPLES
from probes.digests import _GOLDEN, _INT_OF_SIZE, holds_elements, ordered_device, plain_real, row_major_pieces  # noqa: F401  (_GOLDEN, ordered_device: part of this module's API)

try:  # order-sensitive digests of CPU tensors; without it CPU tensors carry the XOR digest only
    from xxhash import xxh3_64 as _xxh3_stream
    from xxhash import xxh3_64_hexdigest as _xxh3  # 16 hex digits, made in C (a "%016x" costs as much)
except ImportError:  # pragma: no cover - depends on the environment
    _xxh3 = _xxh3_stream = None

#: what a random op's ``{"t": "generator"}`` input entry digests (header ``generators``; traces
#: without it record no generator state, so their random ops have one input entry fewer)
GENERATORS_NAME = "blake2b-64 of the state of the generator a random op draws from (given, else the device default)"
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
#: which tensors carry the order-sensitive digest ``o`` (config ``extra.ordered_digests``, header ``ordered.mode``)
ORDERED_MODES = ("auto", "inputs", "all", "off")
#: which CPU tensors carry ``o`` (header ``ordered.cpu_sides``): one kind of digest on both sides of
#: every op, so a producer's output and its consumer's input compare (and link) by the same digest
CPU_SIDES = ("inputs and outputs, in every mode but off; with it no XOR digest 'h' (one pass over the bytes), "
             "except on chunked ops, which keep 'h' and 'c' to tell a reordering")

N_CHUNKS = 16
_MASK = (1 << 64) - 1

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

    __slots__ = ("tensor", "many", "prefix")
    #: how many were ever made and resolved (in this process, all tracers): while they are equal, no
    #: record anywhere holds one (CPU digests are text from the start) and a flush skips the search
    made = 0
    resolved = 0
    count_lock = threading.Lock()  # exact counts from any thread (a device digest costs far more)

    def __init__(self, tensor: torch.Tensor, many: bool = False, prefix: str = "") -> None:
        flat = tensor.reshape(-1)
        self.tensor = flat if flat.dtype == torch.int64 else flat.view(torch.int64)
        self.many = many
        #: what the text starts with (a summary's ``sum32:`` / ``sum64:``, :func:`summary_text`); "" plain hex
        self.prefix = prefix
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
        if d.prefix:  # a summary: its own text (the width its prefix says)
            hexes = [summary_text(v, d.prefix) for v in vals or []]
        else:
            hexes = [format(v & _MASK, "016x") for v in vals or []]
        e[key] = hexes if d.many else hexes[0]


def tensor_entry(t: torch.Tensor, chunks: bool, ordered: bool = False, xor: bool = False,
                 chunk_digests: bool = True) -> dict[str, Any]:
    """The entry of one tensor: shape, dtype, numel and digests. A CPU tensor with an
    order-sensitive digest gets no XOR digest unless ``xor`` (or chunk digests) ask for one. A
    tensor whose storage does not hold its elements (freed, as FSDP frees unsharded parameters
    between uses) has no bytes to read: metadata only. ``chunk_digests``: the config's switch
    (chunk digests ``c`` on the ops where ``chunks`` asks for them)."""
    dtype = t.dtype
    fast = _FAST_INFO.get(dtype)
    if (fast is not None and ordered and not xor and not chunks and _xxh3 is not None and t.__class__ in _PLAIN
            and t.is_cpu and t.layout is _STRIDED and t.is_contiguous() and not t.is_neg()):
        try:  # the common case: a row-major CPU tensor's bytes read in place (no numpy view, no detach),
            # the order-sensitive digest alone; inline, not a helper: one Python frame less per tensor
            numel = t.numel()
            nbytes = numel * fast[1]
            if numel and (t.storage_offset() * fast[1] + nbytes <= t.untyped_storage().nbytes()):
                buf = _BYTES_AT.get(nbytes) or _bytes_type(nbytes)
                return {"s": list(t.shape), "t": fast[0], "n": numel, "o": _xxh3(buf.from_address(t.data_ptr()))}
            # else: empty, or a storage that does not hold its elements (holds_elements): below
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
        if _in_place_digests(entry, t, word, ordered, xor):
            return entry
        entry = {"s": entry["s"], "t": entry["t"], "n": numel}
    if t.is_sparse or t.is_quantized or t.device.type == "meta" or t.__class__ not in _PLAIN:  # a DTensor too:
        # no memory of its own, and a digest through its ops would add collectives to the step
        entry["ev"] = "metadata"
        return entry
    return _general_digests(entry, t, chunks and chunk_digests, ordered, xor)


def _in_place_digests(entry: dict[str, Any], x: torch.Tensor, word: Any, ordered: bool, xor: bool) -> bool:
    """A strided CPU tensor of 4- or 8-byte elements, its memory read in place: the XOR digest, or a
    transposed weight in memory order, into ``entry``. False: the general path decides."""
    try:
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
        return True
    except Exception:  # noqa: BLE001 - the general path below decides
        return False


def _general_digests(entry: dict[str, Any], t: torch.Tensor, chunked: bool, ordered: bool, xor: bool) -> dict[str, Any]:
    """Any other tensor: hash_tensor's XOR (kept on its device until the flush, :class:`_Digest`),
    chunk digests when ``chunked``, the order-sensitive digest when ``ordered``. Metadata only when
    a digest fails: never let a digest break the user's op."""
    try:
        if ordered and not xor and t.device.type == "cpu" and not chunked:
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
            if chunked:
                entry["c"] = _Digest(chunk_sums(x), many=True)
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


def view_entry(in0: dict[str, Any], x: torch.Tensor, out: torch.Tensor, order_view: bool,
               ordered_out: bool) -> dict[str, Any] | None:
    """The entry of a same-element view's output made from its input's digests, or None (digest
    it). The XOR holds the same elements whatever the order. The order-sensitive digest is the
    same value when the view keeps the row-major order of a row-major input, and, on the CPU,
    when input and output are dense over the same bytes (``t`` of a weight): its memory order is
    the input's, with the output's own dim order (``ol``). Nothing runs between the two reads but
    the view, which writes nothing. ``ordered_out``: whether the output carries ``o``."""
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


def chunk_sums(x: torch.Tensor) -> torch.Tensor:
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


def args_entry(values: list[Any]) -> dict[str, Any] | None:
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




# --------------------------------------------------------------------------- the light evidence levels
#: the memory offsets (in elements) of a sampled entry's positions, by (shape, strides): shapes repeat
#: every step, so the positions are worked out once; bounded
_SAMPLE_AT: dict[tuple, tuple[np.ndarray | None, int, int]] = {}
_SAMPLE_AT_MAX = 1 << 12


def _span(t: torch.Tensor) -> int | None:
    """Elements from the tensor's first to its last (its memory, read in place), or None when the
    tensor is not a plain strided CPU tensor whose storage holds them (then the general path)."""
    if t.__class__ not in _PLAIN or not t.is_cpu or t.layout is not _STRIDED or t.is_neg() or t.is_conj():
        return None
    span = t.numel() if t.is_contiguous() else 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    if (t.storage_offset() + span) * t.element_size() > t.untyped_storage().nbytes():
        return None
    return span


def _sample_at(shape: tuple, stride: tuple, n: int) -> tuple[np.ndarray | None, int]:
    """(offsets, step): the memory offsets of the row-major positions ``i * step`` (None: the
    tensor is row-major contiguous and a plain ``[::step]`` reads them)."""
    key = (shape, stride)
    hit = _SAMPLE_AT.get(key)
    if hit is None:
        step = -(-n // SAMPLES)
        contiguous = all(st == c for st, c, d in zip(stride, _row_major(shape), shape) if d != 1)
        offsets = None
        if not contiguous:
            idx = np.unravel_index(np.arange(0, n, step), shape)
            offsets = np.zeros(len(idx[0]), dtype=np.intp)
            for i, st in zip(idx, stride):
                offsets += i * st
        if len(_SAMPLE_AT) >= _SAMPLE_AT_MAX:
            _SAMPLE_AT.clear()
        hit = _SAMPLE_AT[key] = (offsets, step, 0)
    return hit[0], hit[1]


def _row_major(shape: tuple) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


_VOID = {size: np.dtype(f"V{size}") for size in (1, 2, 4, 8, 16)}
_NO_SPAN = -1  # "not worked out yet" (None: worked out, no memory of its own to read in place)


def sampled_digest(t: torch.Tensor, span: Any = _NO_SPAN) -> Any:
    """The ``sampled`` digest (:data:`forensics.core.formats.optrace.SAMPLED`): at most ``SAMPLES``
    elements at row-major positions ``i * ceil(n / SAMPLES)``; on the CPU xxh3 of their bytes, read
    where they lie whatever the layout (no copy of the tensor); on another device a position-keyed
    mix of the same elements, left there (:class:`_Digest`, read at the flush)."""
    n = t.numel()
    if span is _NO_SPAN:
        span = _span(t)
    if span is not None and _xxh3 is not None:
        size = t.element_size()
        offsets, step = (None, -(-n // SAMPLES)) if span == n and t.is_contiguous() else \
            _sample_at(tuple(t.shape), tuple(t.stride()), n)
        buf = _BYTES_AT.get(span * size) or _bytes_type(span * size)
        words = np.frombuffer(buf.from_address(t.data_ptr()), dtype=_VOID.get(size) or f"V{size}")
        return _xxh3((words[::step] if offsets is None else words[offsets]).tobytes())
    sample = plain_real(t.detach()).reshape(-1)[::-(-n // SAMPLES)].contiguous()
    if sample.device.type == "cpu":
        return ordered_cpu(sample)
    return _Digest(ordered_device(sample))


def summary_digest(t: torch.Tensor, span: Any = _NO_SPAN) -> Any:
    """The ``summary`` digest (:data:`forensics.core.formats.optrace.SUMMARY`): the sum of the
    elements' bit patterns as unsigned integers, mod 2^32 for elements of 1 to 4 bytes (``sum32:``)
    and mod 2^64 for 8-byte ones (``sum64:``); a complex tensor's as its real pairs. One reduction
    over the memory where it lies, in the elements' own word size (numpy on the CPU: no upcast of
    4- and 8-byte words, as fast as reading them; on another device the sum stays there,
    :class:`_Digest`). Exact and independent of the order and the layout, so equal values never
    give two summaries; like any summary, equal summaries prove nothing."""
    x = t.detach()
    size = x.element_size()
    word = _UINT.get(size)
    if word is not None and not x.is_complex():
        if span is _NO_SPAN:
            span = _span(x)
        if span is not None:
            buf = _BYTES_AT.get(span * size) or _bytes_type(span * size)
            w = np.frombuffer(buf.from_address(x.data_ptr()), dtype=word, count=span)
            if not x.is_contiguous():  # a strided view of the same memory (no copy)
                w = np.lib.stride_tricks.as_strided(w, shape=tuple(x.shape),
                                                    strides=tuple(st * size for st in x.stride()), writeable=False)
            acc, prefix = _SUM_WORD[size]
            return summary_text(int(np.add.reduce(w, axis=None, dtype=acc)), prefix)
    x = plain_real(x)
    words = _bits_exact(x)
    prefix = _SUM_WORD[x.element_size()][1]
    if words.device.type == "cpu":
        return summary_text(words.sum().item(), prefix)
    total = words.sum()
    return _Digest(total & 0xFFFFFFFF if prefix == _SUM32 else total, prefix=prefix)


_SUM32, _SUM64 = "sum32:", "sum64:"
#: a summary's accumulator by element size: the word it is summed in (numpy) and its text's prefix
_SUM_WORD = {1: (np.uint32, _SUM32), 2: (np.uint32, _SUM32), 4: (np.uint32, _SUM32), 8: (np.uint64, _SUM64)}


def summary_text(value: int, prefix: str) -> str:
    """A summary's text: ``sum32:`` and 8 hex digits (the sum mod 2^32), ``sum64:`` and 16 (mod 2^64)."""
    if prefix == _SUM32:
        return f"{_SUM32}{value & 0xFFFFFFFF:08x}"
    return f"{_SUM64}{value & _MASK:016x}"


_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_TORCH_UINT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits_exact(x: torch.Tensor) -> torch.Tensor:
    """A tensor's elements as int64 words holding their own bit patterns (unsigned for 1-4 bytes)."""
    size = x.element_size()
    w = x.contiguous().view(_TORCH_UINT[size]) if x.dtype != _TORCH_UINT[size] else x
    w = w.to(torch.int64)
    if size in (2, 4):
        w = w & ((1 << (8 * size)) - 1)
    return w


#: the light levels' fast path, by dtype: (entry name, element size, numpy word, summary accumulator,
#: summary prefix) for the plain real dtypes whose bytes numpy reads as unsigned words
_LIGHT_FAST = {dtype: (_dtype_name(dtype), size, _UINT[size], *_SUM_WORD[size])
               for dtype, size in ((torch.float32, 4), (torch.float64, 8), (torch.float16, 2), (torch.bfloat16, 2),
                                   (torch.int64, 8), (torch.int32, 4), (torch.int16, 2), (torch.int8, 1),
                                   (torch.uint8, 1), (torch.bool, 1))}


def _light_fast(t: torch.Tensor, fast: tuple, level: str, sampled: bool) -> dict[str, Any] | None:
    """The entry of a row-major CPU tensor (for a summary, any dense one: a transposed weight) of a
    :data:`_LIGHT_FAST` dtype whose storage holds it, its bytes read in place (one numpy view, no detach, no copy): the same digest :func:`sampled_digest`
    or :func:`summary_digest` gives it; None when it is not such a tensor (the general path)."""
    if not t.is_cpu or t.layout is not _STRIDED or t.is_neg():
        return None
    if not t.is_contiguous() and (sampled or not _dense(t.shape, t.stride())):
        return None  # a summary sums a dense tensor's memory whatever its dim order; samples need row-major
    numel = t.numel()
    size = fast[1]
    nbytes = numel * size
    if not numel or t.storage_offset() * size + nbytes > t.untyped_storage().nbytes():
        return None  # empty, or a storage that does not hold its elements (holds_elements)
    ptr = t.data_ptr()
    if sampled and numel <= SAMPLES:  # every element is a sample: its bytes as they lie
        h = _xxh3((_BYTES_AT.get(nbytes) or _bytes_type(nbytes)).from_address(ptr))
    else:
        key = (ptr, nbytes, sampled)
        words = _WORDS_AT.get(key)
        if words is None:
            words = _words_at(key, ptr, nbytes, size, fast[2], sampled)
        if sampled:
            h = _xxh3(words.tobytes())
        else:
            h = summary_text(int(np.add.reduce(words, dtype=fast[3])), fast[4])
    return {"s": list(t.shape), "t": fast[0], "n": numel, "ev": level, "h": h}


#: numpy views of memory by (address, bytes, sampled): a row-major CPU tensor's words (a summary
#: sums them) or its sample positions (``[::ceil(n/SAMPLES)]``, a sampled digest reads them). A view
#: owns nothing: it says how to read the bytes at an address, read only while a tensor that holds
#: them lies there (the caller's storage check), so a parameter or a reused activation buffer, at
#: the same address every step, costs one dict lookup instead of two ctypes and numpy objects; bounded
_WORDS_AT: dict[tuple, np.ndarray] = {}
_WORDS_AT_MAX = 1 << 12


def _words_at(key: tuple, ptr: int, nbytes: int, size: int, word: Any, sampled: bool) -> np.ndarray:
    buf = (_BYTES_AT.get(nbytes) or _bytes_type(nbytes)).from_address(ptr)
    if sampled:
        words = np.frombuffer(buf, dtype=_VOID[size])[::-(-(nbytes // size) // SAMPLES)]
    else:
        words = np.frombuffer(buf, dtype=word)
    if len(_WORDS_AT) >= _WORDS_AT_MAX:
        _WORDS_AT.clear()
    _WORDS_AT[key] = words
    return words


def light_view_entry(in0: dict[str, Any], x: torch.Tensor, out: torch.Tensor, order_view: bool) -> dict[str, Any] | None:
    """The light entry of a same-element view's output (``t``, ``view``, ``detach``...: the same
    elements, the same numel and dtype, checked by the caller) made from its input's, or None
    (digest it). A ``summary`` is the same sum whatever the order, so every such view reuses it; a
    ``sampled`` digest reads row-major positions, so only a view that keeps the row-major order
    (:data:`probes.optrace.ops.ORDER_PRESERVING_VIEWS`) has the same samples. Nothing runs between
    the two reads but the view, which writes nothing. A lazy conjugate or negation that differs
    between the two (other values) is digested anew."""
    h = in0.get("h")
    level = in0.get("ev")
    if h is None or (level != "summary" and (level != "sampled" or not order_view)):
        return None
    if out.is_neg() != x.is_neg() or out.is_conj() != x.is_conj():
        return None
    return {"s": list(out.shape), "t": in0["t"], "n": in0["n"], "ev": level, "h": h}


#: whether a (shape, strides) is dense and non-overlapping (a permutation of a row-major layout): its
#: elements are exactly ``numel`` consecutive words, which a summary sums in place; bounded
_DENSE: dict[tuple, bool] = {}
_DENSE_MAX = 1 << 12


def _dense(shape: tuple, stride: tuple) -> bool:
    key = (shape, stride)
    hit = _DENSE.get(key)
    if hit is None:
        dims = sorted((st, n) for n, st in zip(shape, stride) if n != 1)
        expect, hit = 1, True
        for st, n in dims:
            if st != expect:
                hit = False
                break
            expect *= n
        if len(_DENSE) >= _DENSE_MAX:
            _DENSE.clear()
        _DENSE[key] = hit
    return hit


def light_entry(level: str) -> Any:
    """A function with :func:`tensor_entry`'s signature that writes ``level``'s entry (``sampled``,
    ``summary`` or ``metadata``): shape, dtype, numel, ``ev`` and (but at ``metadata``) the level's
    digest in ``h``. No order-sensitive, XOR or chunk digest: equal light digests never prove
    equality (docs/trace-format.md, "Evidence levels"). A digest that fails leaves the entry at
    ``metadata``; never let a digest break the user's op. A row-major CPU tensor of a common dtype
    takes :func:`_light_fast` (the same digest, fewer steps)."""
    digest = {"sampled": sampled_digest, "summary": summary_digest}.get(level)
    sampled = level == "sampled"
    fast_ok = digest is not None and (_xxh3 is not None or not sampled)

    def entry(t: torch.Tensor, chunks: bool = False, ordered: bool = False, xor: bool = False,
              chunk_digests: bool = True) -> dict[str, Any]:
        dtype = t.dtype
        if fast_ok and t.__class__ in _PLAIN:
            fast = _LIGHT_FAST.get(dtype)
            if fast is not None:
                try:
                    out = _light_fast(t, fast, level, sampled)
                    if out is not None:
                        return out
                except Exception:  # noqa: BLE001 - the general path below decides, and never raises
                    pass
        name = _DTYPE_NAME.get(dtype) or _dtype_name(dtype)
        if t.__class__ not in _PLAIN and isinstance(t, _UNINITIALIZED):
            return {"s": None, "t": name, "n": None, "ev": "metadata"}
        numel = t.numel()
        out: dict[str, Any] = {"s": list(t.shape), "t": name, "n": numel, "ev": level}
        if digest is None:
            return out
        span = _span(t) if t.is_cpu else None
        if t.is_sparse or t.is_quantized or t.device.type == "meta" or t.__class__ not in _PLAIN \
                or (numel and span is None and not holds_elements(t)):  # no memory of its own: metadata
            out["ev"] = "metadata"
            return out
        try:
            h = digest(t, span) if numel else "0" * 16
        except Exception:  # noqa: BLE001 - never let a digest break the user's op
            h = None
        if h is None:  # no digest this tensor could be given (xxhash missing, a failure): what it is
            out["ev"] = "metadata"
        else:
            out["h"] = h
        return out

    return entry
