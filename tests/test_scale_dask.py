"""`forensics analyze` and `diff` placing their rank groups on a Dask cluster (issue 43, item 6).

A real ``dask.distributed.LocalCluster`` (two worker processes) runs the same rank groups the
process pool runs; the verdicts, counts and the diff report must equal the one-process result.
The inputs are the many-rank capture and traces of tests/many_ranks.py (real rank files of the CPU
example, rank changed, planted differences on known ranks). Dask is an optional extra
(``pip install -e '.[dask]'``): without it these tests skip, saying so.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

distributed = pytest.importorskip("dask.distributed", reason="dask.distributed is not installed (the optional "
                                  "dask extra: pip install -e '.[dask]')")

from forensics.core.errors import BadInput, Unavailable  # noqa: E402
from forensics.judge.analysis import analyze  # noqa: E402
from forensics.judge.shards import RANKS_PER_TASK, analyze_ranks  # noqa: E402
from forensics.tracediff.diff import diff_paths  # noqa: E402
from forensics.tracediff.shards import diff_ranks  # noqa: E402
from tests.many_ranks import Planted, TraceSources, build_capture, build_traces  # noqa: E402

pytestmark = pytest.mark.slow  # integration lane (a real cluster of worker processes)

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "traces-cpu-divergence"
RANKS = 2 * RANKS_PER_TASK + 4  # three rank groups


@pytest.fixture(scope="module")
def cluster():
    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", "") + os.pathsep + str(ROOT)}
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  env=env) as c:
        yield c


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_capture(tmp_path_factory.mktemp("dask") / "cap", RANKS, Planted(no_mkl={3}, cut_mkl={RANKS - 1}))


def test_analyze_on_a_local_cluster_gives_the_one_process_verdicts(cluster, capture: Path) -> None:
    serial = analyze(capture)
    on_dask = analyze_ranks(capture, scheduler=cluster.scheduler_address, progress=False)
    assert on_dask.rank_groups == 3
    pd.testing.assert_frame_equal(on_dask.verdicts.reset_index(drop=True), serial.verdicts.reset_index(drop=True))
    cols = sorted(serial.counts.columns)
    pd.testing.assert_frame_equal(on_dask.counts[cols].reset_index(drop=True), serial.counts[cols].reset_index(drop=True))
    odd = on_dask.verdicts[on_dask.verdicts["verdict"] != "NAMED"]
    assert {(a, int(r)) for a, r in zip(odd["arm"], odd["rank"])} == {("a2", 3), ("a2", RANKS - 1)}
    assert sorted(on_dask.notes) == sorted(serial.notes)


def test_diff_on_a_local_cluster_gives_the_one_process_report(cluster, tmp_path: Path) -> None:
    sources = TraceSources(FIX / "a.jsonl", FIX / "same.jsonl", FIX / "origin.jsonl", FIX / "a_window.jsonl",
                           FIX / "receiver.jsonl")
    a, b = build_traces(tmp_path / "A", tmp_path / "B", RANKS, sources, {2, 11}, {5})
    whole = json.loads(json.dumps(diff_paths(a, b).to_json(), default=str))
    on_dask = json.loads(json.dumps(diff_ranks(a, b, scheduler=cluster.scheduler_address, progress=False).to_json(),
                                    default=str))
    assert on_dask == whole
    assert whole["site"] == "gemm:NT:acc0:grad1"


def test_the_cli_takes_a_scheduler_file(cluster, capture: Path, tmp_path: Path) -> None:
    sched = tmp_path / "scheduler.json"
    sched.write_text(json.dumps({"address": cluster.scheduler_address}))
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "forensics", "analyze", str(capture), "--scheduler", str(sched),
                        "--out", str(tmp_path / "an"), "--as", "csv"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    rows = r.stdout.splitlines()
    assert len(rows) == 1 + 2 * RANKS * 2 and sum("SINGLE-SOURCE" in x for x in rows) == 3


def test_a_bad_scheduler_file_or_address_is_one_line(tmp_path: Path, monkeypatch) -> None:
    bad = tmp_path / "scheduler.json"
    bad.write_text("not json")
    from forensics.runtime import parallel
    from forensics.runtime.parallel import dask_client

    monkeypatch.setattr(parallel, "CONNECT_TIMEOUT", "2s")

    with pytest.raises(BadInput, match="not a Dask scheduler file"):
        dask_client(str(bad))
    with pytest.raises(Unavailable, match="cannot reach the Dask scheduler"):
        dask_client("tcp://127.0.0.1:9")
