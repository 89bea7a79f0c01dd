"""After a control-flow divergence: the rest of both streams aligned by the order of op names
(:mod:`forensics.tracediff.align`), window by window. Each region where the runs executed different
ops is counted (records only in A, only in B, where, where they align again); the records that
align again are handed back as pairs to compare (``compare_after``)."""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from forensics.tracediff.align import edit_script
from forensics.tracediff.rank_report import RankReport, continues_past, where
from forensics.tracediff.traces import StreamEnd, TraceRecord

#: records left uncommitted at a window's end, so an edit near the end is decided with more context
MARGIN = 64


def _fill(window: list[TraceRecord], rest: Iterator[TraceRecord], size: int) -> bool:
    """Read ``rest`` into ``window`` up to ``size`` records; False once ``rest`` is exhausted."""
    while len(window) < size:
        r = next(rest, None)
        if r is None:
            return False
        window.append(r)
    return True


class RegionWalk:
    """Aligns the rest of one rank's streams by op-name order, ``window`` records at a time."""

    def __init__(self, report: RankReport, end_a: StreamEnd, end_b: StreamEnd, window: int, max_edits: int,
                 compare_after: Callable[[TraceRecord, TraceRecord], None]) -> None:
        self.report = report
        self.end_a, self.end_b = end_a, end_b
        self.window, self.max_edits = window, max_edits
        self.compare_after = compare_after
        self.region: dict[str, Any] | None = None

    def run(self, a_rest: Iterator[TraceRecord], b_rest: Iterator[TraceRecord]) -> None:
        window, max_window = self.window, 4 * self.window
        wa: list[TraceRecord] = []
        wb: list[TraceRecord] = []
        a_more = b_more = True
        while True:
            a_more = a_more and _fill(wa, a_rest, window)
            b_more = b_more and _fill(wb, b_rest, window)
            if not wa and not wb:
                break
            ops = edit_script([r.name for r in wa], [r.name for r in wb], self.max_edits)
            if ops is None:
                self._give_up(f"no re-alignment within {len(wa)} records of A and {len(wb)} of B (more than "
                              f"{self.max_edits} records differ): the rest is not compared")
                return
            used_a, used_b, stop = self._apply(ops, wa, wb, a_more, b_more)
            wa, wb = wa[used_a:], wb[used_b:]
            if stop:
                break
            if not (a_more or b_more) and not wa and not wb:
                break
            if used_a == 0 and used_b == 0:
                if window >= max_window or not (a_more or b_more):
                    self._give_up(f"no re-alignment within {len(wa)} records of A and {len(wb)} of B: the rest "
                                  "is not compared")
                    return
                window *= 2  # nothing decidable yet: read more context
        if self.region is not None:
            self.region["note"] = "the runs did not align again before the end of the traces"
            self.report.region(self.region)

    def _apply(self, ops: list, wa: list[TraceRecord], wb: list[TraceRecord], a_more: bool,
               b_more: bool) -> tuple[int, int, bool]:
        """Walk one window's edit script: (A records used, B records used, whether the walk ends)."""
        ca = len(wa) - MARGIN if a_more else len(wa)
        cb = len(wb) - MARGIN if b_more else len(wb)
        used_a = used_b = 0
        for tag, i1, i2, j1, j2 in ops:
            ended = self._ended(tag, i1, j1, wa, wb, a_more, b_more)
            if ended is not None:
                self.report.warn(ended)
                return used_a, used_b, True
            if tag == "equal":
                n = min(min(i2, ca) - i1, min(j2, cb) - j1)
                if n <= 0:
                    break
                if self.region is not None:
                    self.region["realigned_at"] = {"a": where(wa[i1]), "b": where(wb[j1])}
                    self.report.region(self.region)
                    self.region = None
                for k in range(n):
                    self.compare_after(wa[i1 + k], wb[j1 + k])
                used_a, used_b = i1 + n, j1 + n
                if n < i2 - i1:
                    break
                continue
            if i2 > ca or j2 > cb:
                break  # an edit reaching into the window's margin: decide it with more context
            self.region = self.region or _new_region()
            _extend_region(self.region, wa[i1:i2], wb[j1:j2])
            used_a, used_b = i2, j2
        return used_a, used_b, False

    def _ended(self, tag: str, i1: int, j1: int, wa: list[TraceRecord], wb: list[TraceRecord], a_more: bool,
               b_more: bool) -> str | None:
        """The warning when the edit is one side going on past the other's partial end, else None."""
        if tag == "insert" and i1 == len(wa) and not a_more and self.end_a.partial:
            return continues_past("B", "A", self.end_a.reason, wb[j1].seq)
        if tag == "delete" and j1 == len(wb) and not b_more and self.end_b.partial:
            return continues_past("A", "B", self.end_b.reason, wa[i1].seq)
        return None

    def _give_up(self, note: str) -> None:
        self.region = self.region or _new_region()
        self.region["note"] = note
        self.report.region(self.region)


def _new_region() -> dict[str, Any]:
    return {"only_in_a": 0, "only_in_b": 0, "first_only_in_a": None, "first_only_in_b": None,
            "a_seq": None, "b_seq": None, "realigned_at": None, "note": None}


def _extend_region(region: dict[str, Any], only_a: list[TraceRecord], only_b: list[TraceRecord]) -> None:
    for side, recs in (("a", only_a), ("b", only_b)):
        if not recs:
            continue
        region[f"only_in_{side}"] += len(recs)
        if region[f"first_only_in_{side}"] is None:
            region[f"first_only_in_{side}"] = where(recs[0])
        lo, hi = recs[0].seq, recs[-1].seq
        span = region[f"{side}_seq"]
        region[f"{side}_seq"] = [lo if span is None else min(span[0], lo), hi if span is None else max(span[1], hi)]
