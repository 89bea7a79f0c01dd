"""The cuBLASLt log line grammar, taken from the logger's own format strings.

Source: the strings of ``libcublasLt.so.13`` in NVIDIA's cuBLAS 13.10.0.20 wheel (``nvidia-cublas``
on PyPI), kept with provenance in ../shared/corpus/cublaslt/libcublasLt-13.10.0.20.strings.txt;
``tests/test_cublaslt_grammar.py`` checks every format and name below against that file.
The logger writes (fmt syntax: ``{}`` a value, ``{:#X}`` a pointer as ``0X`` + upper-case hex)::

    [{:%Y-%m-%d %H:%M:%S}]          optional: lines written to stdout carry no timestamp
    [{}][{}][{}][{}]                [cublasLt][pid][Level][function]
    <body>                          FORMATS[function] (Api/Trace/Info), or free text (Error/Hints/Info)

A body format is a run of ``key={}``, ``key={:#X}`` and ``key=[{}]`` fields. A ``[{}]`` block is
a fixed head (``BLOCK_HEADS``) followed by optional `` {}={}`` pairs, only non-default ones, whose
keys come from the tables in ``BLOCK_KEYS``. Values named by the library's enum tables are checked
against ``ENUMS``; a value outside them is kept as printed and reported (never dropped).

:func:`parse_line` returns a :class:`Line`; damage (a header or body that does not follow the
grammar, a number or pointer that is not one) raises :class:`GrammarError` with the column.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

# --------------------------------------------------------------------------- header
#: "[{:%Y-%m-%d %H:%M:%S}]" then "[{}][{}][{}][{}]". Levels are the logger's level names (1 Error,
#: 2 Trace, 3 Hints, 4 Info, 5 Api; shorter than the strings file's 6-character minimum, seen in real lines).
LEVELS = ("Error", "Trace", "Hints", "Info", "Api")
HEADER = re.compile(
    r"(?:\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\])?\[cublasLt\]\[(?P<pid>\d{1,18})\]"
    r"\[(?P<level>Error|Trace|Hints|Info|Api)\]\[(?P<function>cublasLt\w+)\] ?")
#: Anything that starts like a cuBLASLt line, or carries pieces of one: damaged when HEADER fails.
DAMAGED = re.compile(r"^\s*(?:\[[^\]]*\])?\[cublasL|\]\[(?:Error|Trace|Hints|Info|Api)\]\[|\[cublasLt\]|"
                     r"\bAdesc=\[|\bcomputeDesc=\[")

# --------------------------------------------------------------------------- body formats
#: Per API, its body format exactly as the binary holds it. Entries marked "shared" reuse the
#: string of the API next to them (the binary keeps each distinct string once).
FORMATS: dict[tuple[str, str], str] = {
    ("Trace", "cublasLtMatmul"): "A={:#X} Adesc=[{}] B={:#X} Bdesc=[{}] C={:#X} Cdesc=[{}] D={:#X} Ddesc=[{}] "
                                 "computeDesc=[{}] algo=[{}] workSpace={:#X} workSpaceSizeInBytes={} beta={} "
                                 "outOfPlace={} stream={:#X}",
    ("Api", "cublasLtMatmul"): "A={:#X} Adesc={:#X} B={:#X} Bdesc={:#X} C={:#X} Cdesc={:#X} D={:#X} Ddesc={:#X} "
                               "computeDesc={:#X} algo={:#X} workSpace={:#X} workSpaceSizeInBytes={} stream={:#X}",
    ("Api", "cublasLtMatmulAlgoGetHeuristic"): "Adesc=[{}] Bdesc=[{}] Cdesc=[{}] Ddesc=[{}] preference=[{}] "
                                               "computeDesc=[{}]",
    ("Api", "cublasLtMatmulAlgoGetIds"): "lightHandle={:#X} computeType={} scaleType={} Atype={} Btype={} Ctype={} "
                                         "Dtype={} requestedAlgoCount={} algoIdsArray={:#X} returnAlgoCount={:#X}",
    ("Api", "cublasLtMatmulAlgoInit"): "lightHandle={:#X} computeType={} scaleType={} Atype={} Btype={} Ctype={} "
                                       "Dtype={} algoId={} algo={:#X}",
    ("Api", "cublasLtMatmulAlgoCapGetAttribute"): "algo={:#X} attr={} buf={:#X} sizeInBytes={} sizeWritten={:#X}",
    ("Api", "cublasLtAlgoCharacteristicGetAttribute"): "lightHandle={:#X} algo={:#X} trans_a={} trans_b={} attr={} "
                                                       "buf={:#X} sizeInBytes={} sizeWritten={:#X}",
    ("Api", "cublasLtMatmulAlgoCheck"): "lightHandle={:#X} operationDesc=[{}] Adesc=[{}] Bdesc=[{}] Cdesc=[{}] "
                                        "Ddesc=[{}] algo={:#X} result={:#X}",
    ("Api", "cublasLtCreate"): "lightHandle={:#X}",
    ("Api", "cublasLtDestroy"): "lightHandle={:#X}",
    ("Api", "cublasLtCtxInit"): "ctx={:#X}",
    ("Api", "cublasLtLoggerSetCallback"): "callback={}",
    ("Api", "cublasLtLoggerSetFile"): "file={}",
    ("Api", "cublasLtLoggerOpenFile"): "logFile={}",
    ("Api", "cublasLtLoggerSetMask"): "mask={}",
    ("Api", "cublasLtLoggerSetLevel"): "level={}",
    ("Api", "cublasLtGetVersion"): "version={}",
    ("Api", "cublasLtGetProperty"): "type={} value={}",
    ("Api", "cublasLtMatmulDescCreate"): "matmulDesc={:#X} computeType={} scaleType={}",
    ("Api", "cublasLtMatmulDescInit_internal"): "matmulDesc={:#X} size={} computeType={} scaleType={}",
    ("Api", "cublasLtMatmulDescDestroy"): "matmulDesc={:#X}",
    ("Api", "cublasLtMatmulDescSetAttribute"): "matmulDesc={:#X} attr={} buf={:#X} sizeInBytes={}",
    ("Api", "cublasLtMatmulDescGetAttribute"): "matmulDesc={:#X} attr={} buf={:#X} sizeInBytes={} sizeWritten={:#X}",
    ("Api", "cublasLtMatrixLayoutCreate"): "matLayout={:#X} type={} rows={} cols={} ld={}",
    ("Api", "cublasLtMatrixLayoutInit_internal"): "matLayout={:#X} size={} type={} rows={} cols={} ld={}",
    ("Api", "cublasLtMatrixLayoutDestroy"): "matLayout={:#X}",
    ("Api", "cublasLtMatrixLayoutSetAttribute"): "matLayout={:#X} attr={} buf={:#X} sizeInBytes={}",
    ("Api", "cublasLtMatrixLayoutGetAttribute"): "matLayout={:#X} attr={} buf={:#X} sizeInBytes={} sizeWritten={:#X}",
    ("Api", "cublasLtGroupedMatrixLayoutCreate"): "matLayout={:#X} type={} groupCount={} rowsArray={} colsArray={} "
                                                  "ldArray={}",
    ("Api", "cublasLtGroupedMatrixLayoutInit_internal"): "matLayout={:#X} size={} type={} groupCount={} "
                                                         "rowsArray={} colsArray={} ldArray={}",
    ("Api", "cublasLtMatmulPreferenceInit_internal"): "matmulPref={:#X} size={}",
    ("Api", "cublasLtMatmulPreferenceDestroy"): "matmulPref={:#X}",
    ("Api", "cublasLtMatmulPreferenceSetAttribute"): "pref={:#X} attr={} buf={:#X} sizeInBytes={}",
    ("Api", "cublasLtMatmulPreferenceGetAttribute"): "pref={:#X} attr={} buf={:#X} sizeInBytes={} sizeWritten={:#X}",
    ("Api", "cublasLtMatmulAlgoConfigSetAttribute"): "algo={:#X} attr={} buf={:#X} sizeInBytes={}",
    ("Api", "cublasLtEmulationDescInit_internal"): "emulationDesc={:#X} size={}",
    ("Api", "cublasLtEmulationDescDestroy"): "emulationDesc={:#X}",
    ("Api", "cublasLtEmulationDescSetAttribute"): "emulationDesc={:#X} attr={} buf={:#X} sizeInBytes={}",
    ("Api", "cublasLtEmulationDescGetAttribute"): "emulationDesc={:#X} attr={} buf={:#X} sizeInBytes={} "
                                                  "sizeWritten={:#X}",
    ("Info", "cublasLtCreate"): "cuBLASLt v{}.{} device #{}: multiProcessorCount={} maxSharedMemPerBlock={} "
                                "maxSharedMemoryPerBlockOptin={}",
}
#: APIs whose format string the binary holds once, next to another API's name (shared).
SHARED = {
    "cublasLtMatmulAlgoCheckForStream": "cublasLtMatmulAlgoCheck",
    "cublasLtMatmulAlgoGetHeuristicForStream": "cublasLtMatmulAlgoGetHeuristic",
    "cublasLtGetCudartVersion": "cublasLtGetVersion",
    "cublasLtMatmulAlgoConfigGetAttribute": "cublasLtMatmulAlgoCapGetAttribute",
    "cublasLtMatmulPreferenceCreate": "cublasLtMatmulPreferenceDestroy",
    "cublasLtEmulationDescCreate": "cublasLtEmulationDescDestroy",
}
#: Type-encoded aliases: cublasLt<A/C><compute/scale><D>Matmul* log with the base API's format.
TYPE_CODES = ("HHH", "HSH", "SSS", "DDD", "BSS", "CCC", "ZZZ", "ACC", "BII", "BSB", "HSS", "KCC", "KCK", "TSS", "TST",
              "VCC", "VCV")
_ALIAS = re.compile(rf"cublasLt(?P<code>{'|'.join(TYPE_CODES)})(?P<rest>Matmul\w*)")
#: Every API name the 13.10 logger prints (besides the aliases above).
API_NAMES = frozenset({f for _, f in FORMATS} | set(SHARED) | {"cublasLtGetStatusName", "cublasLtGetStatusString",
                                                                "cublasLtLoggerForceDisable"})

# --------------------------------------------------------------------------- blocks
BLOCK_HEADS = {
    "layout": "type={} rows={} cols={} ld={}",
    "compute": "computeType={} scaleType={}",
    "algo": "algoId={}",
    "preference": "maxWavesCount={}",
    "emulation": "strategy={}",  # an emulation descriptor's block; no 13.10 body format prints one
}
#: Which block a ``key=[{}]`` field holds.
BLOCK_OF = {"Adesc": "layout", "Bdesc": "layout", "Cdesc": "layout", "Ddesc": "layout", "computeDesc": "compute",
            "operationDesc": "compute", "algo": "algo", "preference": "preference"}
#: Optional " {}={}" keys per block, from the attribute-name tables (order, tile, stages: under the
#: strings file's 6-character minimum, seen in real lines).
BLOCK_KEYS = {
    "layout": ("batchCount", "stridedBatchOffset", "planeOffsetBytes", "rowsArray", "colsArray", "ldArray",
               "ldArrayIntegerWidth", "rowsColsArrayIntegerWidth", "batchMode", "order"),
    "compute": ("biasPointer", "biasBatchStride", "epilogueAuxPointer", "epilogueAuxLd", "epilogueAuxBatchStride",
                "smCountTarget", "amaxDPointer", "aScalePointer", "bScalePointer", "cScalePointer", "dScalePointer",
                "epilogueAuxScalePointer", "epilogueAuxDataType", "epilogueAuxAmaxPointer", "fastAccumulationFlag",
                "biasDataType", "aScaleMode", "bScaleMode", "dOutScalePointer", "dOutScaleMode", "emulationDesc",
                "epilogueAuxScaleMode", "dScaleMode", "cScaleMode", "epilogue", "fillMode", "transc", "transb",
                "transa", "pointerMode"),
    "algo": ("tile", "stages", "numSplitsK", "ctaSwizzling", "customOption", "clusterShape", "schedulingMode",
             "innerShape", "reductionScheme"),
    "emulation": ("fixedPointMaxMantissaBitCount", "fixedPointMantissaBitOffset", "fixedPointMantissaControl",
                  "specialValuesSupport", "fixedPointMantissaBitCountPointer"),
    "preference": ("reductionSchemeMask", "maxWorkspaceSizeinBytes", "minBytesAlignmentA", "minBytesAlignmentB",
                   "minBytesAlignmentC", "minBytesAlignmentD", "implMask", "groupedAvgReductionDim",
                   "groupedAvgRowsD", "groupedAvgColsD", "search"),
}

# --------------------------------------------------------------------------- value tables
#: cudaDataType_t names as cuBLASLt prints them (CUDA's library_types.h without the CUDA_ prefix; the
#: strings file holds those of 6+ characters, the short ones such as R_16F are seen in real lines).
DATA_TYPES = frozenset(
    [f"{k}_{w}" for k in "RC" for w in ("16F", "16BF", "32F", "64F", "4I", "4U", "8I", "8U", "16I", "16U", "32I",
                                         "32U", "64I", "64U")]
    + ["R_8F_E4M3", "R_8F_E5M2", "R_4F_E2M1", "DATA_TYPE_UNKNOWN"])
COMPUTE_TYPES = frozenset({
    "COMPUTE_16F", "COMPUTE_16F_PEDANTIC", "COMPUTE_32F", "COMPUTE_32F_PEDANTIC", "COMPUTE_32F_FAST_16F",
    "COMPUTE_32F_FAST_16BF", "COMPUTE_32F_FAST_TF32", "COMPUTE_32F_EMULATED_16BFX9", "COMPUTE_64F",
    "COMPUTE_64F_PEDANTIC", "COMPUTE_64F_EMULATED_FIXEDPOINT", "COMPUTE_32I", "COMPUTE_32I_PEDANTIC",
    "COMPUTE_TYPE_UNKNOWN"})
SCALE_MODES = frozenset({
    "VEC128_32F", "BLK128x128_32F", "VEC16_UE4M3", "VEC32_UE8M0", "PER_BATCH_SCALAR_32F",
    "VEC128_MN_K4_UE8M0", "VEC32_MN_K4_UE8M0", "OUTER_VEC_32F", "MATMUL_MATRIX_SCALE_UNKNOWN"})
EPILOGUES = frozenset({
    "EPILOGUE_DEFAULT", "EPILOGUE_RELU", "EPILOGUE_RELU_AUX", "EPILOGUE_BIAS", "EPILOGUE_RELU_BIAS",
    "EPILOGUE_RELU_AUX_BIAS", "EPILOGUE_DRELU", "EPILOGUE_DRELU_BGRAD", "EPILOGUE_GELU", "EPILOGUE_GELU_AUX",
    "EPILOGUE_GELU_BIAS", "EPILOGUE_GELU_AUX_BIAS", "EPILOGUE_DGELU", "EPILOGUE_DGELU_BGRAD", "EPILOGUE_BGRADA",
    "EPILOGUE_BGRADB", "EPILOGUE_UNKNOWN"})
#: The algo descriptor's columns, as the log's ``algo=[...]`` block names them (what differs when
#: cuBLASLt picks another kernel): every field of a cublasLtMatmulAlgo_t's configuration
#: (CUBLASLT_ALGO_CONFIG_*, ALGO_CONFIG above), scheduling_mode and inner_shape included. The one
#: definition: the parser's call frame, the arm verdict, the bundle, repro.py and sweep tables read it.
ALGO_COLUMNS = (
    "algo_id", "tile", "stages", "custom_option", "num_splits_k", "reduction_scheme",
    "cta_swizzling", "cluster_shape", "scheduling_mode", "inner_shape",
)
OPS = frozenset({"OP_N", "OP_T", "OP_C", "OP_CONJG", "OP_UNKNOWN"})
ORDERS = frozenset({"ORDER_COL", "ORDER_ROW", "ORDER_COL32", "ORDER_COL4_4R2_8C", "ORDER_COL32_2R_4R4",
                    "CUBLASLT_ORDER_UNKNOWN"})
REDUCTION_SCHEMES = frozenset({"REDUCTION_SCHEME_NONE", "REDUCTION_SCHEME_INPLACE", "REDUCTION_SCHEME_COMPUTE_TYPE",
                               "REDUCTION_SCHEME_OUTPUT_TYPE", "REDUCTION_SCHEME_UNKNOWN"})
SEARCH_MODES = frozenset({"SEARCH_FAST", "SEARCH_OPTIMAL", "SEARCH_ACCURATE", "SEARCH_LIMITED_BY_ALGO_ID",
                          "SEARCH_MANUAL", "SEARCH_LIBHEURISTICS_OPTIMAL", "SEARCH_LIBHEURISTICS_ACCURATE",
                          "SEARCH_FORCE_LIBHEURISTICS_OPTIMAL", "SEARCH_FORCE_LIBHEURISTICS_ACCURATE", "SEARCH_UNKNOWN"})
POINTER_MODES = frozenset({"MODE_HOST", "MODE_DEVICE", "MODE_DEVICE_VECTOR", "ALPHA_DEVICE_VECTOR_BETA_ZERO",
                           "ALPHA_DEVICE_VECTOR_BETA_HOST", "POINTER_MODE_UNKNOWN"})
FILL_MODES = frozenset({"MODE_UPPER", "MODE_LOWER", "FILL_MODE_UNKNOWN"})
BATCH_MODES = frozenset({"STRIDED", "POINTER_ARRAY", "GROUPED", "BATCH_MODE_UNKNOWN"})
#: Attribute names printed by the *SetAttribute / *GetAttribute APIs.
ATTRIBUTES = frozenset(
    [f"MATMUL_DESC_{a}" for a in (
        "UNKNOWN", "COMPUTE_TYPE", "SCALE_TYPE", "POINTER_MODE", "TRANSA", "TRANSB", "TRANSC", "FILL_MODE", "EPILOGUE",
        "BIAS_POINTER", "BIAS_BATCH_STRIDE", "EPILOGUE_AUX_POINTER", "EPILOGUE_AUX_LD", "EPILOGUE_AUX_BATCH_STRIDE",
        "ALPHA_VECTOR_BATCH_STRIDE", "SM_COUNT_TARGET", "A_SCALE_POINTER", "B_SCALE_POINTER", "C_SCALE_POINTER",
        "D_SCALE_POINTER", "AMAX_D_POINTER", "EPILOGUE_AUX_DATA_TYPE", "EPILOGUE_AUX_SCALE_POINTER",
        "EPILOGUE_AUX_AMAX_POINTER", "FAST_ACCUM", "BIAS_DATA_TYPE", "A_SCALE_MODE", "B_SCALE_MODE", "C_SCALE_MODE",
        "D_SCALE_MODE", "EPILOGUE_AUX_SCALE_MODE", "D_OUT_SCALE_POINTER", "D_OUT_SCALE_MODE", "BETA_BATCH_STRIDE",
        "ALPHA_BATCH_STRIDE", "EMULATION_DESCRIPTOR", "BATCH_INVARIANCE_FLAGS")]
    + [f"MATRIX_LAYOUT_{a}" for a in ("UNKNOWN", "TYPE", "ORDER", "ROWS", "COLS", "LD", "BATCH_COUNT",
                                      "STRIDED_BATCH_OFFSET", "PLANE_OFFSET", "BATCH_MODE")]
    + [f"GROUPED_MATRIX_LAYOUT_{a}" for a in ("ROWS_ARRAY", "COLS_ARRAY", "LD_ARRAY", "ROWS_COLS_ARRAY_INTEGER_WIDTH",
                                              "LD_ARRAY_INTEGER_WIDTH")]
    + [f"MATMUL_PREF_{a}" for a in ("UNKNOWN", "SEARCH_MODE", "MAX_WORKSPACE_BYTES", "REDUCTION_SCHEME_MASK",
                                    "MIN_ALIGNMENT_A_BYTES", "MIN_ALIGNMENT_B_BYTES", "MIN_ALIGNMENT_C_BYTES",
                                    "MIN_ALIGNMENT_D_BYTES", "MAX_WAVES_COUNT", "IMPL_MASK",
                                    "GROUPED_DESC_D_AVERAGE_ROWS", "GROUPED_DESC_D_AVERAGE_COLS",
                                    "GROUPED_AVERAGE_REDUCTION_DIM")]
    + [f"ALGO_CONFIG_{a}" for a in ("UNKNOWN", "ID", "TILE_ID", "STAGES_ID", "SPLITK_NUM", "REDUCTION_SCHEME",
                                    "CTA_SWIZZLING", "CUSTOM_OPTION", "INNER_SHAPE_ID", "CLUSTER_SHAPE_ID",
                                    "SCHEDULING_MODE")]
    + [f"ALGO_CAP_{a}" for a in (
        "UNKNOWN", "SPLITK_SUPPORT", "REDUCTION_SCHEME_MASK", "CTA_SWIZZLING_SUPPORT", "STRIDED_BATCH_SUPPORT",
        "POINTER_ARRAY_BATCH_SUPPORT", "POINTER_ARRAY_GROUPED_SUPPORT", "OUT_OF_PLACE_RESULT_SUPPORT", "UPLO_SUPPORT",
        "TILE_IDS", "STAGES_IDS", "CUSTOM_OPTION_MAX", "CUSTOM_MEMORY_ORDER", "POINTER_MODE_MASK", "EPILOGUE_MASK",
        "LD_NEGATIVE", "NUMERICAL_IMPL_FLAGS", "MIN_ALIGNMENT_A_BYTES", "MIN_ALIGNMENT_B_BYTES",
        "MIN_ALIGNMENT_C_BYTES", "MIN_ALIGNMENT_D_BYTES", "FLOATING_POINT_EMULATION_SUPPORT")]
    + [f"ALGO_CHARACTERISTIC_{a}" for a in ("UNKNOWN", "MIN_ALIGNMENT_A_BYTES", "MIN_ALIGNMENT_B_BYTES",
                                            "BLOCKS_PER_SM")]
    + [f"EMULATION_DESC_{a}" for a in ("UNKNOWN", "STRATEGY", "FIXEDPOINT_MANTISSA_CONTROL",
                                       "FIXEDPOINT_MAX_MANTISSA_BIT_COUNT", "FIXEDPOINT_MANTISSA_BIT_OFFSET",
                                       "FIXEDPOINT_MANTISSA_BIT_COUNT_POINTER", "SPECIAL_VALUES_SUPPORT")])
#: Names of systematic families (every 13.10 tile, stages, cluster and inner-shape name has this form).
TILE = re.compile(r"MATMUL_TILE_(?:\d+x\d+|UNKNOWN)")
STAGES = re.compile(r"MATMUL_STAGES_(?:\d+x(?:\d+|AUTO)|UNKNOWN)")
CLUSTER = re.compile(r"CLUSTER_SHAPE_(?:\d+x\d+x\d+|UNKNOWN)")
INNER = re.compile(r"MATMUL_INNER_SHAPE_(?:MMA\d+|UNKNOWN)")

#: Value checks per key: a set or pattern of names, or one of the kinds "int", "float", "pointer".
VALUES: dict[str, object] = {
    "type": DATA_TYPES, "Atype": DATA_TYPES, "Btype": DATA_TYPES, "Ctype": DATA_TYPES, "Dtype": DATA_TYPES,
    "biasDataType": DATA_TYPES, "epilogueAuxDataType": DATA_TYPES,
    "computeType": COMPUTE_TYPES, "scaleType": DATA_TYPES,
    "aScaleMode": SCALE_MODES, "bScaleMode": SCALE_MODES, "cScaleMode": SCALE_MODES, "dScaleMode": SCALE_MODES,
    "dOutScaleMode": SCALE_MODES, "epilogueAuxScaleMode": SCALE_MODES,
    "epilogue": EPILOGUES, "transa": OPS, "transb": OPS, "transc": OPS, "trans_a": OPS, "trans_b": OPS,
    "order": ORDERS, "reductionScheme": REDUCTION_SCHEMES, "reductionSchemeMask": REDUCTION_SCHEMES,
    "search": SEARCH_MODES, "pointerMode": POINTER_MODES, "fillMode": FILL_MODES, "batchMode": BATCH_MODES,
    "attr": ATTRIBUTES, "tile": TILE, "stages": STAGES, "clusterShape": CLUSTER, "innerShape": INNER,
    **{k: "int" for k in (
        "rows", "cols", "ld", "batchCount", "stridedBatchOffset", "planeOffsetBytes", "algoId", "customOption",
        "numSplitsK", "ctaSwizzling", "schedulingMode", "smCountTarget", "sizeInBytes", "size", "outOfPlace",
        "workSpaceSizeInBytes", "requestedAlgoCount", "groupCount", "maxWorkspaceSizeinBytes", "minBytesAlignmentA",
        "minBytesAlignmentB", "minBytesAlignmentC", "minBytesAlignmentD", "epilogueAuxLd", "biasBatchStride",
        "epilogueAuxBatchStride", "fastAccumulationFlag", "level", "mask", "version")},
    "maxWavesCount": "float",
    **{k: "pointer" for k in ("biasPointer", "epilogueAuxPointer", "amaxDPointer", "aScalePointer", "bScalePointer",
                              "cScalePointer", "dScalePointer", "epilogueAuxScalePointer", "epilogueAuxAmaxPointer",
                              "dOutScalePointer", "emulationDesc")},
}
#: scaleType is printed as a raw integer by cublasLtMatmulDescCreate (cuBLASLt 12.4, real line).
RAW_INT_OK = frozenset({"scaleType", "computeType"})

_POINTER = re.compile(r"0[xX][0-9a-fA-F]+|\x01\d+\x01")  # \x01N\x01: a pointer lifted out by the fast path
_INT = re.compile(r"-?\d+")
_FLOAT = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_FLAGS = re.compile(r"\s\|\s")  # "A | B" flag sets (reductionSchemeMask, specialValuesSupport)


class GrammarError(ValueError):
    """A line that does not follow the grammar; ``column`` is 1-based within the line."""

    def __init__(self, message: str, column: int = 1):
        super().__init__(message)
        self.column = column


Pairs = list[tuple[str, "str | Pairs"]]


@dataclass
class Line:
    """One parsed line: header fields, the body's (key, value) pairs in order (a block's value is
    its own pair list), and ``unknown`` names (key or value outside the 13.10 tables, kept)."""

    ts: str | None
    pid: int
    level: str
    function: str
    api: str  # the function without its type code (cublasLtSSSMatmul -> cublasLtMatmul)
    body: str
    pairs: Pairs = field(default_factory=list)
    format: str | None = None  # the body format the line followed, None for free text
    unknown: list[str] = field(default_factory=list)


def base_api(function: str) -> str:
    """``cublasLtSSSMatmulAlgoGetHeuristic`` -> ``cublasLtMatmulAlgoGetHeuristic``."""
    m = _ALIAS.fullmatch(function)
    return f"cublasLt{m['rest']}" if m else function


def format_of(level: str, function: str) -> str | None:
    api = base_api(function)
    return FORMATS.get((level, SHARED.get(api, api)))


def parse_line(raw: str) -> Line | None:
    """Parse one line; None when it is no cuBLASLt line at all (program output on stdout)."""
    m = HEADER.match(raw)
    if m is None:
        if DAMAGED.search(raw):
            raise GrammarError("damaged cuBLASLt line header", 1)
        return None
    line = parse_body(m["level"], m["function"], raw[m.end():], m.end())
    line.ts, line.pid = m["ts"], int(m["pid"])
    return line


def parse_body(level: str, function: str, body: str, offset: int = 0) -> Line:
    """Parse the text after a line's header (``offset``: where it starts in the line, for columns)."""
    line = Line(None, 0, level, function, base_api(function), body)
    if level == "Trace" and line.api != "cublasLtMatmul":
        raise GrammarError(f"unknown [Trace] function {function!r} (cuBLAS 13.10 traces only cublasLt*Matmul)",
                           max(offset - len(function) - 1, 1))
    if line.api not in API_NAMES:
        line.unknown.append(f"function {function}")
    fmt = format_of(level, function)
    if fmt is None:
        return line  # free text (Error, Hints, most Info) or an API without a known format
    line.format = fmt
    line.pairs = _body(line, fmt, offset)
    return line


@lru_cache(maxsize=256)
def _fields(fmt: str) -> tuple[tuple[str, str], ...]:
    """``"A={:#X} Adesc=[{}] ..."`` -> ``(("A", "pointer"), ("Adesc", "block"), ...)``; free-text
    prefixes (the Info format) come back as ``("", text)``."""
    out = []
    for token in fmt.split(" "):
        key, eq, spec = token.partition("=")
        if not eq:
            out.append(("", token))
        else:
            out.append((key, {"{:#X}": "pointer", "[{}]": "block"}.get(spec, "value")))
    return tuple(out)


def _body(line: Line, fmt: str, offset: int) -> Pairs:
    if fmt.startswith("cuBLASLt v"):
        return _info_create(line, offset)
    pairs = tokenize(line.body, offset)
    fields = [(k, kind) for k, kind in _fields(fmt) if k]
    keys = [k for k, _ in pairs]
    want = [k for k, _ in fields]
    if keys[: len(want)] != want:
        raise GrammarError(f"fields {' '.join(keys)} do not follow the format of {line.api}: {fmt}", offset + 1)
    for k, _ in pairs[len(want):]:
        line.unknown.append(f"field {k}")
    for (key, value), (_, kind) in zip(pairs, fields):
        if kind == "block":
            if not isinstance(value, list):
                raise GrammarError(f"{key} should be a [...] block", offset + 1)
            _block(line, key, value, offset)
        elif isinstance(value, list):
            raise GrammarError(f"{key} should be a single value, not a block", offset + 1)
        elif kind == "pointer":
            _check(line, key, value, "pointer", offset)
        else:
            _value(line, key, value, offset)
    return pairs


def _block(line: Line, key: str, pairs: Pairs, offset: int) -> None:
    kind = BLOCK_OF[key]
    head = [k for k, _ in _fields(BLOCK_HEADS[kind])]
    keys = [k for k, _ in pairs]
    if keys[: len(head)] != head:
        raise GrammarError(f"{key}=[{' '.join(keys)}] does not start with {' '.join(head)}", offset + 1)
    allowed = BLOCK_KEYS[kind]
    for k, v in pairs:
        if isinstance(v, list):
            raise GrammarError(f"nested block {k} inside {key}", offset + 1)
        if k not in head and k not in allowed:
            line.unknown.append(f"field {key}.{k}")
        _value(line, k, v, offset, where=f"{key}.")


def _value(line: Line, key: str, value: str, offset: int, where: str = "") -> None:
    rule = VALUES.get(key)
    if rule is None:
        return
    if isinstance(rule, str):
        _check(line, where + key, value, rule, offset)
        return
    if key in RAW_INT_OK and _INT.fullmatch(value):
        return
    names = _FLAGS.split(value) if "|" in value else [value]
    for name in names:
        ok = rule.fullmatch(name) is not None if isinstance(rule, re.Pattern) else name in rule
        if not ok:
            line.unknown.append(f"{where}{key}={name}")


def _check(line: Line, key: str, value: str, kind: str, offset: int) -> None:
    pattern = {"pointer": _POINTER, "int": _INT, "float": _FLOAT}[kind]
    if not pattern.fullmatch(value):
        raise GrammarError(f"{key}={value!r} is not {'a pointer' if kind == 'pointer' else 'an integer' if kind == 'int' else 'a number'}",
                           offset + 1)


_INFO_CREATE = re.compile(r"cuBLASLt v(?P<major>\d+)\.(?P<minor>\d+) device #(?P<device>\d+): (?P<rest>.*)")


def _info_create(line: Line, offset: int) -> Pairs:
    """``cuBLASLt v12.4 device #0: multiProcessorCount=92 ...``: free text, then key=value pairs."""
    m = _INFO_CREATE.fullmatch(line.body)
    if m is None:
        raise GrammarError(f"does not follow the format of the {line.api} [Info] line: {FORMATS[('Info', 'cublasLtCreate')]}",
                           offset + 1)
    pairs: Pairs = [("version", f"{m['major']}.{m['minor']}"), ("device", m["device"])]
    rest = tokenize(m["rest"], offset + m.start("rest"))
    want = ["multiProcessorCount", "maxSharedMemPerBlock", "maxSharedMemoryPerBlockOptin"]
    if [k for k, _ in rest] != want or not all(isinstance(v, str) and _INT.fullmatch(v) for _, v in rest):
        raise GrammarError(f"does not follow the format of the {line.api} [Info] line", offset + 1)
    return pairs + rest


# --------------------------------------------------------------------------- tokenizer
_PAIR = re.compile(r"([^\s=\[\]]+)=(\[[^\[\]]*\]|[^\s\[\]]*)(?=\s|$)")


def tokenize(text: str, offset: int = 0) -> Pairs:
    """``key=value key=[k=v ...] ...`` -> pairs (a block's value is its own pair list; blocks do
    not nest in cuBLASLt's formats). Flag sets printed as ``A | B`` stay one value."""
    if "|" in text:
        text = _FLAGS.sub("|", text)
    return _tokenize(text, offset)


@lru_cache(maxsize=4096)
def _block_pairs(content: str) -> tuple:
    return tuple(_tokenize(content, 0))


def _tokenize(text: str, offset: int) -> Pairs:
    out: Pairs = []
    pos = 0
    n = len(text)
    while True:
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos >= n:
            return out
        m = _PAIR.match(text, pos)
        if m is None:
            opened = text.find("=[", pos)
            if opened >= 0 and text.find("]", opened) < 0:
                raise GrammarError("unterminated '[' (line cut short?)", offset + opened + 2)
            inner = text.find("[", opened + 2) if opened >= 0 else -1
            if inner >= 0 and inner < text.find("]", opened):
                raise GrammarError("a nested [...] block (cuBLASLt's formats have none)", offset + inner + 1)
            raise GrammarError(f"expected key=value at {text[pos:pos + 30]!r}", offset + pos + 1)
        key, value = m.group(1), m.group(2)
        if value[:1] == "[":
            try:
                out.append((key, list(_block_pairs(value[1:-1]))))
            except GrammarError as e:
                raise GrammarError(str(e), offset + m.start(2) + e.column) from None
        else:
            out.append((key, value))
        pos = m.end()
