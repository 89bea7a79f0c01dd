"""PyTorch DebugMode's ``dump_tensor_hashes()`` text (pytorch#185008), read for ``--format debugmode``.

The layout upstream writes (``DebugMode.dump_tensor_hashes(file_name, include_inputs=True)``)::

    Total captured tensor hash ops: 40
    ================================================================================

    [<none>/op_12_aten::mm]
      Call type: torch op
      Call index: 57
      Call depth: 1
      Input hashes: [0][0]=4611686018427387904, [0][1]=-12
      Output hashes: <root>=4620693217682128896

One block per call that logged a hash, keyed by the enclosing ``nn.Module`` (``<none>`` without
``record_nn_module``) and a per-module counter; each hash leaf is ``<pytree path or Triton argument
name>=<JSON value>`` (non-finite floats as ``"NaN"``/``"Infinity"``; a list when several hash
functions ran). torch 2.13 has no ``dump_tensor_hashes``: :func:`dump_tensor_hashes` writes the same
layout from the installed torch's call records.

What it lacks for a proven verdict (:data:`LACKS`): no shapes or dtypes, no order-sensitive digest,
no step or phase, and calls without a hash (``empty*``, views DebugMode skipped) are absent.
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Any

from forensics.core.errors import BadInput
from forensics.tracediff.traces import TensorDigest, TraceRecord

HEADER = re.compile(r"^Total captured tensor hash ops: (\d+)$")
BLOCK = re.compile(r"^\[(?P<module>.*)/op_(?P<n>\d+)_(?P<call>.+)\]$")
_LEAF = re.compile(r"\s*(?P<name>[^=]+?)=")
LACKS = (
    "an order-sensitive digest: hash_tensor is an XOR of the elements' bits, so equal inputs are a "
    "screen and an ORIGIN on it stays unproven (forensics trace records the digests that prove it)",
    "shapes and dtypes (hashes only): tensors are compared by their hash alone",
    "steps, autograd phase and operand strides: no step window, GEMMs named by their ATen op only (no site)",
    "calls without a hash (empty*, ops DebugMode does not hash): they are absent, so control flow among them is "
    "not seen",
    "the hash functions' names: an integer hash is read as hash_tensor (full), a float as norm (summary)",
)


def is_hash_dump(path: Path) -> bool:
    with open(path, "rb") as f:
        first = f.readline(4096).decode("utf-8", "replace").strip()
    return bool(HEADER.match(first))


def _json_safe(value: Any) -> Any:
    if hasattr(value, "item") and getattr(value, "numel", lambda: 0)() == 1:
        value = value.item()
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _leaves(tree: Any) -> list[tuple[str, Any]]:
    """``(keystr path, hash)`` of every hashed tensor of a log tree. The tree does not say which
    tuples are arguments and which are one tensor's several hashes (upstream records the paths at
    hash time), so this port is for one hash function: each number is a leaf."""
    from torch.utils._pytree import keystr, tree_flatten_with_path  # noqa: PLC0415

    flat, _ = tree_flatten_with_path(tree)
    return [(keystr(p) or "<root>", v) for p, v in flat if v is not None]


def dump_tensor_hashes(debug_mode: Any, path: str | Path, include_inputs: bool = True) -> Path:
    """Write ``debug_mode``'s tensor hashes as upstream's ``dump_tensor_hashes`` text (never
    overwrites): torch's own method when this build has it, else the same layout from the call
    records (module context from ``record_nn_module``'s annotations)."""
    path = Path(path)
    if hasattr(type(debug_mode), "dump_tensor_hashes"):
        if path.exists():
            raise FileExistsError(path)
        debug_mode.dump_tensor_hashes(str(path), include_inputs=include_inputs)
        return path
    from torch.utils._debug_mode import _get_call_name  # noqa: PLC0415

    blocks: list[str] = []
    stack: list[tuple[int, str]] = []
    counters: Counter = Counter()
    for i, call in enumerate(debug_mode.operators):
        while stack and stack[-1][0] >= call.call_depth:
            stack.pop()
        module = stack[-1][1] if stack else "<none>"
        kind = type(call).__name__
        if kind == "_AnnotateCall" and isinstance(call.header, str) and call.header.startswith("nn.Mod"):
            stack.append((call.call_depth, str(call.tag)))
        if kind == "_TritonKernelCall":
            ins = list((call.pre_hashes or {}).items()) if include_inputs else []
            outs = list((call.post_hashes or {}).items())
            call_type = "triton kernel"
        elif kind == "_OpCall":
            log = call.log or {}
            ins = _leaves(log["input_hash"]) if include_inputs and "input_hash" in log else []
            outs = _leaves(log["hash"]) if "hash" in log else []
            call_type = "torch op"
        else:
            continue
        if not ins and not outs:
            continue
        name = _get_call_name(call)
        lines = [f"[{module}/op_{counters[module]}_{name}]", f"  Call type: {call_type}", f"  Call index: {i}",
                 f"  Call depth: {call.call_depth}"]
        counters[module] += 1
        for label, leaves in (("Input", ins), ("Output", outs)):
            if leaves:
                lines.append(f"  {label} hashes: " + ", ".join(
                    f"{k}=" + json.dumps(_json_safe(v), allow_nan=False, sort_keys=True) for k, v in leaves))
        blocks.append("\n".join(lines) + "\n\n")
    with open(path, "x", encoding="utf-8") as f:
        f.write(f"Total captured tensor hash ops: {len(blocks)}\n" + "=" * 80 + "\n\n" + "".join(blocks))
    return path


def _hashes(text: str, path: Path, no: int) -> list[tuple[str, Any]]:
    """``a=1, [0][1]=[2, 3.5]`` -> [("a", 1), ("[0][1]", [2, 3.5])]."""
    out, pos, dec = [], 0, json.JSONDecoder()
    while pos < len(text):
        m = _LEAF.match(text, pos)
        if not m:
            raise BadInput(path, f"hash list: expected NAME=VALUE at column {pos + 1}", no)
        try:
            value, end = dec.raw_decode(text, m.end())
        except json.JSONDecodeError as e:
            raise BadInput(path, f"hash of {m.group('name')}: not a JSON value ({e.msg})", no) from None
        out.append((m.group("name"), value))
        pos = end
        if text.startswith(", ", pos):
            pos += 2
        elif pos < len(text):
            raise BadInput(path, f"hash list: expected ', ' at column {pos + 1}", no)
    return out


def _digest(value: Any) -> TensorDigest:
    vals = value if isinstance(value, list) else [value]
    full = [v for v in vals if isinstance(v, int) and not isinstance(v, bool)]
    if full:
        return TensorDigest(digest=str(full[0]), evidence="full")
    return TensorDigest(digest="norm:" + repr(vals[0]), evidence="summary")


def read_hash_dump(path: Path, rank: int, record: Any, op_name: Any, write_only: Any) -> list[TraceRecord]:
    """Records of a dump_tensor_hashes file (``record``/``op_name``/``write_only`` from the
    DebugMode reader, so the three DebugMode forms name and count ops alike)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeError) as e:
        raise BadInput(path, f"cannot read: {e}") from None
    m = HEADER.match(lines[0].strip()) if lines else None
    if not m:
        raise BadInput(path, "not a DebugMode dump_tensor_hashes file: no 'Total captured tensor hash ops' line", 1)
    declared = int(m.group(1))
    records: list[TraceRecord] = []
    counts: Counter = Counter()
    block: dict[str, Any] | None = None

    def close() -> None:
        if block is None:
            return
        if "index" not in block:
            raise BadInput(path, "block without a 'Call index' line", block["line"])
        call = block["call"]
        name = f"triton.{call}" if block.get("type") == "triton kernel" else op_name(call)
        inputs = [_digest(v) for _, v in block.get("in", [])] or [TensorDigest(evidence="metadata")]
        if write_only.match(name) and block.get("in"):
            inputs = [TensorDigest(evidence="metadata"), *inputs[1:]]
        outputs = [_digest(v) for _, v in block.get("out", [])]
        if records and block["index"] <= records[-1].seq:
            raise BadInput(path, f"call index {block['index']} does not increase", block["line"])
        records.append(record(rank, block["index"], name, counts, step=None, inputs=inputs, outputs=outputs,
                              source=f"{path}:{block['line']}",
                              extra={"depth": block.get("depth"), "module": block["module"],
                                     "input_paths": [k for k, _ in block.get("in", [])]}))

    for no, raw in enumerate(lines[1:], 2):
        text = raw.strip()
        if not text or set(text) == {"="}:
            continue
        head = BLOCK.match(text)
        if head:
            close()
            block = {"line": no, "module": head.group("module"), "call": head.group("call")}
            continue
        if block is None or not raw.startswith("  ") or ": " not in text:
            raise BadInput(path, f"not a dump_tensor_hashes line: {text[:60]!r}", no)
        key, value = text.split(": ", 1)
        if key == "Call type":
            block["type"] = value
        elif key in ("Call index", "Call depth"):
            if not value.isdigit():
                raise BadInput(path, f"{key} {value!r} is not an integer", no)
            block["index" if key == "Call index" else "depth"] = int(value)
        elif key in ("Input hashes", "Output hashes"):
            block["in" if key.startswith("Input") else "out"] = _hashes(value, path, no)
        else:
            raise BadInput(path, f"unknown field {key!r}", no)
    close()
    if not records:
        raise BadInput(path, "no hashed call in this dump", 1)
    if len(records) != declared:
        raise BadInput(path, f"the header declares {declared} op(s), the file holds {len(records)} (truncated?)", 1)
    return records
