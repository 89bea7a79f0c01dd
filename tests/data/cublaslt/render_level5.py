"""Render tests/data/cublaslt/rendered_level5.log from cuBLAS 13.10's own log format strings.

RENDERED, not recorded: every line is ``FORMATS[(level, api)].format(*values)`` with the format
strings of parsers/cublaslt_grammar.py (taken from libcublasLt.so.13 of cuBLAS 13.10.0.20), and
the header ``[{:%Y-%m-%d %H:%M:%S}][cublasLt][pid][Level][function]`` the logger writes. The
values (shapes, pointers, algos) are chosen by hand to exercise the parser: one GEMM's full level-5
sequence (handle, descriptors, heuristic query, call), then TN/NT/TT/NN, split-K, batched, a
type-encoded alias with epilogue and SM-count target, a line without timestamp (stdout form), and
a call whose descriptors disagree on k. Free-text [Hints]/[Info]/[Error] bodies are the library's
message templates filled in. Run: ``python tests/data/cublaslt/render_level5.py`` (rewrites the file).
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
from parsers.cublaslt_grammar import BLOCK_HEADS, FORMATS  # noqa: E402

PID = 4242
OUT = Path(__file__).with_name("rendered_level5.log")
# message templates from the strings file (free text: their level is the one real logs show or a guess)
HINT_ALIGN_A = ("The minimum buffer alignment of matrix A ({0}) is not divisible by {1}. To achieve better performance, "
                "you may consider aligning your pointers to a multiple of {1} bytes.")
INFO_FP8_M = "Unsupported M dimension for FP8 matrix multiplication. M must be divisible by {}. Got {}."
ERROR_LD_D = "The leading dimension of output D matrix must be greater than zero, got ({})"


def header(sec: int | None, level: str, function: str) -> str:
    ts = f"[2026-11-29 10:00:{sec:02d}]" if sec is not None else ""
    return f"{ts}[cublasLt][{PID}][{level}][{function}] "


def line(sec: int | None, level: str, api: str, *values, function: str | None = None) -> str:
    return header(sec, level, function or api) + FORMATS[(level, api)].format(*values)


def layout(typ: str, rows: int, cols: int, ld: int, *extra: tuple[str, object]) -> str:
    return BLOCK_HEADS["layout"].format(typ, rows, cols, ld) + "".join(f" {k}={v}" for k, v in extra)


def compute(ctype: str = "COMPUTE_32F", stype: str = "R_32F", *extra: tuple[str, object]) -> str:
    return BLOCK_HEADS["compute"].format(ctype, stype) + "".join(f" {k}={v}" for k, v in extra)


def algo(algo_id: int, *extra: tuple[str, object]) -> str:
    return BLOCK_HEADS["algo"].format(algo_id) + "".join(f" {k}={v}" for k, v in extra)


def trace(sec, a, b, c, comp, alg, ws=0, ws_size=0, beta="0", oop=0, stream=0, function="cublasLtMatmul",
          base=0x7F0000000000):
    return line(sec, "Trace", "cublasLtMatmul", base + 0x100000, a, base + 0x200000, b, base + 0x300000, c,
                base + 0x300000, c, comp, alg, ws, ws_size, beta, oop, stream, function=function)


def lines() -> list[str]:
    bf = "R_16BF"
    a, b, c = layout(bf, 1024, 256, 1024), layout(bf, 1024, 512, 1024), layout(bf, 256, 512, 256)
    out = [
        line(0, "Api", "cublasLtCreate", 0x7FFD0000D8F8),
        line(0, "Info", "cublasLtCreate", 13, 10, 0, 132, 49152, 232448),
        line(0, "Api", "cublasLtMatmulDescCreate", 0x7FFD00001000, "COMPUTE_32F", 0),
        line(0, "Api", "cublasLtMatmulDescSetAttribute", 0x55D0C0DE1000, "MATMUL_DESC_TRANSA", 0x7FFD00001100, 4),
        line(0, "Api", "cublasLtMatrixLayoutCreate", 0x7FFD00001200, bf, 1024, 256, 1024),
        line(0, "Api", "cublasLtMatrixLayoutCreate", 0x7FFD00001208, bf, 1024, 512, 1024),
        line(0, "Api", "cublasLtMatrixLayoutCreate", 0x7FFD00001210, bf, 256, 512, 256),
        line(0, "Api", "cublasLtMatmulPreferenceSetAttribute", 0x55D0C0DE5000, "MATMUL_PREF_MAX_WORKSPACE_BYTES",
             0x7FFD00001300, 8),
        header(0, "Api", "cublasLtMatmulAlgoGetHeuristic") + FORMATS[("Api", "cublasLtMatmulAlgoGetHeuristic")].format(
            a, b, c, c, BLOCK_HEADS["preference"].format("0.0") + " maxWorkspaceSizeinBytes=4194304",
            compute("COMPUTE_32F", "R_32F", ("transa", "OP_T"))),
        line(0, "Api", "cublasLtMatmul", 0x7F0000100000, 0x55D0C0DE2000, 0x7F0000200000, 0x55D0C0DE3000,
             0x7F0000300000, 0x55D0C0DE3100, 0x7F0000300000, 0x55D0C0DE3100, 0x55D0C0DE1000, 0x7FFD00001400,
             0x7F0000400000, 4194304, 0x55D0C0DE4000),
        # 11: the call itself (TN)
        trace(0, a, b, c, compute("COMPUTE_32F", "R_32F", ("transa", "OP_T")),
              algo(66, ("tile", "MATMUL_TILE_128x128"), ("stages", "MATMUL_STAGES_64xAUTO"), ("customOption", 3),
                   ("clusterShape", "CLUSTER_SHAPE_1x1x1"), ("schedulingMode", 0)),
              ws=0x7F0000400000, ws_size=4194304, stream=0x55D0C0DE4000),
        # 12: NT, split-K
        trace(1, layout(bf, 768, 4096, 768), layout(bf, 3072, 4096, 3072), layout("R_32F", 768, 3072, 768),
              compute("COMPUTE_32F", "R_32F", ("transb", "OP_T")),
              algo(6, ("tile", "MATMUL_TILE_128x128"), ("stages", "MATMUL_STAGES_64x3"), ("numSplitsK", 4),
                   ("reductionScheme", "REDUCTION_SCHEME_INPLACE"), ("ctaSwizzling", 1)),
              ws=0x7F0000400000, ws_size=4194304, beta="1", stream=0x55D0C0DE4000, base=0x7F0000500000),
        # 13: TT, stdout form (no timestamp), out of place
        trace(None, layout("R_32F", 64, 32, 64), layout("R_32F", 16, 64, 16), layout("R_32F", 32, 16, 32),
              compute("COMPUTE_32F", "R_32F", ("transa", "OP_T"), ("transb", "OP_T")),
              algo(21, ("tile", "MATMUL_TILE_32x32"), ("stages", "MATMUL_STAGES_64x1")), oop=1, base=0x7F0000800000),
        # 14: NN, strided batch (type-encoded alias)
        trace(2, layout("R_32F", 128, 64, 128, ("batchCount", 8), ("stridedBatchOffset", 8192)),
              layout("R_32F", 64, 32, 64, ("batchCount", 8), ("stridedBatchOffset", 2048)),
              layout("R_32F", 128, 32, 128, ("batchCount", 8), ("stridedBatchOffset", 4096)),
              compute(), algo(1, ("tile", "MATMUL_TILE_64x64"), ("stages", "MATMUL_STAGES_16x5")),
              function="cublasLtSSSMatmul", base=0x7F0000C00000),
        # 15: a performance hint
        header(2, "Hints", "cublasLtMatmul") + HINT_ALIGN_A.format(16, 256),
        # 16: bf16 alias with epilogue, SM-count target, inner shape, row-major A
        trace(3, layout(bf, 32, 16, 16, ("order", "ORDER_ROW")), layout(bf, 16, 64, 16), layout(bf, 32, 64, 32),
              compute("COMPUTE_32F", "R_32F", ("epilogue", "EPILOGUE_BIAS"), ("biasPointer", "0x7f0001200000"),
                      ("smCountTarget", 14)),
              algo(66, ("tile", "MATMUL_TILE_192x8"), ("stages", "MATMUL_STAGES_64xAUTO"), ("customOption", 29),
                   ("innerShape", "MATMUL_INNER_SHAPE_MMA16816")),
              beta="?", function="cublasLtTSTMatmul", base=0x7F0000F00000),
        # 17: descriptors disagree on k (A says 16, B says 32)
        trace(3, layout("R_32F", 32, 16, 32), layout("R_32F", 32, 64, 32), layout("R_32F", 32, 64, 32),
              compute(), algo(21, ("tile", "MATMUL_TILE_32x32"), ("stages", "MATMUL_STAGES_64x1")),
              base=0x7F0001300000),
        header(4, "Info", "cublasLtMatmulAlgoGetHeuristic") + INFO_FP8_M.format(16, 2),
        header(4, "Error", "cublasLtMatmul") + ERROR_LD_D.format(0),
        line(5, "Api", "cublasLtMatmulDescDestroy", 0x55D0C0DE1000),
        line(5, "Api", "cublasLtDestroy", 0x55D0C0DE0000),
    ]
    return out


if __name__ == "__main__":
    OUT.write_text("\n".join(lines()) + "\n")
    print(f"wrote {OUT} ({len(lines())} lines)")
