"""The sweep's words and sizes without a run: the verdict names only tried sizes, --rows auto's sizes,
the row rules checked by name before anything runs (fast lane; the real runs are in test_batch_invariance)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ranges_only_join_consecutive_sizes():
    from forensics.sweep.table import ranges

    assert ranges([1, 2, 3, 5, 6, 7, 9]) == "1-3, 5-7, 9"
    assert ranges([1, 2, 3, 8, 17, 64]) == "1-3, 8, 17, 64"
    assert ranges([8, 9]) == "8, 9" and ranges([]) == ""


def test_boundaries_are_between_neighbours_and_say_untried_gaps():
    from forensics.sweep.table import boundaries

    assert boundaries([(8, True), (9, False)]) == ["between 8 and 9 (8 equal, 9 differs)"]
    assert boundaries([(3, False), (8, True)]) == ["between 3 and 8 (3 differs, 8 equal; sizes 4-7 not tried)"]
    assert boundaries([(3, False), (5, True)]) == ["between 3 and 5 (3 differs, 5 equal; size 4 not tried)"]
    assert boundaries([(1, False), (2, False)]) == []


def _table(equal_at: dict[int, bool], full: int):
    from forensics.sweep.rows import RowPlan
    from forensics.sweep.table import Row, _verdict

    rows = [Row(m, "base", "impl (NAMED)", {}, eq, "EQUAL" if eq else "DIFFER") for m, eq in sorted(equal_at.items())]
    rows.append(Row(full, "base", "impl (NAMED)", {}, True, "EQUAL"))
    plan = RowPlan("aten.mm.default", full, [(0, 0)], "rows")
    return _verdict(plan, "aten.mm.default#1", rows, rows[-1], "as run")


def test_verdict_names_only_the_tried_sizes():
    """The issue's case: 1,2,3,8,17,64 tried; 1-3 differ. Never 'every size from 8 on is equal'."""
    t = _table({1: False, 2: False, 3: False, 8: True, 17: True, 64: True}, 256)
    assert t.verdict == "VARIANT" and t.first_varying == 1
    line = t.verdict_line
    assert "of the 6 size(s) tried (1-3, 8, 17, 64; full call 256 rows)" in line
    assert "differ from the full call's at 1-3 and are equal at 8, 17, 64" in line
    assert "between 3 and 8 (3 differs, 8 equal; sizes 4-7 not tried)" in line
    assert "every size" not in line and "sizes not tried were not checked" in line
    # a non-monotonic pattern, every size tried: each flip named between neighbours
    pattern = {m: m in (4, 8) or m >= 12 for m in range(1, 17)}
    line = _table(pattern, 32).verdict_line
    assert "differ from the full call's at 1-3, 5-7, 9-11 and are equal at 4, 8, 12-16" in line
    for a, b in ((3, 4), (4, 5), (7, 8), (8, 9), (11, 12)):
        assert f"between {a} and {b} (" in line, (a, b, line)
    assert "between 16 and 32" not in line
    t = _table({1: True, 2: True}, 8)
    assert t.verdict == "BATCH-INVARIANT" and "at the 2 size(s) tried (1, 2; full call 8 rows)" in t.verdict_line


def test_auto_rows_dense_then_spaced():
    from forensics.sweep.run import AUTO_DENSE, auto_rows

    assert auto_rows(12) == list(range(1, 13))
    rows = auto_rows(256)
    assert rows[:AUTO_DENSE] == list(range(1, AUTO_DENSE + 1))
    assert rows[AUTO_DENSE:] == [36, 40, 44, 48, 52, 56, 60, 64, 72, 80, 88, 96, 104, 112, 120, 128,
                                 144, 160, 176, 192, 208, 224, 240, 256]
    assert auto_rows(100)[-1] == 100 and 96 in auto_rows(100)


def test_row_rules_by_name_and_by_call():
    torch = pytest.importorskip("torch")
    from forensics.sweep.rows import NotBatchable, plan_rows, refuse_by_name

    assert refuse_by_name("aten.tanh.default") is None and refuse_by_name("aten.embedding.default#2") is None
    assert refuse_by_name("aten.add.Tensor") is None and refuse_by_name("gemm:TN:acc0:grad0") is None
    assert "no row rule" in refuse_by_name("aten.cumsum.default")
    assert "reduces over its rows" in refuse_by_name("aten.sum.dim_IntList")
    assert "in-place or out=" in refuse_by_name("aten.index_put_.default")
    assert "weight gradient" in refuse_by_name("gemm:NT:acc0:grad1#1")
    x, b = torch.randn(6, 4), torch.randn(4)
    p = plan_rows("aten.add.Tensor", (x, b), {})
    assert p.full_rows == 6 and p.sliced == [(0, 0)] and p.kept_whole  # the broadcast bias is kept whole
    p = plan_rows("aten.mul.Tensor", (x, torch.randn(6, 4)), {})
    assert p.sliced == [(0, 0), (1, 0)]
    p = plan_rows("aten.mul.Tensor", (torch.randn(1, 4), x), {})
    assert p.full_rows == 6 and p.sliced == [(1, 0)]
    p = plan_rows("aten.embedding.default", (torch.randn(10, 3), torch.tensor([[1, 2], [3, 4], [5, 6]])), {})
    assert p.full_rows == 3 and p.sliced == [(1, 0)]
    with pytest.raises(NotBatchable, match="0-d"):
        plan_rows("aten.tanh.default", (torch.tensor(1.0),), {})


def test_op_with_no_rule_refused_before_any_run(tmp_path):
    """A refusal by name costs no keep run: the command would exit 9, and nothing is written."""
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "kernel", "--device", "cpu", "--site",
                           "aten.cumsum.default", "--rows", "auto", "--out", str(tmp_path / "x"), "--", sys.executable,
                           "-c", "raise SystemExit(9)"], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--rows refused: aten.cumsum.default: aten.cumsum.default has no row rule" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()


def test_words_keep_determinism_apart_from_batch_invariance():
    from forensics.core import words

    assert {words.DETERMINISTIC, words.NONDETERMINISTIC, words.PROCESS_DEPENDENT}.isdisjoint(
        {words.BATCH_INVARIANT, words.BATCH_VARIANT})
    from forensics.sweep.run import parse_repeat

    assert parse_repeat(None) == 1 and parse_repeat(5) == 5
    with pytest.raises(ValueError, match="--repeat: 0"):
        parse_repeat(0)


def test_repeat_verdicts_from_synthetic_results():
    """SYNTHETIC replay results (the JSON forensics.sweep.replay writes), no instruments (kres None): the
    three determinism words and what each line may claim."""
    from forensics.sweep.run import whole_plan
    from forensics.sweep.table import repeat_verdict

    plan = whole_plan("aten.index_put_.default")

    def result(differing, ohash=7):
        return {"sizes": [{"rows": 0, "occurrences": [1, 2, 3, 4], "repeats": 4, "repeats_equal": not differing,
                           "differing_repeats": differing, "equal": True,
                           "outputs": [{"output": 0, "equal": True, "ohash_sliced": ohash, "ohash_full_rows": ohash}]}]}

    program = {"label": "aten.index_put_.default#1", "outputs": [{"ohash": 7}]}
    r = repeat_verdict(plan, "base", result([2, 4]), None, program)
    assert r.verdict == "NONDETERMINISTIC" and "repeats 2, 4 of 4 differ from the first" in r.verdict_line
    # nothing NAMED: the line must not claim a fixed choice
    assert "at a fixed choice" not in r.verdict_line and "show no choice" in r.verdict_line
    r = repeat_verdict(plan, "base", result([]), None, program)
    assert r.verdict == "DETERMINISTIC" and "equal the program's own call's" in r.verdict_line
    r = repeat_verdict(plan, "base", result([], ohash=8), None, program)
    assert r.verdict == "PROCESS-DEPENDENT" and "not a race" in r.verdict_line
    r = repeat_verdict(plan, "base", result([]), None, None)
    assert r.verdict == "DETERMINISTIC" and "compared within this process only" in r.verdict_line
    assert repeat_verdict(plan, "base", None, None, program).verdict == "NOT CHECKED"


def test_plan_from_the_kept_description_equals_the_plan_from_the_tensors(tmp_path):
    """The sweep plans from site-inputs.json (shapes, strides, other arguments) without torch in its own
    process: the same plan as from the kept tensors, for each kind of row rule."""
    import json

    torch = pytest.importorskip("torch")
    from probes.keep_inputs import INPUTS_JSON, InputKeeper
    from forensics.sweep.rows import from_skeleton, plan_rows

    w = torch.randn(5, 4)
    calls = [("aten.addmm.default", torch.ops.aten.addmm.default, (torch.randn(5), torch.randn(6, 4), w.t()), {}),
             ("aten.mm.default", torch.ops.aten.mm.default, (torch.randn(6, 5).t(), torch.randn(6, 4)), {}),
             ("aten._softmax.default", torch.ops.aten._softmax.default, (torch.randn(3, 4), 1, False), {}),
             ("aten.native_layer_norm.default", torch.ops.aten.native_layer_norm.default,
              (torch.randn(7, 4), [4], None, None, 1e-5), {}),
             ("aten.add.Tensor", torch.ops.aten.add.Tensor, (torch.randn(6, 4), torch.randn(4)), {"alpha": 2}),
             ("aten.embedding.default", torch.ops.aten.embedding.default,
              (torch.randn(10, 3), torch.tensor([[1, 2], [3, 4]])), {})]
    for i, (op, func, args, kwargs) in enumerate(calls):
        k = InputKeeper(tmp_path / str(i), 1 << 20)
        k.keep(f"{op}#1", func, args, kwargs, {"grad": 1} if "mm.default" == op[5:] else {})
        info = json.loads((tmp_path / str(i) / INPUTS_JSON).read_text())
        meta = dict(info["meta"])
        try:
            want = plan_rows(op, args, kwargs, meta, info["label"]).to_json()
        except ValueError as e:
            want = str(e)
        try:
            got = plan_rows(info["op"], *from_skeleton(info["skeleton"], info["tensors"]), meta, info["label"]).to_json()
        except ValueError as e:
            got = str(e)
        assert got == want, (op, got, want)


def test_batch_verdict_not_checked_when_the_full_call_is_not_deterministic():
    """SYNTHETIC replay result: the full size's two calls differ in one process, so a differing shared row says
    nothing about the batch: NOT CHECKED, pointing at the repeat verdict (never VARIANT)."""
    from forensics.sweep.rows import RowPlan
    from forensics.sweep.table import build

    plan = RowPlan("aten.mm.default", 8, [(0, 0)], "rows")
    out = [{"output": 0, "shape": [1, 4], "equal": False, "differing_elements": 1, "max_abs_diff": 1e-7}]
    result = {"sizes": [
        {"rows": 1, "occurrences": [1], "repeats": 1, "repeats_equal": True, "differing_repeats": [], "equal": False,
         "outputs": out},
        {"rows": 8, "occurrences": [2, 3], "repeats": 2, "repeats_equal": False, "differing_repeats": [2],
         "equal": True, "outputs": [{"output": 0, "equal": True, "ohash_sliced": 1, "ohash_full_rows": 1}]}]}
    t = build(plan, "base", result, None, sizes=[1, 8])
    assert t.verdict == "NOT CHECKED" and "not deterministic at the full size" in t.verdict_line
