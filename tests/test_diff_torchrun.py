"""Two ranks under ``torchrun --nproc-per-node 2`` (CPU, gloo), traced in two real runs.

Rank 0's thread count differs between the runs (1 vs 2), which changes the bits of its float32
sum over 4M elements; rank 1 is configured identically in both runs. The differ must name the
sum as ORIGIN on rank 0 and classify rank 1's first divergence, the gradient all_reduce that
brings rank 0's difference over, as RECEIVER: never a site.
"""
from __future__ import annotations

import socket
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not (hasattr(torch, "hash_tensor") and dist.is_available() and dist.is_gloo_available()):
    pytest.skip("needs torch.hash_tensor and the gloo backend", allow_module_level=True)

from forensics.commands.trace import trace_command  # noqa: E402
from forensics.tracediff.diff import ORIGIN, RECEIVER, diff_paths  # noqa: E402

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parent / "data" / "scripts" / "optrace_ddp.py"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("ddp")

    def run(job: tuple[str, int]) -> int:
        name, threads = job
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
               "--master-port", str(free_port()), str(SCRIPT), "--threads", str(threads)]
        return trace_command(cmd, base / name, steps="all")[0]

    with ThreadPoolExecutor(max_workers=2) as pool:
        codes = list(pool.map(run, [("a", 1), ("b", 2)]))
    assert codes == [0, 0]
    return {"a": base / "a", "b": base / "b"}


def test_both_ranks_traced_rank_local(runs):
    for r in ("a", "b"):
        assert sorted(p.parent.name for p in runs[r].glob("rank*/trace.jsonl")) == ["rank0", "rank1"]


def test_origin_on_rank0_receiver_on_rank1(runs):
    rep = diff_paths(runs["a"], runs["b"])
    d0, d1 = rep.ranks[0].first_divergence, rep.ranks[1].first_divergence
    assert d0.verdict == ORIGIN and d0.identity == "aten.sum.default:1"
    assert d1.verdict == RECEIVER and d1.identity == "collective.all_reduce:1" and d1.site is None
    assert d1.kind == "collective"
    assert rep.pattern == "subset" and rep.site == "aten.sum.default" and rep.site_rank == 0


def test_an_origin_on_some_ranks_under_a_config_difference_says_so(runs, tmp_path):
    """The runs differ in --threads (acting on rank 0 only). "subset" said "the op is likely fine and
    its input distribution, reduction order or rank placement is not", ignoring that difference; and
    `kernel --from` reran run A's command in every arm without saying that its replicas cannot show
    what the difference between the runs does; run B's command is now an arm of its own."""
    import json

    from forensics.tracediff.from_report import site_from_report

    rep = diff_paths(runs["a"], runs["b"])
    assert rep.pattern == "subset" and "the runs differ in argv" in rep.pattern_explanation
    report = tmp_path / "diff.json"
    report.write_text(json.dumps(rep.to_json()))
    found = site_from_report(report)
    assert found.ok and found.rank == 0
    # both sides become arms: run B's command line is arm c1 of the rerun, and --from says so
    assert any(w.startswith("command line differs (A: ") and "arm c1 runs B's command" in w for w in found.warnings)
    cmd_b = found.command[found.command.index("--arm-command") + 1]
    assert "--threads" in cmd_b and cmd_b != " ".join(found.command[found.command.index("--") + 1:])


def test_single_rank_view_of_the_receiver_says_widen(runs):
    rep = diff_paths(runs["a"], runs["b"], rank=1)
    assert rep.pattern == "only_receivers" and rep.site is None and "--ranks all" in rep.next_command


def test_the_same_origin_on_every_rank_under_a_flipped_knob_is_not_called_nondeterministic(tmp_path):
    """OMP_NUM_THREADS=1 vs 2 on both ranks: both ranks' first divergence is the same sum, an ORIGIN.
    The sum is deterministic at either thread count (two runs with one setting do not diverge,
    test_origin_on_rank0...'s rank 1 is one), so "the operation itself is nondeterministic"
    (op_nondeterministic, what this read before) was false: the runs differ in the knob, which the
    pattern now says (same_op_config_differs). The two torchrun ports differ too, which is not a
    difference of the experiment: no argv line."""
    import os
    import subprocess

    def run(job: tuple[str, str]) -> subprocess.CompletedProcess:
        name, threads = job
        cmd = [sys.executable, "-m", "forensics.cli", "trace", "--out", str(tmp_path / name), "--",
               sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
               "--master-port", str(free_port()), str(SCRIPT), "--threads", "0"]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "OMP_NUM_THREADS": threads})

    with ThreadPoolExecutor(max_workers=2) as pool:
        procs = list(pool.map(run, [("a", "1"), ("b", "2")]))
    assert [p.returncode for p in procs] == [0, 0], [p.stderr[-2000:] for p in procs]
    rep = diff_paths(tmp_path / "a", tmp_path / "b")
    for r in (0, 1):
        d = rep.ranks[r].first_divergence
        assert d.verdict == ORIGIN and d.identity == "aten.sum.default:1"
    # the knob, and what it set in each process (the tracer reads torch's thread count)
    assert [(c["field"], c["a"], c["b"]) for c in rep.comparability] == [
        ("env.OMP_NUM_THREADS", "1", "2"), ("switches.torch.get_num_threads", 1, 2)]
    assert [(c["kind"], c["name"], c["catalogued"]) for c in rep.config_differences] == [
        ("knob", "OMP_NUM_THREADS", True), ("switch", "torch.get_num_threads", False)]
    assert rep.pattern == "same_op_config_differs" and "nondeterministic" not in rep.pattern
    assert "env.OMP_NUM_THREADS" in rep.pattern_explanation
    assert "does not show the op nondeterministic" in rep.pattern_explanation
    assert rep.site == "aten.sum.default"
