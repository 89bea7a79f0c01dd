"""FSDP2 under `forensics trace`, for real (2 ranks, gloo, CPU). The tracer broke this program twice
over: reading tensors through ``.numpy()`` made their storages unresizable, so FSDP2's
``storage.resize_(0)`` raised "Trying to resize storage that is not resizable"; reading memory in
place instead read a DTensor parameter's bogus data pointer (SIGSEGV). The program must run to
its end, traced, with complete traces on both ranks."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.test_trace_command import env  # noqa: E402
from tests.test_trace_kill import free_port  # noqa: E402

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not built in")]
REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "data" / "scripts" / "optrace_fsdp2.py"


def test_fsdp2_runs_to_its_end_under_the_tracer(tmp_path):
    out = tmp_path / "t"
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "trace", "--out", str(out), "--", sys.executable,
                           "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
                           str(SCRIPT)], capture_output=True, text=True, cwd=tmp_path, timeout=600,
                          env=env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    for rank in (0, 1):
        lines = [json.loads(x) for x in (out / f"rank{rank}" / "trace.jsonl").read_text().splitlines()]
        assert lines[-1]["type"] == "footer" and lines[-1]["stopped"] is None
        assert lines[-1]["records"] > 100
        params = [e for r in lines[1:-1] if r.get("op") == "optimizer.step" for e in r["in"]]
        assert params and all(e.get("ev") == "metadata" for e in params)  # DTensors: metadata, no collective
