"""Evidence levels (issue 41): ``forensics trace --evidence full|sampled|summary|metadata``.

* each level is written (the header's ``evidence``, every tensor entry's ``ev``) and read back;
* ``diff`` grades by the weaker side's level: an ORIGIN is proven only from full digests of its
  inputs and output; from summary or sampled digests it is a candidate, never printed as proven,
  and ``next:`` proposes the full-evidence rerun of just that window (step, rank), or ``kernel``
  for another producer's traces (Megatron's), whose site probe digests in full;
* two traces at different levels compare no value at all (their digests are of different kinds).

The two-run traces below are SYNTHETIC (written by the format's own line writers, labelled so in
their ``argv``); the level round trip runs the real tracer in this process.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from forensics.core.formats import optrace as fmt
from forensics.tracediff.diff import diff_paths, format_report
from forensics.tracediff.traces import native

REPO = Path(__file__).resolve().parent.parent
LEVELS = ("full", "sampled", "summary", "metadata")


# --------------------------------------------------------------------------- the tracer writes each level

@pytest.mark.parametrize("level", LEVELS)
def test_each_level_is_written_and_read(tmp_path, level):
    torch = pytest.importorskip("torch")
    if not hasattr(torch, "hash_tensor"):
        pytest.skip("torch.hash_tensor missing (torch < 2.9)")
    from tests.traced import trace_in_process

    def fn() -> None:
        a = torch.arange(300, dtype=torch.float32).reshape(20, 15)
        b = torch.ones(15, 4)
        (a @ b).t().contiguous().sum()

    f = trace_in_process(tmp_path, fn, evidence=level)
    lines = [json.loads(x) for x in f.read_text().splitlines()]
    header, records = lines[0], lines[1:-1]
    assert header["version"] == fmt.VERSION == 2 and header["evidence"] == level
    assert set(header["evidence_digests"]) == {"sampled", "summary"}
    tensors = [e for r in records for e in (*r["in"], *r["out"]) if e and e["t"] not in ("args", "generator")]
    assert tensors, "no tensor entry recorded"
    if level == "full":
        assert all("ev" not in e and ("o" in e or "h" in e) for e in tensors)
    else:  # every tensor entry says its level; only full entries carry order-sensitive or chunk digests
        assert all(e["ev"] == level and "o" not in e and "c" not in e for e in tensors)
        assert all(("h" in e) == (level != "metadata") for e in tensors)
    if level == "summary":  # the sum of arange(300)'s float32 bit patterns, mod 2^32 (4-byte elements)
        import numpy as np

        mm = next(r for r in records if r["op"].startswith("aten.arange"))
        bits = int(np.arange(300, dtype=np.float32).view(np.uint32).astype(np.uint64).sum())
        assert mm["out"][0]["h"] == f"sum32:{bits & 0xFFFFFFFF:08x}"
        assert header["evidence_digests"]["summary"] == fmt.SUMMARY
    # read back: the run's level, and each tensor's
    assert native.run_info(tmp_path)["evidence"] == level
    recs = list(native.iter_records(f))
    read = [t.evidence for r in recs for t in (*r.inputs, *r.outputs) if t is not None and t.dtype not in ("args", "generator")]
    assert read and set(read) == {level}


def test_sampled_digest_sees_a_changed_sample_and_not_a_change_between_samples():
    torch = pytest.importorskip("torch")
    from probes.optrace.digest import sampled_digest

    x = torch.zeros(64 * 10)
    base = sampled_digest(x)
    y = x.clone()
    y[10] = 1.0  # position 10: sampled (positions 0, 10, 20, ...)
    z = x.clone()
    z[11] = 1.0  # between two samples: a sampled digest cannot see it (why it never proves equality)
    assert sampled_digest(y) != base and sampled_digest(z) == base
    # row-major positions whatever the memory layout: a transposed copy samples the same elements
    r = torch.arange(640.0).reshape(32, 20)
    assert sampled_digest(r.t().contiguous().t()) == sampled_digest(r)
    assert sampled_digest(r.t()) == sampled_digest(r.t().contiguous()) != sampled_digest(r)


def test_a_summary_is_exact_whatever_the_layout():
    """Equal values in another memory layout (a transposed copy) give the same summary: a summary
    difference is never an artifact of the order it was summed in; a changed element changes it."""
    torch = pytest.importorskip("torch")
    from probes.optrace.digest import summary_digest

    r = torch.randn(33, 65)
    assert summary_digest(r) == summary_digest(r.t().contiguous().t()) == summary_digest(r.clone())
    assert summary_digest(r[:, ::2]) == summary_digest(r[:, ::2].contiguous())
    assert summary_digest(r.to(torch.bfloat16)) == summary_digest(r.to(torch.bfloat16).t().contiguous().t())
    s = r.clone()
    s[5, 7] = s[5, 7] + 1.0
    assert summary_digest(s) != summary_digest(r)


def test_an_old_version_1_trace_reads_as_full():
    info = native.run_info(REPO / "tests" / "fixtures" / "traces-cpu-divergence" / "a.jsonl")
    assert info["schema_version"] == 1 and info["evidence"] == "full"


def test_an_unknown_level_is_refused():
    from forensics.commands.trace import UsageError, trace_command

    with pytest.raises(UsageError, match="--evidence 'exact'"):
        trace_command([sys.executable, "-c", "pass"], Path("/nonexistent/never-made"), evidence="exact")


# --------------------------------------------------------------------------- diff grades by the weaker side

def _entry(level: str, value: int) -> dict:
    """A SYNTHETIC [4] float32 entry at ``level`` whose values are ``value`` (digests made up, one per value)."""
    e = {"s": [4], "t": "float32", "n": 4}
    if level == "full":
        e["o"] = f"{value:016x}"
    elif level == "metadata":
        e["ev"] = "metadata"
    else:
        e["ev"] = level
        e["h"] = f"summary:{value:016x}" if level == "summary" else f"{value + 7:016x}"
    return e


def _run(folder: Path, level: str, out_value: int, argv: list[str], at: str = "ops") -> Path:
    """A SYNTHETIC one-rank trace at ``level``: step 3, an mm (``--at modules``: a Linear module)
    whose inputs are the same in both runs and whose output is ``out_value``, then a relu reading it."""
    rank = folder / "rank0"
    rank.mkdir(parents=True)
    header = fmt.header_line({"rank": 0, "world_size": 1, "argv": argv, "steps": "all", "ranks": "all",
                              "evidence": level, "at": at})
    first, second, kind = (("aten.mm.default", "aten.relu.default", "op") if at == "ops" else
                           ("module.Linear", "module.ReLU", "module"))
    recs = [
        fmt.record(0, f"{first}:1", first, kind, 3, "forward", [_entry(level, 1), _entry(level, 2)],
                   [_entry(level, out_value)]),
        fmt.record(1, f"{second}:1", second, kind, 3, "forward", [_entry(level, out_value)],
                   [_entry(level, out_value + 100)]),
    ]
    footer = fmt.footer_line({"records": 2, "dropped": 0, "last_step": 3})
    (rank / fmt.FILE_NAME).write_bytes(header + b"".join(fmt.record_line(r) for r in recs) + footer)
    return folder


ARGV = ["python", "synthetic_train.py"]


@pytest.mark.parametrize("level", LEVELS)
def test_an_origin_is_proven_only_at_full(tmp_path, level):
    rep = diff_paths(_run(tmp_path / "a", level, 10, ARGV), _run(tmp_path / "b", level, 11, ARGV))
    d = rep.ranks[0].first_divergence
    assert rep.evidence == {"a": level, "b": level, "graded_by": level}
    if level == "metadata":  # nothing about the values: no divergence seen, and never proven clean
        assert d is None and "not proven" in format_report(rep)
        return
    assert d.verdict == "ORIGIN" and d.name == "aten.mm.default" and d.level == level
    text = format_report(rep)
    if level == "full":
        assert d.evidence == "proven" and rep.next_command.startswith("forensics kernel --site")
        return
    assert d.evidence == "unproven"
    assert "ORIGIN (proven" not in text and f"unproven" in text.split("site:")[1].splitlines()[0]
    # next: the confirming rerun of just that window, at full evidence
    assert rep.next_command.startswith("forensics trace --evidence full --steps 3 --ranks 0 --out <dir> -- python "
                                       "synthetic_train.py")
    assert "forensics kernel --site" in rep.next_command  # ... or go on to kernel
    assert any(f"recorded at {level} evidence" in w for w in rep.warnings)


def test_two_levels_compare_no_value(tmp_path):
    """A full trace against a summary one: their digests are of different kinds; graded as metadata."""
    rep = diff_paths(_run(tmp_path / "a", "full", 10, ARGV), _run(tmp_path / "b", "summary", 11, ARGV))
    assert rep.evidence == {"a": "full", "b": "summary", "graded_by": "metadata"}
    assert rep.ranks[0].first_divergence is None and rep.site is None
    text = format_report(rep)
    assert "no divergence seen (not proven" in text and "evidence levels differ (A full, B summary)" in text


def test_the_weaker_side_of_a_pair_grades_its_origin(tmp_path):
    """Full inputs, a sampled output on both sides: the pair is graded sampled, the ORIGIN a candidate."""
    a, b = _run(tmp_path / "a", "full", 10, ARGV), _run(tmp_path / "b", "full", 11, ARGV)
    for run, v in ((a, 10), (b, 11)):
        f = run / "rank0" / fmt.FILE_NAME
        lines = f.read_bytes().splitlines(keepends=True)
        rec = json.loads(lines[1])
        rec["out"] = [_entry("sampled", v)]
        lines[1] = fmt.record_line(rec)
        f.write_bytes(b"".join(lines))
    d = diff_paths(a, b).ranks[0].first_divergence
    assert (d.verdict, d.evidence, d.level) == ("ORIGIN", "unproven", "sampled")


def test_a_megatron_summary_origin_is_never_printed_proven(tmp_path):
    """Megatron traces (its four modes): a summary-level ORIGIN is a candidate; next: hands its site to
    kernel, whose site probe digests in full."""
    from tests.test_traces_megatron import RUN_A, RUN_B, WGRAD, _with_mode

    names = {f"{WGRAD}.input0", f"{WGRAD}.input1"}
    rep = diff_paths(_with_mode(RUN_A, tmp_path / "a", names, "summary"), _with_mode(RUN_B, tmp_path / "b", names, "summary"))
    text = format_report(rep)
    d = rep.ranks[0].first_divergence
    assert d.verdict == "ORIGIN" and d.evidence == "unproven" and d.level in ("summary", "metadata")
    assert "ORIGIN (proven" not in text and "(proven)" not in text.split("site:")[1]
    assert rep.next_command.startswith("forensics kernel --site 'gemm:NT:acc0:grad1#1' --ranks 0 --steps 1 -- ")
    assert "candidate ORIGIN" in rep.next_command and "--ordered-digests" not in rep.next_command


# --------------------------------------------------------------------------- module boundaries (--at modules)

def test_module_boundaries_are_recorded_without_a_dispatch_mode(tmp_path):
    torch = pytest.importorskip("torch")
    from tests.traced import trace_in_process

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    x = torch.randn(4, 8)
    f = trace_in_process(tmp_path, lambda: model(x).sum().backward(), evidence="sampled", at="modules")
    lines = [json.loads(x) for x in f.read_text().splitlines()]
    header, records = lines[0], lines[1:-1]
    assert header["at"] == "modules" and header["evidence"] == "sampled"
    ids = [r["id"] for r in records if r["kind"] == "module"]
    # completion order: the inner modules, then the Sequential around them
    assert ids == ["module.Linear:1", "module.GELU:1", "module.Linear:2", "module.Sequential:1"]
    assert not any(r["op"].startswith("aten.") for r in records)  # no op record: no dispatch mode
    lin = records[0]
    assert lin["in"][0]["s"] == [4, 8] and lin["out"][0]["s"] == [4, 8] and lin["out"][0]["ev"] == "sampled"
    assert records[1]["in"][0]["h"] == lin["out"][0]["h"]  # GELU reads what the Linear made
    assert native.run_info(tmp_path)["at"] == "modules"


def test_a_module_origin_proposes_the_op_level_rerun_of_its_window(tmp_path):
    """A difference born inside a module (equal inputs, different output): a candidate that names no
    kernel site; next: the op-level trace of just that step and rank at full evidence."""
    rep = diff_paths(_run(tmp_path / "a", "sampled", 10, ARGV, at="modules"),
                     _run(tmp_path / "b", "sampled", 11, ARGV, at="modules"))
    d = rep.ranks[0].first_divergence
    assert (d.verdict, d.evidence, d.name, d.site) == ("ORIGIN", "unproven", "module.Linear", None)
    assert rep.next_command.startswith("forensics trace --evidence full --steps 3 --ranks 0 --out <dir> -- python "
                                       "synthetic_train.py")
    assert "module.Linear:1" in rep.next_command and "op by op" in rep.next_command


def test_an_output_the_verdict_does_not_rest_on_does_not_weaken_it(tmp_path):
    """Full inputs and a full differing output prove the ORIGIN, even beside a second output recorded
    as metadata only (a freed storage, a DTensor): only the inputs and the differing outputs grade it."""
    a, b = _run(tmp_path / "a", "full", 10, ARGV), _run(tmp_path / "b", "full", 11, ARGV)
    for run in (a, b):
        f = run / "rank0" / fmt.FILE_NAME
        lines = f.read_bytes().splitlines(keepends=True)
        rec = json.loads(lines[1])
        rec["out"].append(_entry("metadata", 0))
        lines[1] = fmt.record_line(rec)
        f.write_bytes(b"".join(lines))
    d = diff_paths(a, b).ranks[0].first_divergence
    assert (d.verdict, d.evidence, d.level, d.differing_outputs) == ("ORIGIN", "proven", "full", [0])


@pytest.mark.slow
def test_the_columnar_prefix_grades_light_traces_as_the_record_walk_does(tmp_path):
    """Two real light traces over 1 MiB (the differ's columnar prefix path) reach the same first
    divergence, grade and weak-match count as the record-by-record walk."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("pyarrow")
    from forensics.tracediff import columnar, walk
    from tests.traced import trace_in_process

    def run(threads: int):
        def fn() -> None:
            torch.set_num_threads(threads)
            torch.manual_seed(0)
            x = torch.ones(64)
            for _ in range(6000):
                x = x * 1.0001
            (torch.randn(1 << 22) * x[0]).sum()  # a 4M-element float32 sum: its order follows the threads
        return fn

    old = torch.get_num_threads()
    try:
        a = trace_in_process(tmp_path / "a", run(1), evidence="sampled")
        trace_in_process(tmp_path / "b", run(2), evidence="sampled")
    finally:
        torch.set_num_threads(old)
    assert a.stat().st_size >= columnar.MIN_BYTES
    got = []
    for bulk in (True, False):
        ra, rb = dict(native.iter_ranks(tmp_path / "a")), dict(native.iter_ranks(tmp_path / "b"))
        res = walk.walk_rank(0, ra[0], rb[0], columnar=bulk)
        d = res.first_divergence
        got.append((res.records_compared, res.unproven_matches, d.verdict, d.identity, d.evidence, d.level))
    assert got[0] == got[1]
    assert got[0][2:] == ("ORIGIN", "aten.sum.default:1", "unproven", "sampled") and got[0][1] == got[0][0] - 1


def _rewrite_summaries(run: Path, digests: bool, algorithm: str, value: Any) -> Path:
    """Rewrite a SYNTHETIC summary trace's values with ``value`` (the sum they hold -> its text) and
    (``digests``) its header naming ``algorithm``."""
    f = run / "rank0" / fmt.FILE_NAME
    lines = [json.loads(x) for x in f.read_text().splitlines()]
    if digests:
        lines[0]["evidence_digests"] = {"sampled": fmt.SAMPLED, "summary": algorithm}
    for rec in lines[1:-1]:
        for e in (*rec["in"], *rec["out"]):
            e["h"] = value(int(e["h"].partition(":")[2], 16))
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return run


def _old_summaries(run: Path, digests: bool) -> Path:
    """The run as the first summary algorithm wrote it: ``summary:<16 hex>`` (the 64-bit sum)."""
    return _rewrite_summaries(run, digests, fmt.SUMMARY_V1, lambda v: f"summary:{v:016x}")


def _new_summaries(run: Path, digests: bool) -> Path:
    """The same run as today's tracer writes it: ``sum32:<8 hex>`` values, the header naming SUMMARY."""
    return _rewrite_summaries(run, digests, fmt.SUMMARY, lambda v: f"sum32:{v & 0xFFFFFFFF:08x}")


@pytest.mark.parametrize("digests", [True, False], ids=["header-says", "values-only"])
def test_summaries_of_two_algorithms_are_never_compared(tmp_path, digests):
    """SYNTHETIC: a trace from the first summary algorithm (64-bit sums, ``summary:``) against one
    from today's (``sum32:``), with different outputs: their sums are of two kinds, so neither
    equal nor different; no divergence is claimed (graded metadata when the headers say so)."""
    a = _old_summaries(_run(tmp_path / "a", "summary", 10, ARGV), digests)
    b = _new_summaries(_run(tmp_path / "b", "summary", 11, ARGV), digests)
    rep = diff_paths(a, b)
    assert rep.ranks[0].first_divergence is None and rep.site is None
    text = format_report(rep)
    assert "pattern: none" in text and "no divergence seen (not proven" in text
    if digests:
        assert rep.evidence == {"a": "summary", "b": "summary", "graded_by": "metadata"}
        assert any("made by different algorithms" in w for w in rep.warnings)
    # one algorithm on both sides: the same difference is seen (a candidate ORIGIN)
    c = _new_summaries(_run(tmp_path / "c", "summary", 10, ARGV), digests)
    rep = diff_paths(c, b)
    assert rep.ranks[0].first_divergence is not None and rep.ranks[0].first_divergence.verdict == "ORIGIN"
    assert rep.evidence["graded_by"] == "summary"


def test_summary_of_every_dtype_matches_its_general_path():
    """The light entry's in-place fast path gives the value the general path does (sum mod 2^32 for
    elements up to 4 bytes, 2^64 for 8), for every layout it takes (row-major, transposed)."""
    torch = pytest.importorskip("torch")
    from probes.optrace.digest import _bits_exact, light_entry, summary_digest

    entry = light_entry("summary")
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32,
                  torch.int8, torch.uint8, torch.bool):
        x = (torch.randn(37, 19) * 50).to(dtype)
        bits = int(_bits_exact(x).sum().item())
        want = f"sum64:{bits & (2**64 - 1):016x}" if x.element_size() == 8 else f"sum32:{bits & 0xFFFFFFFF:08x}"
        for view in (x, x.t(), x.t().contiguous().t()):
            assert entry(view)["h"] == summary_digest(view) == want, (dtype, view.stride())
    big = torch.full((1 << 12,), -1, dtype=torch.int32)  # wraps: 4096 * 0xFFFFFFFF mod 2^32
    assert entry(big)["h"] == f"sum32:{(4096 * 0xFFFFFFFF) & 0xFFFFFFFF:08x}"


@pytest.mark.parametrize("level", ["sampled", "summary", "metadata"])
def test_a_light_level_skips_views_and_their_reader_digests_their_elements(tmp_path, level):
    """At the light levels a same-element view (``t``, ``view``, ``detach``...) is no record (header
    ``views: skipped``): it computes nothing, and the op that reads its output digests that output's
    own elements. An op that brings outside data in (``lift_fresh``, ``torch.tensor``) is still
    recorded. Full evidence records every view (``views: recorded``)."""
    torch = pytest.importorskip("torch")
    from probes.optrace.digest import light_entry
    from tests.traced import trace_in_process

    w = torch.arange(33 * 170, dtype=torch.float32).reshape(33, 170)

    def fn() -> None:
        x = w.clone()
        x.t().sum()
        x.view(170, 33).sum()
        x.detach().sum()
        torch.tensor([1.0, 2.0]).sum()

    f = trace_in_process(tmp_path / level, fn, evidence=level)
    lines = [json.loads(x) for x in f.read_text().splitlines()]
    header, records = lines[0], lines[1:-1]
    assert header["views"] == "skipped"
    ops = [r["op"] for r in records]
    assert not {"aten.t.default", "aten.view.default", "aten.detach.default"} & set(ops)
    assert "aten.lift_fresh.default" in ops
    sums = [r for r in records if r["op"] == "aten.sum.default"][:3]
    entry = light_entry(level)
    for r, view in zip(sums, (w.t(), w.view(170, 33), w.detach())):
        assert r["in"][0] == entry(view) and r["in"][0]["s"] == list(view.shape)
    full = trace_in_process(tmp_path / "full", fn)
    lines = [json.loads(x) for x in full.read_text().splitlines()]
    assert lines[0]["views"] == "recorded"
    assert {"aten.t.default", "aten.view.default", "aten.detach.default"} <= {r["op"] for r in lines[1:-1]}


@pytest.mark.parametrize("level", ["sampled", "summary"])
def test_a_light_digest_reads_the_bytes_at_the_address_now(level):
    """The light fast path keeps how to read an address (a numpy view per address and size), never
    what it read: the same memory written in place, or another tensor at the same address, gives
    the digest of the bytes there now."""
    torch = pytest.importorskip("torch")
    from probes.optrace.digest import light_entry, sampled_digest, summary_digest

    entry, digest = light_entry(level), {"sampled": sampled_digest, "summary": summary_digest}[level]
    x = torch.randn(4096)
    first = entry(x)["h"]
    assert first == digest(x) and entry(x)["h"] == first
    x.mul_(3.0)  # the same address and size, other bytes
    assert entry(x)["h"] == digest(x) != first
    y = x.view(64, 64)  # the same address, another shape: same elements
    assert entry(y)["h"] == digest(y) == entry(x)["h"]
    z = x[:1024]  # the same address, fewer bytes
    assert entry(z)["h"] == digest(z) != entry(x)["h"]


def test_diff_refuses_a_full_trace_against_a_light_one_of_real_ops(tmp_path):
    """A full trace records views, a light one does not: their op records do not pair, so the pair
    is refused in one line (exit 3) rather than read as a control-flow difference."""
    torch = pytest.importorskip("torch")
    from forensics.core.errors import BadInput
    from tests.traced import trace_in_process

    def fn() -> None:
        x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
        (x.t() @ x).sum()

    a = trace_in_process(tmp_path / "a", fn)
    b = trace_in_process(tmp_path / "b", fn, evidence="sampled")
    with pytest.raises(BadInput, match=r"B skipped same-element views .* A recorded them.*\(A full, B sampled\)"):
        diff_paths(tmp_path / "a", tmp_path / "b")
    c = trace_in_process(tmp_path / "c", fn, evidence="summary")  # two light levels pair: graded, not refused
    rep = diff_paths(tmp_path / "b", tmp_path / "c")
    assert rep.evidence["graded_by"] == "metadata" and rep.ranks[0].first_divergence is None
    assert a.exists()
