"""A whole optimizer step (issue 41): ``forensics trace --optimizer whole``, the default at the light
evidence levels and at ``--at modules``.

* one ``optimizer.step`` record holds the parameters, gradients and optimizer state before the step
  and the parameters and state after it; the step's own ops are not traced, and the ops after it are;
* ``full`` keeps every op of the step (``--optimizer ops``), and either level can ask for the other;
* a step that raises before its post-hook leaves the mode off only until the next ``backward()``;
* another dispatch mode entered inside the tracer is left in place (ops pass through);
* a difference born inside the step is a candidate ORIGIN at ``optimizer.step``, and ``next:`` is
  the full rerun of its step and rank; ``diff`` refuses traces whose records do not pair.

Every trace here is recorded by the real tracer in this process (CPU).
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.core.errors import BadInput
from forensics.core.formats import optrace as fmt

torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parent.parent


def _model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.GELU(), torch.nn.Linear(6, 3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(5, 8)
    y = torch.randint(0, 3, (5,))
    return model, opt, x, y


def _train(model, opt, x, y, steps: int = 2):
    def fn() -> None:
        for _ in range(steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    return fn


def _records(path: Path) -> tuple[dict, list[dict]]:
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    return lines[0], lines[1:-1]


def _trace(tmp_path: Path, name: str, fn, **kw) -> Path:
    from tests.traced import trace_in_process

    return trace_in_process(tmp_path / name, fn, optimizer_hook=True, **kw)


@pytest.mark.parametrize("level", ["sampled", "summary", "metadata"])
def test_a_light_level_records_each_optimizer_step_whole(tmp_path, level):
    model, opt, x, y = _model()
    header, recs = _records(_trace(tmp_path, "t", _train(model, opt, x, y), evidence=level))
    assert header["optimizer"] == "whole" and header["evidence"] == level
    assert not [r for r in recs if r["phase"] == "optimizer" and r["kind"] == "op"], "the step's ops were traced"
    steps = [r for r in recs if r["op"] == "optimizer.step"]
    assert [r["step"] for r in steps] == [0, 1]
    n_params = len(list(model.parameters()))
    first, second = steps
    # step 0: AdamW's state is made inside the step (none before); 3 tensors per parameter after it
    assert first["meta"]["whole"] is True and first["meta"]["optimizer"] == "AdamW"
    assert first["meta"]["in"] == {"params": n_params, "grads": n_params, "state": 0}
    assert first["meta"]["out"] == {"params": n_params, "state": 3 * n_params}
    assert second["meta"]["in"] == {"params": n_params, "grads": n_params, "state": 3 * n_params}
    assert sorted(second["meta"]["state"]) == ["exp_avg", "exp_avg_sq", "step"]
    assert len(second["in"]) == 5 * n_params and len(second["out"]) == 4 * n_params
    # the mode came back: the second step's forward and backward are traced like the first's
    per_step = [sum(1 for r in recs if r["step"] == s and r["kind"] == "op") for s in (0, 1)]
    assert per_step[0] == per_step[1] > 0
    # the state entries are the state's own digests: the step counter of parameter 0 after step 1
    if level == "summary":
        from probes.optrace.digest import light_entry

        state0 = opt.state[next(iter(model.parameters()))]
        keys = sorted(state0)
        assert second["out"][n_params + keys.index("exp_avg_sq")]["h"] == light_entry("summary")(state0["exp_avg_sq"])["h"]


def test_full_traces_every_op_of_the_step_and_either_level_can_ask_for_the_other(tmp_path):
    model, opt, x, y = _model()
    header, recs = _records(_trace(tmp_path, "full", _train(model, opt, x, y)))
    assert header["optimizer"] == "ops"
    inside = [r for r in recs if r["phase"] == "optimizer" and r["kind"] == "op"]
    assert len(inside) > 10  # AdamW's single-tensor path: several ops per parameter
    step = next(r for r in recs if r["op"] == "optimizer.step")
    assert "whole" not in step["meta"] and len(step["in"]) == 2 * len(list(model.parameters()))

    model, opt, x, y = _model()
    header, recs = _records(_trace(tmp_path, "sampled-ops", _train(model, opt, x, y), evidence="sampled",
                                   optimizer="ops"))
    assert header["optimizer"] == "ops" and any(r["phase"] == "optimizer" and r["kind"] == "op" for r in recs)
    model, opt, x, y = _model()
    header, recs = _records(_trace(tmp_path, "full-whole", _train(model, opt, x, y), optimizer="whole"))
    assert header["optimizer"] == "whole" and not any(r["phase"] == "optimizer" and r["kind"] == "op" for r in recs)
    assert all("ev" not in e for r in recs if r["op"] == "optimizer.step" for e in r["out"])  # full digests


@pytest.mark.parametrize("optimizer", ["whole", "ops"])
def test_a_step_that_raises_leaves_the_mode_off_only_until_the_next_backward(tmp_path, optimizer):
    """A step that raises before its post-hook: at ``whole`` the mode comes back at the next
    ``backward()``; at either setting the later records leave the ``optimizer`` phase there."""
    model, opt, x, y = _model()
    calls = {"n": 0}
    cls = type(opt)
    own = cls.__dict__.get("_init_group")
    orig = cls._init_group

    def failing(self, *a, **k):  # inside the hooked step, after its pre-hook
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected")
        return orig(self, *a, **k)

    def fn() -> None:
        cls._init_group = failing
        try:
            for _ in range(2):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                try:
                    opt.step()
                except RuntimeError:
                    pass
        finally:
            if own is None:
                del cls._init_group
            else:
                cls._init_group = own

    header, recs = _records(_trace(tmp_path, "t", fn, evidence="sampled", optimizer=optimizer))
    assert calls["n"] == 2
    assert [r["op"] for r in recs].count("optimizer.step") == 1  # the step that raised has none
    marks = [i for i, r in enumerate(recs) if r["op"] in ("backward.start", "backward.end")]
    assert len(marks) == 4
    in_backward = [sum(1 for r in recs[s:e] if r["kind"] == "op") for s, e in (marks[0:2], marks[2:4])]
    assert in_backward[0] == in_backward[1] > 0  # the second backward is traced: the mode came back
    assert all(r["phase"] != "optimizer" for r in recs[marks[2]:marks[3]])  # and out of the step's phase
    step = next(r for r in recs if r["op"] == "optimizer.step")
    assert all(r["phase"] != "optimizer" for r in recs if r["seq"] > step["seq"])  # after the step that finished


def test_a_mode_inside_the_tracer_is_left_in_place(tmp_path):
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: list[str] = []

    class Counting(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    model, opt, x, y = _model()

    def fn() -> None:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        with Counting():  # innermost: the tracer cannot pop itself, so it passes the step's ops through
            opt.step()
        torch.nn.functional.cross_entropy(model(x), y)

    header, recs = _records(_trace(tmp_path, "t", fn, evidence="summary"))
    assert seen, "the user's mode saw nothing"
    assert not [r for r in recs if r["phase"] == "optimizer" and r["kind"] == "op"]
    assert [r["op"] for r in recs].count("optimizer.step") == 1
    assert any(r["step"] == 1 and r["kind"] == "op" for r in recs)  # traced again after the step


def _bumped_run(tmp_path: Path, name: str, bump: float, level: str) -> Path:
    """Two steps; with ``bump``, a write into the first weight inside each optimizer step (a post-hook
    registered before the tracer's, so it runs first: the tracer's output digests see it)."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    model, opt, x, y = _model()

    def bumped(_opt, *_a) -> None:
        with torch.no_grad():
            model[0].weight.add_(bump)

    handle = register_optimizer_step_post_hook(bumped) if bump else None
    try:
        return _trace(tmp_path, name, _train(model, opt, x, y), evidence=level)
    finally:
        if handle is not None:
            handle.remove()


def test_a_difference_born_in_the_step_is_a_candidate_at_optimizer_step(tmp_path):
    from forensics.tracediff.diff import diff_paths, format_report

    a = _bumped_run(tmp_path, "a", 0.0, "summary")
    b = _bumped_run(tmp_path, "b", 1e-3, "summary")
    rep = diff_paths(a.parent.parent, b.parent.parent)
    first = rep.ranks[0].first_divergence
    assert first is not None and first.verdict == "ORIGIN" and first.identity == "optimizer.step:1"
    assert first.step == 0 and first.evidence != "proven"
    text = format_report(rep)
    assert rep.next_command.startswith("forensics trace --evidence full --steps 0 --ranks 0 ")
    assert "ORIGIN (unproven" in text and "ORIGIN (proven" not in text
    # our summary is an exact sum: equal values never give two, whatever the reduction order
    assert "differ only by a summary digest" not in text


def test_diff_refuses_traces_whose_optimizer_records_do_not_pair(tmp_path):
    from forensics.tracediff.diff import diff_paths

    model, opt, x, y = _model()
    a = _trace(tmp_path, "a", _train(model, opt, x, y), evidence="sampled")
    model, opt, x, y = _model()
    b = _trace(tmp_path, "b", _train(model, opt, x, y), evidence="sampled", optimizer="ops")
    with pytest.raises(BadInput, match=r"--optimizer ops.*--optimizer whole.*trace both runs with one --optimizer"):
        diff_paths(a.parent.parent, b.parent.parent)


def test_an_older_trace_without_the_field_reads_as_what_its_tracer_did():
    assert fmt.optimizer_of({}) == "ops" and fmt.optimizer_of({"at": "modules"}) == "whole"
    assert fmt.optimizer_of({"optimizer": "whole"}) == "whole" and fmt.optimizer_of({"optimizer": 3}) == "ops"
    assert [fmt.default_optimizer(lv, "ops") for lv in ("full", "sampled", "summary", "metadata")] == \
        ["ops", "whole", "whole", "whole"]
    assert fmt.default_optimizer("full", "modules") == "whole"


@pytest.mark.parametrize("argv,why", [
    (["--at", "modules", "--optimizer", "ops"], "--optimizer ops needs --at ops"),
    (["--optimizer", "bogus"], "--optimizer 'bogus': one of ops, whole"),
])
def test_the_cli_refuses_an_optimizer_setting_it_cannot_record(tmp_path, argv, why):
    out = tmp_path / "t"
    proc = subprocess.run([sys.executable, "-m", "forensics", "trace", "--out", str(out), *argv, "--",
                           sys.executable, "-c", "pass"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert why in proc.stderr and not out.exists()


def test_only_an_exact_sum_is_spared_the_reduction_order_warning():
    """Our summaries (``sum32:``, ``sum64:``, the first ``summary:``) are exact sums; a summary that
    is anything else (another producer's norm) keeps the warning that its bits follow its order."""
    from types import SimpleNamespace as NS

    from forensics.tracediff.divergence import _exact_sums

    def rec(*digests):
        return NS(outputs=[NS(digest=d) for d in digests])

    assert _exact_sums(rec("sum32:0000002a", "x"), rec("sum32:0000002b", "x"), [0])
    assert _exact_sums(rec("sum64:" + "0" * 16), rec("summary:" + "1" * 16), [0])
    assert not _exact_sums(rec("norm:1.5"), rec("norm:1.25"), [0])
    # Megatron's summary digests are its statistics as JSON behind the same word
    megatron = 'summary:{"all_finite":true,"max":1.5,"mean":0.25,"min":-1.0,"norm":2.0}'
    assert not _exact_sums(rec(megatron), rec(megatron.replace("2.0", "2.5")), [0])
    assert not _exact_sums(rec("sum32:0000002a00"), rec("sum32:0000002b"), [0])
    assert not _exact_sums(rec("sum32:0000002a", "0.5"), rec("sum32:0000002b", "0.25"), [0, 1])
    assert not _exact_sums(rec("sum32:0000002a"), rec("sum32:0000002b"), [])


def test_a_closure_step_keeps_its_ops_and_a_nested_step_keeps_the_mode_off_to_its_end(tmp_path):
    """LBFGS runs the closure's forward and backward inside its step: those ops stay records
    (``meta.closure``). A wrapper whose step calls the inner optimizer's: two records, and the
    outer step's own ops after the inner one are not traced either (the mode comes back at the
    outer step's end)."""
    model, _opt, x, y = _model()
    lbfgs = torch.optim.LBFGS(model.parameters(), max_iter=2)

    def closure():
        lbfgs.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        return loss

    header, recs = _records(_trace(tmp_path, "lbfgs", lambda: lbfgs.step(closure), evidence="sampled"))
    step = next(r for r in recs if r["op"] == "optimizer.step")
    assert step["meta"]["closure"] is True and step["meta"]["whole"] is True
    assert any(r["phase"] == "optimizer" and r["kind"] == "op" for r in recs)  # the closure's forward

    model, inner, x, y = _model()

    class Wrapper(torch.optim.Optimizer):
        def __init__(self, inner):
            self.inner = inner
            super().__init__(inner.param_groups, {})

        @torch.no_grad()
        def step(self, closure=None):
            self.inner.step()
            for p in self.inner.param_groups[0]["params"]:
                p.mul_(1.0)  # the wrapper's own op after the inner step: inside the outer step

    outer = Wrapper(inner)

    def fn() -> None:
        inner.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        outer.step()
        torch.nn.functional.cross_entropy(model(x), y)  # after the outer step: traced again

    header, recs = _records(_trace(tmp_path, "nested", fn, evidence="summary"))
    steps = [r for r in recs if r["op"] == "optimizer.step"]
    assert [r["meta"]["optimizer"] for r in steps] == ["AdamW", "Wrapper"]
    assert not [r for r in recs if r["phase"] == "optimizer" and r["kind"] == "op"]
    assert any(r["op"].startswith("aten.addmm") and r["seq"] > steps[1]["seq"] for r in recs)  # traced again
