"""`forensics knob OMP_NUM_THREADS` at a site with several outputs, for real on the CPU backend.
Layer norm's backward under one intra-op thread against two: grad_input stays the same, grad_weight
and grad_bias change (their reductions split by thread). The site probe recorded the first output
only, so the dynamic verdict was "bits unchanged" and "reach UNKNOWN" where the knob reaches the
site. The kernel is ATen's own (no library logs it), so kernel and algo are not captured: the
verdict rests on the bits, with the replica arms bit-identical, and says so."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.runtime.console import unfit

pytest.importorskip("torch")
pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "data" / "scripts" / "layer_norm_train.py"


def test_omp_num_threads_reaches_layer_norm_backward(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "2", "PYTHONPATH": str(REPO)}  # the baseline arms: two threads
    proc = subprocess.run([sys.executable, "-m", "forensics.cli", "knob", "OMP_NUM_THREADS", "--site",
                           "aten.native_layer_norm_backward.default", "--device", "cpu", "--values", "1", "--steps",
                           "0", "--out", str(tmp_path / "cap"), "--", sys.executable, str(SCRIPT)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = unfit(proc.stdout)  # piped lines are broken at 100 columns (docs/errors.md): read them whole
    assert "OMP_NUM_THREADS=1: kernel unknown, algo unknown, bits CHANGED (vs a1)" in out, out[-2000:]
    assert ("OMP_NUM_THREADS=1: REACHES (bits only) at the site (bits changed while the replica arms are "
            "bit-identical; kernel and algo not both captured); evidence: output digest differs at ") in out
