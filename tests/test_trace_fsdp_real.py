"""FSDP2 under `forensics trace`, for real (2 ranks, gloo, CPU). The tracer broke this program twice
over: reading tensors through ``.numpy()`` made their storages unresizable, so FSDP2's
``storage.resize_(0)`` raised "Trying to resize storage that is not resizable"; reading memory in
place instead read a DTensor parameter's bogus data pointer (SIGSEGV). The program must run to
its end, traced, with complete traces on both ranks.

FSDP2 re-allocates an unsharded parameter with ``untyped_storage().resize_(n)``, outside the
dispatcher: the grown storage holds uninitialised bytes (glibc's free-list pointers and stale data),
read by the ``view`` that feeds the all-gather copy-out before ``split_with_sizes_copy`` overwrites
every byte. Two identical runs then read different garbage there, and the differ named "RECEIVER
aten.view.default:22" (backward, step 0) as their first divergence, hiding any real one after it.
The tracer now records storage resizes (``storage.resize_`` events) and marks a tensor read from a
grown storage no traced op has written (``g``); the differ passes such a read over as uninitialised
memory while its differing outputs are that memory still."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_trace_command import env  # noqa: E402
from tests.test_trace_kill import free_port  # noqa: E402

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built in")]
REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "data" / "scripts" / "optrace_fsdp2.py"


def _trace(out: Path, *script_args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "trace", "--out", str(out), "--", sys.executable,
                           "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
                           str(SCRIPT), *script_args], capture_output=True, text=True, cwd=out.parent, timeout=600,
                          env=env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


def test_fsdp2_runs_to_its_end_under_the_tracer(tmp_path):
    out = tmp_path / "t"
    _trace(out)
    for rank in (0, 1):
        lines = [json.loads(x) for x in (out / f"rank{rank}" / "trace.jsonl").read_text().splitlines()]
        assert lines[-1]["type"] == "footer" and lines[-1]["stopped"] is None
        assert lines[-1]["records"] > 100
        params = [e for r in lines[1:-1] if r.get("op") == "optimizer.step" for e in r["in"]]
        assert params and all(e.get("ev") == "metadata" for e in params)  # DTensors: metadata, no collective


def _records(run: Path, rank: int) -> list[dict]:
    return [json.loads(x) for x in (run / f"rank{rank}" / "trace.jsonl").read_text().splitlines()][1:-1]


THREAD_SPLIT_REDUCTIONS = {"aten.mean.default", "aten.mean.dim", "aten.sum.default", "aten.sum.dim_IntList",
                           "aten.native_layer_norm.default", "aten.native_layer_norm_backward.default",
                           "aten._foreach_norm.Scalar", "aten.linalg_vector_norm.default"}


def test_fsdp2_traced_twice_has_no_divergence_and_threads_are_still_found(tmp_path):
    """The same FSDP2 program traced twice: no divergence (the re-grown parameter buffers' garbage is
    passed over as uninitialised memory, never a RECEIVER); with 2 threads instead of 1, the first
    divergence on each rank is still an ORIGIN at a real op, not the garbage before it."""
    from forensics.tracediff.diff import diff_paths

    runs = {name: tmp_path / name for name in ("a", "b", "threads2")}
    _trace(runs["a"], "--big")
    _trace(runs["b"], "--big")
    _trace(runs["threads2"], "--big", "--threads", "2")

    for rank in (0, 1):
        recs = _records(runs["a"], rank)
        grows = [r for r in recs if r["op"] == "storage.resize_" and r["meta"]["bytes"][1] > r["meta"]["bytes"][0]]
        assert grows and all(r["kind"] == "event" for r in grows)
        marked = [r for r in recs if any("g" in e for e in r["in"])]
        # every re-grown buffer is read once before it is written: by the copy-out's view
        assert len(marked) == len(grows) and {r["op"] for r in marked} == {"aten.view.default"}
        assert {e["g"] for r in marked for e in r["in"] if "g" in e} == {r["id"] for r in grows}

    same = diff_paths(runs["a"], runs["b"])
    passed = []
    for rank, res in same.ranks.items():
        assert res.first_divergence is None, (rank, res.first_divergence)
        passed += [a for a in res.artifacts if "storage resize grew" in (a.artifact or "")]
    # the garbage differs in practically every pair (glibc's random tcache key, ASLR'd pointers)
    assert passed and all(a.name == "aten.view.default" for a in passed)

    threads = diff_paths(runs["a"], runs["threads2"])
    firsts = {rank: res.first_divergence for rank, res in threads.ranks.items()}
    assert all(d is not None and d.verdict == "ORIGIN" and d.evidence == "proven" for d in firsts.values()), firsts
    assert not any(d.name == "aten.view.default" for d in firsts.values()), firsts
    # which op splits first with the thread count is the CPU's choice (a GEMM on an AVX2 machine, a
    # mean on an AMX one): an op whose float result follows the split of its work, not a copy or view
    assert all((d.site or "").startswith("gemm:") or d.name in THREAD_SPLIT_REDUCTIONS for d in firsts.values()), firsts
