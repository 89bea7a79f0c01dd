"""A crashed arm is a crash: signal name and exit status in knob, compare and analyze.

Real processes: tests/data/scripts/conv_threads.py ``--crash-on ATEN_CPU_CAPABILITY=avx512`` kills
itself with SIGILL when the knob holds that value (standing in for ``ATEN_CPU_CAPABILITY=avx512`` on
a CPU without AVX-512, which dies with SIGILL; the CPU these tests ran on has AVX-512). Before,
compare called the crashed arm's occurrences "NO COUNTERPART (control flow)" and knob's dynamic
verdict read "reach UNKNOWN (kernel/algo not captured at the site)".
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.runtime.console import unfit

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "data" / "scripts" / "conv_threads.py"
SIGILL = "killed by SIGILL (signal 4, exit status -4)"


def _forensics(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "FORENSICS_CACHE_DIR": str(cwd / "cache")}
    r = subprocess.run([sys.executable, "-m", "forensics", *args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=600)
    r.stdout = unfit(r.stdout)  # piped lines are broken at 100 columns (docs/errors.md): read them whole
    return r


@pytest.fixture(scope="module")
def crashed(tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    tmp = tmp_path_factory.mktemp("crash")
    (tmp / "conv.py").write_text(SCRIPT.read_text())
    (tmp / "empty").mkdir()
    r = _forensics(["knob", "ATEN_CPU_CAPABILITY", "--site", "aten.convolution.default", "--values", "avx512",
                    "--path", "empty", "--steps", "0", "--out", "cap", "--json", "knob.json", "--",
                    "python", "conv.py", "--crash-on", "ATEN_CPU_CAPABILITY=avx512"], tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    return tmp, r


def test_knob_says_the_program_crashes_with_the_value(crashed):
    tmp, r = crashed
    assert f"ATEN_CPU_CAPABILITY=avx512: the program CRASHED with it ({SIGILL})" in r.stdout
    assert "reach UNKNOWN" not in r.stdout
    data = json.loads((tmp / "knob.json").read_text())
    tog, = data["dynamic"]["toggles"]
    assert tog["crash_word"] == "CRASHED" and tog["crash"].startswith(SIGILL)
    manifest = (tmp / "cap" / "manifest.yaml").read_text()
    assert "signal: SIGILL" in manifest and "rc: -4" in manifest


def test_compare_reports_the_crash_not_control_flow(crashed):
    tmp, _ = crashed
    r = _forensics(["compare", "cap"], tmp)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "NO COUNTERPART" not in r.stdout and "control flow" not in r.stdout
    assert f"k1-avx512 CRASHED: {SIGILL}" in r.stdout
    assert "k1-avx512 (toggle ATEN_CPU_CAPABILITY=avx512) vs a1: ARM ENDED" in r.stdout
    assert f"toggle ATEN_CPU_CAPABILITY=avx512: CRASHED: {SIGILL}" in r.stdout
    assert "a2 (replica) vs a1: IDENTICAL" in r.stdout  # the arms that ran are still compared


def test_analyze_names_the_crashed_arm(crashed):
    tmp, _ = crashed
    r = _forensics(["analyze", "cap"], tmp)
    assert f"note: arm k1-avx512 CRASHED: {SIGILL}" in r.stdout, r.stdout
    assert "## Arms that did not run to their end" in (tmp / "cap" / "analysis" / "report.md").read_text()


def test_bundle_carries_the_crash(crashed):
    import tarfile

    tmp, _ = crashed
    r = _forensics(["bundle", "cap", "-o", "b.tar.gz"], tmp)
    assert r.returncode == 0, r.stdout + r.stderr
    with tarfile.open(tmp / "b.tar.gz") as t:
        report = t.extractfile(next(n for n in t.getnames() if n.endswith("/report.md"))).read().decode()
        evidence = json.loads(t.extractfile(next(n for n in t.getnames() if n.endswith("/evidence.json"))).read())
    assert f"`k1-avx512` **CRASHED**: {SIGILL}" in report
    assert f"ATEN_CPU_CAPABILITY=avx512: CRASHED: {SIGILL}" in report  # the toggles section
    pair = next(p for p in evidence["comparison"]["pairs"] if p["arm"] == "k1-avx512")
    assert pair["crash_word"] == "CRASHED" and pair["crash"].startswith(SIGILL)


def test_a_crashed_baseline_is_said_so(tmp_path):
    """The baseline arm crashes (its command kills itself), the --arm-command arm runs: the missing
    occurrences are the baseline's crash, not control flow."""
    (tmp_path / "conv.py").write_text(SCRIPT.read_text())
    r = _forensics(["kernel", "--device", "cpu", "--site", "aten.convolution.default", "--steps", "0", "--arms", "1",
                    "--env", "CRASH_ME=1", "--arm-command", "python conv.py", "--out", "cap", "-q", "--",
                    "python", "conv.py", "--crash-on", "CRASH_ME=1"], tmp_path)
    assert f"pass a1: failed: {SIGILL}" in r.stdout, r.stdout + r.stderr
    c = _forensics(["compare", "cap"], tmp_path)
    assert c.returncode == 1
    assert f"  a1 CRASHED: {SIGILL} (its log: passes/a1.log)" in c.stdout
    assert "ARM ENDED" in c.stdout and "NO COUNTERPART" not in c.stdout and "control flow" not in c.stdout
