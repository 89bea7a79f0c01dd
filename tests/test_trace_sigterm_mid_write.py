"""A SIGTERM that arrives in the middle of a batch write waits for the batch: the whole batch is
written, then the footer, which counts every record line and says the signal stopped the run
(probes/signals.py). Before, the footer went into the middle of the batch (or, in a buffered
write, failed as a "reentrant call" and the trace had no footer)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a real forensics trace of a torch program, ~5 s

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "data" / "scripts" / "sigterm_mid_write.py"


def test_a_sigterm_mid_batch_is_held_until_the_batch_is_written(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-m", "forensics", "trace", "--out", str(out), "--", sys.executable,
                        str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 128 + 15, r.stdout + r.stderr  # the program was stopped by the signal
    assert "not stopped" not in r.stdout
    lines = [json.loads(x) for x in (out / "rank0" / "trace.jsonl").read_text().splitlines()]
    footer = lines[-1]
    assert footer.get("stopped") == "signal 15 (SIGTERM)", footer
    records = [x for x in lines[1:-1] if "seq" in x]
    assert footer["records"] == len(records) and "unwritten" not in footer
    assert [x["seq"] for x in records] == list(range(records[0]["seq"], records[0]["seq"] + len(records)))
    assert sum(1 for x in records if x.get("op", "").startswith("aten.mul")) == 5  # the whole batch
