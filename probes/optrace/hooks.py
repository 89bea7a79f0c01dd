"""The tracer's hooks outside the dispatcher: semantic records for torch.distributed collectives
(``collective.<fn>``), ``optimizer.step``, ``backward.start``/``backward.end`` and storage-level
resizes, the uncaught-exception note, and :func:`install`, which puts them and the tracer in place
for a step window and takes them away again (:class:`_Installed`)."""
from __future__ import annotations

import functools
import sys
import threading
from pathlib import Path
from typing import Any

import torch

from probes.config import ProbeConfig
from probes.optrace.ops import _tensors_of
from probes.optrace.tracer import OpTracer
from probes.window import StepWindow

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
        if tracer.raised_steps is not None:  # optimizer steps that raised before their post-hook
            tracer.raised_steps()
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
    """``optimizer.step`` records. ``optimizer_records`` ``ops``: inputs = params and grads before,
    outputs = params after, the step's own ops traced one by one. ``whole``: inputs = params, grads
    and every tensor of the optimizer's state before (parameter by parameter, state keys in sorted
    order), outputs = params and state after, and the mode off while the step runs
    (:meth:`OpTracer.suspend`): its ops are not traced. ``meta`` says how many of each."""
    from torch.optim.optimizer import (  # noqa: PLC0415
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    # id(optimizer) -> (digests before, counts, whether the step was given a closure), from the
    # pre-hook to the post-hook
    state: dict[int, tuple[list[dict], list[int], bool]] = {}
    whole = tracer.optimizer_records == "whole"

    def raised_steps() -> None:
        """At a ``backward()``: a step given no closure never runs one, so a step of that kind still
        open here raised before its post-hook. Its record is never written; the phase leaves
        ``optimizer``, and at ``whole`` the mode comes back (a closure's backward, inside LBFGS's
        step, changes nothing)."""
        if not state:
            return
        for key in [k for k, v in state.items() if not v[2]]:
            state.pop(key)
            if tracer.phase_stack and tracer.phase_stack[-1] == "optimizer":
                tracer.phase_stack.pop()
        if tracer.suspended and tracer.suspended_thread == threading.get_ident():
            tracer.resume(all_levels=True)

    tracer.raised_steps = raised_steps

    def params_of(opt: Any) -> list[torch.Tensor]:
        return [p for g in opt.param_groups for p in g["params"] if isinstance(p, torch.Tensor)]

    def state_of(opt: Any, ps: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[str]]:
        """The optimizer's state tensors, parameter by parameter, and their keys (``exp_avg``...)."""
        tensors: list[torch.Tensor] = []
        keys: list[str] = []
        try:
            st = opt.state
            for p in ps:
                s = st.get(p) if p in st else None
                if not isinstance(s, dict):
                    continue
                for k in sorted(s, key=str):
                    if isinstance(s[k], torch.Tensor):
                        tensors.append(s[k])
                        if str(k) not in keys:
                            keys.append(str(k))
        except Exception:  # noqa: BLE001 - an optimizer whose state is not a dict of tensors: params only
            return [], []
        return tensors, keys

    def pre(opt: Any, args: Any = (), kwargs: Any = None, *_a: Any) -> None:
        ps = params_of(opt)
        tracer.phase_stack.append("optimizer")
        grads = [p.grad for p in ps if p.grad is not None]
        # a closure (LBFGS) runs a forward and backward inside the step: at whole, its ops stay traced
        # (torch passes the step's own arguments, the optimizer first)
        try:
            rest = tuple(args)[1:] if isinstance(args, tuple) and args and args[0] is opt else tuple(args or ())
            closure = (rest[0] if rest else None) or (kwargs.get("closure") if isinstance(kwargs, dict) else None)
        except Exception:  # noqa: BLE001 - arguments we cannot read: take it as given a closure (mode stays on)
            closure = True
        if whole:
            held, _keys = state_of(opt, ps)
            state[id(opt)] = (tracer.digests_now(ps + grads + held), [len(ps), len(grads), len(held)],
                              closure is not None)
            if closure is None:
                tracer.suspend()
        else:
            state[id(opt)] = (tracer.digests_now(ps + grads), [], closure is not None)

    def post(opt: Any, *_a: Any, **_k: Any) -> None:
        opened = id(opt) in state  # its pre-hook ran (and, given no closure at whole, suspended the mode)
        before, counts, closure = state.pop(id(opt), ([], [], False))
        meta: dict[str, Any] = {"optimizer": type(opt).__name__}
        ps = params_of(opt)
        outputs = ps
        if whole:
            if opened and not closure:
                tracer.resume()
            held, keys = state_of(opt, ps)
            outputs = ps + held
            meta["whole"] = True
            if closure:
                meta["closure"] = True  # its ops (the closure's forward and backward, the update) are records
            if counts:
                meta["in"] = {"params": counts[0], "grads": counts[1], "state": counts[2]}
            meta["out"] = {"params": len(ps), "state": len(held)}
            meta["state"] = keys
        tracer.semantic_digested("optimizer.step", "optimizer", before, outputs, meta)
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
    if tracer.granularity == "modules":  # module boundaries instead of the dispatch mode
        from probes.optrace.modules import hook_modules  # noqa: PLC0415

        handles += hook_modules(tracer)
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
