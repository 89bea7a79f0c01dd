"""A traced program that forks. The child inherits the dispatch modes, the probes' pending records
and their open files; it must add nothing to the parent's outputs: no record of the child's ops,
no second copy of the parent's pending records, no footer (a child that exits normally runs the
atexit hook that closes the probes). Before probes/forks.py the child wrote the parent's pending
batch and a footer into trace.jsonl and sites.jsonl, and the parent's own went to
trace.<pid>.jsonl and sites.<pid>.jsonl. Run in a child process of pytest's own.

The CPU collector (torch.profiler) is left out: once kineto has been used in a process, a child
forked from it that exits normally hangs in kineto's static destructors (torch 2.13), with or
without our probes (docs/capture.md)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

REPO = Path(__file__).resolve().parents[1]

PROGRAM = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    import torch
    from probes import activate
    from probes.config import ProbeConfig

    out = Path(sys.argv[1])
    cfg = ProbeConfig(out_dir=str(out), probes=[sys.argv[2]], site="aten.add.Tensor", steps="all", max_records=100000)
    activate.activate(cfg)
    x = torch.ones(8)
    for _ in range(5):
        x = x.add(1)  # parent records, pending (not flushed yet) at the fork
    pid = os.fork()
    if pid == 0:  # the child: its own ops, then a normal exit (atexit closes the probes)
        y = torch.zeros(4)
        for _ in range(7):
            y = y.mul(2)
        sys.exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    for _ in range(3):
        x = x.sub(1)
""")


def _run(tmp_path: Path, probe: str) -> list[dict]:
    proc = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path), probe], capture_output=True, text=True,
                          cwd=REPO, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    name = {"optrace": "trace.jsonl", "sites": "sites.jsonl"}[probe]
    files = sorted(p.name for p in (tmp_path / "rank0").iterdir())
    assert files == [name], files  # one file, under its own name (not the parent's moved to name.<pid>.jsonl)
    return [json.loads(line) for line in (tmp_path / "rank0" / name).read_text().splitlines()]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_forked_child_adds_nothing_to_the_parents_trace(tmp_path):
    lines = _run(tmp_path, "optrace")
    kinds = Counter(r.get("type", "record") for r in lines)
    assert kinds["header"] == 1 and kinds["footer"] == 1, kinds
    assert lines[-1].get("type") == "footer"
    records = [r for r in lines if "seq" in r]
    assert [r["seq"] for r in records] == list(range(len(records)))  # no batch written twice
    ops = Counter(r["op"] for r in records)
    assert ops["aten.add.Tensor"] == 5 and ops["aten.sub.Tensor"] == 3
    assert "aten.mul.Tensor" not in ops and "aten.zeros.default" not in ops  # the child's ops
    assert lines[-1]["records"] == len(records)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork on this platform")
def test_a_forked_child_adds_nothing_to_the_parents_site_records(tmp_path):
    lines = _run(tmp_path, "sites")
    events = Counter(r.get("event") for r in lines)
    assert events["site"] == 5 and events["summary"] == 1, events  # the parent's five adds, once
    assert lines[-1]["event"] == "summary" and lines[-1]["records"] == 5
    assert {r["pid"] for r in lines if r.get("event") == "site"} == {lines[0]["pid"]}
