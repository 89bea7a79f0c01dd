"""What the CPU library logs' attributions share: the site occurrences of each process that carry
the CPU probe's bracket (``cpu`` in ``sites.jsonl``: time bracket, thread, oneMKL log size before
and after the call), and the calls grouped by process. docs/cpu-backend.md."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def occurrences(sites: Any) -> dict[tuple, list[dict[str, Any]]]:
    """(folder, rank, pid) -> the site records that carry a ``cpu`` bracket, in record order."""
    import pandas as pd  # heavy: only analysis, which has the frames, gets here

    out: dict[tuple, list[dict[str, Any]]] = {}
    if sites is None or not len(sites) or "cpu" not in sites.columns:
        return out
    for r in sites.to_dict("records"):
        cpu = r.get("cpu")
        if not isinstance(cpu, dict) or r.get("pid") is None or pd.isna(r.get("pid")):
            continue
        out.setdefault((r.get("folder"), int(r["rank"]) if pd.notna(r.get("rank")) else None, int(r["pid"])),
                       []).append({"label": r["label"], **cpu})
    return out


def by_process(calls: Any) -> Iterator[tuple[tuple, Any]]:
    """((folder, rank, pid), that process's calls)."""
    import pandas as pd  # heavy: only analysis, which has the frames, gets here

    for (folder, rank, pid), g in calls.groupby(["folder", "rank", "pid"], dropna=False, sort=False):
        yield (folder, None if pd.isna(rank) else int(rank), None if pd.isna(pid) else int(pid)), g


def blank(calls: Any) -> tuple[Any, Any, Any]:
    """(a copy of calls, its empty site_label column, its empty attributed_by column)."""
    import pandas as pd  # heavy: only analysis, which has the frames, gets here

    calls = calls.copy()
    labels = pd.Series([None] * len(calls), index=calls.index, dtype="object")
    how = pd.Series([None] * len(calls), index=calls.index, dtype="object")
    return calls, labels, how
