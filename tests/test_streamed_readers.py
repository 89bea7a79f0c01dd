"""Issue 44, the streamed readers of rocprofv3 CSV, rocprofv3 JSON and nsys tables: each read has a
ceiling on the rows it keeps (``forensics --max-records``) and on the bytes it reads
(``--max-input-bytes``), refused in one line naming the limit and the flag that raises it; a JSON
file past the old whole-read ceiling is read, not refused; sections in any order. Each test here
fails on main before the change (no ceiling on rows, a fixed whole-file ceiling on JSON)."""
from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from forensics.cli import main
from forensics.core.errors import BadInput
from parsers import _rocm_db, nsys, rocprofv3, rocprofv3_json
from tests._helpers import assert_bad_input

ROOT = Path(__file__).resolve().parents[1]
AMD = ROOT / "tests" / "fixtures" / "amd"
JSON = AMD / "synthetic_rocprofv3_v3_results.json"  # SYNTHETIC (PROVENANCE.md), 8 dispatches
CSV = AMD / "rocprofv3_v3_kernel_trace.csv"  # real, 8 dispatches
NSYS = ROOT.parent / "shared" / "corpus" / "nsys" / "nsys_cumat_qdrep_export_nvtx.sqlite"


@pytest.mark.parametrize("reader,path,what", [
    (rocprofv3.read_kernel_trace, CSV, "kernel dispatch rows"),
    (rocprofv3.read_marker_trace, AMD / "rocprofv3_marker_api_trace.csv", "marker ranges"),
    (rocprofv3.read_api_trace, AMD / "rocprofv3_hip_runtime_api_trace.csv", "API calls"),
    (rocprofv3_json.read_results, JSON, "kernel dispatches"),
])
def test_rows_past_the_record_ceiling_are_refused_naming_the_flag(reader, path, what, monkeypatch):
    n = len(reader(path))
    assert n >= 2
    monkeypatch.setenv("FORENSICS_MAX_RECORDS", str(n))
    assert len(reader(path)) == n  # at the ceiling: read
    monkeypatch.setenv("FORENSICS_MAX_RECORDS", str(n - 1))
    with pytest.raises(BadInput) as e:
        reader(path)
    assert f"more than {n - 1:,} {what} kept" in str(e.value) and "--max-records N" in str(e.value)
    assert "FORENSICS_MAX_RECORDS=N" in str(e.value)


@pytest.mark.skipif(not NSYS.exists(), reason="the real-instrument corpus (../shared/corpus) is absent")
def test_nsys_tables_past_the_record_ceiling_are_refused(monkeypatch):
    n = len(nsys.read_kernels(NSYS))
    monkeypatch.setenv("FORENSICS_MAX_RECORDS", str(n - 1))
    with pytest.raises(BadInput, match=f"more than {n - 1:,} CUPTI_ACTIVITY_KIND_KERNEL rows kept.*--max-records N"):
        nsys.read_kernels(NSYS)
    monkeypatch.setenv("FORENSICS_MAX_RECORDS", str(n))
    assert len(nsys.read_kernels(NSYS)) == n


def test_the_record_ceiling_through_the_cli(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("FORENSICS_MAX_RECORDS", "50000000")  # restored afterwards: the flag sets it for the process
    folder = tmp_path / "cap"
    folder.mkdir()
    shutil.copy(CSV, folder / "4242_kernel_trace.csv")
    rc = main(["--max-records", "3", "analyze", str(folder), "--out", str(tmp_path / "out")])
    cap = capsys.readouterr()
    assert_bad_input(rc, cap.err, file="4242_kernel_trace.csv", needle="--max-records N", out=cap.out)


def test_a_json_past_the_old_whole_read_ceiling_is_read(monkeypatch):
    """main read the whole JSON into memory and refused one past MAX_JSON_BYTES (1 GiB): a real trace
    over it was not read. The streamed reader has no such ceiling (only the streamed-input one)."""
    monkeypatch.setattr(_rocm_db, "MAX_JSON_BYTES", 1000)
    monkeypatch.setattr(rocprofv3_json, "MAX_JSON_BYTES", 1000, raising=False)
    assert JSON.stat().st_size > 1000
    assert len(rocprofv3_json.read_results(JSON)) == 8


def test_the_json_byte_ceiling_is_the_streamed_input_one(tmp_path, monkeypatch):
    gz = tmp_path / "big_results.json.gz"
    gz.write_bytes(gzip.compress(JSON.read_bytes()))
    monkeypatch.setenv("FORENSICS_MAX_INPUT_BYTES", "1000")
    with pytest.raises(BadInput, match="over the 1,000-byte ceiling on a streamed input.*--max-input-bytes N"):
        rocprofv3_json.read_results(JSON)
    with pytest.raises(BadInput, match="gzip stream decompresses to more than 1,000 bytes.*--max-input-bytes N"):
        rocprofv3_json.read_results(gz)
    monkeypatch.setenv("FORENSICS_MAX_INPUT_BYTES", str(JSON.stat().st_size))
    assert len(rocprofv3_json.read_results(JSON)) == len(rocprofv3_json.read_results(gz)) == 8


def test_json_sections_after_the_dispatches_and_a_repeated_key(tmp_path):
    """rocprofiler-sdk writes kernel_symbols and agents before buffer_records; a file with them after
    (another writer, an edit) reads the same; a key written twice counts once, its last value (as
    Python's json reads it)."""
    doc = json.loads(JSON.read_text())
    node = doc["rocprofiler-sdk-tool"][0]
    want = rocprofv3_json.read_results(JSON)
    late = tmp_path / "late_results.json"
    records = node.pop("buffer_records")
    late.write_text(json.dumps({"rocprofiler-sdk-tool": [{"buffer_records": records, **node}]}))
    got = rocprofv3_json.read_results(late)
    assert list(got["kernel"]) == list(want["kernel"]) and list(got["device_id"]) == list(want["device_id"])
    twice = tmp_path / "twice_results.json"
    body = json.dumps({"buffer_records": records, **node})
    twice.write_text('{"rocprofiler-sdk-tool": [{"buffer_records": {"kernel_dispatch": [1, 2, 3]}, '
                     + body[1:] + "]}")
    assert len(rocprofv3_json.read_results(twice)) == 8


def test_a_big_json_syntax_error_names_where(tmp_path, monkeypatch):
    """A document yajl refuses past the size read again for Python's words: yajl's reason and the line
    reached, never the file's text (which may hold anything)."""
    monkeypatch.setattr(rocprofv3_json, "_RESAY_BYTES", 100)
    cut = tmp_path / "cut_results.json"
    cut.write_text(JSON.read_text()[:5000])
    with pytest.raises(BadInput) as e:
        rocprofv3_json.read_results(cut)
    assert "not JSON (parse error: premature EOF, in the 256 KiB read before line" in str(e.value)
    assert "\n" not in str(e.value)


def test_columns_give_the_frame_a_list_of_row_dicts_gave(monkeypatch):
    """parsers._columns.Columns (what the streamed readers keep instead of per-row dicts): a value past
    int64, a column that is int then None, rows without a key, text repeated: the same frame as
    ``pandas.DataFrame(rows)``, batch boundaries anywhere."""
    import pandas as pd

    from parsers._columns import Columns

    rows = [{"a": 1, "b": "x"}, {"a": 1 << 70, "b": "y"}, {"a": None, "c": 3}, {"a": 2, "b": "x", "c": 4},
            {"a": 5, "b": None, "c": 1}, {"a": 6, "b": "x", "c": 2}]
    for batch in (1, 2, 4, 100):
        monkeypatch.setattr(Columns, "BATCH", batch)
        cols = Columns()
        for r in rows:
            cols.add(dict(r))
        assert len(cols) == len(rows)
        got = cols.frame({"c": "Int64"})
        want = pd.DataFrame(rows)
        want["c"] = want["c"].astype("Int64")
        pd.testing.assert_frame_equal(got, want[["c", "a", "b"]], check_exact=True)
        assert got["b"].tolist().count("x") == 3


def test_a_json_integer_past_int64_is_json(tmp_path):
    """yajl (ijson's C backend) refuses an integer past int64 anywhere in a file; JSON has them (a
    uint64 handle). A field the reader does not use holding one is read; one it uses is named by path."""
    doc = json.loads(JSON.read_text())
    node = doc["rocprofiler-sdk-tool"][0]
    node["buffer_records"]["hip_api"] = [{"correlation_id": {"internal": 1, "external": (1 << 64) - 1}}]
    f = tmp_path / "big_int_results.json"
    f.write_text(json.dumps(doc))
    assert len(rocprofv3_json.read_results(f)) == 8
    node["buffer_records"]["kernel_dispatch"][2]["thread_id"] = 1 << 64
    f.write_text(json.dumps(doc))
    with pytest.raises(BadInput, match=r"kernel_dispatch\[2\]\.thread_id is 18446744073709551616, past int64"):
        rocprofv3_json.read_results(f)


def test_an_early_syntax_error_in_a_large_json_gets_yajls_words(tmp_path, monkeypatch):
    """A syntax error near the start of a file larger than the size read again by Python's json: the
    file is not read whole for the message (nor refused for its size), yajl's reason is given."""
    monkeypatch.setattr(rocprofv3_json, "_RESAY_BYTES", 2000)
    monkeypatch.setattr(rocprofv3_json, "_BUF", 1024)  # the error is met after 1 KiB, in a 15 KB file
    text = JSON.read_text()
    for name, data in (("early_results.json", text[:300] + "]" + text[300:]),):
        f = tmp_path / name
        f.write_text(data)
        assert f.stat().st_size > 2000
        with pytest.raises(BadInput, match="not JSON \\(parse error: .*, in the 1 KiB read before line"):
            rocprofv3_json.read_results(f)
        gz = tmp_path / (name + ".gz")
        gz.write_bytes(gzip.compress(data.encode()))
        with pytest.raises(BadInput, match="not JSON \\(parse error: .*read before line"):
            rocprofv3_json.read_results(gz)


def test_a_chunk_that_ends_on_a_newline_is_not_the_end_of_the_file(tmp_path, monkeypatch):
    """parsers._text.iter_line_chunks stopped, silently, after a chunk whose last byte was a newline
    (``while pending``): a 2 GB kernel trace read 6.7 of its 11.9 million rows, no problem said.
    Chunk sizes are picked so that a read ends exactly at the end of a row."""
    from parsers import _text

    lines = CSV.read_text().splitlines(keepends=True)
    header, row = lines[0].encode(), lines[1].encode()
    f = tmp_path / "even_kernel_trace.csv"
    f.write_bytes(header + row * 40)
    ends = {len(header) + m * len(row) for m in range(1, 40)}
    sizes = [c for c in range(len(header), len(header) + 3 * len(row)) if 2 * c in ends or 3 * c in ends]
    assert sizes
    for chunk in sizes[:3]:
        monkeypatch.setattr(_text, "CHUNK_BYTES", chunk)
        df = rocprofv3.read_kernel_trace(f)
        assert len(df) == 40 and list(df["line"]) == list(range(2, 42))
    plain = tmp_path / "lines.log"
    plain.write_text("abc\n" * 10)
    got = [x for _, chunk_lines, _ in _text.iter_line_chunks(plain, "test", chunk_bytes=8) for x in chunk_lines]
    assert got == ["abc"] * 10
