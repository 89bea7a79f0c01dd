"""Attention, an LSTM and an EmbeddingBag traced for real in two processes: no divergence. Before,
the differ named "ORIGIN (proven) aten.mkldnn_rnn_layer.default:1, inputs MATCH": oneDNN's RNN
workspace output (kept for the backward pass) is scratch it does not initialise in full."""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from forensics.commands.trace import trace_command  # noqa: E402
from forensics.tracediff.diff import diff_paths  # noqa: E402

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parent / "data" / "scripts" / "optrace_rnn_attention.py"


def test_two_identical_runs_have_no_divergence(tmp_path):
    def run(name: str) -> int:
        return trace_command([sys.executable, str(SCRIPT)], tmp_path / name, steps="all")[0]

    with ThreadPoolExecutor(max_workers=2) as pool:
        assert list(pool.map(run, ["a", "b"])) == [0, 0]
    res = diff_paths(tmp_path / "a", tmp_path / "b").ranks[0]
    assert res.first_divergence is None, res.first_divergence
    assert res.records_compared > 250
    rnn = [x for x in res.artifacts if x.name == "aten.mkldnn_rnn_layer.default"]
    assert all(x.differing_outputs == [3] and "workspace" in x.artifact for x in rnn)
