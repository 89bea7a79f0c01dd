"""Reader of torchtitan's numerics activation logs (``--profiler.dump_numerics``), ``--format torchtitan``.

torchtitan's ``agent_tooling/numerics_debugging/activation_tracer.py`` (DebugMode underneath) writes
one ``rank_<R>_activations.log`` per rank (``{dump_folder}/numerics/``) for one captured step; its
``compare_numerics.py`` diffs two of them into HTML. The layout::

    Total captured activations: 14
    Excluded ops dispatched: detach, ones_like, t, view          (optional)
    ================================================================================

    [2/op_1_mm]                                                   module FQN / per-module counter _ op
      Shape: torch.Size([4096, 512]), Dtype: torch.float32
      L2 norm: 8.541635e-03
      Min: -1.486650e-05
      Max: 1.496042e-05
      Mean: 2.589503e-08
      Output hash: 1.052118e+01                                   float64 L1 norm, 7 digits
      Input hashes: 1.800396e+00, 1.122054e+02                    the same, of each input before the op
      Input producers: <none>/op_2__log_softmax_backward_data;    (not read)
      Location: models/attention.py:534
      Phase: backward                                             (absent: forward)

Mapping: one record per block in file order, named by the op as written (``mm``, ``add_``: no
namespace or overload), identity ``op:N`` counted per op; phase from ``Phase``; the output's
digest joins its norm hash and the Shape/Min/Max/L2/Mean stats (``summary`` evidence: it proves a
difference, never equality), each input's norm hash is a ``summary`` digest. What the format lacks
(:data:`LACKS`) is said with every verdict.
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from forensics.core.errors import BadInput
from forensics.tracediff.traces import Reader, TensorDigest, Trace, TraceRecord, register_reader

FORMAT = "torchtitan"
HEADER = re.compile(r"^Total captured activations: (\d+)$")
BLOCK = re.compile(r"^\[(?P<module>.*)/op_(?P<n>\d+)_(?P<op>[^\]]+)\]$")
_FILE = re.compile(r"^rank_(\d+)_activations\.log$")
_SHAPE = re.compile(r"^torch\.Size\(\[(?P<dims>[^\]]*)\]\), Dtype: torch\.(?P<dtype>\w+)$")
STATS = ("Shape", "L1 norm", "L2 norm", "Min", "Max", "Mean")
LACKS = (
    "a digest of the bits: only float64 L1 norms and Min/Max/L2/Mean printed to 7 significant digits, so a "
    "difference below that is not seen, equal values are never proven equal (every match is weak), and a norm "
    "of equal tensors can itself differ across thread counts (its own reduction order)",
    "the ops it excludes (views, copies, creation, cat, indexing, detach) and outputs under 1000 elements or "
    "not floating point: absent, so control flow among them is not seen",
    "the op's namespace and overload (mm, not aten.mm.default), steps (one captured step) and strides (no GEMM "
    "site)",
)


def rank_files(path: Path) -> dict[int, Path]:
    """``{rank: log}`` for one log, a folder of ``rank_<R>_activations.log`` or its ``numerics/``."""
    path = Path(path)
    if path.is_file():
        m = _FILE.match(path.name)
        return {int(m.group(1)) if m else 0: path}
    if not path.is_dir():
        raise BadInput(path, "no such file or directory")
    for where in (path, path / "numerics"):
        found = {int(m.group(1)): p for p in sorted(where.glob("rank_*_activations.log"))
                 if (m := _FILE.match(p.name))} if where.is_dir() else {}
        if found:
            return found
    raise BadInput(path, "no rank_<R>_activations.log here (nor under numerics/)")


def _shape(text: str) -> tuple[tuple[int, ...] | None, str | None]:
    m = _SHAPE.match(text)
    if not m:
        return None, None
    dims = m.group("dims").strip()
    try:
        return (tuple(int(d) for d in dims.split(",") if d.strip()) if dims else ()), m.group("dtype")
    except ValueError:
        return None, m.group("dtype")


def _hashes(text: str, path: Path, no: int) -> list[str]:
    vals = [v.strip() for v in text.split(",")] if text.strip() else []
    for v in vals:
        try:
            float(v)
        except ValueError:
            raise BadInput(path, f"hash {v!r} is not a number", no) from None
    return vals


def read_log(path: Path, rank: int = 0) -> list[TraceRecord]:
    """Records of one activations log; BadInput naming the file and line on anything malformed."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeError) as e:
        raise BadInput(path, f"cannot read: {e}") from None
    m = HEADER.match(lines[0].strip()) if lines else None
    if not m:
        raise BadInput(path, "not a torchtitan activations log: no 'Total captured activations' line", 1)
    declared = int(m.group(1))
    records: list[TraceRecord] = []
    counts: Counter = Counter()
    block: dict[str, Any] | None = None

    def close() -> None:
        if block is None:
            return
        stats = block["stats"]
        shape, dtype = _shape(stats.get("Shape", ""))
        out_hashes = block.get("out", [])
        outputs = []
        for i, h in enumerate(out_hashes):
            extra = "" if i else "".join(f"|{k}:{stats[k]}" for k in STATS[1:] if k in stats)
            outputs.append(TensorDigest(shape=shape if i == 0 else None, dtype=dtype if i == 0 else None,
                                        digest=f"norm:{h}{extra}", evidence="summary"))
        if not outputs and stats:
            outputs = [TensorDigest(shape=shape, dtype=dtype, evidence="summary",
                                    digest="stats:" + "|".join(f"{k}:{stats[k]}" for k in STATS[1:] if k in stats))]
        inputs = [TensorDigest(digest=f"norm:{h}", evidence="summary") for h in block.get("in", [])]
        op = block["op"]
        counts[op] += 1
        records.append(TraceRecord(rank=rank, seq=len(records), identity=f"{op}:{counts[op]}", name=op, kind="op",
                                   step=None, phase=block.get("phase", "forward"), inputs=inputs, outputs=outputs,
                                   source=f"{path}:{block['line']}",
                                   extra={"key": block["key"], "module": block["module"],
                                          "location": block.get("location")}))

    for no, raw in enumerate(lines[1:], 2):
        text = raw.strip()
        if not text or set(text) == {"="} or (block is None and text.startswith("Excluded ops dispatched:")):
            continue
        head = BLOCK.match(text)
        if head:
            close()
            block = {"line": no, "key": text[1:-1], "module": head.group("module"), "op": head.group("op"),
                     "stats": {}}
            continue
        if block is None or not raw.startswith(" ") or ":" not in text:
            raise BadInput(path, f"not an activations-log line: {text[:60]!r}", no)
        key, value = (s.strip() for s in text.split(":", 1))
        if key in STATS:
            block["stats"][key] = value
        elif key == "Output hash":
            block["out"] = _hashes(value, path, no)
        elif key == "Input hashes":
            block["in"] = _hashes(value, path, no)
        elif key == "Phase":
            block["phase"] = value
        elif key == "Location":
            block["location"] = value
        elif key != "Input producers":
            raise BadInput(path, f"unknown field {key!r}", no)
    close()
    if len(records) != declared:
        raise BadInput(path, f"the header declares {declared} activation(s), the file holds {len(records)} "
                             "(truncated?)", 1)
    if not records:
        raise BadInput(path, "no captured activation", 1)
    return records


def iter_ranks(path: Path) -> Iterator[tuple[int, Iterator[TraceRecord]]]:
    for rank, file in sorted(rank_files(Path(path)).items()):
        yield rank, iter(read_log(file, rank))


def run_info(path: Path) -> dict[str, Any]:
    files = rank_files(Path(path))
    return {"producer": "torchtitan activation_tracer (--profiler.dump_numerics)", "traced_ranks": sorted(files),
            "lacks": list(LACKS)}


def read(path: Path) -> Trace:
    return Trace(format=FORMAT, path=Path(path), ranks={r: list(it) for r, it in iter_ranks(path)},
                 run_info=run_info(path))


def detect(path: Path) -> bool:
    path = Path(path)
    try:
        files = rank_files(path).values() if path.is_dir() else [path]
        first = next(iter(files))
        with open(first, "rb") as f:
            return bool(HEADER.match(f.readline(4096).decode("utf-8", "replace").strip()))
    except (BadInput, StopIteration, OSError):
        return False


READER = register_reader(Reader(name=FORMAT, detect=detect, read=read, iter_ranks=iter_ranks, run_info=run_info))
