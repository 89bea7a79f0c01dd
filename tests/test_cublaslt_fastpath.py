"""The vectorised cuBLASLt reader (``parsers.cublaslt_fast``) against the per-line path.

Logs here mix REAL lines (tests/data/cublaslt/real_lines.log, verbatim) with SYNTHETIC lines: the
benchmark's generator (``benchmarks/bench_cublaslt.synthetic_lines``, in cuBLAS 13.10's format
strings) and the level-5 fixture RENDERED from those format strings, plus SYNTHETIC program
output and odd-but-legal lines.
"""
from __future__ import annotations

import random
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from forensics.core.errors import BadInput
from parsers import cublaslt, cublaslt_fast
from parsers._text import iter_byte_chunks, spans_array

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "cublaslt"
REAL = DATA / "real_lines.log"
RENDERED = DATA / "rendered_level5.log"
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_cublaslt import synthetic_lines  # noqa: E402

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

FRAMES = ("calls", "heuristics", "api", "info", "hints", "errors")


@pytest.fixture(autouse=True)
def _vectorised_even_for_small_logs(monkeypatch):
    """read_log hands logs under FAST_MIN_BYTES to the per-line path; these tests want the vectorised one."""
    monkeypatch.setattr(cublaslt, "FAST_MIN_BYTES", 0)


def mixed_log_lines(n_generated: int = 400, seed: int = 7) -> list[str]:
    """SYNTHETIC generated lines interleaved with the REAL and SYNTHETIC fixture lines and odd cases."""
    rng = random.Random(seed)
    generated = synthetic_lines(rng, pid=4242, t0=1_790_000_000)
    fixtures = REAL.read_text().splitlines() + RENDERED.read_text().splitlines()
    odd = [
        "epoch 1 loss=0.5 ptr=0X1234",  # program output (skipped), with a pointer-looking value
        "",  # blank line
        # SYNTHETIC: no timestamp, lower-case pointers, a different pid width, an unknown key in a block
        "[cublasLt][77][Trace][cublasLtMatmul] A=0x7f00 Adesc=[type=R_16F rows=8 cols=4 ld=8] "
        "B=0x7f40 Bdesc=[type=R_16F rows=4 cols=2 ld=4] C=0x7f80 Cdesc=[type=R_16F rows=8 cols=2 ld=8] "
        "D=0x7f80 Ddesc=[type=R_16F rows=8 cols=2 ld=8] computeDesc=[computeType=COMPUTE_32F scaleType=R_32F "
        "future=0xdead] algo=[algoId=21] workSpace=0X0 workSpaceSizeInBytes=0 beta=0 outOfPlace=0 stream=0X0",
        "[2026-01-01 00:00:00][cublasLt][123456789][Info][cublasLtMatmulAlgoGetHeuristic] free text, then k=3",
        # SYNTHETIC: the hipBLASLt-style "[out]" key of older fixtures: not cuBLASLt's format (noted, kept)
        "[2026-01-01 00:00:01][cublasLt][5][Api][cublasLtMatmulDescCreate] matmulDesc[out]=0X7FFD00001000 computeType=COMPUTE_32F",
    ]
    out: list[str] = []
    extras = fixtures + odd
    for i in range(n_generated):
        out.append(next(generated))
        if i % 9 == 0:
            out.append(extras[(i // 9) % len(extras)])
    return out + extras


def write(tmp_path: Path, lines: list[str], name: str = "cublaslt.7.log") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def _one_text_storage(df: pd.DataFrame) -> pd.DataFrame:
    """Text columns in one storage: the fast path keeps pyarrow string views over the log's bytes
    (compact: a timestamp or pointer differs on every row), the per-line path shared Python
    objects (forensics.core.model); both are the contract's ``string`` dtype."""
    df = df.copy()
    for c in df.columns:
        if isinstance(df[c].dtype, pd.StringDtype):
            df[c] = df[c].astype(pd.StringDtype("python"))
    return df


def assert_same_log(fast: cublaslt.CublasLtLog, slow: cublaslt.CublasLtLog) -> None:
    for name in FRAMES:
        a, b = getattr(fast, name), getattr(slow, name)
        assert list(a.columns) == list(b.columns), name
        objects = [c for c in a.columns if a[c].dtype == object]
        a, b = _one_text_storage(a), _one_text_storage(b)
        pd.testing.assert_frame_equal(a.drop(columns=objects), b.drop(columns=objects), obj=name)
        for col in objects:
            assert list(a[col]) == list(b[col]), (name, col)
    assert fast.level_counts == slow.level_counts
    assert (fast.skipped_lines, fast.problems) == (slow.skipped_lines, slow.problems)


@pytest.mark.parametrize("chunk_bytes", [64 << 20, 4096, 1500])
def test_fast_path_equals_per_line_path_row_by_row(tmp_path, monkeypatch, chunk_bytes):
    p = write(tmp_path, mixed_log_lines())
    monkeypatch.setattr(cublaslt_fast, "FAST_CHUNK_BYTES", chunk_bytes)  # 1500: lines straddle most chunks
    fast = cublaslt_fast.fast_read(p, False)  # raises _Fallback if the vectorised path gave up
    slow = cublaslt.read_log_per_line(p, False)
    assert_same_log(fast, slow)
    assert len(fast.calls) > 340 and len(fast.heuristics) > 40 and fast.skipped_lines >= 1
    assert fast.calls.pointer_a.notna().all()
    row = fast.calls[fast.calls.pid == 77].iloc[0]
    assert row.pointer_a == "0x7f00" and row.m == 8 and row.extra["computeDesc.future"] == "0xdead"


def test_fast_path_equals_per_line_path_when_the_template_cache_resets(tmp_path, monkeypatch):
    """A bucket's rows are framed once per part; a template cache reset ends a part (the pieces'
    template ids index the dropped list), so the frames join several parts: still equal."""
    p = write(tmp_path, mixed_log_lines())
    monkeypatch.setattr(cublaslt_fast, "FAST_CHUNK_BYTES", 4096)
    monkeypatch.setattr(cublaslt_fast, "MAX_TEMPLATES", 5)
    framed = []
    part_frame = cublaslt_fast._part_frame
    monkeypatch.setattr(cublaslt_fast, "_part_frame", lambda b, pieces: framed.append(len(pieces)) or part_frame(b, pieces))
    fast = cublaslt_fast.fast_read(p, False)
    assert len(framed) > 6 and max(framed) > 1  # several parts per bucket, several chunks per part
    assert_same_log(fast, cublaslt.read_log_per_line(p, False))


def test_fast_path_rows_own_their_dicts(tmp_path):
    log = cublaslt_fast.fast_read(write(tmp_path, mixed_log_lines(60)), False)
    extra = log.calls.extra
    assert len({id(d) for d in extra}) == len(extra)
    before = extra[1].copy()
    extra[0]["workSpace"] = "changed"
    assert extra[1] == before


def test_read_log_uses_the_fast_path_and_falls_back(tmp_path, monkeypatch):
    p = write(tmp_path, mixed_log_lines(50))
    calls = []
    monkeypatch.setattr(cublaslt, "read_log_per_line", lambda *a: calls.append(a) or "slow")
    assert isinstance(cublaslt.read_log(p), cublaslt.CublasLtLog) and not calls
    crlf = tmp_path / "crlf.log"
    crlf.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))
    assert cublaslt.read_log(crlf) == "slow"  # CRLF: the per-line path reads it


def test_a_fallback_is_logged_with_its_reason(tmp_path, caplog):
    p = write(tmp_path, mixed_log_lines(50))
    with caplog.at_level("INFO", logger="parsers.cublaslt"):
        cublaslt.read_log(p)
    assert not caplog.records  # the vectorised path took it: nothing said
    crlf = tmp_path / "crlf.log"
    crlf.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))
    with caplog.at_level("INFO", logger="parsers.cublaslt"):
        log = cublaslt.read_log(crlf)
    assert len(log.calls) == len(cublaslt.read_log_per_line(crlf).calls)
    assert [r.getMessage() for r in caplog.records] == [
        f"{crlf}: the vectorised reader fell back to the per-line path: NUL or CR bytes"]


@pytest.mark.parametrize("damage", ["cut_tail", "unterminated", "bad_int", "nul", "utf8", "header", "legacy"])
def test_damage_gives_the_per_line_error(tmp_path, damage):
    lines = mixed_log_lines(80)
    n = 40  # 1-based line 41 gets the damage
    text = "\n".join(lines) + "\n"
    if damage == "cut_tail":
        text = text.rstrip("\n")[:-30]
        n = len(lines) - 1
    elif damage == "unterminated":
        lines[n] = "[cublasLt][7][Trace][cublasLtMatmul] A=0X1 Adesc=[type=R_32F rows=3"
    elif damage == "bad_int":
        lines[n] = "[cublasLt][7][Trace][cublasLtMatmul] A=0X1 Adesc=[type=R_32F rows=three cols=3 ld=3]"
    elif damage == "header":
        lines[n] = "[cublasLt][12x][Trace][cublasLtMatmul] A=0X0"
    elif damage == "legacy":
        lines[n] = "I! cuBLAS (v13.4) function cublasSgemm_v2() called:"
    if damage not in ("cut_tail",):
        text = "\n".join(lines) + "\n"
    data = text.encode()
    if damage == "nul":
        data = data.replace(lines[n].encode(), lines[n].encode()[:50] + b"\x00" + lines[n].encode()[50:], 1)
    if damage == "utf8":
        data = data.replace(lines[n].encode(), lines[n].encode() + b"\xff\xfe", 1)
    p = tmp_path / "damaged.log"
    p.write_bytes(data)
    with pytest.raises(BadInput) as fast_err:
        cublaslt.read_log(p)
    with pytest.raises(BadInput) as slow_err:
        cublaslt.read_log_per_line(p, False)
    assert str(fast_err.value) == str(slow_err.value)
    assert fast_err.value.line == n + 1 and "\n" not in str(fast_err.value)


def test_cut_tail_is_handled_without_the_per_line_path(tmp_path):
    p = tmp_path / "cut.log"
    p.write_bytes(("\n".join(mixed_log_lines(30)) + "\n").encode()[:-40])
    assert_same_log(cublaslt_fast.fast_read(p, True), cublaslt.read_log_per_line(p, True))  # tolerated: dropped, noted
    with pytest.raises(cublaslt_fast.Final) as fast:
        cublaslt_fast.fast_read(p, False)
    with pytest.raises(BadInput) as slow:
        cublaslt.read_log_per_line(p, False)
    assert str(fast.value.error) == str(slow.value) and "cut short" in str(slow.value)


def test_helper_thread_stops_when_parsing_gives_up(tmp_path, monkeypatch):
    lines = mixed_log_lines(200)
    lines[150] = lines[150].replace("stream=0X0", "stream=0X0 note=\x01", 1)  # the template step refuses \x01
    p = write(tmp_path, lines)
    monkeypatch.setattr(cublaslt_fast, "FAST_CHUNK_BYTES", 2048)
    with pytest.raises(cublaslt_fast.Fallback):
        cublaslt_fast.fast_read(p, False)
    assert not [t for t in threading.enumerate() if t.name == "cublaslt-locate"]
    assert_same_log(cublaslt.read_log(p), cublaslt.read_log_per_line(p, False))


# --- byte helpers in parsers._text ---------------------------------------------------------------

@pytest.mark.parametrize("chunk_bytes", [5, 16, 1 << 20])
def test_iter_byte_chunks_cover_the_file_with_line_numbers(tmp_path, chunk_bytes):
    text = b"a\nbb\n" + b"x" * 40 + b"\n\nlast\n"  # one line longer than small chunks
    p = tmp_path / "t.log"
    p.write_bytes(text)
    got, numbers = b"", []
    for first, buf, length, cut in iter_byte_chunks(p, "log", chunk_bytes, pad=8, buffers=3):
        assert not cut and len(buf) >= length + 8 and buf[length - 1:length] == b"\n"
        numbers.append(first)
        assert first == got.count(b"\n") + 1
        got += bytes(buf[:length])
    assert got == text and numbers[0] == 1
    p.write_bytes(text + b"cut")
    chunks = [(first, bytes(buf[:length]), cut) for first, buf, length, cut in iter_byte_chunks(p, "log", chunk_bytes)]
    assert b"".join(c[1] for c in chunks) == text + b"cut"
    assert [c[2] for c in chunks] == [False] * (len(chunks) - 1) + [True]
    first, body, _ = chunks[-1]
    assert first == text.count(b"\n") - body.count(b"\n") + 1


def test_iter_byte_chunks_refuses_empty_and_foreign(tmp_path):
    (tmp_path / "e.log").write_bytes(b" \n\n")
    with pytest.raises(BadInput, match="empty file"):
        list(iter_byte_chunks(tmp_path / "e.log", "log"))
    (tmp_path / "j.log").write_bytes(b'{"traceEvents": []}')
    with pytest.raises(BadInput, match="JSON"):
        list(iter_byte_chunks(tmp_path / "j.log", "log"))


def test_spans_array_slices_and_nulls():
    buf = b"hello world\nfoo\n"
    arr = spans_array(buf, np.array([0, 6, 12]), np.array([5, 11, 12]), np.array([True, True, False]))
    assert arr.to_pylist() == ["hello", "world", None]


def test_fast_path_frames_hold_line_numbers_and_codes(tmp_path, monkeypatch):
    """issue 33: a row keeps its line number and the text is read back from the file, exactly;
    repeated text columns are categoricals of strings, categories sorted across chunks; a
    template's dict without a pointer value is one object for its rows of a chunk."""
    p = write(tmp_path, mixed_log_lines())
    monkeypatch.setattr(cublaslt_fast, "FAST_CHUNK_BYTES", 4096)  # many chunks: categories united
    log = cublaslt_fast.fast_read(p, False)
    file_lines = p.read_text().splitlines()
    for frame in (log.calls, log.heuristics):
        assert "raw" not in frame.columns
        assert log.raw(frame) == [file_lines[n - 1] for n in frame.line]
    categorical = [c for c, t in cublaslt.CALL_COLUMNS.items() if t == cublaslt.CATEGORY]
    assert {"function", "layout", "a_type", "tile", "stages"} <= set(categorical)
    for col in categorical:
        assert isinstance(log.calls[col].dtype, pd.CategoricalDtype), col
        assert str(log.calls[col].cat.categories.dtype) == "string", col
    assert list(log.calls.function.cat.categories) == sorted(set(log.calls.function))
    assert log.calls.pointer_a.dtype == "string" and log.calls.timestamp.dtype == "string"
    monkeypatch.setattr(cublaslt_fast, "FAST_CHUNK_BYTES", 8 << 20)  # one chunk: a template's rows together
    params = cublaslt_fast.fast_read(p, False).heuristics.params
    assert params.map(id).nunique() < len(params)  # shared where a query holds no pointer value
    assert list(params) == list(cublaslt.read_log_per_line(p).heuristics.params)


def test_hex_run_counts_the_digits_the_pointer_regex_takes():
    """The pointer probe's digit count (8 bytes at a time, by arithmetic) against ``_POINTER`` on
    every run length up to the probe's width and past it, every byte value after the digits."""
    rng = random.Random(3)
    digits = "0123456789abcdefABCDEF"
    texts = [" =0X" + "".join(rng.choice(digits) for _ in range(n)) + chr(c) for n in range(1, 30) for c in range(1, 128)
             if chr(c) not in digits]
    body = bytearray("".join(texts).encode() + bytes(64))
    at = np.cumsum([0] + [len(t) for t in texts[:-1]]) + 4  # each first digit
    for width in (16, 24):
        run = cublaslt_fast._hex_run(body, at, width)
        want = [len(cublaslt_fast._POINTER.search(t)[1]) - 2 for t in texts]
        assert [r if r else -1 for r in run] == [w if w < width else -1 for w in want]


def test_span_views_give_the_bytes_and_codes_of_the_sliced_strings():
    """The grouping hashes views over the chunk (no copy): the same strings, and the same codes, as
    the ranges sliced into a string array, for ranges of 0 to 56 bytes (inline up to 12, prefix and
    offset after) cut at ASCII bytes of UTF-8 text."""
    from parsers._text import arrow_views_work  # noqa: PLC0415

    if not arrow_views_work():
        pytest.skip(f"pyarrow {cublaslt_fast.pa.__version__} builds no view arrays over our buffers: the reader slices instead")
    rng = np.random.default_rng(1)
    text = "".join(rng.choice(list("abcdefgh xyzé=[]"), 5000)).encode()
    body = bytearray(text + bytes(64))
    cuts = [c for c in sorted(rng.choice(len(text) + 1, 800).tolist()) if c == len(text) or text[c] < 128]
    starts, ends = np.array(cuts[:-1]), np.array(cuts[1:])
    assert {0, 12, 13} <= set((ends - starts).tolist()) and (ends - starts).max() > 40
    views = cublaslt_fast._span_views(body, starts, ends)
    views.validate(full=True)
    assert views.to_pylist() == spans_array(body, starts, ends).to_pylist()
    sliced = spans_array(body, starts, ends).dictionary_encode().indices.to_numpy()
    assert cublaslt_fast._span_codes(body, starts, ends).tolist() == sliced.tolist()


def test_the_benchmark_stage_profile_reads_what_the_reader_reads(tmp_path, monkeypatch):
    """bench_cublaslt.py --stages times the reader's own stages on one thread: it must read every
    row the reader does (a renamed or skipped stage fails here, not silently in a figure)."""
    from bench_cublaslt import stage_times

    p = write(tmp_path, [line for line in mixed_log_lines() if "[cublasLt]" in line])
    monkeypatch.setattr(cublaslt_fast, "FAST_CHUNK_BYTES", 4096)
    times, rows = stage_times(p)
    log = cublaslt_fast.fast_read(p, False)
    assert rows == {name: len(getattr(log, name)) for name in FRAMES} and rows["calls"] > 340
    assert list(times) == ["read", "locate", "group", "gather", "frame"] and sum(times.values()) > 0


CORPUS_LOGS = sorted((ROOT.parent / "shared" / "corpus" / "cublaslt").glob("*.log"))


@pytest.mark.skipif(not CORPUS_LOGS, reason=f"no cuBLASLt log under {ROOT.parent / 'shared' / 'corpus' / 'cublaslt'}")
@pytest.mark.parametrize("path", CORPUS_LOGS, ids=lambda p: p.name)
def test_real_corpus_logs_take_the_vectorised_path_with_the_per_line_frames(path):
    """The REAL logs of the shared corpus (levels 1 to 5, with and without timestamps, program output
    between the lines): the vectorised reader takes each (no Fallback) and gives the per-line frames."""
    assert_same_log(cublaslt_fast.fast_read(path, False), cublaslt.read_log_per_line(path, False))


def test_the_grouping_slices_where_pyarrow_builds_no_views(monkeypatch):
    """An older pyarrow (17) takes no data buffer for a view array: the grouping then slices the
    ranges into a string array and gives the same codes (the frames equal the per-line path's)."""
    from parsers import cublaslt_fast  # noqa: PLC0415

    rng = np.random.default_rng(2)
    text = "".join(rng.choice(list("abc =[]"), 3000)).encode()
    body = bytearray(text + bytes(64))
    cuts = np.sort(rng.choice(len(text), 400, replace=False))
    starts, ends = cuts[:-1:2], cuts[1::2]
    with_views = cublaslt_fast._span_codes(body, starts, ends)
    monkeypatch.setattr(cublaslt_fast, "arrow_views_work", lambda: False)
    assert list(cublaslt_fast._span_codes(body, starts, ends)) == list(with_views)
