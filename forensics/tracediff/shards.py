"""``forensics diff`` over many ranks: rank groups in worker processes, shards and their merge.

A rank's first divergence reads that rank's two files only; the cross-rank part (the pattern, the
site, the next command) reads every rank's result. So ranks are walked in groups of
:data:`RANKS_PER_TASK` in worker processes (:func:`forensics.runtime.parallel.run_groups`), their
:class:`~forensics.tracediff.divergence.RankResult` objects come back, and the cross-rank part runs
once over all of them (:func:`forensics.tracediff.diff.finish_report`): the report is the one a
single process writes. A worker holds one rank's window at a time; the parent holds the results.

Past one node: ``--ranks``/``--shard K/N`` diffs a part of the ranks and ``--json`` writes its
report; ``--merge DIR`` reads the parts' reports (same traces, same window, disjoint ranks) and
writes the report of the whole (docs/scale.md).
"""
from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from forensics.core.errors import BadInput, doing
from forensics.runtime.inputs import read_json
from forensics.runtime.parallel import rank_span, run_groups, shard_outputs, workers_for
from forensics.tracediff.diff import (
    REPORT_SCHEMA,
    WINDOW,
    DiffReport,
    _open,
    finish_report,
    resolve_reader,
    start_report,
)
from forensics.tracediff.divergence import RankResult
from forensics.tracediff.traces import native, readers
from forensics.tracediff.walk import walk_rank

#: Most ranks one worker task walks.
RANKS_PER_TASK = 16


def _rank_lists(reader: Any, fmt: str, path: Path) -> list[int]:
    if fmt == "native":
        return sorted(native.rank_files(path))
    return sorted(r for r, _ in reader.iter_ranks(path)) if reader.iter_ranks is not None \
        else sorted(reader.read(path).ranks)


def _streams(reader: Any, fmt: str, path: Path | dict[int, Path], ranks: list[int]) -> dict[int, Any]:
    """Lazy record streams of some ranks of one trace (``path``: the trace, or its rank files)."""
    if fmt == "native":
        files = path if isinstance(path, dict) else native.rank_files(path)
        return {r: native.open_rank(files[r], r) for r in ranks}
    wanted = set(ranks)
    if reader.iter_ranks is not None:
        return {r: s for r, s in reader.iter_ranks(path) if r in wanted}
    return {r: recs for r, recs in reader.read(path).ranks.items() if r in wanted}


def walk_group(fmt: str, path_a: Path | dict[int, Path], path_b: Path | dict[int, Path], ranks: list[int], window: int,
               use_ordered: bool) -> dict[int, RankResult]:
    """Walk some ranks of two traces (runs in a worker process; callable in-process too)."""
    reader = readers()[fmt]
    a = _streams(reader, fmt, path_a if isinstance(path_a, dict) else Path(path_a), ranks)
    b = _streams(reader, fmt, path_b if isinstance(path_b, dict) else Path(path_b), ranks)
    was = gc.isenabled()
    gc.disable()  # records are acyclic (see diff_streams)
    try:
        return {r: walk_rank(r, a[r], b[r], window=window, use_ordered=use_ordered) for r in ranks}
    finally:
        if was:
            gc.enable()


def diff_ranks(path_a: Path, path_b: Path, fmt: str = "auto", window: int = WINDOW, jobs: int | None = None,
               ranks: str | None = None, shard: str | None = None, progress: bool = True,
               scheduler: str | None = None) -> DiffReport:
    """``forensics diff`` over every rank (or the chosen ones), in worker processes when there are
    more ranks than one task takes and more than one core (``jobs`` 1: in this process)."""
    from forensics.judge.shards import select_ranks  # noqa: PLC0415 (pandas, and the analysis it runs)

    path_a, path_b = Path(path_a), Path(path_b)
    fmt, reader = resolve_reader(path_a, path_b, fmt)
    ranks_a, ranks_b = set(_rank_lists(reader, fmt, path_a)), set(_rank_lists(reader, fmt, path_b))
    union = sorted(ranks_a | ranks_b)
    subset = ranks is not None or shard is not None
    chosen = [r for r in select_ranks(union, ranks, shard) if r is not None] if subset else union
    if subset and not chosen:
        raise BadInput(path_a, f"no rank of these traces is selected (ranks here: {union[0]}-{union[-1]})")
    common = [r for r in chosen if r in ranks_a and r in ranks_b]
    groups = [common[i:i + RANKS_PER_TASK] for i in range(0, len(common), RANKS_PER_TASK)]
    workers = workers_for(len(groups), jobs)
    info_a, info_b = _run_info(reader, fmt, path_a), _run_info(reader, fmt, path_b)
    report, use_ordered = start_report(str(path_a), str(path_b), fmt, info_a, info_b, window)
    for r in chosen:
        if r not in common:
            report.warnings.append(f"rank {r} traced only in {'B' if r not in ranks_a else 'A'}: not compared")
    if workers <= 1 and not scheduler:
        for g in groups:
            report.ranks.update(walk_group(fmt, path_a, path_b, g, window, use_ordered))
    else:
        if fmt == "native":  # each task gets its ranks' files (no listing of the trace directories per task)
            fa, fb = native.rank_files(path_a), native.rank_files(path_b)
            tasks = [(fmt, {r: fa[r] for r in g}, {r: fb[r] for r in g}, g, window, use_ordered) for g in groups]
        else:
            tasks = [(fmt, path_a, path_b, g, window, use_ordered) for g in groups]
        where = f"on the Dask cluster {scheduler}" if scheduler else f"in {workers} worker processes"
        with doing(f"diffing {len(common)} ranks {where}"):
            for part in run_groups(walk_group, tasks, [len(g) for g in groups], workers, "forensics diff",
                                   progress=progress, scheduler=scheduler):
                report.ranks.update(part)
    report.ranks = dict(sorted(report.ranks.items()))
    report = finish_report(report, info_a, info_b)
    if subset:
        report.warnings.append(f"ranks diffed here: {rank_span(common)} of {len(union)} (one shard; "
                               "`forensics diff A B --merge DIR` puts the shards together)")
    return report


def _run_info(reader: Any, fmt: str, path: Path) -> dict:
    if getattr(reader, "run_info", None):
        return reader.run_info(path) or {}
    return _open(reader, path)[1]


# --------------------------------------------------------------------------- merging shard reports
def shard_reports(where: Path) -> list[Path]:
    """The JSON reports of shards: a file, or every ``*.json`` in a folder (and its subfolders)."""
    return shard_outputs(where, ("*.json", "*/*.json"), "*.json report",
                         "each shard writes one with `forensics diff A B --shard K/N --json DIR/K.json`")


def merge_reports(path_a: Path, path_b: Path, where: Path, fmt: str = "auto") -> DiffReport:
    """The report of the whole from shards' reports (same traces, same window, disjoint ranks)."""
    path_a, path_b = Path(path_a), Path(path_b)
    fmt, reader = resolve_reader(path_a, path_b, fmt)
    info_a, info_b = _run_info(reader, fmt, path_a), _run_info(reader, fmt, path_b)
    window = None
    results: dict[int, RankResult] = {}
    owner: dict[int, Path] = {}
    for path in shard_reports(where):
        with doing(f"reading the shard report {path}"):
            data = read_json(path, 1 << 30, "diff report")
        if not isinstance(data, dict) or data.get("schema") != REPORT_SCHEMA or not isinstance(data.get("ranks"), dict):
            raise BadInput(path, f"not a {REPORT_SCHEMA} report of `forensics diff --json`")
        for key, mine in (("a", path_a), ("b", path_b)):
            theirs = data.get(key)
            if not isinstance(theirs, str) or (theirs != str(mine) and Path(theirs).resolve() != mine.resolve()):
                raise BadInput(path, f"a report of another trace ({key}: {theirs!r}, not {str(mine)!r})")
        if data.get("format") != fmt:
            raise BadInput(path, f"a report of format {data.get('format')!r}, not {fmt!r}")
        if window is not None and data.get("window") != window:
            raise BadInput(path, f"diffed with --window {data.get('window')}, other shards with {window}")
        window = data.get("window")
        for key, rank_json in data["ranks"].items():
            try:
                res = RankResult.from_json(rank_json)
            except (TypeError, ValueError, AttributeError) as e:
                raise BadInput(path, f"rank {key}: not a rank result of this forensics ({e})") from None
            if res.rank in owner:
                raise BadInput(path, f"rank {res.rank} was diffed by two shards ({owner[res.rank]} and {path}): "
                                     "shards must not overlap")
            owner[res.rank] = path
            results[res.rank] = res
    report, _ = start_report(str(path_a), str(path_b), fmt, info_a, info_b, window if isinstance(window, int) else WINDOW)
    ranks_a, ranks_b = set(_rank_lists(reader, fmt, path_a)), set(_rank_lists(reader, fmt, path_b))
    for r in sorted(ranks_a ^ ranks_b):
        report.warnings.append(f"rank {r} traced only in {'B' if r not in ranks_a else 'A'}: not compared")
    missing = sorted((ranks_a & ranks_b) - set(results))
    report.ranks = dict(sorted(results.items()))
    report = finish_report(report, info_a, info_b)
    if missing:
        report.warnings.append(f"{len(missing)} rank(s) of both traces diffed by no shard: {rank_span(missing)}")
    return report
