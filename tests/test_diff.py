"""Differ on SYNTHETIC traces written in the native optrace format (docs/trace-format.md).

Every trace here is hand-written (SYNTHETIC) to exercise one rule of the differ; the real CPU
divergences are in tests/test_diff_cpu_real.py and tests/test_diff_torchrun.py.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from forensics.cli import main
from forensics.tracediff.diff import CONTROL_FLOW, ORIGIN, RECEIVER, diff_paths
from forensics.core.errors import BadInput


def tensor(h: str, shape=(4, 4), dtype="float32", chunks=None, ev=None, ordered: str | bool = True) -> dict:
    """SYNTHETIC tensor entry; ``ordered`` adds an order-sensitive digest ``o`` (derived from ``h``
    unless given), as the tracer records for inputs by default."""
    t = {"s": list(shape), "t": dtype, "n": math.prod(shape), "h": h}
    if ordered:
        t["o"] = ordered if isinstance(ordered, str) else f"o{h}"
    if chunks is not None:
        t["c"] = chunks
    if ev is not None:
        t["ev"] = ev
    return t


def rec(op: str, occ: int, ins, outs, step=0, kind="op", meta=None) -> dict:
    r = {"id": f"{op}:{occ}", "op": op, "kind": kind, "step": step, "in": ins, "out": outs}
    if meta:
        r["meta"] = meta
    return r


def write_trace(d: Path, records_by_rank: dict[int, list[dict]], world=None, env=None, argv=None) -> Path:
    """SYNTHETIC native trace directory."""
    for rank, recs in records_by_rank.items():
        f = d / f"rank{rank}" / "trace.jsonl"
        f.parent.mkdir(parents=True, exist_ok=True)
        header = {"type": "header", "schema": "forensics.optrace", "version": 1, "rank": rank,
                  "world_size": world or len(records_by_rank), "argv": argv or ["python", "train.py"],
                  "env": env or {}, "steps": "all"}
        lines = [json.dumps(header)] + [json.dumps({"seq": i, **r}) for i, r in enumerate(recs)]
        lines.append(json.dumps({"type": "footer", "records": len(recs), "dropped": 0}))
        f.write_text("\n".join(lines) + "\n")
    return d


MM_META = {"gemm": {"layout": "NT", "acc": 0, "grad": 1}}


def base_records() -> list[dict]:
    return [
        rec("aten.add.Tensor", 1, [tensor("x"), tensor("y")], [tensor("xy")]),
        rec("aten.mm.default", 1, [tensor("xy"), tensor("w")], [tensor("m")], meta=MM_META),
        rec("aten.relu.default", 1, [tensor("m")], [tensor("r")]),
        rec("aten.sum.default", 1, [tensor("r")], [tensor("s", shape=())]),
    ]


def test_identical_traces_report_no_divergence(tmp_path):
    a = write_trace(tmp_path / "a", {0: base_records()})
    b = write_trace(tmp_path / "b", {0: base_records()})
    rep = diff_paths(a, b)
    assert not rep.diverged and rep.pattern == "none" and rep.site is None
    assert rep.ranks[0].records_compared == 4


def test_origin_at_gemm_names_gemm_site_and_next_command(tmp_path):
    recs_b = base_records()
    recs_b[1]["out"] = [tensor("m2")]
    recs_b[2]["in"], recs_b[2]["out"] = [tensor("m2")], [tensor("r2")]
    a = write_trace(tmp_path / "a", {0: base_records()})
    b = write_trace(tmp_path / "b", {0: recs_b})
    rep = diff_paths(a, b)
    d = rep.ranks[0].first_divergence
    assert d.verdict == ORIGIN and d.identity == "aten.mm.default:1" and d.inputs_matched
    assert d.site == "gemm:NT:acc0:grad1" and rep.site == "gemm:NT:acc0:grad1" and rep.occurrence == 1
    assert rep.next_command == "forensics kernel --site 'gemm:NT:acc0:grad1#1' --ranks 0 --steps 0 -- python train.py"


def test_alignment_is_by_identity_not_position(tmp_path):
    """SYNTHETIC: B runs two independent ops in the other order; nothing diverges."""
    recs_b = base_records()
    recs_b.insert(0, recs_b.pop(1))  # mm first in B's stream: positions differ, identities do not
    a = write_trace(tmp_path / "a", {0: base_records()})
    b = write_trace(tmp_path / "b", {0: recs_b})
    assert not diff_paths(a, b).diverged


def test_receiver_when_inputs_differ(tmp_path):
    recs_a = base_records()[2:]
    recs_b = base_records()[2:]
    recs_b[0]["in"], recs_b[0]["out"] = [tensor("m2")], [tensor("r2")]
    rep = diff_paths(write_trace(tmp_path / "a", {0: recs_a}), write_trace(tmp_path / "b", {0: recs_b}))
    d = rep.ranks[0].first_divergence
    assert d.verdict == RECEIVER and d.inputs_matched is False and d.site is None
    assert rep.pattern == "only_receivers" and rep.site is None and "forensics trace" in rep.next_command


def test_control_flow_extra_record_in_b(tmp_path):
    recs_b = base_records()
    recs_b.insert(1, rec("aten.neg.default", 1, [tensor("xy")], [tensor("n")]))
    rep = diff_paths(write_trace(tmp_path / "a", {0: base_records()}), write_trace(tmp_path / "b", {0: recs_b}))
    d = rep.ranks[0].first_divergence
    assert d.verdict == CONTROL_FLOW and d.side == "B" and d.identity == "aten.neg.default:1"


def test_empty_artifact_and_its_consumer_are_passed_over(tmp_path):
    """SYNTHETIC: an uninitialised empty differs, a copy of it differs, then a real origin."""
    def recs(e: str, c: str, s: str):
        return [
            rec("aten.empty.memory_format", 1, [], [tensor(e)]),
            rec("aten.clone.default", 1, [tensor(e)], [tensor(c)]),
            rec("aten.sum.default", 1, [tensor("x")], [tensor(s, shape=())]),
        ]
    rep = diff_paths(write_trace(tmp_path / "a", {0: recs("e1", "c1", "s1")}),
                     write_trace(tmp_path / "b", {0: recs("e2", "c2", "s2")}))
    r = rep.ranks[0]
    assert r.artifacts_total == 2 and [a.identity for a in r.artifacts] == ["aten.empty.memory_format:1", "aten.clone.default:1"]
    assert r.first_divergence.identity == "aten.sum.default:1" and r.first_divergence.verdict == ORIGIN


def test_every_artifact_passed_over_is_counted_and_the_unlisted_ones_are_said(tmp_path):
    """SYNTHETIC: five differing empties; the text lists three and says two more, never a silent cut."""
    from forensics.tracediff.diff import format_report

    def recs(tag: str):
        return [rec("aten.empty.memory_format", i, [], [tensor(f"e{i}{tag}")]) for i in range(1, 6)] + [
            rec("aten.sum.default", 1, [tensor("x")], [tensor(f"s{tag}", shape=())])]
    rep = diff_paths(write_trace(tmp_path / "a", {0: recs("a")}), write_trace(tmp_path / "b", {0: recs("b")}))
    text = format_report(rep)
    assert "5 probe artifact(s) passed over" in text
    assert text.count("    artifact passed over: ") == 3
    assert "    ... and 2 more artifact(s) passed over; the JSON report (--json) lists 5" in text


def test_non_blocking_copy_is_artifact_but_blocking_copy_is_not(tmp_path):
    def recs(h: str, nb: bool):
        return [rec("aten._to_copy.default", 1, [tensor("x")], [tensor(h)], meta={"non_blocking": nb})]
    rep = diff_paths(write_trace(tmp_path / "a", {0: recs("1", True)}), write_trace(tmp_path / "b", {0: recs("2", True)}))
    assert not rep.diverged and rep.ranks[0].artifacts_total == 1
    rep = diff_paths(write_trace(tmp_path / "c", {0: recs("1", False)}), write_trace(tmp_path / "d", {0: recs("2", False)}))
    assert rep.diverged and rep.ranks[0].first_divergence.verdict == ORIGIN
    assert any("one hop later" in w for w in rep.ranks[0].first_divergence.warnings)


def test_trivial_op_origin_warns_one_hop_later(tmp_path):
    recs_b = base_records()
    recs_b[0]["out"] = [tensor("xy2")]
    recs_b[1]["in"] = [tensor("xy2"), tensor("w")]
    rep = diff_paths(write_trace(tmp_path / "a", {0: base_records()}), write_trace(tmp_path / "b", {0: recs_b}))
    d = rep.ranks[0].first_divergence
    assert d.identity == "aten.add.Tensor:1" and d.verdict == ORIGIN
    assert any("one hop later" in w for w in d.warnings)


def test_weak_evidence_equality_is_unproven(tmp_path):
    recs_a = [rec("aten.sum.default", 1, [tensor("x", ev="summary")], [tensor("s1")])]
    recs_b = [rec("aten.sum.default", 1, [tensor("x", ev="summary")], [tensor("s2")])]
    rep = diff_paths(write_trace(tmp_path / "a", {0: recs_a}), write_trace(tmp_path / "b", {0: recs_b}))
    d = rep.ranks[0].first_divergence
    assert d.verdict == ORIGIN and d.evidence == "unproven" and any("unproven" in w for w in d.warnings)


def test_chunk_digests_find_a_permutation(tmp_path):
    """SYNTHETIC: whole-tensor digests equal (xor is permutation-blind), chunk digests differ."""
    recs_a = [rec("aten.sort.default", 1, [tensor("x")], [tensor("v", chunks=["1", "2"])])]
    recs_b = [rec("aten.sort.default", 1, [tensor("x")], [tensor("v", chunks=["2", "1"])])]
    rep = diff_paths(write_trace(tmp_path / "a", {0: recs_a}), write_trace(tmp_path / "b", {0: recs_b}))
    d = rep.ranks[0].first_divergence
    assert d.verdict == ORIGIN and "chunk" in d.how


def test_cross_rank_patterns(tmp_path):
    """SYNTHETIC 2-rank: rank 0 origin, rank 1 receives via a collective -> subset."""
    def r(ar_out: str, add_out: str):
        return [
            rec("aten.add.Tensor", 1, [tensor("x")], [tensor(add_out)]),
            rec("c10d.allreduce_", 1, [tensor("g")], [tensor(ar_out)], kind="collective"),
        ]
    a = write_trace(tmp_path / "a", {0: r("s", "p"), 1: r("s", "p")})
    b = write_trace(tmp_path / "b", {0: r("s2", "p2"), 1: r("s2", "p")})
    rep = diff_paths(a, b)
    assert rep.ranks[0].first_divergence.verdict == ORIGIN
    assert rep.ranks[1].first_divergence.verdict == RECEIVER
    assert rep.ranks[1].first_divergence.identity == "c10d.allreduce_:1"
    assert rep.pattern == "subset"
    # both ranks origin at the same op -> op_nondeterministic
    b2 = write_trace(tmp_path / "b2", {0: r("s2", "p2"), 1: r("s2", "p2")})
    assert diff_paths(a, b2).pattern == "op_nondeterministic"
    # ... unless the runs differ in a knob, which can change the op's bits by itself
    b4 = write_trace(tmp_path / "b4", {0: r("s2", "p2"), 1: r("s2", "p2")}, env={"OMP_NUM_THREADS": "2"})
    rep4 = diff_paths(a, b4)
    assert rep4.pattern == "same_op_config_differs" and "env.OMP_NUM_THREADS" in rep4.pattern_explanation
    # both ranks: collective with matching inputs, whole world traced -> the collective is the origin
    b3 = write_trace(tmp_path / "b3", {0: r("s2", "p"), 1: r("s2", "p")})
    rep3 = diff_paths(a, b3)
    assert {d.verdict for d in (rep3.ranks[0].first_divergence, rep3.ranks[1].first_divergence)} == {ORIGIN}


def test_cli_exit_codes_and_json_report(tmp_path):
    recs_b = base_records()
    recs_b[3]["out"] = [tensor("s2", shape=())]
    a = write_trace(tmp_path / "a", {0: base_records()})
    b = write_trace(tmp_path / "b", {0: recs_b})
    assert main(["diff", str(a), str(a)]) == 0
    out = tmp_path / "rep.json"
    assert main(["diff", str(a), str(b), "--json", str(out)]) == 1
    rep = json.loads(out.read_text())
    fd = rep["ranks"]["0"]["first_divergence"]
    for key in ("identity", "name", "verdict", "seq", "step", "inputs_matched", "evidence", "site", "warnings"):
        assert key in fd
    assert rep["schema"] == "forensics.diff" and rep["site"] == "aten.sum.default" and rep["pattern"] == "single_rank"
    before = out.read_bytes()
    assert main(["diff", str(a), str(b), "--json", str(out)]) == 3  # refused before any trace is read
    assert out.read_bytes() == before
    assert main(["diff", str(a), str(b), "--json", str(out), "--force"]) == 1  # replaced, whole
    assert json.loads(out.read_text()) == rep


def test_json_dash_is_stdout(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    recs_b = base_records()
    recs_b[3]["out"] = [tensor("s2", shape=())]
    a = write_trace(tmp_path / "a", {0: base_records()})
    b = write_trace(tmp_path / "b", {0: recs_b})
    capsys.readouterr()
    assert main(["diff", str(a), str(b), "--json", "-"]) == 1
    rep = json.loads(capsys.readouterr().out)  # the JSON alone: no text report around it
    assert rep["schema"] == "forensics.diff" and not (tmp_path / "-").exists()


@pytest.mark.parametrize("content,needle", [
    ("", "empty file"),
    ('{"foo": 1}\n', "foreign schema"),
    ('{"type":"header","schema":"forensics.optrace","version":1,"rank":0}\nnot json\n{"seq":0,"id":"a:1","op":"a"}\n', "corrupt"),
    ('{"type":"header","schema":"forensics.optrace","version":7,"rank":0}\n', "version"),
])
def test_bad_input_is_one_line_naming_the_file(tmp_path, capsys, content, needle):
    good = write_trace(tmp_path / "good", {0: [rec("a", 1, [], [tensor("1")])]})
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    with pytest.raises(BadInput) as e:
        diff_paths(good / "rank0" / "trace.jsonl", bad, fmt="native")
    assert needle in str(e.value) and str(bad) in str(e.value)
    assert main(["diff", str(good), str(bad), "--format", "native"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0]


def test_unrecognised_trace_refused(tmp_path):
    good = write_trace(tmp_path / "good", {0: [rec("a", 1, [], [tensor("1")])]})
    other = tmp_path / "other.json"
    other.write_text('{"traceEvents": []}')
    with pytest.raises(BadInput) as e:
        diff_paths(good, other)
    assert str(other) in str(e.value) and "not a trace" in str(e.value)


MEGATRON_RUN = Path(__file__).resolve().parent / "data" / "megatron" / "run_a"


@pytest.mark.skipif(not MEGATRON_RUN.is_dir(), reason="megatron reader fixtures absent")
def test_mixed_formats_refused_with_one_line(tmp_path, capsys):
    good = write_trace(tmp_path / "good", {0: [rec("a", 1, [], [tensor("1")])]})
    with pytest.raises(BadInput) as e:
        diff_paths(good, MEGATRON_RUN)
    assert "megatron" in str(e.value) and "native" in str(e.value) and str(MEGATRON_RUN) in str(e.value)
    assert main(["diff", str(good), str(MEGATRON_RUN)]) == 3
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def _rnn_records(ws: str, grads: str) -> list[dict]:
    """SYNTHETIC oneDNN RNN layer and its backward: outputs (output, hy, cy, workspace)."""
    return [
        rec("aten.mkldnn_rnn_layer.default", 1, [tensor("x"), tensor("w")],
            [tensor("out"), tensor("hy"), tensor("cy"), tensor(ws, shape=(64,), dtype="uint8")]),
        rec("aten.mkldnn_rnn_layer_backward.default", 1,
            [tensor("x"), tensor("w"), tensor("out"), tensor(ws, shape=(64,), dtype="uint8")], [tensor(grads)]),
        rec("aten.sum.default", 1, [tensor(grads)], [tensor(f"s{grads}", shape=())]),
    ]


def test_a_library_workspace_that_differs_alone_is_passed_over(tmp_path):
    """oneDNN's (and cuDNN's) RNN workspace output holds scratch it never initialises in full: two
    identical runs of an LSTM on the CPU differed only there (a false ORIGIN at
    aten.mkldnn_rnn_layer.default:1). It is passed over; its backward, whose grads match, too."""
    a = write_trace(tmp_path / "a", {0: _rnn_records("ws1", "g")})
    b = write_trace(tmp_path / "b", {0: _rnn_records("ws2", "g")})
    res = diff_paths(a, b).ranks[0]
    assert res.first_divergence is None
    assert [x.name for x in res.artifacts] == ["aten.mkldnn_rnn_layer.default"]
    assert "workspace" in res.artifacts[0].artifact


def test_a_reader_of_a_differing_workspace_whose_outputs_differ_is_judged(tmp_path):
    """The workspace is followed only while it changes nothing: a backward whose grads differ is
    judged (a RECEIVER: its workspace input differs), never passed through as artifact-derived."""
    a = write_trace(tmp_path / "a", {0: _rnn_records("ws1", "g1")})
    b = write_trace(tmp_path / "b", {0: _rnn_records("ws2", "g2")})
    d = diff_paths(a, b).ranks[0].first_divergence
    assert d is not None and d.name == "aten.mkldnn_rnn_layer_backward.default" and d.verdict == RECEIVER


def test_a_command_line_that_differs_only_in_the_launchers_port_is_the_same_experiment():
    """SYNTHETIC run info: torchrun's rendezvous values are bookkeeping (like MASTER_PORT)."""
    from forensics.tracediff.comparability import compare_runs

    def argv(*tail):
        return {"argv": ["torchrun", "--nproc-per-node", "2", *tail, "train.py", "--lr", "0.1"]}

    assert compare_runs(argv("--master-port", "29500"), argv("--master-port", "29611")) == []
    assert compare_runs(argv("--rdzv_endpoint=h:1"), argv("--rdzv_endpoint=h:2")) == []
    assert [d.field for d in compare_runs(argv("--master-port", "1"), {"argv": ["torchrun", "--nproc-per-node", "2",
            "--master-port", "2", "train.py", "--lr", "0.2"]})] == ["argv"]
