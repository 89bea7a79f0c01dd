"""Many-rank captures and traces built from real rank files (tests and benchmarks/bench_scale.py).

Nothing here invents an instrument's output. Every rank file is a real file recorded on this
project's machines (the CPU backend's capture ``tests/fixtures/cpu/example``, see its
PROVENANCE.md; op traces of ``examples/cpu-divergence/train.py``) with its rank changed: the
``"rank": 0`` fields of the JSON lines and the ``rank0/`` in recorded paths. The process id is kept,
as on a multi-node job whose nodes reuse pids (every rank's files carry the same pid).

The planted differences are made of real material too, on a known subset of ranks, so that a
many-rank run has a right answer to recover:

* capture, arm ``a2``: ``no_mkl`` ranks lose their oneMKL log (as if ``MKL_VERBOSE_OUTPUT_FILE``
  were unwritable there): only the profiler counts those scopes, SINGLE-SOURCE;
  ``cut_mkl`` ranks have their oneMKL log cut inside the line of the second site occurrence (a
  writer killed mid-line): occurrence #2 is seen by the profiler only, SINGLE-SOURCE (and the cut
  line is noted).
* traces: ``origin`` ranks take run B's rank file from a real run that differs at its own op (the
  ORIGIN); ``receiver`` ranks take one whose first differing op already had differing inputs
  (the RECEIVER). Which real files play these roles is the caller's choice.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CPU_EXAMPLE = ROOT / "tests" / "fixtures" / "cpu" / "example"


def with_rank(data: bytes, rank: int) -> bytes:
    """A real JSON-lines file's bytes with rank 0 changed to ``rank`` (fields and recorded paths)."""
    return (data.replace(b'"rank": 0,', b'"rank": %d,' % rank).replace(b'"rank": 0}', b'"rank": %d}' % rank)
            .replace(b'"rank":0,', b'"rank":%d,' % rank).replace(b'"rank":0}', b'"rank":%d}' % rank)
            .replace(b"/rank0/", b"/rank%d/" % rank))


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


@dataclass
class Planted:
    """Which ranks of arm ``a2`` carry which planted difference."""

    no_mkl: set[int] = field(default_factory=set)
    cut_mkl: set[int] = field(default_factory=set)


def _cut_inside_second_occurrence(data: bytes, sites: bytes) -> bytes:
    """The oneMKL log cut in the middle of the line that site occurrence #2 recorded (mkl_span)."""
    import json

    for line in sites.splitlines():
        rec = json.loads(line)
        if rec.get("event") == "site" and rec.get("occurrence") == 2 and isinstance(rec.get("cpu"), dict):
            start, end = rec["cpu"]["mkl_span"]
            return data[: start + (end - start) // 2]
    raise ValueError("the source capture has no second site occurrence with a oneMKL span")


def build_capture(out: Path, ranks: int, planted: Planted | None = None, src: Path = CPU_EXAMPLE) -> Path:
    """A capture of ``ranks`` ranks per arm from the real one-rank capture ``src`` (arms a1, a2)."""
    planted = planted or Planted()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=False)
    manifest = yaml.safe_load((src / "manifest.yaml").read_text())
    manifest["world_size"] = ranks
    manifest["generated"] = (f"{ranks} ranks from the real one-rank capture {src.relative_to(ROOT)} (rank changed per "
                             f"rank); planted in a2: no oneMKL log on ranks {sorted(planted.no_mkl)}, oneMKL log cut "
                             f"on ranks {sorted(planted.cut_mkl)} (tests/many_ranks.py)")
    (out / "manifest.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    for arm in ("a1", "a2"):
        (out / arm).mkdir()
        shutil.copyfile(src / arm / "probe.json", out / arm / "probe.json")
        files = sorted((src / arm / "rank0").iterdir())
        texts = {f.name: f.read_bytes() for f in files if f.suffix in (".jsonl",)}
        sites = texts.get("sites.jsonl", b"")
        for r in range(ranks):
            d = out / arm / f"rank{r}"
            d.mkdir()
            for f in files:
                is_mkl = f.name.startswith("mkl.")
                if arm == "a2" and is_mkl and r in planted.no_mkl:
                    continue
                if arm == "a2" and is_mkl and r in planted.cut_mkl:
                    (d / f.name).write_bytes(_cut_inside_second_occurrence(f.read_bytes(), sites))
                elif f.name in texts:
                    (d / f.name).write_bytes(with_rank(texts[f.name], r))
                else:
                    _link_or_copy(f, d / f.name)
    return out


# --------------------------------------------------------------------------- op traces
def _header_with_rank(data: bytes, rank: int, world: int) -> bytes:
    """A native rank file's bytes with the header's rank and world size changed (records carry none)."""
    import json

    head, sep, rest = data.partition(b"\n")
    header = json.loads(head)
    header["rank"], header["world_size"] = rank, world
    return json.dumps(header).encode() + sep + rest


@dataclass
class TraceSources:
    """Real rank files (``rank0/trace.jsonl`` of `forensics trace` runs of one program) in their roles.

    ``a``/``same``: two runs that match (the baseline pair); ``origin``: a run whose values differ at
    an op of its own (the ORIGIN, diffed against ``a``); ``a_window``/``receiver``: two runs traced
    from a later step, where the first differing op already had differing inputs (the RECEIVER)."""

    a: Path
    same: Path
    origin: Path
    a_window: Path
    receiver: Path


def build_traces(out_a: Path, out_b: Path, ranks: int, src: TraceSources, origin: set[int],
                 receiver: set[int]) -> tuple[Path, Path]:
    """Two trace directories of ``ranks`` ranks from real rank files: rank R of A is ``src.a`` (or
    ``src.a_window`` on receiver ranks) with its rank changed; rank R of B is ``src.same``, or
    ``src.origin`` on origin ranks, or ``src.receiver`` on receiver ranks."""
    if origin & receiver:
        raise ValueError("a rank is either an origin or a receiver")
    data = {k: Path(getattr(src, k)).read_bytes() for k in ("a", "same", "origin", "a_window", "receiver")}
    for out in (out_a, out_b):
        Path(out).mkdir(parents=True, exist_ok=False)
    for r in range(ranks):
        pick_a = "a_window" if r in receiver else "a"
        pick_b = "origin" if r in origin else "receiver" if r in receiver else "same"
        for out, pick in ((out_a, pick_a), (out_b, pick_b)):
            d = Path(out) / f"rank{r}"
            d.mkdir()
            (d / "trace.jsonl").write_bytes(_header_with_rank(data[pick], r, ranks))
    return Path(out_a), Path(out_b)
