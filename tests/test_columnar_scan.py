"""The columnar path's block scan (forensics/tracediff/columnar_scan.py) against what it replaces.

Lines are SYNTHETIC, in the native trace format (docs/trace-format.md) and damaged on purpose: each
head read with numpy must be what the regular expression the reader used before reads; a
template (the line after its identity, digests blanked) must read as the line itself does under
the walk's reader, and a template the walk would refuse must be invalid.
"""
from __future__ import annotations

import json
import random
import re

import numpy as np
import orjson
import pytest

from forensics.tracediff import columnar_scan as scan
from parsers._text import arrow_views_work

HEAD = re.compile(rb'^\{"seq":(0|[1-9][0-9]{0,17}),"id":"([^"\\\x00-\x1f]+)",')
REC = {"op": "aten.mm.default", "kind": "op", "step": 3, "phase": "forward",
       "in": [{"s": [4, 8], "t": "float32", "n": 32, "h": "0123456789abcdef"},
              {"s": None, "t": "args", "n": 1, "h": "00000000deadbeef"}],
       "out": [{"s": [4, 8], "t": "float32", "n": 32, "o": "fedcba9876543210"}]}


def line(seq: object = 7, ident: str = "aten.mm.default:3", rec: dict | None = None) -> bytes:
    body = json.dumps(rec or REC, separators=(",", ":"))[1:]
    return b'{"seq":' + str(seq).encode() + b',"id":"' + ident.encode() + b'",' + body.encode()


def block(lines: list[bytes]) -> tuple[bytearray, int, np.ndarray, np.ndarray]:
    text = b"\n".join(lines) + b"\n"
    data = bytearray(text) + bytearray(scan.PAD)
    buf = np.frombuffer(data, np.uint8)
    ends = np.flatnonzero(buf[:len(text)] == 10)
    return data, len(text), np.concatenate(([0], ends[:-1] + 1)), ends


def read_heads(lines: list[bytes]) -> list[tuple[int, bytes] | None]:
    data, cut, begins, ends = block(lines)
    h = scan.heads(data, begins, ends)
    ok = h.ok & scan.plain(scan.specials_of(data, cut, ends), h.id_start, h.id_end)
    return [(int(h.seq[i]), bytes(data[h.id_start[i]:h.id_end[i]])) if ok[i] else None for i in range(len(lines))]


def test_heads_read_what_the_regular_expression_reads() -> None:
    rnd = random.Random(3)
    lines = [line(), line(0), line(10**17 + 5), line("0" + "1"), line(10**18), line("-1"), line('"7"'),
             line(ident=""), line(ident='a\\"b'), line(ident="a\\\\b"), line(ident="x" * 31), line(ident="x" * 32),
             line(ident="y" * 95), line(ident="z" * 96), line(ident="w" * 300), b'{"seq":1}', b'{"seq":1,"id":"x"}',
             b'{"seq":1,"id":"x",', b'{"type":"footer","records":3}', b'{"seq": 1,"id":"x","op":"a"}',
             b'{"seq":12,"ids":"x","op":"a"}', b'{"seq":3,"id":"\xc3\xa9t\xc3\xa9",}', line(ident="a\x01b"), b"x"]
    for _ in range(300):
        raw = bytearray(line(rnd.randrange(10**rnd.randrange(1, 19)), "op:" + str(rnd.randrange(10**6))))
        for _ in range(rnd.randrange(3)):  # a byte of the head changed
            raw[rnd.randrange(min(len(raw), 40))] = rnd.choice(b'0123456789",:{}ids\\ x')
        lines.append(bytes(raw))
    got = read_heads(lines)
    want = [(int(m.group(1)), m.group(2)) if (m := HEAD.match(x)) else None for x in lines]
    assert got == want
    assert sum(w is not None for w in want) > 150  # both kinds, many of each


@pytest.mark.skipif(not arrow_views_work(), reason="this pyarrow builds no binary views (the columnar prefix is off: the walk diffs)")
def test_binary_gives_each_range_back() -> None:
    data, cut, begins, ends = block([b"ab", b"a line longer than twelve bytes", b"", b"c" * 13])
    buf = np.frombuffer(data, np.uint8)
    valid = np.array([True, True, False, True])
    col = scan.binary(data, buf, begins, ends - begins, valid)
    assert col.to_pylist() == [b"ab", b"a line longer than twelve bytes", None, b"c" * 13]


def template_of(raw: bytes) -> bytes:
    data, cut, begins, ends = block([raw])
    tpl = np.frombuffer(data, np.uint8).copy()
    scan.blank(tpl, data, cut, begins)
    h = scan.heads(data, begins, ends)
    assert h.ok[0]
    return tpl[h.id_end[0] + 2:ends[0]].tobytes()


def test_a_template_reads_as_its_line_but_for_the_blanked_strings() -> None:
    rec = json.loads(json.dumps(REC))
    rec["meta"] = {"node": "MmBackward0", "fwd": "aten.mm.default:12",
                   "gemm": {"layout": "NT", "o": "0123456789abcdef"}}
    rec["out"][0]["c"] = ["0123456789abcdef", "0123456789abcdee"]
    raw = line(rec=rec)
    tpl = template_of(raw)
    assert b"0123456789abcdef" not in tpl.replace(b'"c":["0123456789abcdef"', b"")  # h, o blanked (c is not)
    assert b"aten.mm.default:12" not in tpl and b"MmBackward0" in tpl
    other = json.loads(json.dumps(rec))
    other["in"][0]["h"], other["out"][0]["o"] = "ffffffffffffffff", "0000000000000000"
    other["meta"]["fwd"] = "aten.mm.default:99"
    assert template_of(line(5, "aten.mm.default:4", other)) == tpl  # the same template
    a, t = orjson.loads(raw), orjson.loads(b'{"seq":0,"id":"x",' + tpl)

    def shape(x: object) -> object:  # every string the same: what the checks can see of blanked values
        if isinstance(x, dict):  # (seq, id and step are read from the line itself)
            return {k: shape(v) for k, v in x.items() if k not in ("seq", "id", "step")}
        if isinstance(x, list):
            return [shape(v) for v in x]
        return "s" if isinstance(x, str) else x
    assert shape(a) == shape(t) and t["step"] == 1


def test_the_step_is_blanked_and_read_from_the_line() -> None:
    lines = [line(rec={**REC, "step": s}) for s in (0, 7, 123456, 999)] + [
        line(rec={**REC, "step": None}), line().replace(b'"step":3', b'"step":03'),
        line().replace(b'"step":3', b'"step":3.5'), line()[:-1] + b',"meta":{"step":4}}']
    data, cut, begins, ends = block(lines)
    tpl = np.frombuffer(data, np.uint8).copy()
    located, steps = scan.blank(tpl, data, cut, begins)
    assert located.tolist() == [True] * 4 + [False, False, False, False]
    assert steps[:4].tolist() == [0, 7, 123456, 999] and steps[-1] == -1  # two steps in the last line
    t = scan.Templates(True, None)
    h = scan.heads(data, begins, ends)
    cols = t.columns(data, cut, begins, h.ok, h.id_end, ends, 100)
    assert cols["step"].to_pylist()[:6] == [0, 7, 123456, 999, None, None]
    assert cols["valid"].tolist() == [True] * 5 + [False] * 3  # 03 and 3.5: not JSON / not an integer; two steps
    assert t.parsed == 7  # 0 and 7 share a template (one digit), 123456 and 999 do not
    nested = line(rec={k: v for k, v in REC.items() if k != "step"})[:-1] + b',"meta":{"step":4}}'
    data, cut, begins, ends = block([nested])
    h = scan.heads(data, begins, ends)
    cols = scan.Templates(True, None).columns(data, cut, begins, h.ok, h.id_end, ends, 100)
    assert cols["valid"].tolist() == [False]  # the one step blanked was not the record's (it has none)


@pytest.mark.parametrize("value", [b'"0123456789abcd\\"', b'"01234567\\u00e9bcde"', b'"0123456789abc"de"',
                                   b'"0123456789\x01bcdef"'])
def test_a_string_that_is_not_plain_is_not_blanked(value: bytes) -> None:
    raw = line().replace(b'"0123456789abcdef"', value)
    tpl = template_of(raw)
    assert value in tpl


def info(raw: bytes) -> tuple:
    return scan.template_info(template_of(raw), True, re.compile("empty").search)


def test_template_info_is_the_walks_reading() -> None:
    assert info(line()) == (True, 1, False, False, False, True)  # (the step blanked: a run of ones)
    weak = json.loads(json.dumps(REC))
    weak["out"][0]["ev"] = "sampled"
    assert info(line(rec=weak))[2] is True  # unproven output
    unordered = json.loads(json.dumps(REC))
    unordered["out"][0]["h"] = unordered["out"][0].pop("o")
    assert scan.template_info(template_of(line(rec=REC)), False, None)[2] is True  # 'o' not used: no digest
    assert scan.template_info(template_of(line(rec=unordered)), False, None)[2] is False
    gemm = {**REC, "op": "aten.empty.memory_format", "meta": {"gemm": {"layout": "NT"}}}
    assert info(line(rec=gemm))[3:5] == (True, True)
    bad = [
        {**REC, "in": None},  # the walk: 'in' must be a list
        {**REC, "kind": None},
        {**REC, "step": -1},
        {**REC, "meta": [1]},
        {**REC, "type": "footer"},
        {**REC, "out": [{"s": [4, 8], "t": "float32", "n": 33, "h": "0123456789abcdef"}]},
        {**REC, "out": [{"s": [4, 8], "t": "float32", "n": 32, "h": 1}]},
        {**REC, "out": [{"s": [4, 8], "t": "float32", "n": 32, "ev": "great"}]},
        {**REC, "out": [{"s": [2, 2], "t": "float32", "n": 4, "o": "0123456789abcdef", "ol": [0, 0]}]},
        {k: v for k, v in REC.items() if k != "op"},
    ]
    for rec in bad:
        assert info(line(rec=rec))[0] is False, rec
    assert info(line()[:-1] + b',"seq":9}')[0] is False  # a later seq: the walk reads that one
    assert info(line()[:-1] + b',"id":"aten.mm.default:3"}')[0] is False  # a later id, even the same
    assert info(line()[:-1] + b',"meta":{"id":"x"}}')[0] is True  # a nested id key is no duplicate
    assert info(line()[:-1] + b',"x":[' + b"[" * 1100 + b"]" * 1100 + b"]}")[0] is False  # orjson's depth limit
    assert info(line()[:-1] + b',"x":NaN}')[0] is False
