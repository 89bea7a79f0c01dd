"""The bundle states only what its evidence says (issue 27, item 5), on the real CPU capture
tests/fixtures/cpu/conv1d-threads (provenance in its PROVENANCE.md):

* m/n/k and thread counts as oneMKL wrote them (``8``, not ``8.0``);
* Limits does not call the ISA path unobservable when the oneDNN log named it (``jit_1x1:avx512_core``);
* repro.py does not say "no problem descriptor was captured" when the report shows the library calls;
* the capability column holds what the arm's own oneDNN log said about the CPU;
* ``bundle --section`` takes the file ``forensics knob --json`` writes, as docs/bundle.md says;
* a CPU capture whose instruments all stayed empty (the real capture with its profiler and library
  logs removed: a site in backward, where the profiler cannot start) keeps CPU wording.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from forensics.cli import main
import pytest

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

REPO = Path(__file__).resolve().parents[1]
FIX = REPO / "tests" / "fixtures" / "cpu" / "conv1d-threads"


def _members(tgz: Path) -> dict[str, str]:
    with tarfile.open(tgz) as t:
        return {n.split("/", 1)[1]: t.extractfile(n).read().decode() for n in t.getnames()
                if t.getmember(n).isfile() and n.endswith((".md", ".json", ".py"))}


def _bundle(tmp_path: Path, cap: Path, *extra: str) -> dict[str, str]:
    out = tmp_path / "b.tar.gz"
    assert main(["bundle", str(cap), "-o", str(out), *extra]) == 0
    return _members(out)


def _copy(tmp_path: Path) -> Path:
    cap = tmp_path / "cap"
    shutil.copytree(FIX, cap, ignore=shutil.ignore_patterns("analysis", "analysis-*"))
    return cap


def test_numbers_limits_repro_and_capability_follow_the_evidence(tmp_path):
    m = _bundle(tmp_path, _copy(tmp_path))
    report, evidence, repro = m["report.md"], json.loads(m["evidence.json"]), m["repro.py"]
    assert "| a1 | 0 | aten.convolution.default#1 | 8 | 16 | 8 | f32 | N | N | SGEMM | OFF | 1 |" in report
    assert "8.0" not in report
    row = next(p for p in evidence["problems"] if p["arm"] == "a1")
    assert (row["m"], row["n"], row["k"], row["nthr"]) == (8, 16, 8, 1)
    limits = report.split("## Limits", 1)[1]
    assert "the oneDNN implementation and ISA path taken (jit_1x1:avx512_core)" in limits
    assert "ISA path taken) is not observable" not in limits and "the ISA path taken" not in limits.split("(why")[1]
    assert "no problem descriptor was captured" not in repro
    assert "calls the capture attributed to this occurrence (mkl: SGEMM(N,N,8,16,8) CNR:OFF NThr:1 x4)" in repro
    assert "| t1-omp_num_threads | cpu | oneDNN: Intel AVX-512 with Intel DL Boost and bfloat16 support |" in report
    r = subprocess.run([sys.executable, "-c", repro], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr  # the convolution reruns: 'nothing to run' read before
    assert "problem: aten.convolution.default#1 input [4, 8, 8] weight [16, 8, 1] -> [4, 16, 8] stride=[1] " \
           "padding=[0] dilation=[1] groups=1" in r.stdout
    assert "threads: 1 (captured: oneMKL verbose log (NThr))" in r.stdout and "result: IDENTICAL across 2 runs" in r.stdout


def test_section_takes_what_knob_json_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("FORENSICS_CACHE_DIR", str(tmp_path / "cache"))
    tree = tmp_path / "site" / "pkg"
    tree.mkdir(parents=True)  # SYNTHETIC package: one read of the knob
    (tree / "a.py").write_text('import os\nN = os.environ.get("OMP_NUM_THREADS", "1")\n')
    knob = tmp_path / "knob.json"
    assert main(["knob", "OMP_NUM_THREADS", "--path", str(tmp_path / "site"), "--site", "aten.convolution.default",
                 "--json", str(knob)]) == 0
    m = _bundle(tmp_path, _copy(tmp_path), "--section", str(knob))
    assert "## Knob scope: `OMP_NUM_THREADS`" in m["report.md"] and "`pkg/a.py:2`" in m["report.md"]
    section, = json.loads(m["evidence.json"])["sections"]
    assert section["title"] == "Knob scope: OMP_NUM_THREADS" and section["data"]["knob"] == "OMP_NUM_THREADS"
    assert str(tmp_path) not in m["evidence.json"]  # paths relative to the scanned tree


def test_a_cpu_capture_with_empty_instruments_keeps_cpu_wording(tmp_path, capsys):
    cap = _copy(tmp_path)
    for f in list(cap.glob("*/rank0/*")):
        if f.name.startswith(("torchprof", "mkl.", "onednn.")):
            f.unlink()
    assert main(["analyze", str(cap)]) == 1
    out = capsys.readouterr().out
    assert "no implementation-op executions to judge" in out and "CUPTI" not in out and "kernel launch" not in out
    report = _bundle(tmp_path, cap)["report.md"]
    assert "CUPTI" not in report and "kernel launch" not in report and "cuBLASLt" not in report
    assert "No plot: no implementation-op execution (an op that calls oneDNN or oneMKL) was attributed" in report
