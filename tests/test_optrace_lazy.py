"""A lazy module (``nn.LazyLinear``) traced for real. Its parameter is an
``UninitializedParameter`` until the first forward materializes it, and reading its shape or
numel raises by design. The tracer digested it like any tensor when ``materialize`` read
``self.data`` (an ``aten.detach``), and the traced program died with "Can't access the shape of
an uninitialized parameter": a probe broke the program it observed. Now such a tensor is recorded
as metadata with no shape (``"s": null``), and the program runs as it does untraced."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from forensics.tracediff.diff import diff_paths  # noqa: E402
from tests.traced import trace_in_process  # noqa: E402


def _train() -> list[float]:
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.LazyLinear(5))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    losses = []
    for _ in range(2):
        m.train()
        loss = m(torch.randn(8, 3, 8, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        m.eval()
        with torch.no_grad():
            losses.append(float(m(torch.randn(2, 3, 8, 8)).sum()))
        losses.append(loss.item())
    return losses


def test_a_lazy_module_runs_under_the_tracer_as_untraced(tmp_path):
    untraced = _train()
    got: list[float] = []
    path = trace_in_process(tmp_path / "a", lambda: got.extend(_train()), optimizer_hook=True)
    assert got == untraced
    recs = [json.loads(x) for x in path.read_text().splitlines()[1:-1]]
    lazy = [e for r in recs for e in r["in"] if e.get("s") is None and e.get("t") == "float32"]
    assert lazy and all(e == {"s": None, "t": "float32", "n": None, "ev": "metadata"} for e in lazy)
    trace_in_process(tmp_path / "b", _train, optimizer_hook=True)
    rep = diff_paths(tmp_path / "a", tmp_path / "b")
    assert not rep.diverged, rep.ranks[0].first_divergence
