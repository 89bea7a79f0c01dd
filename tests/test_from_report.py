"""``forensics kernel --from REPORT``: a GEMM origin becomes the exact `forensics kernel` argv;
receivers, control flow, unproven origins and non-sites are refused with one line.

Reports come from ``forensics diff`` run on the SYNTHETIC Megatron fixtures (tests/data/megatron,
provenance in its README) and from the SYNTHETIC compare_traces.py reports there.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from forensics.cli import main
from forensics.tracediff.diff import diff_paths
from forensics.core.errors import BadInput
from forensics.tracediff.from_report import gemm_layout_from_strides, site_for_name, site_from_report

DATA = Path(__file__).resolve().parent / "data" / "megatron"
WGRAD = "decoder.layers.0.mlp.linear_fc1.wgrad"


def _report(tmp_path: Path, a: str | Path, b: str | Path, name: str = "report.json") -> Path:
    rep = diff_paths(DATA / a if isinstance(a, str) else a, DATA / b if isinstance(b, str) else b)
    out = tmp_path / name
    out.write_text(json.dumps(rep.to_json()))
    return out


def test_gemm_origin_gives_the_exact_kernel_invocation(tmp_path):
    rep = _report(tmp_path, "run_a", "run_b_wgrad")
    found = site_from_report(rep, ["python", "pretrain_gpt.py", "--seed", "1"])
    assert found.ok and found.verdict == "ORIGIN" and found.site == "gemm:NT:acc0:grad1"
    assert found.command_line() == ("forensics kernel --site 'gemm:NT:acc0:grad1#1' --ranks 0 --steps 1 "
                                    "-- python pretrain_gpt.py --seed 1")
    assert found.command == ["forensics", "kernel", "--site", "gemm:NT:acc0:grad1#1", "--ranks", "0",
                             "--steps", "1", "--", "python", "pretrain_gpt.py", "--seed", "1"]


def test_cli_from_report_plans_the_rerun(tmp_path, capsys):
    rep = _report(tmp_path, "run_a", "run_b_wgrad")
    code = main(["kernel", "--from", str(rep), "--dry-run", "--out", str(tmp_path / "cap"), "--", "python", "train.py"])
    err = capsys.readouterr().err
    assert code == 0
    assert "forensics kernel --site 'gemm:NT:acc0:grad1#1' --ranks 0 --steps 1 -- python train.py" in err
    assert not (tmp_path / "cap").exists()  # a dry run starts nothing


def test_receiver_is_refused(tmp_path, capsys):
    rep = _report(tmp_path, "run_a", "run_c_receiver")
    found = site_from_report(rep)
    assert not found.ok and found.verdict == "RECEIVER" and found.site is None and "RECEIVER" in found.reason
    code = main(["kernel", "--from", str(rep)])
    err = capsys.readouterr().err.strip()
    assert code == 1 and len(err.splitlines()) == 1 and "refused" in err and "RECEIVER" in err


def test_no_divergence_is_refused(tmp_path):
    found = site_from_report(_report(tmp_path, "run_a", "run_a2"))
    assert not found.ok and found.verdict == "NONE"


def _mutated(src: Path, dst: Path, edit) -> Path:  # noqa: ANN001
    """SYNTHETIC: a fixture run with records edited by ``edit(record) -> record``."""
    dst.mkdir(parents=True)
    for f in src.glob("rank_*.jsonl"):
        recs = [edit(json.loads(x)) for x in f.read_text().splitlines()]
        (dst / f.name).write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in recs))
    return dst


def _sampled(rec: dict) -> dict:
    if rec["name"] in (f"{WGRAD}.input0", f"{WGRAD}.input1"):
        t = rec["tensor"]
        n = t["numel"]
        t.update(mode="sampled", exact_value_certificate=False, captured_numel=2, sample_indices=[0, n - 1])
    return rec


def test_unproven_origin_is_refused(tmp_path):
    a = _mutated(DATA / "run_a", tmp_path / "a", _sampled)
    b = _mutated(DATA / "run_b_wgrad", tmp_path / "b", _sampled)
    found = site_from_report(_report(tmp_path, a, b))
    assert not found.ok and found.verdict == "ORIGIN" and "unproven" in found.reason


def test_origin_that_names_no_site_is_refused(tmp_path):
    """A plain layer boundary (no GEMM meta, not an ATen op) is no site for the kernel rerun."""
    def bump(rec: dict) -> dict:
        if rec["name"] == "decoder.layer0.output":
            rec["tensor"]["sha256"] = "0" * 64
        return rec

    b = _mutated(DATA / "run_a", tmp_path / "b", bump)
    found = site_from_report(_report(tmp_path, "run_a", b))
    assert not found.ok and "maps to no site" in found.reason


def test_compare_traces_v1_report_is_rediffed_from_its_traces(tmp_path, monkeypatch):
    # compare_traces v1 orders keys lexically: its first divergence is the loss event, not the wgrad
    v1 = json.loads((DATA / "compare_v1_wgrad.json").read_text())
    assert v1["first_divergence"]["key"]["name"] == "reported_loss"
    monkeypatch.chdir(DATA)  # the report names its traces relative to where compare_traces ran
    found = site_from_report(DATA / "compare_v1_wgrad.json", ["python", "pretrain_gpt.py"])
    assert found.ok and found.site_arg == "gemm:NT:acc0:grad1#1"
    assert found.command_line() == "forensics kernel --site 'gemm:NT:acc0:grad1#1' --ranks 0 --steps 1 -- python pretrain_gpt.py"
    # without the traces, the report alone cannot prove the record's inputs matched
    alone = tmp_path / "alone.json"
    shutil.copy(DATA / "compare_v1_wgrad.json", alone)
    monkeypatch.chdir(tmp_path)
    found = site_from_report(alone)
    assert not found.ok and found.verdict == "UNPROVEN" and "reported_loss" in found.reason


def test_compare_traces_v2_missing_event_is_control_flow():
    found = site_from_report(DATA / "compare_v2_missing_event.json")
    assert not found.ok and found.verdict == "CONTROL_FLOW" and found.rank == 1


@pytest.mark.parametrize("text,message", [
    ('{"schema": "forensics.diff", "version": 1, "ranks": {', "truncated JSON"),
    ('{"schema": "forensics.diff", "version": 1, "ranks": {}}\n{"x": 1}\n', "trailing data after the JSON value"),
    ('{"schema": "forensics.diff", "version": 1, "ranks": {]}', "malformed JSON"),
    ('{"schema": "forensics.diff", "version": 3, "ranks": {}}', "version 3"),
    ('{"hello": "world"}', "not a forensics diff report"),
    ("", "empty report"),
    ('{"status": "invalid_trace", "error": "run_a/rank_000000.jsonl:3: duplicate JSON field", "match": false}',
     "could not compare"),
])
def test_bad_report_is_one_line_bad_input(tmp_path, text, message):
    f = tmp_path / "r.json"
    f.write_text(text)
    with pytest.raises(BadInput) as e:
        site_from_report(f)
    assert str(e.value).startswith(str(f)) and message in str(e.value) and "\n" not in str(e.value)


def test_layout_from_real_strides():
    torch = pytest.importorskip("torch")
    x, w, go = torch.zeros(8, 16), torch.zeros(4, 16), torch.zeros(8, 4)
    st = lambda t: (list(t.shape), list(t.stride()))  # noqa: E731
    assert gemm_layout_from_strides(st(x), st(w.t())) == "TN"  # Linear forward (TE fprop)
    assert gemm_layout_from_strides(st(go.t()), st(x)) == "NT"  # wgrad
    assert gemm_layout_from_strides(st(go), st(w)) == "NN"  # dgrad
    assert gemm_layout_from_strides(st(x[:, ::2]), st(w.t()[::2])) is None  # neither layout: copied first


def test_name_mapping():
    assert site_for_name("aten.sum.default") == "aten.sum.default"
    assert site_for_name("decoder.layer0.output") is None
    assert site_for_name(WGRAD, {"layout": "NT", "acc": 1, "grad": 1}) == "gemm:NT:acc1:grad1"


def test_one_hop_later_origin_is_refused(tmp_path):
    """SYNTHETIC forensics.diff report (layout of docs/commands/diff.md): an ORIGIN on a view op."""
    d = {"rank": 0, "identity": "aten.view.default:4", "name": "aten.view.default", "verdict": "ORIGIN",
         "seq": 9, "step": 1, "inputs_matched": True, "evidence": "proven", "site": "aten.view.default",
         "occurrence": 4, "kind": "op", "warnings": ["one hop later: view cannot change bits by itself"]}
    rep = {"schema": "forensics.diff", "version": 1, "pattern": "single_rank", "site": "aten.view.default",
           "occurrence": 4, "site_rank": 0, "site_step": 1, "next_command": "forensics kernel --site aten.view.default -- python t.py",
           "ranks": {"0": {"rank": 0, "first_divergence": d, "steps": [1]}}}
    f = tmp_path / "r.json"
    f.write_text(json.dumps(rep))
    found = site_from_report(f)
    assert not found.ok and "one hop later" in found.reason
    d["warnings"] = []
    f.write_text(json.dumps(rep))
    found = site_from_report(f)
    assert found.command_line() == "forensics kernel --site 'aten.view.default#4' --ranks 0 --steps 1 -- python t.py"
