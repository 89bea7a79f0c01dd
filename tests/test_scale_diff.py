"""`forensics diff` over many ranks: worker processes, shards and their merge, the planted pattern.

The traces are built from real rank files of the CPU example (tests/fixtures/traces-cpu-divergence,
PROVENANCE.md) by tests/many_ranks.py: rank R of each run is a real rank file with its rank changed;
ORIGIN ranks (run B from a 2-thread run: the wgrad GEMM differs) and RECEIVER ranks (both runs
traced from step 1: the first differing op already had differing inputs) are planted on known ranks.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.core.errors import BadInput
from forensics.tracediff.diff import diff_paths
from forensics.tracediff.shards import RANKS_PER_TASK, diff_ranks, merge_reports
from tests.many_ranks import TraceSources, build_traces

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "traces-cpu-divergence"
SOURCES = TraceSources(FIX / "a.jsonl", FIX / "same.jsonl", FIX / "origin.jsonl", FIX / "a_window.jsonl",
                       FIX / "receiver.jsonl")
RANKS = 3 * RANKS_PER_TASK + 5
ORIGINS, RECEIVERS = {2, 19, 40}, {7, 33, RANKS - 1}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("traces")
    return build_traces(base / "A", base / "B", RANKS, SOURCES, ORIGINS, RECEIVERS)


@pytest.fixture(scope="module")
def whole(runs):
    return diff_paths(*runs).to_json()


def _verdicts(report: dict) -> dict[int, str]:
    return {int(r): v["first_divergence"]["verdict"] for r, v in report["ranks"].items() if v["first_divergence"]}


def test_planted_pattern_recovered(whole) -> None:
    assert _verdicts(whole) == {**{r: "ORIGIN" for r in ORIGINS}, **{r: "RECEIVER" for r in RECEIVERS}}
    assert whole["site"] == "gemm:NT:acc0:grad1" and whole["site_rank"] == min(ORIGINS)
    assert whole["pattern"] == "subset" and len(whole["ranks"]) == RANKS


def test_worker_processes_give_the_one_process_report(runs, whole) -> None:
    par = json.loads(json.dumps(diff_ranks(*runs, jobs=2, progress=False).to_json(), default=str))
    assert par == json.loads(json.dumps(whole, default=str))


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "forensics", "diff", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_shards_then_merge_equal_the_whole(runs, whole, tmp_path: Path) -> None:
    a, b = map(str, runs)
    for k in range(3):
        r = _cli(a, b, "--shard", f"{k}/3", "--json", str(tmp_path / "shards" / f"{k}.json"))
        assert r.returncode == 1, r.stderr  # divergence found in every shard
    r = _cli(a, b, "--merge", str(tmp_path / "shards"), "--json", str(tmp_path / "merged.json"))
    assert r.returncode == 1, r.stderr
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert merged == json.loads(json.dumps(whole, default=str))
    assert "pattern: subset" in r.stdout and "site: gemm:NT:acc0:grad1#1" in r.stdout


def test_merge_names_ranks_no_shard_diffed_and_refuses_overlaps(runs, tmp_path: Path) -> None:
    rep = diff_ranks(*runs, ranks="0-9", progress=False)
    assert sorted(rep.ranks) == list(range(10)) and any("one shard" in w for w in rep.warnings)
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "0.json").write_text(json.dumps(rep.to_json(), default=str))
    merged = merge_reports(*runs, tmp_path / "s")
    assert any(f"{RANKS - 10} rank(s) of both traces diffed by no shard: 10-{RANKS - 1}" in w for w in merged.warnings)
    (tmp_path / "s" / "1.json").write_text(json.dumps(rep.to_json(), default=str))
    with pytest.raises(BadInput, match="rank 0 was diffed by two shards"):
        merge_reports(*runs, tmp_path / "s")


def test_merge_refuses_a_report_of_other_traces(runs, tmp_path: Path) -> None:
    rep = diff_ranks(*runs, ranks="0-1", progress=False).to_json()
    rep["a"] = "/elsewhere/A"
    (tmp_path / "x.json").write_text(json.dumps(rep, default=str))
    with pytest.raises(BadInput, match="a report of another trace"):
        merge_reports(*runs, tmp_path / "x.json")


def test_1024_ranks_print_summary_and_divergent_ranks_first_in_a_screenful(tmp_path: Path) -> None:
    """The text report at scale: the counts, pattern, site and next command first, one line per
    divergent rank, the clean ranks folded into one line (the JSON report keeps every rank)."""
    from forensics.tracediff.diff import format_report

    origins, receivers = set(range(5, 1024, 97)), set(range(50, 1024, 101))
    a, b = build_traces(tmp_path / "A", tmp_path / "B", 1024, SOURCES, origins, receivers)
    report = diff_ranks(a, b, jobs=1, progress=False)
    lines = format_report(report).splitlines()
    assert len(lines) <= 40, len(lines)  # was 5,094 lines, the divergent ranks among the clean ones
    assert lines[1] == (f"summary: 1024 ranks compared: {len(origins | receivers)} diverged ({len(origins)} ORIGIN, "
                        f"{len(receivers)} RECEIVER), {1024 - len(origins | receivers)} no divergence")
    assert lines[2].startswith("pattern: subset") and lines[3].startswith("site: gemm:NT:acc0:grad1#1 (rank 5,")
    assert lines[4].startswith("next: forensics kernel")
    ranked = [int(x.split(":")[0].split()[1]) for x in lines if x.startswith("rank ")]
    assert ranked == sorted(origins | receivers)  # every divergent rank, no clean one
    assert f"{1024 - len(origins | receivers)} ranks: no divergence (every rank not listed above)" in lines
    assert any(x.startswith("  artifact passed over on ") for x in lines)
    assert len(report.to_json()["ranks"]) == 1024


def test_few_ranks_keep_one_paragraph_per_rank(runs) -> None:
    from forensics.tracediff.diff import FOLD_RANKS, format_report

    report = diff_ranks(*runs, ranks="0-9", progress=False)
    assert len(report.ranks) <= FOLD_RANKS
    ranked = [x for x in format_report(report).splitlines() if x.startswith("rank ")]
    assert len(ranked) == 10 and ranked[2].startswith("rank 2:") and "ORIGIN" in ranked[2]
