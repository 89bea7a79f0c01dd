"""The op tracer's floor, measured: what each mechanism costs on bench_tracer.py's batch-64 step.

Issue 33 asks for the tracer at batch 64 under 1.5x the untraced step. Earlier passes concluded,
by reasoning, that only a handler in C could get there. This benchmark measures the mechanisms
instead, in one process, the arms' steps interleaved (the order reversed every other round, a
full garbage collection before every step), glibc's allocator steady (bench_tracer.py's
``--steady-allocator``: the benchmark re-executes itself with those variables):

1. untraced;
2. the shipped tracer (probes/optrace), for reference;
3. an empty Python ``TorchDispatchMode`` (bench_tracer.EmptyMode): the floor of a Python handler;
4. a C++ global ``at::RecordFunction`` callback (scope FUNCTION, ``needsInputs(true)``,
   ``needsOutputs(true)``) that only counts calls; beside it the same callback with inputs and
   outputs not asked for (``count, unboxed``: what the boxing costs);
5. the callback digesting every input and output CPU tensor with XXH3-64 (the vendored
   benchmarks/_native/xxhash.h) and appending a small binary record per call to a buffer
   (name id, per tensor digest, numel, dtype), written to a file at the end of each step; and
   the same digesting outputs only (``needsInputs(false)``); each for every call RecordFunction
   sees and for the calls a dispatch mode would see (floor.cpp says how they are told apart);
6. a fuller record for the mode's calls: each tensor's shape beside its digest, the non-tensor
   arguments digested, autograd's sequence number, and the issuer (the GIL taken and Python's
   frames walked to the first outside torch, the standard library and the probes, as optrace's
   ``Issuers.note`` does); the same without the issuer; and without the issuer with no byte read
   (every digest 0: what the records cost beside the bytes);
7. the fuller record without the issuer, with a digest cache: an input's digest reused when the
   same tensor was digested as a recorded output and its version counter has not moved since
   (earlier passes did not build a cache, for what it cannot see: docs/scale.md). One untimed
   step checks it: every reused digest is compared with the digest of the bytes then;
8. the fuller record without the issuer, reading only the bytes optrace reads (its own rules, no
   cache): a tensor passed twice to one call digested once, an ``.out`` buffer and the self of
   ``copy_``/``fill_``/``zero_``/the random fills not digested as inputs, a same-element view's
   output given its input's digest when both lie densely over the same bytes, and
   ``_local_scalar_dense`` and the profiler ops not recorded; and optrace's ``optimizer.step``
   semantic record (parameters and gradients before the step, parameters after), digested in C++
   from optimizer hooks: every byte optrace reads, no more.

The C++ (benchmarks/_native/floor.cpp) is built with ``torch.utils.cpp_extension.load_inline``
into /tmp/forensics-tracer-floor/<isa>/ (built once, reused by later runs; the build time is
printed). The ISA of the build follows the run: ``-mavx2`` under ``benchmarks/isa.py avx2``
(``ATEN_CPU_CAPABILITY=avx2``), ``-march=native`` otherwise, so XXH3 takes the same vector path
as ATen's kernels (the path is printed).

It also counts, for one step, the ops the dispatch mode sees against the calls RecordFunction
sees, by name and count (``--ops`` prints every name).

    python benchmarks/bench_tracer_floor.py
    python benchmarks/isa.py avx2 -- python benchmarks/bench_tracer_floor.py
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_tracer import STEADY_ALLOCATOR, EmptyMode, OptraceArm, cpu_model, make_step  # noqa: E402

NATIVE = Path(__file__).resolve().parent / "_native"
BUILD_ROOT = Path(tempfile.gettempdir()) / "forensics-tracer-floor"
#: xxhash.h's XXH_VECTOR values
VECTORS = {0: "scalar", 1: "SSE2", 2: "AVX2", 3: "AVX-512"}
FUNCTIONS = ["start", "stop", "take", "stats", "reset", "seen", "names", "visible", "set_skip", "issuer_files",
             "verify", "semantic", "xxh3", "xxh3_vector"]


def isa() -> str:
    """``avx2`` under benchmarks/isa.py avx2 (it sets ATEN_CPU_CAPABILITY), else ``native``."""
    return "avx2" if os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == "avx2" else "native"


def build(verbose: bool = False) -> Any:
    """The extension for this run's ISA, built on first use (torch's JIT cache rebuilds only when the
    source or the flags change); prints the time it took."""
    from torch.utils.cpp_extension import load_inline  # noqa: PLC0415 - its import alone takes a second

    kind = isa()
    folder = BUILD_ROOT / kind
    folder.mkdir(parents=True, exist_ok=True)
    # -DNDEBUG as libtorch was built: RecordFunction has a debug-only member, so without it this
    # code and libtorch would disagree on the class's layout
    flags = ["-O3", "-mavx2" if kind == "avx2" else "-march=native", "-DNDEBUG", f"-I{NATIVE}"]
    t = time.perf_counter()
    c = time.process_time()
    ext = load_inline(name=f"forensics_tracer_floor_{kind}", cpp_sources=[(NATIVE / "floor.cpp").read_text()],
                      functions=FUNCTIONS, extra_cflags=flags, build_directory=str(folder), verbose=verbose)
    wall = time.perf_counter() - t
    print(f"native callback: {folder} ({' '.join(flags[:2])}, XXH3 path {VECTORS.get(ext.xxh3_vector(), '?')}): "
          f"built or loaded in {wall:.1f} s wall ({time.process_time() - c:.1f} s CPU in this process; "
          f"a build runs in child processes)")
    return ext


def check_digest(ext: Any) -> None:
    """The vendored XXH3-64 gives the digest optrace writes (the xxhash package's xxh3_64)."""
    import xxhash  # noqa: PLC0415

    data = torch.arange(1000, dtype=torch.float32).numpy()
    ours, theirs = ext.xxh3(data), xxhash.xxh3_64_intdigest(data.tobytes())
    if ours != theirs:
        raise SystemExit(f"vendored xxh3 gives {ours:016x}, the xxhash package {theirs:016x}")


def not_issuers() -> list[str]:
    """Path prefixes whose frames are not an op's issuer (optrace's Issuers: torch, the probes,
    forensics, parsers, the standard library)."""
    import sysconfig  # noqa: PLC0415

    root = Path(__file__).resolve().parents[1]
    dirs = [Path(torch.__file__).resolve().parent, root / "probes", root / "forensics", root / "parsers"]
    dirs += [Path(sysconfig.get_paths()[k]).resolve() for k in ("stdlib", "platstdlib")]
    return sorted({str(d) + os.sep for d in dirs})


class SemanticRecords:
    """optrace's optimizer.step record for a native arm: the parameters and gradients digested before
    the step, the parameters after it (probes/optrace/hooks.py), through the extension. Hooks
    installed once for the process, recording only while ``on``."""

    def __init__(self, ext: Any) -> None:
        from torch.optim.optimizer import (  # noqa: PLC0415
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self.ext, self.on = ext, False

        def params(opt: Any) -> list[torch.Tensor]:
            return [p for g in opt.param_groups for p in g["params"] if isinstance(p, torch.Tensor)]

        def pre(opt: Any, *_a: Any, **_k: Any) -> None:
            if self.on:  # ext.semantic dispatches no op: nothing of it reaches the callback
                ps = params(opt)
                ext.semantic("optimizer.step.before", ps + [p.grad for p in ps if p.grad is not None])

        def post(opt: Any, *_a: Any, **_k: Any) -> None:
            if self.on:
                ext.semantic("optimizer.step", params(opt))

        self.handles = [register_optimizer_step_pre_hook(pre), register_optimizer_step_post_hook(post)]


class NativeArm:
    """The RecordFunction callback, installed for this arm's steps only (added before the step and
    removed after it: with no global callback installed RecordFunction costs the other arms nothing).
    A recording arm writes the step's records to a file, as the shipped tracer writes its batch."""

    def __init__(self, ext: Any, mode: int, out: Path | None = None, semantic: SemanticRecords | None = None) -> None:
        self.ext, self.mode, self.semantic = ext, mode, semantic
        self.file = open(out, "wb") if out is not None else None  # noqa: SIM115 - closed in close()
        self.calls = self.bytes = self.tensors = self.copies = self.steps = self.written = self.issuers = self.reused = 0

    @contextlib.contextmanager
    def __call__(self):
        self.ext.reset()
        self.ext.start(self.mode)
        if self.semantic is not None:
            self.semantic.on = True
        try:
            yield
        finally:
            self.ext.stop()
            if self.semantic is not None:
                self.semantic.on = False
            if self.file is not None:
                data = self.ext.take()
                self.file.write(data)
                self.file.flush()
                self.written += len(data)
            s = self.ext.stats()
            self.calls += s["calls"]
            self.bytes += s["bytes"]
            self.tensors += s["tensors"]
            self.copies += s["copies"]
            self.issuers += s["issuers"]
            self.reused += s["reused"]
            self.steps += 1

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


class NamesMode(TorchDispatchMode):
    """Counts the ops a dispatch mode sees (what optrace records one record for, by name)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.seen[str(func)] += 1
        return func(*args, **(kwargs or {}))


def rf_key(name: str) -> str:
    """``aten::addmm.default`` (RecordFunction) as the mode names it: ``aten.addmm.default``."""
    return name.replace("::", ".", 1)


def op_sets(ext: Any, step: Any, show: bool) -> None:
    """One step under each: the mode's op names and counts against RecordFunction's, by depth."""
    mode = NamesMode()
    with mode:
        step()
    ext.reset()
    ext.start(4)
    try:
        step()
    finally:
        ext.stop()
    rf_all: collections.Counter[str] = collections.Counter()
    rf_top: collections.Counter[str] = collections.Counter()
    for name, depth, n in ext.seen():
        rf_all[rf_key(name)] += n
        if depth == 0:
            rf_top[rf_key(name)] += n
    seen = mode.seen
    same = sorted(k for k in seen if rf_all.get(k) == seen[k])
    fewer = sorted(k for k in seen if 0 < rf_all.get(k, 0) < seen[k])
    more = sorted(k for k in seen if rf_all.get(k, 0) > seen[k])
    missing = sorted(k for k in seen if k not in rf_all)
    extra = sorted(k for k in rf_all if k not in seen)
    print(f"op sets, one step: the dispatch mode sees {sum(seen.values())} ops ({len(seen)} names); "
          f"RecordFunction (scope FUNCTION) {sum(rf_all.values())} calls ({len(rf_all)} names), "
          f"{sum(rf_top.values())} of them at depth 0 (not inside another recorded call)")
    print(f"  names with equal counts: {len(same)} ({sum(seen[k] for k in same)} ops)")
    print(f"  names RecordFunction sees more often: {len(more)} "
          f"(mode {sum(seen[k] for k in more)}, RecordFunction {sum(rf_all[k] for k in more)})")
    print(f"  names RecordFunction sees less often: {len(fewer)}; names it never sees: {len(missing)} "
          f"({sum(seen[k] for k in missing)} ops)")
    print(f"  names only RecordFunction sees: {len(extra)} ({sum(rf_all[k] for k in extra)} calls, "
          f"{sum(rf_top[k] for k in extra)} at depth 0)")
    rule = {rf_key(k): v for k, v in ext.visible().items()}
    agree = sorted(k for k in set(seen) | set(rule) if seen.get(k, 0) == rule.get(k, 0))
    differ = sorted(k for k in set(seen) | set(rule) if seen.get(k, 0) != rule.get(k, 0))
    print(f"  RecordFunction's calls filtered to the mode's set (floor.cpp: no CompositeImplicitAutograd "
          f"op, nothing inside an op's kernel): {sum(rule.values())} calls; {len(agree)} names agree in count "
          f"({sum(seen[k] for k in agree)} ops), {len(differ)} differ: "
          + (", ".join(f"{k} mode {seen.get(k, 0)} rule {rule.get(k, 0)}" for k in differ) or "none"))
    rows = sorted(set(seen) | set(rf_all), key=lambda k: (-(rf_all.get(k, 0) - seen.get(k, 0)), k))
    limit = None if show else 12
    print(f"  {'op':44s} {'mode':>5s} {'RF':>5s} {'RF d0':>6s} {'rule':>5s}"
          + ("" if show else "  (the 12 largest differences; --ops: all)"))
    shown = [k for k in rows if show or rf_all.get(k, 0) != seen.get(k, 0)][:limit]
    for k in shown:
        print(f"  {k:44s} {seen.get(k, 0):5d} {rf_all.get(k, 0):5d} {rf_top.get(k, 0):6d} {rule.get(k, 0):5d}")


def check_reuse(ext: Any, step: Any, mode: int, what: str) -> None:
    """One step of a reusing arm with every reused digest checked against its bytes."""
    ext.reset()
    ext.verify(True)
    ext.start(mode)
    try:
        step()
    finally:
        ext.stop()
        ext.verify(False)
        ext.take()
    s = ext.stats()
    print(f"{what}, one step checked: {s['reused']} digests reused, {s['stale']} of the checked ones stale "
          f"(differing from the bytes' digest)")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--ops", action="store_true", help="print every op name of the op-set comparison")
    p.add_argument("--verbose-build", action="store_true")
    args = p.parse_args()
    if any(os.environ.get(k) != v for k, v in STEADY_ALLOCATOR.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **STEADY_ALLOCATOR})
    torch.set_num_threads(1)
    load = os.getloadavg()
    print(f"CPU: {cpu_model()}; run: {isa()} (ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', '-')}, "
          f"torch dispatches to {torch.backends.cpu.get_cpu_capability()})")
    print(f"model: {args.layers}x Linear({args.width})+GELU+LayerNorm, AdamW, batch {args.batch}, 1 thread; "
          f"{args.steps} interleaved steps per arm; torch {torch.__version__}; allocator steady; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs")
    ext = build(args.verbose_build)
    check_digest(ext)
    ext.set_skip(not_issuers())
    step = make_step(args.width, args.layers, args.batch)
    out = Path(tempfile.mkdtemp(prefix="bench_tracer_floor_"))
    ours = OptraceArm(out / "optrace")
    natives = {"RF count, unboxed": NativeArm(ext, 5), "RF count": NativeArm(ext, 1),
               "RF xxh3 in+out": NativeArm(ext, 2, out / "records-io.bin"),
               "RF xxh3 out": NativeArm(ext, 3, out / "records-out.bin"),
               "RF xxh3 in+out, mode's ops": NativeArm(ext, 6, out / "records-io-mode.bin"),
               "RF xxh3 out, mode's ops": NativeArm(ext, 7, out / "records-out-mode.bin"),
               "RF full, no issuer": NativeArm(ext, 9, out / "records-full-noissuer.bin"),
               "RF full + issuer": NativeArm(ext, 8, out / "records-full.bin"),
               "RF full, no bytes read": NativeArm(ext, 10, out / "records-full-nobytes.bin"),
               "RF full, version cache": NativeArm(ext, 11, out / "records-io-cache.bin"),
               "RF full, optrace's bytes": NativeArm(ext, 12, out / "records-full-rules.bin", SemanticRecords(ext))}
    arms: dict[str, Any] = {"untraced": contextlib.nullcontext, "optrace": ours, "empty mode": EmptyMode, **natives}
    for ctx in arms.values():  # warm-up: imports (TorchDispatchMode pulls in torch._dynamo), allocator
        for _ in range(2):
            with ctx():
                step()
    op_sets(ext, step, args.ops)
    check_reuse(ext, step, 11, "version cache (inputs)")
    check_reuse(ext, step, 12, "optrace's rules (view outputs checked; a tensor twice in one call is read once)")
    for arm in natives.values():
        arm.calls = arm.bytes = arm.tensors = arm.copies = arm.steps = arm.written = arm.issuers = arm.reused = 0
    times: dict[str, list[float]] = {k: [] for k in arms}
    cpu: dict[str, list[float]] = {k: [] for k in arms}
    order = list(arms.items())
    for i in range(args.steps):
        for name, ctx in (order if i % 2 == 0 else order[::-1]):
            gc.collect()
            c = time.thread_time()
            t = time.perf_counter()
            with ctx():
                step()
            times[name].append(time.perf_counter() - t)
            cpu[name].append(time.thread_time() - c)
    records = ours.close()
    for arm in natives.values():
        arm.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    base, base_cpu = med["untraced"], med_cpu["untraced"]
    print(f"optrace: {records / (args.steps + 2):.0f} records per step")
    print(f"{'arm':27s} {'wall ms':>8s} {'x wall':>7s} {'CPU ms':>8s} {'x CPU':>7s}  per step")
    for k in arms:
        extra = ""
        if k in natives:
            a = natives[k]
            n = max(a.steps, 1)
            extra = f"{a.calls / n:.0f} calls"
            if a.tensors:
                extra += (f", {a.tensors / n:.0f} tensors, {a.bytes / n / 1e6:.1f} MB digested, "
                          f"{a.copies / n:.0f} copied first")
            if a.written:
                extra += f", {a.written / n / 1e3:.1f} kB of records"
            if a.reused:
                extra += f", {a.reused / n:.0f} digests reused"
            if a.issuers:
                extra += f", {a.issuers / n:.0f} issuers found"
        print(f"{k:27s} {med[k] * 1e3:8.2f} {med[k] / base:7.2f} {med_cpu[k] * 1e3:8.2f} {med_cpu[k] / base_cpu:7.2f}  {extra}")
    print(f"issuer files (mode 8): {', '.join(sorted(set(ext.issuer_files()))) or 'none'}")
    load = os.getloadavg()
    print(f"target: < 1.5x untraced (issue 33); CPU {cpu_model()}, {isa()}, "
          f"load average after {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
