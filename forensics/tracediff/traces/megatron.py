"""Reader of Megatron-Core determinism traces (``megatron.core.determinism``, schema version 1).

A trace is a directory of rank-local ``rank_<digits>.jsonl`` streams (the recorder writes
``rank_000003.jsonl``) or one explicit rank file. Each line is one record::

    {"event": "tensor"|"event", "schema_version": 1, "rank": 0, "iteration": 1, "microbatch": 0,
     "phase": "forward", "name": "decoder.layer0.output", "occurrence": 0, "sequence": 17,
     "metadata": {...}, "tensor": {"mode": "full", "sha256": "...", ...}}   # tensor records
     ... "fields": {...}                                                     # semantic events

Validation is as strict as Megatron's own ``megatron/core/determinism/trace_schema.py``
(NVIDIA/Megatron-LM, commit 3fdf4997182a6a70ff51c46574971291992f2b56): duplicate JSON keys,
non-finite numbers, a foreign ``schema_version``, a sequence that does not strictly increase,
a duplicate semantic key, a rank that contradicts the file name, evidence inconsistent with its
mode, an empty stream: each is one :class:`BadInput` with ``file:line``.

Mapping to :class:`TraceRecord` (docs/formats/megatron.md has the full table):

* ``step`` = ``iteration``; ``seq`` = ``sequence``; identity
  ``<event>/<phase>/mb<microbatch>/<name>:<occurrence + 1>`` (unique per rank and iteration;
  ``op/...`` for joined input/output boundaries).
* Evidence is kept: ``full`` -> full (sha256 of the bytes in order: an order-sensitive digest, so
  equal full digests prove equality), ``sampled`` -> sampled (sha256 of the samples),
  ``summary`` -> summary (the statistics), ``metadata`` -> metadata (no value). Semantic events
  carry exact JSON values: full evidence over their ``fields``.
* A boundary records ONE tensor and says nothing about the inputs that produced it. Unless an op's
  inputs and outputs were recorded as ``<base>.input[N]`` / ``<base>.output[N]`` (or
  ``metadata.role``), which this reader joins into one op record, the record's inputs are a single
  *not observed* placeholder (metadata evidence): the differ can then only call it an *unproven*
  origin, never a proven one.
* GEMM boundaries name a site: ``metadata.gemm = {"layout", "acc", "grad"}``, or a Transformer
  Engine role suffix ``.fprop`` / ``.dgrad`` / ``.wgrad`` (TE's ``general_gemm`` layouts TN / NN /
  NT), or an ``aten.mm``-like op whose two inputs carry strides.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forensics.core.errors import BadInput
from forensics.core.site import GEMM_LAYOUTS, gemm_meta_from_strides
from forensics.tracediff.traces import Reader, TensorDigest, Trace, TraceRecord, register_reader

FORMAT = "megatron"
SCHEMA_VERSION = 1
SOURCE = ("NVIDIA/Megatron-LM", "megatron/core/determinism/trace_schema.py",
          "3fdf4997182a6a70ff51c46574971291992f2b56")
_RANK_FILE = re.compile(r"rank_([0-9]+)\.jsonl")
_SHA256 = re.compile(r"[0-9a-f]{64}")
_MODES = ("metadata", "summary", "sampled", "full")
_REQUIRED = ("event", "iteration", "microbatch", "name", "occurrence", "phase", "rank", "schema_version", "sequence")
_ROLE_SUFFIX = re.compile(r"^(?P<base>.+)\.(?P<role>input|output)(?P<index>\d*)$")
#: Transformer Engine GEMM roles -> (layout, grad): TE's general_gemm layouts in its Linear module.
TE_GEMM_ROLES = {"fprop": ("TN", 0), "dgrad": ("NN", 1), "wgrad": ("NT", 1)}

#: Inputs a boundary record did not observe: metadata evidence, so equality is never proven.
NOT_OBSERVED = TensorDigest(evidence="metadata")


class _Invalid(ValueError):
    """A schema violation inside one line (becomes BadInput with the file and line)."""


# --------------------------------------------------------------------------- validation

def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Invalid(f"duplicate JSON field {key!r}")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise _Invalid(f"JSON contains a non-finite number ({name})")


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise _Invalid(message)


def _nonneg(value: Any) -> bool:
    return type(value) is int and value >= 0


def _check_finite(value: Any) -> None:
    if isinstance(value, float):
        _require(math.isfinite(value), "JSON contains a non-finite number")
    elif isinstance(value, list):
        for item in value:
            _check_finite(item)
    elif isinstance(value, dict):
        for item in value.values():
            _check_finite(item)


def _check_tensor(t: Any) -> None:
    """Tensor evidence consistent with its declared mode (trace_schema._validate_tensor)."""
    _require(isinstance(t, dict), "tensor event is missing tensor evidence")
    mode = t.get("mode")
    _require(isinstance(mode, str) and mode in _MODES, f"invalid tensor evidence mode: {mode!r}")
    shape = t.get("shape")
    _require(isinstance(shape, list) and all(_nonneg(x) for x in shape), "tensor shape must contain non-negative integers")
    numel = t.get("numel")
    _require(_nonneg(numel) and numel == math.prod(shape), "tensor numel must equal the product of shape")
    for key in ("dtype", "layout", "device_type"):
        _require(isinstance(t.get(key), str) and bool(t[key]), f"tensor {key} must be a non-empty string")
    _require(type(t.get("requires_grad")) is bool, "tensor requires_grad must be a boolean")
    if t["layout"] == "strided":
        stride = t.get("stride")
        _require(isinstance(stride, list) and len(stride) == len(shape) and all(_nonneg(x) for x in stride),
                 "invalid tensor stride")
    _require(t.get("value_observed") is (mode != "metadata"), "value_observed contradicts tensor mode")
    _require(t.get("exact_value_certificate") is (mode == "full"), "exact_value_certificate contradicts tensor mode")
    if mode == "metadata":
        _require(not ({"sha256", "summary", "captured_numel", "sample_indices", "all_finite"} & t.keys()),
                 "metadata evidence must not contain values")
        return
    _require(t["layout"] == "strided" and t["device_type"] != "meta",
             "value-bearing evidence requires a materialized strided tensor")
    if mode == "summary":
        s = t.get("summary")
        _require(isinstance(s, dict), "summary tensor evidence is missing its summary")
        _require(type(s.get("all_finite")) is bool, "invalid summary all_finite")
        for key in ("minimum", "maximum", "mean", "l2_norm"):
            _require(key in s and (s[key] is None or type(s[key]) in (int, float)), f"invalid summary {key}")
        _require(not ({"sha256", "captured_numel", "sample_indices"} & t.keys()),
                 "summary evidence must not contain a tensor digest")
        return
    digest = t.get("sha256")
    _require(isinstance(digest, str) and _SHA256.fullmatch(digest) is not None,
             f"{mode} tensor evidence requires a SHA-256 digest")
    captured = t.get("captured_numel")
    _require(_nonneg(captured) and captured <= numel, "invalid captured_numel")
    _require(type(t.get("all_finite")) is bool, "invalid tensor all_finite")
    _require("summary" not in t, "digest evidence must not contain a summary")
    if mode == "full":
        _require(captured == numel and "sample_indices" not in t, "full evidence must capture every element without sampling")
        return
    idx = t.get("sample_indices")
    _require(isinstance(idx, list) and len(idx) == captured and all(_nonneg(x) and x < numel for x in idx),
             "invalid sample_indices")
    _require((numel == 0 and captured == 0) or (numel > 0 and captured > 0), "sampled evidence must capture non-empty tensors")
    expected = [] if captured == 0 else [0] if captured == 1 else [
        (i * (numel - 1)) // (captured - 1) for i in range(captured)]
    _require(idx == expected, "sample_indices must be deterministic evenly spaced indices")


def check_record(rec: Any, expected_rank: int | None) -> dict[str, Any]:
    """Validate one decoded record (trace_schema.validate_record); raise ``_Invalid``."""
    _require(isinstance(rec, dict), "record must be a JSON object")
    _check_finite(rec)
    missing = sorted(set(_REQUIRED) - rec.keys())
    _require(not missing, f"missing fields: {missing}")
    version = rec["schema_version"]
    _require(type(version) is int and version == SCHEMA_VERSION,
             f"unsupported schema_version={version!r} (this reader reads Megatron-Core trace schema {SCHEMA_VERSION})")
    for key in ("rank", "sequence", "occurrence"):
        _require(_nonneg(rec[key]), f"{key} must be a non-negative integer")
    for key in ("iteration", "microbatch"):
        _require(rec[key] is None or _nonneg(rec[key]), f"{key} must be null or a non-negative integer")
    for key in ("event", "name", "phase"):
        v = rec[key]
        _require(isinstance(v, str) and 0 < len(v) <= 512 and all(ord(c) >= 32 for c in v), f"invalid {key}")
    _require(rec["event"] in ("event", "tensor"), f"unsupported event type {rec['event']!r}")
    if rec["event"] == "tensor":
        _require(isinstance(rec.get("metadata"), dict), "invalid tensor metadata")
        _check_tensor(rec.get("tensor"))
    else:
        _require(isinstance(rec.get("fields"), dict), "semantic event is missing fields")
    _require(expected_rank is None or rec["rank"] == expected_rank,
             f"record rank {rec['rank']} does not match filename rank {expected_rank}")
    return rec


def semantic_key(rec: dict[str, Any]) -> tuple:
    """Megatron's record identity (trace_schema.record_key): everything but the sequence."""
    return tuple(rec[k] for k in ("rank", "iteration", "microbatch", "phase", "event", "name", "occurrence"))


def read_rank_file(path: Path, expected_rank: int | None = None) -> list[tuple[int, dict[str, Any]]]:
    """``[(line, record)]`` of one rank stream, validated; BadInput with file:line otherwise."""
    path = Path(path)
    out: list[tuple[int, dict[str, Any]]] = []
    previous = -1
    keys: set[tuple] = set()
    try:
        with open(path, encoding="utf-8") as stream:
            for line_no, line in enumerate(stream, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line, object_pairs_hook=_unique_object, parse_constant=_reject_constant)
                except _Invalid as e:
                    raise BadInput(path, str(e), line_no) from None
                except (ValueError, RecursionError) as e:
                    what = "truncated record (incomplete JSON)" if not line.endswith("\n") else "invalid JSON"
                    raise BadInput(path, f"{what}: {e}", line_no) from None
                try:
                    check_record(rec, expected_rank)
                    if expected_rank is None:
                        expected_rank = rec["rank"]
                    _require(rec["sequence"] > previous,
                             f"sequence must be strictly increasing ({rec['sequence']} after {previous})")
                    key = semantic_key(rec)
                    _require(key not in keys, "duplicate semantic event key "
                             f"(iteration={rec['iteration']}, microbatch={rec['microbatch']}, phase={rec['phase']!r}, "
                             f"event={rec['event']!r}, name={rec['name']!r}, occurrence={rec['occurrence']})")
                except _Invalid as e:
                    raise BadInput(path, str(e), line_no) from None
                keys.add(key)
                previous = rec["sequence"]
                out.append((line_no, rec))
    except UnicodeError as e:
        raise BadInput(path, f"not UTF-8 text: {e}") from None
    except OSError as e:
        raise BadInput(path, f"cannot read trace: {e.strerror or e}") from None
    if not out:
        raise BadInput(path, "trace contains no records (an empty selected window is not equality evidence)")
    return out


def rank_files(path: Path) -> dict[int, Path]:
    """``{rank: file}``: a directory of ``rank_<digits>.jsonl`` or one explicit rank file."""
    path = Path(path)
    if path.is_file():
        m = _RANK_FILE.fullmatch(path.name)
        if m:
            return {int(m.group(1)): path}
        first = read_rank_file(path)[0][1]
        return {first["rank"]: path}
    if not path.is_dir():
        raise BadInput(path, "trace path does not exist")
    files: dict[int, Path] = {}
    for f in sorted(path.glob("rank_*.jsonl")):
        m = _RANK_FILE.fullmatch(f.name)
        if m is None:
            raise BadInput(f, "expected file name rank_<digits>.jsonl")
        rank = int(m.group(1))
        if rank in files:
            raise BadInput(f, f"duplicate trace file for rank {rank} (also {files[rank].name})")
        files[rank] = f
    if not files:
        raise BadInput(path, "no rank_*.jsonl files here: not a Megatron-Core determinism trace directory")
    return files


# --------------------------------------------------------------------------- conversion

def _digest(t: dict[str, Any]) -> TensorDigest:
    mode = t["mode"]
    if mode in ("full", "sampled"):
        digest: str | None = t["sha256"]
    elif mode == "summary":
        digest = "summary:" + json.dumps(t["summary"], sort_keys=True, separators=(",", ":"))
    else:
        digest = None
    # SHA-256 over the tensor's bytes in order: an order-sensitive digest (it can prove equality)
    ordered = digest if mode in ("full", "sampled") else None
    return TensorDigest(shape=tuple(t["shape"]), dtype=t["dtype"], numel=t["numel"], digest=digest, evidence=mode,
                        ordered=ordered)


def _event_digest(fields: dict[str, Any]) -> TensorDigest:
    canon = json.dumps(fields, sort_keys=True, separators=(",", ":"), allow_nan=False)
    digest = hashlib.sha256(canon.encode()).hexdigest()
    return TensorDigest(dtype="json", digest=digest, evidence="full", ordered=digest)


def _role(rec: dict[str, Any]) -> tuple[str, str, int] | None:
    """``(base, role, index)`` for an op-boundary tensor record, else None."""
    if rec["event"] != "tensor":
        return None
    meta = rec.get("metadata") or {}
    m = _ROLE_SUFFIX.match(rec["name"])
    role = meta.get("role") if meta.get("role") in ("input", "output") else (m.group("role") if m else None)
    if role is None:
        return None
    base = meta.get("op_name") if isinstance(meta.get("op_name"), str) else (m.group("base") if m else rec["name"])
    index = int(meta["index"]) if _nonneg(meta.get("index")) else (int(m.group("index")) if m and m.group("index") else 0)
    return base, role, index


def gemm_meta(name: str, metadata: dict[str, Any], inputs: list[dict[str, Any]], phase: str | None) -> dict | None:
    """The ``{"layout", "acc", "grad"}`` a record names (see module docstring), or None."""
    g = metadata.get("gemm")
    if isinstance(g, dict) and g.get("layout") in GEMM_LAYOUTS:
        return {"layout": g["layout"], "acc": int(bool(g.get("acc", 0))), "grad": int(bool(g.get("grad", 0)))}
    leaf = name.rsplit(".", 1)[-1]
    if leaf in TE_GEMM_ROLES:
        layout, grad = TE_GEMM_ROLES[leaf]
        return {"layout": layout, "acc": int(bool(metadata.get("accumulate", 0))), "grad": grad}
    return gemm_meta_from_strides(name, [(t.get("shape"), t.get("stride")) for t in inputs], phase)


@dataclass
class _Group:
    first: dict[str, Any]
    line: int
    inputs: list[tuple[int, dict[str, Any]]]
    outputs: list[tuple[int, dict[str, Any], int]]  # (index, record, line)


def records_of(path: Path, rank: int, lines: list[tuple[int, dict[str, Any]]]) -> list[TraceRecord]:
    """The rank's records as TraceRecords, ``<base>.input/.output`` boundaries joined into ops."""
    groups: dict[tuple, _Group] = {}
    singles: list[tuple[int, dict[str, Any]]] = []
    for line, rec in lines:
        r = _role(rec)
        if r is None:
            singles.append((line, rec))
            continue
        base, role, index = r
        key = (rec["iteration"], rec["microbatch"], rec["phase"], base, rec["occurrence"])
        g = groups.setdefault(key, _Group(rec, line, [], []))
        if role == "input":
            g.inputs.append((index, rec))
        else:
            g.outputs.append((index, rec, line))
    out: list[TraceRecord] = []
    src = str(path)
    for key, g in groups.items():
        if not g.outputs or not g.inputs:  # one side only: plain boundaries
            singles += [(g.line, rec) for _, rec in g.inputs] + [(ln, rec) for _, rec, ln in g.outputs]
            continue
        it, mb, phase, base, occ = key
        ins = [rec for _, rec in sorted(g.inputs, key=lambda x: x[0])]
        outs = sorted(g.outputs, key=lambda x: x[0])
        _, first_out, line = min(outs, key=lambda x: x[1]["sequence"])
        meta: dict[str, Any] = {}
        for rec in ins + [o for _, o, _ in outs]:
            meta.update(rec.get("metadata") or {})
        extra: dict[str, Any] = {"megatron": {"event": "tensor", "name": base, "occurrence": occ,
                                              "microbatch": mb, "sequences": sorted(r["sequence"] for r in ins + [o for _, o, _ in outs])},
                                 "metadata": meta, "inputs_observed": True}
        gemm = gemm_meta(base, meta, [r["tensor"] for r in ins], phase)
        if gemm:
            extra["gemm"] = gemm
        out.append(TraceRecord(
            rank=rank, seq=first_out["sequence"], identity=f"op/{phase}/mb{mb}/{base}:{occ + 1}", name=base,
            kind="gemm" if gemm else "op", step=it, phase=phase,
            inputs=[_digest(r["tensor"]) for r in ins], outputs=[_digest(o["tensor"]) for _, o, _ in outs],
            source=f"{src}:{line}", extra=extra))
    for line, rec in singles:
        meta = rec.get("metadata") or {}
        is_tensor = rec["event"] == "tensor"
        extra = {"megatron": {"event": rec["event"], "name": rec["name"], "occurrence": rec["occurrence"],
                              "microbatch": rec["microbatch"], "sequences": [rec["sequence"]]},
                 "metadata": meta, "inputs_observed": False}
        if is_tensor:
            gemm = gemm_meta(rec["name"], meta, [], rec["phase"])
            if gemm:
                extra["gemm"] = gemm
        else:
            extra["fields"] = rec["fields"]
        out.append(TraceRecord(
            rank=rank, seq=rec["sequence"],
            identity=f"{rec['event']}/{rec['phase']}/mb{rec['microbatch']}/{rec['name']}:{rec['occurrence'] + 1}",
            name=rec["name"], kind=("gemm" if extra.get("gemm") else "boundary") if is_tensor else "event",
            step=rec["iteration"], phase=rec["phase"], inputs=[NOT_OBSERVED],
            outputs=[_digest(rec["tensor"]) if is_tensor else _event_digest(rec["fields"])],
            source=f"{src}:{line}", extra=extra))
    out.sort(key=lambda r: r.seq)
    return out


# --------------------------------------------------------------------------- reader API

def iter_ranks(path: Path) -> Iterator[tuple[int, Iterator[TraceRecord]]]:
    """``(rank, records)`` per rank file, ranks in order (each file is validated as a whole)."""
    for rank, file in sorted(rank_files(Path(path)).items()):
        yield rank, iter(records_of(file, rank, read_rank_file(file, rank if _RANK_FILE.fullmatch(file.name) else None)))


def run_info(path: Path) -> dict[str, Any]:
    """Megatron traces record no run info; the reader says what it read."""
    return {"producer": "megatron.core.determinism", "schema_version": SCHEMA_VERSION,
            "traced_ranks": sorted(rank_files(Path(path)))}


def read(path: Path) -> Trace:
    return Trace(format=FORMAT, path=Path(path), ranks={r: list(it) for r, it in iter_ranks(path)},
                 run_info=run_info(path))


def _looks_like_record(first: bytes) -> bool:
    return b'"schema_version"' in first and b'"sequence"' in first and b'"occurrence"' in first


def detect(path: Path) -> bool:
    path = Path(path)
    if path.is_dir():
        cands = sorted(path.glob("rank_*.jsonl"))[:1]
    else:
        cands = [path]
    for c in cands:
        if c.is_file():
            with open(c, "rb") as f:
                for raw in f:
                    if raw.strip():
                        return _looks_like_record(raw[:65536])
    return False


READER = register_reader(Reader(name=FORMAT, detect=detect, read=read, iter_ranks=iter_ranks, run_info=run_info))
