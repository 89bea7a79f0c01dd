"""One rank's walk: two record streams in, the first divergence (and what follows a control-flow
divergence) out, in memory bounded by a window of records the differ chooses.

**Alignment by identity, in a sliding window.** A's records are walked in A's own (causal) order;
each identity (``name:occurrence``, unique on a rank) is looked up among B's records read so far,
and B is read ahead until it is found or ``window`` unmatched B records are held. Nothing else is
kept, so memory does not grow with the trace or with a step: a program that never steps (one
"step" of a million records) is walked in the same bounded memory. Ops reordered by more than
``window`` records count as a control-flow divergence.

**Every recorded value is compared**: outputs, and inputs too, whatever the record kind (a record
with no outputs whose inputs differ is a RECEIVER, never a silent match).

**The first divergence** is the first record, in A's order, whose outputs or inputs differ, unless
a record that exists only in B comes earlier in B's order (then that is a CONTROL_FLOW divergence).

**After a control-flow divergence** the occurrence counters of the names involved no longer agree,
so the rest is aligned by the order of op names (:mod:`forensics.tracediff.align`), window by
window: each region where the runs executed different ops is counted (records only in A, only in
B, where, where they align again), and value differences found once they are aligned again are
listed as ``AFTER_CONTROL_FLOW``, never as an origin.

**Partial streams** (a killed or interrupted run): a side that ends early ends the comparison; the
other side's remaining records are "not compared", never a control-flow divergence.

By job: :mod:`forensics.tracediff.streams` reads the two streams and pairs records by identity,
:mod:`forensics.tracediff.pair` decides each pair (the one place that does),
:mod:`forensics.tracediff.regions` aligns the rest after a control flow, and
:mod:`forensics.tracediff.rank_report` writes what was found; this module runs the phases.
"""
from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable

from forensics.core import ops
from forensics.tracediff.pair import PairDecision
from forensics.tracediff.provenance import input_sources
from forensics.tracediff.rank_report import RankReport, continues_past
from forensics.tracediff.regions import MARGIN, RegionWalk
from forensics.tracediff.streams import RankStreams
from forensics.tracediff.traces import TraceRecord
from forensics.tracediff.divergence import CONTROL_FLOW, RECEIVER, RankResult, control_flow

#: records of the other side held while looking for a counterpart; bounds the differ's memory
WINDOW = 16_384
#: edits (records only in A + only in B) one alignment window may hold before giving up
MAX_EDITS = 512


class RankWalker:
    """Compares one rank's two streams; :meth:`run` returns the :class:`RankResult`."""

    def __init__(self, rank: int, a_stream: Iterable[TraceRecord], b_stream: Iterable[TraceRecord],
                 window: int = WINDOW, use_ordered: bool = True, max_edits: int = MAX_EDITS) -> None:
        self.rank = rank
        self.window = max(int(window), 2 * MARGIN + 2)
        self.max_edits = max_edits
        self.use_ordered = use_ordered
        self.report = RankReport(rank)
        self.result: RankResult = self.report.result
        self.streams = RankStreams(a_stream, b_stream, self.window, self.result.warnings)
        self.pairs = PairDecision(rank, self.report, self.window, use_ordered)
        self.last_b_seq = -1  # the latest (in B's order) B record matched so far
        #: the last pairs walked (bounded): a B-only record found late may precede some of them in
        #: B's order; they are walked again, aligned by order, after the control-flow divergence
        self.history: deque[tuple[TraceRecord, TraceRecord]] = deque(maxlen=self.window)
        if self.streams.end_a.partial:
            self.result.partial_a = self.streams.end_a.reason
        if self.streams.end_b.partial:
            self.result.partial_b = self.streams.end_b.reason
        self._resumed = False  # True once the columnar path compared a prefix (no leading-step skip then)

    @property
    def windowed(self) -> bool:
        """The runs traced different step windows (only the steps both traced are compared)."""
        return self.streams.windowed

    # ------------------------------------------------------------------ columnar prefix
    def fast_forward(self) -> int:
        """Compare the matching prefix of two native rank files in bulk (:mod:`forensics.tracediff.columnar`)
        and resume the walk after it with the state the walk would have reached there. Returns the
        records compared in bulk (0: the walk starts from the first record, as without it)."""
        from forensics.tracediff import columnar  # noqa: PLC0415 (pyarrow: heavy, and only native files need it)

        sa, sb = self.streams.a_stream, self.streams.b_stream
        if self.windowed or getattr(sa, "reopen", None) is None or getattr(sb, "reopen", None) is None:
            return 0  # (the files' own identities are not those of the steps both traced)
        try:
            if min(os.path.getsize(sa.path), os.path.getsize(sb.path)) < columnar.MIN_BYTES:
                return 0
        except OSError:
            return 0  # the walk opens the files and says what is wrong

        def on_gemm(raw: bytes, line_no: int) -> None:
            self.pairs.count_site(sa.parse(raw, line_no))

        def on_uninitialised(raw_a: bytes, line_a: int, raw_b: bytes, line_b: int) -> None:
            self.pairs.taint_outputs(sa.parse(raw_a, line_a), sb.parse(raw_b, line_b))

        try:
            pre = columnar.compare_prefix(sa.path, sb.path, self.use_ordered, self.window, ops.UNINITIALISED.pattern,
                                          on_gemm=on_gemm, on_uninitialised=on_uninitialised)
        except columnar.Unsupported:
            return 0
        if not pre.pairs:
            self.pairs.reset()
            return 0
        res = self.result
        res.records_compared += pre.pairs
        res.unproven_matches += pre.unproven
        for step in pre.steps:
            self.report.note_step(step)
        self.last_b_seq = pre.last_b_seq
        (ra, la), (rb, lb) = pre.last_pair
        self.history.append((sa.parse(ra, la), sb.parse(rb, lb)))
        self.streams.resume(sa.reopen(pre.a), sb.reopen(pre.b))
        self._resumed = True
        return pre.pairs

    # ------------------------------------------------------------------ phase 1: identity walk
    def run(self) -> RankResult:
        res, streams = self.result, self.streams
        if not self._resumed:
            streams.skip_leading_steps(res.warnings)
        if self.windowed:
            streams.check_common_steps()
        while True:
            a = streams.next_a()
            if a is None:
                return self._a_ended()
            self.report.note_step(a.step)
            b = streams.find_b(a.identity)
            if b is None:
                if streams.b_done and streams.end_b.partial and not streams.bbuf:
                    self.report.warn(continues_past("A", "B", streams.end_b.reason, a.seq))
                    return res
                streams.a_ahead.appendleft(a)
                earlier = streams.b_only_before(self.last_b_seq + 1)
                if earlier is not None:
                    return self._control_flow_from(earlier, "B")
                return self._control_flow_from(a, "A")
            if b.seq > self.last_b_seq:
                self.last_b_seq = b.seq
            res.records_compared += 1
            self.pairs.count_site(a)
            d = self.pairs.decide(a, b)
            if d is None:
                self.history.append((a, b))
            else:
                streams.put_back_b(b)
                earlier = streams.b_only_before(b.seq)
                if earlier is not None:
                    res.records_compared -= 1
                    streams.a_ahead.appendleft(a)
                    return self._control_flow_from(earlier, "B")
                if self.history:
                    ha, hb = self.history[-1]
                    if hb.seq - ha.seq != b.seq - a.seq:
                        d.warnings.append(f"the records before this one do not line up one to one: B's seq minus A's "
                                          f"was {hb.seq - ha.seq} at {ha.identity}, is {b.seq - a.seq} here; an op may "
                                          "have run in one run only, so the two records compared may be different "
                                          "calls of one op (control flow): compare what each run executed around here")
                self.report.first(d)
                return res
            held = streams.b_held_too_long()
            if held is not None:  # it stayed unmatched while A walked two windows past it
                return self._control_flow_from(held, "B")

    def _a_ended(self) -> RankResult:
        res, streams = self.result, self.streams
        streams.trim_border()
        left = streams.unmatched_b()
        if not left:
            nxt = streams.read_b()
            left = [nxt] if nxt is not None else []
        if not left:
            return res
        earlier = [r for r in left if r.seq < self.last_b_seq]
        if earlier:  # B-only records before B's last matched one: B executed ops A did not
            return self._control_flow_from(earlier[0], "B")
        if streams.end_a.partial:
            self.report.warn(continues_past("B", "A", streams.end_a.reason, left[0].seq))
            return res
        return self._control_flow_from(left[0], "B")

    # ------------------------------------------------------------------ phase 2: after control flow
    def _control_flow_from(self, rec: TraceRecord, side: str) -> RankResult:
        """Record the CONTROL_FLOW divergence at ``rec``, then align the rest by op-name order."""
        res, streams = self.result, self.streams
        if res.first_divergence is None:
            self.report.first(control_flow(self.rank, rec, side))
        unwound: list[TraceRecord] = []
        b_from: list[TraceRecord]
        if side == "B":
            # pairs already walked whose B record comes after the B-only one: walk them again, by order
            keep = [(x, y) for x, y in self.history if y.seq < rec.seq]
            unwound = [x for x, y in self.history if y.seq > rec.seq]
            self.history = deque(keep, maxlen=self.window)
            res.records_compared -= len(unwound)
            b_from = [r for r in streams.border if r.seq >= rec.seq]
        else:
            streams.trim_border()
            b_from = streams.unmatched_b()
        a_rest, b_rest = streams.rest(unwound, b_from)
        RegionWalk(self.report, streams.end_a, streams.end_b, self.window, self.max_edits,
                   self._compare_after).run(a_rest, b_rest)
        d = res.first_divergence
        if d is not None and d.verdict == CONTROL_FLOW and d.control_flow is None and res.control_flow_regions:
            d.control_flow = res.control_flow_regions[0]
        return res

    def _compare_after(self, a: TraceRecord, b: TraceRecord) -> None:
        self.report.compared_after_control_flow()
        self.report.note_step(a.step)
        d = self.pairs.decide(a, b)
        if d is not None:
            self.report.after_control_flow(d)


def walk_rank(rank: int, a_records: Iterable[TraceRecord], b_records: Iterable[TraceRecord], *,
              window: int = WINDOW, use_ordered: bool = True, columnar: bool = True) -> RankResult:
    """First divergence of one rank's two streams (each in its own seq order), in bounded memory.

    ``columnar``: two native rank files' matching prefix is compared in bulk first (same result)."""
    walker = RankWalker(rank, a_records, b_records, window=window, use_ordered=use_ordered)
    if columnar:
        walker.fast_forward()
    result = walker.run()
    d = result.first_divergence
    if d is not None and d.verdict == RECEIVER and d.differing_inputs and walker.windowed:
        d.warnings.append("where its differing input came from was not searched: the runs traced different step "
                          "windows, so a writer found in one run's file may lie in a step the other did not trace")
    elif d is not None and d.verdict == RECEIVER and d.differing_inputs:
        passed = {x.identity: x.artifact for x in result.artifacts + result.external if x.artifact}
        d.input_sources = input_sources(d, a_records, b_records, passed)
    return result
