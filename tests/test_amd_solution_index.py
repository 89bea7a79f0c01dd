"""The solution index a hipBLASLt bench line states (``--solution_index N``, HIPBLASLT_LOG_MASK=32) and its
alpha/beta, parsed since issue 32, are shown: in the analysis (describe_call's algo descriptor, a
``solution:`` line per (log, problem, solution) on the terminal and in report.md) and in the bundle's
problem table (issue 40: they were shown nowhere).

The bench line is REAL (tests/fixtures/amd/hipblaslt_mask32_bench.log, solution 218160; the
hipblaslt-bench line of ROCm/rocm-libraries#12243, solution 93338); the capture around it for the
bundle is tests/test_amd_two_instruments.py's (SYNTHETIC kernel trace, ROCTx ranges and site file
in the real formats)."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

from forensics.cli import main
from forensics.judge.analysis import analyze, describe_call
from parsers.hipblaslt_log import read_calls
from tests import test_amd_two_instruments as two

AMD = Path(__file__).resolve().parent / "fixtures" / "amd"


def test_describe_call_gives_the_solution_and_the_scalars():
    row = read_calls(AMD / "hipblaslt_mask32_bench.log").iloc[0].to_dict()
    problem, algo = describe_call(row, "hipblaslt")
    assert algo == "solution_index=218160 algo_method=index"
    assert "alpha=1.000000 beta=0.000000" in problem and "m=48 n=176 k=1024" in problem
    row = read_calls(AMD / "hipblaslt_bench_rocm_libraries12243.log").iloc[0].to_dict()
    assert describe_call(row, "hipblaslt")[1].startswith("solution_index=93338")


def test_analyze_shows_each_calls_solution(tmp_path, capsys):
    rc = main(["analyze", str(AMD / "hipblaslt_mask32_bench.log"), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out.replace("\n      ", " ")
    assert rc == 1
    assert "solution: hipblaslt-bench(N,T) m=48 n=176 k=1024" in out
    assert "solution_index=218160 algo_method=index (1 call(s), hipblaslt)" in out
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Library solutions (hipBLASLt/rocBLAS)" in md and "solution_index=218160" in md
    rep = json.loads((tmp_path / "out" / "analysis.json").read_text())
    assert "solution_index=218160" in rep["verdicts"][0]["reason"]


def test_rocblas_calls_show_their_solution_index(tmp_path, capsys):
    rc = main(["analyze", str(AMD / "rocblas_layer3_migraphx763.log"), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out.replace("\n      ", " ")
    assert rc == 1 and out.count("solution: rocblas_gemm_ex(N,N) m=4096 n=1 k=25088") == 2
    assert "alpha=1 beta=1: solution_index=0 (1 call(s), rocblas)" in out


def test_no_solution_line_for_a_log_without_one(tmp_path, capsys):
    main(["analyze", str(AMD / "hipblaslt_mask5_level5.log"), "--out", str(tmp_path / "out")])
    assert "solution:" not in capsys.readouterr().out


def test_the_bundle_states_the_solution_index(tmp_path):
    cap = tmp_path / "cap"
    cap.mkdir()
    two.test_per_site_occurrence_with_roctx_ranges(cap)
    # the same problem as the README's bench line (48x176x1024 NT bf16): the log of mask 32
    (cap / f"hipblaslt.{two.PID}.log").write_bytes((AMD / "hipblaslt_mask32_bench.log").read_bytes())
    an = analyze(cap)
    assert {r.verdict for r in an.verdicts.itertuples()} == {"NAMED"}
    out = tmp_path / "bundle.tar.gz"
    assert main(["bundle", str(cap), "--out", str(out)]) == 0
    with tarfile.open(out) as tar:
        names = tar.getnames()
        report = tar.extractfile(next(n for n in names if n.endswith("report.md"))).read().decode()
        repro = tar.extractfile(next(n for n in names if n.endswith("repro.py"))).read().decode()
    section = report.split("## Problem and algo descriptors", 1)[1].split("## ", 1)[0]
    assert "solution_index" in section and "218160" in section and "index" in section, section
    assert "From the hipBLASLt/rocBLAS log" in section and "cuBLASLt" not in section
    assert "--solution_index 218160" in repro
