"""The dispatch mode: every ATen op of this rank becomes one record (identity, phase, input digests
taken before the op runs, output digests after, GEMM name, autograd node). What an op is
(:mod:`.ops`), how a tensor is digested (:mod:`.digest`), the file (:mod:`.writer`) and grown
storages (:mod:`.storage`) live beside it; :mod:`.hooks` adds the semantic records and installs it.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_leaves

from forensics.core.formats.optrace import EVIDENCE_LEVELS, GRANULARITIES, OPTIMIZER_RECORDS, default_optimizer
from forensics.core.formats.optrace import record as new_record
from forensics.core.formats.optrace import record_line
from probes import forks as _forks
from probes.config import ProbeConfig
from probes.optrace.digest import (
    ORDERED_MODES,
    _Digest,
    _generator_entry,
    args_entry,
    chunk_sums,
    light_entry,
    light_view_entry,
    tensor_entry,
    view_entry,
)
from probes.optrace.ops import _OP_BY_ID, _gemm_meta, _is_opaque, _non_blocking, _received, _split, op_info
from probes.optrace.storage import GrownStorages
from probes.optrace.writer import TraceWriting
from probes.window import StepWindow

#: what torch.compile'd code does under the tracer (config ``extra.compiled``, header ``compiled``):
#: "compiled" runs it compiled, as it runs untraced (the mode is off while dynamo compiles and sees
#: the ATen calls the compiled code makes; its fused kernels are below the dispatcher); "eager"
#: makes torch.compile fall back to eager so every op is seen (torch's default for a dispatch mode),
#: which runs other kernels than the program does
COMPILED_MODES = ("compiled", "eager")
FLUSH_EVERY = 2048  # records kept pending (digests on device) before one host transfer and write
FLUSH_SECONDS = 1.0  # ... or this long since the last write, whichever comes first
MAX_FORWARD_NODES = 1 << 20  # autograd sequence numbers remembered to name a backward op's forward op


def _dynamo_callback() -> Any:
    """The frame-evaluation callback torch._dynamo has installed in this thread (None: no frame is
    being compiled, and running the handler without ``torch._dynamo.disable`` is the same thing).
    Where torch does not say, a non-None answer keeps the disabled path."""
    return True


try:
    from torch._C._dynamo.eval_frame import get_eval_frame_callback as _dynamo_callback  # noqa: F811
except Exception:  # noqa: BLE001 - private API: without it the handler always takes the disabled path
    pass


#: the autograd graph task running on this thread (-1: none, so not inside a backward pass); a torch
#: without this private API reads as never in backward (no op breaks over it)
_graph_task_id = getattr(torch._C, "_current_graph_task_id", None) or (lambda: -1)
#: autograd's private accessors, looked up once (a torch without one records no autograd metadata)
_autograd_node = getattr(torch._C, "_current_autograd_node", None) or (lambda: None)
_grad_enabled = torch.is_grad_enabled
_sequence_nr = getattr(getattr(torch._C, "_autograd", None), "_get_sequence_nr", None) or (lambda: None)


class OpTracer(TraceWriting, GrownStorages, TorchDispatchMode):
    """The dispatch mode: records assembled here, the file written by :class:`TraceWriting`, grown
    storages followed by :class:`GrownStorages`."""

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
        self.ordered_mode = mode = mode if mode in ORDERED_MODES else "auto"
        #: which tensors of an op get ``o`` (:meth:`_ordered_for`, asked once per op by the handler):
        #: every input (another device's too), every CPU tensor, every output
        self._sides = (mode in ("inputs", "all"), mode != "off", mode == "all")
        level = extra.get("evidence", "full")
        #: the evidence level (``forensics trace --evidence``, header ``evidence``): ``full`` digests
        #: every element; the light levels write :func:`light_entry`'s entries and no chunk digests, a
        #: same-element view's output its input's light digest where that is the same value
        #: (:func:`light_view_entry`) (:attr:`_entry`: the one function every tensor entry is made by)
        self.evidence = level = level if level in EVIDENCE_LEVELS else "full"
        self._entry = tensor_entry if level == "full" else light_entry(level)
        if level != "full":
            self.chunk_digests = False  # a light entry has none (the header says so)
        #: same-element views are records at full evidence only (header ``views``); at the light levels
        #: the op that reads a view's output digests it, and the view, which computes nothing, is skipped
        self.views_recorded = level == "full"
        at = extra.get("at", "ops")
        #: what a record is (``forensics trace --at``, header ``at``): ``ops``, every ATen op (the
        #: dispatch mode), or ``modules``, every nn.Module call (:mod:`probes.optrace.modules`; no mode)
        self.granularity = at if at in GRANULARITIES else "ops"
        optimizer = extra.get("optimizer")
        #: how an optimizer step is recorded (``forensics trace --optimizer``, header ``optimizer``):
        #: ``ops``, its ops one by one (the mode stays on); ``whole``, one record of its parameters,
        #: gradients and state before and after, the mode off while it runs (:meth:`suspend`)
        self.optimizer_records = optimizer if optimizer in OPTIMIZER_RECORDS and self.granularity == "ops" \
            else default_optimizer(level, self.granularity)
        #: the mode is off for a whole-recorded optimizer step (:meth:`suspend`): True when it was
        #: popped, "passing" when another mode lies on top (the handler then only runs each op)
        self.suspended: bool | str = False
        self.suspended_depth = 0  # optimizer steps (nested: one calling another's) now suspending it
        self.suspended_thread: int | None = None  # the thread whose ops a "passing" mode lets through
        #: ends the optimizer steps that raised before their post-hook (set by the optimizer hooks,
        #: called at each backward(): probes.optrace.hooks._hook_optimizer)
        self.raised_steps: Any = None
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
        """The entry of one tensor (:func:`probes.optrace.digest.tensor_entry`) with this config's
        chunk-digest switch."""
        return self._entry(t, chunks, ordered, xor, self.chunk_digests)

    def _view_entry(self, in0: dict[str, Any], x: torch.Tensor, out: torch.Tensor, order_view: bool) -> dict[str, Any] | None:
        """A same-element view's output entry from its input's digests, or None (digest it):
        :func:`probes.optrace.digest.view_entry`."""
        return view_entry(in0, x, out, order_view, self._ordered_for(out, "out"))

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

    _chunks = staticmethod(chunk_sums)
    _args_digest = staticmethod(args_entry)

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
                phase = stack[-1] if stack else ("backward" if backward else "forward") if backward is not None \
                    else self._phase(backward)
                rec = new_record(self.seq, identity, name, kind, self.window.step, phase, inputs, outputs, meta)
                if autograd_seq is not None and autograd_seq not in self.fwd_by_seq:
                    if len(self.fwd_by_seq) >= MAX_FORWARD_NODES:
                        self.fwd_by_seq.clear()
                    self.fwd_by_seq[autograd_seq] = identity  # the first op at this number created the node
                self.seq += 1
                if _Digest.made == _Digest.resolved:  # no device digest pending anywhere, so none in rec:
                    try:  # its line now, while it is in the cache; the dicts are freed and reused at once
                        rec = record_line(rec)
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
        if not asked[1] or self.closed or self.failed is not None \
                or self.suspended and threading.get_ident() == self.suspended_thread \
                or _forks.forked and os.getpid() != self.pid:  # _forks.foreign, inline
            return func(*args, **kwargs)
        info = _OP_BY_ID.get(id(func))
        if info is None or info.func is not func:
            info = op_info(func)
        name, base = info.name, info.base
        if info.skip or (info.view and not self.views_recorded and not info.lift):  # a light level's view
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
        every, cpu, out_every = self._sides  # _ordered_for(x, "in") and (x, "out"), once per op
        entry, chunked = self._entry, self.chunk_digests  # self._digest, without its frame per tensor
        if info.lift:
            inputs = [entry(x, chunks, every or (cpu and x.is_cpu), True, chunked) for x in tensors]
        elif len(tensors) > 1 and (tensors[0] is tensors[1] if len(tensors) == 2 else
                                   len({id(x) for x in tensors}) < len(tensors)):
            inputs = self._digest_once(tensors, chunks, every, cpu)  # one tensor twice: addcmul_(g, g)
        else:
            inputs = [entry(x, chunks, every or (cpu and x.is_cpu), False, chunked) for x in tensors]
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
              and (reused := (self._view_entry if entry is tensor_entry else light_view_entry)(
                  inputs[0], args[0], out, info.order_view)) is not None):
            outputs = [reused]
        elif info.written:  # a void op that writes its arguments: their digests after it ran
            outputs, meta["written"] = self._written_outputs(info.written, args, kwargs, chunks, out_every, cpu)
        else:
            if out.__class__ is tensor:
                outputs = [entry(out, chunks, out_every or (cpu and out.is_cpu), False, chunked)]
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


    # ------------------------------------------------------------------ mode on/off
    def enter(self, _step: int = 0) -> None:
        if self.granularity == "modules":  # module hooks record; no dispatch mode
            return
        if not self.entered and not _forks.foreign(self.pid):
            self.__enter__()
            self.entered = True

    def suspend(self) -> None:
        """The mode off for a whole-recorded optimizer step (``optimizer_records`` ``whole``), for
        this thread: popped when it is this thread's innermost mode (the step's ops then cost
        nothing), else left in place and passing this thread's ops straight through (another
        thread's ops are traced as before). Nested steps (an optimizer whose step calls another's)
        count: the mode comes back when the outermost ends. :meth:`resume` undoes it; the next
        ``backward()``, step boundary or :meth:`leave` too, for a step that raised before its
        post-hook ran."""
        self.suspended_depth += 1
        if self.suspended or not self.entered:
            return
        self.suspended_thread = threading.get_ident()
        try:
            from torch.utils._python_dispatch import _get_current_dispatch_mode  # noqa: PLC0415

            innermost = _get_current_dispatch_mode() is self
        except Exception:  # noqa: BLE001 - private API: pass ops through instead
            innermost = False
        if innermost:
            try:
                self.__exit__(None, None, None)
                self.suspended = True
                return
            except Exception:  # noqa: BLE001
                pass
        self.suspended = "passing"

    def resume(self, all_levels: bool = False) -> None:
        """The mode back on after a whole-recorded optimizer step (:meth:`suspend`): when the
        outermost suspended step ends, or at once (``all_levels``: a step raised)."""
        self.suspended_depth = 0 if all_levels else max(0, self.suspended_depth - 1)
        if self.suspended_depth:
            return
        popped, self.suspended = self.suspended is True, False
        if popped and self.entered:
            try:
                self.__enter__()
            except Exception:  # noqa: BLE001 - never break the program: no more op records
                self.entered = False

    def leave(self, _step: int = 0) -> None:
        if self.issuers is not None:
            self.issuers.forget()
        if self.suspended:  # an optimizer step raised before its post-hook: the mode is already off
            popped, self.suspended, self.suspended_depth = self.suspended is True, False, 0
            if popped:
                self.entered = False
        if self.entered:
            self.entered = False
            try:
                self.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - another mode on top, or another thread
                pass

