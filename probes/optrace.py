"""The op-level tracer: every ATen op of this rank, fingerprinted, into ``rank<R>/trace.jsonl``.

A :class:`~torch.utils._python_dispatch.TorchDispatchMode` sees every op below autograd (backward
ops included). Each record gets the identity ``op:occurrence`` (counted per op name on this rank,
so two runs align offline whatever the arrival order), input digests taken *before* the op runs
and output digests after, with shape/dtype/numel. Digests are ``torch.hash_tensor`` results kept
on the tensor's device; at flush they are concatenated and read with ONE host transfer.

Ops whose failure mode is reordering (:data:`CHUNKED_OPS`) also get position-weighted chunk
digests: a whole-tensor XOR cannot see a permutation, these can. Semantic records mark known
boundaries: torch.distributed collectives (``collective.<fn>``), optimizer step, backward
start/end. Off unless ``optrace`` is in the probe config; no collective is ever added; the step
window, the rank filter and the record budget bound what is written. docs/trace-format.md
describes the file.
"""
from __future__ import annotations

import functools
import json
import os
import sys
import threading
import zlib
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_leaves

from probes.config import ProbeConfig
from probes.window import StepWindow, world_size

SCHEMA = "forensics.optrace"
SCHEMA_VERSION = 1
HASH_NAME = "torch.hash_tensor(xor,float64-bits)"
CHUNK_NAME = "position-weighted int64 sum, 16 chunks"

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
#: Ops never recorded (the tracer's own work, or pure metadata queries).
SKIPPED_OPS = frozenset({"hash_tensor", "_local_scalar_dense", "sym_size", "sym_stride", "sym_numel",
                         "sym_storage_offset", "is_same_size", "_has_compatible_shallow_copy_type"})
N_CHUNKS = 16
FLUSH_EVERY = 2048  # records kept pending (digests on device) before one host transfer
_MASK = (1 << 64) - 1
_GOLDEN = -7046029254386353131  # 0x9E3779B97F4A7C15 as int64: odd, so weights stay distinct


def _op_name(func: Any) -> str:
    return str(func)  # "aten.mm.default"


def _packet(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[0] in ("aten", "c10d", "prims")) else parts[0]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's values as int64 words, the way hash_tensor sees them (floats via float64 bits)."""
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.is_floating_point():
        return t.to(torch.float64).view(torch.int64)
    return t.to(torch.int64)


class _Pending:
    """Digest tensors (on device) waiting for the next flush; entries refer to them by index."""

    def __init__(self) -> None:
        self.tensors: list[torch.Tensor] = []
        self.size = 0

    def add(self, t: torch.Tensor) -> tuple[int, int]:
        flat = t.reshape(-1)
        if flat.dtype != torch.int64:
            flat = flat.view(torch.int64)
        start = self.size
        self.tensors.append(flat)
        self.size += flat.numel()
        return start, flat.numel()

    def resolve(self) -> list[str]:
        """One host transfer for everything pending: hex strings by index."""
        if not self.tensors:
            return []
        by_device: dict[Any, list[torch.Tensor]] = {}
        for t in self.tensors:
            by_device.setdefault(t.device, []).append(t)
        if len(by_device) == 1:
            values = torch.cat(self.tensors).tolist()
        else:  # mixed devices: one transfer per device, then restore the order
            values = torch.cat([t.cpu() for t in self.tensors]).tolist()
        self.tensors, self.size = [], 0
        return [format(v & _MASK, "016x") for v in values]


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
        self.records: list[dict[str, Any]] = []  # pending records (digests unresolved)
        self.pending = _Pending()
        self.phase_stack: list[str] = []
        self.closed = False
        self.entered = False
        self._guarded: Any = None
        self.out_dir = Path(out_dir)
        self.file: Any = None  # opened at the first flush with records (a launcher that runs no op writes nothing)
        self.path: Path | None = None

    # ------------------------------------------------------------------ file
    def _ensure_open(self) -> None:
        if self.file is None:
            self.path = self._open(self.out_dir)
            self._write_header()

    def _open(self, out_dir: Path) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / "trace.jsonl"
        try:
            self.file = open(path, "x", buffering=1 << 20)  # never overwrite a capture
        except FileExistsError:  # a second process on this rank (spawned worker): its own file
            path = out_dir / f"trace.{self.pid}.jsonl"
            self.file = open(path, "x", buffering=1 << 20)
        return path

    def _write_header(self) -> None:
        from forensics.capture.environment import relevant_env  # noqa: PLC0415 (pure stdlib, no torch)

        command = self.cfg.extra.get("command") if isinstance(self.cfg.extra, dict) else None
        header = {
            "type": "header", "schema": SCHEMA, "version": SCHEMA_VERSION, "rank": self.rank,
            "world_size": world_size(), "argv": command or list(getattr(sys, "orig_argv", sys.argv)),
            "script_argv": list(sys.argv), "pid": self.pid,
            "versions": {"torch": torch.__version__, "python": sys.version.split()[0]},
            "env": relevant_env(), "steps": self.cfg.steps, "ranks": self.cfg.ranks,
            "max_records": self.max_records, "hash": HASH_NAME,
            "chunks": CHUNK_NAME if self.chunk_digests else None,
            "chunked_ops": sorted(CHUNKED_OPS) if self.chunk_digests else [],
        }
        self.file.write(json.dumps(header) + "\n")

    # ------------------------------------------------------------------ digests
    def _digest(self, t: torch.Tensor, chunks: bool) -> dict[str, Any]:
        entry: dict[str, Any] = {"s": list(t.shape), "t": str(t.dtype).removeprefix("torch."), "n": t.numel()}
        if t.is_sparse or t.is_quantized or t.device.type == "meta" or type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
            entry["ev"] = "metadata"
            return entry
        try:
            if t.numel() == 0:
                entry["h"] = "0" * 16
            else:
                x = t.detach()
                try:
                    h = torch.hash_tensor(x)
                except (RuntimeError, NotImplementedError):
                    h = torch.hash_tensor(_bits(x))
                entry["h"] = self.pending.add(h)[0]
                if chunks and self.chunk_digests:
                    entry["c"] = self.pending.add(self._chunks(x))
        except Exception:  # noqa: BLE001 - never let a digest break the user's op
            entry.pop("h", None)
            entry["ev"] = "metadata"
            return entry
        return entry

    @staticmethod
    def _chunks(x: torch.Tensor) -> torch.Tensor:
        """Position-weighted digests of N_CHUNKS contiguous chunks (a permutation changes them)."""
        flat = _bits(x.reshape(-1))
        n = flat.numel()
        k = min(N_CHUNKS, n)
        size = -(-n // k)
        w = torch.arange(n, device=flat.device, dtype=torch.int64).mul_(_GOLDEN).bitwise_or_(1)
        prod = flat * w
        if size * k != n:
            prod = torch.nn.functional.pad(prod, (0, size * k - n))
        return prod.view(k, size).sum(1)

    @staticmethod
    def _args_digest(values: list[Any]) -> dict[str, Any] | None:
        """Non-tensor arguments (scalars, sizes, dtypes) as one stable digest; None when none."""
        if not values:
            return None
        text = "|".join(_stable_repr(v) for v in values)
        return {"s": None, "t": "args", "n": len(values), "h": format(zlib.crc32(text.encode()), "016x")}

    # ------------------------------------------------------------------ recording
    def _recording(self) -> bool:
        return (not self.closed and self.window.active and os.getpid() == self.pid)

    def _phase(self) -> str:
        if self.phase_stack:
            return self.phase_stack[-1]
        return "backward" if torch._C._current_graph_task_id() != -1 else "forward"

    def _next_identity(self, name: str) -> str:
        n = self.counts.get(name, 0) + 1
        self.counts[name] = n
        return f"{name}:{n}"

    def _budget_ok(self) -> bool:
        if self.seq >= self.max_records:
            self.dropped += 1
            return False
        return True

    def add_record(self, name: str, kind: str, inputs: list, outputs: list, meta: dict | None = None) -> None:
        with self.lock:
            if not self._budget_ok():
                return
            rec = {"seq": self.seq, "id": self._next_identity(name), "op": name, "kind": kind,
                   "step": self.window.step, "phase": self._phase(), "in": inputs, "out": outputs}
            if meta:
                rec["meta"] = meta
            self.seq += 1
            self.records.append(rec)
            if len(self.records) >= FLUSH_EVERY:
                self.flush()

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
        if guarded is not None:
            return guarded(func, types, args, kwargs)
        return self._dispatch(func, types, args, kwargs)

    def _dispatch(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN202
        kwargs = kwargs or {}
        if not self._recording():
            return func(*args, **kwargs)
        name = _op_name(func)
        base = _packet(name)
        if base in SKIPPED_OPS or name.startswith("profiler."):
            return func(*args, **kwargs)
        if self.seq >= self.max_records:
            self.dropped += 1
            return func(*args, **kwargs)
        chunks = base in CHUNKED_OPS
        leaves = tree_leaves((args, kwargs))
        inputs = [self._digest(x, chunks) for x in leaves if isinstance(x, torch.Tensor)]
        extra = self._args_digest([x for x in leaves if not isinstance(x, torch.Tensor)])
        if extra is not None:
            inputs.append(extra)
        meta: dict[str, Any] = {}
        out = func(*args, **kwargs)
        kind = "op"
        if name.startswith(("c10d.", "_c10d_functional.")):
            kind, outputs = "collective", []  # in flight until waited: the semantic record has the result
            meta["async"] = True
        elif (base in SAME_ELEMENT_VIEWS and isinstance(out, torch.Tensor) and inputs and "h" in inputs[0]
              and isinstance(args[0], torch.Tensor) and out.numel() == args[0].numel() and out.dtype == args[0].dtype):
            outputs = [{"s": list(out.shape), "t": inputs[0]["t"], "n": out.numel(), "h": inputs[0]["h"]}]
        else:
            out_leaves = tree_leaves(out)
            outputs = [self._digest(x, chunks) if isinstance(x, torch.Tensor) else
                       self._args_digest([x]) for x in out_leaves if x is not None and not _is_opaque(x)]
        if base in ("_to_copy", "copy_", "copy") and _non_blocking(base, args, kwargs):
            meta["non_blocking"] = True
        gemm = _gemm_meta(name, args, kwargs, out)
        if gemm is not None:
            meta["gemm"] = gemm
        self.add_record(name, kind, inputs, outputs, meta)
        return out

    # ------------------------------------------------------------------ semantic records
    def semantic(self, name: str, kind: str, inputs: list[torch.Tensor], outputs: list[torch.Tensor],
                 meta: dict | None = None) -> None:
        """A boundary record (collective, optimizer, backward) from outside the dispatch mode."""
        if not self._recording() or self.seq >= self.max_records:
            if self._recording():
                self.dropped += 1
            return
        with _disable_current_modes():
            ins = [self._digest(t, False) for t in inputs]
            outs = [self._digest(t, False) for t in outputs]
        self.add_record(name, kind, ins, outs, meta)

    def digests_now(self, tensors: list[torch.Tensor]) -> list[dict]:
        """Input digests taken before a wrapped call runs (collectives change their inputs)."""
        if not self._recording():
            return []
        with _disable_current_modes():
            return [self._digest(t, False) for t in tensors]

    def semantic_digested(self, name: str, kind: str, ins: list[dict], outputs: list[torch.Tensor],
                          meta: dict | None = None) -> None:
        if not self._recording():
            return
        with _disable_current_modes():
            outs = [self._digest(t, False) for t in outputs]
        self.add_record(name, kind, ins, outs, meta)

    # ------------------------------------------------------------------ flush / close
    def flush(self) -> None:
        with self.lock:
            if not self.records:
                return
            with _disable_current_modes():
                hexes = self.pending.resolve()
            lines = []
            for rec in self.records:
                for side in ("in", "out"):
                    for e in rec[side]:
                        if e is None:
                            continue
                        h = e.get("h")
                        if isinstance(h, int):
                            e["h"] = hexes[h]
                        c = e.get("c")
                        if isinstance(c, tuple):
                            e["c"] = hexes[c[0]:c[0] + c[1]]
                lines.append(json.dumps(rec, separators=(",", ":")))
            self.records = []
            self._ensure_open()
            self.file.write("\n".join(lines) + "\n")

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.flush()
            self.closed = True
            self.leave()
            if self.file is None and self.seq == 0 and self.dropped == 0:
                return  # nothing traced in this process: no file
            self._ensure_open()
            footer = {"type": "footer", "records": self.seq, "dropped": self.dropped,
                      "last_step": self.window.step,
                      "seeds": {"torch_initial_seed": _initial_seed(),
                                "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED")}}
            self.file.write(json.dumps(footer) + "\n")
            self.file.close()

    # ------------------------------------------------------------------ mode on/off
    def enter(self, _step: int = 0) -> None:
        if not self.entered and os.getpid() == self.pid:
            self.__enter__()
            self.entered = True

    def leave(self, _step: int = 0) -> None:
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


def _gemm_meta(name: str, args: tuple, kwargs: dict, out: Any) -> dict | None:
    """``{"layout", "acc", "grad", "m", "n", "k", ...}`` for GEMM ops (probes.gemm_naming), else None."""
    try:
        from probes import gemm_naming  # noqa: PLC0415
    except ImportError:
        return None
    if not gemm_naming.is_gemm(name):
        return None
    try:
        call = gemm_naming.name_gemm(name, args, kwargs, gemm_naming.in_backward(),
                                     out if isinstance(out, torch.Tensor) else None)
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


class _Installed:
    """What :func:`install` returns: ``close()`` flushes, writes the footer and unhooks."""

    def __init__(self, tracer: OpTracer, restore: list, handles: list) -> None:
        self.tracer, self.restore, self.handles = tracer, restore, handles

    def close(self) -> None:
        self.tracer.close()
        for mod, name, orig in self.restore:
            setattr(mod, name, orig)
        for h in self.handles:
            h.remove()
        self.restore, self.handles = [], []


def install(cfg: ProbeConfig, window: StepWindow, out_dir: Path, rank: int) -> _Installed:
    """Start tracing this rank: the mode is pushed when the window opens and popped when it closes."""
    tracer = OpTracer(cfg, window, Path(out_dir), rank)
    handles = _hook_optimizer(tracer)  # before activate's window hook: records land in this step
    restore = _wrap_collectives(tracer) + _wrap_backward(tracer)
    window.on_enter.append(tracer.enter)
    window.on_step.append(lambda _s: tracer.flush())
    window.on_exit.append(lambda _s: tracer.close())
    return _Installed(tracer, restore, handles)
