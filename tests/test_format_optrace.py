"""The op-trace format has one owner (forensics/core/formats/optrace.py): the tracer writes with it,
the native reader and the differ's columnar path read with it. Checked on real traces of the CPU
example (tests/fixtures/traces-cpu-divergence, PROVENANCE.md): the owner's line writers give back
the recorded lines byte for byte, and every reader's assumption (key order, names) is the owner's."""
from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from forensics.core.errors import BadInput
from forensics.core.formats import optrace as fmt

FIXTURES = Path(__file__).parent / "fixtures" / "traces-cpu-divergence"
REAL = sorted(FIXTURES.glob("*.jsonl"))


def _in_order(keys: list[str], order: tuple[str, ...]) -> bool:
    return all(k in order for k in keys) and [order.index(k) for k in keys] == sorted(order.index(k) for k in keys)


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_the_owner_writes_real_lines_byte_for_byte(path):
    lines = path.read_bytes().splitlines(keepends=True)
    header, footer = json.loads(lines[0]), json.loads(lines[-1])
    assert _in_order(list(header), fmt.HEADER_KEYS) and _in_order(list(footer), fmt.FOOTER_KEYS)
    fields = {k: v for k, v in header.items() if k not in ("type", "schema", "version")}
    # the fixture is version 1 (read as it was); the owner writes the current version, the rest byte for byte
    assert header["version"] in fmt.READS
    assert fmt.header_line(fields) == lines[0].replace(b'"version": %d' % header["version"], b'"version": %d' % fmt.VERSION, 1)
    assert fmt.footer_line({k: v for k, v in footer.items() if k != "type"}) == lines[-1]
    for raw in lines[1:-1]:
        rec = json.loads(raw)
        assert _in_order(list(rec), fmt.RECORD_KEYS), raw[:80]
        again = fmt.record(rec["seq"], rec["id"], rec["op"], rec["kind"], rec["step"], rec["phase"], rec["in"],
                           rec["out"], rec.get("meta"))
        assert fmt.record_line(again) == raw


def test_a_key_the_format_lacks_is_the_writers_bug():
    with pytest.raises(ValueError, match="unknown key"):
        fmt.header_line({"rank": 0, "colour": "blue"})
    with pytest.raises(ValueError, match="unknown key"):
        fmt.footer_line({"records": 1, "mood": "fine"})


def test_the_columnar_reader_matches_the_owners_record_head():
    """The columnar prefix reads a record's seq and identity by byte position (columnar_scan.heads):
    from the owner's own line and from every record of a real trace, the values the JSON holds."""
    import numpy as np

    from forensics.tracediff import columnar, columnar_scan as scan

    def heads(lines: list[bytes]) -> list[tuple[int, bytes] | None]:
        text = b"\n".join(lines) + b"\n"
        data = bytearray(text) + bytearray(scan.PAD)
        buf = np.frombuffer(data, np.uint8)
        ends = np.flatnonzero(buf[:len(text)] == 10)
        h = scan.heads(data, np.concatenate(([0], ends[:-1] + 1)), ends)
        return [(int(h.seq[k]), bytes(data[h.id_start[k]:h.id_end[k]])) if h.ok[k] else None for k in range(len(lines))]

    line = fmt.record_line(fmt.record(7, "aten.mm.default:3", "aten.mm.default", "op", 0, "forward", [], []))
    assert heads([line.rstrip(b"\n")]) == [(7, b"aten.mm.default:3")]
    # the pyarrow schema (the fallback reader of a block with many templates) reads every key a record can have
    assert set(fmt.RECORD_KEYS) <= set(columnar.SCHEMA.names)
    raws = (FIXTURES / "a.jsonl").read_bytes().splitlines()[1:-1]
    assert heads(raws) == [(r["seq"], r["id"].encode()) for r in map(json.loads, raws)]


def test_the_native_readers_typed_header_and_footer_are_the_formats_keys():
    from forensics.tracediff.traces import native

    assert {f.name for f in msgspec.structs.fields(native.Header)} <= set(fmt.HEADER_KEYS)
    assert {f.name for f in msgspec.structs.fields(native.Footer)} <= set(fmt.FOOTER_KEYS)
    assert (native.SCHEMA, native.SCHEMA_VERSION, native.FILE_NAME) == (fmt.SCHEMA, fmt.VERSION, fmt.FILE_NAME)


def test_read_header_names_the_file_and_line_one(tmp_path):
    foreign = tmp_path / "trace.jsonl"
    foreign.write_text('{"type": "header", "schema": "someone.else", "version": 1}\n')
    with pytest.raises(BadInput) as e:
        fmt.read_header(foreign)
    assert e.value.line == 1 and "foreign schema" in str(e.value)
    newer = tmp_path / "newer.jsonl"
    newer.write_text('{"type": "header", "schema": "forensics.optrace", "version": 3}\n')
    with pytest.raises(BadInput, match="version 3; this reader reads versions 1, 2"):
        fmt.read_header(newer)
    assert fmt.read_header(FIXTURES / "a.jsonl")["schema"] == fmt.SCHEMA
