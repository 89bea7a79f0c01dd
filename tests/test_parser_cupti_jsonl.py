"""parsers.cupti_jsonl on SYNTHETIC fixtures in campaign.py's format (tests/data/cupti/README.md)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from forensics.core.errors import BadInput
from forensics.core.model import LAUNCH_COLUMNS, RANGE_COLUMNS
from parsers import cupti_jsonl

DATA = Path(__file__).parent / "data"
PLAIN = DATA / "cupti" / "synthetic_two_sites.cupti.jsonl"  # SYNTHETIC, no header/summary
WITH_HEADER = DATA / "cupti" / "synthetic_two_sites_header.cupti.jsonl"  # SYNTHETIC, header + summary
SITES = DATA / "sites" / "synthetic_a1.sites.jsonl"  # SYNTHETIC site JSONL (another format)
SPLITK = "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float>(float const*, float*, int)"


@pytest.mark.parametrize("path", [PLAIN, WITH_HEADER])
def test_kernels_launch_frame(path):
    k = cupti_jsonl.read_kernels(path)
    assert list(k.columns[: len(LAUNCH_COLUMNS)]) == list(LAUNCH_COLUMNS)
    assert len(k) == 3
    assert k["kernel"].tolist()[2] == SPLITK
    assert k["mangled"].tolist()[2] == "_ZN8cublasLt19splitKreduce_kernelILi32ELi16EifffEEvPKfPfi"
    assert k["short_name"].tolist() == [k["kernel"][0], k["kernel"][0], "splitKreduce_kernel"]
    assert k["external_id"].tolist() == [1, 2, 2]
    assert k["correlation_id"].tolist() == [101, 102, 103]
    # launch_ns is the start of the RUNTIME record with the same correlation id, exact to the ns
    assert k["launch_ns"].tolist() == [1764450000000001000, 1764450000000011000, 1764450000000015000]
    assert k["start_ns"].tolist()[0] == 1764450000000005000
    assert k["grid"].tolist() == ["(16, 8, 1)", "(2, 2, 4)", "(4, 1, 1)"]
    assert k["block"].tolist()[2] == "(256, 1, 1)"
    assert k["pid"].tolist() == [4242] * 3 and k["tid"].tolist() == [4243] * 3
    assert set(k["instrument"]) == {"cupti"}
    assert "registers_per_thread" in k.columns  # unknown fields kept


def test_records_keep_every_field_and_line():
    r = cupti_jsonl.read_records(WITH_HEADER)
    assert r["kind_name"].value_counts().to_dict() == {
        "MARKER": 5, "RUNTIME": 4, "EXTERNAL_CORRELATION": 3, "CONCURRENT_KERNEL": 3, "MEMSET": 1
    }
    assert r["line"].min() == 2  # line 1 is the header
    assert "bytes" in r.columns and "api_name" in r.columns
    assert len(cupti_jsonl.read_runtime(PLAIN)) == 4


def test_markers_pair_start_and_end_by_id():
    m = cupti_jsonl.read_markers(PLAIN)
    assert list(m.columns[: len(RANGE_COLUMNS)]) == list(RANGE_COLUMNS)
    assert m["name"].tolist() == ["gemm:TN:acc0:grad0#1", "gemm:NT:acc0:grad1#1", "outer"]
    assert m["kind"].tolist() == ["startend", "startend", "pushpop"]
    assert m["end_ns"].tolist()[:2] == [1764450000000009000, 1764450000000020000]
    assert m["end_ns"].isna().tolist()[2]  # unended range


def test_dropped():
    assert cupti_jsonl.dropped(PLAIN) == 0
    assert cupti_jsonl.dropped(WITH_HEADER) == 3
    assert cupti_jsonl.read_meta(WITH_HEADER)["header"]["schema"] == "forensics.cupti"


def test_dropped_events_are_summed(tmp_path):
    p = tmp_path / "cupti.jsonl"
    p.write_text(PLAIN.read_text() + '{"event": "dropped", "dropped": 2}\n{"event": "dropped", "dropped": 5}\n')
    assert cupti_jsonl.dropped(p) == 7


def test_gzip_is_read(tmp_path):
    p = tmp_path / "cupti.jsonl.gz"
    p.write_bytes(gzip.compress(PLAIN.read_bytes()))
    assert len(cupti_jsonl.read_kernels(p)) == 3


def test_kind_name_fallback_from_kind(tmp_path):
    lines = [json.loads(x) for x in PLAIN.read_text().splitlines()]
    for rec in lines:
        rec.pop("kind_name")
    p = tmp_path / "cupti.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert len(cupti_jsonl.read_kernels(p)) == 3
    assert len(cupti_jsonl.read_markers(p)) == 3


def _bad(path, *fragments, line=None):
    with pytest.raises(BadInput) as e:
        cupti_jsonl.read_kernels(path)
    msg = str(e.value)
    assert str(path) in msg and "\n" not in msg
    for f in fragments:
        assert f in msg
    if line is not None:
        assert e.value.line == line


def test_truncated_last_line(tmp_path):
    text = PLAIN.read_text()
    p = tmp_path / "cut.jsonl"
    p.write_text(text[: len(text) - 40])
    _bad(p, "truncated last line", line=text.count("\n"))


def test_malformed_middle_line(tmp_path):
    lines = PLAIN.read_text().splitlines(keepends=True)
    lines[4] = lines[4][:20] + "\n"
    p = tmp_path / "bad.jsonl"
    p.write_text("".join(lines))
    _bad(p, "malformed JSON", line=5)


def test_empty_file(tmp_path):
    p = tmp_path / "empty.jsonl"
    p.write_text("")
    _bad(p, "empty file")


def test_foreign_version_and_schema(tmp_path):
    body = PLAIN.read_text()
    p = tmp_path / "v2.jsonl"
    p.write_text('{"event": "header", "schema": "forensics.cupti", "version": 2}\n' + body)
    _bad(p, "version 2", line=1)
    p.write_text('{"event": "header", "schema": "forensics.sites", "version": 1}\n' + body)
    _bad(p, "forensics.sites", line=1)


def test_site_jsonl_is_not_cupti():
    _bad(SITES, "not a CUPTI JSONL", line=1)


def test_truncated_gzip(tmp_path):
    blob = gzip.compress(PLAIN.read_bytes())
    p = tmp_path / "cut.jsonl.gz"
    p.write_bytes(blob[: len(blob) // 2])
    _bad(p, "gzip")


def test_no_kernels_gives_empty_launch_frame(tmp_path):
    p = tmp_path / "only_runtime.jsonl"
    p.write_text("".join(x + "\n" for x in PLAIN.read_text().splitlines() if '"RUNTIME"' in x))
    k = cupti_jsonl.read_kernels(p)
    assert k.empty and list(k.columns) == list(LAUNCH_COLUMNS)
