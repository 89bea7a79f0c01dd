"""The Tensile kernel-name grammar (forensics.core.kernel_names, AMD block) on real names, and the AMD
identity checks (check_amd_call) of a rocprofv3 launch against a hipBLASLt/rocBLAS call.

Every name below was printed by AMD's tools or libraries and quoted in a public source (given per
name). No real capture pairs a rocprofv3 launch of a Tensile kernel with the same run's hipBLASLt
log (tests/fixtures/amd/PROVENANCE.md), so the check tests pair a real name with a real call of
another run: the pairings are SYNTHETIC, the name and the call each real."""
from __future__ import annotations

from pathlib import Path

import pytest

from forensics.core.kernel_names import (
    AUXILIARY,
    CONFLICTS,
    CONSISTENT,
    GRAMMARS,
    PRIMARY,
    TENSILE_LIBRARY,
    UNCHECKED,
    check_amd_call,
    classify_kernel,
    tensile_launch_role,
)
from parsers import hipblaslt_log, rocblas_log

AMD = Path(__file__).resolve().parent / "fixtures" / "amd"

# name -> (precision, layout, tile, hints, fields subset); source of each name in the comment
REAL = {
    # ROCm/rocm-libraries, TensileLite's TensileDecodeKernelName --help example (hipBLASLt, gfx950)
    "Cijk_Alik_Bljk_BBS_BH_UserArgs_MT128x128x64_MI16x16x1_SN_AFC1_GSUAMB_ISA950_MIWT2_2_WG32_8_1":
        ("bf16", "TN", (128, 128), (), {"types": "BBS", "type_style": "tensilelite", "workgroup": "32x8x1",
                                        "matrix_instruction": "16x16x1", "depth_u": "64"}),
    # ROCm/Tensile#1061 (rocBLAS replacement kernel for gfx906, 2020)
    "Cijk_Ailk_Bjlk_DB_MT48x64x4_SE_APM1_AF0EM1_AF1EM1_AMAS3_ASBE01_ASEM1_BL1_DTL0_DVO0_EPS1_FL1_GRVW2_GSU1_ISA906_"
    "IU1_K1_KLA_LBSPP0_LPA0_LPB0_LDL1_MTSM64_MDA2_NLCA1_NLCB1_ONLL1_PBD0_PK0_PGR1_PLR0_RK1_SIA1_SU0_SUM0_SUS256_"
    "SRVW0_SVW4_SNLL0_TT6_4_TLDS0_USFGRO0_VAW1_VS1_VW2_WSGRA0_WSGRB0_WG8_16_1_WGM4":
        ("fp64", "NT", (48, 64), (), {"types": "D", "type_style": "tensile", "workgroup": "8x16x1", "gsu": "1"}),
    # ROCm/Tensile#1373 (rocBLAS, gfx908)
    "Cijk_Alik_Bljk_SB_MT64x128x32_SE_K1": ("fp32", "TN", (64, 128), (), {"types": "S", "type_style": "tensile"}),
    # ROCm/rocm-libraries, rocRoller's kernel named after the Tensile one it replaces
    "Cijk_Ailk_Bjlk_HHS_BH_MT64x128x16_MI32x32x4x2_SN_K1":
        ("fp16", "NT", (64, 128), (), {"types": "HHS", "matrix_instruction": "32x32x4x2"}),
    # ROCm/rocm-libraries hipBLASLt custom kernel (gfx950)
    "Custom_Cijk_Alik_Bljk_BBS_BH_MT256x256x64_MI16x16x1_UserArgs_shortname0_gfx950":
        ("bf16", "TN", (256, 256), (), {"types": "BBS"}),
    # ROCm/rocm-libraries hipBLASLt custom stream-K kernel (SK3): persistent
    "Custom_Cijk_Alik_Bljk_S_MX_B_BIAS_HA_S_SAV_NTD_SK3_UserArgs_MT256x256x32_MI16x16x1_shortname0_gfx950":
        ("fp32", "TN", (256, 256), ("persistent",), {"type_style": "unknown"}),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_tensile_names(name):
    precision, layout, tile, hints, fields = REAL[name]
    kc = classify_kernel(name)
    assert (kc.library, kc.operation, kc.gemm, kc.cublas, kc.grammar) == (TENSILE_LIBRARY, "gemm", True, False, "tensile")
    assert (kc.precision, kc.layout, kc.tile, kc.hints) == (precision, layout, tile, hints)
    assert {k: kc.fields[k] for k in fields} == fields


def test_no_earlier_row_reads_a_tensile_name():
    # the tensile row is appended last: it must be the first that matches every real name
    for name in REAL:
        assert [g.name for g in GRAMMARS if g.pattern.search(name)] == ["tensile"]
        assert tensile_launch_role(name) == PRIMARY


def test_postgsu_reduction_is_an_auxiliary_tensile_kernel():
    # the name format of TensileLite's ContractionSolution (ROCm/hipBLASLt tensilelite/src/ContractionSolution.cpp),
    # as public hipBLASLt profiles print it
    for name in ("Cijk_SS_BiasS_HAS_ScaleAlphaVec_PostGSU16_VW1", "Cijk_SS_BiasS_HAS_ScaleAlphaVec_PostGSU8_VW4"):
        kc = classify_kernel(name)
        assert (kc.library, kc.operation, kc.gemm, kc.grammar) == (TENSILE_LIBRARY, "split-K reduce", True, "tensile_postgsu")
        assert [g.name for g in GRAMMARS if g.pattern.search(name)] == ["tensile_postgsu"]
        assert tensile_launch_role(name) == AUXILIARY
        assert {c.field: c.status for c in check_amd_call(name, "(4, 1, 1)", {"m": 64, "n": 64})}["library"] == CONSISTENT
    assert tensile_launch_role("__amd_rocclr_fillBufferAligned") is None


def test_amd_non_gemm_kernels_are_not_tensile():
    for name in ("__amd_rocclr_fillBufferAligned", "void addition_kernel<float>(float*, float const*, float const*, int, int)",
                 "__omp_offloading_30_57b9f__QMnorm_modPnorm_l23"):
        kc = classify_kernel(name)
        assert kc.grammar != "tensile" and not kc.gemm


def _status(checks):
    return {c.field: c.status for c in checks}


def test_check_amd_call_consistent_synthetic_pairing():
    # SYNTHETIC pairing: the real README call (48x176x1024, NT, bf16) vs a real bf16 TN name of another build
    call = hipblaslt_log.read_calls(AMD / "hipblaslt_mask5_level5.log").iloc[0].to_dict()
    name = "Cijk_Alik_Bljk_BBS_BH_UserArgs_MT128x128x64_MI16x16x1_SN_AFC1_GSUAMB_ISA950_MIWT2_2_WG32_8_1"
    checks = check_amd_call(name, "(2, 1, 1)", call)
    st = _status(checks)
    assert st["library"] == CONSISTENT and st["precision"] == CONSISTENT and st["grid"] == CONSISTENT
    # the README call is NT; the name is TN: neither the letters nor those of the transposed problem (TN <-> TN)
    assert st["layout"] == CONFLICTS
    assert st["batch/split-K"] == UNCHECKED


def test_check_amd_call_precision_and_grid_conflicts():
    call = rocblas_log.read_calls(AMD / "rocblas_layer3_migraphx763.log").iloc[0].to_dict()  # fp32 NN 4096x1x25088
    name = "Cijk_Ailk_Bjlk_DB_MT48x64x4_SE_APM1_AF0EM1_AF1EM1_AMAS3_ASBE01_ASEM1_BL1_DTL0_DVO0_EPS1_FL1_GRVW2_GSU1_" \
           "ISA906_IU1_K1_KLA_LBSPP0_LPA0_LPB0_LDL1_MTSM64_MDA2_NLCA1_NLCB1_ONLL1_PBD0_PK0_PGR1_PLR0_RK1_SIA1_SU0_" \
           "SUM0_SUS256_SRVW0_SVW4_SNLL0_TT6_4_TLDS0_USFGRO0_VAW1_VS1_VW2_WSGRA0_WSGRB0_WG8_16_1_WGM4"
    checks = check_amd_call(name, "(1, 1, 1)", call, log_library="rocBLAS")
    st = _status(checks)
    assert st["precision"] == CONFLICTS  # fp64 kernel, fp32 call
    assert st["grid"] == CONFLICTS  # 4096/48 -> 86 tiles, 1 workgroup
    assert st["layout"] == CONFLICTS  # NT name, NN call (transposed problem TT)
    text = [c.text() for c in checks if c.status == CONFLICTS]
    assert any("fp64 vs log fp32" in t for t in text)


def test_check_amd_call_batch_and_transposed_problem():
    call = rocblas_log.read_calls(AMD / "rocblas_layer3_rocm_libraries3413.log").iloc[1].to_dict()  # TN fp16 128x64x256 b96
    name = "Cijk_Alik_Bljk_SB_MT64x128x32_SE_K1"  # fp32 TN 64x128
    st = _status(check_amd_call(name, "(2, 1, 96)", call, log_library="rocBLAS"))
    assert st["layout"] == CONSISTENT and st["precision"] == CONFLICTS and st["batch/split-K"] == CONSISTENT
    assert st["grid"] == CONSISTENT  # 128x64 is 2 tiles of 64x128 one way, 1 the other
    assert _status(check_amd_call(name, "(2, 1, 95)", call))["batch/split-K"] == CONFLICTS


def test_check_amd_call_stream_k_grid_is_unchecked_and_other_libraries():
    call = hipblaslt_log.read_calls(AMD / "hipblaslt_bench_rocm_libraries12243.log").iloc[0].to_dict()
    sk = "Custom_Cijk_Alik_Bljk_S_MX_B_BIAS_HA_S_SAV_NTD_SK3_UserArgs_MT256x256x32_MI16x16x1_shortname0_gfx950"
    assert _status(check_amd_call(sk, "(304, 1, 1)", call))["grid"] == UNCHECKED
    assert _status(check_amd_call("void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>",
                                  "(1, 1, 1)", call))["library"] == CONFLICTS
    assert _status(check_amd_call("__amd_rocclr_fillBufferAligned", "(1, 1, 1)", call))["library"] == UNCHECKED
