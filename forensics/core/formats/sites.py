"""The site-occurrence format (``forensics.sites``, version 1): one owner for its writer and reader.

The site probe (``probes/sites.py``) writes ``rank<R>/sites.jsonl`` (``sites.<pid>.jsonl`` for a
second process of the rank): a header line, then one line per event: ``site`` (one occurrence of
the selected site, its input and output digests), ``iteration`` (a step boundary), and a last
``summary`` (records written, dropped, occurrences per site). The reader
(``parsers/sites_jsonl.py``) takes the name, the version and the event names from here.
docs/parsers/sites-jsonl.md describes every field. Pure standard library.
"""
from __future__ import annotations

import json
from typing import Any

SCHEMA = "forensics.sites"
VERSION = 1
#: the file's name: ``<FILE_STEM><FILE_SUFFIX>``, or ``<FILE_STEM>.<pid><FILE_SUFFIX>`` for a second process
FILE_STEM, FILE_SUFFIX = "sites", ".jsonl"
#: the ``event`` of each kind of line
HEADER, SITE, ITERATION, SUMMARY = "header", "site", "iteration", "summary"


def header_line(fields: dict[str, Any]) -> str:
    """The first line: ``event``, ``schema`` and ``version``, then ``fields`` as given."""
    return json.dumps({"event": HEADER, "schema": SCHEMA, "version": VERSION, **fields}, default=str) + "\n"


def line(event: dict[str, Any]) -> str:
    """One event line (a ``site``, ``iteration`` or ``summary`` record, ``event`` first)."""
    return json.dumps(event) + "\n"
