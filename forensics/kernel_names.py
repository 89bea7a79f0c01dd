"""What a kernel's name says about it: the one GEMM-kernel classifier every stage uses.

A cuBLAS(Lt) matmul call launches one *primary* kernel (``nvjet_tst_*``, ``ampere_sgemm_*``,
``sm90_xmma_gemm_*``, ``cutlass::Kernel<cutlass_80_simt_sgemm_*>``, and for the CUDA-core algos
``gemmSN_NN_kernel``, ``gemv2T_kernel``, ``dot_kernel``, ``magma_sgemmEx_kernel``) and sometimes
*auxiliary* kernels right after it (``splitKreduce_kernel`` for split-K, ``reduce_1Block_kernel``
after ``dot_kernel``, the cuBLASLt ``epilogue::impl::globalKernel``). Those are the kernels a
cuBLAS/cuBLASLt log can confirm. A CUTLASS template instantiated by the user
(``cutlass::Kernel<cutlass::gemm::kernel::Gemm<...>>``) is a GEMM kernel too, but no cuBLAS call
launched it; cuDNN's implicit-GEMM convolutions (``implicit_convolve_sgemm``,
``sm80_xmma_fprop_implicit_gemm_*_cudnn``, ``volta_scudnn_*``) are not cuBLAS GEMMs either.

Names are matched on whatever text an instrument gives (mangled, demangled or short): the
tokens below survive mangling.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

#: Launch roles within a library call (see :func:`cublas_launch_role`).
PRIMARY, AUXILIARY = "primary", "auxiliary"

# cuDNN and other non-cuBLAS kernels whose names contain gemm-like tokens.
_NOT_CUBLAS = re.compile(r"cudnn|convolve|cask_|winograd|fft2d|wgrad|dgrad|fprop|implicit_gemm", re.I)
# Auxiliary kernels a cuBLAS(Lt) call launches next to its primary kernel.
_AUXILIARY = re.compile(r"splitKreduce|reduce_1Block_kernel|epilogue::impl::globalKernel|"
                        r"cublasLt(?:::|\w*)epilogue|cublasLtEpilogue", re.I)
# Names cuBLAS ships (tokens survive mangling: _ZN7cutlass6KernelI43cutlass_80_simt_sgemm...).
_CUBLAS_PRIMARY = re.compile(
    r"nvjet_|(?<![A-Za-z_])(?:ampere|volta|turing|maxwell|pascal|kepler|hopper|blackwell|sm\d+)_\w*?(?:gemm|gemv)|"
    r"sm\d+_xmma_gemm|cutlass_\d+_\w*?gemm|cutlass3x_\w*?gemm|_cublas\b|cublasLt::|cublas::|"
    r"(?<![A-Za-z_])(?:gemmSN_\w*?kernel|gemmk1_kernel|gemv2[NT]_kernel|gemvNSP_kernel|gemvx_kernel|dot_kernel|"
    r"magma_\w*?gemm\w*?_kernel)", re.I)
# Any GEMM-looking name (the user's CUTLASS instantiations included).
_GEMM_ANY = re.compile(r"gemm|gemv|nvjet_|cutlass|dot_kernel|splitKreduce|reduce_1Block_kernel", re.I)


@dataclass(frozen=True)
class KernelClass:
    """What a kernel name says: GEMM or not, and whether a cuBLAS(Lt) call can have launched it."""

    gemm: bool  # a GEMM (or GEMV/dot) kernel, whoever launched it
    cublas: bool  # a name cuBLAS ships: a cuBLAS/cuBLASLt call can have launched it
    role: str | None  # PRIMARY / AUXILIARY within a cuBLAS call, None when not cuBLAS
    family: str  # coarse display family: nvjet, sm90_xmma, ampere_sgemm, cutlass, splitKreduce, ...


@lru_cache(maxsize=8192)
def classify_kernel(name: str | None) -> KernelClass:
    """Classify a kernel from any of its names (mangled, demangled or short)."""
    text = name if isinstance(name, str) else ""
    fam = _family(text)
    if not text or _NOT_CUBLAS.search(text):
        return KernelClass(False, False, None, fam)
    if _AUXILIARY.search(text):
        return KernelClass(True, True, AUXILIARY, fam)
    if _CUBLAS_PRIMARY.search(text):
        return KernelClass(True, True, PRIMARY, fam)
    return KernelClass(bool(_GEMM_ANY.search(text)), False, None, fam)


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
    """A few words for reports: "cuBLAS GEMM", "cuBLAS GEMM (auxiliary: split-K reduce...)",
    "GEMM, not a cuBLAS name", or "" for anything else."""
    c = classify_kernel(name)
    if c.cublas:
        return "cuBLAS GEMM" if c.role == PRIMARY else f"cuBLAS GEMM auxiliary ({c.family})"
    return "GEMM, not a cuBLAS name" if c.gemm else ""


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
    from parsers.demangle import short_name  # noqa: PLC0415

    return short_name(name) or "unknown"
