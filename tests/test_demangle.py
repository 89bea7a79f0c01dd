"""forensics.core.demangle: Itanium demangling and nsys/ncu-style short names."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forensics.core.demangle import demangle, demangle_all, short_name

# Real symbol pairs: nsys mangledName/demangledName/shortName (corpus extrap_con_kernel.sqlite) and
# ncu NameBase_MANGLED/DEMANGLED/FUNCTION (corpus extrap_ex-gpu.s10.ncu-rep).
REAL = [
    ("_Z5test0Pdyy", "test0(double*, unsigned long long, unsigned long long)", "test0"),
    ("_Z10init_arrayPdm", "init_array(double*, unsigned long)", "init_array"),
]


@pytest.mark.parametrize("mangled,demangled,short", REAL)
def test_real_symbols(mangled, demangled, short):
    assert demangle(mangled) == demangled
    assert short_name(demangled) == short
    assert short_name(mangled) == short


@pytest.mark.parametrize(
    "name",
    ["ampere_sgemm_128x64_nn", "triton_poi_fused_add_cos_sin_0", "_Zbad", "", "init_array(double*, unsigned long)"],
)
def test_non_mangled_names_come_back_unchanged(name):
    assert demangle(name) == name


@pytest.mark.parametrize(
    "demangled,short",
    [
        # demangled names as nsys/Kineto print them (HolisticTraceAnalysis test traces, facebookresearch/HolisticTraceAnalysis)
        ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
         "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
         "vectorized_elementwise_kernel"),
        ("enable_if<!T7, void>::type kernel<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, 0, 1, 1, 0, "
         "7, 0, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<const __nv_bfloat16>, "
         "cublasGemvTensorStridedBatched<const __nv_bfloat16>, cublasGemvTensorStridedBatched<__nv_bfloat16>, float>>(T13)",
         "kernel"),
        ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>"
         "(cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4::Params)", "Kernel"),
        ("void at::native::(anonymous namespace)::indexFuncSmallIndex<float, long, unsigned int, 1, 1, -2>"
         "(at::cuda::detail::TensorInfo<float, unsigned int>)", "indexFuncSmallIndex"),
        ("ampere_sgemm_32x32_sliced1x4_tn", "ampere_sgemm_32x32_sliced1x4_tn"),
    ],
)
def test_short_name(demangled, short):
    assert short_name(demangled) == short


def test_templated_mangled_symbol():
    sym = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_6detail5ArrayIPcLi1EEEEEviT0_T1_"
    d = demangle(sym)
    assert d.startswith("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>")
    assert short_name(d) == "vectorized_elementwise_kernel"
    assert demangle_all([sym, "plain", None]) == [d, "plain", None]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_never_raises(text):
    assert isinstance(demangle(text), str)
    assert isinstance(short_name(text), str)
