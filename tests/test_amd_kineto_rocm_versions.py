"""Kineto traces of PyTorch on ROCm 6.4 and 7.2 (MI300X, MI210), real files from AMD-AGI/TraceLens
(MIT; tests/fixtures/amd/PROVENANCE.md): each is read whole, recognised as a ROCm trace wherever its
vendor signals stand, and its grid taken in the format's unit (work-items on ROCm).

Issue 40's failure kinds, each on a real file: a HIP memcpy call's ``bytes`` printed as text refused
the whole trace; a trace with ``deviceProperties`` after ``traceEvents`` was read as NVIDIA's (its
"missing" lines asked for Nsight Compute and a cuBLASLt log); a Tensile kernel's grid, printed in
work-items, was compared as workgroups and read CONFLICT against its own problem."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from forensics.cli import main
from forensics.core.errors import BadInput
from forensics.core.kernel_names import CONFLICTS, CONSISTENT, check_amd_call
from forensics.instruments.recognise import recognise
from parsers import kineto, kineto_vendor

AMD = Path(__file__).resolve().parent / "fixtures" / "amd"
BERT = AMD / "kineto_rocm6.4_mi300x_bert_small.json.gz"  # metadata, traceEvents, then deviceProperties
SGLANG = AMD / "kineto_rocm7.2_mi300x_sglang_decode.json.gz"
TRITON = AMD / "kineto_rocm7.2_mi300x_triton.json.gz"
MI210 = AMD / "kineto_rocm6.4_mi210_gpu_only.json.gz"
NVIDIA_WORDS = ("CUPTI", "cuBLASLt", "ncu", "Nsight")


def _doc(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


@pytest.mark.parametrize("path,strings", [(BERT, 1), (SGLANG, 3)])
def test_a_memcpy_calls_bytes_printed_as_text_is_read(path, strings):
    doc = _doc(path)
    text = [e for e in doc["traceEvents"] if isinstance((e.get("args") or {}).get("bytes"), str)]
    assert len(text) == strings and {e["name"] for e in text} <= {"hipMemcpyWithStream", "hipMemcpyAsync"}  # the file as found
    trace = kineto.read_trace(path)  # main: BadInput "traceEvents[i].args.bytes: expected int | null, got str"
    assert len(trace.kernels) == {BERT: 60, SGLANG: 555}[path]
    assert "hipMemcpyWithStream" in set(trace.runtime["name"])


def test_bytes_that_are_not_a_count_are_still_refused(tmp_path):
    doc = _doc(BERT)
    i = next(i for i, e in enumerate(doc["traceEvents"]) if isinstance((e.get("args") or {}).get("bytes"), str))
    doc["traceEvents"][i]["args"]["bytes"] = "12 KiB"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=rf"traceEvents\[{i}\]\.args\.bytes"):
        kineto.read_trace(bad)


def test_a_gpu_memcpy_count_printed_as_text_becomes_an_integer(tmp_path):
    doc = _doc(SGLANG)
    i = next(i for i, e in enumerate(doc["traceEvents"]) if e.get("cat") == "gpu_memcpy")
    doc["traceEvents"][i]["args"]["bytes"] = str(doc["traceEvents"][i]["args"]["bytes"])
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    memcpy = kineto.read_trace(p).memcpy
    assert memcpy.loc[memcpy["event_index"] == i, "bytes"].tolist() == [256]


@pytest.mark.parametrize("path,seen", [(BERT, "hip_runtime_version"), (SGLANG, "roctracer_version"),
                                       (TRITON, "hip_driver_version"), (MI210, "roctracer_version")])
def test_every_rocm_version_is_recognised_as_kineto_on_rocm(path, seen):
    r = recognise(path)
    assert r.instrument == "kineto_rocm" and seen in r.why
    assert kineto.read_trace(path).vendor == "rocm"


def test_devices_after_the_events_are_found_past_the_head(tmp_path):
    """The bert trace re-saved so that nothing in its first 64 KiB says a vendor: its CPU-side events
    first, then its runtime and kernel events, then deviceProperties and the version keys (the order
    a re-saving tool may give; the events are the real file's, only their order in the file moved)."""
    doc = _doc(BERT)
    events = doc.pop("traceEvents")
    cpu = [e for e in events if e.get("cat") in ("cpu_op", "python_function")]
    rest = [e for e in events if e.get("cat") not in ("cpu_op", "python_function")]
    moved = tmp_path / "resaved.pt.trace.json.gz"
    moved.write_bytes(gzip.compress(json.dumps({"traceEvents": cpu + rest, **doc}).encode()))
    head = gzip.decompress(moved.read_bytes())[:64 << 10]
    assert kineto_vendor.signals(head) == (None, "")  # the head alone says neither
    r = recognise(moved)
    assert r.instrument == "kineto_rocm" and "beyond the first bytes" in r.why, r


def test_the_signals_of_each_vendor():
    assert kineto_vendor.signals(b'{"cupti_version": 24, "traceEvents": [')[0] == "cuda"
    assert kineto_vendor.signals(b'{"traceEvents": [{"name": "cudaLaunchKernel", "ph": "X"}')[0] == "cuda"
    assert kineto_vendor.signals(b'"deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"')[0] == "cuda"
    assert kineto_vendor.signals(b'"deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X"')[0] == "rocm"
    assert kineto_vendor.signals(b'{"traceEvents": [{"name": "hipExtModuleLaunchKernel"')[0] == "rocm"
    assert kineto_vendor.of_trace({"deviceProperties": [{"name": "NVIDIA A100"}]}, ["cudaLaunchKernel"])[0] == "cuda"
    assert kineto_vendor.of_trace({}, ["hipMemcpyWithStream"])[0] == "rocm"
    assert kineto_vendor.of_trace({}, ["aten::mm"]) == (None, "")
    # a device name of neither vendor says nothing (the file is read on, past its head)
    assert kineto_vendor.signals(b'"deviceProperties": [{"id": 0, "name": "Device 0"')[0] is None
    assert kineto_vendor.of_trace({"deviceProperties": [{"name": "gfx942"}]}, []) == (None, "")
    assert kineto_vendor.of_trace({"deviceProperties": [{"name": "Tesla V100-SXM2-16GB"}]}, [])[0] == "cuda"


CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "kineto"


@pytest.mark.skipif(not CORPUS.is_dir(), reason="real-instrument corpus absent")
def test_real_nvidia_traces_stay_nvidia():
    traces = sorted(p for p in CORPUS.rglob("*") if p.is_file() and recognise(p).instrument == "kineto")[:4]
    assert traces
    for p in traces:
        assert recognise(p).instrument == "kineto"
        assert kineto.read_trace(p).vendor in ("cuda", None), p


def test_missing_lines_name_amd_instruments_on_a_resaved_mi300x_trace(tmp_path, capsys):
    rc = main(["analyze", str(BERT), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert rc == 1 and "instruments: kineto_rocm" in out
    missing = [line for line in out.splitlines() if line.startswith("missing:")]
    assert any("hipBLASLt or rocBLAS log" in m for m in missing)
    assert not any(w in m for m in missing for w in NVIDIA_WORDS), missing


# --------------------------------------------------------------------------- the grid's unit
def test_the_rocm_grid_is_in_work_items_and_read_as_workgroups():
    k = kineto.read_kernels(TRITON)
    gemm = k[k["kernel"].str.startswith("Cijk_")]
    # aten::mm of 32768x2048 by 2048x2048: 8 x 171 = 1368 tiles of 256x192, printed as 1368 x 256 work-items
    # (and the one of 32768x8192 by 8192x2048: the same 2048 x 32768 output)
    assert (gemm["grid_size"] == "(350208, 1, 1)").sum() == 5 and (gemm["grid"] == "(1368, 1, 1)").sum() == 5
    assert set(gemm["block"]) == {"(256, 1, 1)"}
    # 32768x2048 by 2048x8192: 32 x 171 = 5472 tiles
    assert (gemm["grid"] == "(5472, 1, 1)").sum() == 2
    bert = kineto.read_kernels(BERT)
    # aten::addmm [141, 512] x [512, 512], macro tile 16x16: 32 x 9 = 288 workgroups (73728 work-items)
    assert "(288, 1, 1)" in set(bert.loc[bert["kernel"].str.contains("MT16x16x128"), "grid"])


def test_a_cuda_trace_keeps_its_grid_in_blocks():
    assert kineto._grid([4, 2, 1], [128, 1, 1], rocm=False) == ("(4, 2, 1)", None)
    assert kineto._grid([512, 2, 1], [128, 1, 1], rocm=True) == ("(4, 2, 1)", "(512, 2, 1)")
    assert kineto._grid([100, 1, 1], [64, 1, 1], rocm=True)[0] == "(2, 1, 1)"  # a partial workgroup counts
    assert kineto._grid([512, 1, 1], None, rocm=True) == (None, "(512, 1, 1)")  # unit unknown: no grid claimed


def test_the_tensile_grid_check_agrees_with_the_problem_pytorch_issued():
    k = kineto.read_kernels(TRITON)
    row = k[k["grid_size"] == "(350208, 1, 1)"].iloc[0]
    # the problem of aten::mm(x[32768, 2048], W^T[2048, 2048]) as hipBLASLt is called for it (column-major:
    # m = 2048 output features, n = 32768 rows, op(A) transposed: TN), bf16
    call = {"m": 2048, "n": 32768, "k": 2048, "transa": "T", "transb": "N", "precision": "bf16"}
    checks = {c.field: c.status for c in check_amd_call(row["kernel"], row["grid"], call)}
    assert checks["grid"] == CONSISTENT and checks["layout"] == CONSISTENT and checks["precision"] == CONSISTENT
    # the grid as printed, taken as workgroups (main's reading), is 256 times too many
    assert {c.field: c.status for c in check_amd_call(row["kernel"], row["grid_size"], call)}["grid"] == CONFLICTS


def _synthetic_hipblaslt_log(path: Path) -> None:
    """SYNTHETIC: a hipBLASLt log (HIPBLASLT_LOG_MASK=2) of the seven GEMMs the triton trace's aten::mm
    ops issued, in their order, in the real [Trace][rocblaslt_matmul] line layout of
    hipblaslt_mask5_level5.log; pid and time the trace's (its HIP calls ran in pid 3182306 at 2026-05-13
    14:12:59 UTC, which the log prints as its local time). No such log was recorded with the trace."""
    calls = [(2048, 32768, 2048)] * 4 + [(8192, 32768, 2048)] * 2 + [(2048, 32768, 8192)]
    lines = [
        f"[2026-05-13 14:12:59][HIPBLASLT][3182306][Trace][rocblaslt_matmul] A=0x7f0000000000 Adesc=[type=R_16BF "
        f"rows={k} cols={m} ld={k}] B=0x7f1000000000 Bdesc=[type=R_16BF rows={k} cols={n} ld={k}] C=0x7f2000000000 "
        f"Cdesc=[type=R_16BF rows={m} cols={n} ld={m}] D=0x7f2000000000 Ddesc=[type=R_16BF rows={m} cols={n} ld={m}] "
        "computeDesc=[computeType=COMPUTE_32F scaleType=R_32F transA=OP_T transB=OP_N epilogue=EPILOGUE_DEFAULT "
        "biasPointer=0x0] workSpace=0x7f3000000000 workSpaceSizeInBytes=33554432 alpha=1 beta=0 stream=0 "
        for m, n, k in calls]
    path.write_text("\n".join(lines) + "\n")


def test_a_trace_and_hipblaslt_pair_with_grids_is_not_a_conflict_of_units(tmp_path, capsys):
    """REAL trace + SYNTHETIC log of its GEMMs: the three Tensile kernels are NAMED, grid checked; on
    main the same pair read CONFLICT ("grid (350208, 1, 1) workgroups ... (1368 tile(s))")."""
    cap = tmp_path / "cap"
    cap.mkdir()
    (cap / "trace.pt.trace.json.gz").write_bytes(TRITON.read_bytes())
    _synthetic_hipblaslt_log(cap / "hipblaslt.log")
    rc = main(["analyze", str(cap), "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    rep = json.loads((tmp_path / "out" / "analysis.json").read_text())
    tensile = [r for r in rep["verdicts"] if r["kernel"].startswith("Cijk_")]
    assert rc == 0 and len(tensile) == 3, out
    assert {r["verdict"] for r in tensile} == {"NAMED"}, out
    assert "CONFLICT" not in out
    assert all("grid" in r["identity"]["checked"] for r in tensile), tensile
