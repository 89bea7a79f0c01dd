"""Real CPU divergences, traced with `forensics trace` in separate processes and diffed.

Nothing here is synthetic: each workload (tests/data/scripts/optrace_*.py) runs twice in two
processes under the tracer. The sources of difference are genuine:

* a float32 sum over 4M elements whose summation order depends on the intra-op thread count
  (1 vs 2 threads: different bits on torch 2.13 CPU) -> ORIGIN at ``aten.sum.default:1``;
* ``torch.empty`` of a 5000-float buffer whose contents are whatever the allocator left there,
  which differs between processes -> passed over as a probe artifact, never named;
* a sampler permutation from a different seed: the same integers in another order, which a
  whole-tensor XOR digest cannot see and the chunk digests can.
"""
from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
if not hasattr(torch, "hash_tensor"):
    pytest.skip("torch.hash_tensor missing (torch < 2.9)", allow_module_level=True)

from forensics.commands.trace import trace_command  # noqa: E402
from forensics.tracediff.compare import REORDERED  # noqa: E402
from forensics.tracediff.diff import ORIGIN, RECEIVER, diff_paths, diff_streams  # noqa: E402
from forensics.tracediff.traces.native import iter_ranks, run_info  # noqa: E402

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).resolve().parent / "data" / "scripts"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("real")
    jobs = {
        "t1": ["optrace_threads.py", "--threads", "1", "--empty"],
        "t2": ["optrace_threads.py", "--threads", "2", "--empty"],
        "t1b": ["optrace_threads.py", "--threads", "1", "--empty"],
        "s1": ["optrace_shuffle.py", "--seed", "1"],
        "s2": ["optrace_shuffle.py", "--seed", "2"],
        "s1x": ["optrace_shuffle.py", "--seed", "1"],  # XOR digests only (--ordered-digests off)
        "s2x": ["optrace_shuffle.py", "--seed", "2"],
    }

    def run(name: str) -> tuple[str, int]:
        script, *args = jobs[name]
        code, _ = trace_command([sys.executable, str(SCRIPTS / script), *args], base / name, steps="all",
                                ordered_digests="off" if name.endswith("x") else "auto")
        return name, code

    with ThreadPoolExecutor(max_workers=3) as pool:
        codes = dict(pool.map(run, jobs))
    assert all(c == 0 for c in codes.values()), codes
    return {name: base / name for name in jobs}


def records(path: Path) -> list[dict]:
    lines = (path / "rank0" / "trace.jsonl").read_text().splitlines()
    return [json.loads(x) for x in lines[1:-1]]


def test_thread_count_reduction_is_named_as_origin(runs):
    rep = diff_paths(runs["t1"], runs["t2"])
    d = rep.ranks[0].first_divergence
    assert d.verdict == ORIGIN and d.identity == "aten.sum.default:1" and d.inputs_matched
    assert d.evidence == "proven" and rep.site == "aten.sum.default" and rep.site_step == 0
    # the runs differ by the script's --threads argument: run B's command is an arm of the rerun
    assert rep.next_command.startswith("forensics kernel --site 'aten.sum.default#1' --ranks 0 --steps 0 --arm-command ")
    assert rep.next_command.split(" -- ", 1)[0].endswith("--threads 2 --empty'")
    # Independent check of the premise, on the raw files: every record before the sum has the same
    # output digests in both runs, except the uninitialised buffers and what only passed them on.
    a, b = records(runs["t1"]), records(runs["t2"])
    ids_b = {r["id"]: r for r in b}
    artifacts = {x.identity for x in rep.ranks[0].artifacts}
    for r in a[: d.seq]:
        if r["id"] not in artifacts:
            assert r["out"] == ids_b[r["id"]]["out"], r["id"]
    assert a[d.seq]["out"] != ids_b[d.identity]["out"]
    assert [c["field"] for c in rep.comparability if c["severity"] == "warning"] == ["argv"]  # --threads 1 vs 2


def test_negative_control_same_config_reports_no_divergence(runs):
    rep = diff_paths(runs["t1"], runs["t1b"])
    assert not rep.diverged and rep.pattern == "none" and rep.site is None
    assert rep.ranks[0].records_compared > 50


def test_uninitialised_empty_differs_and_is_never_named(runs):
    reps = [diff_paths(runs["t1"], runs["t2"]), diff_paths(runs["t1"], runs["t1b"])]
    empties = [x for rep in reps for x in rep.ranks[0].artifacts if x.name.startswith("aten.empty")]
    # the buffer really differed between processes (its digests are not equal) ...
    assert empties and all((x.outputs_a[0]["digest"], x.outputs_a[0]["ordered"])
                           != (x.outputs_b[0]["digest"], x.outputs_b[0]["ordered"]) for x in empties)
    # ... the cat that carried it was passed over too, and no report names an empty or the cat
    assert any(x.name == "aten.cat.default" for rep in reps for x in rep.ranks[0].artifacts)
    for rep in reps:
        d = rep.ranks[0].first_divergence
        assert d is None or (not d.name.startswith("aten.empty") and d.name != "aten.cat.default")
        assert rep.site is None or not rep.site.startswith("aten.empty")


def _strip_chunks(path: Path):
    """A real XOR-only trace (--ordered-digests off), as a tracer without chunk digests (and without
    generator states) would have recorded it."""
    def strip(rec):
        rec.inputs = [t if t is None else replace(t, chunks=None) for t in rec.inputs
                      if t is None or t.dtype != "generator"]
        rec.outputs = [t if t is None else replace(t, chunks=None) for t in rec.outputs]
        return rec
    return {r: (strip(x) for x in it) for r, it in iter_ranks(path)}


def test_permutation_only_difference_needs_chunk_digests(runs):
    rep = diff_paths(runs["s1"], runs["s2"])
    d = rep.ranks[0].first_divergence
    # a chunked op keeps its XOR beside the order-sensitive digest: equal XOR, different order;
    # the seeds differ, so the generator state randperm drew from differs: a RECEIVER, not an ORIGIN
    assert d.verdict == RECEIVER and d.identity == "aten.randperm.default:1" and d.how == REORDERED
    assert "the state of the generator it drew from" in d.input_evidence
    assert d.outputs_a[0]["digest"] == d.outputs_b[0]["digest"]  # the whole-tensor XOR is blind to it
    assert d.outputs_a[0]["chunks"] == 16  # and its chunk digests were recorded (they see it too)
    assert any("seeds" in c["field"] for c in rep.comparability)
    # Whole-tensor digests only: the permutation goes unseen and a later op is wrongly blamed.
    blind = diff_streams(_strip_chunks(runs["s1x"]), _strip_chunks(runs["s2x"]),
                         run_info_a=run_info(runs["s1x"]), run_info_b=run_info(runs["s2x"]))
    bd = blind.ranks[0].first_divergence
    assert bd is not None and bd.identity != "aten.randperm.default:1" and bd.seq > d.seq
