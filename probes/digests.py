"""The order-sensitive tensor digest shared by the op tracer and the site probe.

``torch.hash_tensor`` (the ``hash`` of a record) XORs every element's bits: a different value
proves the tensors differ, an equal value does not prove them equal (a permutation, or two equal
bit flips, leave it unchanged). :func:`ordered_device` is the digest that does: every element's
bits are xored with a key of its position, mixed by the splitmix64 finalizer and summed mod 2^64,
on the tensor's own device (one int64 that stays there until the record is written).
"""
from __future__ import annotations

import numpy as np
import torch

_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_C1, _C2 = -4658895280553007687, -7723592293110705685  # 0xBF58476D1CE4E5B9, 0x94D049BB133111EB (splitmix64)
_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64: odd, so weights stay distinct


def _lshr(z: torch.Tensor, s: int) -> torch.Tensor:
    return (z >> s) & ((1 << (64 - s)) - 1)  # logical shift of int64 words


#: Elements digested per step: the int64 temporaries stay under ~32 MB each on the tensor's device,
#: however large the tensor (a probe must not push a training job over its memory limit).
CHUNK = 1 << 22


def holds_elements(t: torch.Tensor) -> bool:
    """Whether the tensor's storage holds every element its sizes and strides reach. False for a
    storage resized to nothing while the tensor keeps its sizes (FSDP frees unsharded parameters
    so between uses): reading it reads memory the tensor does not own (``torch.hash_tensor``
    crashes the process on the CPU). True when it cannot be told (a tensor without a storage to
    ask: its digest path decides)."""
    try:
        extent = t.storage_offset() + 1 + sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride()))
        return extent * t.element_size() <= t.untyped_storage().nbytes()
    except Exception:  # noqa: BLE001 - sparse, nested, subclasses...
        return True


def plain_real(t: torch.Tensor) -> torch.Tensor:
    """``t`` detached, its lazy conjugate/negation resolved, complex viewed as pairs of reals."""
    x = t.detach()
    if x.is_conj():
        x = x.resolve_conj()
    if x.is_neg():
        x = x.resolve_neg()
    if x.is_complex():
        x = torch.view_as_real(x)
    return x


def row_major_pieces(x: torch.Tensor, limit: int | None = None):
    """``(start, piece)`` pairs covering ``x``'s elements in row-major order: ``piece`` is a 1-D
    contiguous tensor of at most ``limit`` elements (default :data:`CHUNK`) and ``start`` the row-major
    position of its first element. A contiguous tensor yields views of its memory; any other is
    copied a piece at a time (leading rows, then slices of one row), so an expanded or gapped
    tensor is never materialised whole: the copy stays bounded, however many elements the strides
    make of a small storage."""
    limit = max(1, CHUNK if limit is None else int(limit))
    n = x.numel()
    if n == 0:
        return
    if x.is_contiguous():
        flat = x.reshape(-1)
        for start in range(0, n, limit):
            yield start, flat[start:start + limit]
        return
    inner = n // x.shape[0]  # elements per leading row (x.dim() >= 1: a 0-dim tensor is contiguous)
    if inner <= limit:
        rows = max(1, limit // inner)
        for i in range(0, x.shape[0], rows):
            yield i * inner, x[i:i + rows].reshape(-1).contiguous()
        return
    for i in range(x.shape[0]):
        for start, piece in row_major_pieces(x[i], limit):
            yield i * inner + start, piece


def ordered_device(t: torch.Tensor) -> torch.Tensor:
    """Order-sensitive digest computed on the tensor's own device (one int64, stays there): every
    element's bits xor a key of its position, mixed by the splitmix64 finalizer, summed mod 2^64.
    A permutation, a swap or paired sign flips change it (the mixer is nonlinear). Computed over
    :func:`row_major_pieces` of :data:`CHUNK` elements (the same value as in one pass: the key is
    the global position), so no temporary grows with the tensor. A CPU tensor's digest is
    computed by numpy in unsigned words (the same value, 2-3x less CPU, and no ops of ours in the
    profiler's trace); where numpy cannot read the tensor, by torch as on other devices."""
    x = plain_real(t)
    if x.device.type == "cpu":
        try:
            return _ordered_numpy(x)
        except (TypeError, RuntimeError):  # a tensor numpy cannot view: torch's way below decides
            pass
    size = x.element_size()
    word = _INT_OF_SIZE[size]
    total = torch.zeros((), dtype=torch.int64, device=x.device)
    for start, piece in row_major_pieces(x):
        words = piece.view(word) if piece.dtype != word else piece
        z = words.to(torch.int64)
        z = z ^ torch.arange(start, start + z.numel(), device=z.device, dtype=torch.int64).mul_(_GOLDEN)
        z ^= _lshr(z, 30)
        z *= _C1
        z ^= _lshr(z, 27)
        z *= _C2
        z ^= _lshr(z, 31)
        total += z.sum()
    return total


_U64 = (1 << 64) - 1
_GOLDEN_U, _C1_U, _C2_U = (np.uint64(c & _U64) for c in (_GOLDEN, _C1, _C2))
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def _ordered_numpy(x: torch.Tensor) -> torch.Tensor:
    """:func:`ordered_device`'s value for a CPU tensor ``x`` (already :func:`plain_real`), by numpy:
    the element words widened to int64 as torch's ``to(torch.int64)`` does (signed words
    sign-extended, bytes zero-extended), then the same key, mixer and sum in uint64, whose
    arithmetic wraps mod 2^64 where torch's int64 does."""
    word = _INT_OF_SIZE[x.element_size()]
    total = np.uint64(0)
    with np.errstate(over="ignore"):
        for start, piece in row_major_pieces(x):
            words = piece.view(word) if piece.dtype != word else piece
            z = words.numpy().astype(np.int64).view(np.uint64)  # a copy: the tensor is never written
            key = np.arange(start, start + z.size, dtype=np.uint64)
            key *= _GOLDEN_U
            z ^= key
            del key
            z ^= z >> _S30
            z *= _C1_U
            z ^= z >> _S27
            z *= _C2_U
            z ^= z >> _S31
            total += z.sum(dtype=np.uint64)
    value = int(total)
    return torch.tensor(value - (1 << 64) if value >> 63 else value, dtype=torch.int64)
