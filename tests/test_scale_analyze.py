"""`forensics analyze` over many ranks: worker processes, shards and their merge.

The capture is built from the real one-rank CPU capture tests/fixtures/cpu/example (rank changed per
rank, pids kept as on a multi-node job; tests/many_ranks.py) with planted differences on known ranks
of arm a2: no oneMKL log (SINGLE-SOURCE on both occurrences) and a oneMKL log cut inside the line of
occurrence #2 (SINGLE-SOURCE on #2 only). Every other (arm, rank, occurrence) is NAMED.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from forensics.core.errors import BadInput
from forensics.judge.analysis import analyze
from forensics.judge.shards import RANKS_PER_TASK, analyze_ranks, merge_shards, parse_shard, select_ranks
from tests._helpers import assert_bad_input
from tests.many_ranks import Planted, build_capture

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

ROOT = Path(__file__).resolve().parents[1]
RANKS = 2 * RANKS_PER_TASK + 4  # three worker tasks
NO_MKL, CUT_MKL = {3, 17}, {5, RANKS - 1}


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_capture(tmp_path_factory.mktemp("many") / "cap", RANKS, Planted(no_mkl=NO_MKL, cut_mkl=CUT_MKL))


@pytest.fixture(scope="module")
def serial(capture: Path):
    return analyze(capture)


def _not_named(verdicts: pd.DataFrame) -> set[tuple[str, int, str]]:
    v = verdicts[verdicts["verdict"] != "NAMED"]
    return {(a, int(r), s.rsplit("#", 1)[1]) for a, r, s in zip(v["arm"], v["rank"], v["scope"])}


EXPECTED = {("a2", r, n) for r in NO_MKL for n in ("1", "2")} | {("a2", r, "2") for r in CUT_MKL}


def test_planted_pattern_recovered_by_one_process(serial) -> None:
    assert len(serial.verdicts) == 2 * RANKS * 2
    assert _not_named(serial.verdicts) == EXPECTED
    assert set(serial.verdicts.loc[serial.verdicts["verdict"] != "NAMED", "verdict"]) == {"SINGLE-SOURCE"}


def test_each_rank_counts_its_own_files_even_when_pids_repeat(serial) -> None:
    """Every rank's files carry the same pid (as on nodes that reuse pids): a file in rank<R>/ counts for R."""
    named = serial.verdicts[serial.verdicts["verdict"] == "NAMED"]
    assert all(c == {"torch_profiler": 1, "mkl": 1} for c in named["counts"])
    assert sorted(set(serial.verdicts["rank"])) == list(range(RANKS))


def test_worker_processes_give_the_one_process_verdicts(capture: Path, serial) -> None:
    par = analyze_ranks(capture, jobs=2, progress=False)
    assert par.rank_groups == 3
    cols = sorted(serial.counts.columns)
    pd.testing.assert_frame_equal(par.verdicts.reset_index(drop=True), serial.verdicts.reset_index(drop=True))
    pd.testing.assert_frame_equal(par.counts[cols].reset_index(drop=True), serial.counts[cols].reset_index(drop=True))
    assert sorted(par.notes) == sorted(serial.notes) and any("cut last line" in n for n in par.notes)
    assert par.missing == serial.missing and par.losses == serial.losses
    assert _not_named(par.verdicts) == EXPECTED


def test_shard_selection() -> None:
    ranks = list(range(10))
    assert [select_ranks(ranks, shard=f"{k}/3") for k in range(3)] == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]
    assert select_ranks(ranks, ranks="2,4-5") == [2, 4, 5]
    assert select_ranks(ranks, ranks="0-7", shard="1/2") == [4, 5, 6, 7]
    for bad in ("3/3", "1", "a/b", "-1/2", "0/0"):
        with pytest.raises(BadInput):
            parse_shard(bad)


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "forensics", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_shards_then_merge_equal_the_whole(capture: Path, serial, tmp_path: Path) -> None:
    """The multi-node recipe of docs/scale.md on one machine: one process per shard, then the merge."""
    shards = tmp_path / "shards"
    for k in range(3):
        r = _cli("analyze", str(capture), "--shard", f"{k}/3", "--out", str(shards / str(k)), "-q")
        assert r.returncode in (0, 1), r.stderr
        data = json.loads((shards / str(k) / "analysis.json").read_text())
        assert data["ranks"] == list(range(k * RANKS // 3, (k + 1) * RANKS // 3))
    r = _cli("analyze", str(capture), "--merge", str(shards), "--out", str(tmp_path / "merged"), "-q")
    assert r.returncode == 0, r.stderr
    merged = json.loads((tmp_path / "merged" / "analysis.json").read_text())
    whole = serial.to_json()
    assert merged["verdicts"] == whole["verdicts"]
    assert merged["counts"] == whole["counts"]
    assert merged["missing"] == whole["missing"] and sorted(merged["notes"]) == sorted(whole["notes"])
    an = merge_shards(capture, shards)
    assert _not_named(an.verdicts) == EXPECTED


def test_merge_says_which_ranks_no_shard_analysed(capture: Path, tmp_path: Path) -> None:
    an = analyze_ranks(capture, ranks="0-3")
    from forensics.judge.report import write_outputs

    write_outputs(an, tmp_path / "s0")
    merged = merge_shards(capture, tmp_path)
    assert sorted(set(merged.verdicts["rank"])) == [0, 1, 2, 3]
    assert any(f"{RANKS - 4} rank(s) of this capture analysed by no shard: 4, 5" in m for m in merged.missing)


def test_merge_refuses_overlaps_other_captures_and_other_sites(capture: Path, tmp_path: Path) -> None:
    from forensics.judge.report import write_outputs

    an = analyze_ranks(capture, ranks="0-1")
    write_outputs(an, tmp_path / "a")
    write_outputs(an, tmp_path / "b")
    with pytest.raises(BadInput, match="rank 0 was analysed by two shards"):
        merge_shards(capture, tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    data = an.to_json()
    data["manifest_sha256"] = "0" * 64
    (other / "analysis.json").write_text(json.dumps(data))
    with pytest.raises(BadInput, match="analysed another capture"):
        merge_shards(capture, other)
    site = tmp_path / "site"
    for k, (ranks, s) in enumerate((("0", None), ("1", "gemm:NT:acc0:grad1"))):
        write_outputs(analyze_ranks(capture, ranks=ranks, site=s), site / str(k))
    with pytest.raises(BadInput, match="merge shards of one site"):
        merge_shards(capture, site)


def test_no_selected_rank_is_bad_input(capture: Path) -> None:
    r = _cli("analyze", str(capture), "--ranks", "5000-5001", "-q")
    assert_bad_input(r.returncode, r.stderr, needle="no rank of this capture is selected", out=r.stdout)


def test_file_rank_from_folder_else_from_an_unambiguous_pid(tmp_path: Path) -> None:
    from forensics.capture.directory import Capture, InstrumentFile
    from forensics.judge.analysis import file_rank

    cap = Capture(tmp_path, {}, [])
    in_rank_dir = InstrumentFile("mkl", tmp_path / "a1" / "rank7" / "mkl.42.log", "a1", 7, 42)
    flat = InstrumentFile("cublaslt", tmp_path / "a1" / "cublaslt.42.log", "a1", 0, 42)
    notes: list[str] = []
    assert file_rank(cap, in_rank_dir, {("a1", 42): {3}}, notes) == 7
    assert file_rank(cap, flat, {("a1", 42): {3}}, notes) == 3 and not notes
    assert file_rank(cap, flat, {("a1", 42): {3, 9}}, notes) == 0
    assert notes and "pid 42 was recorded by ranks 3, 9 of a1" in notes[0]


def test_progress_is_plain_lines_on_stderr_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    from forensics.runtime.progress import Progress

    with Progress("forensics analyze", total=16, every=0.0) as bar:
        bar.advance(8)
        bar.advance(8)
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == ["forensics analyze: 8/16 ranks (50%), 0 s, about 0 s left",
                                              "forensics analyze: 16/16 ranks (100%), 0 s"]
    with Progress("forensics analyze", total=16) as bar:  # short work: nothing printed
        bar.advance(16)
    assert capsys.readouterr() == ("", "")
