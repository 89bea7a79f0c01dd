"""Files recognised by content, every file read or listed with why, `forensics analyze PATH`.

The corpus walk reads each real file of ../shared/corpus as `forensics analyze FILE` would and checks
what it shows against the file's .source.txt ground truth (counts copied from there; where the
.source.txt states provenance only, counted in the file itself with json, said so). Skipped with a
reason when ../shared is absent.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import pandas as pd
import pytest

from forensics.capture.directory import load_capture
from forensics.instruments.recognise import recognise
from forensics.cli import main
from forensics.core.errors import EXIT_BAD_INPUT, BadInput
from forensics.judge.analysis import NAMED, SINGLE, analyze
from forensics.runtime.console import unfit

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

FIXTURES = Path(__file__).parent / "fixtures" / "cpu"
NOT_A_LOG = "text with no instrument's line form"


def _total(an) -> int:
    return sum(sum(c.values()) for c in an.verdicts["counts"]) if len(an.verdicts) else 0


def _kernels(an) -> dict[str, int]:
    out: dict[str, int] = {}
    for k, c in zip(an.verdicts["kernel"], an.verdicts["counts"]):
        out[k] = out.get(k, 0) + sum(c.values())
    return out


def _notes(an) -> str:
    return "\n".join(an.notes)


# (path under the corpus, instrument recognised by content or None, check of what analyze shows)
def _rows_starting(*prefixes):
    def check(an):
        assert set(an.verdicts["verdict"]) == {SINGLE}
        kernels = list(an.verdicts["kernel"])
        assert len(kernels) == len(prefixes), kernels
        for p in prefixes:
            assert any(k.startswith(p) for k in kernels), (p, kernels)
    return check


def _no_rows(note):
    def check(an):
        assert not len(an.verdicts) and note in _notes(an), _notes(an)
    return check


def _launches(total, **some):
    def check(an):
        assert set(an.verdicts["verdict"]) == {SINGLE}  # one instrument alone never names
        assert total is None or _total(an) == total
        k = _kernels(an)
        for name, n in some.items():
            assert sum(v for kk, v in k.items() if name in kk) == n, (name, k)
    return check


def _refused(text):
    return ("refused", text)


CORPUS_FILES = {
    "README.md": (None, NOT_A_LOG),
    "cublas_legacy/cublas_legacy_cudajl_v10.2_header_only.log": ("cublas", _rows_starting("cublasSgemm_v2")),
    # an excerpt edited by its author (no Process= context line): a negative sample, refused with its reason
    "cublas_legacy/cublas_legacy_cudajl_v11.0_gemmex_trimmed.log": ("cublas", _refused("ends without its Process= context line")),
    "cublas_legacy/cublas_legacy_gopeft_lora.log": ("cublas", _rows_starting(
        "cublasSgemm_v2(T,N) m=2 n=1 k=2 lda=2 ldb=2 ldc=2", "cublasSgemm_v2(T,N) m=1 n=1 k=2 lda=2 ldb=2 ldc=1",
        "cublasSgemm_v2(T,N) m=2 n=1 k=1 lda=1 ldb=1 ldc=2")),
    "cublas_legacy/cublas_legacy_gopeft_qlora.log": ("cublas", _rows_starting(
        "cublasSgemm_v2(T,N) m=2 n=1 k=3", "cublasSgemm_v2(T,N) m=2 n=1 k=2")),
    "cublaslt/cublaslt_l1_cudalibsamples185_error.log": ("cublaslt", _no_rows(
        "the log holds instead: [Error][cublasLtMatmulAlgoGetHeuristic] line 1: Input matrices batch counts mismatch")),
    "cublaslt/cublaslt_l1_cudalibsamples274_error_no_ts.log": ("cublaslt", _no_rows(
        "the log holds instead: [Error][cublasLtMatmulAlgoGetHeuristic] line 1: The scaling mode for A scale")),
    "cublaslt/cublaslt_l4_tf_xla_readme_trace.log": ("cublaslt", _rows_starting(
        "cublasLtMatmul(N,N) m=32 n=64 k=16 lda=32", "cublasLtMatmul(N,N) m=32 n=32 k=16 lda=32",
        "cublasLtMatmul(N,N) m=32 n=64 k=16 lda=16", "cublasLtMatmul(N,N) m=32 n=32 k=16 lda=16")),
    "cublaslt/cublaslt_l5_cudalibsamples187_fp8_batched_bias.log": ("cublaslt", _no_rows(
        "multiProcessorCount=92 maxSharedMemPerBlock=49152 maxSharedMemoryPerBlockOptin=101376; 8 [Api] line(s): "
        "cublasLtMatmulDescSetAttribute x4, cublasLtMatrixLayoutCreate x2, cublasLtCreate x1, cublasLtMatmulDescCreate x1")),
    # the .source.txt's column-major terms: (1) m=128 n=64 k=1088 NT; (2) m=64 n=1088 k=128 TN; (3) m=128 n=64 k=1088 NT
    "cublaslt/cublaslt_l5_te_fp4_heuristic_api_rejoined.log": ("cublaslt", _no_rows(
        "3 heuristic queries (no kernel runs from a query): cublasLtMatmulAlgoGetHeuristic(N,T) m=128 n=64 k=1088 "
        "A=R_8F_E4M3; cublasLtMatmulAlgoGetHeuristic(T,N) m=64 n=1088 k=128 A=R_4F_E2M1; "
        "cublasLtMatmulAlgoGetHeuristic(N,T) m=128 n=64 k=1088 A=R_4F_E2M1")),
    "cublaslt/cublaslt_l5_torch_matmul_aarch64_stdout.log": ("cublaslt", _rows_starting(
        "cublasLtSSSMatmul(N,N) m=1000 n=1000 k=1000", "cublasLtSSSMatmul(N,N) m=1000 n=1000 k=1000")),
    "cublaslt/cublaslt_l5_vllm4691_info_line.log": ("cublaslt", _no_rows(
        "[Info][cublasLtMatmulAlgoGetHeuristic] line 1: Unsupported M dimension for FP8 matrix multiplication. "
        "M must be divisible by 16. Got 2.")),
    "cublaslt/libcublas-13.10.0.20.logger-strings.txt": (None, NOT_A_LOG),
    "cublaslt/libcublasLt-13.10.0.20.strings.txt": (None, NOT_A_LOG),
    # (counted in the trace: 'kernel' events) ampere_sgemm_128x64_nn x3
    "kineto/hta_critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz": (
        "kineto", _launches(None, ampere_sgemm_128x64_nn=3)),
    # (counted in the trace: 'kernel' events) 79 kernels, ampere_sgemm_32x32_sliced1x4_tn x6
    "kineto/hta_critical_path__simple_add__benchmark_result_493459_1694039959_trace.json.gz": (
        "kineto", _launches(79, ampere_sgemm_32x32_sliced1x4_tn=6)),
    "kineto/hta_triton_example__triton_example.json.gz": ("kineto", _launches(1, triton_poi_fused_add_cos_sin_0=1)),
    "kineto/kineto_v100_resnet50_2021_worker0.pt.trace.json.gz": (
        "kineto", _launches(8772, volta_sgemm_64x64_nn=42, volta_sgemm_32x128_nn=18, volta_sgemm_128x32_nt=24,
                            splitKreduce_kernel=12)),
    "ncu/extrap_ex-gpu.s10.ncu-rep": ("ncu", _launches(6, init_array=2, vector_add1=1, vector_dot=1)),
    "ncu/ncu_esmm_a10g_cutlass80_simt_sgemm.ncu-rep": ("ncu", _launches(5, cutlass_80_simt_sgemm_256x128_8x4_nn_align1=2)),
    "ncu/ncu_esmm_a10g_cutlass80_simt_sgemm_details.csv": ("ncu_csv", _launches(5, cutlass_80_simt_sgemm_256x128_8x4_nn_align1=2)),
    "ncu/ncu_esmm_a10g_cutlass80_simt_sgemm_raw.csv": ("ncu_csv", _launches(5, cutlass_80_simt_sgemm_256x128_8x4_nn_align1=2)),
    "ncu/ncu_extrap_ex-gpu.s10_details_by_ncu2022.3.csv": ("ncu_csv", _launches(6, init_array=2)),
    "ncu/ncu_extrap_ex-gpu.s10_raw_by_ncu2022.3.csv": ("ncu_csv", _launches(6, init_array=2)),
    "ncu/ncu_zsl98_a100_ampere_sgemm_x11.ncu-rep": ("ncu", _launches(11, ampere_sgemm_128x64_nn=11)),
    "ncu/ncu_zsl98_a100_ampere_sgemm_x11_details.csv": ("ncu_csv", _launches(11, ampere_sgemm_128x64_nn=11)),
    "ncu/ncu_zsl98_a100_ampere_sgemm_x11_raw.csv": ("ncu_csv", _launches(11, ampere_sgemm_128x64_nn=11)),
    "nsys/extrap_con_kernel.sqlite": ("nsys", _launches(9, test0=3)),
    "nsys/extrap_concurrent_profile1.sqlite": ("nsys", _launches(12)),
    "nsys/extrap_ex-gpu.s10.sqlite": ("nsys", _launches(6, init_array=2)),
    "nsys/nsys_cumat_qdrep_export_nvtx.sqlite": ("nsys", _launches(128, matmul_kernel=128)),
    "nsys/nsys_cumat_report1.qdrep": ("nsys_rep", _refused("run `nsys export --type sqlite`")),
    "nsys/nsys_nvfuser_h200_2025.1_nvjet_nvtx.sqlite": ("nsys", _launches(18, nvjet_tst_=3)),
    "nsys/nsys_uvmtorch_2024_no_kernel_table.sqlite": ("nsys", _no_rows(
        "0 kernels: CUDA tracing was on (capture settings: CAPTURE_EVENT_TYPE")),
    "nsys/nsys_wenscarl_2023_cutlass_gemm_x6.sqlite": ("nsys", _launches(6)),
}


def test_the_walk_covers_every_corpus_file(corpus):
    found = {str(p.relative_to(corpus)) for p in corpus.rglob("*") if p.is_file() and not p.name.endswith(".source.txt")}
    assert found == set(CORPUS_FILES), (found ^ set(CORPUS_FILES))


@pytest.mark.parametrize("rel", sorted(CORPUS_FILES))
def test_every_corpus_file_is_read_or_refused_with_its_reason(corpus, rel):
    path = corpus / rel
    instrument, check = CORPUS_FILES[rel]
    r = recognise(path)
    assert r.instrument == instrument, (r, rel)
    if instrument is None:
        assert check in r.why
        with pytest.raises(BadInput, match="not recognised: "):
            load_capture(path)
        return
    if isinstance(check, tuple):
        with pytest.raises(BadInput) as e:
            analyze(load_capture(path))
        assert check[1] in str(e.value) and str(path) in str(e.value)
        return
    an = analyze(load_capture(path))
    assert [f.instrument for f in an.capture.files] == [instrument]
    check(an)


def _copy(src: Path, dst: Path) -> Path:
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    return dst


def test_names_are_hints_only_files_found_by_content(corpus, tmp_path):
    """report1.sqlite + cublasLt.log in an arm folder, log.cublaslt, cublas.log, sampled_rank-0.json.gz
    and a Triton Kineto trace: all recognised by what they hold (real corpus files, renamed)."""
    cap = tmp_path / "cap"
    _copy(corpus / "nsys" / "nsys_nvfuser_h200_2025.1_nvjet_nvtx.sqlite", cap / "a1" / "report1.sqlite")
    _copy(corpus / "cublaslt" / "cublaslt_l5_torch_matmul_aarch64_stdout.log", cap / "a1" / "cublasLt.log")
    _copy(corpus / "cublaslt" / "cublaslt_l4_tf_xla_readme_trace.log", cap / "a2" / "log.cublaslt")
    _copy(corpus / "cublas_legacy" / "cublas_legacy_gopeft_lora.log", cap / "a2" / "cublas.log")
    _copy(corpus / "kineto" / "hta_triton_example__triton_example.json.gz", cap / "a3" / "sampled_rank-0.json.gz")
    _copy(corpus / "kineto" / "hta_triton_example__triton_example.json.gz", cap / "a3" / "triton_example.json.gz")
    _copy(corpus / "README.md", cap / "a3" / "notes.txt")
    c = load_capture(cap)
    got = {(f.arm, f.path.name): f.instrument for f in c.files}
    assert got == {("a1", "report1.sqlite"): "nsys", ("a1", "cublasLt.log"): "cublaslt",
                   ("a2", "log.cublaslt"): "cublaslt", ("a2", "cublas.log"): "cublas",
                   ("a3", "sampled_rank-0.json.gz"): "kineto", ("a3", "triton_example.json.gz"): "kineto"}
    assert not any("no cuBLASLt log" in m for m in c.missing)
    assert [(Path(u["path"]).name, u["why"].split(" (")[0]) for u in c.not_recognised] == [
        ("notes.txt", NOT_A_LOG)]
    an = analyze(c)
    js = an.to_json()
    assert [Path(u["path"]).name for u in js["not_read"]] == ["notes.txt"]
    (cap / "a3" / "analysis").mkdir()  # an earlier analyze output inside an arm: listed as such, never read
    (cap / "a3" / "analysis" / "analysis.json").write_text("{}\n")
    (cap / "a3" / "analysis" / "report.md").write_text("# forensics analysis\n")
    again = load_capture(cap)
    assert [(Path(u["path"]).name, u["why"], u["metadata"]) for u in again.unread if u["metadata"]] == [
        ("analysis", "an earlier output folder of forensics analyze", True)]
    assert all(f["recognised_by"] for f in js["files"])
    a1 = an.verdicts[an.verdicts["arm"] == "a1"]
    assert _total(an) > 0 and (a1["sources"].map(lambda s: s.get("cupti")) == "nsys").any()


def test_analyze_a_plain_folder_and_a_single_file(corpus, tmp_path, capsys):
    flat = tmp_path / "flat"
    _copy(corpus / "ncu" / "ncu_zsl98_a100_ampere_sgemm_x11.ncu-rep", flat / "profile.ncu-rep")
    _copy(corpus / "cublas_legacy" / "cublas_legacy_gopeft_qlora.log", flat / "cublas.log")
    (flat / "run.txt").write_text("loss 0.25\n")
    code = main(["analyze", str(flat), "--out", str(tmp_path / "o1")])
    out = unfit(capsys.readouterr().out)
    assert code in (0, 1)
    assert "arms: a1" in out and "instruments: cublas, ncu" in out
    assert f"not recognised: {flat / 'run.txt'}: {NOT_A_LOG}" in out
    code = main(["analyze", str(flat / "profile.ncu-rep"), "--out", str(tmp_path / "o2")])
    out = unfit(capsys.readouterr().out)
    assert code == 1 and "ampere_sgemm_128x64_nn" in out and "SINGLE-SOURCE" in out
    report = (tmp_path / "o2" / "report.md").read_text()
    assert "## Full names" in report and "read as ncu" in report
    import json

    js = json.loads((tmp_path / "o2" / "analysis.json").read_text())
    assert js["capture"] == str(flat / "profile.ncu-rep") and js["arms"] == ["a1"] and js["not_read"] == []


def _refused_fast(path: Path, capsys, needle: str) -> None:
    t0 = time.monotonic()
    code = main(["analyze", str(path), "--out", str(path.parent / "never")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == EXIT_BAD_INPUT and len(err) == 1 and needle in err[0], err
    assert time.monotonic() - t0 < 10


def test_a_source_tree_is_refused_at_once(tmp_path, capsys):
    repo = tmp_path / "repo"
    for d in ("examples", "tests", "forensics"):
        (repo / d).mkdir(parents=True)
    for i in range(200):
        (repo / "tests" / f"t{i}.log").write_text("[cublasLt][1][Api][cublasLtCreate] lightHandle=0X1\n")
    _refused_fast(repo, capsys, "it looks like a source tree or home directory (it has tests/, examples/)")
    (repo / "pyproject.toml").write_text("[project]\nname='x'\n")
    _refused_fast(repo, capsys, "(it has pyproject.toml)")
    _refused_fast(Path(__file__).resolve().parents[1], capsys, "it looks like a source tree")


def test_analyze_home_is_refused_without_walking_it(monkeypatch, tmp_path, capsys):
    home = tmp_path / "home"
    (home / "big").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    _refused_fast(home, capsys, "a home or root directory, not a capture")


def test_nsys_stats_output_is_listed_with_why(tmp_path):
    """SYNTHETIC: `nsys stats` output in the header forms of its cuda_gpu_kern_sum report (the CSV
    header row, the console's '** ... (cuda_gpu_kern_sum):' title; the row's values are not a real
    run's), named like ncu exports: listed as not recognised, with why, never read as ncu."""
    cap = tmp_path / "cap"
    (cap / "a1").mkdir(parents=True)
    (cap / "a1" / "kern_sum_raw.csv").write_text(
        "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
        "50.1,99385786,32,3105805.8,3041179.0,2987340,3777790,216832.4,flash_attention_prefill_f16\n")
    (cap / "a1" / "stats.txt").write_text(
        "\n ** CUDA GPU Kernel Summary (cuda_gpu_kern_sum):\n\n Time (%)  Total Time (ns)  Instances  Name\n")
    _copy(Path(__file__).parent / "data" / "cupti" / "synthetic_two_sites.cupti.jsonl", cap / "a1" / "cupti.jsonl")
    c = load_capture(cap)
    why = {Path(u["path"]).name: u["why"] for u in c.not_recognised}
    assert set(why) == {"kern_sum_raw.csv", "stats.txt"}
    assert why["stats.txt"].startswith("an `nsys stats` report (cuda_gpu_kern_sum)")
    assert "no NVTX range and no correlation to site occurrences" in why["kern_sum_raw.csv"]
    assert "nsys export --type sqlite" in why["kern_sum_raw.csv"]
    assert why["kern_sum_raw.csv"].startswith("an `nsys stats` report (CSV, a summary such as cuda_gpu_kern_sum)")
    from forensics import instruments  # a manifest that lists it as an ncu export: its reader says what it is

    with pytest.raises(BadInput, match=r"kern_sum_raw.csv: not an ncu --csv export: an `nsys stats` report"):
        instruments.get("ncu_csv").read(cap / "a1" / "kern_sum_raw.csv")


def _conv1d(tmp_path: Path) -> Path:
    cap = tmp_path / "conv1d"
    shutil.copytree(FIXTURES / "conv1d-threads", cap)
    return cap


def test_the_conv1d_fixture_shows_every_instruments_rows_and_every_file():
    an = analyze(FIXTURES / "conv1d-threads")
    v = an.verdicts
    assert len(v) == 6 and set(v["verdict"]) == {NAMED}
    assert {(a, lib) for a, lib in zip(v["arm"], v["library"])} == {
        ("a1", "oneMKL SGEMM"), ("a2", "oneMKL SGEMM"), ("t1-omp_num_threads", "oneDNN convolution jit_1x1:avx512_core")}
    assert not an.capture.not_recognised
    meta = sorted(Path(u["path"]).name for u in an.capture.unread if "output folder of forensics analyze" not in u["why"])
    assert all(u["metadata"] for u in an.capture.unread)
    assert meta == ["a1.log", "a2.log", "manifest.yaml", "probe.json", "probe.json", "probe.json",
                    "t1-omp_num_threads.log"]
    from forensics.judge.report import distinct_named

    assert distinct_named(an) == 2


def test_a_onednn_only_arm_keeps_its_rows(tmp_path):
    """The toggle arm's conv ran in oneDNN; with its profiler trace gone (seen by ONEDNN_VERBOSE only)
    its calls are SINGLE-SOURCE rows naming what is missing, never dropped."""
    cap = _conv1d(tmp_path)
    next((cap / "t1-omp_num_threads" / "rank0").glob("torchprof.*.json.gz")).unlink()
    an = analyze(cap)
    v = an.verdicts
    t1 = v[v["arm"] == "t1-omp_num_threads"]
    assert len(v[v["verdict"] == NAMED]) == 4 and set(t1["verdict"]) == {SINGLE}
    assert sorted(set(t1["scope"])) == ["aten.convolution.default#1", "aten.convolution.default#2"]
    convs = t1[t1["kernel"].str.startswith("oneDNN convolution jit_1x1:avx512_core forward_training")]
    assert len(convs) == 2 and all(c == {"onednn": 1} for c in convs["counts"])
    assert all("missing to name it: a launch counter in this scope (torch.profiler (CPU ops))" in r
               for r in convs["reason"])
    assert sum(c["onednn"] for c in t1["counts"]) == 8  # every line of the window: 2 convolutions, 6 reorders


def test_distinct_implementations_count_the_library_too():
    from types import SimpleNamespace

    from forensics.judge.report import display_names, distinct_named

    v = pd.DataFrame({"kernel": ["aten::mkldnn_convolution"] * 4, "mangled": [None] * 4, "verdict": [NAMED] * 4,
                      "short_name": ["aten::mkldnn_convolution"] * 4,
                      "library": ["oneDNN convolution jit:avx2"] * 2 + ["oneDNN convolution jit:sse41"] * 2})
    an = SimpleNamespace(named=v, verdicts=v)
    assert distinct_named(an) == 2
    k = pd.DataFrame({"kernel": [f"void at::native::vectorized_elementwise_kernel<4, F{i}>(int, F{i})" for i in (1, 2, 1)],
                      "mangled": [f"_Z{i}" for i in (1, 2, 1)], "short_name": ["vectorized_elementwise_kernel"] * 3,
                      "library": [None] * 3})
    assert display_names(k, 48) == ["vectorized_elementwise_kernel ~1", "vectorized_elementwise_kernel ~2",
                                    "vectorized_elementwise_kernel ~1"]


NO_STEP = """\
import torch
torch.manual_seed(0)
x = torch.randn(16, 32)
w = torch.randn(32, 8, requires_grad=True)
for i in range(3):  # backward only: no optimizer, so no step is ever counted
    (x @ w).sum().backward()
print("done", float(w.grad.sum()))
"""


@pytest.mark.slow
def test_an_empty_capture_says_which_window_never_opened(tmp_path, capsys):
    """A real program with no optimizer step: the default window (steps 1-2) never opens; the
    capture says so and what to pass. With --steps all the same GEMM is NAMED."""
    import sys

    script = tmp_path / "nostep.py"
    script.write_text(NO_STEP)
    site = "gemm:NN:acc0:grad0"
    code = main(["kernel", "--arms", "1", "--site", site, "--out", str(tmp_path / "cap"), "--timeout", "300",
                 "--", sys.executable, str(script)])
    text = unfit(capsys.readouterr().out)
    assert code == 1, text
    lines = text.splitlines()
    assert ("missing: no instrument files found (empty capture): the step window (steps 1-2) never opened in a1 (a "
            "step is counted at each torch.optim optimizer step; the program made too few steps, or none): pass "
            "`--steps all` to capture the whole run") in lines, text
    assert f"missing: no launch attributed to site {site} (sites seen: none)" in lines
    code = main(["kernel", "--arms", "1", "--steps", "all", "--site", site, "--out", str(tmp_path / "all"),
                 "--timeout", "300", "--", sys.executable, str(script)])
    text = unfit(capsys.readouterr().out)
    assert code == 0 and "aten::mm -> oneMKL SGEMM" in text and "empty capture" not in text, text


def test_a_range_profiler_kineto_trace_is_counted():
    """Real HTA trace recorded with the CUPTI range profiler (tests/data/kineto/README.md): its 77
    kernels are cuda_profiler_range events only, counted with a note saying so."""
    f = Path(__file__).parent / "data" / "kineto" / "hta_cupti_profiler_benchmark_result_924719_1679055439_trace.json.gz"
    assert recognise(f).instrument == "kineto"
    an = analyze(load_capture(f))
    assert _total(an) == 77 and set(an.verdicts["verdict"]) == {SINGLE}
    assert _kernels(an)["ampere_sgemm_32x32_sliced1x4_tn"] == 6 and _kernels(an)["__missing__"] == 1
    assert any("77 kernel launches counted from cuda_profiler_range events" in n for n in an.notes)
    assert an.launches["grid"].isna().all() and an.launches["correlation_id"].isna().all()


def test_a_family_member_read_and_not_counted_is_said(corpus, tmp_path):
    """The real ex-gpu .ncu-rep and its raw CSV export in one arm: one is counted (one source), the
    other is read and said not counted, with its launch count."""
    a1 = tmp_path / "cap" / "a1"
    _copy(corpus / "ncu" / "extrap_ex-gpu.s10.ncu-rep", a1 / "extrap_ex-gpu.s10.ncu-rep")
    _copy(corpus / "ncu" / "ncu_extrap_ex-gpu.s10_raw_by_ncu2022.3.csv", a1 / "raw.csv")
    _copy(corpus / "nsys" / "extrap_ex-gpu.s10.sqlite", a1 / "report.sqlite")
    an = analyze(tmp_path / "cap")
    # a plain folder: the report and the nsys export agree on 5 kernels, but nothing in the files ties
    # them to one run (the report records no pid): AGREE-UNTIED, never NAMED (tests/test_same_run.py)
    assert len(an.named) == 0 and (an.verdicts["verdict"] == "AGREE-UNTIED").sum() == 5
    assert any(n.startswith(f"{a1 / 'raw.csv'}: 6 launch(es) read, not counted for arm a1 rank 0: ncu is counted for "
                            "the Nsight Compute (one source, never two); nothing ties it to extrap_ex-gpu.s10.ncu-rep: ")
               for n in an.notes), an.notes


def test_a_folder_with_too_many_files_and_no_manifest_is_refused(monkeypatch, tmp_path):
    from forensics.capture import directory

    monkeypatch.setattr(directory, "MAX_PLAIN_FILES", 5)
    for i in range(3):
        for j in range(3):
            (tmp_path / "many" / f"d{i}").mkdir(parents=True, exist_ok=True)
            (tmp_path / "many" / f"d{i}" / f"f{j}.txt").write_text("x\n")
    with pytest.raises(BadInput, match="more than 5 files and no manifest.yaml: not a capture"):
        load_capture(tmp_path / "many")
