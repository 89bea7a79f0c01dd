"""parsers.sites_jsonl on SYNTHETIC fixtures in campaign.py's format (tests/data/sites/README.md)."""
from __future__ import annotations

from pathlib import Path

import pytest

from forensics.core.errors import BadInput
from parsers import sites_jsonl
from parsers.sites_jsonl import SITE_COLUMNS, digest_key, digests_key

DATA = Path(__file__).parent / "data"
A1 = DATA / "sites" / "synthetic_a1.sites.jsonl"  # SYNTHETIC
A2 = DATA / "sites" / "synthetic_a2.sites.jsonl"  # SYNTHETIC
HEADER = DATA / "sites" / "synthetic_header.sites.jsonl"  # SYNTHETIC, header + summary
CUPTI = DATA / "cupti" / "synthetic_two_sites.cupti.jsonl"  # SYNTHETIC CUPTI JSONL (another format)


def test_read_sites_columns_and_values():
    s = sites_jsonl.read_sites(A1)
    assert list(s.columns[: len(SITE_COLUMNS)]) == list(SITE_COLUMNS)
    assert len(s) == 6
    assert s["label"].tolist()[:3] == ["gemm:TN:acc0:grad0#1", "gemm:NT:acc0:grad1#1", "index_add:acc1:grad0#1"]
    assert s["occurrence"].tolist() == [1, 1, 1, 2, 2, 2]
    assert s["external_id"].tolist() == [1, 2, 3, 4, 5, 6]
    assert s["iteration"].tolist() == [0, 0, 0, 1, 1, 1]
    assert s["line"].tolist() == [3, 4, 5, 7, 8, 9]
    assert set(s["arm"]) == {"a1"}
    assert s["rank"].isna().all()  # campaign.py files carry no rank
    assert s["in_digests"][0][0]["dtype"] == "bfloat16"


def test_keys_compare_inputs_and_outputs_across_arms():
    a, b = sites_jsonl.read_sites(A1), sites_jsonl.read_sites(A2)
    # hash_error digest (index_add) -> key unknown -> never equal, not even to itself
    assert (a["in_key"] == b["in_key"]).tolist() == [True, True, False, True, True, False]
    assert (a["out_key"] == b["out_key"]).tolist() == [True, False, False, True, False, False]
    assert a["in_key"][2] is None and a["out_key"][2] is None
    assert (a["in_key"] == a["in_key"]).tolist()[2] is False


def test_digest_key_is_stable_and_distinguishes():
    d = {"shape": [2, 3], "dtype": "float32", "numel": 6, "hash": (1 << 64) - 1}
    assert digest_key(d) == "float32[2,3]n6:hffffffffffffffff"
    assert digest_key(dict(d, shape=[3, 2])) != digest_key(d)
    assert digest_key(dict(d, dtype="bfloat16")) != digest_key(d)
    assert digest_key(dict(d, hash=-1)) == digest_key(d)  # an int64 view of the same uint64
    assert digest_key({"shape": [1], "dtype": "f", "numel": 1, "hash_error": "x"}) is None
    assert digests_key([]) is None
    assert digests_key([d, d]) == digest_key(d) + "|" + digest_key(d)
    # the order-sensitive key: from ohash only; None when a digest has none (never mixed with hash)
    assert digest_key(dict(d, ohash=5), ordered=True) == "float32[2,3]n6:o0000000000000005"
    assert digest_key(d, ordered=True) is None and digests_key([dict(d, ohash=5), d], ordered=True) is None
    assert digest_key(dict(d, ohash=5)) == digest_key(d)  # the hash key ignores ohash (old and new records compare)


def test_a_wrong_typed_ohash_is_bad_input(tmp_path):
    f = tmp_path / "sites.jsonl"
    f.write_text('{"event": "site", "label": "gemm:NT:acc0:grad1#1", "in": [{"shape": [2], "dtype": "float32", '
                 '"numel": 2, "hash": 1, "ohash": 1.5}], "out": []}\n')
    with pytest.raises(BadInput) as e:
        sites_jsonl.read_sites(f)
    assert "in[0].ohash must be a 64-bit integer" in str(e.value) and ":1" in str(e.value)


def test_header_fills_rank_pid_and_events():
    s = sites_jsonl.read_sites(HEADER)
    assert s["rank"].tolist() == [0] * 6 and s["pid"].tolist() == [4242] * 6
    e = sites_jsonl.read_events(HEADER)
    assert e["event"].tolist() == ["header", "cupti_unavailable", "iteration", "iteration", "summary"]
    assert e["t_ns"].dropna().tolist() == [1764450000000000000, 1764450001000000000]  # exact ns


def _bad(path, *fragments, line=None):
    with pytest.raises(BadInput) as e:
        sites_jsonl.read_sites(path)
    msg = str(e.value)
    assert str(path) in msg and "\n" not in msg
    for f in fragments:
        assert f in msg
    if line is not None:
        assert e.value.line == line


def test_cupti_file_is_not_a_site_file():
    _bad(CUPTI, "not a site JSONL", "CUPTI", line=1)


def test_truncated_and_empty(tmp_path):
    text = A1.read_text()
    p = tmp_path / "cut.jsonl"
    p.write_text(text[:-30])
    _bad(p, "truncated last line", line=text.count("\n"))
    p.write_text("\n\n")
    _bad(p, "empty file")


def test_foreign_version(tmp_path):
    p = tmp_path / "v9.jsonl"
    p.write_text('{"event": "header", "schema": "forensics.sites", "version": 9}\n' + A1.read_text())
    _bad(p, "version 9", line=1)


def test_site_without_label(tmp_path):
    p = tmp_path / "nolabel.jsonl"
    p.write_text('{"event": "site", "in": [], "out": []}\n')
    _bad(p, "label", line=1)


def test_label_only_record_derives_site_and_occurrence(tmp_path):
    p = tmp_path / "min.jsonl"
    p.write_text('{"event": "site", "label": "gemm:NT:acc0:grad1#3", "in": [], "out": []}\n')
    s = sites_jsonl.read_sites(p)
    assert s["site"][0] == "gemm:NT:acc0:grad1" and s["occurrence"][0] == 3
    assert s["in_key"][0] is None
