"""The cuBLASLt grammar against the logger's own strings, and every real cuBLASLt log of the corpus.

``../shared/corpus/cublaslt/libcublasLt-13.10.0.20.strings.txt`` holds the format strings, API
names and enum/attribute tables of libcublasLt.so.13 (cuBLAS 13.10.0.20). The grammar embeds
what it needs (a plain clone has no ../shared); these tests prove the embedded copy equals the
binary's, render every body format and parse it back, and check each real log against the ground
truth of its .source.txt. Skipped with a reason when ../shared is absent.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from forensics.core.errors import BadInput
from parsers import cublaslt, cublaslt_fast
from parsers import cublaslt_grammar as g

STRINGS = "cublaslt/libcublasLt-13.10.0.20.strings.txt"
#: Names the grammar knows that the strings file cannot show: shorter than its 6-character minimum
#: (``strings -n 6``), each seen in real lines or CUDA's library_types.h.
SHORT = {n for n in g.DATA_TYPES | g.OPS if len(n) < 6}
_FORMAT_LINE = re.compile(r"\w+=(?:\{\}|\{:#X\}|\[\{\}\])")


@pytest.fixture(scope="module")
def strings(corpus) -> list[str]:
    return (corpus / STRINGS).read_text().splitlines()


def test_every_body_format_is_the_binarys(strings):
    """Each embedded format is a line of the binary, and every format line of the binary is embedded."""
    lines = set(strings)
    assert all(fmt in lines for fmt in g.FORMATS.values())
    assert all(head in lines for head in g.BLOCK_HEADS.values())
    in_binary = {ln for ln in lines if (_FORMAT_LINE.search(ln) and not ln[:1].isupper()) or ln.startswith("cuBLASLt v")}
    assert in_binary - set(g.FORMATS.values()) - set(g.BLOCK_HEADS.values()) == set()
    assert "[{:%Y-%m-%d %H:%M:%S}]" in lines and "[{}][{}][{}][{}]" in lines  # the header


def test_every_api_name_is_the_binarys(strings):
    lines = set(strings)
    assert {api for api in g.API_NAMES} <= lines
    apis = {ln for ln in lines if re.fullmatch(r"cublasLt[A-Za-z_]+", ln) and not ln.endswith(("_t",))}
    aliases = {ln for ln in apis if re.fullmatch(rf"cublasLt(?:{'|'.join(g.TYPE_CODES)})Matmul\w*", ln)}
    assert {g.base_api(a) for a in aliases} <= g.API_NAMES
    unknown = apis - g.API_NAMES - aliases - {"cublasLtEpilogue_t"}
    assert unknown == set(), unknown


def test_enum_and_attribute_tables_are_the_binarys(strings):
    """Every name of the binary's tables is recognised; every name the grammar adds is a short one."""
    names = {n.strip() for ln in strings for n in ln.split(" | ")}

    def family(prefix: str) -> set[str]:
        return {n for n in names if n.startswith(prefix)}

    assert all(g.TILE.fullmatch(n) for n in family("MATMUL_TILE_"))
    assert all(g.STAGES.fullmatch(n) for n in family("MATMUL_STAGES_"))
    assert all(g.CLUSTER.fullmatch(n) for n in family("CLUSTER_SHAPE_"))
    assert all(g.INNER.fullmatch(n) for n in family("MATMUL_INNER_SHAPE_"))
    assert family("REDUCTION_SCHEME_") <= g.REDUCTION_SCHEMES
    assert family("EPILOGUE_") <= g.EPILOGUES
    assert family("COMPUTE_") <= g.COMPUTE_TYPES
    assert family("SEARCH_") <= g.SEARCH_MODES
    assert family("ORDER_") | family("CUBLASLT_ORDER_") <= g.ORDERS
    for prefix in ("MATMUL_DESC_", "MATRIX_LAYOUT_", "GROUPED_MATRIX_LAYOUT_", "MATMUL_PREF_", "ALGO_CONFIG_",
                   "ALGO_CAP_", "ALGO_CHARACTERISTIC_", "EMULATION_DESC_"):
        assert family(prefix) <= g.ATTRIBUTES, prefix
    assert {n for n in names if re.fullmatch(r"[RC]_\w+", n)} <= g.DATA_TYPES
    assert {n for n in names if re.fullmatch(r"(?:VEC|BLK|OUTER_VEC|PER_BATCH)\w+", n)} | family("MATMUL_MATRIX_SCALE_") \
        <= g.SCALE_MODES
    embedded = set().union(g.DATA_TYPES, g.COMPUTE_TYPES, g.SCALE_MODES, g.EPILOGUES, g.OPS, g.ORDERS,
                           g.REDUCTION_SCHEMES, g.SEARCH_MODES, g.POINTER_MODES, g.FILL_MODES, g.BATCH_MODES,
                           g.ATTRIBUTES)
    assert embedded - names <= SHORT  # nothing invented
    block_keys = {k for keys in g.BLOCK_KEYS.values() for k in keys}
    assert block_keys - names == {"order", "tile", "stages"}  # short keys, seen in real lines


def _value(key: str, kind: str) -> str:
    if kind == "pointer":
        return "0X7FFD0000AB00"
    rule = g.VALUES.get(key)
    if rule == "int":
        return "8"
    if rule == "float":
        return "0.0"
    if isinstance(rule, frozenset):
        return sorted(rule)[0]
    return "7"


def _render(fmt: str) -> str:
    parts = []
    for key, kind in g._fields(fmt):
        if not key:
            parts.append(kind)
        elif kind == "block":
            block = g.BLOCK_OF[key]
            head = " ".join(f"{k}={_value(k, 'value')}" for k, _ in g._fields(g.BLOCK_HEADS[block]))
            parts.append(f"{key}=[{head}]")
        else:
            parts.append(f"{key}={_value(key, kind)}")
    return " ".join(parts)


@pytest.mark.parametrize("level,api", sorted(g.FORMATS))
def test_every_format_renders_and_parses_back(level, api):
    """Each body format, rendered with values of the right kind, parses with no unknown name."""
    fmt = g.FORMATS[(level, api)]
    body = fmt.format(13, 10, 0, 132, 49152, 232448) if fmt.startswith("cuBLASLt v") else _render(fmt)
    line = g.parse_line(f"[2026-01-01 00:00:00][cublasLt][1][{level}][{api}] {body}")
    assert line is not None and line.format == fmt and line.unknown == []
    assert [k for k, _ in line.pairs][:3] == [k for k, _ in g._fields(fmt) if k][:3] or fmt.startswith("cuBLASLt v")


@pytest.mark.parametrize("alias", ["cublasLtSSSMatmul", "cublasLtTSTMatmul", "cublasLtHSHMatmulAlgoGetHeuristic"])
def test_type_encoded_aliases_use_the_base_format(alias):
    assert g.base_api(alias) == alias.replace(alias[8:11], "", 1)
    level = "Trace" if alias.endswith("Matmul") else "Api"
    assert g.format_of(level, alias) == g.FORMATS[(level, g.base_api(alias))]


# --------------------------------------------------------------------------- real logs, ground truth
def _log(corpus: Path, name: str) -> cublaslt.CublasLtLog:
    log = cublaslt.read_log(corpus / "cublaslt" / name)
    slow = cublaslt.read_log_per_line(corpus / "cublaslt" / name)
    assert log.problems == slow.problems and log.level_counts == slow.level_counts  # both readers agree
    for frame in ("calls", "heuristics", "api", "info", "hints", "errors"):
        assert len(getattr(log, frame)) == len(getattr(slow, frame))
    return log


def test_l1_error_with_timestamp(corpus):
    """1 [Error] line, timestamped, cublasLtMatmulAlgoGetHeuristic, free text with '(1)' '(2)'."""
    log = _log(corpus, "cublaslt_l1_cudalibsamples185_error.log")
    e = log.errors.iloc[0]
    assert (len(log.errors), e.timestamp, e.pid, e.function) == (1, "2024-05-20 14:52:29", 3590223,
                                                                 "cublasLtMatmulAlgoGetHeuristic")
    assert "batchCount (1)" in e.message and "expected (2)" in e.message and log.calls.empty


def test_l1_error_without_timestamp(corpus):
    """1 [Error] line, pid 702814, no timestamp."""
    log = _log(corpus, "cublaslt_l1_cudalibsamples274_error_no_ts.log")
    e = log.errors.iloc[0]
    assert (len(log.errors), e.pid) == (1, 702814) and e.timestamp is pd_na()


def pd_na():
    import pandas as pd

    return pd.NA


def test_l4_tf_xla_trace_lines(corpus):
    """4 [Trace][cublasLtMatmul] lines: pids 8291/7643/8076/7861; fp16 NN 32x64x16 and 32x32x16 (algo 21,
    tile 32x32, stages 64x1; the second with epilogue BIAS + biasPointer); FP8 lines with A order=ORDER_ROW,
    C/D R_16F, 32x64x16 and 32x32x16, a/b/c/dScalePointer, algo 39 tile 256x64 stages 128xAUTO,
    workSpaceSizeInBytes=131, outOfPlace=1; beta=? on line 1. The README's '**EPILOGUE_BIAS**' is the
    README author's markdown: kept as printed and reported, never silently accepted."""
    log = _log(corpus, "cublaslt_l4_tf_xla_readme_trace.log")
    c = log.calls
    assert c["pid"].tolist() == [8291, 7643, 8076, 7861]
    assert c[["m", "n", "k"]].values.tolist() == [[32, 64, 16], [32, 32, 16], [32, 64, 16], [32, 32, 16]]
    assert set(c["layout"]) == {"NN"} and c["consistent"].all()
    assert c["a_type"].tolist() == ["R_16F", "R_16F", "R_8F_E4M3", "R_8F_E4M3"]
    assert c["a_order"].tolist() == ["ORDER_COL", "ORDER_COL", "ORDER_ROW", "ORDER_ROW"]
    assert c["c_type"].tolist() == ["R_16F"] * 4
    assert c["algo_id"].tolist() == [21, 21, 39, 39]
    assert c["tile"].tolist() == ["MATMUL_TILE_32x32"] * 2 + ["MATMUL_TILE_256x64"] * 2
    assert c["stages"].tolist() == ["MATMUL_STAGES_64x1"] * 2 + ["MATMUL_STAGES_128xAUTO"] * 2
    assert c["workspace_size"].tolist() == [0, 0, 131, 131] and c["out_of_place"].tolist() == [0, 0, 1, 1]
    assert c["beta"].tolist() == ["?", "0", "0", "0"]
    assert c["epilogue"].tolist()[1] == "**EPILOGUE_BIAS**" and "computeDesc.biasPointer" in c["extra"][1]
    assert {"computeDesc.cScalePointer", "computeDesc.dScalePointer"} <= set(c["extra"][2])
    assert log.problems == ["line 2: not in cuBLAS 13.10's tables, kept as printed: computeDesc.epilogue=**EPILOGUE_BIAS**"]
    # order is part of the problem key (defect 10): the FP8 call is not the fp16 one with other types only
    assert cublaslt.problem_key(c.iloc[2])[-4:] == ("ORDER_ROW", "ORDER_COL", "ORDER_COL", "ORDER_COL")


def test_l5_fp8_batched_bias_api_lines(corpus):
    """cuBLASLt 12.4, Ada (multiProcessorCount=92): 9 lines, 8 [Api] (Create 1, MatmulDescCreate 1,
    MatmulDescSetAttribute 4, MatrixLayoutCreate 2), 1 [Info] (free text then key=value), 0 [Trace].
    Real format: no '[out]' suffix; scaleType=0 (a raw integer); SetAttribute without bufData; the
    pointer DescCreate prints (the out-parameter's address) differs from the handle used afterwards."""
    log = _log(corpus, "cublaslt_l5_cudalibsamples187_fp8_batched_bias.log")
    assert log.level_counts == {"Api": 8, "Info": 1} and log.calls.empty
    assert log.api["function"].value_counts().to_dict() == {
        "cublasLtMatmulDescSetAttribute": 4, "cublasLtMatrixLayoutCreate": 2, "cublasLtCreate": 1,
        "cublasLtMatmulDescCreate": 1}
    create = log.api[log.api["function"] == "cublasLtMatmulDescCreate"].iloc[0]
    assert create.params == {"matmulDesc": "0X7FFDB5ABD5E8", "computeType": "COMPUTE_32F", "scaleType": "0"}
    sets = log.api[log.api["function"] == "cublasLtMatmulDescSetAttribute"]
    assert [p["attr"] for p in sets["params"]] == ["MATMUL_DESC_TRANSA", "MATMUL_DESC_TRANSB",
                                                    "MATMUL_DESC_BIAS_POINTER", "MATMUL_DESC_EPILOGUE"]
    assert {p["matmulDesc"] for p in sets["params"]} == {"0X55A2EFDA0480"} != {create.params["matmulDesc"]}
    assert all("bufData" not in p for p in sets["params"])
    layouts = log.api[log.api["function"] == "cublasLtMatrixLayoutCreate"]
    assert [(p["type"], p["rows"], p["cols"], p["ld"]) for p in layouts["params"]] == [
        ("R_8F_E4M3", "32", "16", "32"), ("R_8F_E4M3", "32", "64", "32")]
    assert log.facts == [{"pid": 65020, "line": 2, "library_version": "12.4", "device": 0, "sm_count": 92,
                          "max_shared_mem_per_block": 49152, "max_shared_mem_per_block_optin": 101376}]
    assert log.problems == ["no matmul calls: no [Trace][cublasLt*Matmul] line (CUBLASLT_LOG_LEVEL below 2, or no GEMM ran)"]


def test_l5_te_fp4_heuristic_queries(corpus):
    """3 heuristic queries (re-joined from a comment block): (1) pid 133267 MXFP8 m=128 n=64 k=1088 NT,
    C/D R_32F, VEC32_UE8M0, maxWorkspaceSizeinBytes=33554432, maxWavesCount=0.0; (2) pid 138099 NVFP4
    R_4F_E2M1 m=64 n=1088 k=128 TN, VEC16_UE4M3; (3) pid 138325 NVFP4 m=128 n=64 k=1088 NT.
    The queries carry the problem columns of a call (defect 10)."""
    h = _log(corpus, "cublaslt_l5_te_fp4_heuristic_api_rejoined.log").heuristics
    assert h["pid"].tolist() == [133267, 138099, 138325]
    assert h[["m", "n", "k"]].values.tolist() == [[128, 64, 1088], [64, 1088, 128], [128, 64, 1088]]
    assert h["layout"].tolist() == ["NT", "TN", "NT"]
    assert h["a_type"].tolist() == ["R_8F_E4M3", "R_4F_E2M1", "R_4F_E2M1"] and set(h["c_type"]) == {"R_32F"}
    assert h["a_scale_mode"].tolist() == ["VEC32_UE8M0", "VEC16_UE4M3", "VEC16_UE4M3"]
    assert set(h["max_workspace_bytes"]) == {33554432}
    assert {p["maxWavesCount"] for p in h["preference"]} == {"0.0"}


def test_l5_torch_matmul_stdout(corpus):
    """10 lines: 2 [Trace][cublasLtSSSMatmul] from pids 3794797 and 3837588, m=n=k=1000 NN R_32F
    COMPUTE_32F_FAST_TF32 algo 21; tile 128x128 stages 32x5 smCountTarget=108, then tile 64x64 stages
    32x6 without smCountTarget; 8 non-log lines (program output, skipped and counted)."""
    log = _log(corpus, "cublaslt_l5_torch_matmul_aarch64_stdout.log")
    c = log.calls
    assert c["pid"].tolist() == [3794797, 3837588] and set(c["type_hint"]) == {"SSS"}
    assert c[["m", "n", "k"]].values.tolist() == [[1000, 1000, 1000]] * 2 and set(c["layout"]) == {"NN"}
    assert set(c["compute_type"]) == {"COMPUTE_32F_FAST_TF32"} and set(c["algo_id"]) == {21}
    assert c["tile"].tolist() == ["MATMUL_TILE_128x128", "MATMUL_TILE_64x64"]
    assert c["stages"].tolist() == ["MATMUL_STAGES_32x5", "MATMUL_STAGES_32x6"]
    assert c["sm_count_target"].tolist()[0] == 108 and c["sm_count_target"].isna().tolist() == [False, True]
    assert c["timestamp"].isna().all() and log.skipped_lines == 8


def test_l5_info_line_free_text(corpus):
    """1 [Info] line, cublasLtMatmulAlgoGetHeuristic, free text, no key=value fields."""
    log = _log(corpus, "cublaslt_l5_vllm4691_info_line.log")
    i = log.info.iloc[0]
    assert (len(log.info), i.function, i.params) == (1, "cublasLtMatmulAlgoGetHeuristic", {})
    assert i.message == "Unsupported M dimension for FP8 matrix multiplication. M must be divisible by 16. Got 2."


def test_legacy_logger_strings_match_the_legacy_header(corpus):
    """The legacy cuBLAS record pieces in libcublas.so.13 are the ones parsers.cublas_legacy reads."""
    from parsers import cublas_legacy

    text = (corpus / "cublaslt" / "libcublas-13.10.0.20.logger-strings.txt").read_text().splitlines()
    for piece in (" cuBLAS (v", "function ", " called:", "; Thread=", "; GPU=", "; Handle=", "POINTER (IN HEX:",
                  "i! COMPILED WITH: ", ": type=", "; val=", " elapsed from start %lf minutes or %lf seconds",
                  "; StreamId=", " (defaultStream)", "; MathMode="):
        assert piece in text
    sample = ("I! cuBLAS (v13.10.0) function cublasStatus_t cublasSgemm_v2(cublasHandle_t, cublasOperation_t) called:")
    assert cublas_legacy.HEADER_RE.fullmatch(sample)


def test_damaged_real_line_is_bad_input_naming_the_line(corpus, tmp_path):
    """A byte changed in a real Trace line's number is damage (file:line), never a silently wrong row."""
    lines = (corpus / "cublaslt" / "cublaslt_l4_tf_xla_readme_trace.log").read_text().splitlines()
    lines[2] = lines[2].replace("rows=32 cols=16", "rows=3Z cols=16", 1)
    p = tmp_path / "cublaslt.8076.log"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(BadInput) as e:
        cublaslt.read_log(p)
    assert e.value.line == 3 and "Adesc.rows='3Z' is not an integer" in e.value.message
    with pytest.raises((cublaslt_fast.Fallback, BadInput)):  # the vectorised reader never accepts it either
        cublaslt_fast.fast_read(p, False)
