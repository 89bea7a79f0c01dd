"""One rank's two record streams, read side by side, and the pairing of their records by identity.

A is read in its own (causal) order, with records read ahead kept in ``a_ahead``; B is read ahead
into ``bbuf`` (unmatched records by identity, at most ``window`` of them) and ``border`` (the same,
in B's order). A record of A is paired with B's record of the same identity (:meth:`find_b`).

Runs traced over different step windows are compared over the steps both traced, each identity's
occurrence renumbered from the first of them (:func:`in_steps`)."""
from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Iterator
from typing import Any

from forensics.core.errors import BadInput
from forensics.tracediff.traces import StreamEnd, TraceRecord, stream_end
from forensics.core.window import parse_steps


def only_in(side: str, skipped: int, other_step: Any) -> str:
    """The warning for records of leading steps that one run only traced."""
    return (f"{skipped} record(s) of steps before step {other_step} are present only in {side} (the step windows "
            "differ?): not compared")


class RankStreams:
    """A's and B's records of one rank, read in bounded memory (``window`` unmatched B records)."""

    def __init__(self, a_stream: Iterable[TraceRecord], b_stream: Iterable[TraceRecord], window: int,
                 warnings: list[str]) -> None:
        self.a_stream, self.b_stream = a_stream, b_stream
        self.end_a: StreamEnd = stream_end(a_stream)
        self.end_b: StreamEnd = stream_end(b_stream)
        self.a: Iterator[TraceRecord] = iter(a_stream)
        self.b: Iterator[TraceRecord] = iter(b_stream)
        self.window = window
        self.a_ahead: deque[TraceRecord] = deque()  # A records read ahead, not yet walked
        self.a_done = False
        self.bbuf: dict[str, TraceRecord] = {}  # unmatched B records read so far, by identity
        self.border: deque[TraceRecord] = deque()  # B records read so far, in B's order
        self.b_done = False
        #: the runs traced different step windows (``forensics trace --steps``, from the headers):
        #: only the steps both traced are compared, occurrences counted from there (:func:`in_steps`)
        common = _common_steps(getattr(a_stream, "steps", None), getattr(b_stream, "steps", None))
        self.windowed = common is not None
        if common is not None:
            self.steps_left_out: tuple[set, set] = (set(), set())
            self.a = in_steps(self.a, common, Counter(), self.steps_left_out[0])
            self.b = in_steps(self.b, common, Counter(), self.steps_left_out[1])
            warnings.append(
                f"the runs traced different step windows (A: {a_stream.steps}, B: {b_stream.steps}): only the "
                "steps both traced are compared, each op's occurrences counted from the first of them")

    def resume(self, a: Iterable[TraceRecord], b: Iterable[TraceRecord]) -> None:
        """Read on from these iterators (after a prefix compared in bulk)."""
        self.a, self.b = iter(a), iter(b)

    # ------------------------------------------------------------------ reading
    def next_a(self) -> TraceRecord | None:
        if self.a_ahead:
            return self.a_ahead.popleft()
        if self.a_done:
            return None
        rec = next(self.a, None)
        if rec is None:
            self.a_done = True
        return rec

    def read_b(self) -> TraceRecord | None:
        if self.b_done:
            return None
        rec = next(self.b, None)
        if rec is None:
            self.b_done = True
            return None
        if rec.identity in self.bbuf:
            raise BadInput(rec.source or "B", f"identity {rec.identity!r} occurs twice: not an op-level trace "
                                              "with per-name occurrences")
        self.bbuf[rec.identity] = rec
        self.border.append(rec)
        return rec

    # ------------------------------------------------------------------ pairing
    def find_b(self, identity: str) -> TraceRecord | None:
        """B's record with this identity, reading B ahead up to the window; None if absent."""
        rec = self.bbuf.pop(identity, None)
        if rec is not None:
            return rec
        while len(self.bbuf) < self.window:
            nb = self.read_b()
            if nb is None:
                return None
            if nb.identity == identity:
                del self.bbuf[identity]
                return nb
        return None

    def put_back_b(self, b: TraceRecord) -> None:
        """Unpair ``b``: B's order may hold an earlier B-only record."""
        self.bbuf[b.identity] = b

    def trim_border(self) -> None:
        bbuf, border = self.bbuf, self.border
        while border and bbuf.get(border[0].identity) is not border[0]:
            border.popleft()

    def unmatched_b(self) -> list[TraceRecord]:
        return [r for r in self.border if self.bbuf.get(r.identity) is r]

    def b_only_before(self, limit_seq: int | None) -> TraceRecord | None:
        """The first unmatched B record earlier (in B's order) than ``limit_seq`` that A does not
        have within the window ahead: it exists only in B, and comes first."""
        self.trim_border()
        cands = [r for r in self.border if (limit_seq is None or r.seq < limit_seq) and self.bbuf.get(r.identity) is r]
        if not cands:
            return None
        while not self.a_done and len(self.a_ahead) < self.window:
            rec = next(self.a, None)
            if rec is None:
                self.a_done = True
                break
            self.a_ahead.append(rec)
        ahead = {r.identity for r in self.a_ahead}
        for r in cands:
            if r.identity not in ahead:
                return r
        return None

    def b_held_too_long(self) -> TraceRecord | None:
        """B's oldest unmatched record when it stayed unmatched while A walked two windows past it."""
        if len(self.border) > 2 * self.window:
            self.trim_border()
            if len(self.border) > 2 * self.window:
                return self.border[0]
        return None

    def rest(self, a_head: list[TraceRecord], b_from: list[TraceRecord]) -> tuple[Iterator, Iterator]:
        """The rest of both streams, from ``a_head`` (then A's records not walked yet) and ``b_from``
        (then B's records not read yet); the identity walk's buffers are emptied."""
        a_rest = _chain(a_head + list(self.a_ahead), self.a)
        self.a_ahead.clear()
        b_rest = _chain(b_from, self.b)
        self.bbuf.clear()
        self.border.clear()
        return a_rest, b_rest

    # ------------------------------------------------------------------ step windows
    def skip_leading_steps(self, warnings: list[str]) -> None:
        """Steps traced by one run only at the start (the step windows differ) are skipped."""
        a = self.next_a()
        b = self.read_b()
        skipped_a = skipped_b = 0
        if a is not None and b is not None and isinstance(a.step, int) and isinstance(b.step, int):
            while a is not None and isinstance(a.step, int) and a.step < b.step:
                skipped_a += 1
                a = self.next_a()
            while (b is not None and a is not None and isinstance(b.step, int) and isinstance(a.step, int)
                   and b.step < a.step):
                skipped_b += 1
                del self.bbuf[b.identity]
                self.border.popleft()
                b = self.read_b()
        if a is not None:
            self.a_ahead.appendleft(a)
        if skipped_a:
            warnings.append(only_in("A", skipped_a, b.step if b else "?"))
        if skipped_b:
            warnings.append(only_in("B", skipped_b, a.step if a else "?"))

    def check_common_steps(self) -> None:
        """Runs traced over different step windows that hold no recorded step in common cannot be
        compared (bad input, like two traces with no rank in common): said, never a CONTROL_FLOW."""
        a_none = not self.a_ahead and self.a_done
        b_none = not self.bbuf and self.b_done
        if not (a_none or b_none):
            return
        sa, sb = self.a_stream, self.b_stream
        left_a, left_b = self.steps_left_out

        def span(steps: set) -> str:
            return f"{min(steps)}-{max(steps)}" if len(steps) > 1 else str(min(steps)) if steps else "none"
        side, stream, other, left = (("B", sb, sa, left_b) if b_none else ("A", sa, sb, left_a))
        raise BadInput(getattr(stream, "path", None) or side,
                       f"no recorded step in common with the other trace: this one recorded step(s) {span(left)} "
                       f"(window {stream.steps}), the other traced window {other.steps}; nothing to compare "
                       "(a run resumed from a checkpoint counts its steps from 0 again: trace both runs with "
                       "--steps all, and the diff aligns them again after the steps only one of them ran)")


def _chain(head: list[TraceRecord], tail: Iterator[TraceRecord]) -> Iterator[TraceRecord]:
    yield from head
    yield from tail


def _common_steps(spec_a: str | None, spec_b: str | None) -> Any:
    """The test for a step both runs traced when their step windows differ, else None."""
    if spec_a is None or spec_b is None:
        return None
    try:
        wa, wb = parse_steps(spec_a), parse_steps(spec_b)
    except ValueError:
        return None
    if wa == wb:
        return None
    return lambda step: step in wa and step in wb


def in_steps(records: Iterator[TraceRecord], common: Any, dropped: Counter, left_out: set) -> Iterator[TraceRecord]:
    """The records of the steps both runs traced, each identity's occurrence renumbered as if the
    trace had started at the first of them (occurrences are counted per name from the first traced
    record: a run traced from step 0 has more of them before step 1 than one traced from step 1).
    ``dropped`` counts, per name, the records left out (a step the other run did not trace), and
    ``left_out`` collects their steps."""
    for rec in records:
        key, _, occ = rec.identity.rpartition(":")
        if isinstance(rec.step, int) and not common(rec.step):
            dropped[key] += 1
            left_out.add(rec.step)
            continue
        n = dropped.get(key)
        if n and occ.isdigit():
            rec.identity = f"{key}:{int(occ) - n}"
            fwd = rec.extra.get("fwd") if isinstance(rec.extra, dict) else None
            if isinstance(fwd, str):  # a backward record's forward op, counted alike
                fkey, _, focc = fwd.rpartition(":")
                m = dropped.get(fkey)
                if m and focc.isdigit():
                    rec.extra["fwd"] = f"{fkey}:{int(focc) - m}"
        yield rec
