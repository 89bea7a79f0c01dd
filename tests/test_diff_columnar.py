"""The differ's columnar fast path gives the walk's result exactly, whatever the traces hold.

Every case diffs two native traces twice, with the columnar prefix and without it, and asserts the
same JSON report (or the same bad-input line). Traces are SYNTHETIC (hand-built in the documented
native format, docs/trace-format.md), small, and read in tiny blocks and rounds so that block,
round and segment boundaries fall everywhere.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import forensics.tracediff.columnar as columnar
import forensics.tracediff.diff as diff_mod
from forensics.core.errors import BadInput
from forensics.tracediff import walk
from parsers._text import arrow_views_work

#: tests of the prefix's own mechanism: with pyarrow 17-18 it steps aside and the walk diffs (same reports)
needs_views = pytest.mark.skipif(not arrow_views_work(), reason="this pyarrow builds no binary views: the columnar prefix is off")

pytestmark = pytest.mark.slow  # integration lane (real programs, seconds each)

HEADER = {"type": "header", "schema": "forensics.optrace", "version": 1, "rank": 0, "world_size": 1,
          "argv": ["synthetic"], "ordered": {"mode": "auto", "cpu": "xxh3_64(row-major bytes)", "device": None}}
OPS = ["aten.mm.default", "aten.add.Tensor", "aten.empty.memory_format", "aten.relu.default", "aten.t.default"]


def _hex(x: int) -> str:
    return format(x & 0xFFFFFFFFFFFFFFFF, "016x")


def records(n: int = 300, per_step: int = 50, seed: int = 0) -> list[dict]:
    rnd = random.Random(seed)
    counts: dict[str, int] = {}
    out = []
    for i in range(n):
        op = OPS[rnd.randrange(len(OPS))]
        counts[op] = counts.get(op, 0) + 1
        rec = {"seq": i, "id": f"{op}:{counts[op]}", "op": op, "kind": "op", "step": i // per_step, "phase": "forward",
               "in": [{"s": [4, 8], "t": "float32", "n": 32, "h": _hex(i * 7919)},
                      {"s": None, "t": "args", "n": 1, "h": _hex(17)}],
               "out": [{"s": [4, 8], "t": "float32", "n": 32, "h": _hex(i * 104729 + 1)}]}
        if i % 3 == 0:
            rec["in"][0]["o"] = _hex(i * 31)
        if op == "aten.mm.default":
            rec["meta"] = {"gemm": {"layout": "NT", "acc": 0, "grad": 1, "m": 4, "n": 8, "k": 8}}
        out.append(rec)
    return out


def write(path: Path, recs: list, footer: dict | None = None, header: dict | None = None,
          raw_lines: dict[int, str] | None = None, cut: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(header or HEADER)]
    for i, r in enumerate(recs):
        lines.append((raw_lines or {}).get(i) or json.dumps(r, separators=(",", ":")))
    if footer is not False:
        lines.append(json.dumps(footer or {"type": "footer", "records": len(recs), "dropped": 0}))
    text = "\n".join(lines) + "\n"
    if cut:
        text = text[:-40]
    path.write_text(text)
    return path


def both(a: Path, b: Path, window: int = 16_384):
    """The report (or bad-input line) with and without the columnar prefix."""
    out = []
    for col in (False, True):
        orig = walk.walk_rank
        diff_mod.walk_rank = lambda *x, _c=col, **k: orig(*x, **{**k, "columnar": _c})
        try:
            out.append(json.dumps(diff_mod.diff_paths(a, b, window=window).to_json(), sort_keys=True, default=str))
        except BadInput as e:
            out.append(f"bad input: {e}")
        finally:
            diff_mod.walk_rank = orig
    return out


@pytest.fixture(autouse=True, params=["templates", "json"])
def tiny_blocks(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """Every case twice: run A's records checked once per template (the usual path), and every
    block read by Arrow's JSON reader (the path of a block with many templates)."""
    monkeypatch.setattr(columnar, "BLOCK_BYTES", 2048)
    monkeypatch.setattr(columnar, "ROUND_ROWS", 37)
    monkeypatch.setattr(columnar, "MIN_BYTES", 0)
    if request.param == "json":
        monkeypatch.setattr(columnar.scan.Templates, "columns", lambda self, *a, **k: None)


def _case(tmp_path: Path, name: str, mutate, window: int = 16_384, **write_b) -> list[str]:
    a_recs = records()
    b_recs = json.loads(json.dumps(a_recs))
    extra = mutate(a_recs, b_recs)
    extra = extra if isinstance(extra, dict) else {}
    a = write(tmp_path / name / "a" / "rank0" / "trace.jsonl", a_recs, **extra.get("a", {}))
    b = write(tmp_path / name / "b" / "rank0" / "trace.jsonl", b_recs, **{**write_b, **extra.get("b", {})})
    return both(a.parent.parent, b.parent.parent, window)


def _set(recs, i, side, key, value, entry=0):
    recs[i][side][entry][key] = value


CASES = {
    "identical": lambda a, b: None,
    "origin late": lambda a, b: _set(b, 250, "out", "h", "ffffffffffffffff"),
    "origin first": lambda a, b: _set(b, 0, "out", "h", "ffffffffffffffff"),
    "receiver": lambda a, b: (_set(b, 120, "in", "h", "ffffffffffffffff"), _set(b, 120, "out", "h", "1")),
    "inputs differ, outputs match": lambda a, b: _set(b, 90, "in", "h", "ffffffffffffffff"),
    "order-sensitive digest differs": lambda a, b: _set(b, 99, "in", "o", "0"),
    "gemm origin": lambda a, b: _set(b, next(i for i, r in enumerate(b) if r["op"] == "aten.mm.default" and i > 150),
                                     "out", "h", "ffffffffffffffff"),
    "weak evidence": lambda a, b: [(_set(x, i, "out", "ev", "sampled")) for x in (a, b) for i in range(10, 200, 7)],
    "ev full on one side": lambda a, b: [_set(b, i, "out", "ev", "full") for i in range(0, 300, 5)],
    "ordered only": lambda a, b: [(x[i]["out"][0].pop("h"), _set(x, i, "out", "o", _hex(i))) for x in (a, b)
                                  for i in range(0, 300, 4)],
    "artifact then its consumer": lambda a, b: (
        _set(b, next(i for i, r in enumerate(b) if r["op"] == "aten.empty.memory_format"), "out", "h", "0"),),
}


def _swap(b, i):
    b[i], b[i + 1] = b[i + 1], b[i]
    b[i]["seq"], b[i + 1]["seq"] = b[i + 1]["seq"], b[i]["seq"]


def _delete(b, i):
    del b[i]


def _insert(b, i):
    extra = json.loads(json.dumps(b[i]))
    extra["id"] = "aten.extra.default:1"
    extra["op"] = "aten.extra.default"
    b.insert(i, extra)
    for k, r in enumerate(b):
        r["seq"] = k


CASES.update({
    "neighbours swapped": lambda a, b: [_swap(b, i) for i in range(3, 290, 9)],
    "neighbours swapped, then origin": lambda a, b: ([_swap(b, i) for i in range(3, 290, 9)],
                                                     _set(b, 200, "out", "h", "0")),
    "record only in B": lambda a, b: _insert(b, 140),
    "record only in A": lambda a, b: _delete(b, 140),
    "leading step only in A": lambda a, b: [b.pop(0) for _ in range(50)],
    "duplicate identity in B": lambda a, b: b[60].update(id=b[59]["id"]),
    "null entry": lambda a, b: [x[i]["in"].append(None) for x in (a, b) for i in (5, 6, 7)],
    "empty and null lists": lambda a, b: [(a[i].update({"out": []}), b[i].update({"out": None})) for i in (8, 9)],
    "shape null vs empty": lambda a, b: (_set(a, 77, "out", "s", []), _set(a, 77, "out", "n", 1),
                                         _set(b, 77, "out", "s", None), _set(b, 77, "out", "n", 1)),
    "chunks": lambda a, b: [(_set(a, i, "out", "c", ["1", "2"]), _set(b, i, "out", "c", ["1", "3" if i == 180 else "2"]))
                            for i in range(100, 200, 10)],
    "numel differs, no shape": lambda a, b: [(_set(x, 70, "out", "s", None)) for x in (a, b)] + [_set(b, 70, "out", "n", 5)],
})

BAD = {
    "numel 1.5": {"raw": lambda b: (150, json.dumps(b[150]).replace('"n": 32', '"n": 1.5'))},
    "negative shape": {"mut": lambda a, b: _set(b, 150, "out", "s", [-4, -8])},
    "numel not the product": {"mut": lambda a, b: _set(b, 150, "out", "n", 33)},
    "digest not a string": {"raw": lambda b: (150, json.dumps(b[150]).replace('"h": "', '"h": 1, "x": "', 1))},
    "kind null": {"mut": lambda a, b: b[150].update(kind=None)},
    "unknown line type": {"mut": lambda a, b: b[150].update(type="weird")},
    "seq not increasing": {"mut": lambda a, b: b[150].update(seq=3)},
    "blank line": {"raw": lambda b: (150, "\n" + json.dumps(b[150]))},
    "not JSON": {"raw": lambda b: (150, "{not json")},
    "bad evidence": {"mut": lambda a, b: _set(b, 150, "out", "ev", "great")},
    "id empty": {"mut": lambda a, b: b[150].update(id="")},
    "meta not an object": {"mut": lambda a, b: b[150].update(meta=[1])},
    # the same damaged record in both runs: its text after the seq is equal, the checks must see it
    "numel 1.5 in both": {"mut": lambda a, b: [_set(x, 150, "out", "n", 1.5) for x in (a, b)]},
    "'in' null in both": {"mut": lambda a, b: [x[150].update({"in": None}) for x in (a, b)]},
    "'out' null in both": {"mut": lambda a, b: [x[150].update({"out": None}) for x in (a, b)]},
    "dtype missing in both": {"mut": lambda a, b: [x[150]["out"][0].pop("t") for x in (a, b)]},
    "step negative in both": {"mut": lambda a, b: [x[150].update(step=-1) for x in (a, b)]},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_report_with_and_without_the_columnar_prefix(tmp_path: Path, name: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[int] = []
    orig = walk.RankWalker.fast_forward
    monkeypatch.setattr(walk.RankWalker, "fast_forward", lambda self: used.append(orig(self)) or used[-1])
    plain, fast = _case(tmp_path, name.replace(" ", "_").replace(",", ""), CASES[name])
    assert fast == plain
    if name not in ("origin first", "leading step only in A", "ev full on one side") and arrow_views_work():
        assert used and used[0] > 0  # the columnar prefix did compare records (pyarrow 17-18: the walk did)


@pytest.mark.parametrize("name", sorted(BAD))
def test_same_bad_input_or_result_on_damaged_records(tmp_path: Path, name: str) -> None:
    spec = BAD[name]

    def mutate(a, b):
        if "mut" in spec:
            spec["mut"](a, b)
            return None
        i, line = spec["raw"](b)
        return {"b": {"raw_lines": {i: line}}}

    plain, fast = _case(tmp_path, name.replace(" ", "_"), mutate)
    assert fast == plain


@pytest.mark.parametrize("how", ["cut", "no footer", "interrupted"])
def test_same_report_on_partial_traces(tmp_path: Path, how: str) -> None:
    kw = {"cut": {"footer": False, "cut": True}, "no footer": {"footer": False},
          "interrupted": {"footer": {"type": "footer", "records": 300, "dropped": 0, "stopped": "signal 15 (SIGTERM)"}}}
    plain, fast = _case(tmp_path, how.replace(" ", "_"), lambda a, b: [b.pop() for _ in range(40)], **kw[how])
    assert fast == plain


def test_same_report_when_reordering_exceeds_the_window(tmp_path: Path) -> None:
    def far(a, b):
        b[10], b[280] = b[280], b[10]
        b[10]["seq"], b[280]["seq"] = 10, 280
    plain, fast = _case(tmp_path, "far", far, window=256)
    assert fast == plain and '"CONTROL_FLOW"' in plain


@needs_views
def test_the_prefix_is_used(tmp_path: Path) -> None:
    """Not vacuous: on a long matching prefix the columnar path compares it (and the walk the rest)."""
    a_recs = records()
    b_recs = json.loads(json.dumps(a_recs))
    _set(b_recs, 250, "out", "h", "0")
    a = write(tmp_path / "a.jsonl", a_recs)
    b = write(tmp_path / "b.jsonl", b_recs)
    pre = columnar.compare_prefix(a, b)
    assert pre.pairs == 250 and pre.a.line == 252 and pre.last_b_seq == 249


@pytest.mark.parametrize("name,place,replace_with", [
    ("invalid UTF-8 in both", "PLACEHOLDER", b"\xff\xfe"),
    ("nesting orjson refuses, in both", '"PLACEHOLDER"', b"[" * 1100 + b"]" * 1100),
    ("nesting orjson reads, in both", '"PLACEHOLDER"', b"[" * 900 + b"]" * 900),
    ("escaped identity in both", "PLACEHOLDER", b'a\\"b'),
])
def test_same_result_on_lines_only_the_walk_reads(tmp_path: Path, name: str, place: str, replace_with: bytes) -> None:
    """Lines the columnar reader may accept but orjson (the walk's reader) refuses, or that are not
    in our tracer's form: the result is the walk's (bad input at the same file:line, or the same report)."""
    a_recs = records()
    if name.startswith("escaped"):
        a_recs[150]["id"] = "PLACEHOLDER"
    else:
        a_recs[150]["meta"] = {"z": "PLACEHOLDER"}
    outs = []
    for side in ("a", "b"):
        path = write(tmp_path / side / "rank0" / "trace.jsonl", a_recs)
        path.write_bytes(path.read_bytes().replace(place.encode(), replace_with))
        outs.append(path.parent.parent)
    plain, fast = both(*outs)
    assert fast == plain


def test_same_result_on_another_key_order(tmp_path: Path) -> None:
    recs = [{k: r[k] for k in reversed(list(r))} for r in records()]  # a producer writing keys in another order
    a = write(tmp_path / "a" / "rank0" / "trace.jsonl", recs)
    recs[200]["out"][0]["h"] = "0"
    b = write(tmp_path / "b" / "rank0" / "trace.jsonl", recs)
    plain, fast = both(a.parent.parent, b.parent.parent)
    assert fast == plain and "ORIGIN" in plain


@needs_views
def test_a_real_trace_against_itself_is_compared_by_template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              tiny_blocks: None) -> None:
    """A real program traced by `forensics trace` (examples/cpu-divergence/train.py, 12 steps: GEMMs
    with meta.gemm, backward ops with meta.fwd, a step per 40 records), diffed against a copy of
    itself: the columnar path compares every record, by template (not Arrow's JSON reader) once
    the block holds lines seen before, and the report is the walk's."""
    import shutil
    import sys

    from forensics.commands.trace import trace_command

    script = Path(__file__).resolve().parent.parent / "examples" / "cpu-divergence" / "train.py"
    code, _ = trace_command([sys.executable, str(script), "--threads", "1", "--steps", "12"], tmp_path / "a")
    assert code == 0
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    monkeypatch.setattr(columnar, "BLOCK_BYTES", 32 << 10)
    monkeypatch.setattr(columnar, "ROUND_ROWS", 1000)
    plain, fast = both(tmp_path / "a", tmp_path / "b")
    assert fast == plain
    files = [tmp_path / side / "rank0" / "trace.jsonl" for side in "ab"]
    records = sum(1 for _ in open(files[0], "rb")) - 2
    pre = columnar.compare_prefix(*files)
    assert pre.pairs == records > 400 and len(pre.steps) == 12
    if columnar.scan.Templates.columns.__name__ == "columns":  # (the templates run of this test)
        assert pre.json_blocks <= 2 < pre.blocks and pre.templates < records // 3


def test_a_pyarrow_without_binary_views_is_walked_with_the_same_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pyarrow 17 and 18 build no binary view over a buffer of ours: the columnar prefix steps aside
    (Unsupported) and the walk diffs the files, with the report the prefix gives."""
    name = "artifact then its consumer"
    _, with_prefix = _case(tmp_path / "views", name.replace(" ", "_"), CASES[name])
    monkeypatch.setattr(columnar, "arrow_views_work", lambda: False)
    with pytest.raises(columnar.Unsupported, match="binary views"):
        columnar.compare_prefix(tmp_path / "nope-a", tmp_path / "nope-b")
    plain, fast = _case(tmp_path / "noviews", name.replace(" ", "_"), CASES[name])
    assert fast == plain
    assert fast.replace(str(tmp_path / "noviews"), "T") == with_prefix.replace(str(tmp_path / "views"), "T")
