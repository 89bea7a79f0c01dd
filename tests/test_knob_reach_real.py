"""Reach is graded: a real oneDNN attribute change with unchanged bits reads as such, with its evidence line.

Real processes: `forensics knob ONEDNN_DEFAULT_FPMATH_MODE --values BF16` on a 1x1 Conv1d run with
two threads (tests/data/scripts/conv_threads.py: the oneDNN ``jit_1x1`` path). oneDNN writes the
primitive's attributes in its verbose line (``attr-fpmath:bf16``); on the CPU these tests ran on the
output bits did not change. Before, the verdict read "change NOT SEEN at the site (kernel and algo
descriptor unchanged)". The static scan is pointed at an empty tree (--path), which on a machine
without CUDA checks the CPU path of the site, not the CUDA one.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "data" / "scripts" / "conv_threads.py"


def test_fpmath_attribute_reaches_without_changing_bits(tmp_path):
    (tmp_path / "conv.py").write_text(SCRIPT.read_text())
    (tmp_path / "empty").mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "FORENSICS_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-m", "forensics", "knob", "ONEDNN_DEFAULT_FPMATH_MODE", "--site",
                        "aten.convolution.default", "--values", "BF16", "--path", "empty", "--steps", "0", "--out",
                        "cap", "--json", "k.json", "--", "python", "conv.py", "--threads", "2"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    reach, = json.loads((tmp_path / "k.json").read_text())["dynamic"]["reach"]
    assert reach.startswith("ONEDNN_DEFAULT_FPMATH_MODE=BF16: REACHES (algo or attributes changed, bits unchanged) "
                            "at the site; evidence: a1 `"), reach
    assert "attributes=attr-scratchpad:user`" in reach and "attributes=attr-scratchpad:user attr-fpmath:bf16`" in reach
    if not glob.glob("/dev/nvidia[0-9]*"):
        assert "device: cpu (no torch under the scanned paths and this machine has no CUDA device" in r.stdout
        assert "libtorch_cuda" not in r.stdout  # CUDA libraries are not "not scanned" on a CPU-only machine
