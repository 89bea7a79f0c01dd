"""ROCBLAS_LAYER=2 logs (bench lines only: one replayable ``rocblas-bench`` line per call) are call logs:
alone and in a capture folder each call is shown with its problem (issue 40: alone they were refused
"read with the capture it belongs to", in a folder "no kernel launches to judge"), and a last line
without its newline that is whole by its layout is read, not called "cut short".

Files: the rocBLAS documentation's ROCBLAS_LAYER=2 output (tests/fixtures/amd/PROVENANCE.md): the
sgemm line its `rocblas-bench -f gemm` run logs 12 times, and the one line of `-i 1 -j 0`; the
layer-3 log of ROCm/AMDMIGraphX#763 split into its trace and bench halves (what ROCBLAS_LOG_TRACE_PATH
and ROCBLAS_LOG_BENCH_PATH write)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from forensics.cli import main
from forensics.core.errors import BadInput
from forensics.instruments.recognise import recognise
from parsers import rocblas_log

AMD = Path(__file__).resolve().parent / "fixtures" / "amd"
TWELVE = AMD / "rocblas_layer2_docs_sgemm_12x.log"
ONE = AMD / "rocblas_layer2_docs_sgemm_128.log"
LAYER3 = AMD / "rocblas_layer3_migraphx763.log"
NVIDIA_WORDS = ("CUPTI", "cuBLASLt", "ncu", "Nsight")


def _analyze(target: Path, tmp_path: Path, capsys) -> tuple[int, str, dict]:
    rc = main(["analyze", str(target), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    return rc, out, json.loads((tmp_path / "out" / "analysis.json").read_text())


def test_a_bench_only_log_is_a_call_log():
    assert recognise(TWELVE).instrument == "rocblas_bench"
    calls = rocblas_log.read_calls(TWELVE)
    assert len(calls) == 12 and set(calls["source"]) == {"bench"}
    assert {(c.m, c.n, c.k, c.layout, c.precision) for c in calls.itertuples()} == {(4096, 4096, 4096, "NN", "fp32")}
    assert calls["bench"].str.startswith("./rocblas-bench -f gemm -r f32_r").all()


def test_alone_every_call_is_shown_with_its_problem(tmp_path, capsys):
    rc, out, rep = _analyze(TWELVE, tmp_path, capsys)
    assert rc == 1 and "instruments: rocblas_bench" in out
    assert "rocblas-bench(N,N) 4096x4096x4096 f32_r" in out and "12 (rocblas_bench)" in out
    [row] = rep["verdicts"]
    assert row["verdict"] == "SINGLE-SOURCE" and row["counts"]["hipblaslt"] == 12
    missing = [line for line in out.splitlines() if line.startswith("missing:")]
    assert any("rocprofv3" in m for m in missing) and not any(w in m for m in missing for w in NVIDIA_WORDS), missing


def test_in_a_folder_every_call_is_shown(tmp_path, capsys):
    cap = tmp_path / "cap"
    cap.mkdir()
    (cap / "rocblas_bench.log").write_bytes(TWELVE.read_bytes() + ONE.read_bytes())  # both runs' lines, one file
    rc, out, rep = _analyze(cap, tmp_path, capsys)
    assert "no kernel launches to judge" not in out
    got = {r["short_name"]: r["counts"]["hipblaslt"] for r in rep["verdicts"]}
    assert got == {"rocblas-bench(N,N) 4096x4096x4096 f32_r": 12, "rocblas-bench(N,N) 128x128x128 f32_r": 1}, out
    assert rc == 1 and "m=128 n=128 k=128 lda=128 ldb=128 ldc=128" in json.dumps(rep)


def test_beside_its_trace_file_the_bench_half_is_read_not_counted(tmp_path, capsys):
    """ROCBLAS_LAYER=3 with two paths: the trace file counts each call once; the bench file's lines
    repeat those calls and are read and said not counted."""
    lines = LAYER3.read_text().splitlines()
    cap = tmp_path / "cap"
    cap.mkdir()
    (cap / "rocblas_trace.log").write_text("".join(x + "\n" for x in lines if x.startswith("rocblas_")))
    (cap / "rocblas_bench.log").write_text("".join(x + "\n" for x in lines if "rocblas-bench" in x))
    # rocBLAS lines carry no pid and no time: the capture's manifest ties the two files to one run, as
    # forensics kernel's does (without it they are two untied runs, each counted in its own)
    (cap / "manifest.yaml").write_text("schema: 1\narms:\n  - {name: a1, role: arm}\nfiles:\n"
                                       "  - {path: rocblas_trace.log, arm: a1, rank: 0}\n"
                                       "  - {path: rocblas_bench.log, arm: a1, rank: 0}\n")
    rc, out, rep = _analyze(cap, tmp_path, capsys)
    assert sum(r["counts"]["hipblaslt"] for r in rep["verdicts"]) == 2  # not 4
    assert "rocblas_bench.log: 2 call(s) read, not counted for arm a1 rank 0: rocblas is counted" in \
        out.replace("\n      ", " "), out


def test_a_last_line_without_newline_is_read_when_whole(tmp_path):
    f = tmp_path / "rocblas_bench.log"
    f.write_bytes(ONE.read_bytes().rstrip(b"\n"))  # the documentation's one line, its newline cut
    calls = rocblas_log.read_calls(f)
    assert [(c.m, c.n, c.k) for c in calls.itertuples()] == [(128, 128, 128)]
    assert any("has no newline at end of file; it is whole by its layout" in p for p in calls.attrs["problems"])


@pytest.mark.parametrize("cut", [len(b"--ldc 128"), len(b" 128"), len(b"_r --transposeA N --transposeB N -m 128 -n 128 "
                                                                      b"-k 128 --alpha 1 --lda 128 --ldb 128 --beta 0 --ldc 128")])
def test_a_last_line_cut_inside_an_option_is_still_cut_short(tmp_path, cut):
    f = tmp_path / "rocblas_bench.log"
    f.write_bytes(ONE.read_bytes().rstrip(b"\n")[:-cut])
    with pytest.raises(BadInput, match="cut short"):
        rocblas_log.read_log(f)


def test_a_trace_line_without_newline_is_read_when_whole(tmp_path):
    f = tmp_path / "rocblas.log"
    f.write_bytes(LAYER3.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[0])  # ends on the second trace line, unterminated
    calls = rocblas_log.read_calls(f)
    assert len(calls) == 2 and calls["precision"].tolist() == ["fp32", "fp16"]


def test_hipblaslt_logs_too_read_a_whole_last_line_without_its_newline(tmp_path):
    from parsers import hipblaslt_log

    for name, calls in (("hipblaslt_bench_rocm_libraries12243.log", 1), ("hipblaslt_mask5_level5.log", 1)):
        lines = (AMD / name).read_text().splitlines()
        last = max(i for i, x in enumerate(lines) if "[HIPBLASLT]" in x or x.startswith("hipblaslt-bench"))
        f = tmp_path / name
        f.write_text("\n".join(lines[: last + 1]))  # the log's own lines up to its last hipBLASLt line, unterminated
        got = hipblaslt_log.read_calls(f)
        assert len(got) == calls and any("has no newline at end of file" in p for p in got.attrs["problems"]), name
    bench = (AMD / "hipblaslt_bench_rocm_libraries12243.log").read_text().rstrip("\n")
    assert bench.endswith(" --cold_iters 0 --iters 0")
    for cut in (len(" 0"), len("ers 0"), len(" 0 --iters 0")):  # an option left without its value, or cut in its name
        f = tmp_path / "cut.log"
        f.write_text(bench[:-cut])
        with pytest.raises(BadInput, match="cut short"):
            hipblaslt_log.read_log(f)
