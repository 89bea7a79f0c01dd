"""parsers.kineto on the real Kineto traces in ../shared/corpus/kineto (read in place).

Expected numbers were computed once by hand with json/gzip on the corpus files.
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from forensics.core.errors import BadInput
from forensics.core.model import LAUNCH_COLUMNS, RANGE_COLUMNS
from parsers import kineto

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
K = CORPUS / "kineto"
TRITON = K / "hta_triton_example__triton_example.json.gz"
SYNC = K / "hta_critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz"
SIMPLE = K / "hta_critical_path__simple_add__benchmark_result_493459_1694039959_trace.json.gz"

pytestmark = pytest.mark.skipif(not TRITON.exists(), reason=f"corpus not found at {K}")


def test_triton_trace_fractional_us_and_driver_launch():
    t = kineto.read_trace(TRITON)
    k = t.kernels
    assert list(k.columns[: len(LAUNCH_COLUMNS)]) == list(LAUNCH_COLUMNS)
    assert k["kernel"].tolist() == ["triton_poi_fused_add_cos_sin_0"]
    assert k["short_name"].tolist() == ["triton_poi_fused_add_cos_sin_0"] and k["mangled"].isna().all()
    row = k.iloc[0]
    assert row["start_ns"] == 2413669097444592 and row["end_ns"] == 2413669097444592 + 1760  # ts/dur in µs floats
    assert (row["correlation_id"], row["external_id"]) == (35, 3)
    assert row["launch_ns"] == 2413669097399166 and row["api_name"] == "cuLaunchKernel"  # cuda_driver event
    assert (row["pid"], row["tid"], row["gpu_pid"], row["stream_id"]) == (1670242, 1670242, 0, 7)
    assert (row["grid"], row["block"]) == ("(1, 1, 1)", "(128, 1, 1)")
    assert len(t.runtime) == 2 and set(t.runtime["cat"]) == {"cuda_runtime", "cuda_driver"}
    assert len(t.cpu_ops) == 3 and len(t.flows) == 3 and set(t.flows["cat"]) == {"ac2g"}
    assert t.meta["schemaVersion"] == 1 and t.meta["cuda_runtime_version"] == 12000
    assert t.meta["baseTimeNanoseconds"] == 1727743122000000000
    assert t.annotations["name"].tolist() == ["ProfilerStep#1"]
    assert list(t.annotations.columns[: len(RANGE_COLUMNS)]) == list(RANGE_COLUMNS)
    assert k["site_label"].isna().all()  # ProfilerStep#1 is not a site occurrence


def test_event_sync_three_sgemm_on_three_streams():
    t = kineto.read_trace(SYNC)
    k = t.kernels
    assert k["kernel"].tolist() == ["ampere_sgemm_128x64_nn"] * 3
    assert k["stream_id"].tolist() == [20, 28, 24]
    assert k["correlation_id"].tolist() == [27, 57, 1413] and k["external_id"].tolist() == [2, 4, 6]
    assert set(k["grid"]) == {"(8, 16, 5)"} and set(k["block"]) == {"(128, 1, 1)"}
    assert k["launch_ns"].notna().all() and (k["launch_ns"] < k["start_ns"]).all()
    assert len(t.memset) == 3 and len(t.runtime) == 39 and len(t.cpu_ops) == 6


def test_simple_add_79_kernels_and_names():
    t = kineto.read_trace(SIMPLE)
    k = t.kernels
    assert len(k) == 79 and k["kernel"].nunique() == 16
    counts = k["kernel"].value_counts()
    assert counts["ampere_sgemm_32x32_sliced1x4_tn"] == 6
    assert counts["ampere_gcgemm_64x64_nt"] == 2
    assert counts["cudnn_ampere_scudnn_128x64_relu_xregs_large_nn_v1"] == 2
    assert counts["void cask_cudnn::computeOffsetsKernel<false, false>(cask_cudnn::ComputeOffsetsParams)"] == 2
    assert (k["short_name"] == "globalKernel").sum() == 6  # void epilogue::impl::globalKernel<...>(...)
    assert (k["short_name"] == "vectorized_elementwise_kernel").sum() == 14
    # 2023 trace: integer µs, External id == correlation, every kernel has its cudaLaunchKernel
    assert (k["external_id"] == k["correlation_id"]).all()
    first = k.iloc[0]
    assert (first["correlation_id"], first["start_ns"], first["launch_ns"]) == (218, 1694039994139246000, 1694039994139202000)
    assert set(k["api_name"]) == {"cudaLaunchKernel"} and set(k["pid"]) == {493459}
    assert len(t.memcpy) == 16 and len(t.memset) == 3 and len(t.cpu_ops) == 359 and len(t.annotations) == 8
    assert len(t.flows) == 470 and set(t.flows["phase"]) == {"s", "f"}


def test_read_kernels_shortcut_and_plain_json(tmp_path):
    p = tmp_path / "trace.json"
    p.write_bytes(gzip.decompress(SYNC.read_bytes()))
    assert kineto.read_kernels(p)["kernel"].tolist() == ["ampere_sgemm_128x64_nn"] * 3


def test_2022_flow_category_and_flow_join(tmp_path):
    # SYNTHETIC variant of the real triton trace: 2022's async_cpu_to_gpu flows and no
    # 'correlation' in the kernel args, so the kernel<->launch join must go through the flow.
    doc = json.loads(gzip.decompress(TRITON.read_bytes()))
    for e in doc["traceEvents"]:
        if e.get("cat") == "ac2g":
            e["cat"] = e["name"] = "async_cpu_to_gpu"
        if e.get("cat") == "kernel":
            del e["args"]["correlation"]
    p = tmp_path / "synthetic_2022.json"
    p.write_text(json.dumps(doc))
    t = kineto.read_trace(p)
    assert set(t.flows["cat"]) == {"async_cpu_to_gpu"}
    assert t.kernels["correlation_id"].tolist() == [35]
    assert t.kernels["launch_ns"].tolist() == [2413669097399166]


def test_site_annotation_attributes_kernels(tmp_path):
    # SYNTHETIC: a record_function range named like a site occurrence around the real launch
    doc = json.loads(gzip.decompress(SYNC.read_bytes()))
    launch = next(e for e in doc["traceEvents"] if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") == 57)
    doc["traceEvents"].append({"ph": "X", "cat": "user_annotation", "name": "gemm:NN:acc0:grad1#1",
                               "pid": launch["pid"], "tid": launch["tid"], "ts": launch["ts"] - 1, "dur": 5})
    p = tmp_path / "synthetic_site.json"
    p.write_text(json.dumps(doc))
    assert kineto.read_kernels(p)["site_label"].tolist()[1] == "gemm:NN:acc0:grad1#1"
    assert kineto.read_kernels(p)["site_label"].isna().tolist() == [True, False, True]


@pytest.mark.parametrize("value,ns", [(1, 1000), (1.76, 1760), (2413669097444.592, 2413669097444592),
                                      (1694040009786686, 1694040009786686000), (None, None), ("x", None)])
def test_us_to_ns_exact(value, ns):
    assert kineto.us_to_ns(value) == ns


# ----------------------------------------------------------------------------- bad input
def _bad(path, *fragments, line=None):
    with pytest.raises(BadInput) as e:
        kineto.read_trace(path)
    msg = str(e.value)
    assert msg.startswith(str(path)) and "\n" not in msg
    for f in fragments:
        assert f in msg, msg
    if line is not None:
        assert e.value.line == line


def test_truncated_gzip(tmp_path):
    data = SIMPLE.read_bytes()
    p = tmp_path / "cut.json.gz"
    p.write_bytes(data[: len(data) // 2])
    _bad(p, "truncated or corrupt gzip")


def test_truncated_json_names_line(tmp_path):
    text = json.dumps(json.loads(gzip.decompress(SYNC.read_bytes())), indent=1)
    p = tmp_path / "cut.json"
    p.write_text(text[: len(text) // 2])
    _bad(p, "truncated JSON", line=text[: len(text) // 2].count("\n") + 1)


def test_malformed_json(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text('{"traceEvents": [\n{"ph": "X",, "cat": "kernel"}\n]}\n')
    _bad(p, "malformed JSON", line=2)


def test_empty_and_foreign(tmp_path):
    e = tmp_path / "empty.json"
    e.write_text("")
    _bad(e, "empty file")
    n = tmp_path / "not_trace.json"
    n.write_text('{"hello": 1}')
    _bad(n, "not a Chrome/Kineto trace")
    _bad(CORPUS / "nsys" / "extrap_ex-gpu.s10.sqlite", "SQLite")
    _bad(CORPUS / "ncu" / "extrap_ex-gpu.s10.ncu-rep", "JSON")
    s = Path(__file__).parent / "data" / "sites" / "synthetic_a1.sites.jsonl"  # SYNTHETIC site JSONL
    _bad(s, "JSON", line=2)


def test_kernel_without_ts(tmp_path):
    p = tmp_path / "nots.json"
    p.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "args": {}}]}')
    _bad(p, "traceEvents[0]", "no numeric ts")
