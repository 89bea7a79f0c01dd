"""`forensics kernel --device rocm` run for real on this machine, which has no AMD GPU: a small torch
CPU program (examples/cpu-divergence/train.py) runs in the arm unwrapped (rocprofv3 cannot run),
its site file is real, no AMD instrument wrote anything, and the verdict says no kernel could run
and why, exit 4 (never a finding); analyze of that capture names the AMD families as missing."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # one real arm of a torch program: ~15 s on 2 shared cores

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(Path("/dev/kfd").exists(), reason="this machine has a ROCm device node")
def test_kernel_on_rocm_without_an_amd_gpu(tmp_path):
    out = tmp_path / "cap"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "forensics", "kernel", "--device", "rocm", "--site",
                        "gemm:NT:acc0:grad1#2", "--ranks", "0", "--steps", "0", "--arms", "1", "--out", str(out), "-q",
                        "--", sys.executable, "examples/cpu-divergence/train.py", "--threads", "1"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 4, r.stdout + r.stderr
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("verdict: no kernel could run: no ROCm device") and "rocprofv3" in last, last
    assert (out / "a1" / "rank0" / "sites.jsonl").stat().st_size > 0
    names = [p.name for p in (out / "a1").rglob("*")]
    assert not any("kernel_trace" in n or n.startswith(("hipblaslt", "rocblas")) for n in names), names

    from forensics.judge.analysis import analyze

    missing = analyze(out).missing
    assert any("rocprofv3 kernel trace" in m for m in missing) and any("hipBLASLt or rocBLAS" in m for m in missing)
