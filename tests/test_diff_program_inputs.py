"""Differences the program passes to an op, not a traced op's output: real training steps traced twice.

* a learning rate of 0.1 vs 0.2: the first divergence is the optimizer's ``add_(param, grad,
  alpha=-lr)``, whose only differing input is its non-tensor arguments. It read "RECEIVER ...
  inputs DIFFER" with no word on that input, and the pattern said "the origin is outside the traced
  window ...; widen the window", where the whole run was traced and no op made the difference;
* GradScaler on CPU autocast, where one run multiplies the loss by ``inf`` at step 1 (a skipped
  step) and the other at step 2: alignment by identity pairs run A's ``loss * inf`` (a Python
  scalar) with run B's ``scaler.scale(loss)`` (a tensor), the same ``aten.mul.Tensor:N``. It read
  "input 1 differs by shape/dtype" and "widen the window"; it now says the calls differ.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from forensics.tracediff.diff import diff_paths, format_report  # noqa: E402
from forensics.tracediff.divergence import RECEIVER  # noqa: E402
from tests.traced import trace_in_process  # noqa: E402

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)


def _sgd(lr: float):
    def run() -> None:
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=lr, foreach=False)
        for _ in range(2):
            loss = model(torch.randn(8, 16)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return run


def _scaled(inf_step: int):
    def run() -> None:
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
        for step in range(3):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(torch.randn(8, 16)).float().pow(2).mean()
            if step == inf_step:
                loss = loss * float("inf")  # a skipped step: the scaler finds inf gradients
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    return run


def test_another_learning_rate_is_an_argument_difference_not_a_window_to_widen(tmp_path):
    trace_in_process(tmp_path / "a", _sgd(0.1), optimizer_hook=True)
    trace_in_process(tmp_path / "b", _sgd(0.2), optimizer_hook=True)
    trace_in_process(tmp_path / "c", _sgd(0.1), optimizer_hook=True)
    assert not diff_paths(tmp_path / "a", tmp_path / "c").diverged
    rep = diff_paths(tmp_path / "a", tmp_path / "b")
    d = rep.ranks[0].first_divergence
    assert d.verdict == RECEIVER and d.name == "aten.add_.Tensor" and d.phase == "optimizer"
    assert d.from_program == "arguments" and d.input_evidence == "input 2 (its non-tensor arguments) differs"
    assert any("configuration value such as a learning rate" in w for w in d.warnings)
    assert rep.pattern == "only_receivers" and "non-tensor arguments the program passed" in rep.pattern_explanation
    assert "widen the window" not in rep.pattern_explanation
    assert "non-tensor arguments differ" in format_report(rep)


def test_a_skipped_step_at_another_step_pairs_different_calls_and_says_so(tmp_path):
    trace_in_process(tmp_path / "a", _scaled(1), optimizer_hook=True)
    trace_in_process(tmp_path / "b", _scaled(2), optimizer_hook=True)
    rep = diff_paths(tmp_path / "a", tmp_path / "b")
    d = rep.ranks[0].first_divergence
    assert d.verdict == RECEIVER and d.name == "aten.mul.Tensor" and d.step == 1
    assert d.from_program == "call" and d.input_evidence.startswith("the call differs: input 1 is a tensor in B")
    assert any("two different calls" in w for w in d.warnings)
    assert "calls of an op made with arguments of another kind" in rep.pattern_explanation
    assert "widen the window" not in rep.pattern_explanation


def test_a_tensor_difference_still_reads_widen(tmp_path):
    """The receiver of a tensor written outside the traced ops keeps the old reading."""
    def prog(v: float):
        def run() -> None:
            torch.manual_seed(0)
            w = torch.randn(8, 8)
            with torch._C._DisableTorchDispatch():  # written around the dispatcher: untraced
                w[0, 0] = v
            (w @ w).sum()
        return run
    trace_in_process(tmp_path / "a", prog(1.0))
    trace_in_process(tmp_path / "b", prog(2.0))
    rep = diff_paths(tmp_path / "a", tmp_path / "b")
    assert rep.ranks[0].first_divergence.from_program is None
    assert "widen the window" in rep.pattern_explanation
