"""Two runs traced with different step windows (``forensics trace --steps 1-2`` and ``--steps all``),
for real (tests/data/scripts/optrace_threads.py, three steps). Occurrences are counted per op name
from the first traced record, so the same op at step 1 is ``aten.randn.default:1`` in the narrow
trace and ``aten.randn.default:2`` in the full one. The differ skipped the full run's step 0 but
kept its numbering: two identical runs read "CONTROL_FLOW aten.randn.default:1 ... only in A, 0
records compared". Now only the steps both traced are compared, occurrences counted from the first
of them (a real thread-count ORIGIN in step 1 of another program, found the same way, had been
listed as "AFTER_CONTROL_FLOW: not an origin").
"""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from forensics.commands.trace import trace_command  # noqa: E402
from forensics.tracediff.diff import diff_paths  # noqa: E402
from forensics.tracediff.divergence import ORIGIN, RECEIVER  # noqa: E402

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parent / "data" / "scripts" / "optrace_threads.py"
RUNS = {"narrow": ("1-2", "1"), "all": ("all", "1"), "all2": ("all", "2")}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("windows")

    def run(name: str) -> int:
        steps, threads = RUNS[name]
        code, _ = trace_command([sys.executable, str(SCRIPT), "--threads", threads, "--steps", "3"], base / name,
                                steps=steps)
        return code

    with ThreadPoolExecutor(max_workers=3) as pool:
        assert list(pool.map(run, RUNS)) == [0, 0, 0]
    return {name: base / name for name in RUNS}


@pytest.mark.parametrize("order", ["narrow-first", "all-first"])
def test_identical_runs_traced_over_different_windows_do_not_diverge(runs, order):
    a, b = (runs["narrow"], runs["all"]) if order == "narrow-first" else (runs["all"], runs["narrow"])
    rep = diff_paths(a, b)
    res = rep.ranks[0]
    assert res.first_divergence is None and rep.pattern == "none"
    assert res.records_compared > 0 and set(res.steps) == {1, 2}
    assert any("different step windows" in w for w in res.warnings)


def test_a_difference_made_before_the_narrow_window_is_a_receiver_there(runs):
    """The thread-count sum differs at step 0 (an ORIGIN in two full traces); the narrow trace did
    not record step 0, so at step 1 the updated weight already differs: a RECEIVER, widen."""
    full = diff_paths(runs["all"], runs["all2"]).ranks[0].first_divergence
    assert full.verdict == ORIGIN and full.identity == "aten.sum.default:1" and full.step == 0
    rep = diff_paths(runs["narrow"], runs["all2"])
    d = rep.ranks[0].first_divergence
    assert d.verdict == RECEIVER and d.step == 1 and d.seq < 5  # the weight, read at the first ops of step 1
    assert rep.pattern == "only_receivers" and "widen the window" in rep.pattern_explanation
    assert any("different step windows" in w for w in d.warnings) and d.input_sources == []
