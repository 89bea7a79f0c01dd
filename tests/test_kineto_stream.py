"""Issue 44: the Kineto / Chrome-trace reader streams (parsers/_json_stream.py under
forensics.runtime.inputs.open_stream and RecordBudget): it holds the rows it keeps, never the text,
and gives what the whole-file reader it replaced gave (tests/_kineto_whole_read.py, kept verbatim):
the same frames (dtypes, values, attrs), meta, vendor, and the same BadInput line (message, line
number) on every real trace in the corpus and tests/fixtures and on damaged copies of them.
"""
from __future__ import annotations

import gzip
import io
import json
import tracemalloc
from pathlib import Path

import pandas as pd
import pytest

from forensics.core.errors import BadInput
from forensics.runtime import inputs
from forensics.runtime.inputs import json_error
from parsers import _json_stream, kineto
from tests import _kineto_whole_read as whole
from tests.conftest import CORPUS, REPO

FRAMES = ("kernels", "runtime", "cpu_ops", "annotations", "flows", "memcpy", "memset")
REAL = sorted([*(CORPUS / "kineto").glob("*.json.gz"), *(REPO / "tests" / "fixtures").glob("**/kineto*.json.gz"),
               *(REPO / "tests" / "fixtures" / "cpu").glob("**/torchprof*.json.gz")])
SEED = REPO / "tests" / "fixtures" / "amd" / "kineto_rocm6.2_mi250_minitoy_train.json.gz"  # real (PROVENANCE.md)


def _outcome(read, path):
    try:
        return read(path)
    except BadInput as e:
        return ("BadInput", e.message, e.line)


def assert_same(path) -> None:
    """The streamed reader's answer for ``path``, read with the whole-file reader's integer typing
    (``kineto.LEGACY_TYPING``), is the whole-file reader's."""
    old = _outcome(whole.read_trace, path)
    saved, kineto.LEGACY_TYPING = kineto.LEGACY_TYPING, True
    try:
        new = _outcome(kineto.read_trace, path)
    finally:
        kineto.LEGACY_TYPING = saved
    if isinstance(old, tuple) or isinstance(new, tuple):
        assert new == old
        return
    for name in FRAMES:
        pd.testing.assert_frame_equal(getattr(new, name), getattr(old, name), check_exact=True, obj=name)
        assert getattr(new, name).attrs == getattr(old, name).attrs, name
    assert json.dumps(new.meta, default=repr) == json.dumps(old.meta, default=repr)
    assert (new.vendor, new.vendor_seen) == (old.vendor, old.vendor_seen)


@pytest.fixture
def small_window(monkeypatch):
    """Refill the stream every 997 bytes: items, numbers, strings and UTF-8 cut at every kind of place."""
    monkeypatch.setattr(_json_stream, "CHUNK", 997)


# --------------------------------------------------------------------------- the same answers
def test_the_real_traces_are_there():
    assert len(REAL) >= 16 if (CORPUS / "kineto").is_dir() else len(REAL) >= 12


@pytest.mark.parametrize("src", REAL, ids=lambda p: p.name)
def test_every_real_trace_reads_as_the_whole_file_reader_read_it(src, small_window, tmp_path, monkeypatch):
    if src.stat().st_size > 200 << 10:  # the 2021 ResNet trace (30 MB of text): a 64 KiB window
        monkeypatch.setattr(_json_stream, "CHUNK", 64 << 10)
    assert_same(src)
    if src.stat().st_size > 200 << 10:
        return  # its plain copy adds 5 s and nothing the gzip read does not test
    plain = tmp_path / src.name.removesuffix(".gz")
    plain.write_bytes(gzip.decompress(src.read_bytes()))
    assert_same(plain)


@pytest.mark.parametrize("src", [p for p in REAL if p.stat().st_size < 200 << 10], ids=lambda p: p.name)
def test_exact_typing_only_adds_the_values_the_old_typing_wiped(src):
    """Every integer the whole-file reader kept is kept; where it emptied a whole column (a value
    missing in some row), the values are now there, each in its own row."""
    old, new = whole.read_trace(src), kineto.read_trace(src)
    for name in FRAMES:
        a, b = getattr(old, name), getattr(new, name)
        assert list(a.columns) == list(b.columns) and len(a) == len(b), name
        for c in a.columns:
            if str(a[c].dtype) != "Int64":
                pd.testing.assert_series_equal(b[c], a[c], check_exact=True, obj=f"{name}.{c}")
                continue
            kept = a[c].notna()
            assert (b[c][kept] == a[c][kept]).all(), f"{name}.{c}"
            assert b[c].notna().sum() >= kept.sum(), f"{name}.{c}"


def test_sequence_numbers_of_a_real_trace_are_read():
    """The real ROCm trace's ops carry ``Sequence number`` on some events only: the old typing
    emptied the whole column (every real CPU trace); each op now has its own."""
    events = _doc()["traceEvents"]
    want = [e["args"].get("Sequence number") for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    assert any(v is not None for v in want) and any(v is None for v in want)
    got = kineto.read_trace(SEED).cpu_ops["sequence_number"]
    assert [None if pd.isna(v) else int(v) for v in got] == want
    assert whole.read_trace(SEED).cpu_ops["sequence_number"].isna().all()


def _doc() -> dict:
    return json.loads(gzip.decompress(SEED.read_bytes()))


def _damaged() -> dict[str, bytes]:
    """SYNTHETIC damage to a real trace, one case per kind of answer."""
    text = json.dumps(_doc(), indent=1)
    d = _doc()
    events = d["traceEvents"]
    k = next(i for i, e in enumerate(events) if e.get("cat") == "kernel")
    cases = {f"cut{f}": text[: int(len(text) * f)].encode() for f in (0.001, 0.1, 0.5, 0.93, 0.9999)}
    cases["flip"] = text[:5000].encode() + b"}" + text[5001:].encode()
    cases["trailing"] = (text + "\n{}\n").encode()
    cases["bom"] = "\ufeff".encode() + text.encode()
    cases["bad_utf8_in_a_name"] = text.replace('"name": "', '"name": "\xff', 3).encode("latin-1", "replace")
    cases["nan_in_args_and_meta"] = text.replace('"args": {', '"args": {"occ": NaN, ', 5).replace('{', '{"x": -Infinity, ', 1).encode()
    cases["empty"], cases["blank"] = b"", b" \n\t " * 1000
    cases["scalar"], cases["no_trace"] = b"42", b'{"hello": 1}'
    for name, mutate in {
        "ts_text": lambda ev: ev[k].__setitem__("ts", "12"),
        "grid_negative": lambda ev: ev[k]["args"].__setitem__("grid", [-1, 1, 1]),
        "not_an_object": lambda ev: ev.insert(40, [1, 2]),
        "no_ts": lambda ev: ev[k].pop("ts"),
        "field_error_after_args_error": lambda ev: (ev[k]["args"].__setitem__("stream", 1.5),
                                                    ev[-1].__setitem__("pid", [1])),
        "args_error_after_no_ts": lambda ev: (ev[k].pop("ts"), ev[-1].__setitem__("cat", "kernel"),
                                              ev[-1].__setitem__("args", {"correlation": "x"})),
    }.items():
        doc = _doc()
        mutate(doc["traceEvents"])
        cases[name] = json.dumps(doc).encode()
    dup = dict(d, traceEvents=events[:50])
    cases["meta_after_events_and_a_second_events_list"] = (
        json.dumps(dup)[:-1] + ', "late": [1, 2.5], "traceEvents": ' + json.dumps(events) + ', "z": null}').encode()
    cases["list_form"] = json.dumps(events).encode()
    cases["deep"] = b'{"traceEvents": [' + b"[" * 100000 + b"]" * 100000 + b"]}"
    return cases


@pytest.mark.parametrize("case", sorted(_damaged()))
def test_a_damaged_real_trace_gets_the_same_answer(case, small_window, tmp_path):
    p = tmp_path / f"{case}.json"
    p.write_bytes(_damaged()[case])
    assert_same(p)
    g = tmp_path / f"{case}.json.gz"
    g.write_bytes(gzip.compress(p.read_bytes()))
    assert_same(g)


def _loads(text: str):
    """What ``json.loads`` makes of ``text``, as the stream reports it."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        return "error", json_error(e, text), e.lineno
    except RecursionError:
        return ("deep",)
    if isinstance(doc, list):
        return "ok", "list", doc, {}
    if isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list):
        return "ok", "object", doc["traceEvents"], {k: v for k, v in doc.items() if k != "traceEvents"}
    return "ok", None, None, None


def _streamed(data: bytes, chunk: int):
    s = _json_stream.JsonStream(io.BytesIO(data), "p", chunk=chunk)
    items: list = []
    try:
        for i, e in s.items():
            if i is None:
                items = []
                continue
            assert i == len(items)
            items.append(e)
    except BadInput as e:
        return "error", e.message, e.line
    except RecursionError:
        return ("deep",)
    return ("ok", s.form, items, s.meta) if s.form else ("ok", None, None, None)


DOCS = ['{"traceEvents": [{"a": 1}, {"b": [1,2,{"c": "x\\u00e9\\n"}]}], "z": 1.5, "w": -12e-3}', "[1, 2.75, 3]",
        '{"a": {"b": 1}, "traceEvents": [], "c": [1,2]}', '{"traceEvents": [1, 2], "traceEvents": [3]}',
        '{"traceEvents": [1, 2], "traceEvents": {}}', ' \n {"x": NaN,\n "traceEvents": [{"ts": 1.7e3, "n": -Infinity}]}\n\n',
        '"str"', "5", "{}", "[]", '{"traceEvents": [\n{"ph": "X",, "cat": "kernel"}\n]}\n', '{"é€😀": "ÿ€😀"}',
        '{"a": 123456789012345678901234567890, "traceEvents": [0.1, 1e400, 123456789.123456789, true, false, null]}']


@pytest.mark.parametrize("doc", DOCS)
def test_the_stream_reads_what_json_loads_reads_cut_anywhere(doc):
    """Each document, cut, extended, with a byte dropped or a newline put in at every offset, read
    through windows of 1 to 64 bytes: the same items and members, or the same error, line and
    wording (truncated / trailing data / malformed) as ``json.loads`` of the whole text."""
    for cut in range(len(doc) + 1):
        for text in (doc[:cut], doc[:cut] + " x", doc[:cut] + "garbage" + doc[cut:], doc[:cut] + doc[cut + 1:],
                     doc[:cut] + "\n" + doc[cut:]):
            data = text.encode("utf-8", "surrogatepass")
            want = _loads(data.decode("utf-8", "replace"))
            for chunk in (1, 2, 3, 7, 64):
                assert _streamed(data, chunk) == want, (text, chunk)


def test_utf8_cut_between_chunks_reads_as_one_decode():
    data = '{"traceEvents": [{"name": "é€😀ÿ"}], "m": "😀"}'.encode() + b'\n'
    bad = data.replace("€".encode(), b"\xe2\x82")  # a cut sequence: replaced, as bytes.decode("utf-8", "replace")
    for d in (data, bad):
        for chunk in range(1, 9):
            assert _streamed(d, chunk) == _loads(d.decode("utf-8", "replace"))


def test_a_ts_with_more_digits_than_a_float_holds(tmp_path):
    """Read as ``json.loads`` reads it (the nearest double), then that double's shortest repr to
    ns, as before the stream: 1735632360000000.123 µs is the double 1735632360000000.0 (doubles
    are 0.25 apart there), so 1735632360000000000 ns, not ...000123; a ts whose digits a double
    holds (2413669097444.592 µs) is exact: 2413669097444592 ns."""
    p = tmp_path / "t.json"
    ev = '{{"ph": "X", "cat": "kernel", "name": "k", "pid": 1, "tid": 1, "ts": {}, "dur": 1.5, "args": {{}}}}'
    p.write_text('{"traceEvents": [' + ev.format("1735632360000000.123") + ", " + ev.format("2413669097444.592") + "]}")
    got = kineto.read_trace(p).kernels["start_ns"].tolist()
    assert got == [1735632360000000000, 2413669097444592]
    assert got == whole.read_trace(p).kernels["start_ns"].tolist()


# --------------------------------------------------------------------------- the ceilings and the memory
def _padded(path: Path, pad: int) -> tuple[Path, int]:
    """SYNTHETIC: the real seed with ``pad`` python_function events (a kind the reader drops)
    before its own; (path, rows the reader keeps)."""
    doc = _doc()
    fn = {"ph": "X", "cat": "python_function", "name": "torch/nn/modules/module.py(1736): _call_impl" + "x" * 200,
          "pid": 1, "tid": 1, "ts": 1.5, "dur": 2.25, "args": {"Python parent id": 7, "Python id": 8, "Ev Idx": 9}}
    doc["traceEvents"] = [fn] * pad + doc["traceEvents"]
    path.write_text(json.dumps(doc))
    t = whole.read_trace(SEED)
    return path, sum(len(getattr(t, f)) for f in FRAMES)


def test_a_trace_past_the_whole_read_ceiling_is_read_when_its_rows_fit(tmp_path, monkeypatch):
    """The whole-file reader refused a trace past the whole-read ceiling (1 GiB by default; 1 MiB
    here) whatever it held; the stream reads it, and the ceiling that bounds its memory is on the
    rows it keeps (forensics --max-records). On main the first read is refused."""
    p, kept = _padded(tmp_path / "padded.json", 12000)
    assert p.stat().st_size > 3 << 20
    monkeypatch.setattr(inputs, "DEFAULT_MAX_INPUT_BYTES", 1 << 20)
    monkeypatch.delenv(inputs.MAX_INPUT_ENV, raising=False)
    with pytest.raises(BadInput, match="ceiling on an input read whole"):
        whole.read_trace(p)
    assert len(kineto.read_trace(p).kernels) == 14
    monkeypatch.setenv(inputs.MAX_RECORDS_ENV, str(kept))
    assert len(kineto.read_trace(p).kernels) == 14
    monkeypatch.setenv(inputs.MAX_RECORDS_ENV, str(kept - 1))
    with pytest.raises(BadInput) as e:
        kineto.read_trace(p)
    assert f"more than {kept - 1:,} trace events kept" in str(e.value) and "--max-records" in str(e.value)
    assert "\n" not in str(e.value)


def test_an_explicit_byte_ceiling_still_bounds_the_stream(tmp_path, monkeypatch):
    p, _ = _padded(tmp_path / "padded.json.gz", 0)
    p.write_bytes(gzip.compress(p.read_bytes()))
    monkeypatch.setenv(inputs.MAX_INPUT_ENV, "16K")
    with pytest.raises(BadInput) as e:
        kineto.read_trace(p)
    assert "decompresses to more than 16,384 bytes" in str(e.value) and "--max-input-bytes" in str(e.value)


def test_memory_follows_the_rows_kept_not_the_text(tmp_path, monkeypatch):
    """A trace padded to ~10 MB with events the reader drops: the read's peak Python allocation
    (tracemalloc) stays a fraction of the text; the whole-file reader held the text and every
    event as a dict (several times the text). On main this fails."""
    monkeypatch.setattr(_json_stream, "CHUNK", 256 << 10)
    p, _ = _padded(tmp_path / "padded.json", 30000)
    size = p.stat().st_size
    assert size > 9 << 20
    tracemalloc.start()
    try:
        t = kineto.read_trace(p)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(t.kernels) == 14
    assert peak < size / 2, (peak, size)  # on main: 4.2 x the text (50 MB for 12 MB); here ~1/3


def test_missing_file_and_directory_get_the_same_line(tmp_path):
    assert_same(tmp_path / "absent.json")
    (tmp_path / "dir.json").mkdir()
    assert_same(tmp_path / "dir.json")
