"""parsers.cublas_legacy: the CUBLAS_LOGINFO_DBG multi-line format (cuBLAS docs, cublasLoggerConfigure()).

real_legacy_sgemm_excerpt.log holds the verbatim lines of a real cuBLAS 13.4.1 record quoted from a
public repository file (the quote elides A/lda/B/ldb/beta/C, so those are absent); synthetic_legacy_gemmex.log is
SYNTHETIC (cublasGemmEx + strided batched records in the same shape).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from forensics.core.errors import BadInput
from parsers.cublas_legacy import COLUMNS, enum_name, pointer, read_log

DATA = Path(__file__).parent / "data" / "cublaslt"
REAL = DATA / "real_legacy_sgemm_excerpt.log"
SYNTH = DATA / "synthetic_legacy_gemmex.log"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


def write(tmp_path: Path, data: str | bytes, name: str = "cublas_legacy.log") -> Path:
    p = tmp_path / name
    p.write_bytes(data.encode() if isinstance(data, str) else data)
    return p


def test_real_sgemm_record():
    df = read_log(REAL)
    assert len(df) == 1 and list(df.columns) == list(COLUMNS)
    r = df.iloc[0]
    assert (r.function, r.version, r.line) == ("cublasSgemm_v2", "13.4.1", 1)
    assert (r.transa, r.transb, r.m, r.n, r.k, r.ldc) == ("T", "N", 2, 1, 2, 2)
    assert (r.process, r.thread, r.gpu) == (10673, "123934205857792", 0)
    assert r.handle == "0x1f9560f0"  # doubled 0x0x prefix normalised
    assert (r.stream, r.stream_kind, r.math_mode) == ("0x0", "defaultStream", "CUBLAS_DEFAULT_MATH")
    assert (r.time, r.elapsed_s) == ("2026-09-11T18:11:38", 1.0)
    assert r.compiled_with == "GNU GCC/G++ / 8.5.0 20210514 (Red Hat 8.5.0-26)"
    assert r.args["alpha"] == "0x7ffda216dedc" and r.arg_types["alpha"] == "float"
    assert r.args["transa"] == "CUBLAS_OP_T(1)"
    assert r.signature.startswith("cublasStatus_t cublasSgemm_v2(cublasHandle_t, cublasOperation_t")
    assert df.attrs["problems"] == []


def test_synthetic_gemmex_and_batched_records():
    df = read_log(SYNTH)
    assert list(df.line) == [1, 24]
    ex, batched = df.iloc[0], df.iloc[1]
    assert (ex.function, ex.transa, ex.transb, ex.m, ex.n, ex.k) == ("cublasGemmEx", "N", "T", 768, 3072, 4096)
    assert (ex.lda, ex.ldb, ex.ldc) == (768, 3072, 768)
    assert (ex.a_type, ex.b_type, ex.c_type) == ("CUDA_R_16BF", "CUDA_R_16BF", "CUDA_R_32F")
    assert (ex.compute_type, ex.algo) == ("CUBLAS_COMPUTE_32F", "CUBLAS_GEMM_DEFAULT")
    assert (ex.stream, ex.stream_kind) == ("0x55d0c0de4000", "non-blocking")
    assert ex.math_mode == "CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION"
    assert ex.elapsed_s == pytest.approx(0.03)
    assert (batched.batch_count, batched.args["strideA"]) == (8, "8192")
    assert batched.a_type is None or str(batched.a_type) == "<NA>"


def test_value_helpers():
    assert pointer("POINTER (IN HEX:0x0x1f9560f0)") == "0x1f9560f0"
    assert pointer("POINTER (IN HEX:0x(nil)) (defaultStream)") == "0x0"
    assert pointer("POINTER (IN HEX:0x7f00)") == "0x7f00"
    assert enum_name("CUBLAS_GEMM_DEFAULT(-1)") == "CUBLAS_GEMM_DEFAULT"
    assert enum_name("1.000000") == "1.000000"


def test_interleaved_program_output_is_skipped_and_reported(tmp_path):
    text = "step 0\n" + SYNTH.read_text() + "done\n"
    df = read_log(write(tmp_path, text))
    assert list(df.line) == [2, 25]
    assert any("2 lines are not legacy cuBLAS log lines (first at line 1)" in s for s in df.attrs["problems"])


def _bad(path: Path, **kw) -> BadInput:
    with pytest.raises(BadInput) as e:
        read_log(path, **kw)
    assert e.value.path == str(path) and "\n" not in str(e.value)
    return e.value


def test_empty_and_foreign_files(tmp_path):
    assert "empty file" in _bad(write(tmp_path, "")).message
    assert "JSON" in _bad(write(tmp_path, '{"traceEvents": []}', "t.json")).message
    lt = (DATA / "real_lines.log").read_bytes()
    assert "cuBLASLt log" in _bad(write(tmp_path, lt, "lt.log")).message
    err = _bad(write(tmp_path, "hello\nworld\n", "text.log"))
    assert "no 'I! cuBLAS" in err.message and err.line == 1
    sqlite = CORPUS / "nsys" / "extrap_ex-gpu.s10.sqlite"
    if sqlite.exists():
        assert "SQLite" in _bad(sqlite).message


def test_binary_garbage(tmp_path):
    err = _bad(write(tmp_path, REAL.read_bytes()[:300] + b"\xc3\x28\x00\xff"))
    assert err.line == 3


def test_argument_line_before_any_header(tmp_path):
    lines = REAL.read_text().splitlines()
    err = _bad(write(tmp_path, "\n".join(lines[1:]) + "\n"))
    assert err.line == 1 and "outside a call" in err.message


def test_malformed_argument_line(tmp_path):
    lines = REAL.read_text().splitlines()
    lines[4] = "i!  m: type=int val=2"
    err = _bad(write(tmp_path, "\n".join(lines) + "\n"))
    assert err.line == 5 and "malformed argument line" in err.message
    lines[4] = "i!  m: type=int; val=two"
    assert "'two' is not an integer" in _bad(write(tmp_path, "\n".join(lines) + "\n", "b.log")).message


def test_truncated_tail(tmp_path):
    data = SYNTH.read_bytes()
    cut = data[: data.index(b"i!  ldb: type=int; val=64") + 12]  # cut mid-line in the 2nd record
    p = write(tmp_path, cut)
    err = _bad(p)
    assert err.line == 36 and "cut short" in err.message
    df = read_log(p, tolerate_truncated_tail=True)
    assert list(df.function) == ["cublasGemmEx"]
    assert any("line 36" in s for s in df.attrs["problems"])
    # cut at a line boundary, before the context line: the last call is incomplete
    cut2 = data[: data.index(b"i!  ldb: type=int; val=64")]
    err = _bad(write(tmp_path, cut2, "cut2.log"))
    assert "ends without its Process= context line" in err.message and err.line == 35
    assert list(read_log(tmp_path / "cut2.log", tolerate_truncated_tail=True).function) == ["cublasGemmEx"]
