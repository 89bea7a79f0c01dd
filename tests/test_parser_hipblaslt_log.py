"""parsers.hipblaslt_log on real hipBLASLt logs (tests/fixtures/amd, PROVENANCE.md): the trace line's
problem descriptor, the bench line's solution index, both readings of one program's call giving one
problem key, and the borders (cut, damaged, foreign)."""
from __future__ import annotations

from pathlib import Path

import pytest

from forensics.core.errors import BadInput
from parsers import hipblaslt_log as h

AMD = Path(__file__).resolve().parent / "fixtures" / "amd"
TRACE = AMD / "hipblaslt_mask5_level5.log"
BENCH = AMD / "hipblaslt_mask32_bench.log"
BENCH_2026 = AMD / "hipblaslt_bench_rocm_libraries12243.log"
PT2023 = AMD / "hipblaslt_rocm_pytorch1241_excerpt.log"


def test_trace_line_gives_the_problem_of_the_readme_program():
    log = h.read_log(TRACE)
    assert log.level_counts == {"Api": 15, "Trace": 1}
    assert log.functions["[Trace][rocblaslt_matmul]"] == 1 and log.functions["[Api][rocblaslt_matmul]"] == 1
    assert log.skipped_lines == 41  # the program's own non-blank lines between hipBLASLt's
    calls = h.read_calls(TRACE)
    assert len(calls) == 1
    r = calls.iloc[0]
    assert (r.m, r.n, r.k, r.transa, r.transb, r.layout) == (48, 176, 1024, "N", "T", "NT")
    assert (r.a_type, r.d_type, r.precision, r.out_precision) == ("R_16BF", "R_16BF", "bf16", "bf16")
    assert (r.lda, r.ldb, r.ldc, r.ldd) == (48, 176, 48, 48)
    assert (r.compute_type, r.scale_type, r.epilogue, r.alpha, r.beta) == ("COMPUTE_32F", "R_32F", "EPILOGUE_DEFAULT", "1", "0")
    assert bool(r.consistent) and r.pid == 1862601 and r.timestamp == "2025-02-28 11:24:46" and r.line == 14
    assert r.extra["computeDesc.biasPointer"] == "0x0" and r.extra["workSpaceSizeInBytes"] == "0"
    assert pd_na(r.solution_index)  # a trace line names no solution


def pd_na(v) -> bool:
    return v is None or str(v) == "<NA>"


def test_bench_line_gives_the_same_problem_and_its_solution_index():
    calls = h.read_calls(BENCH)
    assert len(calls) == 1
    r = calls.iloc[0]
    assert (r.m, r.n, r.k, r.layout, r.precision, r.out_precision) == (48, 176, 1024, "NT", "bf16", "bf16")
    assert (r.solution_index, r.algo_method, r.compute_type, r.epilogue) == (218160, "index", "f32_r", "none")
    assert r.bench.startswith("hipblaslt-bench --api_method c -m 48 -n 176 -k 1024") and r.bench.endswith("none")
    assert r.extra["api_method"] == "c" and r.extra["scaleA"] == "0"
    # the same program logged both ways: one problem key
    assert h.problem_key(r) == h.problem_key(h.read_calls(TRACE).iloc[0])


def test_both_logs_of_one_program_joined_pair_trace_with_bench(tmp_path):
    # the two real logs of the README's program, concatenated (a log of HIPBLASLT_LOG_MASK=5|32 would hold both)
    f = tmp_path / "both.log"
    f.write_text(TRACE.read_text() + BENCH.read_text())
    calls = h.read_calls(f)
    assert len(calls) == 1
    r = calls.iloc[0]
    assert r.source == "trace" and r.solution_index == 218160 and r.bench.startswith("hipblaslt-bench")
    assert calls.attrs["problems"] == ["82 lines are not hipBLASLt log lines (first at line 2); "
                                       "skipped (the program's own output?)"]


def test_trace_and_bench_that_disagree_are_not_paired_and_say_why(tmp_path):
    f = tmp_path / "mixed.log"
    f.write_text(TRACE.read_text() + BENCH_2026.read_text())
    calls = h.read_calls(f)
    assert len(calls) == 1 and pd_na(calls.iloc[0].solution_index)
    assert any("not paired (call 1 differs" in p for p in calls.attrs["problems"])


def test_newer_bench_line_with_flags():
    r = h.read_calls(BENCH_2026).iloc[0]
    assert (r.m, r.n, r.k, r.layout, r.solution_index) == (16, 512, 4096, "NN", 93338)
    assert r.extra["any_stride"] is True and r.extra["iters"] == "0"


def test_2023_log_fp32_bias_epilogue():
    calls = h.read_calls(PT2023)
    r = calls.iloc[0]
    assert (r.m, r.n, r.k, r.layout, r.precision, r.epilogue) == (128, 2048, 2400, "TN", "fp32", "EPILOGUE_BIAS")
    assert (r.lda, r.ldb, r.ldc) == (2400, 25272, 128) and bool(r.consistent)
    assert r.extra["workSpaceSizeInBytes"] == "1048576" and r.extra["stream"] == "0x73ed6b0"


def test_a_log_without_calls_says_what_it_holds(tmp_path):
    f = tmp_path / "api.log"
    f.write_text("".join(line + "\n" for line in PT2023.read_text().splitlines() if "[Trace]" not in line))
    calls = h.read_calls(f)
    assert calls.empty
    assert calls.attrs["problems"][0].startswith("no matmul call") and "[Api][rocblaslt_matmul_desc_create] x2" in calls.attrs["problems"][0]


def test_a_cut_last_line_is_bad_input(tmp_path):
    text = PT2023.read_text()
    f = tmp_path / "cut.log"
    cut = text.index("[Trace]") + 200
    f.write_text(text[:cut])
    with pytest.raises(BadInput) as e:
        h.read_log(f)
    assert e.value.line == 6 and "cut short" in str(e.value)


def test_a_damaged_header_is_bad_input(tmp_path):
    f = tmp_path / "damaged.log"
    f.write_text(PT2023.read_text().replace("[HIPBLASLT][690719][Api]", "[HIPBLASLT][690719[Api]", 1))
    with pytest.raises(BadInput) as e:
        h.read_log(f)
    assert e.value.line == 1 and "damaged hipBLASLt line header" in str(e.value)


def test_a_trace_line_with_an_unclosed_block_names_its_column(tmp_path):
    f = tmp_path / "block.log"
    f.write_text(PT2023.read_text().replace("ld=2400] B=", "ld=2400 B=", 1))
    with pytest.raises(BadInput) as e:
        h.read_log(f)
    assert e.value.line == 6 and "column" in str(e.value)


def test_a_bench_line_without_m_is_bad_input(tmp_path):
    f = tmp_path / "nom.log"
    f.write_text(BENCH_2026.read_text().replace("-m 16 ", ""))
    with pytest.raises(BadInput) as e:
        h.read_log(f)
    assert e.value.line == 1 and "without -m" in str(e.value)


@pytest.mark.parametrize("content, says", [
    (b"", "empty file"),
    (b"hello\nworld\n", "no hipBLASLt log line"),
    ((AMD / "rocprofv3_v3_kernel_trace.csv").read_bytes(), "no hipBLASLt log line"),
    (b"SQLite format 3\x00" + b"\x00" * 80, "SQLite"),
])
def test_foreign_files_are_refused_in_one_line(tmp_path, content, says):
    f = tmp_path / "x.log"
    f.write_bytes(content)
    with pytest.raises(BadInput) as e:
        h.read_calls(f)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_batched_trace_line_synthetic(tmp_path):
    """SYNTHETIC: the README's real trace line with the batch fields hipBLASLt's
    rocblaslt_matrix_layout_to_string prints when batch_count > 1 ("batch_count=%d batch_stride=%d")."""
    text = TRACE.read_text()
    for d, stride in (("ld=48]", 49152), ("ld=176]", 180224)):
        text = text.replace(d, d[:-1] + f" batch_count=4 batch_stride={stride}]")
    f = tmp_path / "batched.log"
    f.write_text(text)
    r = h.read_calls(f).iloc[0]
    assert r.batch_count == 4 and r.stride_a == 49152 and r.stride_b == 180224 and bool(r.consistent)
    assert h.problem_key(r) == (48, 176, 1024, "N", "T", "bf16", "bf16", 4)
    f.write_text(text.replace("batch_count=4 batch_stride=180224", "batch_count=2 batch_stride=180224", 1))
    assert not bool(h.read_calls(f).iloc[0].consistent)  # B says 2 where A says 4
