"""The site-occurrence format has one owner (forensics/core/formats/sites.py): the site probe writes
with it, parsers/sites_jsonl.py reads with it. Checked on the real captures shipped in
tests/fixtures/cpu (PROVENANCE.md): the owner's line writers give back every recorded line byte for
byte, and the reader's schema name and event names are the owner's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from forensics.core.formats import sites as fmt

REAL = sorted((Path(__file__).parent / "fixtures" / "cpu").glob("*/*/rank*/sites.jsonl"))


def test_there_are_real_site_files():
    assert len(REAL) >= 6


@pytest.mark.parametrize("path", REAL, ids=lambda p: "/".join(p.parts[-4:-2]))
def test_the_owner_writes_real_lines_byte_for_byte(path):
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    header = json.loads(lines[0])
    assert list(header)[:3] == ["event", "schema", "version"] and header["event"] == fmt.HEADER
    assert fmt.header_line({k: v for k, v in header.items() if k not in ("event", "schema", "version")}) == lines[0]
    events = [json.loads(raw) for raw in lines[1:]]
    assert {e["event"] for e in events} <= {fmt.SITE, fmt.ITERATION, fmt.SUMMARY}
    assert events[-1]["event"] == fmt.SUMMARY and any(e["event"] == fmt.SITE for e in events)
    for raw, event in zip(lines[1:], events):
        assert fmt.line(event) == raw


def test_the_reader_reads_the_owners_name_and_events(tmp_path):
    from parsers import sites_jsonl

    assert sites_jsonl.SCHEMA == fmt.SCHEMA
    f = tmp_path / "sites.jsonl"
    site = {"event": fmt.SITE, "site": "aten.mm.default", "occurrence": 1, "label": "aten.mm.default#1",
            "rank": 0, "in": [], "out": []}
    f.write_text(fmt.header_line({"rank": 0, "pid": 1}) + fmt.line(site)
                 + fmt.line({"event": fmt.SUMMARY, "records": 1, "dropped": 2, "occurrences": {}}))  # SYNTHETIC
    df = sites_jsonl.read_sites(f)
    assert list(df["label"]) == ["aten.mm.default#1"] and df.attrs["losses"]
