"""A random op's generator state is one of its inputs, recorded and compared.

The tracer digests the state of the generator a random op draws from (the one it was given, else its
device's default generator) as an input entry ``{"t": "generator"}`` before the op runs. Two runs
whose seeds differ then read a RECEIVER at the first random op (its generator state differs), not a
false 'ORIGIN (proven) ... inputs MATCH' on an op whose kernel did nothing wrong; a run that drew
numbers before the traced window reads the same. Real programs, traced in this process.
"""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from forensics.tracediff.diff import diff_paths, format_report  # noqa: E402
from forensics.tracediff.divergence import ORIGIN, RECEIVER  # noqa: E402
from tests.traced import trace_in_process  # noqa: E402


def _program(seed: int):
    def run() -> None:
        torch.manual_seed(seed)
        x = torch.ones(8).mul(3.0)
        torch.nn.functional.dropout(x, 0.5, training=True).sum()
        torch.randn(4).add(1.0)
        torch.rand(3, generator=torch.Generator().manual_seed(seed))
    return run


def _records(path):
    return [json.loads(line) for line in open(path) if '"seq"' in line]


def test_random_ops_record_their_generator_state(tmp_path):
    recs = _records(trace_in_process(tmp_path / "a", _program(0)))
    drew = {r["op"]: [e for e in r["in"] if e["t"] == "generator"] for r in recs}
    for op in ("aten.bernoulli_.float", "aten.randn.default", "aten.rand.generator"):
        assert len(drew[op]) == 1 and len(drew[op][0]["h"]) == 16, (op, drew[op])
    assert drew["aten.mul.Tensor"] == [] and drew["aten.add.Tensor"] == []


def test_same_seed_same_states_no_divergence(tmp_path):
    a, b = trace_in_process(tmp_path / "a", _program(0)), trace_in_process(tmp_path / "b", _program(0))
    assert diff_paths(a, b).ranks[0].first_divergence is None


def test_another_seed_is_a_receiver_at_the_first_random_op_not_an_origin(tmp_path):
    a, b = trace_in_process(tmp_path / "a", _program(0)), trace_in_process(tmp_path / "b", _program(1))
    rep = diff_paths(a, b)
    d = rep.ranks[0].first_divergence
    assert d.verdict == RECEIVER and d.name == "aten.bernoulli_.float", d
    assert d.input_evidence == "input 0 (the state of the generator it drew from) differs"
    assert any("not a difference of the op's kernel" in w for w in d.warnings)
    assert "ORIGIN" not in format_report(rep).split("pattern:")[0]


def test_numbers_drawn_before_the_window_show_at_the_first_random_op(tmp_path):
    def program(extra: bool):
        def run() -> None:
            x = torch.ones(8).mul(3.0)
            torch.nn.functional.dropout(x, 0.5, training=True)
        torch.manual_seed(0)
        if extra:
            torch.rand(1)  # before the traced window: untraced
        return run

    a = trace_in_process(tmp_path / "a", program(False))
    b = trace_in_process(tmp_path / "b", program(True))
    d = diff_paths(a, b).ranks[0].first_divergence
    assert d.verdict == RECEIVER and d.name == "aten.bernoulli_.float" and d.differing_inputs == [0]


def test_an_origin_at_a_random_op_whose_state_matched_says_so(tmp_path):
    """The same generator state and other bits (no CPU kernel does this by itself: B's recorded
    output is changed here, the rest of the trace is real)."""
    a = trace_in_process(tmp_path / "a", _program(0))
    b = tmp_path / "b" / "rank0" / "trace.jsonl"
    b.parent.mkdir(parents=True)
    lines = open(a).read().splitlines(keepends=True)
    for i, line in enumerate(lines):
        if '"op":"aten.randn.default"' in line:
            rec = json.loads(line)
            rec["out"][0]["o"] = "0" * 16
            lines[i] = json.dumps(rec, separators=(",", ":")) + "\n"
    b.write_text("".join(lines))
    d = diff_paths(a, b).ranks[0].first_divergence
    assert d.verdict == ORIGIN and d.name == "aten.randn.default"
    assert any("the state of the generator it drew from matched" in w for w in d.warnings), d.warnings


def test_a_trace_without_generator_states_is_flagged_when_diffed_with_one_that_has_them(tmp_path):
    """A trace from before generator states were recorded (no header ``generators``, no entries):
    its random ops have one input entry fewer, and the diff says why instead of leaving it unexplained."""
    a = trace_in_process(tmp_path / "a", _program(0))
    old = tmp_path / "old" / "rank0" / "trace.jsonl"
    old.parent.mkdir(parents=True)
    lines = []
    for line in open(a):
        rec = json.loads(line)
        if rec.get("type") == "header":
            rec.pop("generators")
        elif "in" in rec:
            rec["in"] = [e for e in rec["in"] if e.get("t") != "generator"]
        lines.append(json.dumps(rec, separators=(",", ":")) + "\n")
    old.write_text("".join(lines))
    rep = diff_paths(a, old.parent.parent)
    assert any(c["field"] == "generators" and c["severity"] == "warning" for c in rep.comparability)
    assert "comparability: generators differs" in format_report(rep)


def test_which_ops_draw():
    """A dropout's backward reads its mask; attention kernels with dropout_p draw from the default
    generator; _philox_* ops take their key as an argument (on the CPU, dropout and attention's
    dropout decompose to bernoulli_, traced above: these are the ops a device runs)."""
    from probes.optrace import _draws, _op_name, _packet

    aten = torch.ops.aten
    expect = {aten.native_dropout_backward.default: False, aten.native_dropout.default: True,
              aten._scaled_dot_product_flash_attention_for_cpu.default: True, aten._philox_normal_.default: False,
              aten.mul.Tensor: False, aten.randperm.default: True, aten.poisson.default: True,
              aten.bernoulli_.float: True, aten.rand.default: True}
    got = {f: _draws(f, _packet(_op_name(f))) for f in expect}
    assert got == expect
