"""A torch.compile'd model under `forensics trace`, for real (Inductor on the CPU; needs a C
compiler). By default a dispatch mode makes torch.compile fall back to eager: the traced run ran
other kernels than the program it was meant to observe, and said nothing. Now compiled code runs
compiled (`--compiled compiled`, the default): the tracer records the ATen calls the compiled code
makes (``aten.addmm.out``), the footer counts the graphs, the summary says that their fused
kernels are below the dispatcher, and two identical runs have no divergence (the ``.out`` buffers
the generated code allocates in C++ are no input). `--compiled eager` keeps torch's fallback."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from forensics.tracediff.diff import diff_paths  # noqa: E402

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="Inductor needs a C compiler")]
REPO = Path(__file__).resolve().parents[1]
PROGRAM = textwrap.dedent("""
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    compiled = torch.compile(model)
    for _ in range(3):
        x = torch.randn(8, 16)
        opt.zero_grad()
        compiled(x).pow(2).mean().backward()
        opt.step()
""")


def _trace(tmp_path: Path, name: str, *options: str) -> tuple[Path, str]:
    script = tmp_path / f"compiled_train_{name}.py"
    script.write_text(PROGRAM)
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "trace", *options, "--out", str(tmp_path / name),
                           "--", sys.executable, str(script)], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return tmp_path / name, proc.stdout


def _lines(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "rank0" / "trace.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[Path, str]]:
    from concurrent.futures import ThreadPoolExecutor

    base = tmp_path_factory.mktemp("compiled")
    options = {"a": (), "b": (), "e": ("--compiled", "eager")}
    with ThreadPoolExecutor(max_workers=3) as pool:
        done = {name: pool.submit(_trace, base, name, *opts) for name, opts in options.items()}
    return {name: f.result() for name, f in done.items()}


def test_compiled_code_runs_compiled_and_two_runs_match(runs):
    (a, out), (b, _) = runs["a"], runs["b"]
    lines = _lines(a)
    ops = {r.get("op") for r in lines[1:-1]}
    assert "aten.addmm.out" in ops and "aten.gelu.default" not in ops  # the generated code's calls; GELU fused
    assert lines[0]["compiled"] == "compiled" and lines[-1]["compiled_graphs"] >= 1
    assert "torch.compile graph(s) ran compiled" in out and "(1 rank file(s))" in out
    res = diff_paths(a, b).ranks[0]
    assert res.first_divergence is None, res.first_divergence


def test_compiled_eager_falls_back_and_sees_every_op(runs):
    run, out = runs["e"]
    lines = _lines(run)
    ops = {r.get("op") for r in lines[1:-1]}
    assert "aten.gelu.default" in ops and "aten.addmm.default" in ops
    assert lines[0]["compiled"] == "eager" and not lines[-1]["compiled_graphs"]
    assert "ran compiled" not in out
    rep = diff_paths(runs["a"][0], run)  # the two modes ran different ops: the comparison says why
    assert any(d["field"] == "compiled" and d["severity"] == "warning" for d in rep.comparability)
