"""Every real file of ../shared/corpus against the ground truth its .source.txt states.

One test per file (nsys, ncu, Kineto, legacy cuBLAS here; the cuBLASLt logs and the logger's
format strings in tests/test_cublaslt_grammar.py). The expected values are copied from the
.source.txt files (computed there independently of this project: sqlite3, ncu_report, grep);
where a .source.txt states only provenance, the values were counted in the file itself (the HTA
test traces of facebookresearch/HolisticTraceAnalysis) and are marked so. Skipped with a reason when ../shared is absent.
"""
from __future__ import annotations

import sqlite3

import pytest

from forensics.core.errors import BadInput
from parsers import cublas_legacy, kineto, ncu, nsys

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("corpus")]


def _counts(series) -> dict:
    return {str(k): int(v) for k, v in series.value_counts().items()}


# --------------------------------------------------------------------------- nsys
def test_extrap_con_kernel(corpus):
    """nsys 2022.1.1.61 export, schema 2.9.1: 9 kernels on several streams, mangledName present."""
    f = corpus / "nsys" / "extrap_con_kernel.sqlite"
    df = nsys.read_kernels(f)
    assert len(df) == 9 and df["stream_id"].nunique() > 1
    assert _counts(df["short_name"]) == {"test0": 3, "test1": 2, "test4": 2, "test2": 1, "test3": 1}
    assert df["mangled"].notna().all()
    info = nsys.schema_info(f)
    assert (info["schema_version"], info["has_mangled_name"]) == ("2.9.1", True)


def test_extrap_concurrent_profile1(corpus):
    """12 kernels; NVTX_EVENTS: 76 push/pop ranges (eventType 59, inline text), 1 domain-create (75)."""
    f = corpus / "nsys" / "extrap_concurrent_profile1.sqlite"
    assert len(nsys.read_kernels(f)) == 12
    ranges = nsys.read_ranges(f)
    assert len(ranges) == 76 and set(ranges["kind"]) == {"pushpop"} and ranges["end_ns"].notna().all()
    with sqlite3.connect(f"file:{f}?mode=ro", uri=True) as c:
        assert c.execute("SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 75").fetchone() == (1,)


def test_extrap_ex_gpu_sqlite(corpus):
    """2021 export, A100: no mangledName; init_array x2, vector_add, vector_add1, vector_mul,
    vector_dot; grid 1, block 10; correlationIds 415..425."""
    f = corpus / "nsys" / "extrap_ex-gpu.s10.sqlite"
    df = nsys.read_kernels(f)
    assert df["short_name"].tolist() == ["init_array", "init_array", "vector_add", "vector_add1", "vector_mul",
                                         "vector_dot"]
    assert df["correlation_id"].tolist() == [415, 417, 419, 421, 423, 425]
    assert set(df["grid"]) == {"(1, 1, 1)"} and set(df["block"]) == {"(10, 1, 1)"}
    assert df["mangled"].isna().all() and not nsys.schema_info(f)["has_mangled_name"]
    assert nsys.schema_info(f)["schema_version"] is None  # no EXPORT_META_DATA in 2021 exports


def test_cumat_qdrep_export(corpus):
    """128 launches of one custom kernel (32 per device 0..3), pid 23485, grid (64,8,1) block (16,64,1);
    216 push/pop ranges, all in domain 'MPI'; every launch listed twice in RUNTIME."""
    f = corpus / "nsys" / "nsys_cumat_qdrep_export_nvtx.sqlite"
    df = nsys.read_kernels(f)
    assert len(df) == 128 and _counts(df["device_id"]) == {"0": 32, "1": 32, "2": 32, "3": 32}
    assert set(df["kernel"]) == {"matmul_kernel(float*, float*, float*, int, int, int)"}
    assert set(df["pid"]) == {23485} and set(df["grid"]) == {"(64, 8, 1)"} and set(df["block"]) == {"(16, 64, 1)"}
    ranges = nsys.read_ranges(f)
    assert len(ranges) == 216 and set(ranges["domain"]) == {"MPI"} and ranges["end_ns"].notna().all()
    assert _counts(ranges["name"]) == {"MPI_Isend": 108, "MPI_Irecv": 96, "MPI_Barrier": 6, "MPI_Waitall": 4,
                                       "MPI_Init_thread": 1, "MPI_Finalize": 1}
    with sqlite3.connect(f"file:{f}?mode=ro", uri=True) as c:  # the 2 unended rows are not ranges (39, 75)
        assert c.execute("SELECT count(*), sum(end IS NULL) FROM NVTX_EVENTS").fetchone() == (218, 2)
    runtime = _counts(nsys.read_runtime(f)["name"])
    assert runtime["cudaLaunchKernel"] == runtime["cudaLaunchKernel_v7000"] == 128
    # ... and each launch is still counted once (the earliest call of a correlation id joins)
    assert df["correlation_id"].is_unique


def test_cumat_qdrep_is_not_read_as_an_export(corpus, tmp_path):
    """The pre-2022 .qdrep container itself: classified as an unexported report, refused by the reader."""
    from forensics.capture.directory import classify

    f = corpus / "nsys" / "nsys_cumat_report1.qdrep"
    assert classify(f.name) == "nsys_rep"
    with pytest.raises(BadInput, match="SQLite"):
        nsys.read_kernels(f)


def test_nvfuser_h200(corpus):
    """nsys 2025.1.1.110, schema 3.17.1 in META_DATA_EXPORT (issue 12 defect 7); 18 kernels, 1 process,
    1 stream, 1 device; the 3 nvjet GEMMs (corr 1473, 2178, 2200; grid (2,66,1) block (384,1,1)) lie
    outside every range; 13,513 push/pop ranges, default domain, none unended; 8 kernels inside a
    range (innermost: ExecutorRunFusion::cuLaunchKernel 6, KernelExecutor::runFusion::intermediates 2);
    launch APIs cudaLaunchKernel_v7000 9, cuLaunchKernel 6, cuLaunchKernelEx 3."""
    f = corpus / "nsys" / "nsys_nvfuser_h200_2025.1_nvjet_nvtx.sqlite"
    info = nsys.schema_info(f)
    assert (info["schema_version"], info["product_version"]) == ("3.17.1", "2025.1.1.110")
    assert info["capture"]["CAPTURE_EVENT_TYPE"] == ["NvtxEvents", "Cuda"]
    assert not any("ENVIRONMENT" in k for k in info["capture"])  # the process's environment is not copied
    df = nsys.read_kernels(f)
    assert len(df) == 18 and (df["pid"].nunique(), df["stream_id"].nunique(), df["device_id"].nunique()) == (1, 1, 1)
    nvjet = df[df["short_name"].str.startswith("nvjet_tst_")]
    assert nvjet["correlation_id"].tolist() == [1473, 2178, 2200]
    assert set(nvjet["grid"]) == {"(2, 66, 1)"} and set(nvjet["block"]) == {"(384, 1, 1)"}
    # The .source.txt says "7 nvfuser_* kernels"; the file holds 6 (sqlite3: 6 shortNames nvfuser_*, one
    # launch each, matching the 6 cuLaunchKernel calls): 3 nvjet + 6 nvfuser + 9 ATen = 18.
    assert df["short_name"].str.startswith("nvfuser_").sum() == 6
    assert _counts(df["api_name"]) == {"cudaLaunchKernel_v7000": 9, "cuLaunchKernel": 6, "cuLaunchKernelEx": 3}
    ranges = nsys.read_ranges(f)
    assert len(ranges) == 13513 and set(ranges["kind"]) == {"pushpop"}
    assert ranges["domain"].isna().all() and ranges["end_ns"].notna().all()
    inside = nsys.attribute(df, ranges, pattern=".*")
    assert _counts(inside["site_label"].dropna()) == {"ExecutorRunFusion::cuLaunchKernel": 6,
                                                       "KernelExecutor::runFusion::intermediates": 2}
    assert inside.loc[nvjet.index, "site_label"].isna().all()


def test_uvmtorch_no_kernel_table(corpus):
    """nsys 2025.3.2.367, schema 3.20.3 (META_DATA_EXPORT/META_DATA_CAPTURE, defect 7); no kernel table."""
    f = corpus / "nsys" / "nsys_uvmtorch_2024_no_kernel_table.sqlite"
    info = nsys.schema_info(f)
    assert (info["schema_version"], info["product_version"]) == ("3.20.3", "2025.3.2.367")
    assert sorted(info["capture"]["CAPTURE_EVENT_TYPE"]) == ["Cuda", "Graphics", "NvtxEvents", "OSRuntime"]
    assert "CUPTI_ACTIVITY_KIND_KERNEL" not in info["tables"]
    with pytest.raises(BadInput, match="no CUPTI_ACTIVITY_KIND_KERNEL table"):
        nsys.read_kernels(f)
    assert set(nsys.read_runtime(f)["name"]) == {"cuModuleGetLoadingMode", "cudaGetDeviceProperties_v12000"}


def test_wenscarl_cutlass(corpus):
    """nsys 2023.2.3.0, schema 3.1.7: 6 launches of one CUTLASS GEMM (shortName 'Kernel'), grid
    (128,96,1) block (128,1,1), stream 7, correlationIds 471..484; the 1,553-character mangled name
    does not demangle (the kernel keeps nsys's text; identity is the mangled name); no NVTX table;
    21 runtime rows, 6 cudaLaunchKernel_v7000."""
    f = corpus / "nsys" / "nsys_wenscarl_2023_cutlass_gemm_x6.sqlite"
    assert nsys.schema_info(f)["schema_version"] == "3.1.7"
    df = nsys.read_kernels(f)
    assert len(df) == 6 and set(df["short_name"]) == {"Kernel"}
    assert set(df["grid"]) == {"(128, 96, 1)"} and set(df["block"]) == {"(128, 1, 1)"} and set(df["stream_id"]) == {7}
    assert df["correlation_id"].tolist() == [471, 473, 475, 477, 479, 484]
    assert set(df["mangled"].str.len()) == {1553} and df["mangled"].nunique() == 1
    assert (df["kernel"] == df["demangled_nsys"]).all() and df["kernel"].iloc[0].startswith("void cutlass::Kernel<")
    assert len(nsys.read_ranges(f)) == 0
    runtime = nsys.read_runtime(f)
    assert len(runtime) == 21 and _counts(runtime["name"])["cudaLaunchKernel_v7000"] == 6


# --------------------------------------------------------------------------- ncu
EX_GPU = ["init_array", "init_array", "vector_add", "vector_add1", "vector_mul", "vector_dot"]


def test_ex_gpu_ncu_rep(corpus):
    """1 range, 6 actions in this order, 213 metrics each, A100-PCIE-40GB; grid 1, block 10."""
    df = ncu.read_report(corpus / "ncu" / "extrap_ex-gpu.s10.ncu-rep", all_metrics=True)
    assert df["short_name"].tolist() == EX_GPU and set(df["range_index"]) == {0}
    assert set(df["grid"]) == {"(1, 1, 1)"} and set(df["block"]) == {"(10, 1, 1)"}
    metric_cols = [c for c in df.columns if "__" in c]
    assert len(metric_cols) == 213
    assert set(df["device__attribute_display_name"]) == {"A100-PCIE-40GB"}


@pytest.mark.parametrize("name", ["ncu_extrap_ex-gpu.s10_raw_by_ncu2022.3.csv",
                                  "ncu_extrap_ex-gpu.s10_details_by_ncu2022.3.csv"])
def test_ex_gpu_csv_exports(corpus, name):
    """ncu 2022.3 exports of the same report: the same 6 launches."""
    df = ncu.read_csv(corpus / "ncu" / name)
    assert df["short_name"].tolist() == EX_GPU


ESMM = ["one_warptiling", "one_warptiling_tn", "warptiling", "Kernel", "Kernel"]
CUTLASS_MANGLED = "_ZN7cutlass6KernelI43cutlass_80_simt_sgemm_256x128_8x4_nn_align1EEvNT_6ParamsE"


def test_esmm_ncu_rep(corpus):
    """A10G: 5 actions; 2 x cuBLAS-dispatched cutlass_80_simt_sgemm (mangled name, FUNCTION 'Kernel',
    grid (256,2,1), block (256,1,1), 7,225,952 and 7,194,432 ns)."""
    df = ncu.read_report(corpus / "ncu" / "ncu_esmm_a10g_cutlass80_simt_sgemm.ncu-rep")
    assert df["short_name"].tolist() == ESMM
    cut = df[df["short_name"] == "Kernel"]
    assert set(cut["mangled"]) == {CUTLASS_MANGLED}
    assert set(cut["grid"]) == {"(256, 2, 1)"} and set(cut["block"]) == {"(256, 1, 1)"}
    assert cut["duration_ns"].tolist() == [7225952, 7194432]


def test_esmm_raw_csv(corpus):
    """5 rows; names in ncu's own demangling ('void cutlass::Kernel<...>(T1::Params)', '(int)128')."""
    df = ncu.read_csv(corpus / "ncu" / "ncu_esmm_a10g_cutlass80_simt_sgemm_raw.csv")
    assert df["short_name"].tolist() == ESMM
    assert df["kernel"].iloc[3] == "void cutlass::Kernel<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(T1::Params)"
    assert df["kernel"].iloc[0].startswith("void one_warptiling<(int)128, (int)128,")
    assert df["block"].tolist() == ["(256, 1, 1)"] * 5  # ncu 2022.3 prints block dims as 256.000000 (defect 6)


def test_esmm_details_csv(corpus):
    """150 data rows = 5 launches x 30."""
    f = corpus / "ncu" / "ncu_esmm_a10g_cutlass80_simt_sgemm_details.csv"
    assert len(ncu.read_csv(f)) == 5
    header, rows, _ = ncu._csv_rows(f)
    assert len([r for r in rows if any(c.strip() for c in r)]) == 150


def test_esmm_same_kernel_meets_itself_across_readers(corpus):
    """Issue 12 defect 5: the .ncu-rep (cxxfilt text + mangled name), its raw CSV and its details CSV
    (ncu's own text only) give each kernel one identity, the mangled name."""
    import pandas as pd

    from forensics.core.kernel_names import kernel_keys

    frames = [ncu.read_report(corpus / "ncu" / "ncu_esmm_a10g_cutlass80_simt_sgemm.ncu-rep"),
              ncu.read_csv(corpus / "ncu" / "ncu_esmm_a10g_cutlass80_simt_sgemm_raw.csv"),
              ncu.read_csv(corpus / "ncu" / "ncu_esmm_a10g_cutlass80_simt_sgemm_details.csv")]
    both = pd.concat(frames, ignore_index=True)
    keys = kernel_keys(both)
    per_reader = [keys[0:5], keys[5:10], keys[10:15]]
    assert per_reader[0] == per_reader[1] == per_reader[2]
    assert per_reader[0][3] == CUTLASS_MANGLED and len(set(per_reader[0])) == 4
    assert per_reader[0][0].startswith("_Z14one_warptiling")


def test_zsl98_ncu_rep(corpus):
    """A100: 11 actions of ampere_sgemm_128x64_nn (mangled == demangled), grid (32,80,1), block
    (128,1,1), stream 7, device 0, 16,745,408..16,750,496 ns; no NVTX state."""
    df = ncu.read_report(corpus / "ncu" / "ncu_zsl98_a100_ampere_sgemm_x11.ncu-rep")
    assert len(df) == 11 and set(df["kernel"]) == set(df["mangled"]) == {"ampere_sgemm_128x64_nn"}
    assert set(df["grid"]) == {"(32, 80, 1)"} and set(df["block"]) == {"(128, 1, 1)"}
    assert set(df["stream_id"]) == {7} and set(df["device_id"]) == {0}
    assert (df["duration_ns"].min(), df["duration_ns"].max()) == (16745408, 16750496)
    assert df["nvtx_ranges"].map(len).sum() == 0


def test_zsl98_raw_csv(corpus):
    """11 rows, grid 32x80x1, block 128x1x1 (printed '128.000000': issue 12 defect 6), durations in msecond."""
    df = ncu.read_csv(corpus / "ncu" / "ncu_zsl98_a100_ampere_sgemm_x11_raw.csv")
    assert len(df) == 11 and set(df["kernel"]) == {"ampere_sgemm_128x64_nn"}
    assert set(df["grid"]) == {"(32, 80, 1)"} and set(df["block"]) == {"(128, 1, 1)"}
    assert df["duration_ns"].iloc[0] == 16748544  # 16.748544 msecond


def test_zsl98_details_csv(corpus):
    """330 data rows = 11 launches x 30; Duration in msecond with 2 decimals; no grid/block rows."""
    df = ncu.read_csv(corpus / "ncu" / "ncu_zsl98_a100_ampere_sgemm_x11_details.csv")
    assert len(df) == 11 and set(df["duration_ns"]) == {16750000}
    assert df["grid"].isna().all() and df["block"].isna().all()


# --------------------------------------------------------------------------- Kineto
def test_resnet50_2021_trace(corpus):
    """2021 format: 8,772 Kernel events (67 distinct) incl. volta_sgemm_64x64_nn 42, volta_sgemm_32x128_nn 18,
    volta_sgemm_128x32_nt 24, splitKreduce_kernel 12; 23,646 Operator (aten::mm 12, aten::addmm 6,
    aten::linear 6); 11,923 Runtime; 9,096 async flow pairs. Lowercase 'external id' on kernels and
    runtime events, string tids, 'async'/'launch' flows (issue 12 defect 8): every kernel keeps its
    launching call and op."""
    t = kineto.read_trace(corpus / "kineto" / "kineto_v100_resnet50_2021_worker0.pt.trace.json.gz")
    k = t.kernels
    assert len(k) == 8772 and k["kernel"].nunique() == 67
    counts = _counts(k["short_name"])
    assert (counts["volta_sgemm_64x64_nn"], counts["volta_sgemm_32x128_nn"], counts["volta_sgemm_128x32_nt"],
            counts["splitKreduce_kernel"]) == (42, 18, 24, 12)
    ops = _counts(t.cpu_ops["name"])
    assert len(t.cpu_ops) == 23646 and (ops["aten::mm"], ops["aten::addmm"], ops["aten::linear"]) == (12, 6, 6)
    assert len(t.runtime) == 11923
    assert _counts(t.flows["phase"]) == {"s": 9096, "f": 9096}
    assert k["external_id"].notna().all() and k["op_name"].notna().all()
    assert k["launch_ns"].notna().all() and k["tid"].notna().all() and t.runtime["tid"].notna().all()
    gemm_ops = _counts(k[k["short_name"] == "splitKreduce_kernel"]["op_name"])
    assert set(gemm_ops) <= {"aten::mm", "aten::addmm"}


def test_hta_event_sync_trace(corpus):
    """(counted in the trace) multi-stream, ampere_sgemm_128x64_nn x3, each launched by aten::mm."""
    t = kineto.read_trace(corpus / "kineto" / "hta_critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz")
    assert t.kernels["kernel"].tolist() == ["ampere_sgemm_128x64_nn"] * 3
    assert t.kernels["stream_id"].nunique() == 3 and set(t.kernels["op_name"]) == {"aten::mm"}


def test_hta_simple_add_trace(corpus):
    """(counted in the trace) 79 kernels incl. ampere_sgemm_32x32_sliced1x4_tn, ampere_gcgemm_64x64_nt,
    cuDNN xmma, epilogue::impl::globalKernel; memcpy/memset events."""
    t = kineto.read_trace(corpus / "kineto" / "hta_critical_path__simple_add__benchmark_result_493459_1694039959_trace.json.gz")
    names = set(t.kernels["short_name"])
    assert len(t.kernels) == 79
    assert {"ampere_sgemm_32x32_sliced1x4_tn", "ampere_gcgemm_64x64_nt", "globalKernel"} <= names
    assert t.kernels["kernel"].str.contains("epilogue::impl::globalKernel", regex=False).sum() == 6
    assert any("xmma" in n for n in names)
    assert (len(t.memcpy), len(t.memset)) == (16, 3)


def test_hta_triton_trace(corpus):
    """(counted in the trace) minimal modern trace: one Triton kernel, a cpu_op with input shapes."""
    t = kineto.read_trace(corpus / "kineto" / "hta_triton_example__triton_example.json.gz")
    assert t.kernels["kernel"].tolist() == ["triton_poi_fused_add_cos_sin_0"]
    op = t.cpu_ops[t.cpu_ops["name"] == "triton_poi_fused_add_cos_sin_0"].iloc[0]
    assert op["input_dims"] == [[10, 10], [10, 10], [10, 10], []]


# --------------------------------------------------------------------------- legacy cuBLAS
def test_gopeft_lora_log(corpus):
    """cuBLAS 13.4.1: 5 records (cublasCreate_v2, 3 x cublasSgemm_v2, cublasDestroy_v2), Process 14102;
    the 3 Sgemm calls are T,N with m/n/k 2/1/2, 1/1/2, 2/1/1 and lda/ldb/ldc 2/2/2, 2/2/1, 1/1/2; only they
    are matmul calls (issue 12 defect 3)."""
    f = corpus / "cublas_legacy" / "cublas_legacy_gopeft_lora.log"
    df = cublas_legacy.read_log(f)
    assert df["function"].tolist() == ["cublasCreate_v2"] + ["cublasSgemm_v2"] * 3 + ["cublasDestroy_v2"]
    assert set(df["process"]) == {14102} and set(df["version"]) == {"13.4.1"}
    create = df.iloc[0]
    assert create["handle"] == "0x0" and "StreamId" not in create["args"] and "MathMode" not in create["args"]
    calls = cublas_legacy.read_matmul_calls(f)
    assert len(calls) == 3 and calls.attrs["other_calls"] == 2
    assert calls[["transa", "transb"]].drop_duplicates().values.tolist() == [["T", "N"]]
    assert calls[["m", "n", "k"]].values.tolist() == [[2, 1, 2], [1, 1, 2], [2, 1, 1]]
    assert calls[["lda", "ldb", "ldc"]].values.tolist() == [[2, 2, 2], [2, 2, 1], [1, 1, 2]]


def test_gopeft_qlora_log(corpus):
    """4 records: Create, 2 x Sgemm (T,N 2/1/3 and 2/1/2), Destroy; Process 14151; Destroy on another thread."""
    f = corpus / "cublas_legacy" / "cublas_legacy_gopeft_qlora.log"
    df = cublas_legacy.read_log(f)
    assert df["function"].tolist() == ["cublasCreate_v2", "cublasSgemm_v2", "cublasSgemm_v2", "cublasDestroy_v2"]
    assert set(df["process"]) == {14151}
    assert df["thread"].tolist() == ["123598179266560"] * 3 + ["123596288540672"]
    calls = cublas_legacy.read_matmul_calls(f)
    assert calls[["transa", "transb", "m", "n", "k"]].values.tolist() == [["T", "N", 2, 1, 3], ["T", "N", 2, 1, 2]]


def test_cudajl_v10_2_header_only(corpus):
    """cuBLAS 10.2: 1 call, cublasSgemm_v2; the header ends in 'called' without a colon (issue 12
    defect 11) and has no argument or context lines; program output follows."""
    f = corpus / "cublas_legacy" / "cublas_legacy_cudajl_v10.2_header_only.log"
    df = cublas_legacy.read_log(f)
    assert df["function"].tolist() == ["cublasSgemm_v2"] and df["version"].tolist() == ["10.2"]
    assert df["process"].isna().all() and df["m"].isna().all()
    assert any("header only" in p for p in df.attrs["problems"])
    assert len(cublas_legacy.read_matmul_calls(f)) == 1


def test_cudajl_v11_0_gemmex_trimmed(corpus):
    """cuBLAS 11.0, an excerpt its author edited: 1 cublasGemmEx call (Atype/Btype CUDA_R_16F, Ctype
    CUDA_R_32F, computeType CUBLAS_COMPUTE_32F) whose record stops after 4 argument lines, with no
    Process= line: read as what it looks like, a log cut at a line boundary: one line naming the
    call, exit 3; tolerated, the incomplete call is dropped and said so (never counted silently)."""
    f = corpus / "cublas_legacy" / "cublas_legacy_cudajl_v11.0_gemmex_trimmed.log"
    with pytest.raises(BadInput) as e:
        cublas_legacy.read_log(f)
    assert e.value.line == 5 and "cublasGemmEx at line 1" in e.value.message
    df = cublas_legacy.read_log(f, tolerate_truncated_tail=True)
    assert len(df) == 0 and any("cublasGemmEx" in p and "dropped" in p for p in df.attrs["problems"])
    types = [ln.split("val=")[1] for ln in f.read_text().splitlines()[1:]]
    assert types == ["CUDA_R_16F(2)", "CUDA_R_16F(2)", "CUDA_R_32F(0)", "CUBLAS_COMPUTE_32F(68)"]
