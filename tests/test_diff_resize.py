"""``Tensor.resize_`` that grows a tensor leaves its new elements uninitialised: whatever bytes the
allocator hands back. Two identical runs can differ there, so before this rule the differ named
"ORIGIN (proven) aten.resize_.default:1, inputs MATCH" on a program that computes the same thing
twice. A resize that grows is now a probe artifact (its garbage followed like empty*'s); one that
keeps or shrinks the size is judged as any op."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from forensics.tracediff.traces import TensorDigest, TraceRecord
from forensics.tracediff.divergence import artifact_reason

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

REPO = Path(__file__).resolve().parents[1]

PROGRAM = textwrap.dedent("""
    import time, torch
    torch.manual_seed(0)
    junk = torch.empty(64)
    junk.numpy()[:] = float(time.time_ns() % 100_003)  # run-dependent bytes in a block the allocator gets back
    del junk
    b = torch.ones(3)
    b.resize_(64)  # the new 61 elements: whatever the allocator hands back
    print(float(b[:3].sum()))
""")


def _resize(n_in: int, n_out: int) -> TraceRecord:
    return TraceRecord(rank=0, seq=0, identity="aten.resize_.default:1", name="aten.resize_.default",
                       inputs=[TensorDigest(shape=(n_in,), dtype="float32", numel=n_in, ordered="0" * 16)],
                       outputs=[TensorDigest(shape=(n_out,), dtype="float32", numel=n_out, ordered="1" * 16)])


def test_a_resize_that_grows_is_an_artifact_one_that_shrinks_is_not():
    assert "uninitialised" in (artifact_reason(_resize(3, 64)) or "")
    assert artifact_reason(_resize(64, 3)) is None
    assert artifact_reason(_resize(8, 8)) is None


@pytest.mark.slow
def test_two_identical_runs_that_grow_a_tensor_have_no_divergence(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "grow.py"
    script.write_text(PROGRAM)
    for run in ("a", "b"):
        proc = subprocess.run([sys.executable, "-m", "forensics.cli", "trace", "--out", str(tmp_path / run), "--",
                               sys.executable, str(script)], capture_output=True, text=True, cwd=REPO, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    from forensics.tracediff.diff import diff_paths

    res = diff_paths(tmp_path / "a", tmp_path / "b").ranks[0]
    assert res.first_divergence is None, res.first_divergence
    grown = [a for a in res.artifacts if a.name == "aten.resize_.default"]
    # the garbage differs in almost every pair of runs (glibc hands the freed block back); when it
    # happens not to, the record matches and there is nothing to pass over
    assert all("uninitialised" in a.artifact for a in grown)
