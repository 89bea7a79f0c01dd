"""Reader of PyTorch DebugMode hash output (``torch.utils._debug_mode.DebugMode``, prototype).

Two ways to save a run, one file per rank with ``rank<R>`` in its name (``debugmode.rank0.jsonl``,
``rank1.txt``...), either alone or in one directory:

* **structured** (preferred): :func:`capture` (DebugMode + ``log_tensor_hashes`` + a record hook
  for phase and GEMM operand strides), then :func:`dump` writes JSONL: a header line
  (``"forensics_debugmode": 1``, torch version, rank, step, hash functions, argv) and one line per
  call (op, depth, args/output strings, ``hash``, ``input_hash``, ``record``). Existing files are
  never overwritten.
* **text**: ``open(path, "x").write(debug_mode.debug_string())``; each line is
  ``aten::op(args)  ->  out  # {'input_hash': ..., 'hash': ...}``. No step, phase or strides.
* **save_logs JSON**: PyTorch's portable ``DebugMode.save_logs(logs, path)`` (pytorch#185010): one
  JSON object ``{"format", "version": 1, "logs": [call, ...]}``, each call ``{"type": "op",
  "call_depth", "op_name", "args_str", "kwargs_str", "output_str", "log", ...}`` with ``log`` a typed
  value tree (``{"type": "dict", "items": [[key, value], ...]}``, ``scalar``, ``tuple``, ``list``,
  ``nonfinite_float``). Torch builds without ``save_logs`` (2.13 has none) write the same layout with
  :func:`save_logs`. No step, phase, strides or hash-function names.

Evidence: a ``hash_tensor`` digest (``torch.hash_tensor`` over the float64/int64 up-cast bits, an
order-independent XOR: every element's bits count) is **full**; a ``norm`` hash (float64 L1 norm)
is **summary** (it can differ for equal tensors when the norm's own reduction order changes, and
be equal for different ones); an op logged without hashes is **metadata**. Inputs not hashed
(``hash_inputs=False``) are *not observed*: the differ can call such an op only an unproven origin.
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import json
import math
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import msgspec

from forensics.core.errors import BadInput, Unavailable
from forensics.core.ops import GEMM_2D, aten_packet
from forensics.core.site import gemm_meta_from_strides
from forensics.runtime.inputs import loads_json
from forensics.tracediff.traces import Reader, TensorDigest, Trace, TraceRecord, register_reader
from forensics.tracediff.traces import _debugmode_hashes as hashes

FORMAT = "debugmode"
HEADER_KEY = "forensics_debugmode"
VERSION = 1
_RANK = re.compile(r"rank[_-]?(\d+)")
_TENSOR = re.compile(r"\b(?:dt|ft|t)(?:\$\d+)?: ([a-z0-9]+)\[([^\]]*)\]")
_OP_LINE = re.compile(r"^(?P<indent> *)(?P<op>[A-Za-z_][\w.]*(?:::[\w.]+)?)\((?P<rest>.*)$")
_NONFINITE = re.compile(r"(?<![\w.'\"])(-?)(nan|inf)(?![\w.'\"])")
DTYPES = {"f16": "float16", "f32": "float32", "f64": "float64", "bf16": "bfloat16", "i8": "int8", "i16": "int16",
          "i32": "int32", "i64": "int64", "u8": "uint8", "b8": "bool", "c64": "complex64", "c128": "complex128"}
NOT_OBSERVED = TensorDigest(evidence="metadata")


# --------------------------------------------------------------------------- producing (needs torch)

def features() -> dict[str, bool]:
    """What the installed torch's DebugMode offers (feature detection, no side effects)."""
    try:
        import torch  # noqa: PLC0415
        from torch.utils._debug_mode import DebugMode  # noqa: PLC0415
    except ImportError:
        return {"debug_mode": False}
    params = inspect.signature(DebugMode.__init__).parameters
    return {
        "debug_mode": True,
        "log_tensor_hashes": hasattr(DebugMode, "log_tensor_hashes"),
        "hash_inputs": hasattr(DebugMode, "log_tensor_hashes")
        and "hash_inputs" in inspect.signature(DebugMode.log_tensor_hashes).parameters,
        "hash_tensor": hasattr(torch, "hash_tensor"),
        "dispatch_hooks": hasattr(DebugMode, "dispatch_hooks"),
        "record_output": "record_output" in params,
        "record_ids": "record_ids" in params,
        "check_hash_mismatches": hasattr(DebugMode, "check_hash_mismatches"),
        "operators": True,
    }


def _phase_and_strides(func: Any, types: Any, args: Any, kwargs: Any, result: Any) -> dict[str, Any]:
    """Record hook: autograd phase, and operand shapes/strides of GEMM-like ops."""
    import torch  # noqa: PLC0415

    out: dict[str, Any] = {"phase": "backward" if torch._C._current_autograd_node() is not None else "forward"}
    if aten_packet(str(func)) in GEMM_2D:
        out["operands"] = [[list(a.shape), list(a.stride())] for a in args if isinstance(a, torch.Tensor)]
    return out


@contextlib.contextmanager
def capture(hash_fn: str | list[str] = "hash_tensor", hash_inputs: bool = True, **debug_mode_kwargs: Any):
    """``with capture() as dm: step()`` then ``dump(dm, path)``: DebugMode with tensor hashes."""
    feats = features()
    if not feats.get("debug_mode") or not feats.get("log_tensor_hashes"):
        raise Unavailable("this torch has no torch.utils._debug_mode.DebugMode.log_tensor_hashes (PyTorch >= 2.10)")
    wanted = [hash_fn] if isinstance(hash_fn, str) else list(hash_fn)
    if "hash_tensor" in wanted and not feats.get("hash_tensor"):
        raise Unavailable("this torch has no torch.hash_tensor; use hash_fn='norm' (summary evidence only)")
    from torch.utils._debug_mode import DebugMode  # noqa: PLC0415

    hooks = DebugMode.dispatch_hooks(record_hook=_phase_and_strides) if feats.get("dispatch_hooks") else contextlib.nullcontext()
    hash_kw = {"hash_inputs": hash_inputs} if feats.get("hash_inputs") else {}
    with DebugMode(**debug_mode_kwargs) as dm, DebugMode.log_tensor_hashes(hash_fn=hash_fn, **hash_kw), hooks:
        dm._forensics_hash_fn = wanted  # noqa: SLF001 (remembered for dump)
        yield dm


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, (tuple, list)):
        return [_jsonable(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, float) and obj != obj:
        return "nan"
    if isinstance(obj, float) and obj in (float("inf"), float("-inf")):
        return "inf" if obj > 0 else "-inf"
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return str(obj)


def _argv() -> list[str]:
    """The command that ran (``python script.py ...`` when a script was run)."""
    argv = list(sys.argv)
    return ["python", *argv] if argv and argv[0].endswith(".py") else argv


def dump(debug_mode: Any, path: str | Path, *, rank: int = 0, step: int | None = None,
         hash_fn: str | list[str] | None = None) -> Path:
    """Write ``debug_mode.operators`` as JSONL (never overwrites an existing file)."""
    import torch  # noqa: PLC0415

    path = Path(path)
    fns = hash_fn if hash_fn is not None else getattr(debug_mode, "_forensics_hash_fn", ["hash_tensor"])
    fns = [fns] if isinstance(fns, str) else list(fns)
    header = {HEADER_KEY: VERSION, "torch": torch.__version__, "rank": rank, "step": step, "hash_fn": fns,
              "argv": _argv(), "features": features()}
    with open(path, "x", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for i, call in enumerate(debug_mode.operators):
            kind = type(call).__name__
            row: dict[str, Any] = {"i": i, "type": kind, "depth": call.call_depth}
            if hasattr(call, "op"):
                row["op"] = str(call.op)
                row["args"] = (call.args_str or "") + (call.kwargs_str or "") if call.args_str is not None else None
            elif hasattr(call, "kernel_name"):
                row["op"] = f"triton.{call.kernel_name}"
                row["args"] = call.kwargs_str
            else:
                row["op"] = call.render([])
            row["out"] = (getattr(call, "output_str", None) or "").replace("  ->  ", "", 1) or None
            log = getattr(call, "log", None) or {}
            if "hash" in log:
                row["hash"] = _jsonable(log["hash"])
            if "input_hash" in log:
                row["input_hash"] = _jsonable(log["input_hash"])
            for key in ("pre_hashes", "post_hashes"):
                if getattr(call, key, None):
                    row[key] = _jsonable(getattr(call, key))
            rec = getattr(call, "record", None)
            if isinstance(rec, dict):
                row["record"] = {k: v for k, v in rec.items() if k in ("phase", "operands")}
            f.write(json.dumps(row) + "\n")
    return path


#: The envelope's ``format`` that :func:`save_logs` writes when torch has no ``DebugMode.save_logs``.
#: The call layout follows upstream's ``torch/utils/_debug_mode/_calls.py`` (``_serialize_debug_call``);
#: this string is inferred (the stored upstream ``_mode.py`` predates save_logs; a port of it writes
#: ``<package>.utils._debug_mode.DebugMode.logs``). The reader accepts any ``format`` naming DebugMode.
SAVE_LOGS_FORMAT = "torch.utils._debug_mode.DebugMode.logs"
SAVE_LOGS_VERSION = 1


def _serialised(value: Any) -> dict[str, Any]:
    """A value as upstream's ``_serialize_debug_value`` writes it (strict JSON, types kept)."""
    if value is None or isinstance(value, (bool, int, str)):
        return {"type": "scalar", "value": value}
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return {"type": "nonfinite_float", "value": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
        return {"type": "scalar", "value": value}
    if isinstance(value, (tuple, list)):
        return {"type": type(value).__name__, "items": [_serialised(v) for v in value]}
    if isinstance(value, dict):
        return {"type": "dict", "items": [[str(k), _serialised(v)] for k, v in value.items()]}
    if hasattr(value, "item"):  # a 0-dim tensor a custom hash function returned
        return _serialised(value.item())
    raise TypeError(f"DebugMode log value of type {type(value).__name__} cannot be saved")


def save_logs(debug_mode: Any, path: str | Path) -> Path:
    """Write ``debug_mode.logs`` as PyTorch's ``DebugMode.save_logs`` JSON (never overwrites).

    Torch's own ``DebugMode.save_logs`` when this build has it; otherwise the same layout written
    here from the installed torch's call records (op calls, Triton kernels, annotations; other
    call kinds are written as annotations of their rendered text).
    """
    path = Path(path)
    cls = type(debug_mode)
    logs = list(debug_mode.operators)
    if hasattr(cls, "save_logs"):
        with open(path, "x", encoding="utf-8") as f:
            cls.save_logs(logs, f)
        return path
    calls = []
    for call in logs:
        row: dict[str, Any] = {"call_depth": call.call_depth,
                               "log": _serialised(call.log) if getattr(call, "log", None) is not None else None,
                               "output_str": getattr(call, "output_str", None),
                               "stack_trace": getattr(call, "stack_trace", None),
                               "fwd_stack_trace": getattr(call, "fwd_stack_trace", None)}
        kind = type(call).__name__
        if kind == "_OpCall":
            from torch.utils._debug_mode import _get_call_name  # noqa: PLC0415

            row.update({"type": "op", "op_name": _get_call_name(call), "args_str": call.args_str or "",
                        "kwargs_str": call.kwargs_str or ""})
        elif kind == "_TritonKernelCall":
            row.update({"type": "triton_kernel", "kernel_name": call.kernel_name, "kwargs_str": call.kwargs_str or "",
                        "pre_hashes": None if call.pre_hashes is None else _serialised(call.pre_hashes),
                        "post_hashes": None if call.post_hashes is None else _serialised(call.post_hashes)})
        else:
            row.update({"type": "annotate", "tag": call.render([]), "header": kind})
        calls.append(row)
    data = {"format": SAVE_LOGS_FORMAT, "version": SAVE_LOGS_VERSION, "logs": calls}
    with open(path, "x", encoding="utf-8") as f:
        json.dump(data, f, allow_nan=False)
        f.write("\n")
    return path


# --------------------------------------------------------------------------- hashes -> digests

def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) or x in ("nan", "inf", "-inf")


def _leaves(tree: Any, n_fns: int | None) -> list[Any]:
    """One entry per hashed tensor: a number, or a tuple of numbers (one per hash function)."""
    if tree is None:
        return []
    if _is_num(tree):
        return [tree]
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in _leaves(v, n_fns)]
    if isinstance(tree, (list, tuple)):
        nums = [x for x in tree if _is_num(x)]
        mixed = any(isinstance(x, int) for x in nums) and any(isinstance(x, float) for x in nums)
        if tree and len(nums) == len(tree) and (mixed or (n_fns is not None and n_fns > 1 and len(tree) == n_fns)):
            return [tuple(tree)]
        return [leaf for v in tree for leaf in _leaves(v, n_fns)]
    return []


def _digest(leaf: Any, meta: tuple[str | None, tuple[int, ...] | None], fns: list[str] | None) -> TensorDigest:
    """hash_tensor (int) -> full; norm (float) -> summary."""
    dtype, shape = meta
    vals = list(leaf) if isinstance(leaf, tuple) else [leaf]
    names = fns if fns and len(fns) == len(vals) else [("hash_tensor" if isinstance(v, int) else "norm") for v in vals]
    full = [v for v, n in zip(vals, names) if n == "hash_tensor"]
    if full:
        return TensorDigest(shape=shape, dtype=dtype, digest=str(full[0]), evidence="full")
    return TensorDigest(shape=shape, dtype=dtype, digest="norm:" + repr(vals[0]), evidence="summary")


def _tensor_meta(text: str | None) -> list[tuple[str | None, tuple[int, ...] | None]]:
    out = []
    for abbr, dims in _TENSOR.findall(text or ""):
        try:
            shape = tuple(int(d) for d in dims.split(",") if d.strip())
        except ValueError:  # symbolic sizes
            shape = None
        out.append((DTYPES.get(abbr, abbr), shape))
    return out


def _tensors(tree: Any, text: str | None, fns: list[str] | None) -> list[TensorDigest]:
    leaves = _leaves(tree, len(fns) if fns else None)
    meta = _tensor_meta(text)
    if len(meta) != len(leaves):
        meta = [(None, None)] * len(leaves)
    return [_digest(leaf, m, fns) for leaf, m in zip(leaves, meta)]


def _text_unread(path: Path) -> int:
    """Calls whose args/out text names another number of tensors than their hashes hold: the reader
    then compares those tensors without shape and dtype (a tolerance: run_info says how many, and
    diff warns when two runs differ in it)."""
    n = 0
    with open(path, encoding="utf-8", errors="replace") as f:
        f.readline()
        for line in f:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if not isinstance(obj, dict):
                continue
            fns = None
            for key, text_key in (("hash", "out"), ("input_hash", "args")):
                if key in obj and not isinstance(obj.get(text_key), (str, type(None))):
                    continue
                leaves = _leaves(obj.get(key), fns) if key in obj else []
                if leaves and len(_tensor_meta(obj.get(text_key))) != len(leaves):
                    n += 1
                    break
    return n


def _hashed(obj: dict, key: str, text_key: str, fns: list[str] | None, path: Path, line: int) -> list[TensorDigest]:
    """:func:`_tensors` of one call's hash tree, refusing a tree that cannot be the tensors' hashes:
    none at all for the tensors the call's text names (``hash: []``), or a ``hash_tensor`` value
    that is not an integer (a full digest read from 1.5 or "inf" would compare as if it were one)."""
    digests = _tensors(obj[key], obj.get(text_key), fns)
    named = len(_tensor_meta(obj.get(text_key)))
    if not digests and named and (obj[key] is None or isinstance(obj[key], (list, dict)) and not obj[key]):
        raise BadInput(path, f"{key}: {json.dumps(obj[key])}, but {text_key} names {named} tensor(s)", line)
    n = len(fns) if fns else None
    for leaf in _leaves(obj[key], n):
        vals = list(leaf) if isinstance(leaf, tuple) else [leaf]
        # the names _digest gives: the header's hash functions, else an integer is a hash_tensor value
        names = fns if fns and len(fns) == len(vals) else [
            "hash_tensor" if isinstance(v, int) else "norm" for v in vals]
        bad = next((v for v, f in zip(vals, names) if f == "hash_tensor" and not (
            isinstance(v, int) and -(1 << 63) <= v < (1 << 64))), None)
        if bad is not None:
            raise BadInput(path, f"{key}: a hash_tensor digest must be a 64-bit integer, not {bad!r}", line)
    return digests


def _unhashed(text: str | None) -> list[TensorDigest]:
    return [TensorDigest(shape=s, dtype=d, evidence="metadata") for d, s in _tensor_meta(text)]


def op_name(raw: str) -> str:
    """``aten::mm`` -> ``aten.mm.default``; ``aten::mul.Tensor`` -> ``aten.mul.Tensor``."""
    if "::" not in raw:
        return raw
    ns, rest = raw.split("::", 1)
    return f"{ns}.{rest}" if "." in rest else f"{ns}.{rest}.default"


def _record(rank: int, seq: int, name: str, counts: Counter, *, step: int | None, inputs: list[TensorDigest],
            outputs: list[TensorDigest], source: str, extra: dict[str, Any], phase: str | None = None) -> TraceRecord:
    counts[name] += 1
    ops = extra.get("operands")
    gemm = gemm_meta_from_strides(name, ops, phase) if isinstance(ops, list) and phase else None
    if gemm:
        extra["gemm"] = gemm
    return TraceRecord(rank=rank, seq=seq, identity=f"{name}:{counts[name]}", name=name,
                       kind="triton" if name.startswith("triton.") else "op", step=step, phase=phase,
                       inputs=inputs, outputs=outputs, source=source, extra=extra)


# --------------------------------------------------------------------------- the border: typed lines
_Count = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]


class DumpHeader(msgspec.Struct):
    """The first line of a :func:`dump` file (fields the reader uses, typed; others pass through)."""

    forensics_debugmode: int
    torch: str | None = None
    rank: Annotated[int, msgspec.Meta(ge=0, le=(1 << 31) - 1)] | None = None
    step: _Count | None = None
    hash_fn: str | list[str] | None = None
    argv: list[str] | None = None
    features: dict[str, bool] | None = None


class CallRecord(msgspec.Struct):
    """The record hook's fields: autograd phase, and a GEMM's operand [shape, strides] pairs."""

    phase: str | None = None
    operands: list[Annotated[list[list[int]], msgspec.Meta(min_length=2, max_length=2)]] | None = None


class DumpCall(msgspec.Struct):
    """One call line of a :func:`dump` file; the hash trees are checked by :func:`_check_hashes`."""

    i: _Count
    op: str
    type: str | None = None
    depth: int | None = None
    args: str | None = None
    out: str | None = None
    record: CallRecord | None = None
    pre_hashes: dict[str, Any] | None = None
    post_hashes: dict[str, Any] | None = None


def _typed(obj: dict, schema: type, path: Path, line: int) -> None:
    """BadInput naming the line and the field when ``obj`` breaks ``schema``."""
    try:
        msgspec.convert(obj, schema)
    except msgspec.ValidationError as e:
        what, _, at = str(e).partition(" - at `$")
        field = at.rstrip("`").lstrip(".") or "the line"
        raise BadInput(path, f"{field}: {what[:1].lower()}{what[1:].replace('`', '')}", line) from None


def _check_hashes(tree: Any, key: str, path: Path, line: int, n_fns: int) -> None:
    """A hash tree holds lists, objects, null and hash values (numbers; "nan"/"inf"/"-inf" for a norm);
    one tensor's values under several hash functions are all there (a null among them would make
    the others read as another tensor's). Objects hold keyword arguments: an op's output (``hash``)
    is a tensor, or a list or tuple of them, never an object (``{"a": 1}`` would read as a digest 1)."""
    stack = [tree]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if key == "hash":
                raise BadInput(path, f"{key}: an op's output hashes are a value or a list, not an object "
                                     f"{json.dumps(v)[:80]}", line)
            stack.extend(v.values())
        elif isinstance(v, list):
            if n_fns > 1 and len(v) == n_fns and None in v and any(_is_num(x) for x in v) \
                    and all(x is None or _is_num(x) for x in v):
                raise BadInput(path, f"{key}: null among one tensor's {n_fns} hash values {json.dumps(v)}", line)
            stack.extend(v)
        elif v is not None and not _is_num(v):
            raise BadInput(path, f"{key}: {v!r} is not a hash value (a number, or 'nan'/'inf' for a norm)", line)


def _input_tree(tree: Any, path: Path, line: int) -> Any:
    """``input_hash`` is the call's (args, kwargs) pair of hash trees (``[[...], {...}]``); a bare
    object there (``{"a": 1}``) would read as one input tensor and turn an ORIGIN into a receiver."""
    if isinstance(tree, dict):
        raise BadInput(path, f"input_hash: an op's input hashes are its (args, kwargs) pair, not an object "
                             f"{json.dumps(tree, default=str)[:80]}", line)
    return tree


# --------------------------------------------------------------------------- reading

def _first_line(path: Path) -> str:
    with open(path, "rb") as f:
        for raw in f:
            if raw.strip():
                return raw[:65536].decode("utf-8", "replace")
    return ""


def _is_structured(path: Path) -> bool:
    return f'"{HEADER_KEY}"' in _first_line(path)


def _rank_of(path: Path, default: int = 0) -> int:
    m = _RANK.search(path.name)
    return int(m.group(1)) if m else default


def _line_json(line: str, path: Path, no: int) -> Any:
    """Strict JSON (no NaN/Infinity: the dump writes a non-finite norm as text), nesting bounded."""
    try:
        return loads_json(line, path, no)
    except BadInput as e:
        if e.message.startswith(("truncated JSON", "malformed JSON", "trailing data")):
            what = "truncated line" if not line.endswith("\n") else "corrupt line"
            raise BadInput(path, f"{what}: not JSON ({e.message})", no) from None
        raise


def read_structured(path: Path) -> tuple[dict[str, Any], list[TraceRecord]]:
    """Header and records of a :func:`dump` file; BadInput with file:line on anything malformed."""
    path = Path(path)
    records: list[TraceRecord] = []
    counts: Counter = Counter()
    header: dict[str, Any] | None = None
    hashed = 0
    try:
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    except (OSError, UnicodeError) as e:
        raise BadInput(path, f"cannot read: {e}") from None
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        obj = _line_json(line, path, no)
        if not isinstance(obj, dict):
            raise BadInput(path, "corrupt line: not a JSON object", no)
        if header is None:
            if obj.get(HEADER_KEY) is None:
                raise BadInput(path, f"foreign file: first line is not a {HEADER_KEY} header", no)
            if obj[HEADER_KEY] != VERSION:
                raise BadInput(path, f"{HEADER_KEY} version {obj[HEADER_KEY]!r}; this reader reads version {VERSION}", no)
            _typed(obj, DumpHeader, path, no)
            header = obj
            continue
        if HEADER_KEY in obj:
            raise BadInput(path, "second header (two dumps concatenated?)", no)
        if not isinstance(obj.get("op"), str) or not isinstance(obj.get("i"), int):
            raise BadInput(path, "call line lacks 'op' or 'i'", no)
        _typed(obj, DumpCall, path, no)
        n_fns = len(header["hash_fn"]) if isinstance(header.get("hash_fn"), list) else 1
        for key in ("hash", "input_hash", "pre_hashes", "post_hashes"):
            _check_hashes(obj.get(key), key, path, no, n_fns)
        _input_tree(obj.get("input_hash"), path, no)
        if records and obj["i"] <= records[-1].seq:
            raise BadInput(path, f"call index {obj['i']} does not increase", no)
        fns = header.get("hash_fn")
        rec_meta = obj.get("record") if isinstance(obj.get("record"), dict) else {}
        extra: dict[str, Any] = {"depth": obj.get("depth"), "call_type": obj.get("type"), "args": obj.get("args"),
                                 "out": obj.get("out")}
        if rec_meta.get("operands"):
            extra["operands"] = rec_meta["operands"]
        if "pre_hashes" in obj or "post_hashes" in obj:  # Inductor Triton kernel: hashes by argument name
            inputs = [_digest(v, (None, None), fns) for v in (obj.get("pre_hashes") or {}).values()] or [NOT_OBSERVED]
            outputs = [_digest(v, (None, None), fns) for v in (obj.get("post_hashes") or {}).values()]
        else:
            outputs = _hashed(obj, "hash", "out", fns, path, no) if "hash" in obj else _unhashed(obj.get("out"))
            inputs = _hashed(obj, "input_hash", "args", fns, path, no) if "input_hash" in obj else [NOT_OBSERVED]
        hashed += "hash" in obj or "post_hashes" in obj
        name = obj["op"] if obj.get("type") != "_OpCall" else op_name(obj["op"])
        records.append(_record(int(header.get("rank") or 0), obj["i"], name, counts, step=header.get("step"),
                               inputs=inputs, outputs=outputs, source=f"{path}:{no}", extra=extra,
                               phase=rec_meta.get("phase")))
    if header is None:
        raise BadInput(path, "empty file: no DebugMode dump header")
    if not records:
        raise BadInput(path, "no calls recorded after the header (DebugMode saw no op?)")
    if not hashed:
        raise BadInput(path, "no tensor hashes: record under DebugMode.log_tensor_hashes() (forensics.tracediff.traces.debugmode.capture)")
    return header, records


def _split_line(body: str) -> tuple[str, str, str | None, str | None]:
    """``op(args)  ->  out  # {log}`` -> (op, args, out, log)."""
    log = None
    cut = body.rfind("  # {")
    if cut >= 0:
        body, log = body[:cut], body[cut + 4:]
    out = None
    arrow = body.rfind(")  ->  ")
    if arrow >= 0:
        body, out = body[:arrow + 1], body[arrow + 7:]
    m = _OP_LINE.match(body)
    if not m or not body.endswith(")"):
        raise ValueError("not a DebugMode call line")
    return m.group("op"), m.group("rest")[:-1], out, log


def _literal(text: str) -> Any:
    return ast.literal_eval(_NONFINITE.sub(lambda m: repr(m.group(1) + m.group(2)), text))


def read_text(path: Path, rank: int | None = None) -> list[TraceRecord]:
    """Records of a ``debug_string()`` text dump; BadInput with file:line on a line it cannot read."""
    path = Path(path)
    rank = _rank_of(path) if rank is None else rank
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeError) as e:
        raise BadInput(path, f"cannot read: {e}") from None
    records: list[TraceRecord] = []
    counts: Counter = Counter()
    hashed = 0
    for no, line in enumerate(lines, 1):
        body = line.strip()
        if not body or body.startswith("# File:") or body.startswith("[annotate]") or body.startswith("-> output:"):
            continue
        if body.startswith("# pre-kernel hashes:") or body.startswith("# post-kernel hashes:"):
            continue  # Inductor kernel hashes: the kernel line itself is kept as metadata
        if body.startswith("[triton] "):
            name = "triton." + body[len("[triton] "):].split("(", 1)[0]
            records.append(_record(rank, no, name, counts, step=None, inputs=[NOT_OBSERVED], outputs=[],
                                   source=f"{path}:{no}", extra={"depth": None}))
            continue
        try:
            op, args, out, log = _split_line(body)
            logd = _literal(log) if log else {}
            if not isinstance(logd, dict):
                raise ValueError("annotation is not a dict")
        except (ValueError, SyntaxError) as e:
            raise BadInput(path, f"not a DebugMode debug_string() line ({e})", no) from None
        name = op_name(op)
        outputs = _tensors(logd["hash"], out, None) if "hash" in logd else _unhashed(out)
        inputs = _tensors(_input_tree(logd["input_hash"], path, no), args, None) if "input_hash" in logd \
            else [NOT_OBSERVED]
        hashed += "hash" in logd
        depth = (len(line) - len(line.lstrip(" ")) - 2) // 2
        records.append(_record(rank, no, name, counts, step=None, inputs=inputs, outputs=outputs,
                               source=f"{path}:{no}", extra={"depth": depth, "args": args, "out": out}))
    if not records:
        raise BadInput(path, "empty: no DebugMode call lines")
    if not hashed:
        raise BadInput(path, "no tensor hashes in this debug_string(): record under DebugMode.log_tensor_hashes()")
    return records


#: What a save_logs file cannot say, stated with every verdict resting on one (diff's warnings).
SAVE_LOGS_LACKS = (
    "an order-sensitive digest: hash_tensor is an XOR of the elements' bits, so equal inputs are a "
    "screen and an ORIGIN on it stays unproven (forensics trace records the digests that prove it)",
    "steps, autograd phase and operand strides: no step window, GEMMs named by their ATen op only (no site)",
    "the hash functions' names: an integer hash is read as hash_tensor (full), a float as norm (summary)",
)
#: In-place ops whose result does not read the destination's old bits (DebugMode does not hash what
#: empty* allocated, so those bits would read as an input difference): the destination is kept as
#: shape and dtype only. ``copy_``'s source and ``fill_``'s value stay inputs.
WRITE_ONLY = re.compile(r"^aten\.(uniform_|normal_|random_|exponential_|geometric_|log_normal_|cauchy_|fill_|"
                        r"zero_|copy_)\.")
_SAVED_LOGS = re.compile(r'"logs"\s*:\s*\[\s*(?:\]|\{)')


def _is_saved_logs(path: Path) -> bool:
    """A save_logs file: one JSON object with a ``logs`` list (and a format naming DebugMode)."""
    with open(path, "rb") as f:  # the file is one line: read its head only
        head = f.read(65536).decode("utf-8", "replace")
    return head.lstrip().startswith("{") and '"format"' in head and bool(_SAVED_LOGS.search(head)) \
        and HEADER_KEY not in head


def _untyped(value: Any, path: Path, where: str) -> Any:
    """Inverse of upstream's ``_serialize_debug_value``; non-finite floats come back as strings."""
    if not isinstance(value, dict):
        raise BadInput(path, f"{where}: a serialized value is not an object", 1)
    kind = value.get("type")
    if kind == "scalar":
        return value.get("value")
    if kind == "nonfinite_float":
        return str(value.get("value"))
    items = value.get("items")
    if kind in ("tuple", "list") and isinstance(items, list):
        out = [_untyped(v, path, where) for v in items]
        return tuple(out) if kind == "tuple" else out
    if kind == "dict" and isinstance(items, list):
        if not all(isinstance(i, list) and len(i) == 2 and isinstance(i[0], str) for i in items):
            raise BadInput(path, f"{where}: dict items are not [key, value] pairs", 1)
        return {k: _untyped(v, path, where) for k, v in items}
    raise BadInput(path, f"{where}: unknown serialized value type {kind!r}", 1)


def read_saved_logs(path: Path, rank: int | None = None) -> list[TraceRecord]:
    """Records of a ``DebugMode.save_logs`` JSON file; BadInput naming the file (and ``logs[i]``)."""
    path = Path(path)
    rank = _rank_of(path) if rank is None else rank
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise BadInput(path, f"not JSON ({e.msg}; truncated?)", e.lineno) from None
    except (OSError, UnicodeError) as e:
        raise BadInput(path, f"cannot read: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("logs"), list):
        raise BadInput(path, "not a DebugMode save_logs file: no 'logs' list", 1)
    if "DebugMode" not in str(data.get("format", "")):
        raise BadInput(path, f"foreign JSON: format {data.get('format')!r} is not DebugMode's logs", 1)
    if data.get("version") != SAVE_LOGS_VERSION:
        raise BadInput(path, f"DebugMode logs version {data.get('version')!r}; this reader reads version "
                             f"{SAVE_LOGS_VERSION}", 1)
    records: list[TraceRecord] = []
    counts: Counter = Counter()
    hashed = 0
    for i, call in enumerate(data["logs"]):
        where = f"logs[{i}]"
        if not isinstance(call, dict) or not isinstance(call.get("call_depth"), int):
            raise BadInput(path, f"{where}: a call without an integer call_depth", 1)
        kind = call.get("type")
        log = _untyped(call["log"], path, where) if call.get("log") is not None else {}
        if not isinstance(log, dict):
            raise BadInput(path, f"{where}: 'log' is not a dict", 1)
        for key in ("args_str", "kwargs_str", "output_str"):
            if call.get(key) is not None and not isinstance(call[key], str):
                raise BadInput(path, f"{where}.{key}: expected a string, got {type(call[key]).__name__}", 1)
        out = (call.get("output_str") or "").replace("  ->  ", "", 1) or None
        extra: dict[str, Any] = {"depth": call["call_depth"], "call_type": kind, "entry": where}
        if kind == "op":
            if not isinstance(call.get("op_name"), str):
                raise BadInput(path, f"{where}: an op call without op_name", 1)
            args = (call.get("args_str") or "") + (call.get("kwargs_str") or "")
            extra.update(args=args, out=out)
            name = op_name(call["op_name"])
            outputs = _tensors(log["hash"], out, None) if "hash" in log else _unhashed(out)
            inputs = _tensors(_input_tree(log["input_hash"], path, 1), args, None) if "input_hash" in log \
                else [NOT_OBSERVED]
            hashed += "hash" in log
            if WRITE_ONLY.match(name) and inputs and inputs[0] is not NOT_OBSERVED:
                inputs = [TensorDigest(shape=inputs[0].shape, dtype=inputs[0].dtype, evidence="metadata"), *inputs[1:]]
        elif kind == "triton_kernel":
            name = f"triton.{call.get('kernel_name')}"
            pre = _untyped(call["pre_hashes"], path, where) if call.get("pre_hashes") is not None else None
            post = _untyped(call["post_hashes"], path, where) if call.get("post_hashes") is not None else None
            inputs = [_digest(v, (None, None), None) for v in (pre or {}).values()] or [NOT_OBSERVED]
            outputs = [_digest(v, (None, None), None) for v in (post or {}).values()]
            hashed += post is not None
        elif kind in ("annotate", "redistribute", "output_placement"):
            continue  # structure, not a computation (as the text reader skips [annotate] lines)
        else:
            raise BadInput(path, f"{where}: unknown call type {kind!r}", 1)
        records.append(_record(rank, i, name, counts, step=None, inputs=inputs, outputs=outputs,
                               source=f"{path}:1 ({where})", extra=extra))
    if not records:
        raise BadInput(path, "no op calls in these DebugMode logs", 1)
    if not hashed:
        raise BadInput(path, "no tensor hashes in these DebugMode logs: record under DebugMode.log_tensor_hashes()", 1)
    return records


def rank_files(path: Path) -> dict[int, Path]:
    """``{rank: file}`` for one dump file or a directory of ``*rank<R>*`` dump files."""
    path = Path(path)
    if path.is_file():
        return {_rank_of(path): path}
    if not path.is_dir():
        raise BadInput(path, "no such file or directory")
    files: dict[int, Path] = {}
    for f in sorted(p for p in path.iterdir() if p.is_file() and _RANK.search(p.name) and _looks_like_dump(p)):
        r = _rank_of(f)
        if r in files:
            raise BadInput(f, f"second DebugMode dump for rank {r} (also {files[r].name})")
        files[r] = f
    if not files:
        raise BadInput(path, "no *rank<R>* DebugMode dump files here")
    return files


def _records(file: Path, rank: int) -> list[TraceRecord]:
    if hashes.is_hash_dump(file):
        return hashes.read_hash_dump(file, rank, _record, op_name, WRITE_ONLY)
    if _is_saved_logs(file):
        return read_saved_logs(file, rank)
    if _first_line(file).lstrip().startswith("{"):  # JSON: our dump (or a foreign JSON file)
        header, recs = read_structured(file)
        if header.get("rank") is not None and int(header["rank"]) != rank and _RANK.search(file.name):
            raise BadInput(file, f"header rank {header['rank']} contradicts the file name's rank {rank}", 1)
        return recs
    return read_text(file, rank)


def iter_ranks(path: Path) -> Iterator[tuple[int, Iterator[TraceRecord]]]:
    for rank, file in sorted(rank_files(Path(path)).items()):
        yield rank, iter(_records(file, rank))


def run_info(path: Path) -> dict[str, Any]:
    """From the lowest rank's structured header (argv, torch version, hash functions); {} for text."""
    files = rank_files(Path(path))
    first = files[min(files)]
    info: dict[str, Any] = {"producer": "torch.utils._debug_mode.DebugMode", "traced_ranks": sorted(files)}
    if hashes.is_hash_dump(first):
        info.update({"producer": "torch.utils._debug_mode.DebugMode.dump_tensor_hashes", "lacks": list(hashes.LACKS)})
    elif _is_saved_logs(first):
        info.update({"producer": "torch.utils._debug_mode.DebugMode.save_logs", "lacks": list(SAVE_LOGS_LACKS)})
    elif _is_structured(first):
        with open(first, encoding="utf-8") as f:
            header = _line_json(f.readline(), first, 1)
        if not isinstance(header, dict):
            raise BadInput(first, "header is not a JSON object", 1)
        _typed(header, DumpHeader, first, 1)
        info.update({"argv": header.get("argv"), "torch": header.get("torch"), "hash_fn": header.get("hash_fn")})
        info["tensor_text_unread"] = sum(_text_unread(f) for f in files.values() if _is_structured(f))
    return info


def read(path: Path) -> Trace:
    return Trace(format=FORMAT, path=Path(path), ranks={r: list(it) for r, it in iter_ranks(path)},
                 run_info=run_info(path))


def _first_call_line(path: Path, limit: int = 64) -> str:
    """The first line that is not blank, a stack-trace comment or an annotation."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f):
            text = raw[:65536].decode("utf-8", "replace").strip()
            if text and not text.startswith("#") and not text.startswith("[annotate]"):
                return text
            if n >= limit:
                break
    return ""


def _looks_like_dump(path: Path) -> bool:
    try:
        first = _first_call_line(path)
    except OSError:
        return False
    if f'"{HEADER_KEY}"' in first or _is_saved_logs(path) or hashes.is_hash_dump(path):
        return True
    body = first.strip()
    return bool(_OP_LINE.match(body)) and "::" in body.split("(", 1)[0] and (") " in body or body.endswith(")"))


def detect(path: Path) -> bool:
    path = Path(path)
    if path.is_file():
        return _looks_like_dump(path)
    if path.is_dir():
        return any(p.is_file() and _RANK.search(p.name) and _looks_like_dump(p) for p in sorted(path.iterdir())[:64])
    return False


READER = register_reader(Reader(name=FORMAT, detect=detect, read=read, iter_ranks=iter_ranks, run_info=run_info))
