"""Order-sensitive digests taken in a tensor's memory order (the ``ol`` key, docs/trace-format.md).

A dense CPU tensor that is not row-major (a ``.t()``) gets its ``o`` digest over its bytes in
memory order, and ``ol`` says the dim order. Two ``o`` digests prove equality (or difference) only
when taken in the same layout; otherwise the pair is compared by its other digests.

Every trace here is SYNTHETIC: hand-written in the native format by this file to exercise one rule.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import forensics.tracediff.columnar as columnar
import forensics.tracediff.diff as diff_mod
from forensics.cli import main
from forensics.core.errors import BadInput
from forensics.tracediff import walk
from forensics.tracediff.compare import DIFFER, EQUAL, LAYOUTS_DIFFER, SCREEN, UNOBSERVED, compare_tensor, fast_equal
from forensics.tracediff.diff import ORIGIN, RECEIVER, diff_paths
from forensics.tracediff.traces import TensorDigest
from forensics.tracediff.traces.native import read

NEW_ALGO = "xxh3_64(bytes in memory order; 'ol' gives the dim order when not row-major)"
OLD_ALGO = "xxh3_64(row-major bytes)"


def t(h: str | None, o: str | None = None, ol: list | None = None, shape=(512, 256)) -> dict:
    """A SYNTHETIC tensor entry: XOR digest ``h``, order-sensitive ``o`` taken in layout ``ol``."""
    e: dict = {"s": list(shape), "t": "float32", "n": math.prod(shape)}
    if h is not None:
        e["h"] = h
    if o is not None:
        e["o"] = o
    if ol is not None:
        e["ol"] = ol
    return e


def rec(op: str, occ: int, ins: list, outs: list) -> dict:
    return {"id": f"{op}:{occ}", "op": op, "kind": "op", "step": 0, "in": ins, "out": outs}


def write(d: Path, recs: list[dict], algo: str = NEW_ALGO, raw: dict[int, str] | None = None) -> Path:
    """A SYNTHETIC one-rank native trace; ``raw``: record index -> the line written instead."""
    f = d / "rank0" / "trace.jsonl"
    f.parent.mkdir(parents=True, exist_ok=True)
    head = {"type": "header", "schema": "forensics.optrace", "version": 1, "rank": 0, "world_size": 1,
            "argv": ["python", "train.py"], "env": {}, "steps": "all",
            "ordered": {"mode": "auto", "cpu": algo, "device": None, "outputs": False}}
    lines = [json.dumps(head)]
    for i, x in enumerate(recs):
        lines.append((raw or {}).get(i) or json.dumps({"seq": i, **x}, separators=(",", ":")))
    lines.append(json.dumps({"type": "footer", "records": len(recs), "dropped": 0}))
    f.write_text("\n".join(lines) + "\n")
    return d


def pair(tmp_path: Path, in_a: dict, in_b: dict, out_a: str = "y", out_b: str = "yB", **kw):
    """Two runs of: a transpose-consuming mm whose output differs (so its input test is applied),
    after a matching op. Returns the first divergence of rank 0."""
    def run(x: dict, y: str) -> list[dict]:
        return [rec("aten.relu.default", 1, [t("r", "or")], [t("r1")]),
                rec("aten.mm.default", 1, [x], [t(y)])]
    a = write(tmp_path / "a", run(in_a, out_a), **kw)
    b = write(tmp_path / "b", run(in_b, out_b), **kw)
    return diff_paths(a, b)


# --------------------------------------------------------------------------- reading "ol"

def test_reader_reads_ol_as_a_tuple_and_an_identity_order_as_row_major(tmp_path):
    d = write(tmp_path / "a", [rec("aten.mm.default", 1, [t("x", "o1", [1, 0]), t("x", "o1", [0, 1]), t("x", "o1")],
                                   [t("y")])])
    ins = list(read(d).records(0)[0].inputs)
    assert ins[0].layout == (1, 0) and ins[0].ordered == "o1"
    assert ins[1].layout is None and ins[2].layout is None  # [0, 1] is row-major: the same as no "ol"
    assert ins[0].key() != ins[2].key() and ins[1].key() == ins[2].key()


# --------------------------------------------------------------------------- one tensor, both runs

def test_compare_tensor_rules():
    """The rules on digests alone (no files)."""
    def d(h, o, layout):
        return TensorDigest(shape=(512, 256), dtype="float32", numel=512 * 256, digest=h, ordered=o, layout=layout)
    assert compare_tensor(d("h", "o", (1, 0)), d("h", "o", (1, 0))) == (EQUAL, "order-sensitive digest")
    # different layouts: equal "o" proves nothing, different "o" proves nothing
    for oa, ob in (("o", "o"), ("o", "o2")):
        s, how = compare_tensor(d("h", oa, (1, 0)), d("h", ob, None))
        assert s == SCREEN and how == f"order-independent digest ({LAYOUTS_DIFFER})"
    assert compare_tensor(d("h", "o", (1, 0)), d("h2", "o", None)) == (DIFFER, "digest")
    assert compare_tensor(d("h", "o", (1, 0)), d("h", "o2", (1, 0)))[0] == DIFFER
    s, how = compare_tensor(d(None, "o", (1, 0)), d(None, "o", None))
    assert s == UNOBSERVED and LAYOUTS_DIFFER in how
    assert fast_equal([d("h", "o", (1, 0))], [d("h", "o", (1, 0))])
    assert not fast_equal([d("h", "o", (1, 0))], [d("h", "o", None)])


def test_a_same_o_same_ol_is_equal_and_proves_the_origin(tmp_path):
    """(a) same values, same "o", same "ol": equality proven, the mm is a proven ORIGIN."""
    x = t("x", "ox", [1, 0])
    d = pair(tmp_path, x, dict(x)).ranks[0].first_divergence
    assert d.verdict == ORIGIN and d.evidence == "proven" and d.input_evidence == "order-sensitive input digest"


def test_b_different_ol_equal_h_is_a_screen_not_a_difference(tmp_path):
    """(b) one run's input is transposed in memory, the other's is not: their "o" differ (other
    byte orders) but that proves nothing; equal "h" makes a screen, so an unproven ORIGIN, never
    a RECEIVER from the order-sensitive digest."""
    rep = pair(tmp_path, t("x", "o-memory-order", [1, 0]), t("x", "o-row-major"))
    d = rep.ranks[0].first_divergence
    assert d.verdict == ORIGIN and d.inputs_matched and d.evidence == "unproven"
    assert d.input_evidence == f"order-independent input digest ({LAYOUTS_DIFFER})"
    assert any("different memory layouts" in w for w in d.warnings)
    # no difference at all when only the layouts differ
    rep = pair(tmp_path / "same", t("x", "o1", [1, 0]), t("x", "o2"), out_b="y")
    assert not rep.diverged


def test_b_equal_o_in_different_layouts_is_not_equality(tmp_path):
    """Equal "o" strings taken in different layouts are not proof: still a screen."""
    d = pair(tmp_path, t("x", "o", [1, 0]), t("x", "o")).ranks[0].first_divergence
    assert d.verdict == ORIGIN and d.evidence == "unproven" and LAYOUTS_DIFFER in d.input_evidence


def test_c_different_o_same_ol_differs(tmp_path):
    """(c) same layout, different "o" (equal "h": the values were reordered): a proven difference."""
    d = pair(tmp_path, t("x", "o1", [1, 0]), t("x", "o2", [1, 0])).ranks[0].first_divergence
    assert d.verdict == RECEIVER and d.differing_inputs == [0]
    assert d.input_evidence.startswith("input 0 differs by order-sensitive digest")


def test_d_different_ol_different_h_differs_by_h(tmp_path):
    """(d) different layouts and different "h": a difference, proven by the XOR digest."""
    d = pair(tmp_path, t("x", "o1", [1, 0]), t("x2", "o2")).ranks[0].first_divergence
    assert d.verdict == RECEIVER and d.input_evidence == "input 0 differs by digest"


def test_different_ol_without_h_is_inputs_unknown(tmp_path):
    """Only "o" recorded, in different layouts: nothing comparable, never an origin."""
    d = pair(tmp_path, t(None, "o1", [1, 0]), t(None, "o1")).ranks[0].first_divergence
    assert d.verdict == "INPUTS_UNKNOWN" and d.evidence == "none" and LAYOUTS_DIFFER in d.input_evidence


def test_outputs_in_different_layouts_are_not_a_divergence(tmp_path):
    """An output recorded with "o" (mode all) in different layouts and equal "h": no false origin."""
    def run(out: dict) -> list[dict]:
        return [rec("aten.t.default", 1, [t("x", "ox", shape=(256, 512))], [out])]
    a = write(tmp_path / "a", run(t("x", "o1", [1, 0])))
    b = write(tmp_path / "b", run(t("x", "o2")))
    assert not diff_paths(a, b).diverged
    b = write(tmp_path / "b2", run(t("x", "o2", [1, 0])))
    assert diff_paths(a, b).ranks[0].first_divergence.verdict == ORIGIN  # same layout: "o" decides


def test_report_json_names_the_layout(tmp_path):
    """A differing output's entry in the report carries the layout its "o" was taken in."""
    def run(out: dict) -> list[dict]:
        return [rec("aten.t.default", 1, [t("x", "ox", shape=(256, 512))], [out])]
    rep = diff_paths(write(tmp_path / "a", run(t("x", "o1", [1, 0]))), write(tmp_path / "b", run(t("x", "o2", [1, 0]))))
    d = rep.ranks[0].first_divergence
    assert d.outputs_a[0]["layout"] == [1, 0] and d.outputs_b[0]["layout"] == [1, 0]
    rep = diff_paths(write(tmp_path / "c", run(t("x", "o1"))), write(tmp_path / "d", run(t("x", "o2"))))
    assert "layout" not in rep.ranks[0].first_divergence.outputs_a[0]  # row-major: no key


def test_different_algorithms_are_not_compared_with_a_warning(tmp_path):
    """A run traced before "ol" existed (row-major algorithm name) and one after: their "o" are not
    compared at all (diff.py's algorithm check), with a warning naming both algorithms."""
    def run(x: dict) -> list[dict]:
        return [rec("aten.mm.default", 1, [x], [t("y")])]
    a = write(tmp_path / "a", run(t("x", "o1")), algo=OLD_ALGO)
    b = write(tmp_path / "b", run(t("x", "o2")), algo=NEW_ALGO)
    rep = diff_paths(a, b)
    assert not rep.diverged  # "o" differ but are not compared; "h" equal
    assert any(OLD_ALGO in w and NEW_ALGO in w and "not compared" in w for w in rep.warnings)
    b = write(tmp_path / "b2", [rec("aten.mm.default", 1, [t("x", "o1")], [t("y2")])], algo=NEW_ALGO)
    d = diff_paths(a, b).ranks[0].first_divergence
    assert d.verdict == ORIGIN and d.evidence == "unproven"  # equal "o" are not proof either


# --------------------------------------------------------------------------- (e) malformed "ol"

@pytest.mark.parametrize("ol,needle", [
    ("10", "memory layout 'ol' must be a list of non-negative integers, got '10'"),
    ([1, -1], "memory layout 'ol' must be a list of non-negative integers, got [1, -1]"),
    ([1, "0"], "memory layout 'ol' must be a list of non-negative integers, got [1, '0']"),
    ([1.0, 0], "memory layout 'ol' must be a list of non-negative integers"),
    ([True, 0], "memory layout 'ol' must be a list of non-negative integers"),
    ([None, 0], "memory layout 'ol' must be a list of non-negative integers"),
    ({"0": 1}, "memory layout 'ol' must be a list of non-negative integers"),
    ([0, 0], "memory layout 'ol' [0, 0] is not a permutation of 0..1"),
    ([2, 0], "memory layout 'ol' [2, 0] is not a permutation of 0..1"),
    ([2, 1, 0], "memory layout 'ol' [2, 1, 0] has 3 dims, shape [512, 256] has 2"),
])
@pytest.mark.parametrize("sides", ["B", "both"])
def test_e_malformed_ol_is_bad_input_with_file_and_line(tmp_path, capsys, ol, needle, sides):
    def run(x: dict) -> list[dict]:
        return [rec("aten.relu.default", 1, [t("r", "or")], [t("r1")]),
                rec("aten.mm.default", 1, [x], [t("y")]), rec("aten.relu.default", 2, [t("y")], [t("z")])]
    a = write(tmp_path / "a", run(t("x", "o", [1, 0] if sides == "B" else ol)))
    b = write(tmp_path / "b", run(t("x", "o", ol)))
    bad = (a if sides == "both" else b) / "rank0" / "trace.jsonl"
    with pytest.raises(BadInput) as e:
        diff_paths(a, b)
    assert str(e.value) == f"{bad}:3: tensor entry: {needle}" or (
        needle in str(e.value) and str(e.value).startswith(f"{bad}:3: "))
    capsys.readouterr()
    assert main(["diff", str(a), str(b)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{bad}:3: " in err[0] and "memory layout 'ol'" in err[0]


# --------------------------------------------------------------------------- (f) columnar == walk

def _big(n: int = 400, variant: str = "") -> list[dict]:
    """A SYNTHETIC trace with "ol" entries throughout (every third input transposed in memory)."""
    out = []
    for i in range(n):
        op = "aten.mm.default" if i % 2 else "aten.add.Tensor"
        x = t(format(i * 7919, "016x"), format(i * 31, "016x"), [1, 0] if i % 3 == 0 else None, shape=(8, 4))
        out.append({**rec(op, i // 2 + 1, [x, {"s": None, "t": "args", "n": 1, "h": "11"}],
                          [t(format(i * 104729 + 1, "016x"), shape=(8, 8))])})
    return out


def both(a: Path, b: Path) -> list[str]:
    """The report (or bad-input line) without and with the columnar prefix."""
    res = []
    for col in (False, True):
        orig = walk.walk_rank
        diff_mod.walk_rank = lambda *x, _c=col, **k: orig(*x, **{**k, "columnar": _c})
        try:
            res.append(json.dumps(diff_mod.diff_paths(a, b).to_json(), sort_keys=True, default=str))
        except BadInput as e:
            res.append(f"bad input: {e}")
        finally:
            diff_mod.walk_rank = orig
    return res


@pytest.fixture
def tiny_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(columnar, "BLOCK_BYTES", 2048)
    monkeypatch.setattr(columnar, "ROUND_ROWS", 37)
    monkeypatch.setattr(columnar, "MIN_BYTES", 0)


def _set_ol(recs: list[dict], i: int, ol) -> None:  # noqa: ANN001
    recs[i]["in"][0]["ol"] = ol


LAYOUT_CASES = {
    "identical": lambda a, b: None,
    "o differs, same ol (late)": lambda a, b: b[300]["in"][0].update(o="0"),
    "ol differs, h equal": lambda a, b: (_set_ol(b, 301, [1, 0]), b[301]["in"][0].update(o="1")),
    "ol differs, h differs": lambda a, b: (_set_ol(b, 306, None), b[306]["in"][0].update(h="2")),
    "ol differs, output differs": lambda a, b: (_set_ol(b, 304, [1, 0]), b[304]["out"][0].update(h="3")),
    "identity ol on one side": lambda a, b: _set_ol(b, 250, [0, 1]),
}
LAYOUT_BAD = {
    "negative in both": lambda a, b: [_set_ol(x, 200, [1, -1]) for x in (a, b)],
    "null inside in both": lambda a, b: [_set_ol(x, 200, [None, 0]) for x in (a, b)],
    "repeat in both": lambda a, b: [_set_ol(x, 200, [0, 0]) for x in (a, b)],
    "out of range in both": lambda a, b: [_set_ol(x, 200, [2, 0]) for x in (a, b)],
    "too many dims in both": lambda a, b: [_set_ol(x, 200, [2, 1, 0]) for x in (a, b)],
    "string in both": lambda a, b: [_set_ol(x, 200, "10") for x in (a, b)],
    "float in both": lambda a, b: [_set_ol(x, 200, [1.0, 0]) for x in (a, b)],
    "bool in both": lambda a, b: [_set_ol(x, 200, [True, 0]) for x in (a, b)],
    "negative in B": lambda a, b: _set_ol(b, 200, [1, -1]),
}


def _layout_case(tmp_path: Path, name: str, mutate) -> list[str]:  # noqa: ANN001
    a_recs = _big()
    b_recs = json.loads(json.dumps(a_recs))
    mutate(a_recs, b_recs)
    for x in (a_recs, b_recs):
        for r in x:
            if r["in"][0].get("ol", 0) is None:
                del r["in"][0]["ol"]
    d = tmp_path / name.replace(" ", "_").replace(",", "").replace("(", "").replace(")", "")
    return both(write(d / "a", a_recs), write(d / "b", b_recs))


@pytest.mark.parametrize("name", sorted(LAYOUT_CASES))
def test_f_columnar_prefix_and_walk_agree_with_ol(tmp_path, tiny_blocks, monkeypatch, name):
    used: list[int] = []
    orig = walk.RankWalker.fast_forward
    monkeypatch.setattr(walk.RankWalker, "fast_forward", lambda self: used.append(orig(self)) or used[-1])
    plain, fast = _layout_case(tmp_path, name, LAYOUT_CASES[name])
    assert fast == plain
    assert used and used[0] > 100  # the columnar prefix compared records holding "ol" entries
    if name == "identical" or name == "identity ol on one side":
        assert '"diverged": false' in plain
    if name == "ol differs, h equal":
        assert '"diverged": false' in plain  # a screen, not a difference
    if name == "ol differs, output differs":
        assert '"verdict": "ORIGIN"' in plain and LAYOUTS_DIFFER in plain


@pytest.mark.parametrize("name", sorted(LAYOUT_BAD))
def test_f_columnar_prefix_and_walk_agree_on_malformed_ol(tmp_path, tiny_blocks, name):
    plain, fast = _layout_case(tmp_path, name, LAYOUT_BAD[name])
    assert fast == plain and plain.startswith("bad input: ") and ":202: tensor entry: memory layout 'ol'" in plain


def test_f_columnar_checks_ol_itself(tmp_path):
    """Not vacuous: the columnar prefix stops before an invalid "ol" present byte for byte in both
    files (the schema accepts a negative or a repeat; its own checks must refuse them)."""
    for ol in ([1, -1], [0, 0], [None, 0], [2, 1, 0]):
        recs = _big()
        _set_ol(recs, 200, ol)
        d = tmp_path / str(len(list(tmp_path.iterdir())))
        a, b = write(d / "a", recs), write(d / "b", recs)
        pre = columnar.compare_prefix(a / "rank0" / "trace.jsonl", b / "rank0" / "trace.jsonl")
        assert pre.pairs == 200, ol
    recs = _big()
    d = tmp_path / "valid"
    a, b = write(d / "a", recs), write(d / "b", recs)
    assert columnar.compare_prefix(a / "rank0" / "trace.jsonl", b / "rank0" / "trace.jsonl").pairs == 400


def test_o_only_entries_take_the_fast_path_only_where_o_is_compared(tmp_path):
    """CPU entries carry "o" alone (no "h"): equal ones are equal as far as the digests go when
    order-sensitive digests are compared, and not when they are not (two algorithms): then a match
    rests on nothing and is counted as unproven."""
    def d(h, o, layout):
        return TensorDigest(shape=(512, 256), dtype="float32", numel=512 * 256, digest=h, ordered=o, layout=layout)

    assert fast_equal([d(None, "o", (1, 0))], [d(None, "o", (1, 0))])
    assert not fast_equal([d(None, "o", (1, 0))], [d(None, "o", (1, 0))], use_ordered=False)
    assert not fast_equal([d(None, "o", None)], [d(None, "o2", None)])
    same = [rec("aten.mm.default", 1, [t(None, "ox"), t(None, "ow", [1, 0])], [t(None, "oy")]),
            rec("aten.relu.default", 1, [t(None, "oy")], [t(None, "oz")])]
    a, b, c = write(tmp_path / "a", same), write(tmp_path / "b", same), write(tmp_path / "c", same, algo=OLD_ALGO)
    rep = diff_paths(a, b)
    assert not rep.diverged and rep.ranks[0].records_compared == 2 and rep.ranks[0].unproven_matches == 0
    rep = diff_paths(a, c)  # o of two algorithms: not compared, the matches rest on nothing recorded
    assert not rep.diverged and rep.ranks[0].unproven_matches == 2
    assert any("different algorithms" in w for w in rep.warnings)
