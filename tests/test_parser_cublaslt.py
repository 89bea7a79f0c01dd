"""parsers.cublaslt: real lines, lines RENDERED from cuBLAS 13.10's format strings, derivation, bad input.

Fixtures live in tests/data/cublaslt/ (README there says which lines are verbatim real output and
which are rendered). Lines built inside a test are SYNTHETIC and follow the Trace format string.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pandas as pd
import pytest

import parsers._text as text_mod
from forensics.core.errors import BadInput
from forensics.core.model import CALL_KEY_COLUMNS
from parsers import cublaslt
from parsers._text import TokenError, flat_pairs, format_kv, tokenize_kv
from parsers.cublaslt import CALL_COLUMNS, algo_key, iter_calls, problem_key, read_log

DATA = Path(__file__).parent / "data" / "cublaslt"
REAL = DATA / "real_lines.log"
RENDERED = DATA / "rendered_level5.log"
CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"


def _corpus(rel: str) -> Path:
    p = CORPUS / rel
    if not p.exists():
        pytest.skip(f"corpus file {p} absent")
    return p


def synthetic_trace(a: tuple[int, int], b: tuple[int, int], c: tuple[int, int], compute: list | None = None,
                    algo: list | None = None, header: str = "[cublasLt][1][Trace][cublasLtMatmul]") -> str:
    """SYNTHETIC [Trace] line in the real [Trace] format from stored (rows, cols) of A, B, C (= D)."""
    def desc(rc: tuple[int, int]) -> list:
        return [("type", "R_32F"), ("rows", str(rc[0])), ("cols", str(rc[1])), ("ld", str(rc[0]))]
    pairs = [("A", "0X1000"), ("Adesc", desc(a)), ("B", "0X2000"), ("Bdesc", desc(b)),
             ("C", "0X3000"), ("Cdesc", desc(c)), ("D", "0X3000"), ("Ddesc", desc(c)),
             ("computeDesc", [("computeType", "COMPUTE_32F"), ("scaleType", "R_32F")] + (compute or [])),
             ("algo", algo or [("algoId", "21"), ("tile", "MATMUL_TILE_32x32"), ("stages", "MATMUL_STAGES_64x1")]),
             ("workSpace", "0X0"), ("workSpaceSizeInBytes", "0"), ("beta", "0"), ("outOfPlace", "0"), ("stream", "0X0")]
    return f"{header} {format_kv(pairs)}"


def write(tmp_path: Path, text: str | bytes, name: str = "cublaslt.1.log") -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


# --- real lines (verbatim, tests/data/cublaslt/real_lines.log) -----------------------------------

def test_real_trace_lines_problem_and_algo_descriptors():
    log = read_log(REAL)
    c = log.calls
    assert list(c.line) == [1, 2, 3, 4]
    assert list(c.pid) == [3794797, 8291, 557785, 570888]
    assert c.timestamp.isna().tolist() == [True, False, False, False]
    assert c.timestamp[1] == "2023-04-07 04:57:13"
    assert list(c.function) == ["cublasLtSSSMatmul", "cublasLtMatmul", "cublasLtMatmul", "cublasLtMatmul"]
    assert c.type_hint[0] == "SSS" and c.type_hint[1:].isna().all()
    # fp32 1000^3; fp16 C(32x64) = A(32x16) B(16x64); FP8 transb=T: B stored n x k = 128 x 1088;
    # NVFP4 transa=T: A stored k x m = 1088 x 64.
    assert c[["m", "n", "k"]].values.tolist() == [[1000, 1000, 1000], [32, 64, 16], [64, 128, 1088], [64, 64, 1088]]
    assert list(c.layout) == ["NN", "NN", "NT", "TN"]
    assert c.consistent.tolist() == [True] * 4
    assert list(c.a_type) == ["R_32F", "R_16F", "R_8F_E4M3", "R_4F_E2M1"]
    assert list(c.d_type) == ["R_32F", "R_16F", "R_16BF", "R_32F"]
    assert list(c.ldc) == [1000, 32, 64, 64]
    assert list(c.algo_id) == [21, 21, 66, 70]
    assert list(c.tile) == ["MATMUL_TILE_128x128", "MATMUL_TILE_32x32", "MATMUL_TILE_128x128", "MATMUL_TILE_128x128"]
    assert list(c.stages) == ["MATMUL_STAGES_32x5", "MATMUL_STAGES_64x1", "MATMUL_STAGES_128xAUTO", "MATMUL_STAGES_256xAUTO"]
    assert c.custom_option[2] == 3 and pd.isna(c.custom_option[3])
    assert c.cluster_shape[3] == "CLUSTER_SHAPE_2x1x1" and c.scheduling_mode[3] == "0"
    assert c.compute_type[0] == "COMPUTE_32F_FAST_TF32" and c.sm_count_target[0] == 108
    assert list(c.a_scale_mode[2:]) == ["VEC32_UE8M0", "VEC16_UE4M3"]
    assert c.beta.tolist() == ["0", "?", "0", "0"]
    assert c.out_of_place.tolist() == [0, 0, 1, 1]
    assert c.pointer_a[0] == "0X400380DD0A00" and c.pointer_c[2] == "0X0" and c.stream[1] == "0X7EB04D0"
    # fields without a column are kept in extra, nested ones as desc.key
    assert c.extra[2] == {"computeDesc.aScalePointer": "0x736cb30b4c00",
                          "computeDesc.bScalePointer": "0x736cb30ba200", "workSpace": "0X0"}
    # the frame keeps each row's line number, not its text: the text is read back from the file, exactly
    assert "raw" not in c.columns
    file_lines = REAL.read_text().splitlines()
    assert log.raw(c) == [file_lines[n - 1] for n in c.line]
    assert log.raw(c)[0].startswith("[cublasLt][3794797][Trace][cublasLtSSSMatmul] A=0X400380DD0A00")
    assert cublaslt.raw_lines(REAL, [int(c.line[2]), int(c.line[0])]) == [file_lines[c.line[2] - 1], file_lines[c.line[0] - 1]]
    with pytest.raises(BadInput, match="no line 100000"):
        cublaslt.raw_lines(REAL, [100_000])


def test_real_heuristic_and_error_lines():
    log = read_log(REAL)
    h = log.heuristics.iloc[0]
    assert (h.line, h.pid, h.function) == (5, 133267, "cublasLtMatmulAlgoGetHeuristic")
    assert (h.transa, h.transb, h.a_rows, h.a_cols, h.c_rows, h.c_cols) == ("N", "T", 128, 1088, 128, 64)
    assert h.max_workspace_bytes == 33554432
    assert h.preference == {"maxWavesCount": "0.0", "maxWorkspaceSizeinBytes": "33554432"}
    assert h.params["computeDesc.aScaleMode"] == "VEC32_UE8M0"
    assert list(log.errors.line) == [6, 7]
    assert log.errors.message[0] == "Failed to query heuristics."
    assert log.errors.params[0] == {}
    assert log.level_counts == {"Trace": 4, "Api": 1, "Error": 2}
    assert log.problems == [] and log.skipped_lines == 0


def test_frame_columns_follow_the_contract():
    c = read_log(REAL).calls
    assert list(c.columns) == list(CALL_COLUMNS)
    assert {str(c[col].dtype) for col, t in CALL_COLUMNS.items() if t == "Int64"} == {"Int64"}
    assert set(CALL_KEY_COLUMNS) <= set(c.columns)


# --- level-5 log RENDERED from the 13.10 format strings ----------------------------------------

def test_rendered_level5_calls_and_buckets():
    log = read_log(RENDERED)
    c = log.calls
    # the [Api][cublasLtMatmul] line (10) is not a second call: calls come from [Trace] only
    assert list(c.line) == [11, 12, 13, 14, 16, 17]
    assert c[["m", "n", "k"]].values.tolist() == [
        [256, 512, 1024], [768, 3072, 4096], [32, 16, 64], [128, 32, 64], [32, 64, 16], [32, 64, 16]]
    assert list(c.layout) == ["TN", "NT", "TT", "NN", "NN", "NN"]
    assert c.consistent.tolist() == [True, True, True, True, True, False]  # line 17: A k=16, B k=32
    nt = c.iloc[1]
    assert (nt.num_splits_k, nt.reduction_scheme, nt.cta_swizzling) == (4, "REDUCTION_SCHEME_INPLACE", "1")
    assert (nt.workspace_size, nt.beta, nt.c_type) == (4194304, "1", "R_32F")
    batched = c.iloc[3]
    assert (batched.type_hint, batched.batch_count, batched.stride_a, batched.stride_b, batched.stride_c) == (
        "SSS", 8, 8192, 2048, 4096)
    tst = c.iloc[4]
    assert (tst.type_hint, tst.epilogue, tst.sm_count_target, tst.inner_shape) == ("TST", "EPILOGUE_BIAS", 14, "MATMUL_INNER_SHAPE_MMA16816")
    assert (tst.a_order, tst.b_order) == ("ORDER_ROW", "ORDER_COL")  # issue 12 defect 10
    assert tst.extra == {"computeDesc.biasPointer": "0x7f0001200000", "workSpace": "0X0"}
    assert c.timestamp.isna().tolist() == [False, False, True, False, False, False]
    assert list(log.api.function) == [
        "cublasLtCreate", "cublasLtMatmulDescCreate", "cublasLtMatmulDescSetAttribute", "cublasLtMatrixLayoutCreate",
        "cublasLtMatrixLayoutCreate", "cublasLtMatrixLayoutCreate", "cublasLtMatmulPreferenceSetAttribute",
        "cublasLtMatmul", "cublasLtMatmulDescDestroy", "cublasLtDestroy"]
    assert log.api.params[1] == {"matmulDesc": "0X7FFD00001000", "computeType": "COMPUTE_32F", "scaleType": "0"}
    h = log.heuristics.iloc[0]
    assert (h.function, h.m, h.n, h.k, h.layout, h.a_type, h.max_workspace_bytes) == (
        "cublasLtMatmulAlgoGetHeuristic", 256, 512, 1024, "TN", "R_16BF", 4194304)
    assert problem_key(h) == problem_key(c.iloc[0])  # the query joins its call
    assert log.facts == [{"pid": 4242, "line": 2, "library_version": "13.10", "device": 0, "sm_count": 132,
                          "max_shared_mem_per_block": 49152, "max_shared_mem_per_block_optin": 232448}]
    assert log.info.message[1].startswith("Unsupported M dimension for FP8")
    assert log.hints.message[0].startswith("The minimum buffer alignment of matrix A (16)")
    assert log.errors.function.tolist() == ["cublasLtMatmul"]
    assert log.problems == []


@pytest.mark.parametrize(
    "a, b, c, trans, mnk, layout",
    [
        # hand-computed (column-major): op(A) m x k, op(B) k x n, C m x n
        ((5, 3), (3, 7), (5, 7), [], (5, 7, 3), "NN"),
        ((3, 5), (3, 7), (5, 7), [("transa", "OP_T")], (5, 7, 3), "TN"),
        ((5, 3), (7, 3), (5, 7), [("transb", "OP_T")], (5, 7, 3), "NT"),
        ((3, 5), (7, 3), (5, 7), [("transa", "OP_T"), ("transb", "OP_T")], (5, 7, 3), "TT"),
        ((5, 3), (3, 7), (5, 7), [("transa", "OP_N"), ("transb", "OP_N")], (5, 7, 3), "NN"),  # explicit N
        ((4096, 1024), (4096, 3072), (1024, 3072), [("transa", "OP_T")], (1024, 3072, 4096), "TN"),  # TE fprop
    ],
)
def test_derivation_hand_computed(tmp_path, a, b, c, trans, mnk, layout):
    p = write(tmp_path, synthetic_trace(a, b, c, compute=trans) + "\n")
    row = read_log(p).calls.iloc[0]
    assert (row.m, row.n, row.k) == mnk
    assert row.layout == layout
    assert bool(row.consistent) is True


@pytest.mark.parametrize(
    "a, b, c, trans",
    [
        ((5, 3), (4, 7), (5, 7), []),  # A says k=3, B says k=4
        ((5, 3), (3, 7), (6, 7), []),  # C rows 6 != A rows 5
        ((5, 3), (3, 7), (5, 7), [("transa", "OP_T")]),  # transposed A no longer fits
    ],
)
def test_inconsistent_descriptor_flagged_not_raised(tmp_path, a, b, c, trans):
    p = write(tmp_path, synthetic_trace(a, b, c, compute=trans) + "\n")
    row = read_log(p).calls.iloc[0]
    assert bool(row.consistent) is False
    assert row.m == c[0] and row.n == c[1]


def test_problem_and_algo_keys(tmp_path):
    lines = [synthetic_trace((5, 3), (3, 7), (5, 7)), synthetic_trace((5, 3), (3, 7), (5, 7)),
             synthetic_trace((5, 3), (3, 7), (5, 7), algo=[("algoId", "6"), ("numSplitsK", "2")])]
    c = read_log(write(tmp_path, "\n".join(lines) + "\n")).calls
    keys = [problem_key(r) for _, r in c.iterrows()]
    assert keys[0] == (5, 7, 3, "N", "N") + ("R_32F",) * 4 + ("ORDER_COL",) * 4 and len(set(keys)) == 1
    algos = [algo_key(r) for _, r in c.iterrows()]
    assert algos[0] == algos[1] != algos[2]
    assert algos[2][:5] == (6, None, None, None, 2)
    assert cublaslt.call_key is problem_key


def test_iter_calls_streams_the_same_rows():
    streamed = list(iter_calls(RENDERED))
    frame = read_log(RENDERED).calls
    assert [r["line"] for r in streamed] == list(frame.line)
    assert [r["k"] for r in streamed] == list(frame.k)


def test_chunked_reading_and_frame_building_match(monkeypatch):
    whole = read_log(RENDERED).calls
    monkeypatch.setattr(text_mod, "CHUNK_BYTES", 97)  # lines longer than a chunk, many chunks
    monkeypatch.setattr(cublaslt, "ROWS_PER_CHUNK", 2)
    pieces = read_log(RENDERED).calls
    pd.testing.assert_frame_equal(whole.drop(columns=["extra"]), pieces.drop(columns=["extra"]))
    assert list(whole.extra) == list(pieces.extra)


def test_stdout_capture_skips_program_output(tmp_path):
    line = synthetic_trace((5, 3), (3, 7), (5, 7))
    p = write(tmp_path, f"epoch 1 loss=0.5\n{line}\n[2026-01-01 00:00:00] INFO trainer: step 1\n{line}\n")
    log = read_log(p)
    assert list(log.calls.line) == [2, 4]
    assert log.skipped_lines == 2
    assert any("2 lines are not cuBLASLt log lines (first at line 1)" in s for s in log.problems)


def test_log_without_matmul_calls_is_valid_and_visible(tmp_path):
    p = write(tmp_path, "[cublasLt][52944][Error][cublasLtMatmulAlgoGetHeuristic] Failed to query heuristics.\n")
    log = read_log(p)
    assert log.calls.empty and list(log.calls.columns) == list(CALL_COLUMNS)
    assert len(log.errors) == 1
    assert any("no matmul calls" in s for s in log.problems)


# --- tokenizer -----------------------------------------------------------------------------------

def test_tokenizer_nested_and_suffix_keys():
    text = "a=1 b=[c=2 d=[e=3 f=[]]] matmulDesc[out]=0x1 beta=? v=x=y"
    expected = [("a", "1"), ("b", [("c", "2"), ("d", [("e", "3"), ("f", [])])]),
                ("matmulDesc[out]", "0x1"), ("beta", "?"), ("v", "x=y")]
    assert tokenize_kv(text) == expected
    assert flat_pairs(text) == expected
    assert tokenize_kv(format_kv(expected)) == expected


@pytest.mark.parametrize("bad, column", [("a=[b=1 c=2", 3), ("a=1 ]", 5), ("a=1 word", 5), ("a=[b=1]c=2", 8)])
def test_tokenizer_errors_say_where(bad, column):
    with pytest.raises(TokenError) as e:
        tokenize_kv(bad)
    assert e.value.column == column
    with pytest.raises(TokenError):
        flat_pairs(bad)


def test_nested_block_is_damage_and_unknown_keys_are_kept_and_noted(tmp_path):
    """cuBLASLt's formats have no nested blocks: one is damage (file:line). A key outside the 13.10
    tables (a newer library) is kept and said once."""
    line = synthetic_trace((5, 3), (3, 7), (5, 7), compute=[("future", [("x", "1")])])
    err = _bad(write(tmp_path, line + "\n"))
    assert err.line == 1 and "nested" in err.message
    line = synthetic_trace((5, 3), (3, 7), (5, 7), compute=[("futureKnob", "7")]) + " newTopLevelField=abc"
    log = read_log(write(tmp_path, line + "\n" + line + "\n", "ok.log"))
    row = log.calls.iloc[0]
    assert row.extra["computeDesc.futureKnob"] == "7" and row.extra["newTopLevelField"] == "abc" and row.m == 5
    assert log.problems == ["line 1: not in cuBLAS 13.10's tables, kept as printed: field newTopLevelField",
                            "line 1: not in cuBLAS 13.10's tables, kept as printed: field computeDesc.futureKnob"]


# --- bad input: one BadInput naming file and line ------------------------------------------------

def _bad(path: Path, **kw) -> BadInput:
    with pytest.raises(BadInput) as e:
        read_log(path, **kw)
    err = e.value
    assert err.path == str(path)
    assert "\n" not in str(err)
    return err


def test_empty_file(tmp_path):
    err = _bad(write(tmp_path, ""))
    assert "empty file" in err.message and err.line is None
    assert "empty file" in _bad(write(tmp_path, "\n  \n", "blank.log")).message


def test_missing_file(tmp_path):
    assert "cannot read" in _bad(tmp_path / "nope.log").message


def test_json_file(tmp_path):
    err = _bad(write(tmp_path, json.dumps({"traceEvents": []}), "trace.json"))
    assert "JSON" in err.message and err.line == 1
    assert "JSON" in _bad(write(tmp_path, '[{"a": 1}]', "list.json")).message


def test_gzip_file(tmp_path):
    assert "gzip" in _bad(write(tmp_path, gzip.compress(b"[cublasLt]"), "x.json.gz")).message


def test_real_sqlite_and_ncu_files_are_refused():
    assert "SQLite" in _bad(_corpus("nsys/extrap_con_kernel.sqlite")).message
    assert "Nsight Compute" in _bad(_corpus("ncu/extrap_ex-gpu.s10.ncu-rep")).message
    assert "gzip" in _bad(_corpus("kineto/hta_triton_example__triton_example.json.gz")).message


def test_binary_garbage_names_the_line(tmp_path):
    ok = REAL.read_bytes()
    err = _bad(write(tmp_path, ok + b"\xff\xfe\x80garbage\n"))
    assert err.line == 8 and "UTF-8" in err.message
    err = _bad(write(tmp_path, ok[:50] + b"\x00\x00" + ok[50:], "nul.log"))
    assert err.line == 1 and "NUL" in err.message


def test_line_cut_in_the_middle_of_the_file(tmp_path):
    lines = REAL.read_text().splitlines()
    lines[1] = lines[1][:150]  # inside Bdesc=[...]
    err = _bad(write(tmp_path, "\n".join(lines) + "\n"))
    assert err.line == 2 and "unterminated" in err.message


def test_damaged_header(tmp_path):
    err = _bad(write(tmp_path, REAL.read_text() + "[cublasLt][12x][Trace][cublasLtMatmul] A=0X0\n"))
    assert err.line == 8 and "header" in err.message


def test_bad_integer(tmp_path):
    line = synthetic_trace((5, 3), (3, 7), (5, 7)).replace("rows=5", "rows=five", 1)
    err = _bad(write(tmp_path, line + "\n"))
    assert err.line == 1 and "Adesc.rows='five' is not an integer" in err.message


def test_truncated_last_line_is_an_error_unless_tolerated(tmp_path):
    data = REAL.read_bytes()
    cut = data[: data.index(b"\n[2025-11-03 19:07:51]") + 200]  # file ends inside line 4
    p = write(tmp_path, cut)
    err = _bad(p)
    assert err.line == 4 and "cut short" in err.message
    log = read_log(p, tolerate_truncated_tail=True)
    assert list(log.calls.line) == [1, 2, 3]
    assert len(log.problems) == 1 and log.problems[0].startswith("line 4: last line is cut short")
    # a cut that happens to leave a parseable line is still a cut line
    whole_line_cut = data[: data.index(b" stream=0X7EB04D0") + len(" stream=0X7E")]
    assert _bad(write(tmp_path, whole_line_cut, "cut2.log")).line == 2


def test_other_instrument_logs(tmp_path):
    legacy = (DATA / "real_legacy_sgemm_excerpt.log").read_bytes()
    assert "legacy cuBLAS log" in _bad(write(tmp_path, legacy)).message
    err = _bad(write(tmp_path, "==PROF== Connected to process 1\nhello\n", "ncu.txt"))
    assert "no cuBLASLt log line found" in err.message and err.line == 1


# --- fast path (templates keyed on the line without its pointer values) ---------------------------

def _slow_rows(path: Path) -> list[dict]:
    """Reference: every [Trace] matmul line parsed on its own, without templates."""
    reader = cublaslt._Reader(path, False)
    return [cublaslt._call_row(reader, cublaslt._Line(n, ts, pid, lvl, fn, rest, raw))
            for n, ts, pid, lvl, fn, rest, raw in reader.lines()
            if lvl == "Trace" and cublaslt.MATMUL_FN_RE.fullmatch(fn)]


def test_fast_path_matches_per_line_parse(tmp_path):
    scale = [("aScalePointer", "0x{:x}"), ("bScalePointer", "0x{:x}"), ("aScaleMode", "VEC32_UE8M0")]
    lines = []
    for i in range(12):  # SYNTHETIC: four shapes, fresh pointers on every line
        shape = i % 4
        compute = [(k, v.format(0x7000 + 16 * i)) for k, v in scale] if shape == 1 else [("transa", "OP_T")] * (shape == 2)
        line = synthetic_trace((5, 3) if shape != 2 else (3, 5), (3, 7), (5, 7), compute=compute)
        lines.append(line.replace("0X1000", f"0X{0x1000 + i:X}").replace("0X3000", f"0X{0x9000 + i:X}"))
    p = write(tmp_path, "\n".join(lines) + "\n")
    frame = read_log(p).calls
    reference = _slow_rows(p)
    assert len(frame) == len(reference) == 12
    for (_, row), ref in zip(frame.iterrows(), reference):
        for col in CALL_COLUMNS:
            got, want = row[col], ref.get(col)
            assert (pd.isna(got) and want is None) or got == want, (col, got, want)
    assert frame.pointer_a.tolist()[:3] == ["0X1000", "0X1001", "0X1002"]
    frame.extra[1]["computeDesc.aScalePointer"] = "changed"  # each row owns its extra dict
    assert frame.extra[5]["computeDesc.aScalePointer"] == "0x7050"
    streamed = [r["pointer_c"] for r in iter_calls(p)]
    assert pd.Series(streamed, dtype="string").equals(frame.pointer_c)


def test_crlf_line_endings(tmp_path):
    crlf = read_log(write(tmp_path, RENDERED.read_bytes().replace(b"\n", b"\r\n")))
    plain = read_log(RENDERED)
    pd.testing.assert_frame_equal(crlf.calls.drop(columns=["extra"]), plain.calls.drop(columns=["extra"]))
    assert crlf.raw(crlf.calls) == plain.raw(plain.calls)  # the CR is not part of the line read back
    assert not any(t.endswith("\r") for t in crlf.raw(crlf.calls))
