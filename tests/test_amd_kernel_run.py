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

from forensics.runtime.console import unfit

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # one real arm of a torch program: ~15 s on 2 shared cores
@pytest.mark.skipif(Path("/dev/kfd").exists(), reason="this machine has a ROCm device node")
def test_kernel_on_rocm_without_an_amd_gpu(tmp_path):
    out = tmp_path / "cap"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = subprocess.run([sys.executable, "-m", "forensics", "kernel", "--device", "rocm", "--site",
                        "gemm:NT:acc0:grad1#2", "--ranks", "0", "--steps", "0", "--arms", "1", "--out", str(out), "-q",
                        "--", sys.executable, "examples/cpu-divergence/train.py", "--threads", "1"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 4, r.stdout + r.stderr
    last = unfit(r.stdout).strip().splitlines()[-1]  # the piped-width rule may break a long line
    assert last.startswith("verdict: no kernel could run: no ROCm device") and "rocprofv3" in last, last
    assert (out / "a1" / "rank0" / "sites.jsonl").stat().st_size > 0
    names = [p.name for p in (out / "a1").rglob("*")]
    assert not any("kernel_trace" in n or n.startswith(("hipblaslt", "rocblas")) for n in names), names

    from forensics.judge.analysis import analyze

    missing = analyze(out).missing
    assert any("rocprofv3 kernel trace" in m for m in missing) and any("hipBLASLt or rocBLAS" in m for m in missing)


def test_the_site_probe_sends_its_ranges_to_roctx_on_rocm(tmp_path, monkeypatch):
    """On a ROCm build (torch.version.hip set) the site probe's ranges go through torch.cuda.nvtx
    (ROCTx there, what rocprofv3 --marker-trace records), named with the site label alone; elsewhere
    through the nvtx package, as before. SIMULATED here (no ROCm torch on this machine): torch's
    version.hip and cuda.nvtx are replaced by recorders; what is tested is the probe's choice."""
    import types

    import torch

    from probes.config import ProbeConfig
    from probes.sites import SiteProbe
    from probes.window import StepWindow, parse_steps

    calls = []
    fake = types.SimpleNamespace(range_start=lambda msg: calls.append(("start", msg)) or 7,
                                 range_end=lambda rid: calls.append(("end", rid)))
    monkeypatch.setattr(torch.version, "hip", "6.2.41133", raising=False)
    monkeypatch.setattr(torch.cuda, "nvtx", fake)
    cfg = ProbeConfig(out_dir=str(tmp_path), probes=["sites"], arm="a1", site="aten.mm.default", nvtx=True)
    probe = SiteProbe(cfg, StepWindow(parse_steps("0")), tmp_path, 0)
    rng = probe._range_start("aten.mm.default#1")
    probe._range_end(rng)
    assert calls == [("start", "aten.mm.default#1"), ("end", 7)]
