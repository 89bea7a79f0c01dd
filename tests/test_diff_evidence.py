"""What each verdict rests on (issue 13, the differ) and partial or malformed traces (issue 15),
on SYNTHETIC traces hand-written in the native format of docs/trace-format.md.

Every trace here is SYNTHETIC: written by this file to exercise one rule. The same rules on real
CPU runs are in tests/test_diff_real_evidence.py and tests/test_trace_kill.py.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from forensics.cli import main
from forensics.core.errors import BadInput
from forensics.tracediff.diff import (
    AFTER_CONTROL_FLOW,
    CONTROL_FLOW,
    INPUTS_UNKNOWN,
    ORIGIN,
    RECEIVER,
    diff_paths,
    diff_streams,
    format_report,
)
from forensics.tracediff.from_report import site_from_report
from forensics.tracediff.traces import RankStream, StreamEnd, TensorDigest, TraceRecord

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)


def t(h: str, shape=(4,), ordered: str | bool = True, ev: str | None = None, dtype: str = "float32") -> dict:
    """A SYNTHETIC tensor entry: ``h`` the XOR digest, ``o`` an order-sensitive one (derived from
    ``h`` unless given; ``ordered=False`` leaves it out, as an XOR-only tracer would)."""
    e = {"s": list(shape), "t": dtype, "n": math.prod(shape), "h": h}
    if ordered:
        e["o"] = ordered if isinstance(ordered, str) else f"o{h}"
    if ev:
        e["ev"] = ev
        if ev == "metadata":
            e.pop("h")
            e.pop("o", None)
    return e


def r(op: str, occ: int, ins: list, outs: list, step: int = 0, kind: str = "op", meta: dict | None = None,
      phase: str | None = None) -> dict:
    x = {"id": f"{op}:{occ}", "op": op, "kind": kind, "step": step, "in": ins, "out": outs}
    if meta:
        x["meta"] = meta
    if phase:
        x["phase"] = phase
    return x


def write(d: Path, ranks: dict[int, list[dict]], *, footer: bool | dict = True, header: dict | None = None,
          cut: str = "") -> Path:
    """A SYNTHETIC native trace directory. ``footer=False``: a killed run (no footer); a dict: extra
    footer fields (``{"stopped": ...}``); ``cut``: bytes of a half-written last line."""
    for rank, recs in ranks.items():
        f = d / f"rank{rank}" / "trace.jsonl"
        f.parent.mkdir(parents=True, exist_ok=True)
        head = {"type": "header", "schema": "forensics.optrace", "version": 1, "rank": rank,
                "world_size": len(ranks), "argv": ["python", "train.py"], "env": {}, "steps": "all"}
        head.update(header or {})
        lines = [json.dumps(head)] + [json.dumps({"seq": i, **x}) for i, x in enumerate(recs)]
        if footer is not False:
            foot = {"type": "footer", "records": len(recs), "dropped": 0}
            if isinstance(footer, dict):
                foot.update(footer)
            lines.append(json.dumps(foot))
        f.write_text("\n".join(lines) + "\n" + cut)
    return d


def chain(n: int = 6, bad_at: int | None = None, ordered: bool = True) -> list[dict]:
    """n elementwise ops, each reading the previous output; ``bad_at``: that op's output differs."""
    recs, prev = [], "x0"
    for i in range(n):
        out = f"y{i}" + ("B" if bad_at is not None and i >= bad_at else "")
        recs.append(r("aten.exp.default", i + 1, [t(prev, ordered=ordered)], [t(out, ordered=ordered)]))
        prev = out
    return recs


# --------------------------------------------------------------------------- issue 13, item 1

@pytest.mark.parametrize("inputs", [[], [t("", ev="metadata")], [t("", ev="metadata"), t("", ev="metadata")]],
                         ids=["no inputs", "metadata only", "two metadata"])
def test_no_input_evidence_is_never_an_origin(tmp_path, inputs):
    """SYNTHETIC: outputs differ, inputs never recorded -> INPUTS_UNKNOWN, no site, --from refuses."""
    a = write(tmp_path / "a", {0: [r("aten.bernoulli.default", 1, inputs, [t("1")])]})
    b = write(tmp_path / "b", {0: [r("aten.bernoulli.default", 1, inputs, [t("2")])]})
    rep = diff_paths(a, b)
    d = rep.ranks[0].first_divergence
    assert d.verdict == INPUTS_UNKNOWN and d.inputs_matched is None and d.evidence == "none"
    assert d.site is None and rep.site is None and rep.pattern == "inputs_unknown"
    text = format_report(rep)
    assert "INPUTS_UNKNOWN (none)" in text and "inputs NOT RECORDED" in text and "ORIGIN" not in text
    out = tmp_path / "rep.json"
    assert main(["diff", str(a), str(b), "--json", str(out)]) == 1
    found = site_from_report(out)
    assert not found.ok and "INPUTS_UNKNOWN" in found.reason and "not recorded" in found.reason
    assert main(["kernel", "--from", str(out), "--dry-run"]) == 1


def test_partly_recorded_inputs_make_an_unproven_origin(tmp_path):
    """SYNTHETIC: one input equal by an order-sensitive digest, the other not recorded."""
    a = write(tmp_path / "a", {0: [r("aten.mul.Tensor", 1, [t("x"), t("", ev="metadata")], [t("1")])]})
    b = write(tmp_path / "b", {0: [r("aten.mul.Tensor", 1, [t("x"), t("", ev="metadata")], [t("2")])]})
    d = diff_paths(a, b).ranks[0].first_divergence
    assert d.verdict == ORIGIN and d.evidence == "unproven" and "entry 1 not recorded" in d.input_evidence


# --------------------------------------------------------------------------- issue 13, item 2

@pytest.mark.parametrize("kind,op", [("op", "aten.copy_.default"), ("collective", "c10d.allreduce_.default"),
                                     ("backward", "backward.start")])
def test_differing_inputs_without_outputs_are_a_receiver(tmp_path, kind, op):
    """SYNTHETIC: a record with no outputs whose inputs differ (an async collective, a boundary
    marker) is the first divergence, a RECEIVER; the rank never reports "no divergence"."""
    a = write(tmp_path / "a", {0: [r(op, 1, [t("g")], [], kind=kind), r("aten.exp.default", 1, [t("q")], [t("e")])]})
    b = write(tmp_path / "b", {0: [r(op, 1, [t("g2")], [], kind=kind), r("aten.exp.default", 1, [t("q")], [t("e")])]})
    rep = diff_paths(a, b)
    d = rep.ranks[0].first_divergence
    assert rep.diverged and d.verdict == RECEIVER and d.identity == f"{op}:1" and not d.outputs_differ
    assert d.differing_inputs == [0] and rep.pattern == "only_receivers"


def test_differing_inputs_with_matching_outputs_are_a_receiver(tmp_path):
    """SYNTHETIC: an untraced producer changed x; relu absorbed it (outputs equal), mul did not. The
    first record that saw the difference is relu's: a RECEIVER, not mul's ORIGIN-looking record."""
    def recs(x: str, m: str) -> list[dict]:
        return [r("aten.relu.default", 1, [t(x)], [t("0")]), r("aten.mul.Tensor", 1, [t(x)], [t(m)])]
    rep = diff_paths(write(tmp_path / "a", {0: recs("x", "m")}), write(tmp_path / "b", {0: recs("x2", "m2")}))
    d = rep.ranks[0].first_divergence
    assert d.verdict == RECEIVER and d.identity == "aten.relu.default:1" and "outputs match" in d.how


# --------------------------------------------------------------------------- issue 13, item 3

def test_xor_only_inputs_make_an_unproven_origin_that_says_what_to_enable(tmp_path):
    """SYNTHETIC: inputs equal by the order-independent (XOR) digest only."""
    a = write(tmp_path / "a", {0: [r("aten.cumsum.default", 1, [t("x", ordered=False)], [t("c1")])]})
    b = write(tmp_path / "b", {0: [r("aten.cumsum.default", 1, [t("x", ordered=False)], [t("c2")])]})
    rep = diff_paths(a, b)
    d = rep.ranks[0].first_divergence
    assert d.verdict == ORIGIN and d.evidence == "unproven" and d.input_evidence == "order-independent input digest"
    assert any("unproven: order-independent input digest" in w and "--ordered-digests inputs" in w for w in d.warnings)
    assert "ORIGIN (unproven: order-independent input digest)" in format_report(rep)
    assert rep.next_command.startswith("forensics trace --ordered-digests inputs --steps 0 --ranks 0")
    out = tmp_path / "rep.json"
    main(["diff", str(a), str(b), "--json", str(out)])
    found = site_from_report(out)
    assert not found.ok and "order-independent input digest" in found.reason


def test_order_sensitive_inputs_prove_the_origin(tmp_path):
    a = write(tmp_path / "a", {0: [r("aten.cumsum.default", 1, [t("x")], [t("c1")])]})
    b = write(tmp_path / "b", {0: [r("aten.cumsum.default", 1, [t("x")], [t("c2")])]})
    d = diff_paths(a, b).ranks[0].first_divergence
    assert d.verdict == ORIGIN and d.evidence == "proven" and d.input_evidence == "order-sensitive input digest"


def test_reordered_input_is_a_receiver_not_an_origin(tmp_path):
    """SYNTHETIC: an untraced producer permuted the values: equal XOR, different order-sensitive digest."""
    a = write(tmp_path / "a", {0: [r("aten.cumsum.default", 1, [t("x", ordered="o1")], [t("c1")])]})
    b = write(tmp_path / "b", {0: [r("aten.cumsum.default", 1, [t("x", ordered="o2")], [t("c2")])]})
    d = diff_paths(a, b).ranks[0].first_divergence
    assert d.verdict == RECEIVER and d.inputs_matched is False and d.site is None
    assert "reordered" in d.input_evidence and any("untraced" in w for w in d.warnings)


# --------------------------------------------------------------------------- issue 13, item 4

def test_control_flow_counts_where_and_realignment_then_later_differences(tmp_path):
    """SYNTHETIC: B runs two extra ops after exp:2, then both align again; later a value differs."""
    base = chain(6)
    extra = [r("aten.neg.default", 1, [t("y1")], [t("n")]), r("aten.abs.default", 1, [t("n")], [t("ab")])]
    recs_b = chain(6, bad_at=4)
    recs_b[2:2] = extra
    rep = diff_paths(write(tmp_path / "a", {0: base}), write(tmp_path / "b", {0: recs_b}))
    res = rep.ranks[0]
    d = res.first_divergence
    assert d.verdict == CONTROL_FLOW and d.side == "B" and d.identity == "aten.neg.default:1"
    cf = d.control_flow
    assert (cf["only_in_a"], cf["only_in_b"]) == (0, 2) and cf["b_seq"] == [2, 3]
    assert cf["first_only_in_b"]["identity"] == "aten.neg.default:1"
    assert cf["realigned_at"]["a"]["identity"] == "aten.exp.default:3" and cf["realigned_at"]["b"]["seq"] == 4
    assert res.after_control_flow_total == 2 and res.records_compared_after_control_flow == 4
    later = res.after_control_flow[0]
    assert later.verdict == AFTER_CONTROL_FLOW and later.identity == "aten.exp.default:5" and later.site is None
    assert rep.site is None and rep.pattern == "control_flow"
    text = format_report(rep)
    assert "B has 2 record(s) A lacks" in text and "aligned again at A aten.exp.default:3" in text
    assert "AFTER_CONTROL_FLOW" in text and "not an origin" in text


def test_control_flow_on_both_sides_and_a_second_region(tmp_path):
    """SYNTHETIC: A runs relu where B runs neg (a replaced op), later B runs one more op."""
    recs_a = chain(8)
    recs_a[2:2] = [r("aten.relu.default", 1, [t("y1")], [t("rl")])]
    recs_b = chain(8)
    recs_b[2:2] = [r("aten.neg.default", 1, [t("y1")], [t("ng")])]
    recs_b[7:7] = [r("aten.abs.default", 1, [t("y5")], [t("ab")])]
    res = diff_paths(write(tmp_path / "a", {0: recs_a}), write(tmp_path / "b", {0: recs_b})).ranks[0]
    d = res.first_divergence
    assert d.verdict == CONTROL_FLOW and res.control_flow_regions_total == 2
    first, second = res.control_flow_regions
    assert (first["only_in_a"], first["only_in_b"]) == (1, 1)
    assert first["first_only_in_a"]["identity"] == "aten.relu.default:1"
    assert (second["only_in_a"], second["only_in_b"]) == (0, 1) and second["realigned_at"] is not None
    assert res.after_control_flow_total == 0


def test_identity_pairing_across_a_shift_is_flagged(tmp_path):
    """SYNTHETIC: B runs an extra neg early; the next neg's occurrence shifts, so identity alignment
    pairs different calls of neg. The verdict says the records no longer line up one to one."""
    def ex(occ, i, o):
        return r("aten.exp.default", occ, [t(i)], [t(o)])

    def ng(occ, i, o):
        return r("aten.neg.default", occ, [t(i)], [t(o)])
    recs_a = [ex(1, "x", "y1"), ex(2, "y1", "y2"), ng(1, "y2", "n1"), ex(3, "n1", "y3")]
    recs_b = [ex(1, "x", "y1"), ng(1, "y1", "m1"), ex(2, "y1", "y2"), ng(2, "y2", "n1"), ex(3, "n1", "y3")]
    d = diff_paths(write(tmp_path / "a", {0: recs_a}), write(tmp_path / "b", {0: recs_b})).ranks[0].first_divergence
    assert d.identity == "aten.neg.default:1" and any("do not line up one to one" in w for w in d.warnings)


# --------------------------------------------------------------------------- issue 13, item 5

@pytest.mark.parametrize("field,va,vb", [
    ("program", {"script": "/a/train.py", "sha256": "aa"}, {"script": "/b/train.py", "sha256": "bb"}),
    ("program", {"sha256": "aa", "git": {"commit": "c1", "dirty": False}}, {"sha256": "aa", "git": {"commit": "c2", "dirty": False}}),
    ("packages", {"transformer_engine": "2.1.0"}, {"transformer_engine": "2.2.0"}),
    ("versions", {"torch": "2.13.0+cpu"}, {"torch": "2.12.0+cpu"}),
])
def test_different_programs_are_not_comparable_before_any_verdict(tmp_path, field, va, vb):
    a = write(tmp_path / "a", {0: chain(3)}, header={field: va})
    b = write(tmp_path / "b", {0: chain(3, bad_at=1)}, header={field: vb})
    rep = diff_paths(a, b)
    assert not rep.comparable and rep.not_comparable
    first = format_report(rep).splitlines()[0]
    assert first.startswith("NOT COMPARABLE: ") and field in first
    out = tmp_path / "rep.json"
    main(["diff", str(a), str(b), "--json", str(out)])
    data = json.loads(out.read_text())
    assert data["comparable"] is False
    found = site_from_report(out)
    assert not found.ok and "NOT COMPARABLE" in found.reason


def test_same_program_at_another_path_is_comparable(tmp_path):
    a = write(tmp_path / "a", {0: chain(3)}, header={"program": {"script": "/a/t.py", "sha256": "aa"}})
    b = write(tmp_path / "b", {0: chain(3)}, header={"program": {"script": "/b/t.py", "sha256": "aa"}})
    rep = diff_paths(a, b)
    assert rep.comparable and not format_report(rep).startswith("NOT COMPARABLE")


# --------------------------------------------------------------------------- issue 13, item 6

def test_backward_records_show_phase_node_and_forward_op(tmp_path):
    def recs(s: str) -> list[dict]:
        return [r("aten.mul.Tensor", 1, [t("x"), t("v")], [t("y")], phase="forward"),
                r("aten.sum.dim_IntList", 1, [t("g")], [t(s)], phase="backward",
                  meta={"node": "MulBackward0", "fwd": "aten.mul.Tensor:1"})]
    a, b = write(tmp_path / "a", {0: recs("s1")}), write(tmp_path / "b", {0: recs("s2")})
    rep = diff_paths(a, b)
    d = rep.ranks[0].first_divergence
    assert (d.phase, d.autograd_node, d.forward_op) == ("backward", "MulBackward0", "aten.mul.Tensor:1")
    assert "phase=backward node=MulBackward0 (forward aten.mul.Tensor:1)" in format_report(rep)
    out = tmp_path / "rep.json"
    main(["diff", str(a), str(b), "--json", str(out)])
    fd = json.loads(out.read_text())["ranks"]["0"]["first_divergence"]
    assert (fd["phase"], fd["autograd_node"], fd["forward_op"]) == ("backward", "MulBackward0", "aten.mul.Tensor:1")


# --------------------------------------------------------------------------- issue 13, item 7

@pytest.mark.parametrize("name,site", [("None.pow", None), ("decoder.layer0.output", None),
                                       ("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Scalar")])
def test_diff_site_kernel_site_and_from_agree(tmp_path, capsys, name, site):
    a = write(tmp_path / "a", {0: [r(name, 1, [t("x")], [t("1")])]})
    b = write(tmp_path / "b", {0: [r(name, 1, [t("x")], [t("2")])]})
    rep = diff_paths(a, b)
    assert rep.site == site
    assert (f"site: {site}#1" if site else "site: none named") in format_report(rep)
    out = tmp_path / "rep.json"
    main(["diff", str(a), str(b), "--json", str(out)])
    found = site_from_report(out)
    assert found.ok == (site is not None)
    capsys.readouterr()
    code = main(["kernel", "--site", f"{name}#1", "--dry-run", "--", "true"])
    assert (code == 0) == (site is not None)
    if site is None:
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "not an op of a known namespace" in err[0]
    else:
        assert found.site_arg == f"{site}#1"


# --------------------------------------------------------------------------- issue 15: partial traces

def test_killed_trace_without_footer_is_partial_and_diffed_up_to_where_it_stops(tmp_path, capsys):
    """SYNTHETIC: B was killed after 3 records, in the middle of writing the 4th."""
    full = chain(6)
    a = write(tmp_path / "a", {0: full})
    b = write(tmp_path / "b", {0: full[:3]}, footer=False, cut='{"seq": 3, "id": "aten.exp.def')
    rep = diff_paths(a, b)
    res = rep.ranks[0]
    assert not rep.diverged and res.records_compared == 3
    assert res.partial_b.startswith("truncated at record 3 (no footer): partial")
    text = format_report(rep)
    assert "B is partial: truncated at record 3 (no footer): partial" in text and "CONTROL_FLOW" not in text
    assert "B continues" not in text and "A continues past the end of B" in text
    assert main(["diff", str(a), str(b)]) == 0


def test_killed_trace_still_shows_a_divergence_before_its_end(tmp_path):
    a = write(tmp_path / "a", {0: chain(6)})
    b = write(tmp_path / "b", {0: chain(6, bad_at=1)[:4]}, footer=False)
    rep = diff_paths(a, b)
    assert rep.ranks[0].first_divergence.verdict == ORIGIN and rep.ranks[0].first_divergence.identity == "aten.exp.default:2"


def test_interrupted_trace_says_so_and_its_missing_tail_is_not_control_flow(tmp_path):
    """SYNTHETIC: A was stopped by SIGTERM after 2 records: its footer says so."""
    a = write(tmp_path / "a", {0: chain(6)[:2]}, footer={"stopped": "signal 15 (SIGTERM)", "records": 2})
    b = write(tmp_path / "b", {0: chain(6)})
    rep = diff_paths(a, b)
    res = rep.ranks[0]
    assert not rep.diverged and res.partial_a == "interrupted (signal 15 (SIGTERM)) at record 2: partial"
    assert any("B continues past the end of A" in w for w in res.warnings)
    both_short = diff_paths(write(tmp_path / "c", {0: chain(6)}), write(tmp_path / "d", {0: chain(6)[:2]}))
    assert both_short.ranks[0].first_divergence.verdict == CONTROL_FLOW  # complete traces: the tail is real


def test_empty_partial_trace_is_compared_as_nothing(tmp_path):
    """SYNTHETIC: killed before the first batch reached the file: a header only."""
    a = write(tmp_path / "a", {0: chain(3)})
    b = write(tmp_path / "b", {0: []}, footer=False)
    rep = diff_paths(a, b)
    assert not rep.diverged and rep.ranks[0].records_compared == 0 and rep.ranks[0].partial_b


# --------------------------------------------------------------------------- issue 15: wrong types

@pytest.mark.parametrize("mutate,needle", [
    (lambda x: x["out"][0].__setitem__("n", 1.5), "numel 'n' must be a non-negative integer, got 1.5"),
    (lambda x: x["out"][0].__setitem__("n", 99), "numel 99 does not match shape"),
    (lambda x: x["out"][0].__setitem__("h", 12345), "digest 'h' must be a string"),
    (lambda x: x["out"][0].__setitem__("s", [4.0]), "shape 's' must be a list of non-negative integers"),
    (lambda x: x["in"][0].__setitem__("o", ["x"]), "order-sensitive digest 'o' must be a string"),
    (lambda x: x["out"][0].__setitem__("ev", "guess"), "evidence 'ev' must be one of"),
    (lambda x: x.__setitem__("step", "1"), "record step must be a non-negative integer"),
    (lambda x: x.__setitem__("id", 7), "record id must be a non-empty string"),
    (lambda x: x.__setitem__("meta", [1]), "record meta must be an object"),
])
def test_wrong_typed_value_is_bad_input_never_another_verdict(tmp_path, capsys, mutate, needle):
    recs_b = chain(6, bad_at=4)
    mutate(recs_b[1])  # an early record: a changed verdict would name another site
    a = write(tmp_path / "a", {0: chain(6, bad_at=4)})
    b = write(tmp_path / "b", {0: recs_b})
    with pytest.raises(BadInput) as e:
        diff_paths(a, b)
    assert needle in str(e.value) and str(e.value).startswith(f"{b / 'rank0' / 'trace.jsonl'}:3: ")
    assert main(["diff", str(a), str(b)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ":3: " in err[0]


def test_same_wrong_value_on_both_sides_is_bad_input_too(tmp_path):
    recs = chain(3)
    recs[0]["out"][0]["n"] = 1.5
    with pytest.raises(BadInput, match="numel"):
        diff_paths(write(tmp_path / "a", {0: recs}), write(tmp_path / "b", {0: recs}))


# --------------------------------------------------------------------------- issue 15: bounded memory

def _stream(n: int, tag: str, counter: dict, bad_at: int | None = None):
    for i in range(n):
        counter[tag] = i + 1
        out = TensorDigest(shape=(4,), dtype="float32", numel=4, digest=f"y{i}{'B' if bad_at == i else ''}",
                           ordered=f"o{i}")
        yield TraceRecord(rank=0, seq=i, identity=f"aten.exp.default:{i + 1}", name="aten.exp.default", step=0,
                          inputs=[TensorDigest(shape=(4,), dtype="float32", numel=4, digest=f"x{i}", ordered=f"p{i}")],
                          outputs=[out])


def test_one_step_trace_is_walked_within_the_window(tmp_path):
    """A program without optimizer steps is one step; the walker holds at most a window of B
    ahead of A, whatever the trace length (memory does not grow with the run)."""
    seen: dict = {}
    lead = []

    def watched(n: int):
        for rec in _stream(n, "b", seen):
            lead.append(seen["b"] - seen.get("a", 0))
            yield rec

    n, window = 20_000, 512
    rep = diff_streams({0: _stream(n, "a", seen, bad_at=n - 1)}, {0: watched(n)}, window=window)
    d = rep.ranks[0].first_divergence
    assert d is not None and d.identity == f"aten.exp.default:{n}" and rep.ranks[0].records_compared == n
    assert max(lead) <= window + 1


def test_partial_stream_end_from_any_reader(tmp_path):
    """A reader that knows a stream was cut says so with RankStream/StreamEnd; the differ keeps
    the missing tail out of the verdict."""
    seen: dict = {}
    a = RankStream(_stream(5, "a", seen), StreamEnd(True, "cut by the test", 5, "truncated"))
    rep = diff_streams({0: a}, {0: _stream(9, "b", seen)})
    assert not rep.diverged and rep.ranks[0].partial_a == "cut by the test"


def test_uninitialised_buffer_reordered_but_xor_equal_is_still_an_artifact(tmp_path):
    """SYNTHETIC, after a real case (tests/test_trace_kill.py): recycled memory gave torch.empty the
    same values in another order; its output XOR matched, its consumer's ordered input digest did
    not. Bits of an uninitialised buffer are garbage either way: never a divergence."""
    def recs(o: str) -> list[dict]:
        return [r("aten.empty.memory_format", 1, [], [t("e", ordered=False)]),
                r("aten.uniform_.default", 1, [t("e", ordered=o)], [t("u")])]
    rep = diff_paths(write(tmp_path / "a", {0: recs("o1")}), write(tmp_path / "b", {0: recs("o2")}))
    assert not rep.diverged
