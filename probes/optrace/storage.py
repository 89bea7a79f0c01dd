"""Storages a storage-level resize grew (``UntypedStorage.resize_``: FSDP2 frees an unsharded
parameter with ``resize_(0)`` and re-allocates it with ``resize_(n)``) and no traced op has written
since: their new bytes are uninitialised memory, so a tensor entry read from one gets ``g`` (the
identity of the resize), and the differ passes over what differs there. Empty in almost every
program: the per-op cost is one test of ``tracer.grown``.
"""
from __future__ import annotations

import weakref
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from probes.optrace.ops import _is_opaque, _OpInfo, _tensors_of


class GrownStorages:
    """The grown-storage trail (a part of :class:`probes.optrace.tracer.OpTracer`, whose ``grown``
    dict, record counts and :meth:`add_record` these methods use)."""

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

