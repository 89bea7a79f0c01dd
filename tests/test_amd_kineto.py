"""Kineto on ROCm: a real trace of PyTorch on an MI250 (ROCm 6.2), from HolisticTraceAnalysis's
tests/data/amd_trace (MIT; tests/fixtures/amd/PROVENANCE.md), through the Kineto reader and the
Tensile identity checks.

Kineto on ROCm is the same source as rocprofv3 (roctracer/rocprofiler under it), so it confirms
nothing alone; what it gives here is a *same-run* pairing of real Tensile kernel names with the
aten ops (and recorded shapes) that launched them: the layout and precision a Tensile name states
can be checked against the problem PyTorch issued, the one real check of the grammar on one run.
"""
from __future__ import annotations

from pathlib import Path

from forensics.core.kernel_names import CONSISTENT, TENSILE_LIBRARY, UNCHECKED, check_amd_call, classify_kernel
from parsers import kineto
from probes.gemm_naming import name_gemm

TRACE = Path(__file__).resolve().parent / "fixtures" / "amd" / "kineto_rocm6.2_mi250_minitoy_train.json.gz"
ADDMM_KERNEL = ("Cijk_Alik_Bljk_SB_Bias_AS_SAV_UserArgs_MT64x16x32_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_"
                "CADS0_EPS0_GRVWA2_GRVWB2_GSUAMB_ISA90a_IU1_K1_LBSPPA128_LBSPPB128_LBSPPM0_LPA8_LPB8_LPM0_LRVW4_LWPMn1_"
                "MIAV0_MIWT1_1_MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_NEPBS2_NLCA1_NLCB1_ONLL1_PGR2_PLR1_PKA1_SIA3_SS1_SPO1_"
                "SRVW0_SSO0_SVW1_TLDS1_USFGROn1_VSn1_VWA1_VWB1_WSGRA1_WSGRB1_WS64_WG64_4_1")


class _Recorded:
    """A tensor as the profiler recorded it (shape, strides, dtype): what name_gemm asks of one."""

    def __init__(self, shape, strides, dtype):
        self.shape, self._strides, self.dtype = tuple(shape), tuple(strides), dtype

    def stride(self):
        return self._strides

    def dim(self):
        return len(self.shape)

    def data_ptr(self):
        return id(self)


def _problem(op) -> dict:
    """The BLAS problem PyTorch issues for a recorded aten GEMM op, as a call row for check_amd_call."""
    name, args = op["name"], op["args"]
    dims, strides, types = args["Input Dims"], args["Input Strides"], args["Input type"]
    tensors = tuple(_Recorded(d, s, t) if d else None for d, s, t in zip(dims, strides, types))
    call = name_gemm(name, tensors, {}, in_backward=False)
    return {"m": call.m, "n": call.n, "k": call.k, "transa": call.transa, "transb": call.transb,
            "precision": {"float": "fp32"}.get(types[0 if name == "aten::mm" else 1])}


def test_the_rocm_trace_is_read():
    k = kineto.read_kernels(TRACE)
    assert len(k) == 14 and set(k["device_id"]) == {2} and set(k["stream_id"]) == {0}
    assert k["grid"].isna().all() and k["block"].isna().all()  # roctracer's kernel events carry no grid
    tensile = k[k["kernel"].str.startswith("Cijk_")]
    assert tensile["kernel"].tolist()[0] == ADDMM_KERNEL and len(tensile) == 2
    assert tensile["external_id"].tolist() == [13, 530]
    assert tensile["launch_ns"].notna().all()  # joined to hipExtModuleLaunchKernel by correlation id


def test_tensile_names_agree_with_the_ops_that_launched_them():
    trace = kineto.read_trace(TRACE)
    k = kineto.read_kernels(TRACE)
    ops = trace.cpu_ops.set_index("external_id")
    seen = {}
    for r in k[k["kernel"].str.startswith("Cijk_")].itertuples():
        op = ops.loc[r.external_id]
        call = _problem(op)
        kc = classify_kernel(r.kernel)
        assert kc.library == TENSILE_LIBRARY
        checks = {c.field: c for c in check_amd_call(r.kernel, r.grid, call, log_library="PyTorch's recorded op")}
        assert checks["library"].status == CONSISTENT
        assert checks["precision"].status == CONSISTENT  # SB: fp32; the op's inputs are float
        assert checks["layout"].status == CONSISTENT and checks["layout"].why == ""  # the letters themselves
        assert checks["grid"].status == UNCHECKED and checks["grid"].why == "no grid recorded"
        seen[op["name"]] = (kc.layout, kc.tile, call["m"], call["n"], call["k"])
    # nn.Linear forward y = x W^T (addmm, x 5x128): TN, m=128 out features, n=5 rows, k=128;
    # its weight gradient dW = dy^T x (mm): NT, 128 x 128, k=5 -- the layouts docs/kernel-names.md
    # reads on CUDA's ResNet-50 fc layer (volta_sgemm_..._tn forward, ..._nt wgrad)
    assert seen == {"aten::addmm": ("TN", (64, 16), 128, 5, 128), "aten::mm": ("NT", (64, 16), 128, 128, 5)}
