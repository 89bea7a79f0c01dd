"""Issue 44, bounded reads: a ceiling on every input read whole (a gzip bomb refused once its
decompressed stream passes it, naming the ceiling and the flag that raises it), a binary text file
refused on its first chunk (a 2 GB sparse rocprofv3 CSV was read whole before its NUL check), and
a property test over readers of real files: random bytes, truncations and flips give rows or one
BadInput line, never another exception (a traceback, an exit 70).
"""
from __future__ import annotations

import gzip
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forensics.cli import main
from forensics.core.errors import BadInput
from forensics.runtime.inputs import DEFAULT_MAX_INPUT_BYTES, MAX_INPUT_ENV, parse_size
from tests._helpers import assert_bad_input
from tests.conftest import REPO

KINETO = REPO / "tests" / "fixtures" / "amd" / "kineto_rocm6.2_mi250_minitoy_train.json.gz"  # real (PROVENANCE.md)
ROCPROF = REPO / "tests" / "fixtures" / "amd" / "rocprofv3_v3_kernel_trace.csv"  # real
CPU_RANK = REPO / "tests" / "fixtures" / "cpu" / "conv1d-threads" / "a1" / "rank0"  # real CPU capture


def _bomb(path: Path, mib: int) -> Path:
    """SYNTHETIC: valid JSON whose gzip stream expands to ``mib`` MiB of whitespace."""
    with gzip.open(path, "wb", compresslevel=9) as g:
        g.write(b'{"traceEvents": [')
        for _ in range(mib):
            g.write(b" " * (1 << 20))
        g.write(b"]}")
    return path


def test_a_gzip_bomb_is_refused_at_the_ceiling_naming_it_and_its_flag(tmp_path, capsys, monkeypatch):
    f = _bomb(tmp_path / "trace.json.gz", 8)
    monkeypatch.setenv(MAX_INPUT_ENV, "4M")
    from parsers import kineto

    with pytest.raises(BadInput) as e:
        kineto.read_trace(f)
    assert "more than 4,194,304 bytes" in str(e.value) and "--max-input-bytes" in str(e.value)
    monkeypatch.delenv(MAX_INPUT_ENV)
    code = main(["--max-input-bytes", "4M", "analyze", str(f)])
    out, err = capsys.readouterr()
    assert_bad_input(code, err, file=f, needle="forensics --max-input-bytes N", out=out)


def test_raising_the_ceiling_reads_what_it_refused(tmp_path, monkeypatch):
    from parsers import kineto

    f = tmp_path / "t.json.gz"
    shutil.copy(KINETO, f)
    size = len(gzip.decompress(KINETO.read_bytes()))
    monkeypatch.setenv(MAX_INPUT_ENV, str(size - 1))
    with pytest.raises(BadInput):
        kineto.read_trace(f)
    monkeypatch.setenv(MAX_INPUT_ENV, str(size))
    assert len(kineto.read_kernels(f)) > 0


def test_sizes_and_the_default():
    assert parse_size("4G") == 4 << 30 and parse_size("512M") == 512 << 20 and parse_size("100") == 100
    assert parse_size("2GiB") == 2 << 30 and DEFAULT_MAX_INPUT_BYTES == 1 << 30
    for bad in ("", "0", "-1", "1.5G", "12Q"):
        with pytest.raises(ValueError):
            parse_size(bad)


def test_a_sparse_csv_is_refused_on_its_first_chunk(tmp_path, monkeypatch):
    """A 1 GiB sparse kernel trace (NUL bytes after a real header): refused after one chunk read."""
    from parsers import _text, rocprofv3

    f = tmp_path / "big_kernel_trace.csv"
    header = ROCPROF.read_bytes().split(b"\n", 1)[0] + b"\n"
    with open(f, "wb") as fh:
        fh.write(header)
        fh.truncate(1 << 30)
    read = []
    real_open = Path.open

    class Counting:
        def __init__(self, fh):
            self.fh = fh

        def read(self, n=-1):
            data = self.fh.read(n)
            read.append(len(data))
            return data

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.fh.close()

    monkeypatch.setattr(Path, "open", lambda self, *a, **k: Counting(real_open(self, *a, **k)) if self == f
                        else real_open(self, *a, **k))
    with pytest.raises(BadInput) as e:
        rocprofv3.read_kernel_trace(f)
    assert "NUL byte" in str(e.value) and e.value.line == 2
    assert sum(read) <= 2 * _text.CHUNK_BYTES  # on main: the whole GiB, then the check


# --------------------------------------------------------------------------- property: readers never crash
def _readers():
    from parsers import kineto, rocprofv3, sites_jsonl
    from forensics.instruments.recognise import recognise
    from forensics.tracediff.traces.native import iter_records

    def native(path):
        for rec in iter_records(Path(path)):
            list(rec.inputs), list(rec.outputs)  # the tensor entries are parsed on use

    return [("native", REPO / "tests" / "fixtures" / "traces-cpu-divergence" / "origin.jsonl", ".jsonl", native),
            ("kineto", KINETO, ".json.gz", kineto.read_trace),
            ("kineto-plain", KINETO, ".json", kineto.read_trace),
            ("rocprofv3", ROCPROF, "_kernel_trace.csv", rocprofv3.read_kernel_trace),
            ("sites", CPU_RANK / "sites.jsonl", ".jsonl", sites_jsonl.read_sites),
            ("recognise", CPU_RANK / "torchprof.16564.json.gz", ".json.gz", recognise)]


READERS = {name: (src, suffix, fn) for name, src, suffix, fn in _readers()}
_DATA: dict[str, bytes] = {}


def _source(name: str) -> bytes:
    if name not in _DATA:
        src, suffix, _ = READERS[name]
        raw = src.read_bytes()
        _DATA[name] = gzip.decompress(raw) if suffix == ".json" else raw
    return _DATA[name]


damage = st.one_of(
    st.tuples(st.just("cut"), st.floats(0, 1)),
    st.tuples(st.just("flip"), st.lists(st.tuples(st.floats(0, 1), st.integers(0, 255)), min_size=1, max_size=8)),
    st.tuples(st.just("random"), st.binary(max_size=2048)),
)


def _damaged(data: bytes, how) -> bytes:
    kind, arg = how
    if kind == "cut":
        return data[: int(len(data) * arg)]
    if kind == "random":
        return arg
    b = bytearray(data)
    for where, value in arg:
        if b:
            b[min(int(len(b) * where), len(b) - 1)] = value
    return bytes(b)


@pytest.mark.slow  # 40 damaged files per reader
@pytest.mark.parametrize("name", sorted(READERS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(how=damage)
def test_a_damaged_real_file_gives_rows_or_one_bad_input_line(name, how):
    src, suffix, reader = READERS[name]
    data = _damaged(_source(name), how)
    fd, path = tempfile.mkstemp(suffix=suffix)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        try:
            reader(path)
        except BadInput as e:
            assert e.path == path and "\n" not in str(e)
    finally:
        os.unlink(path)
