"""oneDNN and oneMKL verbose parsers on real logs recorded on the development machine (torch 2.13 CPU wheel).

tests/fixtures/cpu/logs/PROVENANCE.md says how each file was made (``record_logs.py`` there).
Counts below were read off the files by ``grep -c``; a mutated copy of each must give one
file:line error (BadInput), never a different count.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from forensics.core.errors import BadInput
from parsers import mkl_verbose, onednn_verbose

LOGS = Path(__file__).resolve().parent / "fixtures" / "cpu" / "logs"


# --------------------------------------------------------------------------- oneMKL
def test_mkl_blas_log_every_routine_and_descriptor():
    log = mkl_verbose.read_log(LOGS / "mkl_blas.log")
    c = log.calls
    assert log.versions == ["2024.0 Update 2"] and not log.notes
    assert list(c["routine"]) == ["SGEMM", "SGEMM", "DGEMM", "SGEMV", "SGEMM"]
    assert list(c["a_type"]) == ["f32", "f32", "f64", "f32", "f32"]
    first = c.iloc[0]
    assert (first["transa"], first["transb"], first["m"], first["n"], first["k"]) == ("N", "N", 48, 64, 32)
    assert (first["lda"], first["ldb"], first["ldc"]) == (48, 32, 48)
    assert set(c["cnr"]) == {"OFF"} and set(c["nthr"]) == {2} and set(c["tid"]) == {0}
    gemv = c.iloc[3]
    assert (gemv["family"], gemv["transa"], gemv["m"], gemv["n"]) == ("gemv", "T", 32, 64)
    last = c.iloc[4]
    assert (last["transa"], last["transb"], last["m"], last["n"], last["k"]) == ("N", "T", 16, 32, 64)
    # byte offsets tile the file: the header line, then each call line back to back
    raw = (LOGS / "mkl_blas.log").read_bytes()
    assert int(c["offset"].iloc[0]) == raw.index(b"\n") + 1
    assert list(c["offset"].iloc[1:]) == list(c["end_offset"].iloc[:-1])
    assert int(c["end_offset"].iloc[-1]) == len(raw)
    for r in c.itertuples():
        assert raw[r.offset:r.end_offset].decode().rstrip("\n") == r.raw


def test_mkl_cnr_mode_is_read_from_each_line():
    plain = mkl_verbose.read_log(LOGS / "mkl_blas.log").calls
    cbwr = mkl_verbose.read_log(LOGS / "mkl_blas_cbwr_compatible.log").calls
    assert set(cbwr["cnr"]) == {"COMPATIBLE"} and set(plain["cnr"]) == {"OFF"}
    assert list(cbwr[["m", "n", "k"]].itertuples(index=False)) == list(plain[["m", "n", "k"]].itertuples(index=False))


def test_mkl_thnn_conv_issues_one_sgemm_per_sample():
    """A 1x1 Conv1d, batch 4, one thread: 4 forward, 4 grad-input and 4 grad-weight SGEMMs."""
    c = mkl_verbose.read_log(LOGS / "mkl_conv_1thr.log").calls
    assert len(c) == 12
    assert [tuple(x) for x in c[["transa", "transb", "m", "n", "k"]].drop_duplicates().itertuples(index=False)] == [
        ("N", "N", 8, 16, 8), ("N", "T", 8, 8, 16), ("T", "N", 8, 16, 8)]
    assert set(c["nthr"]) == {1} and int(c["duration_ns"].iloc[0]) == 81930


def test_mkl_second_writer_of_one_file_is_kept_apart(tmp_path):
    text = (LOGS / "mkl_blas.log").read_text()
    p = tmp_path / "mkl.log"
    p.write_text(text + text)
    log = mkl_verbose.read_log(p)
    assert len(log.versions) == 2 and list(log.calls["writer"]) == [1] * 5 + [2] * 5


@pytest.mark.parametrize("mutate, expect_line, needle", [
    (lambda ls: ls[:2] + ["MKL_VERBOSE SGEMM(N,N,48,64,32 3.0us CNR:OFF"] + ls[2:], 3, "malformed"),
    (lambda ls: ls[:2] + [re.sub(r"s CNR", "x CNR", ls[2])] + ls[3:], 3, "malformed"),
    (lambda ls: ls[:4] + [ls[4].replace("NThr:2", "NThr:two")] + ls[5:], 5, "not an integer"),
    (lambda ls: ls[:1] + ["some program output"] + ls[1:], 2, "not an oneMKL verbose line"),
])
def test_mkl_bad_line_is_one_error_naming_file_and_line(tmp_path, mutate, expect_line, needle):
    lines = (LOGS / "mkl_blas.log").read_text().splitlines()
    p = tmp_path / "mkl.123.log"
    p.write_text("\n".join(mutate(lines)) + "\n")
    with pytest.raises(BadInput) as e:
        mkl_verbose.read_log(p)
    assert e.value.line == expect_line and needle in e.value.message and str(p) in str(e.value)


def test_mkl_cut_last_line_is_dropped_and_said(tmp_path):
    raw = (LOGS / "mkl_blas.log").read_bytes()
    p = tmp_path / "mkl.log"
    p.write_bytes(raw[:-40])
    log = mkl_verbose.read_log(p)
    assert len(log.calls) == 4 and len(log.notes) == 1 and "cut last line" in log.notes[0]


def test_mkl_empty_or_foreign_file(tmp_path):
    (tmp_path / "e.log").write_text("")
    (tmp_path / "j.log").write_text('{"a": 1}\n')
    for name in ("e.log", "j.log"):
        with pytest.raises(BadInput):
            mkl_verbose.read_log(tmp_path / name)


# --------------------------------------------------------------------------- oneDNN
def test_onednn_timestamped_log_every_execution():
    log = onednn_verbose.read_log(LOGS / "onednn_conv_2thr_ts.log")
    e = log.execs
    assert log.info["version"] == "3.12.0" and log.info["cpu_isa"] == "Intel AVX2" and log.info["cpu_nthr"] == "2"
    assert log.info["templates"]["primitive"][0] == "timestamp"
    assert len(e) == 16 and e["ts_ns"].notna().all() and e["ts_ns"].is_monotonic_increasing
    conv = e[e["primitive"] == "convolution"]
    assert list(conv["implementation"]) == ["jit_1x1:avx2", "jit_1x1:avx2", "jit_1x1:avx2", "jit:avx2"]
    assert list(conv["prop_kind"]) == ["forward_training", "backward_data", "backward_weights", "forward_training"]
    assert conv["problem_desc"].iloc[0] == "mb4_ic8oc16_ih1oh1kh1sh1dh0ph0_iw8ow8kw1sw1dw0pw0"
    assert conv["dtypes"].iloc[0] == "src:f32 wei:f32 bia:f32 dst:f32"
    assert (conv["impl_name"].iloc[0], conv["isa"].iloc[0]) == ("jit_1x1", "avx2")
    assert int((e["primitive"] == "reorder").sum()) == 12
    # the timestamp is ms since the epoch with a us fraction: exact ns
    first = e.iloc[0]
    stamp = first["raw"].split(",")[2]
    assert len(stamp.split(".")[1]) == 6 and str(int(first["ts_ns"])) == stamp.replace(".", "")


def test_onednn_all_log_keeps_creates_and_dispatch_lines():
    log = onednn_verbose.read_log(LOGS / "onednn_conv_all_2thr.log")
    assert len(log.execs) == 16 and log.execs["ts_ns"].isna().all()
    assert dict(log.creates["operation"].value_counts()) == {"create:cache_miss": 14, "create:cache_hit": 2}
    assert dict(log.others["operation"].value_counts()) == {"create:dispatch": 49, "exec:check": 14}


# Real lines of earlier oneDNN versions, quoted in public issue threads:
V16 = ("dnnl_verbose,exec,cpu,convolution,jit:avx512_common,forward_inference,src_f32::blocked:abcd:f0 "
       "wei_f32::blocked:Acdb16a:f0 bia_undef::undef::f0 dst_f32::blocked:aBcd16b:f0,,alg:convolution_direct,"
       "mb1_ic3oc64_ih224oh112kh7sh2dh0ph3_iw224ow112kw7sw2dw0pw3,0.988037")  # oneDNN v1.6, uxlfoundation/oneDNN#832
V3X = ("onednn_verbose,primitive,exec,cpu,convolution,jit_1x1:avx2,forward_training,src_f32:a:blocked:aBcd8b::f0 "
       "wei_f32:a:blocked:ABcd8b8a::f0 bia_f32:a:blocked:a::f0 dst_f32:a:blocked:aBcd8b::f0,attr-scratchpad:user ,"
       "alg:convolution_direct,mb1_ic64oc64_ih80oh80kh1sh1dh0ph0_iw60ow60kw1sw1dw0pw0,0.5997")  # pytorch/pytorch#131958


def test_onednn_earlier_spellings(tmp_path):
    p = tmp_path / "old.log"
    p.write_text(V16 + "\n" + V3X + "\n")
    e = onednn_verbose.read_log(p).execs
    assert list(e["implementation"]) == ["jit:avx512_common", "jit_1x1:avx2"]
    assert list(e["dtypes"]) == ["src:f32 wei:f32 bia:undef dst:f32", "src:f32 wei:f32 bia:f32 dst:f32"]
    assert list(e["attributes"]) == ["", "attr-scratchpad:user"]
    assert list(e["duration_ns"]) == [988037, 599700]


def test_onednn_program_output_between_lines(tmp_path):
    lines = (LOGS / "onednn_conv_2thr_ts.log").read_text().splitlines()
    p = tmp_path / "stdout.txt"
    p.write_text("\n".join(lines[:9] + ["epoch 1 loss 0.5"] + lines[9:]) + "\n")
    with pytest.raises(BadInput) as e:
        onednn_verbose.read_log(p)
    assert e.value.line == 10
    log = onednn_verbose.read_log(p, foreign="skip")
    assert len(log.execs) == 16 and log.foreign_lines == 1 and "1 line(s) not from oneDNN" in log.notes[0]


@pytest.mark.parametrize("index, replace, needle", [
    (9, lambda s: s.rsplit(",", 1)[0] + ",fast", "not a number"),
    (9, lambda s: ",".join(s.split(",")[:8]), "fields after the operation"),
    (9, lambda s: s.replace(",cpu,", ",tpu,", 1), "engine"),
])
def test_onednn_bad_line_is_one_error_naming_file_and_line(tmp_path, index, replace, needle):
    lines = (LOGS / "onednn_conv_2thr_ts.log").read_text().splitlines()
    lines[index] = replace(lines[index])
    p = tmp_path / "onednn.9.log"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(BadInput) as e:
        onednn_verbose.read_log(p)
    assert e.value.line == index + 1 and needle in e.value.message


def test_onednn_cut_last_line_dropped_and_said(tmp_path):
    raw = (LOGS / "onednn_conv_2thr_ts.log").read_bytes()
    p = tmp_path / "cut.log"
    p.write_bytes(raw[:-30])
    log = onednn_verbose.read_log(p)
    assert len(log.execs) == 15 and "cut last line" in log.notes[0]
