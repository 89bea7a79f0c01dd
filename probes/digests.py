"""The order-sensitive tensor digest shared by the op tracer and the site probe.

``torch.hash_tensor`` (the ``hash`` of a record) XORs every element's bits: a different value
proves the tensors differ, an equal value does not prove them equal (a permutation, or two equal
bit flips, leave it unchanged). :func:`ordered_device` is the digest that does: every element's
bits are xored with a key of its position, mixed by the splitmix64 finalizer and summed mod 2^64,
on the tensor's own device (one int64 that stays there until the record is written).
"""
from __future__ import annotations

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


def ordered_device(t: torch.Tensor) -> torch.Tensor:
    """Order-sensitive digest computed on the tensor's own device (one int64, stays there): every
    element's bits xor a key of its position, mixed by the splitmix64 finalizer, summed mod 2^64.
    A permutation, a swap or paired sign flips change it (the mixer is nonlinear). Computed in
    chunks of :data:`CHUNK` elements (same value as in one pass: the key is the global position)."""
    x = plain_real(t)
    flat = x.reshape(-1)
    size = flat.element_size()
    words = flat.view(_INT_OF_SIZE[size]) if flat.dtype != _INT_OF_SIZE.get(size) else flat
    n = words.numel()
    total = torch.zeros((), dtype=torch.int64, device=words.device)
    for start in range(0, max(n, 1), CHUNK):
        z = words[start:start + CHUNK].to(torch.int64)
        z = z ^ torch.arange(start, start + z.numel(), device=z.device, dtype=torch.int64).mul_(_GOLDEN)
        z ^= _lshr(z, 30)
        z *= _C1
        z ^= _lshr(z, 27)
        z *= _C2
        z ^= _lshr(z, 31)
        total += z.sum()
    return total
