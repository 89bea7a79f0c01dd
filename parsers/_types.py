"""Field types of the project's own JSONL records (CUPTI JSONL, site JSONL), checked line by line.

A value of the wrong type (a float where an id or a count belongs, a list where a name belongs,
``Infinity``) is bad input naming the file, the line and the field; it never reaches a frame,
where it would crash a cast or quietly change a join (a ``numel`` of 1.5, an id of ``[1]``).
Only the fields the readers use are checked; unknown fields pass through untouched.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from forensics.core.errors import BadInput

_INT64 = 1 << 63


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and -_INT64 <= v < _INT64


def _nonneg_int(v: Any) -> bool:
    return _int(v) and v >= 0


def _str(v: Any) -> bool:
    return isinstance(v, str)


def _kind(v: Any) -> str:
    if isinstance(v, bool):
        return "true/false"
    if isinstance(v, int):
        return "an integer out of the 64-bit range" if not _int(v) else "an integer"
    if isinstance(v, float):
        return "a non-finite number" if v != v or v in (float("inf"), float("-inf")) else f"the number {v!r}"
    return {str: "text", list: "a list", dict: "an object", type(None): "null"}.get(type(v), type(v).__name__)


#: CUPTI JSONL: integer fields the readers use (ids, times in ns, dims, counts).
CUPTI_INTS = ("correlation_id", "external_id", "external_kind", "start", "end", "completed", "queued", "submitted",
              "grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "process_id", "thread_id",
              "device_id", "context_id", "stream_id", "flags", "id", "kind", "cbid", "timestamp",
              "registers_per_thread", "dynamic_shared_memory", "static_shared_memory", "dropped", "count")
CUPTI_STRS = ("kind_name", "name", "api_name", "domain")

#: Site JSONL: integer fields of records and digests.
SITE_INTS = ("occurrence", "external_id", "iteration", "rank", "pid")
SITE_STRS = ("label", "site", "arm", "event")
DIGEST_INTS = ("numel",)
META_INTS = ("m", "n", "k")


def _check_fields(obj: dict, ints: tuple[str, ...], strs: tuple[str, ...], path: Path, line: int,
                  where: str = "") -> None:
    for key in ints:
        v = obj.get(key)
        if v is not None and not _int(v):
            raise BadInput(path, f"{where}{key} must be an integer, not {_kind(v)}", line)
    for key in strs:
        v = obj.get(key)
        if v is not None and not _str(v):
            raise BadInput(path, f"{where}{key} must be text, not {_kind(v)}", line)


#: CUPTI JSONL: fields a record of a kind cannot be without (CUPTI fills them in every activity record
#: of that kind); null or absent there would untie a launch from its call or its site, unsaid.
_KERNEL_REQUIRED = ("correlation_id", "start", "end", "name", "grid_x", "grid_y", "grid_z", "block_x", "block_y",
                    "block_z")
CUPTI_REQUIRED = {
    "CONCURRENT_KERNEL": _KERNEL_REQUIRED, "KERNEL": _KERNEL_REQUIRED,
    "RUNTIME": ("correlation_id", "start"), "DRIVER": ("correlation_id", "start"),
    "EXTERNAL_CORRELATION": ("correlation_id", "external_id"),
}


def check_cupti_record(obj: dict, path: Path, line: int, kind: str | None = None) -> None:
    """BadInput when a field CUPTI readers use has the wrong type, or a record of ``kind`` lacks one it needs."""
    _check_fields(obj, CUPTI_INTS, CUPTI_STRS, path, line)
    for key in CUPTI_REQUIRED.get(kind or "", ()):
        if obj.get(key) is None:
            raise BadInput(path, f"{kind} record: {key} is {'null' if key in obj else 'missing'}", line)


def _check_digest(d: Any, path: Path, line: int, where: str) -> None:
    if not isinstance(d, dict):
        raise BadInput(path, f"{where} must be a digest object, not {_kind(d)}", line)
    _check_fields(d, DIGEST_INTS, ("dtype", "hash_error", "ohash_error"), path, line, f"{where}.")
    for key in ("hash", "ohash"):
        h = d.get(key)  # a 64-bit digest: signed or unsigned
        if h is not None and not (isinstance(h, int) and not isinstance(h, bool) and -_INT64 <= h < 2 * _INT64):
            raise BadInput(path, f"{where}.{key} must be a 64-bit integer, not {_kind(h)}", line)
    if d.get("hash") is not None or d.get("ohash") is not None:  # a tensor's digest: its shape, dtype, numel say which
        for key in ("shape", "dtype", "numel"):
            if d.get(key) is None:
                raise BadInput(path, f"{where}.{key} is {'null' if key in d else 'missing'} in a digest that "
                               "carries a hash", line)
    shape = d.get("shape")
    if shape is not None:
        if not isinstance(shape, list) or not all(_nonneg_int(x) for x in shape):
            raise BadInput(path, f"{where}.shape must be a list of non-negative integers", line)
    numel = d.get("numel")
    if numel is not None and numel < 0:
        raise BadInput(path, f"{where}.numel must not be negative", line)


def check_site_record(obj: dict, path: Path, line: int) -> None:
    """BadInput when a site record (or the header) has a field of the wrong type."""
    _check_fields(obj, SITE_INTS, SITE_STRS, path, line)
    for key in ("rank", "pid", "occurrence"):
        v = obj.get(key)
        if v is not None and v < 0:
            raise BadInput(path, f"{key} must not be negative", line)
    for key in ("in", "out", "in_digests", "out_digests"):
        digests = obj.get(key)
        if isinstance(digests, list):
            for i, d in enumerate(digests):
                _check_digest(d, path, line, f"{key}[{i}]")
    meta = obj.get("meta")
    if meta is not None:
        if not isinstance(meta, dict):
            raise BadInput(path, f"meta must be an object, not {_kind(meta)}", line)
        _check_fields(meta, META_INTS, (), path, line, "meta.")
