"""The real Nsight tools, without a GPU: Debian bookworm non-free's nsight-compute (2022.3) and
nsight-systems (2022.4) export the corpus reports offline and run our exact pass argv.

Skipped with a reason where the tools (or ../shared) are absent; .ci/run installs them best effort.
What these check: our readers agree with the vendor's own exporters on real reports, and the
vendor CLIs accept the flags and the NVTX filter syntax our passes use (no kernel is profiled here).
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from forensics.instruments.ncu import ncu_argv
from forensics.instruments.nsys import nsys_argv
from parsers import ncu, nsys

NCU = shutil.which("ncu")
NSYS = shutil.which("nsys")
need_ncu = pytest.mark.skipif(NCU is None, reason="ncu (Nsight Compute CLI) not installed: apt-get install nsight-compute (Debian non-free)")
need_nsys = pytest.mark.skipif(NSYS is None, reason="nsys (Nsight Systems CLI) not installed: apt-get install nsight-systems (Debian non-free)")
TRIVIAL = [sys.executable, "-c", "print('no CUDA here')"]


def _run(argv: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


@need_nsys
def test_nsys_export_of_the_real_qdrep_reads_like_the_corpus_export(corpus, tmp_path):
    """nsys 2022.4 exports the pre-2022 .qdrep; our reader gives the export in the corpus (made the
    same way): 128 launches of one kernel, 32 per device, 216 MPI ranges."""
    out = tmp_path / "cumat.sqlite"
    r = _run([NSYS, "export", "--type", "sqlite", "-o", str(out), str(corpus / "nsys" / "nsys_cumat_report1.qdrep")])
    assert r.returncode == 0, r.stderr[-500:]
    ours, theirs = nsys.read_kernels(out), nsys.read_kernels(corpus / "nsys" / "nsys_cumat_qdrep_export_nvtx.sqlite")
    cols = ["kernel", "grid", "block", "device_id", "correlation_id", "start_ns"]
    assert len(ours) == 128 and ours[cols].equals(theirs[cols])
    assert len(nsys.read_ranges(out)) == 216
    assert nsys.schema_info(out)["product_version"] == nsys.schema_info(corpus / "nsys" / "nsys_cumat_qdrep_export_nvtx.sqlite")["product_version"]


REPORTS = ["extrap_ex-gpu.s10.ncu-rep", "ncu_esmm_a10g_cutlass80_simt_sgemm.ncu-rep", "ncu_zsl98_a100_ampere_sgemm_x11.ncu-rep"]


@need_ncu
@pytest.mark.parametrize("report", REPORTS)
@pytest.mark.parametrize("page", ["raw", "details"])
def test_ncu_csv_export_reads_like_the_report(corpus, tmp_path, report, page):
    """ncu --import REPORT --csv --page raw|details, read by parsers.ncu.read_csv: the same launches,
    in the same order, as parsers.ncu.read_report on the .ncu-rep (and, on the raw page, the same
    grid and block)."""
    r = _run([NCU, "--import", str(corpus / "ncu" / report), "--csv", "--page", page])
    assert r.returncode == 0, r.stderr[-500:]
    csv_path = tmp_path / f"{page}.csv"
    csv_path.write_text(r.stdout)
    from_csv, from_rep = ncu.read_csv(csv_path), ncu.read_report(corpus / "ncu" / report)
    assert from_csv["short_name"].tolist() == from_rep["short_name"].tolist()
    if page == "raw":
        assert from_csv["grid"].tolist() == from_rep["grid"].tolist()
        assert from_csv["block"].tolist() == from_rep["block"].tolist()


@need_ncu
@pytest.mark.parametrize("mode,site", [("nvtx", "gemm:NT:acc0:grad1"), ("nvtx", "gemm:NT:acc0:grad1#2"),
                                       ("window", "gemm:NT:acc0:grad1")])
def test_real_ncu_accepts_our_pass_argv(tmp_path, mode, site):
    """Our ncu pass, run by the real ncu over a process without CUDA: flags and the --nvtx-include
    filter are accepted (exit 0, no ==ERROR==); nothing is profiled."""
    r = _run(ncu_argv(NCU, tmp_path / "window", TRIVIAL, site=site, mode=mode))
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "==ERROR==" not in out, out[-800:]
    assert "No kernels were profiled" in out


@need_ncu
def test_real_ncu_rejects_a_malformed_nvtx_filter(tmp_path):
    """The control for the test above: real ncu does check the filter syntax."""
    argv = ncu_argv(NCU, tmp_path / "window", TRIVIAL, site="gemm:NT:acc0:grad1", mode="nvtx")
    argv[argv.index("--nvtx-include") + 1] = "regex:forensics@gemm[#"
    r = _run(argv)
    assert r.returncode != 0 and "Invalid configuration for nvtx-include" in r.stdout + r.stderr


@need_nsys
def test_real_nsys_accepts_our_pass_argv(tmp_path):
    r = _run(nsys_argv(NSYS, tmp_path / "nsys", TRIVIAL))
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "unrecognised option" not in out and "no CUDA here" in out, out[-800:]
