"""parsers.rocblas_log on real rocBLAS logs (tests/fixtures/amd, PROVENANCE.md): the 2021 layout with
enum op values, the newer one with letters and the atomics mode, trace/bench pairing, borders."""
from __future__ import annotations

from pathlib import Path

import pytest

from forensics.core.errors import BadInput
from parsers import hipblaslt_log, rocblas_log as r

AMD = Path(__file__).resolve().parent / "fixtures" / "amd"
OLD = AMD / "rocblas_layer3_migraphx763.log"
NEW = AMD / "rocblas_layer3_rocm_libraries3413.log"


def test_2021_gemm_ex_with_enum_ops_fp32_then_fp16():
    calls = r.read_calls(OLD)
    assert calls.attrs["problems"] == [] and list(calls.columns) == list(hipblaslt_log.CALL_COLUMNS)
    assert calls["function"].tolist() == ["rocblas_gemm_ex"] * 2
    assert [(c.m, c.n, c.k, c.layout) for c in calls.itertuples()] == [(4096, 1, 25088, "NN")] * 2
    assert calls["precision"].tolist() == ["fp32", "fp16"] and calls["compute_type"].tolist() == ["f32_r", "f16_r"]
    assert calls["lda"].tolist() == [4096, 4096] and calls["ldb"].tolist() == [25088, 25088]
    assert calls["solution_index"].tolist() == [0, 0] and calls["beta"].tolist() == ["1", "1"]
    assert calls["bench"].str.startswith("./rocblas-bench -f gemm_ex --transposeA N").all()
    assert calls.iloc[0].extra == {"pointer_a": "0x7fadbf200000", "pointer_b": "0x7fb655204000",
                                   "pointer_c": "0x7fb655266000", "pointer_d": "0x7fb655266000", "algo": "0", "flags": "0"}


def test_newer_batched_ex_with_letters_and_atomics():
    log = r.read_log(NEW)
    assert log.functions == {"rocblas_set_stream": 3, "rocblas_gemm_batched_ex": 3}
    assert log.bench_functions == {"gemm_batched_ex": 2}
    calls = r.read_calls(NEW)
    assert [(c.m, c.n, c.k, c.layout, c.batch_count) for c in calls.itertuples()] == [
        (256, 64, 128, "TN", 96), (128, 64, 256, "TN", 96), (256, 64, 128, "TN", 96)]
    assert calls["precision"].tolist() == ["fp16"] * 3 and calls["out_precision"].tolist() == ["fp32", "fp16", "fp32"]
    assert {c.extra["atomics"] for c in calls.itertuples()} == {"atomics_not_allowed"}
    assert calls["bench"].notna().tolist() == [True, True, False]  # the excerpt's third bench line was cut
    assert calls.attrs["problems"] == ["2 of 3 trace call(s) paired with a bench line (2 bench line(s)): "
                                       "the calls are the trace lines"]


def test_bench_lines_alone_are_the_calls(tmp_path):
    f = tmp_path / "bench.log"
    f.write_text("".join(line + "\n" for line in OLD.read_text().splitlines() if "rocblas-bench" in line))
    calls = r.read_calls(f)
    assert calls["source"].tolist() == ["bench", "bench"] and calls["precision"].tolist() == ["fp32", "fp16"]
    assert calls["m"].tolist() == [4096, 4096] and calls["solution_index"].tolist() == [0, 0]


def test_rocblas_and_hipblaslt_calls_share_a_problem_key():
    row = r.read_calls(OLD).iloc[0]
    assert hipblaslt_log.problem_key(row) == (4096, 1, 25088, "N", "N", "fp32", "fp32", 1)


def test_a_trace_line_that_does_not_follow_the_layout_is_bad_input(tmp_path):
    f = tmp_path / "shifted.log"
    f.write_text(OLD.read_text().replace(",0x7fadbf200000,f32_r,", ",f32_r,0x7fadbf200000,", 1))
    with pytest.raises(BadInput) as e:
        r.read_log(f)
    assert e.value.line == 1 and "is not a rocBLAS type" in str(e.value)


def test_a_trace_line_with_too_few_arguments_is_bad_input(tmp_path):
    f = tmp_path / "short.log"
    f.write_text(NEW.read_text().replace(",0,0,none,atomics_not_allowed", "", 1))
    with pytest.raises(BadInput) as e:
        r.read_log(f)
    assert e.value.line == 2 and "the layout read has 24" in str(e.value)


def test_a_cut_last_line_is_bad_input(tmp_path):
    text = OLD.read_text()
    f = tmp_path / "cut.log"
    f.write_text(text[: len(text) - 40])
    with pytest.raises(BadInput) as e:
        r.read_log(f)
    assert e.value.line == 4 and "cut short" in str(e.value)


def test_an_unread_gemm_layout_is_counted_and_lost(tmp_path):
    f = tmp_path / "sgemm.log"
    f.write_text(NEW.read_text().replace("rocblas_gemm_batched_ex,", "rocblas_gemm_strided_batched_ex,")
                 .replace("rocblas-bench -f gemm_batched_ex", "rocblas-bench -f gemv"))
    calls = r.read_calls(f)
    assert calls.empty
    assert calls.attrs["losses"] == ["3 GEMM trace line(s) of a layout not read are not among the calls"]
    assert any("rocblas_gemm_strided_batched_ex trace line(s): this layout is not read" in p for p in calls.attrs["problems"])


@pytest.mark.parametrize("content, says", [
    (b"", "empty file"),
    (b"hello\n", "no rocBLAS trace or bench line"),
    ((AMD / "hipblaslt_mask32_bench.log").read_bytes(), "no rocBLAS trace or bench line"),
    (b"\x7fELF\x02\x01", "ELF"),
])
def test_foreign_files_are_refused_in_one_line(tmp_path, content, says):
    f = tmp_path / "x.log"
    f.write_bytes(content)
    with pytest.raises(BadInput) as e:
        r.read_calls(f)
    assert says in str(e.value) and "\n" not in str(e.value)
