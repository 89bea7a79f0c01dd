"""Megatron-Core determinism traces (schema v1): strict reading, evidence strength, diff verdicts.

The fixtures under tests/data/megatron are SYNTHETIC (the PyPI megatron-core does not ship the
recorder); tests/data/megatron/README.md gives the repository, path and commit they follow.
Every malformed file below is a SYNTHETIC mutation of a fixture line, written to tmp_path.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from forensics.tracediff.diff import diff_paths
from forensics.core.errors import BadInput
from forensics.tracediff.traces import detect_format
from forensics.tracediff.traces import megatron

DATA = Path(__file__).resolve().parent / "data" / "megatron"
RUN_A, RUN_A2, RUN_B, RUN_C = (DATA / n for n in ("run_a", "run_a2", "run_b_wgrad", "run_c_receiver"))
WGRAD = "decoder.layers.0.mlp.linear_fc1.wgrad"


def _lines(run: Path, rank: int = 0) -> list[dict]:
    return [json.loads(x) for x in (run / f"rank_{rank:06d}.jsonl").read_text().splitlines()]


def _write(folder: Path, records: list[dict] | list[str], rank: int = 0) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / f"rank_{rank:06d}.jsonl"
    f.write_text("".join((r if isinstance(r, str) else json.dumps(r, sort_keys=True)) + "\n" for r in records))
    return f


def test_fixtures_read_and_keep_the_recorders_structure():
    trace = megatron.read(RUN_A)
    assert trace.format == "megatron" and sorted(trace.ranks) == [0, 1]
    recs = {r.name: r for r in trace.records(0)}
    # .input0/.input1/.output joined into one op record: two inputs, one output, all full evidence
    wgrad = recs[WGRAD]
    assert [t.evidence for t in wgrad.inputs] == ["full", "full"] and [t.evidence for t in wgrad.outputs] == ["full"]
    assert wgrad.extra["gemm"] == {"layout": "NT", "acc": 0, "grad": 1}
    assert wgrad.identity == f"op/backward/mb0/{WGRAD}:1" and wgrad.step == 1 and wgrad.phase == "backward"
    assert wgrad.outputs[0].shape == (4, 16) and len(wgrad.outputs[0].digest) == 64
    # a summary record is summary evidence; a lone boundary's inputs are "not observed" (metadata)
    main_grad = recs["decoder.layers.0.mlp.linear_fc1.weight.main_grad"]
    assert main_grad.outputs[0].evidence == "summary" and main_grad.outputs[0].digest.startswith("summary:")
    assert main_grad.inputs == [megatron.NOT_OBSERVED] and main_grad.extra["inputs_observed"] is False
    loss = recs["reported_loss"]
    assert loss.kind == "event" and loss.outputs[0].evidence == "full"
    assert [r.seq for r in trace.records(0)] == sorted(r.seq for r in trace.records(0))


def test_detect_directory_and_single_file():
    assert detect_format(RUN_A) == "megatron"
    assert detect_format(RUN_A / "rank_000001.jsonl") == "megatron"
    assert sorted(megatron.rank_files(RUN_A / "rank_000001.jsonl")) == [1]


def test_control_identical_runs_do_not_diverge():
    rep = diff_paths(RUN_A, RUN_A2)
    assert rep.format == "megatron" and rep.pattern == "none" and not rep.diverged


def test_wgrad_origin_on_every_rank():
    rep = diff_paths(RUN_A, RUN_B, fmt="megatron")
    assert rep.pattern == "op_nondeterministic"
    for r in (0, 1):
        d = rep.ranks[r].first_divergence
        assert (d.verdict, d.evidence, d.inputs_matched, d.name) == ("ORIGIN", "proven", True, WGRAD)
        assert d.site == "gemm:NT:acc0:grad1"
    assert rep.site == "gemm:NT:acc0:grad1" and rep.occurrence == 1


def test_receiver_is_not_an_origin():
    rep = diff_paths(RUN_A, RUN_C)
    d = rep.ranks[0].first_divergence
    assert d.verdict == "RECEIVER" and d.name == "decoder.layer0" and rep.site is None
    assert rep.ranks[1].first_divergence is None


def _with_mode(src: Path, dst: Path, names: set[str], mode: str) -> Path:
    """SYNTHETIC: the same run with some records re-recorded at a weaker evidence mode."""
    for f in src.glob("rank_*.jsonl"):
        out = []
        for rec in map(json.loads, f.read_text().splitlines()):
            if rec["name"] in names:
                t = rec["tensor"]
                for k in ("sha256", "captured_numel", "all_finite", "sample_indices", "summary"):
                    t.pop(k, None)
                t.update(mode=mode, value_observed=mode != "metadata", exact_value_certificate=False)
                if mode == "summary":
                    t["summary"] = {"all_finite": True, "l2_norm": 1.0, "maximum": 1.0, "mean": 0.0, "minimum": -1.0}
            out.append(rec)
        _write(dst, out, int(f.stem.split("_")[1]))
    return dst


def test_summary_inputs_never_prove_equality(tmp_path):
    names = {f"{WGRAD}.input0", f"{WGRAD}.input1"}
    a = _with_mode(RUN_A, tmp_path / "a", names, "summary")
    b = _with_mode(RUN_B, tmp_path / "b", names, "summary")
    wgrad = next(r for r in megatron.read(a).records(0) if r.name == WGRAD)
    assert [t.evidence for t in wgrad.inputs] == ["summary", "summary"]
    d = diff_paths(a, b).ranks[0].first_divergence
    assert d.verdict == "ORIGIN" and d.evidence == "unproven"


def test_equal_summaries_are_not_a_match_certificate(tmp_path):
    """Two different tensors with the same (SYNTHETIC) summary: counted as unproven, never equal."""
    a = _with_mode(RUN_A, tmp_path / "a", {f"{WGRAD}.output"}, "summary")
    b = _with_mode(RUN_B, tmp_path / "b", {f"{WGRAD}.output"}, "summary")
    rep = diff_paths(a, b)
    assert rep.ranks[0].unproven_matches >= 1


BAD = {
    "duplicate key": (lambda ls: [ls[0].replace('"name":', '"name":"x","name":', 1)] + ls[1:], "duplicate JSON field 'name'", 1),
    "sequence backwards": (lambda ls: [ls[1], ls[0]] + ls[2:], "sequence must be strictly increasing", 2),
    "foreign schema version": (lambda ls: ls[:2] + [ls[2].replace('"schema_version":1', '"schema_version":2')] + ls[3:],
                               "unsupported schema_version=2", 3),
    "truncated": (lambda ls: ls[:-1] + [ls[-1][: len(ls[-1]) // 2]], "truncated record", 8),
    "non-finite": (lambda ls: [ls[0].replace('"iteration":1}', '"iteration":NaN}', 1)] + ls[1:], "non-finite", 1),
    "rank contradicts name": (lambda ls: [ls[0].replace('"rank":0', '"rank":3')] + ls[1:], "does not match filename rank 0", 1),
    "duplicate semantic key": (lambda ls: ls[:2] + [ls[1].replace('"sequence":1', '"sequence":2')] + ls[3:],
                               "duplicate semantic event key", 3),
    "evidence contradicts mode": (lambda ls: [ls[0], ls[1].replace('"exact_value_certificate":true', '"exact_value_certificate":false')] + ls[2:],
                                  "exact_value_certificate contradicts tensor mode", 2),
    "not JSON": (lambda ls: ls[:4] + ["{not json"] + ls[5:], "invalid JSON", 5),
    "missing field": (lambda ls: ls[:1] + [ls[1].replace('"occurrence":0,', '')] + ls[2:], "missing fields: ['occurrence']", 2),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_rank_file_is_one_line_with_file_and_line(tmp_path, case):
    mutate, message, line = BAD[case]
    raw = (RUN_A / "rank_000000.jsonl").read_text()
    lines = [x for x in raw.split("\n") if x]
    f = tmp_path / "rank_000000.jsonl"
    body = "\n".join(mutate(lines))
    f.write_text(body if case == "truncated" else body + "\n")
    with pytest.raises(BadInput) as e:
        megatron.read(tmp_path)
    text = str(e.value)
    assert "\n" not in text and text.startswith(f"{f}:{line}: ") and message in text


def test_directory_rules(tmp_path):
    empty = tmp_path / "empty"
    _write(empty, [])
    with pytest.raises(BadInput, match="no records"):
        megatron.read(empty)
    alias = tmp_path / "alias"
    shutil.copytree(RUN_A, alias)
    shutil.copy(RUN_A / "rank_000001.jsonl", alias / "rank_1.jsonl")
    with pytest.raises(BadInput, match="duplicate trace file for rank 1"):
        megatron.read(alias)
    odd = tmp_path / "odd"
    shutil.copytree(RUN_A, odd)
    (odd / "rank_1a.jsonl").write_text("")
    with pytest.raises(BadInput, match=r"rank_<digits>\.jsonl"):
        megatron.read(odd)
    (tmp_path / "nothing-here").mkdir()
    with pytest.raises(BadInput, match="no rank_"):
        megatron.read(tmp_path / "nothing-here")


def test_explicit_file_must_hold_one_rank(tmp_path):
    recs = _lines(RUN_A, 0) + [dict(_lines(RUN_A, 1)[-1], sequence=99)]
    f = tmp_path / "mixed.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    with pytest.raises(BadInput, match="does not match filename rank 0"):
        megatron.read(f)


def test_single_rank_files_and_cli_format_flag(tmp_path, capsys):
    from forensics.cli import main

    rep = diff_paths(RUN_A / "rank_000001.jsonl", RUN_B / "rank_000001.jsonl")
    assert list(rep.ranks) == [1] and rep.ranks[1].first_divergence.site == "gemm:NT:acc0:grad1"
    out = tmp_path / "r.json"
    assert main(["diff", str(RUN_A), str(RUN_B), "--format", "megatron", "--json", str(out)]) == 1
    assert json.loads(out.read_text())["site"] == "gemm:NT:acc0:grad1"
    assert main(["diff", str(RUN_A), str(RUN_A2), "--format", "megatron"]) == 0
    bad = tmp_path / "bad"
    _write(bad, [(RUN_A / "rank_000000.jsonl").read_text().splitlines()[0].replace('"schema_version":1', '"schema_version":7')])
    capsys.readouterr()
    assert main(["diff", str(bad), str(RUN_A), "--format", "megatron"]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "rank_000000.jsonl:1: unsupported schema_version=7" in err
