"""`forensics analyze` on real AMD outputs (tests/fixtures/amd/PROVENANCE.md gives each file's
ground truth): each is recognised by content as its AMD instrument, read and counted as it holds;
alone it is one source, so SINGLE-SOURCE (exit 1), and its "missing" lines name the AMD
instruments, not NVIDIA's. A file that is part of a capture but never counted alone (a marker or
API trace) and a per-kernel summary are refused in one line naming the file (exit 3)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from forensics.cli import main

AMD = Path(__file__).resolve().parent / "fixtures" / "amd"
NVIDIA = ("CUPTI", "cuBLASLt", "ncu", "Nsight")


def _analyze(name: str, tmp_path: Path, capsys) -> tuple[int, str, dict]:
    rc = main(["analyze", str(AMD / name), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    return rc, out, json.loads((tmp_path / "out" / "analysis.json").read_text())


def _counts(report: dict, instrument: str) -> dict[str, int]:
    got: dict[str, int] = {}
    for row in report["verdicts"]:
        got[row["kernel"]] = got.get(row["kernel"], 0) + row["counts"][report_family(instrument)]
    return got


def report_family(instrument: str) -> str:
    return {"rocprofv3": "rocprofiler", "kineto_rocm": "rocprofiler", "hipblaslt": "hipblaslt",
            "rocblas": "hipblaslt"}[instrument]


def _missing(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("missing:")]


def test_kineto_on_rocm_is_the_rocprofiler_family(tmp_path, capsys):
    rc, out, rep = _analyze("kineto_rocm6.2_mi250_minitoy_train.json.gz", tmp_path, capsys)
    assert rc == 1
    assert "instruments: kineto_rocm" in out
    assert "0 of 12 (scope, kernel) pairs NAMED" in out
    assert {r["verdict"] for r in rep["verdicts"]} == {"SINGLE-SOURCE"}
    counts = _counts(rep, "kineto_rocm")
    assert sum(counts.values()) == 14 and len(counts) == 12
    assert sum(1 for k in counts if k.startswith("Cijk_")) == 2
    miss = _missing(out)
    assert any("hipBLASLt or rocBLAS log" in m for m in miss)
    assert not any(word in m for m in miss for word in NVIDIA), miss


@pytest.mark.parametrize("name,truth", [
    ("rocprofv3_v1_kernel_trace.csv", {"matrixTranspose(float*, float*, int)": 1}),
    ("rocprofv3_v2_kernel_trace.csv", {"addition_kernel": 4, "subtract_kernel": 2, "multiply_kernel": 1}),
    ("rocprofv3_v3_kernel_trace.csv", {"addition_kernel": 2, "subtract_kernel": 2, "multiply_kernel": 2,
                                       "divide_kernel": 2}),
    ("rocprofv3_truncated_names_kernel_trace.csv", {"addition_kernel": 2, "subtract_kernel": 1, "divide_kernel": 1}),
    ("rocprofv3_v4_agent_index_kernel_trace.csv", {"addition_kernel": 1}),
    ("rocprofv3_v4_type_relative_kernel_trace.csv", {"addition_kernel": 1}),
    ("rocpd_convert_kernel_trace.csv", {"QMnorm_modPnorm_l23": 3, "QMlaplacian_modPlaplacian_l22": 2,
                                        "QMboundary_modPboundary_conditions_l24": 2, "QMupdate_modPupdate_l22": 2}),
    ("rocprof_v1_rocm5.3_results.csv", {"bodyForce": 10}),
])
def test_rocprofv3_traces_give_their_ground_truth_counts(name, truth, tmp_path, capsys):
    rc, out, rep = _analyze(name, tmp_path, capsys)
    assert rc == 1 and "instruments: rocprofv3" in out
    counts = _counts(rep, "rocprofv3")
    assert sum(counts.values()) == sum(truth.values())
    for fragment, n in truth.items():  # each kernel of the ground truth, by a fragment of its name
        assert sum(c for k, c in counts.items() if fragment in k) == n, (fragment, counts)
    assert {r["verdict"] for r in rep["verdicts"]} == {"SINGLE-SOURCE"}
    miss = _missing(out)
    assert any("hipBLASLt or rocBLAS log" in m for m in miss)
    assert not any(word in m for m in miss for word in NVIDIA), miss


@pytest.mark.parametrize("name,instrument,calls", [
    ("hipblaslt_mask5_level5.log", "hipblaslt", {"rocblaslt_matmul(N,T) 48x176x1024 R_16BF": 1}),
    ("hipblaslt_mask32_bench.log", "hipblaslt", {"hipblaslt-bench(N,T) 48x176x1024 bf16_r": 1}),
    ("hipblaslt_bench_rocm_libraries12243.log", "hipblaslt", {"hipblaslt-bench(N,N) 16x512x4096 bf16_r": 1}),
    ("hipblaslt_rocm_pytorch1241_excerpt.log", "hipblaslt", {"rocblaslt_matmul(T,N) 128x2048x2400 R_32F": 1}),
    ("rocblas_layer3_migraphx763.log", "rocblas", {"rocblas_gemm_ex(N,N) 4096x1x25088 f32_r": 1,
                                                    "rocblas_gemm_ex(N,N) 4096x1x25088 f16_r": 1}),
    ("rocblas_layer3_rocm_libraries3413.log", "rocblas", {"rocblas_gemm_batched_ex(T,N) 256x64x128 f16_r": 2,
                                                           "rocblas_gemm_batched_ex(T,N) 128x64x256 f16_r": 1}),
])
def test_library_logs_give_their_calls_single_source(name, instrument, calls, tmp_path, capsys):
    rc, out, rep = _analyze(name, tmp_path, capsys)
    assert rc == 1 and f"instruments: {instrument}" in out
    for text, n in calls.items():
        assert text in out
    assert sum(int(r["counts"]["hipblaslt"]) for r in rep["verdicts"]) == sum(calls.values())
    miss = _missing(out)
    assert any("rocprofv3 kernel trace" in m for m in miss)
    assert not any(word in m for m in miss for word in NVIDIA), miss


@pytest.mark.parametrize("name,why", [
    ("rocprof_v1_rocm5.3_results.stats.csv", "per-kernel summary"),
    ("rocprofv3_marker_api_trace.csv", "read with the capture it belongs to"),
    ("rocprofv3_hip_runtime_api_trace.csv", "read with the capture it belongs to"),
    ("PROVENANCE.md", "not recognised"),
])
def test_what_analyze_cannot_count_is_refused_in_one_line(name, why, tmp_path, capsys):
    rc = main(["analyze", str(AMD / name), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3 and len(err) == 1 and name in err[0] and why in err[0], err


@pytest.mark.parametrize("name,cut", [("rocprofv3_v3_kernel_trace.csv", 0.6), ("hipblaslt_mask5_level5.log", None)])
def test_a_damaged_amd_file_is_bad_input_naming_file_and_line(name, cut, tmp_path, capsys):
    """A real file damaged here: the kernel trace cut inside a row (its header intact), the hipBLASLt
    log's [Trace] matmul line with A's rows made non-numeric: one line naming the file and line, exit 3."""
    data = (AMD / name).read_bytes()
    if cut is not None:
        data = data[: int(len(data) * cut)]
    else:
        data = data.replace(b"Adesc=[type=R_16BF rows=48 ", b"Adesc=[type=R_16BF rows=4x8 ", 1)
        assert b"rows=4x8" in data
    bad = tmp_path / name
    bad.write_bytes(data)
    rc = main(["analyze", str(bad), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 3 and len(err) == 1 and f"{name}:" in err[0], err
    assert any(ch.isdigit() for ch in err[0].split(f"{name}:", 1)[1][:8]), err  # file:LINE


def test_an_empty_rocm_capture_is_told_the_amd_families_are_missing(tmp_path):
    """A capture whose manifest says device rocm and whose arm wrote its site file only (no AMD GPU:
    SYNTHETIC, the header line of the site probe's format): its missing lines are the AMD families',
    not CUDA's (the manifest's device is believed)."""
    from forensics.capture.kernel import build_manifest
    from forensics.capture.passes import Tools, plan_passes
    from forensics.judge.analysis import analyze
    import yaml

    plan = plan_passes("aten.mm.default", ["python", "t.py"], out=tmp_path, device="rocm", tools=Tools())
    (tmp_path / "manifest.yaml").write_text(yaml.safe_dump(build_manifest(plan, ["python", "t.py"], plan.instruments)))
    (tmp_path / "a1").mkdir()
    (tmp_path / "a1" / "sites.jsonl").write_text(json.dumps({
        "event": "header", "schema": "forensics.sites", "version": 1, "rank": 0, "pid": 1, "arm": "a1",
        "site_filter": "aten.mm.default", "steps": "0", "nvtx_domain": None, "host": "synthetic", "argv": ["t.py"]}) + "\n")
    missing = analyze(tmp_path, keep_going=True).missing
    assert any("rocprofv3 kernel trace" in m for m in missing) and any("hipBLASLt or rocBLAS" in m for m in missing)
    assert not any(word in m for m in missing for word in NVIDIA), missing
