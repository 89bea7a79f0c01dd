"""A transformer + MoE step traced for real in two processes with the same configuration: the
differ must find nothing but the uninitialised buffers, over a thousand records of embedding,
attention, autocast, routing (chunked ops), backward and AdamW. Anything else (a digest that
reads an address, a garbage byte, a non-deterministic record) would show as a divergence here."""
from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from forensics.commands.trace import trace_command  # noqa: E402
from forensics.tracediff.diff import diff_paths  # noqa: E402

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parent / "data" / "scripts" / "optrace_moe.py"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("moe")

    def run(name: str) -> int:
        code, _ = trace_command([sys.executable, str(SCRIPT), "--threads", "1"], base / name, steps="all")
        return code

    with ThreadPoolExecutor(max_workers=2) as pool:
        codes = list(pool.map(run, ["a", "b"]))
    assert codes == [0, 0]
    return {"a": base / "a", "b": base / "b"}


def test_same_configuration_twice_has_no_divergence(runs):
    rep = diff_paths(runs["a"], runs["b"])
    assert not rep.diverged and rep.site is None, rep.ranks[0].first_divergence
    assert rep.ranks[0].records_compared > 1000
    assert all(x.name.startswith(("aten.empty", "aten.new_empty")) or x.name == "aten.cat.default"
               or "empty" in x.reason for x in rep.ranks[0].artifacts), [x.name for x in rep.ranks[0].artifacts]


def test_the_trace_covers_routing_autocast_and_the_optimizer(runs):
    recs = [json.loads(line) for line in (runs["a"] / "rank0" / "trace.jsonl").read_text().splitlines()[1:-1]]
    ops = {r["op"] for r in recs}
    for op in ("aten.embedding.default", "aten.topk.default", "aten.nonzero.default", "aten.index_select.default",
               "aten.index_add.default", "optimizer.step", "backward.start"):
        assert op in ops, op
    chunked = [r for r in recs if r["op"] in ("aten.topk.default", "aten.index_add.default")]
    assert chunked and all(len(e["c"]) == 16 for r in chunked for e in r["out"] if e.get("t") != "args")
    assert any(e.get("t") == "bfloat16" for r in recs for e in r["in"])  # autocast ran under the tracer
    assert {0, 1} <= {r["step"] for r in recs}  # both training steps (the final loss read is step 2)
