"""Site JSONL: one record per site occurrence with input/output digests (the project's own format).

Written by the site recorder (our probes, ``probes/sites.py``, with the format's owner
:mod:`forensics.core.formats.sites`, and the ``Recorder`` of the project's device campaign script,
``campaign.py``, kept outside the repository).
Every line is a JSON object with an ``event``: ``site`` records (one per occurrence), and others
(``iteration`` markers, ``cupti_unavailable``... meta records, an optional first
``{"event": "header", "schema": "forensics.sites", "version": 1}`` and last ``summary``).
docs/parsers/sites-jsonl.md has the full description.

Digest keys: ``in_key``/``out_key`` are stable strings built from each digest's dtype, shape,
numel and ``hash`` (``torch.hash_tensor``, an XOR of the elements' bits: different keys prove a
difference, equal keys do not prove equality); ``in_okey``/``out_okey`` the same from the
order-sensitive ``ohash`` (equal keys are the evidence of equality). A key is ``None`` ("unknown,
cannot prove equality") when any digest lacks that hash or has its ``*_error``, or when the list
is empty; ``None`` never compares equal to anything in pandas (``==`` gives False).
"""
from __future__ import annotations

from os import PathLike

import pandas as pd

from forensics.core.errors import BadInput
from forensics.core.formats import sites as sites_format
from forensics.core.site import split_label
from parsers._jsonl import read_jsonl, records_frame
from parsers._types import check_site_record

SCHEMA = sites_format.SCHEMA  # the format's owner: forensics/core/formats/sites.py
WHAT = "site JSONL"
SITE_COLUMNS: dict[str, str] = {
    "label": "string",
    "site": "string",
    "occurrence": "Int64",
    "external_id": "Int64",
    "iteration": "Int64",
    "rank": "Int64",
    "arm": "string",
    "pid": "Int64",
    "in_digests": "object",
    "out_digests": "object",
    "in_key": "object",
    "out_key": "object",
    "in_okey": "object",
    "out_okey": "object",
    "line": "Int64",
}


def digest_key(digest: dict, ordered: bool = False) -> str | None:
    """``"bfloat16[2048,4096]n8388608:h0123456789abcdef"``; None when the hash is unknown.

    ``ordered``: the same key from the order-sensitive ``ohash`` (``...:o0123...``); None when
    the record has none (an older probe, the campaign's recorder) or it failed.
    """
    field, tag = ("ohash", "o") if ordered else ("hash", "h")
    if not isinstance(digest, dict) or f"{field}_error" in digest or digest.get(field) is None:
        return None
    try:
        h = int(digest[field]) % (1 << 64)
        shape = ",".join(str(int(d)) for d in digest.get("shape") or [])
    except (TypeError, ValueError):
        return None
    return f"{digest.get('dtype')}[{shape}]n{digest.get('numel')}:{tag}{h:016x}"


def digests_key(digests, ordered: bool = False) -> str | None:
    """Key of a digest list: keys joined by ``|``; None when empty or any digest is unknown."""
    if not isinstance(digests, list) or not digests:
        return None
    keys = [digest_key(d, ordered) for d in digests]
    return None if any(k is None for k in keys) else "|".join(keys)


def _load(path: str | PathLike[str]):
    f = read_jsonl(path, SCHEMA, WHAT)
    sites, events = [], []
    for number, obj in f.lines:
        check_site_record(obj, f.path, number)  # wrong-typed values are bad input (forensics faults)
        event = obj.get("event")
        if not isinstance(event, str):
            hint = " (a CUPTI JSONL?)" if "kind_name" in obj or "kind" in obj else ""
            raise BadInput(f.path, f"not a {WHAT}: record has no 'event'{hint}", number)
        (sites if event == sites_format.SITE else events).append((number, obj))
    return f, sites, events


def read_sites(path: str | PathLike[str]) -> pd.DataFrame:
    """One row per ``site`` record (columns ``SITE_COLUMNS``; other record fields kept after them).

    ``rank``/``pid``/``arm`` come from the record, else from the header line, else None.
    """
    f, sites, events = _load(path)
    header = f.header or {}
    rows = []

    for number, obj in sites:
        label = obj.get("label")
        site, occ = obj.get("site"), obj.get("occurrence")
        if label is None and site is not None and occ is not None:
            label = f"{site}#{occ}"
        if not isinstance(label, str) or not label:
            raise BadInput(f.path, "site record without a label (or site and occurrence)", number)
        if site is None and "#" in label:
            site, occ = split_label(label)
        _check_site(f.path, number, label, site)
        ins, outs = obj.get("in", obj.get("in_digests", [])), obj.get("out", obj.get("out_digests", []))
        if not isinstance(ins, list) or not isinstance(outs, list):
            raise BadInput(f.path, "site record: 'in' and 'out' must be lists of digests", number)
        row = {k: v for k, v in obj.items() if k not in ("in", "out", "event")}
        row.update(
            label=label,
            site=site,
            occurrence=occ,
            rank=obj.get("rank", header.get("rank")),
            arm=obj.get("arm", header.get("arm")),
            pid=obj.get("pid", header.get("pid")),
            in_digests=ins,
            out_digests=outs,
            in_key=digests_key(ins),
            out_key=digests_key(outs),
            in_okey=digests_key(ins, ordered=True),
            out_okey=digests_key(outs, ordered=True),
            line=number,
        )
        rows.append(row)
    losses = _losses(events)
    if not rows:
        df = pd.DataFrame({c: pd.Series(dtype=t) for c, t in SITE_COLUMNS.items()})
        df.attrs["losses"] = df.attrs["problems"] = losses
        return df
    df = records_frame(rows)
    df.attrs["losses"] = df.attrs["problems"] = losses
    for col, dtype in SITE_COLUMNS.items():
        if col not in df.columns:
            df[col] = None
        if dtype == "object":  # keep None (not NaN) for unknown keys and the digest lists as given
            df[col] = pd.Series([r.get(col) for r in rows], dtype=object, index=df.index)
            continue
        try:
            df[col] = df[col].astype(dtype)
        except (TypeError, ValueError) as e:
            raise BadInput(f.path, f"site records: column {col!r} has a value that is not {dtype}: {e}") from None
    return df[list(SITE_COLUMNS) + [c for c in df.columns if c not in SITE_COLUMNS]]


def _check_site(path, line: int, label: str, site: object) -> None:
    """A site record names a valid site and occurrence (forensics.core.site grammar), or it is bad input
    naming the file and line (never a usage error later)."""
    from forensics.core.errors import BadSite  # noqa: PLC0415
    from forensics.core.site import parse_occurrence, parse_site  # noqa: PLC0415

    try:
        if "#" in label:
            parse_occurrence(label)
        if site is not None:
            if not isinstance(site, str):
                raise BadSite(f"site {site!r} is not text")
            parse_site(site)
    except BadSite as e:
        raise BadInput(path, f"site record with a bad site: {e}", line) from None


def _losses(events: list) -> list[str]:
    """What the site probe says it could not record (its summary's ``dropped``)."""
    out = []
    for _, obj in events:
        if obj.get("event") == sites_format.SUMMARY and isinstance(obj.get("dropped"), int) and obj["dropped"] > 0:
            out.append(f"the site probe dropped {obj['dropped']} record(s) (its record budget): occurrences "
                       "after that are not in this file")
    return out


def read_events(path: str | PathLike[str]) -> pd.DataFrame:
    """Every non-site record (header, iteration markers, meta, summary) with ``event`` and ``line``."""
    _, _, events = _load(path)
    rows = [dict(obj, line=number) for number, obj in events]
    if not rows:
        return pd.DataFrame({"event": pd.Series(dtype="string"), "line": pd.Series(dtype="Int64")})
    df = records_frame(rows)
    cols = ["event", "line"] + [c for c in df.columns if c not in ("event", "line")]
    return df[cols]
