"""The two-instrument rule on AMD: rocprofv3's launches (the rocprofiler family) and the hipBLASLt
log's calls (the hipblaslt family, independent of it) NAME a Tensile kernel only when counts AND
identity agree (:func:`forensics.core.kernel_names.check_amd_call`: types, layout, macro tile vs
m x n, batch); CONFLICT when the counts agree and identity does not.

No public source holds a rocprofv3 trace of a Tensile GEMM beside the same run's hipBLASLt log
(tests/fixtures/amd/PROVENANCE.md). Every case here pairs the REAL hipBLASLt log of i-chaochen's
README (hipblaslt_mask5_level5.log: one call, m=48 n=176 k=1024, NT, bf16, pid 1862601) with a
rocprofv3 kernel trace written here in the real header of rocprofiler-sdk's documentation
(rocprofv3_v3_kernel_trace.csv):

* NAMED: SYNTHETIC. The Tensile name is built from a real gfx950 name's fields
  (``Cijk_Alik_Bljk_BBS_BH_UserArgs_MT128x128x64_...``, tests/test_amd_kernel_names.py) with the
  call's layout letters (``Ailk_Bjlk``: NT) and a 64x64 macro tile; the grid is the 3 tiles of 48x176.
* CONFLICT: files of DIFFERENT PROGRAMS. The kernel's name is REAL, from HTA's MI250 Kineto trace
  (tests/fixtures/amd/kineto_rocm6.2_...: the fp32 weight-gradient GEMM, NT, macro tile 64x16);
  one launch, one call: counts agree, the precision (fp32 vs bf16) does not.
* DISAGREE: SYNTHETIC, the NAMED trace with a second launch of the kernel (2 launches, 1 call).
The real ``addition_kernel`` row of the documentation's trace rides along in every case: the log
cannot confirm it (not a Tensile name), so it stays SINGLE-SOURCE.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from forensics.judge.analysis import analyze

AMD = Path(__file__).resolve().parent / "fixtures" / "amd"
PID = 1862601  # the hipBLASLt log's process; rocprofv3 names its files <pid>_kernel_trace.csv
HEADER = AMD.joinpath("rocprofv3_v3_kernel_trace.csv").read_text().splitlines()[0]
ADDITION = "void addition_kernel<float>(float*, float const*, float const*, int, int)"  # real, same file
NAMED_NAME = "Cijk_Ailk_Bjlk_BBS_BH_UserArgs_MT64x64x64_MI16x16x1_SN_AFC1_GSUAMB_ISA950_MIWT2_2_WG32_8_1"  # SYNTHETIC
REAL_FP32 = ("Cijk_Ailk_Bjlk_SB_Bias_AS_SAV_UserArgs_MT64x16x16_MI16x16x1_SN_LDSB0_AFC1_AFEM1_AFEM1_ASEM1_CLR1_CADS0_"
             "EPS0_GRVWA1_GRVWB1_GSUAMB_ISA90a_IU1_K1_LBSPPA0_LBSPPB0_LBSPPM0_LPA0_LPB0_LPM0_LRVW1_LWPMn1_MIAV0_MIWT1_1_"
             "MO40_NTn1_NTA0_NTB0_NTC0_NTD0_NTM0_NEPBS2_NLCA1_NLCB1_ONLL1_PGR2_PLR1_PKA1_SIA3_SS1_SPO1_SRVW0_SSO0_SVW1_"
             "TLDS0_USFGROn1_VSn1_VWA1_VWB1_WSGRA0_WSGRB0_WS64_WG64_4_1")  # real: HTA's MI250 trace


def _row(i: int, name: str, wg: tuple[int, int, int], workgroups: tuple[int, int, int]) -> str:
    grid = [w * g for w, g in zip(wg, workgroups)]  # rocprofv3 prints the grid in work-items
    t = 2414192765353337 + 100000 * i
    return (f'"KERNEL_DISPATCH",2,1,1,{PID},{i},{10 + i},"{name}",{1937 + i},{t},{t + 50000},0,0,'
            f"{wg[0]},{wg[1]},{wg[2]},{grid[0]},{grid[1]},{grid[2]}")


def _capture(tmp_path: Path, kernels: list[tuple[str, tuple, tuple]], declared: bool = True) -> Path:
    """The two files; ``declared``: with a manifest.yaml listing both (its author states that they are
    one run: the tie the files themselves cannot show, since the trace records no wall-clock time)."""
    rows = [_row(1, ADDITION, (64, 1, 1), (16384, 1, 1))] + [_row(i + 2, *k) for i, k in enumerate(kernels)]
    tmp_path.joinpath(f"{PID}_kernel_trace.csv").write_text("\n".join([HEADER, *rows]) + "\n")
    shutil.copy(AMD / "hipblaslt_mask5_level5.log", tmp_path / f"hipblaslt.{PID}.log")
    if declared:
        _declare(tmp_path)
    return tmp_path


def _declare(folder: Path) -> None:
    """A manifest.yaml listing every file of ``folder`` as arm a1, rank 0 (recognised by content)."""
    entries = "".join(f"  - {{path: {p.name}, arm: a1, rank: 0}}\n" for p in sorted(folder.iterdir())
                      if p.is_file() and p.name != "manifest.yaml")
    folder.joinpath("manifest.yaml").write_text("schema: 1\nsynthetic: true\narms:\n  - {name: a1, role: arm}\n"
                                                "files:\n" + entries)


def _verdicts(tmp_path: Path) -> dict[str, object]:
    an = analyze(tmp_path)
    assert {f.instrument for f in an.capture.files} == {"rocprofv3", "hipblaslt"}
    return {r.kernel: r for r in an.verdicts.itertuples()}


def test_counts_and_identity_agree_named(tmp_path):
    v = _verdicts(_capture(tmp_path, [(NAMED_NAME, (256, 1, 1), (3, 1, 1))]))
    gemm = v[NAMED_NAME]
    assert gemm.verdict == "NAMED", gemm.reason
    assert gemm.counts == {"rocprofiler": 1, "hipblaslt": 1}
    assert {"library", "precision", "layout", "grid"} <= set(gemm.identity["checked"])
    assert not gemm.identity["conflicts"]
    assert v[ADDITION].verdict == "SINGLE-SOURCE" and v[ADDITION].counts == {"rocprofiler": 1}


def test_without_a_tie_the_agreement_is_not_named(tmp_path):
    """The same two files in a plain folder: they share the pid in their names, but the rocprofv3 trace
    records no wall-clock time (its timestamps count from boot), so nothing shows the pid is the same
    process (pids are reused): the counts and identity agree, and the row says so without NAMING."""
    v = _verdicts(_capture(tmp_path, [(NAMED_NAME, (256, 1, 1), (3, 1, 1))], declared=False))
    gemm = v[NAMED_NAME]
    assert gemm.verdict == "AGREE-UNTIED", gemm.reason
    assert gemm.counts == {"rocprofiler": 1, "hipblaslt": 1}
    assert f"pid {PID} in both" in gemm.reason and "records no wall-clock time" in gemm.reason, gemm.reason


def test_counts_agree_identity_does_not_conflict(tmp_path):
    # different programs: the MI250 trace's real fp32 kernel name against the README's real bf16 call
    v = _verdicts(_capture(tmp_path, [(REAL_FP32, (256, 1, 1), (11, 1, 1))]))
    gemm = v[REAL_FP32]
    assert gemm.counts == {"rocprofiler": 1, "hipblaslt": 1}
    assert gemm.verdict == "CONFLICT", gemm.reason
    assert any(c.startswith("precision") for c in gemm.identity["conflicts"]), gemm.identity
    assert "fp32" in gemm.reason and "bf16" in gemm.reason


def test_counts_differ_disagree(tmp_path):
    v = _verdicts(_capture(tmp_path, [(NAMED_NAME, (256, 1, 1), (3, 1, 1))] * 2))
    gemm = v[NAMED_NAME]
    assert gemm.verdict == "DISAGREE" and "1 call(s) for 2 launch group(s)" in gemm.reason, gemm.reason


def test_without_the_log_single_source_and_the_log_is_named_missing(tmp_path):
    _capture(tmp_path, [(NAMED_NAME, (256, 1, 1), (3, 1, 1))])
    (tmp_path / f"hipblaslt.{PID}.log").unlink()
    an = analyze(tmp_path)
    v = {r.kernel: r for r in an.verdicts.itertuples()}
    assert v[NAMED_NAME].verdict == "SINGLE-SOURCE"
    assert "hipBLASLt/rocBLAS log" in v[NAMED_NAME].reason
    assert any("hipBLASLt or rocBLAS log" in m for m in an.missing)


# --------------------------------------------------------------------------- per site occurrence
MARKER_HEADER = AMD.joinpath("rocprofv3_marker_api_trace.csv").read_text().splitlines()[0]
API_HEADER = AMD.joinpath("rocprofv3_hip_runtime_api_trace.csv").read_text().splitlines()[0]


def test_per_site_occurrence_with_roctx_ranges(tmp_path):
    """SYNTHETIC marker and HIP API traces (the real headers of rocprofiler-sdk's documentation) and a
    SYNTHETIC site file (the site probe's format, tests/fixtures/cpu): the site probe's ROCTx range
    ``aten.mm.default#1`` holds the Tensile launch's launching call (hipExtModuleLaunchKernel, the
    launcher HTA's MI250 trace shows for its Tensile kernels); the addition_kernel is launched before
    it. Launches are matched to the range by their HIP call's start (same correlation id and
    process), the hipBLASLt call to the occurrence by its problem (m, n, k): judged per occurrence."""
    _capture(tmp_path, [(NAMED_NAME, (256, 1, 1), (3, 1, 1))])
    t0 = 2414192765000000
    # kernel rows 1 and 2 carry correlation ids 1938 and 1939 (_row): their HIP launch calls
    tmp_path.joinpath(f"{PID}_hip_api_trace.csv").write_text("\n".join([
        API_HEADER,
        f'"HIP_RUNTIME_API","hipLaunchKernel",{PID},{PID},1938,{t0 + 1000},{t0 + 2000}',
        f'"HIP_RUNTIME_API","hipExtModuleLaunchKernel",{PID},{PID},1939,{t0 + 6000},{t0 + 7000}']) + "\n")
    tmp_path.joinpath(f"{PID}_marker_api_trace.csv").write_text("\n".join([
        MARKER_HEADER, f'"MARKER_CORE_API","aten.mm.default#1",{PID},{PID},1,{t0 + 5000},{t0 + 9000}']) + "\n")
    header = {"event": "header", "schema": "forensics.sites", "version": 1, "rank": 0, "pid": PID, "arm": "a1",
              "site_filter": "aten.mm.default", "steps": "0", "nvtx_domain": None, "host": "synthetic", "argv": ["t.py"]}
    site = {"event": "site", "arm": "a1", "iteration": 0, "site": "aten.mm.default", "occurrence": 1,
            "label": "aten.mm.default#1", "external_id": 1, "rank": 0, "pid": PID, "op": "aten.mm.default",
            "in": [{"shape": [176, 1024], "dtype": "bfloat16", "numel": 180224},
                   {"shape": [1024, 48], "dtype": "bfloat16", "numel": 49152}],
            "out": [{"shape": [176, 48], "dtype": "bfloat16", "numel": 8448}],
            "meta": {"m": 48, "n": 176, "k": 1024, "batch": 1}}
    import json

    tmp_path.joinpath("sites.jsonl").write_text(json.dumps(header) + "\n" + json.dumps(site) + "\n")
    _declare(tmp_path)
    an = analyze(tmp_path)
    assert {f.instrument for f in an.capture.files} >= {"rocprofv3", "hipblaslt", "sites"}
    rows = {(r.scope, r.kernel): r for r in an.verdicts.itertuples()}
    assert set(rows) == {("aten.mm.default#1", NAMED_NAME)}, list(rows)  # the addition_kernel is in no range
    gemm = rows[("aten.mm.default#1", NAMED_NAME)]
    assert gemm.verdict == "NAMED" and gemm.counts == {"rocprofiler": 1, "hipblaslt": 1}, gemm.reason


def test_the_bundle_of_an_amd_occurrence(tmp_path):
    """The bundle of that occurrence: raw/ holds the rocprofv3 row of the site's launch with its CSV
    header; repro.py rebuilds the problem from the hipBLASLt call (this log printed no bench line)."""
    import tarfile

    from forensics.cli import main

    cap = tmp_path / "cap"
    cap.mkdir()
    test_per_site_occurrence_with_roctx_ranges(cap)
    out = tmp_path / "bundle.tar.gz"
    assert main(["bundle", str(cap), "--out", str(out)]) == 0
    with tarfile.open(out) as tar:
        names = tar.getnames()
        raw = [n for n in names if n.endswith("_kernel_trace.csv")]
        assert len(raw) == 1, names
        rows = tar.extractfile(raw[0]).read().decode().splitlines()
        repro = tar.extractfile(next(n for n in names if n.endswith("repro.py"))).read().decode()
    assert rows[0].startswith('"Kind","Agent_Id"') and len(rows) == 2 and "Cijk_Ailk_Bjlk_BBS_BH" in rows[1]
    assert "source: hipBLASLt log" in repro and "'bench': None" in repro  # this log printed no bench line


def test_kineto_on_rocm_never_confirms_rocprofv3(tmp_path):
    """One source: the REAL Kineto trace of PyTorch on ROCm (a different program, HTA's MI250 run)
    beside the rocprofv3 trace is the same family; rocprofv3 is counted, the Kineto file is read and
    said not counted, and no verdict counts the family twice."""
    _capture(tmp_path, [(REAL_FP32, (256, 1, 1), (11, 1, 1))], declared=False)
    (tmp_path / f"hipblaslt.{PID}.log").unlink()
    shutil.copy(AMD / "kineto_rocm6.2_mi250_minitoy_train.json.gz", tmp_path / "worker0.pt.trace.json.gz")
    an = analyze(tmp_path)
    assert {f.instrument for f in an.capture.files} == {"rocprofv3", "kineto_rocm"}
    # one family, and nothing ties the two files to one run (the trace's process is not the csv's):
    # two runs, each judged as an arm of its own, each count from its own file, never summed
    assert sorted(an.capture.arms) == ["a1-run1", "a1-run2"]
    v = {(r.arm, r.kernel): r for r in an.verdicts.itertuples()}
    run_of = {p["path"].rsplit("/", 1)[1]: p["run"] for p in an.provenance}
    csv_run = run_of[f"{PID}_kernel_trace.csv"]
    assert run_of["worker0.pt.trace.json.gz"] != csv_run
    assert v[(csv_run, REAL_FP32)].verdict == "SINGLE-SOURCE" and v[(csv_run, REAL_FP32)].counts == {"rocprofiler": 1}
    assert all(set(r.counts) == {"rocprofiler"} for r in an.verdicts.itertuples())
    assert any("holds 2 different runs" in n for n in an.notes), an.notes


def test_two_ranks_files_in_one_arm_folder_count_for_their_ranks(tmp_path):
    """rocprofv3 -d ARM -o %pid% writes every rank's <pid>_kernel_trace.csv into the arm folder, as
    the hipBLASLt log's hipblaslt.<pid>.log: each file counts for the rank whose site file recorded
    its pid. Rank 0: the real README log (pid 1862601) beside the SYNTHETIC NAMED trace; rank 1:
    SYNTHETIC, the same log with its pid changed to 222, beside a trace holding the real fp32
    kernel name of HTA's MI250 trace (different programs: CONFLICT). Site files: SYNTHETIC (a header and
    one non-GEMM site record each, which ties the rank to its pid; no range, so each rank's window is judged)."""
    import json

    arm = tmp_path / "a1"
    arm.mkdir()
    _capture(arm, [(NAMED_NAME, (256, 1, 1), (3, 1, 1))], declared=False)
    other = tmp_path / "other"
    other.mkdir()
    _capture(other, [(REAL_FP32, (256, 1, 1), (11, 1, 1))], declared=False)
    (other / f"{PID}_kernel_trace.csv").rename(arm / "222_kernel_trace.csv")
    log = (other / f"hipblaslt.{PID}.log").read_text().replace(f"[HIPBLASLT][{PID}]", "[HIPBLASLT][222]")
    (arm / "hipblaslt.222.log").write_text(log)
    shutil.rmtree(other)
    for rank, pid in ((0, PID), (1, 222)):
        (arm / f"rank{rank}").mkdir()
        (arm / f"rank{rank}" / "sites.jsonl").write_text(json.dumps({
            "event": "header", "schema": "forensics.sites", "version": 1, "rank": rank, "pid": pid, "arm": "a1",
            "site_filter": "aten.mm.default", "steps": "0", "nvtx_domain": None, "host": "synthetic",
            "argv": ["t.py"]}) + "\n" + json.dumps({  # a site record: what ties the rank to its pid
            "event": "site", "arm": "a1", "iteration": 0, "site": "aten.relu.default", "occurrence": 1,
            "label": "aten.relu.default#1", "external_id": 1, "rank": rank, "pid": pid, "op": "aten.relu.default",
            "in": [{"shape": [8], "dtype": "float32", "numel": 8}], "out": [{"shape": [8], "dtype": "float32",
                                                                               "numel": 8}], "meta": {}}) + "\n")
    # the capture's manifest, as `forensics kernel` writes one: it ties each arm's files to one run
    tmp_path.joinpath("manifest.yaml").write_text("schema: 1\nsynthetic: true\narms:\n  - {name: a1, role: arm}\n")
    an = analyze(tmp_path)
    files = {f.path.name: f.pid for f in an.capture.files if f.instrument == "rocprofv3"}
    assert files == {f"{PID}_kernel_trace.csv": PID, "222_kernel_trace.csv": 222}
    v = {(r.rank, r.kernel): r for r in an.verdicts.itertuples()}
    assert v[(0, NAMED_NAME)].verdict == "NAMED" and v[(0, NAMED_NAME)].counts == {"rocprofiler": 1, "hipblaslt": 1}
    assert v[(1, REAL_FP32)].verdict == "CONFLICT"
    assert (1, NAMED_NAME) not in v and (0, REAL_FP32) not in v


TENSILE_HHS = "Cijk_Alik_Bljk_HHS_BH_MT64x64x32_MI32x32x8_SN_K1"  # SYNTHETIC, the real grammar's fields (TN, fp16)


def test_a_rocblas_log_names_batched_tensile_launches(tmp_path):
    """The REAL rocBLAS log of ROCm/rocm-libraries#3413 (3 rocblas_gemm_batched_ex calls: T,N, fp16
    in, batch 96; 256x64x128, 128x64x256, 256x64x128; no pid in its lines) beside a rocprofv3 trace
    (real header, SYNTHETIC rows) of one Tensile kernel launched 3 times with grid.z = 96: counts
    agree 3 = 3, and layout, precision, grid (4 and 2 workgroups for 64x64 tiles) and batch are
    checked call by call: NAMED (the two files declared one run by a manifest.yaml: the log records no
    process id, so nothing in the files ties them; undeclared, the same agreement reads AGREE-UNTIED);
    with grid.z = 95, the batch check conflicts: CONFLICT, declared or not."""
    for z, verdict, declared in ((96, "NAMED", True), (96, "AGREE-UNTIED", False), (95, "CONFLICT", False)):
        d = tmp_path / f"{z}-{declared}"
        d.mkdir()
        rows = [_row(i, TENSILE_HHS, (256, 1, 1), (wg, 1, z)) for i, wg in ((1, 4), (2, 2), (3, 4))]
        (d / f"{PID}_kernel_trace.csv").write_text("\n".join([HEADER, *rows]) + "\n")
        shutil.copy(AMD / "rocblas_layer3_rocm_libraries3413.log", d / "rocblas_trace.log")
        if declared:
            _declare(d)
        an = analyze(d)
        assert {f.instrument for f in an.capture.files} == {"rocprofv3", "rocblas"}
        (row,) = list(an.verdicts.itertuples())
        assert row.verdict == verdict and row.counts == {"rocprofiler": 3, "hipblaslt": 3}, row.reason
        if verdict != "CONFLICT":
            assert {"library", "precision", "layout", "grid", "batch/split-K"} <= set(row.identity["checked"])
        if verdict == "AGREE-UNTIED":
            assert "rocblas_trace.log (rocblas) records no process id" in row.reason, row.reason
        elif verdict == "CONFLICT":
            assert any(c.startswith("batch") for c in row.identity["conflicts"]), row.identity
