"""parsers.ncu: the real .ncu-rep in ../shared/corpus/ncu (read in place) and SYNTHETIC CSV
fixtures in tests/data/ncu (formats of real ncu CSV exports, see tests/data/ncu/README.md)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from forensics.core.errors import BadInput
from forensics.core.model import LAUNCH_COLUMNS
from parsers import ncu, nsys

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
REPORT = CORPUS / "ncu" / "extrap_ex-gpu.s10.ncu-rep"
NSYS_PAIR = CORPUS / "nsys" / "extrap_ex-gpu.s10.sqlite"  # the same program under nsys
DATA = Path(__file__).parent / "data" / "ncu"
RAW = DATA / "synthetic_raw_base_units.csv"  # SYNTHETIC
DETAILS = DATA / "synthetic_details_rules.csv"  # SYNTHETIC
FAILED = DATA / "synthetic_failed_run.csv"  # SYNTHETIC (the real failure line)
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
SPLITK = "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float>(float const*, float*, int)"

needs_corpus = pytest.mark.skipif(not REPORT.exists(), reason=f"corpus not found at {REPORT}")
ncu_report = pytest.importorskip("ncu_report", reason="ncu_report (pip install ncu-report) not installed")


@needs_corpus
def test_report_six_actions():
    r = ncu.read_report(REPORT)
    assert list(r.columns[: len(LAUNCH_COLUMNS)]) == list(LAUNCH_COLUMNS)
    assert r["short_name"].tolist() == ["init_array", "init_array", "vector_add", "vector_add1", "vector_mul", "vector_dot"]
    assert r["mangled"].tolist()[:3] == ["_Z10init_arrayPdm", "_Z10init_arrayPdm", "_Z10vector_addPKdS0_mPd"]
    assert r["kernel"].tolist() == r["demangled_ncu"].tolist()  # cxxfilt agrees with ncu here
    assert r["kernel"][0] == "init_array(double*, unsigned long)"
    assert set(r["grid"]) == {"(1, 1, 1)"} and set(r["block"]) == {"(10, 1, 1)"}
    assert set(r["stream_id"]) == {7} and set(r["device_id"]) == {0}
    assert r["duration_ns"].tolist() == [4064, 4224, 4288, 4512, 4288, 4512]
    assert r["action_index"].tolist() == list(range(6)) and set(r["range_index"]) == {0}
    assert r["site_label"].isna().all() and all(x == [] for x in r["nvtx_ranges"])  # no NVTX recorded
    assert r["start_ns"].isna().all() and set(r["instrument"]) == {"ncu"}
    assert ncu.check_report_file(REPORT) == 6


@needs_corpus
def test_report_and_nsys_see_the_same_launches():
    a, b = ncu.read_report(REPORT), nsys.read_kernels(NSYS_PAIR)
    assert a["kernel"].tolist() == b["kernel"].tolist()
    assert a["grid"].tolist() == b["grid"].tolist() and a["block"].tolist() == b["block"].tolist()


@needs_corpus
def test_all_metrics_adds_metric_columns():
    r = ncu.read_report(REPORT, all_metrics=True)
    assert r["device__attribute_display_name"][0] == "A100-PCIE-40GB"
    assert r["launch__registers_per_thread"][0] == 16.0


class _Range(SimpleNamespace):  # SYNTHETIC stand-ins following the ncu_report NVTX API
    def name(self):
        return self.n


class _Domain:
    def __init__(self, name, startend, pushpop):
        self._name, self._se, self._pp = name, startend, pushpop

    def name(self):
        return self._name

    def start_end_ranges(self):
        return tuple(sorted(self._se))

    def start_end_range(self, i):
        return _Range(n=self._se[i])

    def push_pop_ranges(self):
        return tuple(sorted(self._pp))

    def push_pop_range(self, i):
        return _Range(n=self._pp[i])


class _State:
    def __init__(self, domains):
        self._d = domains

    def domains(self):
        return tuple(range(len(self._d)))

    def domain_by_id(self, i):
        return self._d[i]


def test_nvtx_state_order_start_end_then_push_pop_stack():
    action = SimpleNamespace(nvtx_state=lambda: _State([
        _Domain("<default domain>", ["gemm:NT:acc0:grad1#2"], ["step", "gemm:TN:acc0:grad0#1"]),
        _Domain("te", [], ["fwd"]),
    ]))
    got = ncu._nvtx(action)
    assert got == [
        (None, "startend", "gemm:NT:acc0:grad1#2"), (None, "pushpop", "step"),
        (None, "pushpop", "gemm:TN:acc0:grad0#1"), ("te", "pushpop", "fwd"),
    ]


def _bad(fn, path, *fragments, line=None):
    with pytest.raises(BadInput) as e:
        fn(path)
    msg = str(e.value)
    assert msg.startswith(str(path)) and "\n" not in msg
    for f in fragments:
        assert f in msg, msg
    if line is not None:
        assert e.value.line == line


@needs_corpus
def test_truncated_report_is_bad_input(tmp_path):
    # ncu_report itself loads a cut report silently (3 of 6 actions at 60,000 bytes)
    data = REPORT.read_bytes()
    for cut in (60_000, len(data) - 1, 30):
        p = tmp_path / f"cut{cut}.ncu-rep"
        p.write_bytes(data[:cut])
        _bad(ncu.read_report, p, "truncated Nsight Compute report")


def test_garbage_empty_and_foreign_reports(tmp_path):
    g = tmp_path / "garbage.ncu-rep"
    g.write_bytes(b"hello world" * 10)
    _bad(ncu.read_report, g, "not an Nsight Compute report")
    e = tmp_path / "empty.ncu-rep"
    e.write_bytes(b"")
    _bad(ncu.read_report, e, "empty file")


@needs_corpus
def test_another_instruments_real_file_is_not_a_report():
    _bad(ncu.read_report, NSYS_PAIR, "not an Nsight Compute report")


# ----------------------------------------------------------------------------- CSV
@pytest.mark.parametrize("path,page", [(RAW, "raw"), (DETAILS, "details")])
def test_csv_pages(path, page):
    c = ncu.read_csv(path)
    assert list(c.columns[: len(LAUNCH_COLUMNS)]) == list(LAUNCH_COLUMNS)
    assert set(c["csv_page"]) == {page}
    assert c["kernel"].tolist() == [GEMM, GEMM, SPLITK]
    assert c["short_name"].tolist() == [GEMM, GEMM, "splitKreduce_kernel"]
    assert c["grid"].tolist() == ["(16, 8, 1)", "(2, 2, 4)", "(4, 1, 1)"]
    assert c["block"].tolist() == ["(384, 1, 1)", "(384, 1, 1)", "(256, 1, 1)"]
    assert c["pid"].tolist() == [4242] * 3 and c["stream_id"].tolist() == [7] * 3
    assert c["device_id"].tolist() == [0] * 3 and c["action_index"].tolist() == [0, 1, 2]


def test_csv_raw_units_and_grouping():
    c = ncu.read_csv(RAW)
    assert c["duration_ns"].tolist() == [52160, 60512, 3008]  # "52,160" nsecond
    assert c["sm__cycles_elapsed.avg"].tolist()[0] == 13485 and c["sm__cycles_elapsed.avg"].isna().tolist()[1]
    assert c["launch__registers_per_thread"].tolist() == [168, 168, 32]


def test_csv_details_pivot_skips_rule_rows():
    c = ncu.read_csv(DETAILS)
    assert len(c) == 3
    assert c["duration_ns"].tolist() == [52160, 60510, 3010]  # "52.16" us
    assert c["Elapsed Cycles"].tolist()[0] == 13485 and c["Elapsed Cycles"].isna().tolist()[1]
    assert c["DRAM Frequency"].tolist()[2] == 1215000000
    assert "SOLBottleneck" not in c.columns


@pytest.mark.parametrize(
    "text,value",
    [("13,485", 13485), ("9,495.42", 9495.42), ("1,215,000,000.00", 1215000000.0), ("27.595.520", 27595520),
     ("n/a", None), ("", None), ("6.75", 6.75), ("168", 168), ("Hopper", "Hopper")],
)
def test_parse_number(text, value):
    assert ncu.parse_number(text) == value


def test_nvtx_site_best_effort():
    label, found = ncu._nvtx_site(["<default>:step:gemm:NT:acc0:grad1#3:", ""], ncu.is_occurrence_label)
    assert label == "gemm:NT:acc0:grad1#3" and found == ["gemm:NT:acc0:grad1#3"]


def test_csv_failed_run_quotes_the_error():
    _bad(ncu.read_csv, FAILED, "ncu run failed", "did not match any section")


def test_csv_bad_inputs(tmp_path):
    e = tmp_path / "empty.csv"
    e.write_text("")
    _bad(ncu.read_csv, e, "empty file")
    text = DETAILS.read_text()
    cut = tmp_path / "cut.csv"
    cut.write_text(text[:-30])
    _bad(ncu.read_csv, cut, "truncated last line", line=text.count("\n"))


@needs_corpus
def test_another_instruments_real_file_is_not_a_csv_export():
    _bad(ncu.read_csv, CORPUS / "kineto" / "hta_triton_example__triton_example.json.gz", "not an ncu --csv export")
