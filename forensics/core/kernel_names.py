"""What a kernel's name says about it: the one kernel-name classifier every stage uses.

A table of name grammars (:data:`GRAMMARS`), each built from real names (the corpus under
``../shared/corpus`` and public profiles; docs/kernel-names.md lists one real name per row), gives a
kernel's **library** (cuBLAS, cuBLASLt, cuDNN, CUTLASS, FBGEMM-GPU, Triton, NCCL, nvFuser, ATen),
its **operation** (gemm, gemv, dot, split-K reduce, convolution, elementwise, collective, ...), and
what its name states about the problem: input **precision**, **layout** (cuBLAS's op letters of A
and B), CTA **tile**, architecture, and hints (split-K, large-k, sliced, segment-k). The first row
that matches wins; a name no row matches is ``library="unknown"``.

A cuBLAS(Lt) matmul call launches one *primary* kernel (``nvjet_tst_*``, ``ampere_sgemm_*``,
``sm90_xmma_gemm_*``, ``cutlass::Kernel<cutlass_80_simt_sgemm_*>``, ``sgemm_largek_lds64``,
``internal::gemvx::kernel<...cublasGemvParamsEx...>``, ``gemv2T_kernel_val``, ``dot_kernel``...) and
sometimes *auxiliary* kernels right after it (``splitKreduce_kernel`` for split-K,
``reduce_1Block_kernel`` after ``dot_kernel``, the cuBLASLt ``epilogue::impl::globalKernel``). Those
are the kernels a cuBLAS/cuBLASLt log can confirm. A CUTLASS template instantiated by the user
(``cutlass::Kernel<cutlass::gemm::kernel::Gemm<...>>``) is a GEMM kernel too, but no cuBLAS call
launched it; cuDNN's implicit-GEMM convolutions (``implicit_convolve_sgemm``,
``sm80_xmma_fprop_implicit_gemm_*_cudnn``, ``volta_scudnn_*``) are not GEMMs; FBGEMM-GPU kernels are
GEMMs only when their name says so (``f8f8bf16_rowwise``...), not its embedding and quantize kernels.

:func:`check_call` states which of those fields a library log line can check, and how
(docs/verdicts.md, "CONFLICT"). Names are matched on whatever text an instrument gives (mangled,
demangled or short): the tokens used survive mangling.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

#: Launch roles within a library call (see :func:`cublas_launch_role`).
PRIMARY, AUXILIARY = "primary", "auxiliary"

# --------------------------------------------------------------------------- precision words
#: Canonical input precision of a name's type token (cuBLAS legacy letters, xmma/CUTLASS words,
#: nvjet letters, C++ template types). ``tf32`` is fp32 data computed in TF32: fp32 in the log.
PRECISION = {
    "s": "fp32", "h": "fp16", "d": "fp64", "c": "complex64", "z": "complex128", "gc": "complex64",
    "i": "int8", "hs": "fp16", "f32": "fp32", "tf32": "fp32", "f16": "fp16", "fp16": "fp16", "bf16": "bf16",
    "f64": "fp64", "e4m3": "fp8", "e5m2": "fp8", "s8": "int8", "i8": "int8", "int8": "int8", "fp8": "fp8",
    "float": "fp32", "double": "fp64", "__half": "fp16", "half": "fp16", "cutlass::half_t": "fp16",
    "__nv_bfloat16": "bf16", "cutlass::bfloat16_t": "bf16", "c10::half": "fp16", "c10::bfloat16": "bf16",
    "float2": "complex64", "double2": "complex128", "cucomplex": "complex64",
}
#: nvjet type letters (``nvjet_<A B? C? compute out>_...``): ``tst`` in a bf16 H200 program
#: (corpus nsys_nvfuser_h200), ``hsh`` fp16, ``sss`` fp32, ``q`` an 8-bit float.
NVJET_LETTER = {"s": "fp32", "h": "fp16", "t": "bf16", "d": "fp64", "q": "fp8", "e": "fp8"}
#: Library log type names -> canonical precision (cuBLASLt ``R_16BF``, cuBLAS ``CUDA_R_16F``, oneMKL ``f32``).
_LOG_TYPE = {"32F": "fp32", "16F": "fp16", "16BF": "bf16", "64F": "fp64", "8F_E4M3": "fp8", "8F_E5M2": "fp8",
             "8F_UE8M0": "fp8", "4F_E2M1": "fp4", "8I": "int8", "32I": "int32", "8U": "uint8"}
#: Legacy cuBLAS function letter -> input precision (cublasSgemm_v2, cublasHgemm, cublasDgemv...).
_FUNCTION_LETTER = {"s": "fp32", "d": "fp64", "h": "fp16", "c": "complex64", "z": "complex128"}

GEMM_OPS = ("gemm", "gemv", "dot", "split-K reduce", "dot reduce", "epilogue")


@dataclass(frozen=True)
class KernelClass:
    """What a kernel name says: library, operation, precision, layout, tile; GEMM or not, and
    whether a cuBLAS(Lt) call can have launched it."""

    gemm: bool  # a GEMM (or GEMV/dot) kernel, whoever launched it
    cublas: bool  # a name cuBLAS ships: a cuBLAS/cuBLASLt call can have launched it
    role: str | None  # PRIMARY / AUXILIARY within a cuBLAS call, None when not cuBLAS
    family: str  # coarse display family: nvjet, sm90_xmma, ampere_sgemm, cutlass, splitKreduce, ...
    library: str = "unknown"  # cuBLAS, cuDNN, CUTLASS (user template), FBGEMM-GPU, Triton, NCCL, nvFuser, ATen
    operation: str = "other"  # gemm, gemv, dot, split-K reduce, convolution, elementwise, reduction, collective...
    grammar: str = ""  # the GRAMMARS row that matched ("" when none did)
    precision: str | None = None  # canonical input precision the name states (fp32, fp16, bf16, fp8...)
    layout: str | None = None  # cuBLAS op letters of A and B ("NN", "TN") when the name states them
    layout_raw: str | None = None  # layout letters the name carries whose mapping is not known (nvjet "TNN")
    tile: tuple[int, int] | None = None  # CTA tile (M, N) the name states
    arch: str | None = None  # ampere, sm90, 80 ...
    hints: tuple[str, ...] = ()  # split-K, largek, sliced1x4, segment_k_on, persistent
    fields: dict[str, str] = field(default_factory=dict, compare=False, hash=False)  # what the grammar captured


def _prec(token: str | None) -> str | None:
    if not token:
        return None
    t = token.strip().lower()
    if t in PRECISION:
        return PRECISION[t]
    m = re.match(r"(bf16|tf32|f16|f32|f64|e4m3|e5m2|s8|i8)", t)
    return PRECISION[m.group(1)] if m else None


_TEMPLATE_TYPE = re.compile(r"(?<![\w:])(float2|double2|float|double|__half|__nv_bfloat16|cutlass::half_t|"
                            r"cutlass::bfloat16_t|c10::Half|c10::BFloat16)(?![\w:])")


def _template_precision(name: str) -> str | None:
    """The first floating type among a demangled name's template arguments (``gemv2T_kernel_val<int,
    int, float, ...>``); None for mangled or short names."""
    inner = name.partition("<")[2]
    m = _TEMPLATE_TYPE.search(inner)
    return _prec(m.group(1)) if m else None


def _tile(text: str | None) -> tuple[int, int] | None:
    m = re.match(r"(\d+)x(\d+)", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class Grammar:
    """One row of the kernel-name table: a pattern and what a match means."""

    name: str
    pattern: re.Pattern
    library: str
    operation: str
    role: str | None = None  # PRIMARY / AUXILIARY when a cuBLAS call launches it
    example: str = ""  # a real name it reads (docs/kernel-names.md gives where each was seen)


def _g(name: str, pattern: str, library: str, operation: str, role: str | None = None, example: str = "") -> Grammar:
    return Grammar(name, re.compile(pattern, re.I), library, operation, role, example)


_ARCH = r"(?:maxwell|pascal|kepler|volta|turing|ampere|hopper|blackwell|ada|sm\d+)"
#: The table, first match wins. Order matters: cuDNN's ``*_scudnn_*``/``implicit_gemm`` before the
#: cuBLAS arch rows; cuBLAS's auxiliary kernels before everything GEMM-like.
GRAMMARS: tuple[Grammar, ...] = (
    _g("cublas_splitk_reduce", r"splitKreduce", "cuBLAS", "split-K reduce", AUXILIARY,
       "void splitKreduce_kernel<float, float, float, float>(cublasSplitKParams<float>, ...)"),
    _g("cublas_dot_reduce", r"reduce_1Block_kernel", "cuBLAS", "dot reduce", AUXILIARY, "reduce_1Block_kernel"),
    _g("cublaslt_epilogue", r"epilogue::impl::globalKernel|cublasLt(?:::|\w*)epilogue|cublasLtEpilogue",
       "cuBLASLt", "epilogue", AUXILIARY,
       "void epilogue::impl::globalKernel<float, float, float, true, true>(int, int, long, float*, cublasLtEpilogue_t, ...)"),
    _g("cudnn_conv", r"convolve_sgemm|cask_|winograd|fft2d_|implicit_gemm|(?<![a-z])(?:wgrad|dgrad|fprop)_|"
       r"scudnn|cudnn::cnn::|im2col", "cuDNN", "convolution", None,
       "volta_scudnn_128x64_relu_interior_nn_v1, void implicit_convolve_sgemm<float, float, 128, ...>(...), "
       "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_..._cudnn"),
    _g("cudnn", r"cudnn|nchwToNhwc|nhwcToNchw", "cuDNN", "other", None,
       "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(...), void nchwToNhwcKernel<...>(...)"),
    _g("cublas_xmma", r"(?P<arch>sm\d+)_xmma_gemm_(?P<types>[a-z0-9]+(?:_[a-z0-9]+)*?)_(?P<layout>[nt]{2})_(?P<c>[nt])_"
       r"tilesize(?P<tile>\d+x\d+)x(?P<tk>\d+)(?P<rest>\w*)", "cuBLAS", "gemm", PRIMARY,
       "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"),
    _g("cublas_nvjet", r"nvjet_(?P<types>[a-z]+)_(?P<tile>\d+x\d+)_(?P<tk>\d+)x(?P<stages>\d+)_(?P<rest>\w*?)_?"
       r"(?P<suffix>[NT]{3})?(?!\w)", "cuBLAS", "gemm", PRIMARY, "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN"),
    _g("cublas_cutlass", r"(?<![A-Za-z])cutlass_(?P<arch>\d+)_(?P<kind>simt|tensorop|wmma_tensorop)_(?P<pre>(?:bf16|f16|fp16|"
       r"tf32|s8|i8)_)?(?P<prec>[a-z]*?)(?P<inst>\d+(?:tf32)?)?gemm_(?P<post>(?:bf16|f16|fp16|f32|relu|s8|i8)_)*"
       r"(?P<tile>\d+x\d+)_(?P<tk>\d+)x(?P<stages>\d+)_(?P<layout>[nt]{2})_align", "cuBLAS", "gemm", PRIMARY,
       "void cutlass::Kernel<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(T1::Params)"),
    _g("cublas_cutlass3x", r"cutlass3x_\w*?gemm", "cuBLAS", "gemm", PRIMARY,
       "cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64_1x1x1_0_tnn_align8"),
    _g("cublas_arch", rf"(?<![A-Za-z_])(?P<arch>{_ARCH})_(?P<pre>(?:fp16|bf16|int8|tf32)_)?(?P<prec>[a-z]*?)"
       r"(?P<inst>\d+(?:tf32)?)?(?P<op>gemm|gemv)_(?P<post>(?:fp16|bf16|int8)_)?(?P<tile>\d+x\d+)(?P<rest>\w*?)_"
       r"(?P<layout>[nt]{2})(?:_v\d+)?(?![A-Za-z0-9])", "cuBLAS", "gemm", PRIMARY,
       "ampere_sgemm_128x64_nn, volta_sgemm_64x32_sliced1x4_tn, ampere_gcgemm_64x64_nt"),
    _g("cublas_largek", r"(?<![A-Za-z])(?P<prec>[sdhcz])gemm_largek_\w*", "cuBLAS", "gemm", PRIMARY,
       "void sgemm_largek_lds64<true, false, 6, 4, 4, 4, 4, 32>(...)"),
    _g("cublas_gemvx", r"gemvx|cublasGemvParams|gemv2[NT]_kernel|gemvNSP_kernel", "cuBLAS", "gemv", PRIMARY,
       "void internal::gemvx::kernel<int, int, float, float, float, float, false, true, true, false, 7, false, "
       "cublasGemvParamsEx<...> >(...)"),
    _g("cublas_cuda_core", r"(?<![A-Za-z_])(?:gemmSN_(?P<layout>[NT]{2})_kernel|gemmk1_kernel|magma_\w*?gemm\w*?_kernel)",
       "cuBLAS", "gemm", PRIMARY, "gemmSN_NN_kernel"),
    _g("cublas_dot", r"(?<![A-Za-z_])dot_kernel", "cuBLAS", "dot", PRIMARY, "dot_kernel"),
    _g("cublas_other", r"_cublas\b|cublasLt::|cublas::", "cuBLAS", "gemm", PRIMARY, "..._kernel__5x_cublas"),
    _g("fbgemm_gemm", r"fbgemm\w*?(?:::|_)\w*?(?:gemm|f8f8bf16|f8i4bf16|bf16i4bf16|_mm_|matmul)", "FBGEMM-GPU", "gemm",
       None, "fbgemm_gpu::f8f8bf16_rowwise..."),
    _g("fbgemm", r"fbgemm", "FBGEMM-GPU", "other", None,
       "fbgemm_gpu::(anonymous namespace)::index_select_2d_kernel<...>"),
    _g("cutlass_user", r"cutlass(?:::|\w)", "CUTLASS (user template)", "gemm", None,
       "void cutlass::Kernel<cutlass::gemm::kernel::Gemm<cutlass::gemm::threadblock::MmaPipelined<...>>>(...)"),
    _g("triton_template_mm", r"^triton_tem_\w*?(?:mm|matmul)", "Triton", "gemm", None, "triton_tem_fused_mm_0"),
    _g("triton", r"^triton_(?P<kind>poi|per|red|tem|for)?_?", "Triton", "triton", None, "triton_poi_fused_add_cos_sin_0"),
    _g("nccl", r"nccl(?:Dev)?Kernel|nccl::|ncclKernel", "NCCL", "collective", None,
       "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
    _g("nvfuser", r"nvfuser_(?P<kind>[a-z]+(?:_[a-z]+)*?)_f\d", "nvFuser", "fusion", None,
       "nvfuser_pointwise_f0_c1_r0_g0(...)"),
    _g("aten_elementwise", r"at::native::\w*?elementwise_kernel|at::native::(?:\(anonymous namespace\)::)?\w*elementwise",
       "ATen", "elementwise", None, "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>, ...>"),
    _g("aten_reduce", r"at::native::\w*?reduce_kernel", "ATen", "reduction", None,
       "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float>, ...>"),
    _g("aten_index", r"indexFunc|index_add|indexSelect|index_select", "ATen", "index", None, "indexFuncLargeIndex"),
    _g("aten", r"at::native::|at::cuda::|cunn_|softmax_warp", "ATen", "other", None,
       "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(...)"),
)
#: Any other GEMM-looking token: a GEMM whose library the table does not know.
_GEMM_ANY = re.compile(r"gemm|gemv", re.I)


def _fields_of(g: Grammar, m: re.Match, text: str) -> dict[str, Any]:
    gd = {k: v for k, v in m.groupdict().items() if v}
    out: dict[str, Any] = {"fields": {k: str(v) for k, v in gd.items()}}
    hints: list[str] = []
    if g.name == "cublas_xmma":
        types = gd.get("types", "")
        out["precision"] = _prec(types)
        out["layout"] = gd["layout"].upper()
        out["tile"] = _tile(gd.get("tile"))
        out["arch"] = gd.get("arch")
        if "segment_k_on" in gd.get("rest", ""):
            hints.append("segment_k_on")
        hints.append("persistent")  # sm90 kernels may loop over tiles: grid is not tiles
    elif g.name == "cublas_nvjet":
        letters = gd.get("types", "")
        first = letters[0] if letters else ""
        out["precision"] = NVJET_LETTER.get(first) if len(letters) >= 3 else None
        out["layout_raw"] = gd.get("suffix")
        out["tile"] = _tile(gd.get("tile"))
        hints.append("persistent")
    elif g.name in ("cublas_cutlass", "cublas_arch"):
        pre = (gd.get("pre") or "").rstrip("_")
        out["precision"] = _prec(pre) if pre else _prec(gd.get("prec"))
        out["layout"] = gd["layout"].upper()
        out["tile"] = _tile(gd.get("tile"))
        out["arch"] = gd.get("arch")
        rest = gd.get("rest") or ""
        hints += [h for h in ("sliced1x4", "splitK", "largek") if h.lower() in rest.lower()]
        if gd.get("op") == "gemv":
            out["operation"] = "gemv"
    elif g.name == "cublas_largek":
        out["precision"] = _prec(gd.get("prec"))
        hints.append("largek")
    elif g.name == "cublas_cuda_core" and gd.get("layout"):
        out["layout"] = gd["layout"].upper()
    if g.name == "cublas_gemvx":  # the matrix operand's type: cublasGemvTensorStridedBatched<float const>
        m2 = re.search(r"cublasGemvTensor\w*<([\w:]+)", text)
        out["precision"] = _prec(m2.group(1)) if m2 else _template_precision(text)
    if g.name in ("cublas_cuda_core", "cublas_dot", "cutlass_user") and out.get("precision") is None:
        out["precision"] = _template_precision(text)
    # Auxiliary kernels (split-K reduce, epilogue) are typed by the accumulator, not by A and B: no precision.
    if g.name == "cutlass_user":
        m2 = re.search(r"GemmShape<(?:\(int\))?(\d+),\s*(?:\(int\))?(\d+)", text)
        if m2:
            out["tile"] = (int(m2.group(1)), int(m2.group(2)))
    if g.name == "triton" and gd.get("kind"):
        out["operation"] = {"poi": "pointwise", "per": "persistent reduction", "red": "reduction",
                            "tem": "template", "for": "foreach"}.get(gd["kind"].lower(), "triton")
    if g.name == "nvfuser" and gd.get("kind"):
        out["operation"] = gd["kind"].lower()
    if g.name == "cublas_splitk_reduce":
        hints.append("splitK")
    if g.name == "ck":  # the kernel function CK instantiated (kernel_gemm_xdl..., kernel_grouped_conv_fwd...)
        m2 = re.search(r"(?:::|\d)(kernel_\w+?)(?:<|I|$)", text)
        fn = m2.group(1).lower() if m2 else ""
        out["operation"] = "convolution" if "conv" in fn else "gemm" if "gemm" in fn else "other"
        if fn:
            out["fields"] = {**out["fields"], "function": fn}
    if g.name == "rocblas_kernel" and "gemv" in (gd.get("fn") or ""):
        out["operation"] = "gemv"
    if g.name == "tensile":  # AMD: the fields live in the AMD block at the end of this module
        fields = tensile_fields(text)
        out.update({k: v for k, v in fields.items() if k != "hints"})
        hints += fields["hints"]
    out["hints"] = tuple(hints)
    return out


@lru_cache(maxsize=8192)
def classify_kernel(name: str | None) -> KernelClass:
    """Classify a kernel from any of its names (mangled, demangled or short), by the first
    :data:`GRAMMARS` row that matches."""
    text = name if isinstance(name, str) else ""
    fam = _family(text)
    if not text:
        return KernelClass(False, False, None, fam)
    for g in GRAMMARS:
        m = g.pattern.search(text)
        if not m:
            continue
        extra = _fields_of(g, m, text)
        op = extra.pop("operation", g.operation)
        cublas = g.library in ("cuBLAS", "cuBLASLt")
        return KernelClass(op in GEMM_OPS, cublas, g.role if cublas else None, fam, g.library, op, g.name, **extra)
    gemm = bool(_GEMM_ANY.search(text))
    return KernelClass(gemm, False, None, fam, "unknown", "gemm" if gemm else "other")


def is_gemm_kernel(name: str | None) -> bool:
    """A GEMM-family kernel (cuBLAS's, or a CUTLASS/user GEMM); cuDNN convolutions excluded."""
    return classify_kernel(name).gemm


def is_cublas_gemm(name: str | None) -> bool:
    """A kernel a cuBLAS or cuBLASLt matmul call launches (primary or auxiliary)."""
    return classify_kernel(name).cublas


def cublas_launch_role(name: str | None) -> str | None:
    """PRIMARY (starts one call's launches), AUXILIARY (belongs to the call before), or None."""
    return classify_kernel(name).role


def kernel_family(name: str | None) -> str:
    """Coarse kernel family from a (demangled) name: splitKreduce, gemv, cutlass, sm90_xmma, nvjet..."""
    return classify_kernel(name).family


def describe_kernel(name: str | None) -> str:
    """A few words for reports: "cuBLAS GEMM", "cuBLAS GEMV", "cuBLAS GEMM auxiliary (splitKreduce)",
    "GEMM, not a cuBLAS name (CUTLASS (user template))", or "" for anything else."""
    c = classify_kernel(name)
    if c.cublas:
        if c.role == PRIMARY:
            return f"cuBLAS {c.operation.upper() if c.operation in ('gemm', 'gemv', 'dot') else 'GEMM'}"
        return f"cuBLAS GEMM auxiliary ({c.family})"
    words = _LIBRARY_WORDS.get(c.library)
    if words is not None:  # AMD's libraries, Triton, NCCL/RCCL: their own words, never "not a cuBLAS name"
        op = {"gemm": "GEMM", "gemv": "GEMV", "split-K reduce": "GEMM split-K reduction"}.get(c.operation, c.operation)
        return f"{words} {op}" if op not in ("other", "triton") else f"{words} kernel"
    if c.gemm:
        return "GEMM, not a cuBLAS name" + (f" ({c.library})" if c.library != "unknown" else "")
    return ""


#: Libraries whose kernels describe_kernel names in their own words (AMD's, and those of both vendors).
_LIBRARY_WORDS = {"Tensile (hipBLASLt/rocBLAS)": "Tensile (hipBLASLt/rocBLAS)", "MIOpen": "MIOpen",
                  "composable_kernel (CK)": "composable_kernel (CK)", "rocBLAS": "rocBLAS", "Triton": "Triton",
                  "NCCL": "NCCL/RCCL"}


# --------------------------------------------------------------------------- identity: name vs library log
CONSISTENT, CONFLICTS, UNCHECKED = "consistent", "conflict", "unchecked"


@dataclass(frozen=True)
class FieldCheck:
    """One descriptor both instruments may carry, compared for one launch and one library call."""

    field: str  # library, precision, layout, grid, batch
    status: str  # CONSISTENT | CONFLICTS | UNCHECKED
    kernel: str | None = None  # what the kernel side says (name, grid)
    log: str | None = None  # what the library log says
    why: str = ""  # for UNCHECKED: what is missing; for CONFLICTS: the rule broken

    def text(self) -> str:
        if self.status == CONFLICTS:
            return f"{self.field}: kernel {self.kernel} vs log {self.log}" + (f" ({self.why})" if self.why else "")
        if self.status == UNCHECKED:
            return f"{self.field} ({self.why})" if self.why else self.field
        return self.field


def _val(row: dict, key: str) -> Any:
    v = row.get(key)
    if v is None:
        return None
    try:
        if v != v:  # NaN
            return None
    except (TypeError, ValueError):
        return None
    if str(v) in ("<NA>", "nan", "None", ""):
        return None
    return v


def log_precision(call: dict) -> str | None:
    """The input precision of A and B a library log line states (cuBLASLt ``Adesc type``, cuBLAS
    ``Atype`` or the function letter of ``cublasSgemm_v2``)."""
    types = [t for t in (_val(call, "a_type"), _val(call, "b_type")) if t is not None]
    precs = set()
    for t in types:
        key = re.sub(r"^(?:CUDA_)?[RC]_", "", str(t).upper())
        p = _LOG_TYPE.get(key) or _prec(str(t))
        if p and str(t).upper().startswith(("C_", "CUDA_C_")):
            p = {"fp32": "complex64", "fp64": "complex128"}.get(p, p)
        if p:
            precs.add(p)
    if precs:
        return "/".join(sorted(precs))
    fn = str(_val(call, "function") or "")
    m = re.match(r"cublas([SDHCZ])(?:gemm|gemv|dot|geam|syrk|trsm)", fn)
    if m:
        return _FUNCTION_LETTER[m.group(1).lower()]
    m = re.match(r"cublasLt([SDHTBQ])[SDHTBQ][SDHTBQ]Matmul", fn)
    if m:
        return {"S": "fp32", "D": "fp64", "H": "fp16", "T": "bf16"}.get(m.group(1))
    return None


def _grid(text: Any) -> tuple[int, int, int] | None:
    nums = re.findall(r"\d+", str(text)) if text is not None else []
    return (int(nums[0]), int(nums[1]), int(nums[2])) if len(nums) >= 3 else None


def _call_layout(call: dict) -> tuple[Any, Any, list[Any]]:
    """A call's transa, transb and the operand orders that are row-major (which the letters do not describe)."""
    rows = [o for o in (_val(call, "a_order"), _val(call, "b_order")) if o is not None and "ROW" in str(o).upper()]
    return _val(call, "transa"), _val(call, "transb"), rows


def _layout_check(layout: str, ta: Any, tb: Any) -> FieldCheck:
    """The layout letters a kernel's name states against the call's transa/transb. The same product
    computed as its transpose (Cᵀ = Bᵀ·Aᵀ) has the letters flipped and swapped: NN <-> TT (TN and NT
    are their own): a library may run that problem, so it is not a conflict."""
    log_layout = "".join("T" if str(x).upper() in ("T", "C") else "N" for x in (ta, tb))
    flip = {"N": "T", "T": "N"}
    swapped = flip[log_layout[1]] + flip[log_layout[0]]
    ok = layout in (log_layout, swapped)
    return FieldCheck("layout", CONSISTENT if ok else CONFLICTS, layout, f"transa={ta} transb={tb}",
                      "as the transposed problem" if ok and layout != log_layout else "")


def check_call(name: str | None, grid: Any, call: dict, log_library: str = "cuBLAS") -> list[FieldCheck]:
    """Compare what a kernel's name (and grid) says with one library call the log matched to it.

    Fields (docs/verdicts.md, "CONFLICT"):

    * **library**: the name is one cuBLAS ships (cuBLAS and cuBLASLt share their kernels).
    * **precision**: the name's input precision vs the log's A/B types.
    * **layout**: the name's op letters of A and B (cuBLAS terms, ``_nn``/``_tn``) vs the log's
      ``transa``/``transb`` (``C`` reads as ``T``), or the letters of the transposed problem
      (``Cᵀ = Bᵀ·Aᵀ``: NN and TT swap, TN and NT are their own); unchecked when the log stores an
      operand row-major (``ORDER_ROW``) or the name states no letters.
    * **grid**: the CTAs in x*y vs the tiles of the log's ``m x n`` for the name's tile (either
      orientation): at least one CTA per tile, at most 8 per tile (CUTLASS's swizzle pads a
      grid by up to 8); unchecked for persistent kernels (sm90 xmma, nvjet: grids sized by SMs).
    * **batch/split-K**: with ``batchCount`` or ``numSplitsK`` > 1, grid.z is a multiple of their
      product (non-persistent kernels: the ResNet-50 trace's split-K ``volta_sgemm`` has z = 5).
    """
    kc = classify_kernel(name)
    out: list[FieldCheck] = []
    if kc.cublas:
        out.append(FieldCheck("library", CONSISTENT, kc.library, log_library))
    else:
        out.append(FieldCheck("library", CONFLICTS, kc.library, log_library,
                              f"a {log_library} call launches only kernels cuBLAS ships"))
    lp = log_precision(call)
    if kc.precision and lp:
        ok = kc.precision in lp.split("/")
        out.append(FieldCheck("precision", CONSISTENT if ok else CONFLICTS, kc.precision, lp))
    else:
        out.append(FieldCheck("precision", UNCHECKED, kc.precision, lp,
                              "the name states no precision" if not kc.precision else "the log states no A/B type"))
    ta, tb, rows = _call_layout(call)
    if kc.layout and ta is not None and tb is not None and not rows:
        out.append(_layout_check(kc.layout, ta, tb))
    else:
        why = ("the name states no layout letters" + (f" (its suffix {kc.layout_raw} has no known mapping)"
                                                     if kc.layout_raw else "")) if not kc.layout else             "an operand is stored row-major (ORDER_ROW)" if rows else "the log states no transa/transb"
        out.append(FieldCheck("layout", UNCHECKED, kc.layout or kc.layout_raw, None, why))
    g = _grid(grid)
    m, n = _val(call, "m"), _val(call, "n")
    if "persistent" in kc.hints:
        out.append(FieldCheck("grid", UNCHECKED, str(grid) if g else None, None,
                              "a persistent kernel: its grid is sized by the SM count, not by m x n"))
    elif kc.tile and g and m is not None and n is not None:
        tm, tn = kc.tile
        m, n = int(m), int(n)
        tiles = [math.ceil(m / tm) * math.ceil(n / tn), math.ceil(m / tn) * math.ceil(n / tm)]
        ctas = g[0] * g[1]
        ok = min(tiles) <= ctas <= 8 * max(tiles)
        out.append(FieldCheck("grid", CONSISTENT if ok else CONFLICTS, f"grid {g} with tile {tm}x{tn} ({ctas} CTAs in x*y)",
                              f"m={m} n={n} ({min(tiles)} tile(s))",
                              "" if ok else "x*y must cover the m x n tiles with at most 8 CTAs per tile"))
    else:
        out.append(FieldCheck("grid", UNCHECKED, str(grid) if g else None, f"m={m} n={n}" if m is not None else None,
                              "the name states no tile" if not kc.tile else
                              "no grid recorded" if not g else "the log states no m, n"))
    batch = _val(call, "batch_count")
    splits = _val(call, "num_splits_k")
    batch = int(batch) if batch is not None and str(batch).lstrip("-").isdigit() else None
    splits = int(splits) if splits is not None and str(splits).isdigit() else None
    z_of = [(what, n) for what, n in (("batchCount", batch), ("numSplitsK", splits)) if n is not None and n > 1]
    if z_of and g and "persistent" not in kc.hints:
        want = math.prod(n for _, n in z_of)
        ok = g[2] % want == 0
        out.append(FieldCheck("batch/split-K", CONSISTENT if ok else CONFLICTS, f"grid.z={g[2]}",
                              " x ".join(f"{w}={n}" for w, n in z_of),
                              "" if ok else "grid.z must be a multiple of the batch count times the split-K slices"))
    else:
        out.append(FieldCheck("batch/split-K", UNCHECKED, f"grid.z={g[2]}" if g else None, None,
                              "no batch count or split-K > 1 in the log" if not z_of else "persistent kernel or no grid"))
    return out


# --------------------------------------------------------------------------- identity across readers
_CAST = re.compile(r"\((?:unsigned\s+)?(?:int|long|char|short|bool)\)(?=-?\d|true|false)")
_SPACE = re.compile(r"\s+")
#: Columns holding an instrument's own demangled text (ncu's and nsys's demanglers).
TEXT_COLUMNS = ("kernel", "demangled_ncu", "demangled_nsys")


def normalize_text(name: str | None) -> str | None:
    """A demangled name with the demanglers' spelling differences removed: whitespace, ``(int)``
    casts on template values (ncu prints ``one_warptiling<(int)128, ...>``, cxxfilt ``<128, ...>``)."""
    if not isinstance(name, str) or not name:
        return None
    return _SPACE.sub("", _CAST.sub("", name))


def kernel_keys(df) -> list[str | None]:
    """The identity each launch row is counted under: the mangled symbol wherever an instrument
    gives one. A row without it (an ncu CSV export, a 2021 nsys export, Kineto) takes the mangled
    symbol of a row, from any reader, whose demangled text (cxxfilt's, ncu's or nsys's own) is the
    same after :func:`normalize_text`; when none is known (or two symbols share a text) its
    normalized demangled text, else its short name. Demangled text is for display only."""
    texts = [c for c in TEXT_COLUMNS if c in df.columns]
    mangled = list(df["mangled"]) if "mangled" in df.columns else [None] * len(df)
    alias: dict[str, str | None] = {}
    for i, m in enumerate(mangled):
        if not isinstance(m, str) or not m:
            continue
        for t in texts:
            key = normalize_text(_str(df[t].iloc[i]))
            if key is None:
                continue
            alias[key] = m if alias.get(key, m) == m else None  # ambiguous: two symbols, one text
    out: list[str | None] = []
    shorts = list(df["short_name"]) if "short_name" in df.columns else [None] * len(df)
    for i, m in enumerate(mangled):
        if isinstance(m, str) and m:
            out.append(m)
            continue
        found = None
        for t in texts:
            key = normalize_text(_str(df[t].iloc[i]))
            if key is not None and alias.get(key):
                found = alias[key]
                break
        if found is None:
            found = next((k for t in texts if (k := normalize_text(_str(df[t].iloc[i])))), None)
        out.append(found if found is not None else normalize_text(_str(shorts[i])))
    return out


def _str(v) -> str | None:
    return v if isinstance(v, str) else None


def _family(name: str) -> str:
    if not name:
        return "unknown"
    low = name.lower()
    for token, family in (("splitkreduce", "splitKreduce"), ("reduce_1block", "reduce_1Block"),
                          ("dot_kernel", "dot"), ("epilogue::impl", "epilogue"), ("gemv", "gemv"), ("nvjet", "nvjet"),
                          ("cutlass", "cutlass"), ("indexfunc", "index"), ("index_add", "index")):
        if token in low:
            return family
    m = re.search(r"(sm\d+)_xmma", low)
    if m:
        return f"{m.group(1)}_xmma"
    m = re.search(r"([a-z]+)_([a-z]*gemm)", low)
    if m:
        return f"{m.group(1)}_{m.group(2)}"
    from forensics.core.demangle import short_name  # noqa: PLC0415

    return short_name(name) or "unknown"


# =========================================================================== AMD: Tensile kernel names
# hipBLASLt and rocBLAS run GEMMs as Tensile (TensileLite) kernels, named after their problem type
# and solution: ``Cijk_Alik_Bljk_BBS_BH_UserArgs_MT128x128x64_MI16x16x1_SN_..._WG32_8_1``.
# ``Cijk`` are C's indices (i: m, j: n, k: batch); A's and B's indices say the layout (l is the
# summed index: ``Ailk`` A is m x k, not transposed; ``Alik`` transposed; ``Bljk`` B is k x n, not
# transposed; ``Bjlk`` transposed; a ``C`` after them: conjugated); then the data types (TensileLite:
# ``HHS_BH`` = A/B fp16, D fp16, compute fp32, then B batched, H high-precision accumulate; older
# Tensile: ``SB``, ``DB``, ``HBH``, ``BBH`` = one type letter, B, H); ``MT<M>x<N>x<depthU>`` is the
# macro tile, ``MI...`` the matrix instruction, ``WG<x>_<y>_<z>`` the workgroup, ``GSU<n>`` global
# split-U (split-K), ``SK<n>`` stream-K (a persistent kernel). docs/amd.md, docs/kernel-names.md.

TENSILE_LIBRARY = "Tensile (hipBLASLt/rocBLAS)"
TENSILE_ROW = _g("tensile", r"(?<![A-Za-z])Cijk_A(?P<a>[a-z]{2,})(?P<ac>C?)_B(?P<b>[a-z]{2,})(?P<bc>C?)_",
                 TENSILE_LIBRARY, "gemm", PRIMARY,
                 "Cijk_Alik_Bljk_BBS_BH_UserArgs_MT128x128x64_MI16x16x1_SN_AFC1_GSUAMB_ISA950_MIWT2_2_WG32_8_1")
#: GSU > 1 ("global split-U", split-K) can finish in a second kernel that sums the partial tiles,
#: named by TensileLite's ContractionSolution (ROCm/hipBLASLt tensilelite/src/ContractionSolution.cpp):
#: ``Cijk_<types>_..._PostGSU<n>_VW<vw>``; it belongs to the call of the GEMM before it (AUXILIARY).
TENSILE_POSTGSU_ROW = _g("tensile_postgsu", r"(?<![A-Za-z])Cijk_\w*?_PostGSU", TENSILE_LIBRARY, "split-K reduce",
                         AUXILIARY, "Cijk_SS_BiasS_HAS_ScaleAlphaVec_PostGSU16_VW1")
GRAMMARS = GRAMMARS + (TENSILE_POSTGSU_ROW, TENSILE_ROW)  # no earlier row matches a Cijk_ name (tests/test_amd_kernel_names.py)

# The other AMD libraries' kernels, as real ROCm traces name them (tests/test_amd_kernel_names.py gives
# each name's source). MIOpen (AMD's cuDNN): its implicit-GEMM convolutions (``igemm_{fwd,bwd,wrw}_gtc*``),
# the layout transposes and tensor ops its solvers launch, its OpenCL/HIP kernels named ``MIOpen*`` and
# its naive reference convolutions; composable_kernel (CK, the template library under MIOpen, hipBLASLt
# and aiter: ``ck::tensor_operation::device::kernel_*``, ``ck_tile::kentry<...>``, mangled ``_ZN2ck``/
# ``_ZN7ck_tile``); rocBLAS's own (non-Tensile) kernels (``rocblas_gemvn_kernel<...>``). NCCL's names are
# RCCL's too (``ncclDevKernel_Generic`` on an MI300X): the ``nccl`` row above reads both.
MIOPEN_LIBRARY, CK_LIBRARY = "MIOpen", "composable_kernel (CK)"
AMD_GRAMMARS: tuple[Grammar, ...] = (
    _g("miopen_igemm", r"(?<![A-Za-z])igemm_(?:fwd|bwd|wrw)_gtc", MIOPEN_LIBRARY, "convolution", None,
       "igemm_fwd_gtcx2_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8_ws1x1_wr2x2_ta1x8x2x1_1x4x1x64_tb1x8x2x1_1x4x1x64_gkgs"),
    _g("miopen_naive_conv", r"(?<![A-Za-z])naive_conv_(?:(?:non)?packed_)?(?:fwd|bwd|wrw)_", MIOPEN_LIBRARY,
       "convolution", None, "naive_conv_fwd_nchw_half_double_half"),
    _g("miopen", r"^(?:void )?(?:MIOpen\w+|miopen\w+|SubTensorOp\w+|batched_transpose_\w+|"
       r"transpose_(?:NCHW2CNHW|CNHW2NCHW)\w*|gcnAsmConv\w+|Im2Col\w*)", MIOPEN_LIBRARY, "other", None,
       "MIOpenBatchNormFwdTrainSpatial, SubTensorOpWithScalar1d, batched_transpose_16x64_pack_1x4_ediv_1x2_half"),
    _g("ck", r"^(?:void )?ck(?:_tile)?::|^_ZN2ck\d|^_ZN7ck_tile\d", CK_LIBRARY, "other", None,
       "void ck::tensor_operation::device::(anonymous namespace)::kernel_grouped_conv_fwd_xdl_cshuffle_v3<...>(...)"),
    _g("rocblas_kernel", r"^(?:void )?rocblas_(?P<fn>\w+?)_kernel", "rocBLAS", "other", None,
       "void rocblas_gemvn_kernel<...>(...)"),
)
GRAMMARS = GRAMMARS + AMD_GRAMMARS


def tensile_launch_role(name: str | None) -> str | None:
    """PRIMARY for a Tensile GEMM kernel (it starts a hipBLASLt/rocBLAS call's launches), AUXILIARY for
    its PostGSU reduction (it joins the call before it), None for any other name: the role
    :func:`cublas_launch_role` gives cuBLAS kernels (classify_kernel keeps roles for cuBLAS names only)."""
    g = classify_kernel(name).grammar
    return PRIMARY if g == "tensile" else AUXILIARY if g == "tensile_postgsu" else None

#: Tensile type letters -> canonical precision (the vocabulary of parsers._amd.canonical_type, 8-bit floats as "fp8").
TENSILE_TYPE = {"S": "fp32", "D": "fp64", "H": "fp16", "B": "bf16", "C": "complex64", "Z": "complex128",
                "X": "xf32", "I": "int32", "I8": "int8", "4xi8": "int8", "F8": "fp8", "B8": "fp8", "F8N": "fp8",
                "B8N": "fp8"}
_TENSILE_TYPE_TOKEN = re.compile(r"4xi8|I8|F8N|B8N|F8|B8|[SDHBCZXI]")
_TENSILE_FLAGS = re.compile(r"B?H?")


def _tensile_types(tokens: list[str]) -> tuple[list[str], str]:
    """The type letters of a name's problem type and the style that spelled them."""
    first = tokens[0] if tokens else ""
    second = tokens[1] if len(tokens) > 1 else ""
    if second and _TENSILE_FLAGS.fullmatch(second) and second.startswith("B"):  # TensileLite: HHS_BH, S_B
        return _TENSILE_TYPE_TOKEN.findall(first), "tensilelite"
    for flags in ("BH", "B"):  # older Tensile: SB, DB, HBH, BBH
        if first.endswith(flags) and len(first) > len(flags):
            return _TENSILE_TYPE_TOKEN.findall(first[: -len(flags)]), "tensile"
    return _TENSILE_TYPE_TOKEN.findall(first), "unknown"


def tensile_fields(name: str) -> dict[str, Any]:
    """What a Tensile name states: precision of A, layout letters (cuBLAS/BLAS op letters of A and B),
    macro tile (M, N), and in ``fields``: depthU, matrix instruction, workgroup, GSU, the type letters."""
    m = TENSILE_ROW.pattern.search(name)
    if m is None:
        return {"hints": ()}
    a, b = m["a"], m["b"]
    la = "N" if a.find("i") < a.find("l") else "T"
    lb = "N" if b.find("l") < b.find("j") else "T"
    rest = name[m.end():]
    tokens = rest.split("_")
    types, style = _tensile_types(tokens)
    fields: dict[str, str] = {"A": "A" + a + m["ac"], "B": "B" + b + m["bc"], "types": "".join(types),
                              "type_style": style}
    hints: list[str] = []
    if m["ac"] or m["bc"]:
        hints.append("conjugate")
    mt = re.search(r"(?<![A-Za-z])MT(\d+)x(\d+)x(\d+)", rest)
    if mt:
        fields["depth_u"] = mt.group(3)
    mi = re.search(r"(?<![A-Za-z])MI(\d+x\d+x\d+(?:x\d+)?)", rest)
    if mi:
        fields["matrix_instruction"] = mi.group(1)
    wg = re.search(r"(?<![A-Za-z])WG(\d+)_(\d+)_(\d+)", rest)
    if wg:
        fields["workgroup"] = "x".join(wg.groups())
    gsu = re.search(r"(?<![A-Za-z])GSU(\d+)", rest)
    if gsu:
        fields["gsu"] = gsu.group(1)
        if int(gsu.group(1)) > 1:
            hints.append("splitK")
    if re.search(r"(?<![A-Za-z])SK[1-9](?![0-9])|StreamK", rest):
        hints.append("persistent")  # stream-K: the grid is sized by the CU count, not by m x n
    return {"precision": TENSILE_TYPE.get(types[0]) if types else None, "layout": la + lb,
            "tile": (int(mt.group(1)), int(mt.group(2))) if mt else None, "fields": fields, "hints": tuple(hints)}


def _precision_family(p: str | None) -> str | None:
    """``fp8_e4m3_fnuz`` -> ``fp8``: the names state 8-bit floats without their variant."""
    return p.split("_")[0] if isinstance(p, str) else None


def check_amd_call(name: str | None, grid: Any, call: dict, log_library: str = "hipBLASLt") -> list[FieldCheck]:
    """:func:`check_call` for AMD: a rocprofv3 (or Kineto-on-ROCm) launch's kernel name and grid (in
    workgroups, as parsers.rocprofv3 and parsers.kineto give it: both divide the printed work-items) against one hipBLASLt or rocBLAS call (parsers.hipblaslt_log's
    CALL_COLUMNS: canonical ``precision``, ``transa``/``transb``, ``m``, ``n``, ``batch_count``).

    * **library**: a Tensile name is CONSISTENT; a name the table gives to another library that
      is no GEMM (ATen, NCCL, ...) CONFLICTS; anything else is UNCHECKED (hipBLASLt also has
      kernel generators the table does not know).
    * **precision**, **layout** (exact letters, or those of the transposed problem, as for cuBLAS),
      **grid** (at least one workgroup per macro tile of m x n, at most 8; unchecked for stream-K
      kernels) and **batch** (grid.z a multiple of the batch count) as in :func:`check_call`.
    """
    kc = classify_kernel(name)
    out: list[FieldCheck] = []
    if kc.grammar in ("tensile", "tensile_postgsu"):
        out.append(FieldCheck("library", CONSISTENT, kc.library, log_library))
    elif kc.library != "unknown" and not kc.gemm:
        out.append(FieldCheck("library", CONFLICTS, kc.library, log_library,
                              f"a {log_library} call launches GEMM kernels, not {kc.library} {kc.operation}"))
    else:
        out.append(FieldCheck("library", UNCHECKED, kc.library, log_library,
                              "not a Tensile name: the table knows no other kernel family of this library"))
    lp = _val(call, "precision")
    np_ = _precision_family(kc.precision)
    if np_ and lp:
        ok = np_ in {_precision_family(x) for x in str(lp).split("/")}
        out.append(FieldCheck("precision", CONSISTENT if ok else CONFLICTS, kc.precision, str(lp)))
    else:
        out.append(FieldCheck("precision", UNCHECKED, kc.precision, lp,
                              "the name states no precision" if not np_ else "the log states no A/B type"))
    ta, tb, rows = _call_layout(call)
    if kc.layout and ta is not None and tb is not None and not rows:
        out.append(_layout_check(kc.layout, ta, tb))
    else:
        out.append(FieldCheck("layout", UNCHECKED, kc.layout, None,
                              "the name states no layout" if not kc.layout else
                              "an operand is stored row-major (order=row)" if rows else "the log states no transa/transb"))
    g = _grid(grid)
    m, n = _val(call, "m"), _val(call, "n")
    if "persistent" in kc.hints:
        out.append(FieldCheck("grid", UNCHECKED, str(grid) if g else None, None,
                              "a stream-K kernel: its grid is sized by the CU count, not by m x n"))
    elif kc.tile and g and m is not None and n is not None:
        tm, tn = kc.tile
        m, n = int(m), int(n)
        tiles = [math.ceil(m / tm) * math.ceil(n / tn), math.ceil(m / tn) * math.ceil(n / tm)]
        wgs = g[0] * g[1]
        ok = min(tiles) <= wgs <= 8 * max(tiles)
        out.append(FieldCheck("grid", CONSISTENT if ok else CONFLICTS,
                              f"grid {g} workgroups with macro tile {tm}x{tn} ({wgs} in x*y)",
                              f"m={m} n={n} ({min(tiles)} tile(s))",
                              "" if ok else "x*y must cover the m x n tiles with at most 8 workgroups per tile"))
    else:
        out.append(FieldCheck("grid", UNCHECKED, str(grid) if g else None, f"m={m} n={n}" if m is not None else None,
                              "the name states no macro tile" if not kc.tile else
                              "no grid recorded" if not g else "the log states no m, n"))
    batch = _val(call, "batch_count")
    batch = int(batch) if batch is not None and str(batch).lstrip("-").isdigit() else None
    if batch and batch > 1 and g and "persistent" not in kc.hints:
        ok = g[2] % batch == 0
        out.append(FieldCheck("batch/split-K", CONSISTENT if ok else CONFLICTS, f"grid.z={g[2]}", f"batch_count={batch}",
                              "" if ok else "grid.z must be a multiple of the batch count"))
    else:
        out.append(FieldCheck("batch/split-K", UNCHECKED, f"grid.z={g[2]}" if g else None, None,
                              "no batch count > 1 in the log" if not (batch and batch > 1) else "stream-K kernel or no grid"))
    return out
