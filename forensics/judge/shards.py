"""``forensics analyze`` over many ranks: rank groups in worker processes, results merged.

The two-instrument rule is decided per (arm, rank, scope): no verdict reads another rank's files.
So a capture of many ranks is analysed as groups of at most :data:`RANKS_PER_TASK` ranks, each group
in a worker process of a :class:`concurrent.futures.ProcessPoolExecutor` (one per core by default),
and the verdicts and counts of the groups are concatenated in the order a one-process analysis
gives them. A worker holds one group's frames at a time, the parent only verdicts and counts: memory
is bounded by the window and the number of workers, not by the number of ranks.

Past one node the same split runs on the engine the job already has (docs/scale.md): each task
analyses its part of the ranks (``--ranks`` or ``--shard K/N``) into its own ``--out``, and
``forensics analyze CAPTURE --merge DIR`` merges the shards' ``analysis.json`` files, checking that
they analysed this capture (manifest digest), the same site, and disjoint ranks, and saying which
ranks no shard analysed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from forensics.capture.directory import Capture, InstrumentFile, load_capture
from forensics.core.errors import BadInput, doing
from forensics.core.window import parse_ranks
from forensics.judge.analysis import KEYS, Analysis, analyze, file_rank, manifest_digest, no_launch_message
from forensics.runtime.parallel import available_cores, rank_span, run_groups, shard_outputs, workers_for  # noqa: F401 (available_cores: API)

#: Most ranks one worker task analyses at once (bounds a worker's memory).
RANKS_PER_TASK = 8


# --------------------------------------------------------------------------- which files count for which rank
def _header_pid_ranks(cap: Capture) -> dict[tuple[str, int], set[int]]:
    """(folder, pid) -> ranks, from the first lines of the sites files (their header names the pid)."""
    out: dict[tuple[str, int], set[int]] = {}
    for f in cap.of("sites"):
        try:
            with open(f.path, "rb") as fh:
                head = [fh.readline(1 << 16) for _ in range(3)]
        except OSError:
            continue
        for line in head:
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):  # a peek: the site reader says what is wrong with the line
                continue
            pid = obj.get("pid") if isinstance(obj, dict) else None
            if isinstance(pid, int) and not isinstance(pid, bool) and f.rank is not None:
                out.setdefault((f.arm, pid), set()).add(f.rank)
                break
    return out


def files_by_rank(cap: Capture, notes: list[str] | None = None) -> dict[int | None, list[InstrumentFile]]:
    """The capture's files grouped by the rank they count for (as :func:`forensics.judge.analysis.load`
    decides it: the ``rank<R>/`` folder, else the rank whose site probe recorded the file's pid)."""
    needs_pids = any(f.pid is not None for f in cap.files)
    pid_rank = _header_pid_ranks(cap) if needs_pids else {}
    out: dict[int | None, list[InstrumentFile]] = {}
    for f in cap.files:
        out.setdefault(file_rank(cap, f, pid_rank, notes), []).append(f)
    return out


def _order(rank: int | None) -> tuple[int, int]:
    return (0, -1) if rank is None else (1, rank)


def select_ranks(all_ranks: list[int | None], ranks: str | None = None, shard: str | None = None) -> list[int | None]:
    """The ranks a run analyses: ``--ranks 0,3,8-15`` and/or ``--shard K/N`` (the K-th of N contiguous
    blocks of the capture's ranks, K counted from 0: ``$SLURM_PROCID/$SLURM_NTASKS``)."""
    chosen = sorted(all_ranks, key=_order)
    if ranks is not None:
        try:
            wanted = parse_ranks(ranks)
        except ValueError as e:
            raise BadInput("--ranks", str(e)) from None
        if wanted is not None:
            chosen = [r for r in chosen if r in wanted]
    if shard is not None:
        k, n = parse_shard(shard)
        chosen = chosen[k * len(chosen) // n:(k + 1) * len(chosen) // n]
    return chosen


def parse_shard(text: str) -> tuple[int, int]:
    """``"3/8"`` -> (3, 8); K from 0 to N-1."""
    parts = str(text).split("/")
    if len(parts) != 2 or not all(p.strip().isdigit() for p in parts):
        raise BadInput("--shard", f"{text!r} is not K/N (e.g. 0/8, $SLURM_PROCID/$SLURM_NTASKS)")
    k, n = int(parts[0]), int(parts[1])
    if n < 1 or not 0 <= k < n:
        raise BadInput("--shard", f"{text!r}: K must be in 0..N-1 and N at least 1")
    return k, n


# --------------------------------------------------------------------------- one group (in a worker)
@dataclass
class Part:
    """What one rank group's analysis sends back: verdicts and counts, no launch frames."""

    ranks: list[int | None]
    counts: pd.DataFrame | None = None
    verdicts: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)
    facts: list[dict[str, Any]] = field(default_factory=list)
    losses: list[dict[str, Any]] = field(default_factory=list)
    labels: set[str] = field(default_factory=set)
    provenance: list[dict[str, Any]] = field(default_factory=list)


def analyze_group(root: Path, manifest: dict[str, Any], files: list[InstrumentFile], ranks: list[int | None],
                  site: str | None, keep_going: bool) -> Part:
    """Analyse the files of some ranks (runs in a worker process; also callable in-process)."""
    sub = Capture(root=Path(root), manifest=manifest, files=list(files), missing=[])
    an = analyze(sub, site=site, keep_going=keep_going)
    labels = set(an.launches["site_label"].dropna()) if "site_label" in an.launches else set()
    if len(an.sites) and "label" in an.sites:
        labels |= set(an.sites["label"].dropna())
    return Part(ranks, an.counts, an.verdicts, an.notes, an.facts, an.losses, labels, an.provenance)


# --------------------------------------------------------------------------- merge
def _sort_key(counts: pd.DataFrame) -> pd.DataFrame:
    cols = [c for c in KEYS + ["key"] if c in counts.columns]
    return counts[cols]


def merge(cap: Capture, parts: list[Part], site: str | None, ranks: list[int | None] | None,
          notes_first: list[str] | None = None) -> Analysis:
    """One :class:`Analysis` from rank groups' parts, ordered as a one-process analysis orders it."""
    counts_l = [p.counts for p in parts if p.counts is not None and len(p.counts)]
    verdicts_l = [p.verdicts for p in parts if p.verdicts is not None and len(p.verdicts)]
    template = next((p for p in parts if p.verdicts is not None), None)
    if counts_l:
        counts = pd.concat(counts_l, ignore_index=True, sort=False)
        verdicts = pd.concat(verdicts_l, ignore_index=True, sort=False)
        order = _sort_key(counts).assign(_pos=range(len(counts)))
        order = order.sort_values(list(order.columns), kind="stable", na_position="last")["_pos"].to_numpy()
        counts = counts.iloc[order].reset_index(drop=True)
        verdicts = verdicts.iloc[order].reset_index(drop=True)
    else:
        counts = template.counts.iloc[0:0] if template is not None else pd.DataFrame(columns=KEYS + ["key"])
        verdicts = template.verdicts.iloc[0:0] if template is not None else pd.DataFrame(columns=KEYS + ["verdict"])
    notes = list(dict.fromkeys((notes_first or []) + [n for p in parts for n in p.notes]))
    missing = list(cap.missing)
    if site and not len(verdicts):
        labels = sorted(set().union(*(p.labels for p in parts)) if parts else set())
        missing.append(no_launch_message(site, labels, cap.instruments()))
    empty = pd.DataFrame()
    return Analysis(cap, site, empty, empty, empty, counts, verdicts, missing, notes,
                    [x for p in parts for x in p.facts], [x for p in parts for x in p.losses],
                    ranks=None if ranks is None else [r for r in ranks if r is not None],
                    rank_groups=len(parts), provenance=[x for p in parts for x in p.provenance])


# --------------------------------------------------------------------------- entry point
def analyze_ranks(capture: str | Path | Capture, site: str | None = None, keep_going: bool = False,
                  jobs: int | None = None, ranks: str | None = None, shard: str | None = None,
                  progress: bool = True, scheduler: str | None = None) -> Analysis:
    """``forensics analyze``: every rank (or the chosen ones), in worker processes when there are
    more ranks than one task takes and more than one core (``jobs``: None = every core, 1 = here).
    ``scheduler``: a Dask scheduler's address or file: the rank groups run on that cluster's workers."""
    cap = capture if isinstance(capture, Capture) else load_capture(capture)
    notes: list[str] = []
    by_rank = files_by_rank(cap, notes)
    subset = ranks is not None or shard is not None
    chosen = select_ranks(list(by_rank), ranks, shard) if subset else sorted(by_rank, key=_order)
    if subset and not chosen:
        raise BadInput(cap.root, f"no rank of this capture is selected by --ranks {ranks or 'all'} --shard {shard or '-'} "
                                 f"(ranks here: {rank_span(list(by_rank))})")
    groups = [chosen[i:i + RANKS_PER_TASK] for i in range(0, len(chosen), RANKS_PER_TASK)]
    workers = workers_for(len(groups), jobs)
    if scheduler:
        sub_cap = Capture(cap.root, cap.manifest, [f for r in chosen for f in by_rank[r]], list(cap.missing),
                          cap.unread, cap.recognised)
        tasks = [(cap.root, cap.manifest, [f for r in g for f in by_rank[r]], g, site, keep_going) for g in groups]
        with doing(f"analysing {len(chosen)} ranks of {cap.root} on the Dask cluster {scheduler}"):
            parts = run_groups(analyze_group, tasks, [len(g) for g in groups], workers, "forensics analyze",
                               progress=progress, scheduler=scheduler)
        return merge(sub_cap if subset else cap, parts, site, chosen if subset else None, notes)
    if workers <= 1 and not subset:
        return analyze(cap, site=site, keep_going=keep_going)  # one process, every frame kept
    if workers <= 1:
        sub = Capture(cap.root, cap.manifest, [f for r in chosen for f in by_rank[r]], list(cap.missing),
                      cap.unread, cap.recognised)
        an = analyze(sub, site=site, keep_going=keep_going)
        an.ranks = [r for r in chosen if r is not None]
        an.notes = list(dict.fromkeys(notes + an.notes))
        return an
    sub_cap = Capture(cap.root, cap.manifest, [f for r in chosen for f in by_rank[r]], list(cap.missing),
                      cap.unread, cap.recognised)
    tasks = [(cap.root, cap.manifest, [f for r in g for f in by_rank[r]], g, site, keep_going) for g in groups]
    with doing(f"analysing {len(chosen)} ranks of {cap.root} in {workers} worker processes"):
        parts = run_groups(analyze_group, tasks, [len(g) for g in groups], workers, "forensics analyze",
                           progress=progress)
    return merge(sub_cap if subset else cap, parts, site, chosen if subset else None, notes)


# --------------------------------------------------------------------------- merging shard outputs
def shard_files(where: Path) -> list[Path]:
    """``analysis.json`` files of shards: the file itself, DIR/analysis.json, or DIR/*/analysis.json."""
    return shard_outputs(where, ("analysis.json", "*/analysis.json"), "analysis.json",
                         "each shard writes one with `forensics analyze CAPTURE --shard K/N --out DIR/K`")


def _part_from_json(path: Path, data: Any, cap: Capture) -> tuple[Part, str | None]:
    if not isinstance(data, dict) or not isinstance(data.get("verdicts"), list) or not isinstance(data.get("counts"), list):
        raise BadInput(path, "not an analysis.json of `forensics analyze` (no verdicts/counts lists)")
    digest = manifest_digest(cap.root)
    if data.get("manifest_sha256") != digest:
        raise BadInput(path, f"analysed another capture (manifest digest {data.get('manifest_sha256')!r}, "
                             f"{cap.root}/manifest.yaml has {digest!r})")
    ranks = data.get("ranks")
    if ranks is not None and not (isinstance(ranks, list) and all(isinstance(r, int) and not isinstance(r, bool)
                                                                 for r in ranks)):
        raise BadInput(path, "ranks must be a list of integers or null")
    for key in ("notes", "facts", "losses"):
        if not isinstance(data.get(key, []), list):
            raise BadInput(path, f"{key} must be a list")
    verdicts = pd.DataFrame(data["verdicts"]) if data["verdicts"] else None
    counts = pd.DataFrame(data["counts"]) if data["counts"] else None
    for name, df in (("verdicts", verdicts), ("counts", counts)):
        if df is not None and not set(KEYS) <= set(df.columns):
            raise BadInput(path, f"{name} rows lack {', '.join(sorted(set(KEYS) - set(df.columns)))}")
    if (verdicts is None) != (counts is None) or (verdicts is not None and len(verdicts) != len(counts)):
        raise BadInput(path, "verdicts and counts do not pair up (one row each per arm, rank, scope and kernel)")
    known = ranks if ranks is not None else sorted({r for r in (verdicts["rank"] if verdicts is not None else [])
                                                    if isinstance(r, int)})
    part = Part(known, counts, verdicts, list(data.get("notes", [])), list(data.get("facts", [])),
                list(data.get("losses", [])))
    return part, data.get("site")


def merge_shards(capture: str | Path, where: Path, site: str | None = None) -> Analysis:
    """Merge shards' ``analysis.json`` files into the analysis of the whole capture."""
    from forensics.runtime.inputs import read_json  # noqa: PLC0415

    cap = load_capture(capture)
    parts: list[Part] = []
    sites: dict[str | None, Path] = {}
    owner: dict[int, Path] = {}
    for path in shard_files(where):
        with doing(f"reading the shard {path}"):
            part, shard_site = _part_from_json(path, read_json(path, 1 << 30, "analysis.json"), cap)
        sites.setdefault(shard_site, path)
        for r in part.ranks:
            if r in owner:
                raise BadInput(path, f"rank {r} was analysed by two shards ({owner[r]} and {path}): shards must not overlap")
            owner[r] = path
        parts.append(part)
    if len(sites) > 1:
        (a, pa), (b, pb) = list(sites.items())[:2]
        raise BadInput(pb, f"analysed site {b!r}, but {pa} analysed {a!r}: merge shards of one site")
    shard_site = next(iter(sites))
    if site is not None and site != shard_site:
        raise BadInput(next(iter(sites.values())), f"the shards analysed site {shard_site!r}, not {site!r}")
    all_ranks = [r for r in files_by_rank(cap) if r is not None]
    unanalysed = sorted(set(all_ranks) - set(owner))
    parts.sort(key=lambda p: _order(p.ranks[0] if p.ranks else None))
    an = merge(cap, parts, shard_site, None)
    an.notes = list(dict.fromkeys(an.notes))
    if unanalysed:
        an.missing.append(f"{len(unanalysed)} rank(s) of this capture analysed by no shard: "
                          f"{', '.join(map(str, unanalysed[:16]))}{' ...' if len(unanalysed) > 16 else ''}")
        an.ranks = sorted(owner)
    return an
