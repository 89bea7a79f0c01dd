"""Activation checkpointing (``torch.utils.checkpoint``) recomputes a block's forward inside the
backward pass. Its GEMMs are forward GEMMs (fprop), but they run while autograd's graph task is
set, so the tracer and the site probe named them ``grad1`` ("a backward GEMM": a wgrad or dgrad),
with ``use_reentrant`` True and False alike: a checkpointed Linear traced for real carried
``gemm:TN:acc0:grad1`` on its recomputed ``addmm``, a site that Transformer Engine, which names its
own recomputed fprop ``grad=False``, never has. A recomputed forward now keeps ``grad0``; the
backward GEMMs stay ``grad1``, also under ``create_graph`` (grad mode on, no checkpoint frame)."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from probes.config import ProbeConfig  # noqa: E402
from probes.sites import install  # noqa: E402
from probes.window import StepWindow, parse_steps  # noqa: E402
from tests.traced import trace_in_process  # noqa: E402


def _train(reentrant: bool) -> None:
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16))
    head = torch.nn.Linear(16, 4)
    x = torch.randn(8, 16, requires_grad=reentrant)
    loss = head(checkpoint(block, x, use_reentrant=reentrant)).pow(2).mean()
    loss.backward()


def _gemms(path) -> list[tuple[str, str, str]]:
    recs = [json.loads(x) for x in path.read_text().splitlines()]
    return [(r["id"], r["phase"], r["meta"]["gemm"]["site"]) for r in recs
            if "seq" in r and "gemm" in r.get("meta", {})]


@pytest.mark.parametrize("reentrant", [False, True])
def test_a_recomputed_forward_gemm_is_named_grad0(tmp_path, reentrant):
    gemms = _gemms(trace_in_process(tmp_path, lambda: _train(reentrant)))
    forward = [g for g in gemms if g[1] == "forward"]
    recomputed = [g for g in gemms if g[1] == "backward" and g[0].startswith("aten.addmm")]
    backward = [g for g in gemms if g[1] == "backward" and g[0].startswith("aten.mm")]
    assert [g[0] for g in forward] == ["aten.addmm.default:1", "aten.addmm.default:2", "aten.addmm.default:3"]
    assert recomputed, gemms  # the block's forward, run again inside backward
    assert {g[2] for g in forward + recomputed} == {"gemm:TN:acc0:grad0"}
    assert backward and {g[2].rsplit(":", 1)[1] for g in backward} == {"grad1"}


def test_the_site_probe_names_a_recomputed_forward_gemm_grad0(tmp_path):
    cfg = ProbeConfig(out_dir=str(tmp_path), steps="0")
    window = StepWindow(parse_steps("0"))
    probe = install(cfg, window, tmp_path / "rank0", 0)
    window.start()
    try:
        _train(reentrant=False)
    finally:
        window.close()
        probe.close()
    labels = [json.loads(x).get("label") for x in (tmp_path / "rank0" / "sites.jsonl").read_text().splitlines()]
    fprop = [x for x in labels if x and x.startswith("gemm:TN:")]
    assert fprop and all(x.startswith("gemm:TN:acc0:grad0#") for x in fprop)
    assert len(fprop) > 3  # three in the forward, and the recomputed ones


def test_a_double_backward_gemm_stays_grad1(tmp_path):
    def fn():
        lin = torch.nn.Linear(8, 8)
        x = torch.randn(4, 8, requires_grad=True)
        (g,) = torch.autograd.grad(lin(x).pow(2).sum(), x, create_graph=True)  # grad mode on in backward
        g.sum().backward()

    gemms = _gemms(trace_in_process(tmp_path, fn))
    assert [g for g in gemms if g[1] == "backward"] and all(g[2].endswith("grad1") for g in gemms if g[1] == "backward")
