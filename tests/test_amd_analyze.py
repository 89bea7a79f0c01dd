"""`forensics analyze` on real AMD outputs today (before the AMD instruments are registered):
the Kineto trace of PyTorch on ROCm is read and counted (one source: SINGLE-SOURCE, exit 1); the
rocprofv3, hipBLASLt and rocBLAS files are refused in one line naming the file, exit 3, until their
instrument modules register the readers (docs/amd.md). When they do, the refusals below become
counts and this test changes with them."""
from __future__ import annotations

from pathlib import Path

import pytest

from forensics.cli import main

AMD = Path(__file__).resolve().parent / "fixtures" / "amd"


def test_kineto_on_rocm_counts_its_kernels_single_source(tmp_path, capsys):
    rc = main(["analyze", str(AMD / "kineto_rocm6.2_mi250_minitoy_train.json.gz"), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert rc == 1
    assert "0 of 12 (scope, kernel) pairs NAMED" in out and "verdict: SINGLE-SOURCE (every row)" in out
    assert out.count("Cijk_") == 2 and "verdict: no kernel NAMED" in out


@pytest.mark.parametrize("name", ["rocprofv3_v3_kernel_trace.csv", "hipblaslt_mask5_level5.log",
                                  "rocblas_layer3_migraphx763.log", "rocprof_v1_rocm5.3_results.csv"])
def test_unregistered_amd_files_are_refused_in_one_line(name, tmp_path, capsys):
    rc = main(["analyze", str(AMD / name), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3 and len(err) == 1 and name in err[0] and "not recognised" in err[0], err
