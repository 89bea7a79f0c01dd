"""The repro of an AMD site (docs/amd.md) carries the hipBLASLt log's bench line (``hipblaslt-bench
... --solution_index N``, HIPBLASLT_LOG_MASK=32), the library's own replay of the call (the whole
bundle of an AMD occurrence: tests/test_amd_two_instruments.py).

The bench line is REAL (i-chaochen's README, tests/fixtures/amd/hipblaslt_mask32_bench.log); the
site record around it is SYNTHETIC (the site probe's digest fields, the call's shapes)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from forensics.evidence.repro import gemm_problem, render_repro
from parsers.hipblaslt_log import read_calls

AMD = Path(__file__).resolve().parent / "fixtures" / "amd"
SITE = {"in_digests": [{"shape": [176, 1024], "dtype": "bfloat16"}, {"shape": [1024, 48], "dtype": "bfloat16"}],
        "out_digests": [{"shape": [176, 48], "dtype": "bfloat16"}]}  # SYNTHETIC


def test_a_hipblaslt_sites_repro_is_its_bench_line(tmp_path):
    call = read_calls(AMD / "hipblaslt_mask32_bench.log").iloc[0].to_dict()
    call["instrument"] = "hipblaslt"
    problem = gemm_problem("aten.mm.default#1", SITE, call, "AMD Instinct MI300X")
    real = next(line for line in (AMD / "hipblaslt_mask32_bench.log").read_text().splitlines()
                if line.startswith("hipblaslt-bench"))
    assert problem.bench == real.strip() and "--solution_index 218160" in problem.bench
    assert (problem.m, problem.n, problem.k, problem.transa, problem.transb) == (48, 176, 1024, "N", "T")
    assert problem.a_dtype == problem.out_dtype == "bfloat16" and problem.source.startswith("hipBLASLt log")
    script = tmp_path / "repro.py"
    script.write_text(render_repro(problem, {}, "a1", "cap", "aten.mm.default#1"))
    # --bench on a machine without hipblaslt-bench: says so, exit 2 (nothing is run or faked)
    r = subprocess.run([sys.executable, str(script), "--bench"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert "library replay (the log's bench line): hipblaslt-bench" in r.stdout
    assert "hipblaslt-bench not found on PATH" in r.stdout
