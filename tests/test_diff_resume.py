"""A run resumed from a checkpoint (torch.save / torch.load, also mmap=True) against one continuous
run, traced for real (tests/data/scripts/optrace_resume.py). The resumed process counts its steps
from 0 again, so its steps 0-1 are the continuous run's steps 2-3.

* both traced whole: the load is a control-flow region (ops only the resumed run ran), after which
  the runs align again and match bit for bit: no value difference (right before this round too);
* the continuous run traced with ``--steps 2-3`` (the steps to compare, as one would) and the
  resumed one whole: no recorded step is in both, and the diff read "CONTROL_FLOW
  aten.select.int:1 ... A has 154 record(s) B lacks", 0 records compared. It is now bad input
  (exit 3) saying that the traces hold no step in common and why a resumed run does that.
"""
from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from forensics.cli import main  # noqa: E402
from forensics.commands.trace import trace_command  # noqa: E402
from forensics.core.errors import BadInput  # noqa: E402
from forensics.tracediff.diff import diff_paths  # noqa: E402
from forensics.tracediff.divergence import CONTROL_FLOW  # noqa: E402

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parent / "data" / "scripts" / "optrace_resume.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("resume")
    ckpt = base / "ck.pt"
    subprocess.run([sys.executable, str(SCRIPT), "--phase", "first", "--ckpt", str(ckpt)], check=True,
                   capture_output=True)
    jobs = {"cont": (["--phase", "all"], "all"), "cont23": (["--phase", "all"], "2-3"),
            "res": (["--phase", "second"], "all"), "resm": (["--phase", "second", "--mmap", "1"], "all")}

    def run(name: str) -> int:
        args, steps = jobs[name]
        code, _ = trace_command([sys.executable, str(SCRIPT), *args, "--ckpt", str(ckpt)], base / name, steps=steps)
        return code

    with ThreadPoolExecutor(max_workers=2) as pool:
        assert list(pool.map(run, jobs)) == [0, 0, 0, 0]
    return {name: base / name for name in jobs}


def test_resumed_runs_with_and_without_mmap_do_not_diverge(runs):
    assert not diff_paths(runs["res"], runs["resm"]).diverged


def test_resumed_vs_continuous_traced_whole_realigns_with_no_value_difference(runs):
    res = diff_paths(runs["cont"], runs["res"]).ranks[0]
    d = res.first_divergence
    assert d.verdict == CONTROL_FLOW
    assert res.after_control_flow_total == 0 and res.records_compared_after_control_flow > 100


def test_windows_with_no_step_in_common_are_bad_input_not_control_flow(runs, capsys):
    with pytest.raises(BadInput) as e:
        diff_paths(runs["cont23"], runs["res"])
    msg = str(e.value)
    assert "no recorded step in common" in msg and "resumed from a checkpoint" in msg and "rank0" in msg
    assert main(["diff", str(runs["cont23"]), str(runs["res"])]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("forensics: bad input: ")
