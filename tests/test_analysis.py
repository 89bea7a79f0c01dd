"""The two-instrument rule on the real corpus and on SYNTHETIC captures in the real formats.

The synthetic captures below are hand-built: sites.jsonl and cupti.jsonl follow the records
documented in docs/parsers/, the cuBLASLt lines follow the [Trace] grammar of the real lines in
tests/data/cublaslt/real_lines.log. They are labelled synthetic in their manifests.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from forensics.judge.analysis import DISAGREE, NAMED, SINGLE, WINDOW, analyze, site_summary
from forensics.capture.directory import new_manifest, write_manifest
from forensics.cli import main

REPO = Path(__file__).resolve().parents[1]
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
ELEMENTWISE = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
PID = 4242


def _trace_line(sec: int) -> str:
    """SYNTHETIC cuBLASLt [Trace] line: y = x @ w.T with x (64, 32), w (16, 32): cuBLAS TN, m=16 n=64 k=32."""
    return (f"[2026-11-29 20:00:{sec:02d}][cublasLt][{PID}][Trace][cublasLtTSTMatmul] A=0X7F0000000000 "
            "Adesc=[type=R_16BF rows=32 cols=16 ld=32] B=0X7F0000100000 Bdesc=[type=R_16BF rows=32 cols=64 ld=32] "
            "C=0X7F0000200000 Cdesc=[type=R_16BF rows=16 cols=64 ld=16] D=0X7F0000200000 "
            "Ddesc=[type=R_16BF rows=16 cols=64 ld=16] computeDesc=[computeType=COMPUTE_32F scaleType=R_32F "
            "transa=OP_T] algo=[algoId=66 tile=MATMUL_TILE_128x128 stages=MATMUL_STAGES_64xAUTO customOption=3 "
            "clusterShape=CLUSTER_SHAPE_1x1x1] workSpace=0X0 workSpaceSizeInBytes=0 beta=0 outOfPlace=0 stream=0X0")


def _site(occ: int, ext: int) -> dict:
    return {"event": "site", "arm": "a1", "iteration": 1, "site": "gemm:TN:acc0:grad0", "occurrence": occ,
            "label": f"gemm:TN:acc0:grad0#{occ}", "external_id": ext,
            "in": [{"shape": [16, 32], "dtype": "bfloat16", "numel": 512, "hash": 11},
                   {"shape": [64, 32], "dtype": "bfloat16", "numel": 2048, "hash": 12}],
            "out": [{"shape": [64, 16], "dtype": "bfloat16", "numel": 1024, "hash": 13}]}


def _kernel(corr: int, name: str, t: int) -> list[dict]:
    return [
        {"cbid": 211, "correlation_id": corr, "start": t, "end": t + 500, "kind": 5, "process_id": PID,
         "thread_id": PID, "return_value": 0, "kind_name": "RUNTIME", "api_name": "cudaLaunchKernel_v7000"},
        {"kind": 10, "kind_name": "CONCURRENT_KERNEL", "name": name, "correlation_id": corr, "start": t + 1000,
         "end": t + 3000, "device_id": 0, "context_id": 1, "stream_id": 7, "grid_x": 1, "grid_y": 4, "grid_z": 1,
         "block_x": 384, "block_y": 1, "block_z": 1, "registers_per_thread": 168},
    ]


def _external(corr: int, ext: int) -> dict:
    return {"kind": 39, "kind_name": "EXTERNAL_CORRELATION", "external_kind": 3, "external_id": ext,
            "correlation_id": corr}


def build_capture(root: Path, *, extra_gemm_in_occ2: bool = False) -> Path:
    """SYNTHETIC capture: 2 occurrences of gemm:TN:acc0:grad0, each one GEMM launch + one fill kernel."""
    arm = root / "a1"
    arm.mkdir(parents=True)
    sites = [{"event": "iteration", "arm": "a1", "iteration": 1}, _site(1, 1), _site(2, 2)]
    (arm / "sites.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sites))
    recs = []
    corr, t = 100, 1_764_450_000_000_000_000
    for ext, n_gemm in ((1, 1), (2, 2 if extra_gemm_in_occ2 else 1)):
        for name in [GEMM] * n_gemm + [ELEMENTWISE]:
            corr += 1
            t += 10_000
            recs += _kernel(corr, name, t)
            recs.append(_external(corr, ext))
    (arm / "cupti.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (arm / f"cublaslt.{PID}.log").write_text(_trace_line(1) + "\n" + _trace_line(2) + "\n")
    write_manifest(root, new_manifest(synthetic=True, arms=[{"name": "a1", "role": "arm"}],
                                      site="gemm:TN:acc0:grad0"))
    return root


def _verdict(an, scope: str, needle: str) -> str:
    rows = an.verdicts[(an.verdicts["scope"] == scope) & an.verdicts["kernel"].str.contains(needle, regex=False)]
    assert len(rows) == 1, an.verdicts
    return rows.iloc[0]


def test_cupti_and_cublaslt_name_the_gemm_per_occurrence(tmp_path):
    an = analyze(build_capture(tmp_path / "cap"))
    for occ in (1, 2):
        row = _verdict(an, f"gemm:TN:acc0:grad0#{occ}", "sm90_xmma_gemm")
        assert row.verdict == NAMED
        assert row.counts == {"cupti": 1, "cublaslt": 1}
    fill = _verdict(an, "gemm:TN:acc0:grad0#1", "FillFunctor")
    assert fill.verdict == SINGLE and "GEMM kernels only" in fill.reason
    assert fill.mangled == ELEMENTWISE
    summary = site_summary(an)
    gemm = summary[summary["kernel"].str.contains("xmma")].iloc[0]
    assert (gemm.verdict, gemm.occurrences, gemm.named_in) == (NAMED, 2, 2)


def test_count_mismatch_is_disagree_with_both_counts(tmp_path):
    an = analyze(build_capture(tmp_path / "cap", extra_gemm_in_occ2=True))
    row = _verdict(an, "gemm:TN:acc0:grad0#2", "sm90_xmma_gemm")
    assert row.verdict == DISAGREE and row.counts == {"cupti": 2, "cublaslt": 1}
    assert "cupti=2" in row.reason and "cublaslt=1" in row.reason
    assert _verdict(an, "gemm:TN:acc0:grad0#1", "sm90_xmma_gemm").verdict == NAMED


def test_single_instrument_is_never_named(tmp_path):
    root = build_capture(tmp_path / "cap")
    (root / "a1" / f"cublaslt.{PID}.log").unlink()
    an = analyze(root)
    assert set(an.verdicts["verdict"]) == {SINGLE}
    assert any("cuBLASLt" in m for m in an.missing)
    assert _verdict(an, "gemm:TN:acc0:grad0#1", "sm90_xmma_gemm").reason.endswith("missing: Nsight Compute, cuBLASLt log")
    assert _verdict(an, "gemm:TN:acc0:grad0#1", "FillFunctor").reason.endswith("missing: Nsight Compute")


def test_site_filter_and_cli_exit_codes(tmp_path, capsys):
    root = build_capture(tmp_path / "cap")
    an = analyze(root, site="gemm:TN:acc0:grad0#2")
    assert set(an.verdicts["scope"]) == {"gemm:TN:acc0:grad0#2"}
    assert main(["analyze", str(root), "-q"]) == 0
    out = json.loads((root / "analysis" / "analysis.json").read_text())
    assert {v["verdict"] for v in out["verdicts"]} == {NAMED, SINGLE}
    assert "SYNTHETIC" in (root / "analysis" / "report.md").read_text()
    # a site the capture never recorded is a mistake (exit 2, nothing read), not "nothing NAMED" (1)
    assert main(["analyze", str(root), "-q", "--site", "gemm:NT:acc0:grad1"]) == 2
    assert "'gemm:NT:acc0:grad1' is not in this capture (it recorded gemm:TN:acc0:grad0)" in capsys.readouterr().err
    assert main(["analyze", str(root), "--site", "gemm:XX:acc0:grad1"]) == 2
    assert "layout 'XX'" in capsys.readouterr().err


def test_truncated_file_is_bad_input_naming_file_and_line(tmp_path, capsys):
    root = build_capture(tmp_path / "cap")
    cupti = root / "a1" / "cupti.jsonl"
    text = cupti.read_text()
    cupti.write_text(text[: len(text) - 40])  # cut mid-JSON
    assert main(["analyze", str(root), "-q"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cupti.jsonl:" in err[0] and "Traceback" not in err[0]
    an = analyze(root, keep_going=True)
    assert any("cupti.jsonl" in n for n in an.notes)


def test_corpus_pair_names_all_five_kernels(corpus):
    """Real data: one program seen by nsys (CUPTI) and ncu (replay); 6 launches, 5 kernels."""
    an = analyze(REPO / "examples" / "corpus-ex-gpu")
    v = an.verdicts
    assert set(v["scope"]) == {WINDOW}
    assert len(v) == 5 and set(v["verdict"]) == {NAMED}
    counts = {r.short_name: r.counts for r in v.itertuples()}
    assert counts == {
        "init_array": {"cupti": 2, "ncu": 2},
        "vector_add": {"cupti": 1, "ncu": 1},
        "vector_add1": {"cupti": 1, "ncu": 1},
        "vector_mul": {"cupti": 1, "ncu": 1},
        "vector_dot": {"cupti": 1, "ncu": 1},
    }
    assert set(v["cupti_instrument"]) == {"nsys"}
    assert "_Z10init_arrayPdm" in set(v["mangled"])


def test_corpus_nsys_alone_is_single_source(corpus, tmp_path):
    write_manifest(tmp_path, new_manifest(files=[
        {"path": str(corpus / "nsys" / "extrap_ex-gpu.s10.sqlite"), "instrument": "nsys", "arm": "a1", "rank": 0}]))
    an = analyze(tmp_path)
    assert len(an.verdicts) == 5 and set(an.verdicts["verdict"]) == {SINGLE}
    assert main(["analyze", str(tmp_path), "-q"]) == 1


GEMM2 = "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNN"  # a real H200 cuBLAS kernel name (nvFuser nsys export)
SPLITK = "_Z19splitKreduce_kernelIfffEv18cublasSplitKParamsIfEPKfS3_PfS3_S3_S3_"  # SYNTHETIC mangling of cuBLAS's name


def _window_capture(root: Path, names: list[str], n_calls: int) -> Path:
    """SYNTHETIC window capture (no sites): CUPTI launches of ``names`` and ``n_calls`` cuBLASLt calls."""
    arm = root / "a1"
    arm.mkdir(parents=True)
    recs, corr, t = [], 500, 1_764_450_000_000_000_000
    for name in names:
        corr += 1
        t += 10_000
        recs += _kernel(corr, name, t)
    (arm / "cupti.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (arm / f"cublaslt.{PID}.log").write_text("".join(_trace_line(i) + "\n" for i in range(n_calls)))
    write_manifest(root, new_manifest(synthetic=True, arms=[{"name": "a1", "role": "arm"}]))
    return root


def test_two_different_gemm_kernels_in_one_scope_are_matched_call_by_call(tmp_path):
    """Issue 12 defect 4: two calls, two different GEMM kernels in one scope: each NAMED (one call each)."""
    an = analyze(_window_capture(tmp_path / "cap", [GEMM, ELEMENTWISE, GEMM2], 2))
    for needle in ("sm90_xmma_gemm", "nvjet_tst"):
        row = _verdict(an, WINDOW, needle)
        assert row.verdict == NAMED and row.counts == {"cupti": 1, "cublaslt": 1}
        assert "matched one to one" in row.reason


def test_split_k_reduce_belongs_to_the_call_before_it(tmp_path):
    """One call launching a GEMM and its split-K reduce: both confirmed by that one call."""
    an = analyze(_window_capture(tmp_path / "cap", [GEMM, SPLITK, GEMM, SPLITK], 2))
    for needle in ("sm90_xmma_gemm", "splitKreduce"):
        row = _verdict(an, WINDOW, needle)
        assert row.verdict == NAMED and row.counts == {"cupti": 2, "cublaslt": 2}


def test_calls_not_one_to_one_are_disagree_for_every_gemm_in_scope(tmp_path):
    an = analyze(_window_capture(tmp_path / "cap", [GEMM, GEMM2], 1))
    for needle in ("sm90_xmma_gemm", "nvjet_tst"):
        row = _verdict(an, WINDOW, needle)
        assert row.verdict == DISAGREE and "1 call(s) for 2 launch group(s)" in row.reason


# --------------------------------------------------------------------------- losses (issue 15 item 9)
def test_cupti_dropped_records_reach_every_verdict_of_that_arm(tmp_path):
    root = build_capture(tmp_path / "cap")
    with (root / "a1" / "cupti.jsonl").open("a") as f:  # SYNTHETIC summary line of probes/cupti.py's shape
        f.write(json.dumps({"event": "summary", "dropped": 3, "records": 12}) + "\n")
    an = analyze(root)
    assert all("loss in this arm/rank: cupti: CUPTI dropped 3 activity record(s)" in r for r in an.verdicts["reason"])
    assert any("CUPTI dropped 3" in n for n in an.notes) and an.losses[0]["family"] == "cupti"


def test_site_probe_dropped_records_reach_the_verdicts(tmp_path):
    root = build_capture(tmp_path / "cap")
    with (root / "a1" / "sites.jsonl").open("a") as f:
        f.write(json.dumps({"event": "summary", "records": 2, "dropped": 5}) + "\n")
    an = analyze(root)
    assert all("the site probe dropped 5 record(s)" in r for r in an.verdicts["reason"])


def test_a_garbled_cublaslt_line_is_never_a_silent_single_source(tmp_path, capsys):
    """Issue 15 item 9: a damaged [Trace] line is bad input naming its line (exit 3); read with
    --keep-going the file is skipped and said so, never a quiet SINGLE-SOURCE."""
    for garble in (lambda s: s.replace("][cublasLt][", "][cub1asLt][", 1),  # header damaged
                   lambda s: s.replace("rows=32", "rows=3?", 1),  # a number damaged
                   lambda s: s.replace("Adesc=[", "Adesc=", 1)):  # a block damaged
        root = build_capture(tmp_path / f"cap{id(garble)}")
        log = root / "a1" / f"cublaslt.{PID}.log"
        lines = log.read_text().splitlines()
        lines[1] = garble(lines[1])
        log.write_text("\n".join(lines) + "\n")
        assert main(["analyze", str(root), "-q", "--out", str(tmp_path / f"o{id(garble)}")]) == 3
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"cublaslt.{PID}.log:2:" in err[0]
        an = analyze(root, keep_going=True)
        assert any(f"cublaslt.{PID}.log:2" in n for n in an.notes)


def test_a_bad_site_string_in_sites_jsonl_is_bad_input_with_file_and_line(tmp_path, capsys):
    """Issue 15 item 12: not a usage error (exit 2) but bad input naming the file and line (exit 3)."""
    root = build_capture(tmp_path / "cap")
    sites = root / "a1" / "sites.jsonl"
    lines = sites.read_text().splitlines()
    lines[2] = lines[2].replace('"gemm:TN:acc0:grad0"', '"gemm:XX:acc0:grad0"', 1)
    sites.write_text("\n".join(lines) + "\n")
    assert main(["analyze", str(root), "-q"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sites.jsonl:3:" in err[0] and "layout 'XX'" in err[0]


def test_the_no_launch_message_says_whether_the_site_ran_and_why_nothing_was_counted():
    """A site whose ranges are in the capture but hold nothing the instruments count (on the CPU:
    an ATen-native kernel such as layer norm's backward, which no library logs) is not "no launch
    attributed (sites seen: <the same site>)": the message says it ran and why nothing is NAMED."""
    from forensics.judge.analysis import no_launch_message

    site = "aten.native_layer_norm_backward.default#1"
    cpu = no_launch_message(site, [site], {"torch_profiler", "mkl", "sites", "cpuprobe"})
    assert cpu.startswith(f"site {site} ran inside the window") and "profiler's word only" in cpu
    gpu = no_launch_message("gemm:NT:acc0:grad1", ["gemm:NT:acc0:grad1#1", "gemm:NT:acc0:grad1#2"], {"cupti", "sites"})
    assert "ran inside the window (gemm:NT:acc0:grad1#1, gemm:NT:acc0:grad1#2)" in gpu and "no kernel launch" in gpu
    unseen = no_launch_message("gemm:TN:acc0:grad0", ["gemm:NT:acc0:grad1#1"], {"cupti", "sites"})
    assert unseen == "no launch attributed to site gemm:TN:acc0:grad0 (sites seen: gemm:NT:acc0:grad1#1)"
