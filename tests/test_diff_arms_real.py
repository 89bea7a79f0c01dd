"""Both sides of a difference become arms: `diff` -> its printed `next:` -> `compare`, no step typed by hand.

Real programs only: tests/data/scripts/conv_threads.py (a 1x1 Conv1d whose implementation PyTorch
picks from the intra-op thread count) is traced twice by `forensics trace` in separate processes,
once differing by ``OMP_NUM_THREADS`` and once by its own ``--threads`` argument. The `next:` line
that `forensics diff` prints is run as printed (in a shell whose ``OMP_NUM_THREADS`` is neither
run's, so run A's setting must come from the line itself), then `forensics compare` must name the
implementation each side ran.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.runtime.console import unfit

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "data" / "scripts" / "conv_threads.py"
ONE = "aten::_slow_conv2d_forward -> oneMKL SGEMM"  # one intra-op thread
TWO = "aten::mkldnn_convolution -> oneDNN convolution jit_1x1"  # two (the ISA suffix depends on the CPU)


def _forensics(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    r = subprocess.run([sys.executable, "-m", "forensics", *args], cwd=cwd, env=full, capture_output=True,
                       text=True, timeout=600)
    r.stdout = unfit(r.stdout)  # piped lines are broken at 100 columns (docs/errors.md): read them whole
    return r


def _flow(tmp: Path, a: tuple[list[str], dict], b: tuple[list[str], dict]) -> tuple[str, str, str]:
    """trace A, trace B, diff, run the printed next: line, compare: (diff out, kernel err, compare out)."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "conv.py").write_text(SCRIPT.read_text())
    for name, (args, env) in (("runA", a), ("runB", b)):
        r = _forensics(["trace", "--out", name, "--", "python", "conv.py", *args], tmp, **env)
        assert r.returncode == 0, r.stdout + r.stderr
    d = _forensics(["diff", "runA", "runB"], tmp)
    assert d.returncode == 1, d.stdout + d.stderr
    nxt = [ln for ln in d.stdout.splitlines() if ln.startswith("next: ")]
    assert len(nxt) == 1, d.stdout
    argv = shlex.split(nxt[0][len("next: "):])
    assert argv[:2] == ["forensics", "kernel"], nxt
    k = _forensics(argv[1:], tmp, OMP_NUM_THREADS="3")  # exactly as printed
    assert k.returncode == 0, k.stdout + k.stderr
    c = _forensics(["compare", "forensics-capture"], tmp)
    assert c.returncode == 1, c.stdout + c.stderr  # a divergence: the other side ran something else
    return d.stdout, nxt[0], c.stdout


def test_thread_count_knob_becomes_a_toggle_and_compare_names_both_sides(tmp_path):
    diff_out, nxt, out = _flow(tmp_path, ([], {"OMP_NUM_THREADS": "1"}), ([], {"OMP_NUM_THREADS": "2"}))
    assert "knob differs: OMP_NUM_THREADS A='1' B='2'" in diff_out
    assert "--env OMP_NUM_THREADS=1 --toggle OMP_NUM_THREADS=2 -- python conv.py" in nxt
    assert "a2 (replica) vs a1: IDENTICAL" in out  # run A's setting twice, though the shell said 3 threads
    line = next(ln for ln in out.splitlines() if ln.startswith("toggle OMP_NUM_THREADS=2:"))
    assert f"a1 ran {ONE}, t1-omp_num_threads ran {TWO}" in line and "kernel CHANGED" in line
    first = next(ln for ln in out.splitlines() if "first divergence" in ln)
    assert f"kernel differs: a1 ran {ONE}, t1-omp_num_threads ran {TWO}" in first


def test_a_catalog_knob_is_named_by_diff_next_and_compare(tmp_path):
    """Two runs that differ only by ONEDNN_MAX_CPU_ISA (both at 2 threads: oneDNN runs the conv)."""
    diff_out, nxt, out = _flow(tmp_path, (["--threads", "2"], {}), (["--threads", "2"], {"ONEDNN_MAX_CPU_ISA": "SSE41"}))
    assert "knob differs: ONEDNN_MAX_CPU_ISA A=<unset> B='SSE41'" in diff_out.splitlines()[1]  # before any verdict
    assert "--toggle ONEDNN_MAX_CPU_ISA=SSE41 -- python conv.py --threads 2" in nxt
    assert "a2 (replica) vs a1: IDENTICAL" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("toggle ONEDNN_MAX_CPU_ISA=SSE41:"))
    assert "algo CHANGED" in line  # the same ATen op; oneDNN's implementation changed
    first = next(ln for ln in out.splitlines() if "first divergence" in ln)
    assert "implementation=jit_1x1:sse41" in first and "t1-onednn_max_cpu_isa ran" in first


def test_script_argument_becomes_run_b_arm(tmp_path):
    diff_out, nxt, out = _flow(tmp_path, (["--threads", "1"], {}), (["--threads", "2"], {}))
    assert "argv differs" in diff_out
    assert nxt.endswith("--arm-command 'python conv.py --threads 2' -- python conv.py --threads 1")
    assert "c1 (toggle command 'python conv.py --threads 2') vs a1: SELECTION DIFFERS 1" in out
    assert f"kernel differs: a1 ran {ONE}, c1 ran {TWO}" in out
    manifest = (tmp_path / "forensics-capture" / "manifest.yaml").read_text()
    assert "- --threads\n  - '2'" in manifest or "--threads\n    - '2'" in manifest, manifest


def test_from_report_carries_the_arms(tmp_path):
    """`kernel --from` builds the same arms from the JSON report (a dry run: nothing started)."""
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "conv.py").write_text(SCRIPT.read_text())
    for name, env in (("runA", "1"), ("runB", "2")):
        r = _forensics(["trace", "--out", name, "--", "python", "conv.py"], tmp_path, OMP_NUM_THREADS=env)
        assert r.returncode == 0, r.stderr
    d = _forensics(["diff", "runA", "runB", "--json", "rep.json"], tmp_path)
    assert d.returncode == 1
    assert "--toggle OMP_NUM_THREADS=2" in json.loads((tmp_path / "rep.json").read_text())["next_command"]
    k = _forensics(["kernel", "--from", "rep.json", "--dry-run"], tmp_path)
    assert k.returncode == 0, k.stderr
    assert "knob OMP_NUM_THREADS differs (A='1' B='2')" in k.stderr
    passes = k.stdout.split("\npass ")
    t1 = next(p for p in passes if p.startswith("t1-omp_num_threads"))
    a1 = next(p for p in passes if p.startswith("a1"))
    assert "env:  OMP_NUM_THREADS=2" in t1 and "env:  OMP_NUM_THREADS=1" in a1
