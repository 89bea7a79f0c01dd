"""Typed borders (issue 28): every field a reader uses, given a value of the wrong type, a
non-finite number, a huge integer, NULL or deep nesting, is refused as bad input naming the file,
the record and the field, or read with the same result; never an internal error or a traceback.

A systematic campaign, not random: for each format, each used field of one real record (from the
corpus or our fixtures) gets each value of ``VALUES`` in turn. Outcome classes counted per format:
``refused`` (BadInput naming the file and the field), ``same`` (read, same result as the intact
file), ``changed`` (read, a different result: allowed only where the result says so). Complements
tests/test_fuzz_commands.py (seeded random damage through whole commands) and
tests/test_corpus_mutations.py (cuts and byte flips of every corpus file).
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from forensics.errors import BadInput
from tests.conftest import CORPUS, REPO

#: JSON literals put in place of one field's value: wrong types, non-finite, huge, NULL, deep.
VALUES = {
    "text": '"x"', "float": "1.5", "list": "[1]", "object": '{"a": 1}', "bool": "true", "null": "null",
    "inf": "Infinity", "-inf": "-Infinity", "nan": "NaN", "int64+1": str(1 << 63), "1e20": "1e20",
    "30digits": "1" * 30, "negative": "-5", "mixed": '["a", null, {}]', "deep": "[" * 1000 + "]" * 1000,
}


def _put(doc: object, path: list, literal: str) -> str:
    """``doc`` as JSON text with the value at ``path`` replaced by the JSON ``literal``."""
    holder = doc
    for p in path[:-1]:
        holder = holder[p]  # type: ignore[index]
    old = holder[path[-1]]  # type: ignore[index]
    holder[path[-1]] = "__MUTATED__"  # type: ignore[index]
    try:
        return json.dumps(doc).replace('"__MUTATED__"', literal)
    finally:
        holder[path[-1]] = old  # type: ignore[index]


def _outcome(read, path: Path, field: str) -> str:
    """'refused' (one BadInput line naming the file and the field) or 'read'; anything else fails."""
    try:
        read(path)
    except BadInput as e:
        text = str(e)
        assert "\n" not in text and str(path) in text, text
        assert field.split(".")[-1] in text or "JSON" in text or "nested" in text, f"{field}: {text}"
        return "refused"
    return "read"


# --------------------------------------------------------------------------- Kineto
KINETO = CORPUS / "kineto" / "hta_critical_path__simple_add__benchmark_result_493459_1694039959_trace.json.gz"
KINETO_FIELDS = ["ts", "dur", "tid", "pid", "name", "cat", "args", "args.grid", "args.block", "args.correlation",
                 "args.External id", "args.device", "args.stream"]


@pytest.fixture(scope="module")
def kineto_doc():
    if not KINETO.is_file():
        pytest.skip(f"real corpus not found at {CORPUS}")
    return json.loads(gzip.decompress(KINETO.read_bytes()))


@pytest.mark.parametrize("field", KINETO_FIELDS)
def test_kineto_kernel_event_fields(field, kineto_doc, tmp_path):
    """Each used field of a real kernel event: a value of another type or out of range is refused."""
    from parsers.kineto import read_trace

    events = kineto_doc["traceEvents"]
    i = next(i for i, e in enumerate(events) if e.get("cat") == "kernel")
    where = ["traceEvents", i, *(["args", field[5:]] if field.startswith("args.") else [field])]
    intact = read_trace(KINETO).kernels
    outcomes = {}
    for name, literal in VALUES.items():
        p = tmp_path / f"{name}.json"
        p.write_text(_put(kineto_doc, where, literal))
        outcomes[name] = _outcome(read_trace, p, field)
        if outcomes[name] == "read" and field != "cat":  # another category is another (ignored) event
            got = read_trace(p).kernels
            assert len(got) == len(intact), (field, name)
    # a wrong type or a non-finite/huge number is never read as if it were a value
    same_type = {"args": "object"}.get(field)
    for name in ("inf", "-inf", "nan", "int64+1", "30digits", "list", "object", "bool", "mixed"):
        assert name == same_type or outcomes[name] == "refused", (field, name, outcomes)
