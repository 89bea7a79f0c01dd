"""Every parser, given another instrument's file, an empty file, a truncated file or random
bytes, raises one BadInput whose one-line message names the file: never a traceback, never a
silent (empty or partial) answer. Real files are read in place from ../shared/corpus."""
from __future__ import annotations

import gzip
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.core.errors import BadInput
from parsers import cupti_jsonl, kineto, ncu, nsys, sites_jsonl

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
DATA = Path(__file__).parent / "data"
FILES = {  # one file per format: real corpus files, SYNTHETIC fixtures for our own formats
    "nsys": CORPUS / "nsys" / "extrap_ex-gpu.s10.sqlite",
    "ncu": CORPUS / "ncu" / "extrap_ex-gpu.s10.ncu-rep",
    "kineto": CORPUS / "kineto" / "hta_critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz",
    "cupti": DATA / "cupti" / "synthetic_two_sites.cupti.jsonl",
    "sites": DATA / "sites" / "synthetic_a1.sites.jsonl",
    "ncu_csv": DATA / "ncu" / "synthetic_raw_base_units.csv",
}
READERS = {
    "nsys": nsys.read_kernels,
    "ncu": ncu.read_report,
    "kineto": kineto.read_trace,
    "cupti": cupti_jsonl.read_kernels,
    "sites": sites_jsonl.read_sites,
    "ncu_csv": ncu.read_csv,
}
pytestmark = pytest.mark.skipif(not FILES["nsys"].exists(), reason=f"corpus not found at {CORPUS}")


def _assert_bad(reader, path):
    with pytest.raises(BadInput) as e:
        reader(path)
    msg = str(e.value)
    assert msg.startswith(str(path)) and "\n" not in msg and e.value.message
    return e.value


@pytest.mark.parametrize("fmt", sorted(READERS))
def test_own_file_reads(fmt):
    assert len(READERS[fmt](FILES[fmt]) if fmt != "kineto" else READERS[fmt](FILES[fmt]).kernels) > 0


@pytest.mark.parametrize(
    "reader_fmt,file_fmt",
    [(r, f) for r in sorted(READERS) for f in sorted(FILES) if r != f and {r, f} != {"ncu", "ncu_csv"}],
)
def test_another_instruments_file_is_bad_input(reader_fmt, file_fmt):
    _assert_bad(READERS[reader_fmt], FILES[file_fmt])


@pytest.mark.parametrize("fmt", sorted(READERS))
def test_empty_file(fmt, tmp_path):
    p = tmp_path / ("empty" + FILES[fmt].name[FILES[fmt].name.index(".") :])
    p.write_bytes(b"")
    assert "empty" in _assert_bad(READERS[fmt], p).message


@pytest.mark.parametrize("fmt", sorted(READERS))
@pytest.mark.parametrize("fraction", [0.3, 0.77])
def test_truncated_copy(fmt, fraction, tmp_path):
    data = FILES[fmt].read_bytes()
    p = tmp_path / ("cut" + FILES[fmt].name[FILES[fmt].name.index(".") :])
    p.write_bytes(data[: int(len(data) * fraction)])
    _assert_bad(READERS[fmt], p)


def test_corrupt_sqlite_page_inside(tmp_path):
    """A whole-size export whose kernel table pages are overwritten with garbage."""
    src = FILES["nsys"]
    p = tmp_path / "corrupt.sqlite"
    data = bytearray(src.read_bytes())
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as c:
        page = c.execute("PRAGMA page_size").fetchone()[0]
        root = c.execute("SELECT rootpage FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()[0]
    start = (root - 1) * page
    data[start : start + page] = b"\xa5" * page
    p.write_bytes(bytes(data))
    _assert_bad(nsys.read_kernels, p)


def test_gzipped_garbage_is_bad_input(tmp_path):
    p = tmp_path / "garbage.json.gz"
    p.write_bytes(gzip.compress(b"\x00\x01 not json at all"))
    _assert_bad(kineto.read_trace, p)
    q = tmp_path / "garbage.jsonl.gz"
    q.write_bytes(gzip.compress(b"\x00\x01 not json at all\n"))
    _assert_bad(cupti_jsonl.read_kernels, q)


PREFIXES = [b"", b"SQLite format 3\x00", b"NVR\x00", b"\x1f\x8b", b'{"traceEvents": [', b'"ID","Process ID"\n', b'{"event": "site"']


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(prefix=st.sampled_from(PREFIXES), body=st.binary(max_size=600), fmt=st.sampled_from(sorted(READERS)))
def test_random_bytes_never_crash(prefix, body, fmt, tmp_path_factory):
    """Random bytes behind each format's magic: BadInput (or, rarely, a valid empty parse), nothing else."""
    if fmt == "ncu":  # never hand random payloads to the native library: check the block walk only
        reader = ncu.check_report_file
    else:
        reader = READERS[fmt]
    p = tmp_path_factory.mktemp("fuzz") / ("fuzz" + FILES[fmt].name[FILES[fmt].name.index(".") :])
    p.write_bytes(prefix + body)
    try:
        reader(p)
    except BadInput as e:
        assert str(e).startswith(str(p)) and "\n" not in str(e)
