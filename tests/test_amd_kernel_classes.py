"""Kernel classes of ROCm runs (forensics.core.kernel_names, AMD rows): MIOpen, composable_kernel (CK),
rocBLAS's own kernels, Tensile, Triton and NCCL/RCCL, and the words reports give them, never
NVIDIA's ("not a cuBLAS name") for an AMD kernel (issue 40: MIOpen kernels had no class).

Names are real: every kernel of the ROCm 6.4 MI210 and ROCm 7.2 MI300X Kineto fixtures
(tests/fixtures/amd/PROVENANCE.md), and names quoted from other AMD-AGI/TraceLens traces (MIT, at
commit 171dd74721ca1ec45709e5805b68ae1f65e27811; path given per name)."""
from __future__ import annotations

from pathlib import Path

import pytest

from forensics.core.kernel_names import GRAMMARS, classify_kernel, describe_kernel, tensile_launch_role
from parsers import kineto

AMD = Path(__file__).resolve().parent / "fixtures" / "amd"

# name -> (library, operation, grammar row); source in the comment
QUOTED = {
    # tests/traces/mi300/resnet_act_checkpoint.json.gz (MI300X)
    "_ZN2ck16tensor_operation6device12_GLOBAL__N_139kernel_grouped_conv_fwd_xdl_cshuffle_v3INS_28GridwiseGemm_xdl_"
    "cshuffle_v3INS_13tensor_layout4gemm8RowMajorENS6_11ColumnMajorES7_ttfttNS0_12element_wise11PassThroughESA_SA_":
        ("composable_kernel (CK)", "convolution", "ck"),
    "_ZN2ck16tensor_operation6device37kernel_batched_gemm_xdlops_bwd_weightINS_47GridwiseGemm_bk0mk1_bk0nk1_mn_"
    "xdlops_bwd_weightILi64EttftLNS_25InMemoryDataOperationEnumE1ENS_16TensorDescriptorINS_5TupleIJNS_5EmbedINS6_":
        ("composable_kernel (CK)", "gemm", "ck"),
    "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)": ("NCCL", "collective", "nccl"),
    "transpose_NCHW2CNHW_V2_2D_WG_off64": ("MIOpen", "other", "miopen"),
    # tests/traces/inference/vllm_decode_full/graph_execution.json.gz
    "_ZN7ck_tile6kentryILi1ENS_12Rmsnorm2dFwdINS_27Rmsnorm2dFwdPipelineOnePassINS_27Rmsnorm2dFwdPipelineProblemIDF16b":
        ("composable_kernel (CK)", "other", "ck"),
    # tests/traces/perf_model/normalization/normalization_layer_test.json.gz (MI300X)
    "MIOpenBatchNormFwdTrainSpatial": ("MIOpen", "other", "miopen"),
    "MIOpenBatchNormBwdSpatial": ("MIOpen", "other", "miopen"),
    # a rocprof results.csv line quoted in a public profiling script (MIOpen's naive solver)
    "naive_conv_fwd_nchw_half_double_half": ("MIOpen", "convolution", "miopen_naive_conv"),
}


@pytest.mark.parametrize("name", sorted(QUOTED))
def test_quoted_amd_names(name):
    k = classify_kernel(name)
    assert (k.library, k.operation, k.grammar) == QUOTED[name]
    assert tensile_launch_role(name) is None  # no hipBLASLt/rocBLAS call launches these


def test_every_kernel_of_the_mi210_trace_has_its_library():
    names = set(kineto.read_kernels(AMD / "kineto_rocm6.4_mi210_gpu_only.json.gz")["kernel"])
    libs = {n: classify_kernel(n).library for n in names}
    miopen = {n for n, lib in libs.items() if lib == "MIOpen"}
    assert {n.split("_gtc")[0] for n in miopen if n.startswith("igemm_")} == {"igemm_fwd", "igemm_bwd", "igemm_wrw"}
    assert all(classify_kernel(n).operation == "convolution" and not classify_kernel(n).gemm
               for n in miopen if n.startswith("igemm_"))
    assert any(n.startswith("batched_transpose_") for n in miopen) and "SubTensorOpWithScalar1d" in miopen
    assert {n for n, lib in libs.items() if lib == "unknown"} == set(), {n for n, lib in libs.items() if lib == "unknown"}
    assert sum(lib == "Tensile (hipBLASLt/rocBLAS)" for lib in libs.values()) == 3


def test_triton_on_amd_and_the_words_of_each_class():
    names = set(kineto.read_kernels(AMD / "kineto_rocm7.2_mi300x_triton.json.gz")["kernel"])
    triton = sorted(n for n in names if classify_kernel(n).library == "Triton")
    assert triton == ["triton_poi_fused__unsafe_view_add_3", "triton_poi_fused__unsafe_view_mul_silu_2",
                      "triton_red_fused__unsafe_view_add_mean_mul_pow_rsqrt_1", "triton_red_fused_add_mean_mul_pow_rsqrt_0"]
    assert describe_kernel(triton[0]) == "Triton pointwise" and describe_kernel(triton[2]) == "Triton reduction"
    tensile = next(n for n in names if n.startswith("Cijk_"))
    assert describe_kernel(tensile) == "Tensile (hipBLASLt/rocBLAS) GEMM"
    assert describe_kernel("igemm_fwd_gtcx2_nhwc_bf16_bx0_ex1_bt64x64x64") == "MIOpen convolution"
    assert describe_kernel("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)") == "NCCL/RCCL collective"
    assert describe_kernel("void rocblas_gemvn_kernel<32, 16, int, float>(int)") == "rocBLAS GEMV"
    for name in list(QUOTED) + triton + [tensile]:
        assert "cuBLAS" not in describe_kernel(name), name


def test_a_kernel_merely_templated_on_ck_is_not_ck():
    # vLLM's paged attention kernel (the ROCm 7.2 sglang fixture) takes a ck_tile type as a template argument
    name = next(n for n in kineto.read_kernels(AMD / "kineto_rocm7.2_mi300x_sglang_decode.json.gz")["kernel"]
                if n.startswith("void paged_attention_ll4mi_QKV"))
    assert "ck_tile::" in name and classify_kernel(name).library == "unknown"


def test_no_earlier_row_reads_an_amd_name():
    for name, (_lib, _op, row) in QUOTED.items():
        assert next(g.name for g in GRAMMARS if g.pattern.search(name)) == row, name
