"""A real `torchrun --nproc-per-node 2` CPU training run through the probe bootstrap.

tests/data/scripts/tiny_train.py per step and rank: 2 fprop GEMMs (gemm:TN:acc0:grad0), 1 dgrad
(gemm:NN:acc0:grad1; the first layer's input needs no gradient) and 2 wgrads (gemm:NT:acc0:grad1),
then a gloo all-reduce and an SGD step. With steps "1-2" of 4, each rank must record exactly
4 TN, 2 NN and 4 NT occurrences, all in iterations 1 and 2, in its own rank folder; the torchrun
agent (a Python process of its own, also bootstrapped) must write nothing.
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from probes.config import ProbeConfig, bootstrap_env

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "data" / "scripts" / "tiny_train.py"


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.slow
def test_torchrun_two_ranks_write_one_site_file_each_inside_the_window(tmp_path):
    torchrun = shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not on PATH")
    arm = tmp_path / "a1"
    ProbeConfig(out_dir=str(arm), probes=["sites"], steps="1-2", arm="a1").write(tmp_path / "probe.json")
    env = bootstrap_env(tmp_path / "probe.json")
    for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(key, None)
    r = subprocess.run([torchrun, "--standalone", "--nproc-per-node", "2", str(TINY), "--steps", "4"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(p.name for p in arm.iterdir()) == ["rank0", "rank1"]
    labels = {}
    for rank in (0, 1):
        files = sorted((arm / f"rank{rank}").iterdir())
        assert [f.name for f in files] == ["sites.jsonl"]  # one file per rank, no pid-suffixed duplicate
        recs = lines(files[0])
        head = recs[0]
        assert head["event"] == "header" and head["rank"] == rank and head["arm"] == "a1"
        sites = [x for x in recs if x["event"] == "site"]
        assert {x["iteration"] for x in sites} == {1, 2}
        assert all(x["rank"] == rank and x["pid"] == head["pid"] for x in sites)
        assert recs[-1]["occurrences"] == {"gemm:TN:acc0:grad0": 4, "gemm:NN:acc0:grad1": 2,
                                           "gemm:NT:acc0:grad1": 4}
        labels[rank] = [x["label"] for x in sites]
        assert labels[rank][:5] == ["gemm:TN:acc0:grad0#1", "gemm:TN:acc0:grad0#2", "gemm:NT:acc0:grad1#1",
                                    "gemm:NN:acc0:grad1#1", "gemm:NT:acc0:grad1#2"]
    assert labels[0] == labels[1]  # same program, same identities on both ranks
