"""The streamed readers' ceilings (issue 44): bytes through forensics.runtime.inputs.open_stream
(gzip decompressed counted) and rows kept (RecordBudget), each refusal one line naming the limit
and the flag that raises it."""
from __future__ import annotations

import gzip
import subprocess
import sys

import pytest

from forensics.core.errors import BadInput
from forensics.runtime import inputs


def test_open_stream_reads_plain_and_gzip(tmp_path):
    plain = tmp_path / "a.json"
    plain.write_bytes(b'{"traceEvents": []}')
    packed = tmp_path / "a.json.gz"
    packed.write_bytes(gzip.compress(b'{"traceEvents": []}'))
    for p in (plain, packed):
        with inputs.open_stream(p) as f:
            assert f.read() == b'{"traceEvents": []}'


def test_open_stream_refuses_past_the_byte_ceiling(tmp_path, monkeypatch):
    monkeypatch.setenv(inputs.MAX_INPUT_ENV, "1K")
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gzip.compress(b" " * (64 << 10)))  # 64 KiB of text in a small file
    with pytest.raises(BadInput) as e, inputs.open_stream(bomb) as f:
        while f.read(4096):
            pass
    assert "1,024-byte ceiling on a streamed input" in str(e.value) and "--max-input-bytes" in str(e.value)
    big = tmp_path / "big.csv"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(BadInput, match="2,048 bytes: over the 1,024-byte ceiling"):
        inputs.open_stream(big)


def test_open_stream_default_is_far_above_a_whole_read(monkeypatch):
    monkeypatch.delenv(inputs.MAX_INPUT_ENV, raising=False)
    assert inputs.max_stream_bytes() == inputs.DEFAULT_MAX_STREAM_BYTES > inputs.max_input_bytes()


def test_open_stream_refuses_a_cut_gzip(tmp_path):
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(b"[" + b"1," * 100000 + b"1]")[:200])
    with pytest.raises(BadInput, match="truncated or corrupt gzip"), inputs.open_stream(cut) as f:
        while f.read(4096):
            pass


def test_record_budget(tmp_path, monkeypatch):
    monkeypatch.setenv(inputs.MAX_RECORDS_ENV, "3")
    budget = inputs.RecordBudget(tmp_path / "t.csv", "launches")
    budget.take(3)
    with pytest.raises(BadInput, match=r"more than 3 launches kept: .*forensics --max-records N"):
        budget.take()
    monkeypatch.setenv(inputs.MAX_RECORDS_ENV, "zero")
    assert inputs.max_records() == inputs.DEFAULT_MAX_RECORDS


def test_cli_max_records_is_checked():
    r = subprocess.run([sys.executable, "-m", "forensics", "--max-records", "0", "analyze", "x"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "--max-records" in r.stderr
