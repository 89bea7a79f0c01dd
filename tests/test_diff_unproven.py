"""Records whose outputs matched only on weak evidence (an order-independent digest, or metadata
with no digest: a sparse tensor) prove nothing about equality. The text says so: with no
divergence, equality is proven for the other records only; a first divergence after such records
is the first one seen, not proven the first. Before, the text said "no divergence" with no word
about the records it could not compare (the count was in the JSON only)."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from forensics.tracediff.diff import diff_paths, format_report  # noqa: E402
from tests.traced import trace_in_process  # noqa: E402


def _program(seed: int):
    def run():
        dense = torch.arange(4.0).reshape(2, 2)
        dense.to_sparse().coalesce()  # sparse outputs: metadata only, nothing to compare
        torch.manual_seed(seed)
        torch.rand(3).mul(2.0)
    return run


def test_no_divergence_says_what_it_could_not_compare(tmp_path):
    a, b = trace_in_process(tmp_path / "a", _program(0)), trace_in_process(tmp_path / "b", _program(0))
    rep = diff_paths(a, b)
    res = rep.ranks[0]
    assert res.first_divergence is None and res.unproven_matches >= 1
    text = format_report(rep)
    assert f"{res.unproven_matches} matched on weak evidence only; no divergence" in text
    assert "equality is proven for the other records only" in text


def test_a_first_divergence_after_unproven_matches_is_the_first_seen(tmp_path):
    a, b = trace_in_process(tmp_path / "a", _program(0)), trace_in_process(tmp_path / "b", _program(1))
    d = diff_paths(a, b).ranks[0].first_divergence
    assert d is not None and d.name == "aten.rand.default"
    assert any("first divergence seen, not proven the first" in w for w in d.warnings), d.warnings


def test_no_warning_when_every_earlier_match_is_proven(tmp_path):
    def program(seed: int):
        def run():
            torch.arange(4.0).mul(3.0)
            torch.manual_seed(seed)
            torch.rand(3)
        return run

    a, b = trace_in_process(tmp_path / "a", program(0)), trace_in_process(tmp_path / "b", program(1))
    res = diff_paths(a, b).ranks[0]
    assert res.unproven_matches == 0 and res.first_divergence is not None
    assert not any("not proven the first" in w for w in res.first_divergence.warnings)
