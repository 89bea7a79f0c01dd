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
"""
from __future__ import annotations

import os
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from typing import Any

from forensics.core.errors import BadInput
from forensics.core.window import parse_steps
from forensics.tracediff.align import edit_script
from forensics.tracediff.compare import DIFFER, EQUAL, UNOBSERVED, UNPROVEN, ListTest, compare_tensors, lists_equal
from forensics.tracediff.provenance import input_sources
from forensics.tracediff.traces import StreamEnd, TraceRecord, stream_end
from forensics.tracediff.verdicts import (
    RECEIVER,
    UNINITIALISED_OPS,
    Divergence,
    RankResult,
    after_control_flow,
    artifact_reason,
    control_flow,
    external_reason,
    grown_only,
    grown_outputs,
    grown_reason,
    grown_warning,
    judge,
    site_of,
    workspace_reason,
)

#: records of the other side held while looking for a counterpart; bounds the differ's memory
WINDOW = 16_384
#: edits (records only in A + only in B) one alignment window may hold before giving up
MAX_EDITS = 512
#: records left uncommitted at a window's end, so an edit near the end is decided with more context
MARGIN = 64
MAX_LISTED = 20  # artifacts, control-flow regions and later differences listed per rank (all counted)


_SAME = ListTest(EQUAL, "digest")


class _BoundedSet(dict):
    """A set that forgets its oldest members past ``limit`` (the differ's memory stays bounded)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def add(self, key: Any) -> None:
        self[key] = None
        if len(self) > self.limit:
            for old in list(self)[: self.limit // 2]:
                del self[old]


def _tkeys(t: Any) -> tuple[tuple, ...]:
    """A tensor value's keys for following artifacts from a producer's output to a consumer's input:
    one per whole-tensor digest it carries (the XOR digest; the order-sensitive one, with the memory
    layout it was taken in: equal order-sensitive digests in different layouts are not the same
    value). A producer's output and its consumer's input link by any kind both recorded (a CPU
    tensor carries ``o`` alone, except around chunked ops, which also keep ``h``)."""
    if t is None:
        return ()
    keys = []
    if t.digest is not None:
        keys.append(("h", t.shape, t.dtype, t.digest))
    if t.ordered is not None:
        keys.append(("o", t.shape, t.dtype, t.ordered, t.layout))
    return tuple(keys)


def _pairs(x: Any, y: Any) -> list[tuple]:
    """(A key, B key) pairs of one tensor of two runs, one per digest kind both sides carry (else
    the pair of whatever each carries, which a later pair of the same kinds can still match)."""
    kx, ky = _tkeys(x), _tkeys(y)
    pairs = [(a, b) for a in kx for b in ky if a[0] == b[0]]
    return pairs or [(kx, ky)]


class RankWalker:
    """Compares one rank's two streams; :meth:`run` returns the :class:`RankResult`."""

    def __init__(self, rank: int, a_stream: Iterable[TraceRecord], b_stream: Iterable[TraceRecord],
                 window: int = WINDOW, use_ordered: bool = True, max_edits: int = MAX_EDITS) -> None:
        self.rank = rank
        self.end_a: StreamEnd = stream_end(a_stream)
        self.end_b: StreamEnd = stream_end(b_stream)
        self.a: Iterator[TraceRecord] = iter(a_stream)
        self.b: Iterator[TraceRecord] = iter(b_stream)
        self.window = max(int(window), 2 * MARGIN + 2)
        self.max_edits = max_edits
        self.use_ordered = use_ordered
        self.result = RankResult(rank)
        self.a_ahead: deque[TraceRecord] = deque()  # A records read ahead, not yet walked
        self.a_done = False
        self.bbuf: dict[str, TraceRecord] = {}  # unmatched B records read so far, by identity
        self.border: deque[TraceRecord] = deque()  # B records read so far, in B's order
        self.b_done = False
        self.tainted = _BoundedSet(4 * self.window)  # (A key, B key) of tensors derived from artifacts
        #: (A key, B key) of library workspaces (partly uninitialised scratch): a reader whose only
        #: differing inputs they are passes while its outputs match; whose outputs differ is judged
        self.workspaces = _BoundedSet(4 * self.window)
        self.site_counts: Counter = Counter()
        self._uninit: dict[str, bool] = {}  # op name -> its outputs are uninitialised memory
        self._steps_seen: set = set()
        self.last_b_seq = -1  # the latest (in B's order) B record matched so far
        #: the last pairs walked (bounded): a B-only record found late may precede some of them in
        #: B's order; they are walked again, aligned by order, after the control-flow divergence
        self.history: deque[tuple[TraceRecord, TraceRecord]] = deque(maxlen=self.window)
        if self.end_a.partial:
            self.result.partial_a = self.end_a.reason
        if self.end_b.partial:
            self.result.partial_b = self.end_b.reason
        self._streams = (a_stream, b_stream)
        self._resumed = False  # True once the columnar path compared a prefix (no leading-step skip then)
        #: the runs traced different step windows (``forensics trace --steps``, from the headers):
        #: only the steps both traced are compared, occurrences counted from there (:func:`_in_steps`)
        common = _common_steps(getattr(a_stream, "steps", None), getattr(b_stream, "steps", None))
        self._windowed = common is not None
        if common is not None:
            dropped_a: Counter = Counter()
            dropped_b: Counter = Counter()
            self._steps_left_out: tuple[set, set] = (set(), set())
            self.a = _in_steps(self.a, common, dropped_a, self._steps_left_out[0])
            self.b = _in_steps(self.b, common, dropped_b, self._steps_left_out[1])
            self.result.warnings.append(
                f"the runs traced different step windows (A: {a_stream.steps}, B: {b_stream.steps}): only the "
                "steps both traced are compared, each op's occurrences counted from the first of them")

    # ------------------------------------------------------------------ columnar prefix
    def fast_forward(self) -> int:
        """Compare the matching prefix of two native rank files in bulk (:mod:`forensics.tracediff.columnar`)
        and resume the walk after it with the state the walk would have reached there. Returns the
        records compared in bulk (0: the walk starts from the first record, as without it)."""
        from forensics.tracediff import columnar  # noqa: PLC0415

        sa, sb = self._streams
        if self._windowed or getattr(sa, "reopen", None) is None or getattr(sb, "reopen", None) is None:
            return 0  # (the files' own identities are not those of the steps both traced)
        try:
            if min(os.path.getsize(sa.path), os.path.getsize(sb.path)) < columnar.MIN_BYTES:
                return 0
        except OSError:
            return 0  # the walk opens the files and says what is wrong

        def on_gemm(raw: bytes, line_no: int) -> None:
            self._count_site(sa.parse(raw, line_no))

        def on_uninitialised(raw_a: bytes, line_a: int, raw_b: bytes, line_b: int) -> None:
            a, b = sa.parse(raw_a, line_a), sb.parse(raw_b, line_b)
            for x, y in zip(a.outputs, b.outputs):
                self._taint(x, y)

        try:
            pre = columnar.compare_prefix(sa.path, sb.path, self.use_ordered, self.window, UNINITIALISED_OPS.pattern,
                                          on_gemm=on_gemm, on_uninitialised=on_uninitialised)
        except columnar.Unsupported:
            return 0
        if not pre.pairs:
            self.site_counts.clear()
            self.tainted.clear()
            self.workspaces.clear()
            return 0
        res = self.result
        res.records_compared += pre.pairs
        res.unproven_matches += pre.unproven
        for step in pre.steps:
            if step not in self._steps_seen:
                self._steps_seen.add(step)
                res.steps.append(step)
        self.last_b_seq = pre.last_b_seq
        (ra, la), (rb, lb) = pre.last_pair
        self.history.append((sa.parse(ra, la), sb.parse(rb, lb)))
        self.a = iter(sa.reopen(pre.a))
        self.b = iter(sb.reopen(pre.b))
        self._resumed = True
        return pre.pairs

    # ------------------------------------------------------------------ reading
    def _next_a(self) -> TraceRecord | None:
        if self.a_ahead:
            return self.a_ahead.popleft()
        if self.a_done:
            return None
        rec = next(self.a, None)
        if rec is None:
            self.a_done = True
        return rec

    def _read_b(self) -> TraceRecord | None:
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

    def _find_b(self, identity: str) -> TraceRecord | None:
        """B's record with this identity, reading B ahead up to the window; None if absent."""
        rec = self.bbuf.pop(identity, None)
        if rec is not None:
            return rec
        while len(self.bbuf) < self.window:
            nb = self._read_b()
            if nb is None:
                return None
            if nb.identity == identity:
                del self.bbuf[identity]
                return nb
        return None

    def _trim_border(self) -> None:
        bbuf, border = self.bbuf, self.border
        while border and bbuf.get(border[0].identity) is not border[0]:
            border.popleft()

    def _unmatched_b(self) -> list[TraceRecord]:
        return [r for r in self.border if self.bbuf.get(r.identity) is r]

    def _b_only_before(self, limit_seq: int | None) -> TraceRecord | None:
        """The first unmatched B record earlier (in B's order) than ``limit_seq`` that A does not
        have within the window ahead: it exists only in B, and comes first."""
        self._trim_border()
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

    def _note_step(self, rec: TraceRecord) -> None:
        if rec.step not in self._steps_seen:
            self._steps_seen.add(rec.step)
            self.result.steps.append(rec.step)

    @staticmethod
    def _in(keys: _BoundedSet, a: TraceRecord, b: TraceRecord, i: int) -> bool:
        """Whether input ``i`` of the pair is one of ``keys`` (an artifact-derived value, a workspace)."""
        return i < len(a.inputs) and i < len(b.inputs) and any(p in keys for p in _pairs(a.inputs[i], b.inputs[i]))

    def _only_from(self, keys: _BoundedSet, a: TraceRecord, b: TraceRecord, inputs: ListTest) -> bool:
        """Whether every differing input of the pair is one of ``keys`` (artifact-derived values)."""
        return inputs.status == DIFFER and bool(inputs.differing) and all(
            self._in(keys, a, b, i) for i in inputs.differing)

    def _taint(self, x: Any, y: Any) -> None:
        """Remember a tensor of A and its counterpart in B as artifact-derived (every digest kind)."""
        for p in _pairs(x, y):
            self.tainted.add(p)

    # ------------------------------------------------------------------ comparing one pair
    def _compare(self, a: TraceRecord, b: TraceRecord) -> Divergence | None:
        """None when the pair matches (or differs only as a known probe artifact)."""
        uninit = self._uninit.get(a.name)
        if uninit is None:
            uninit = self._uninit[a.name] = bool(UNINITIALISED_OPS.search(a.name))
        if uninit:  # garbage bits even when their digests happen to match (recycled memory, reordered)
            for x, y in zip(a.outputs, b.outputs):
                self._taint(x, y)
        out_same = lists_equal(a.outputs, b.outputs, self.use_ordered)
        in_same = lists_equal(a.inputs, b.inputs, self.use_ordered)
        if out_same and in_same:
            return None
        res = self.result
        external = external_reason(a)
        if external is not None:  # data from outside: listed, not judged, nothing passed through
            res.external_total += 1
            if len(res.external) < MAX_LISTED:
                outputs = compare_tensors(a.outputs, b.outputs, self.use_ordered)
                d = judge(self.rank, a, b, compare_tensors(a.inputs, b.inputs, self.use_ordered), outputs)
                d.artifact = external
                res.external.append(d)
            return None
        outputs = _SAME if out_same else compare_tensors(a.outputs, b.outputs, self.use_ordered)
        outputs_differ = outputs.status == DIFFER
        if not outputs_differ and outputs.status in (UNPROVEN, UNOBSERVED) and a.outputs:
            res.unproven_matches += 1
        if not outputs_differ and in_same:
            return None
        inputs = compare_tensors(a.inputs, b.inputs, self.use_ordered)
        if not outputs_differ and inputs.status != DIFFER:
            return None
        tainted = self._only_from(self.tainted, a, b, inputs)
        # memory a storage resize grew, read before any traced op wrote it (the tracer's "g")
        grown = None if tainted or inputs.status != DIFFER else grown_only(
            a, b, inputs.differing, lambda i: self._in(self.tainted, a, b, i))
        if not outputs_differ:  # inputs differ, outputs match or were not recorded
            if tainted or grown or self._only_from(self.workspaces, a, b, inputs):  # noise that did not reach the outputs
                return None
            if out_same:  # say what the match rests on (a screen, or proof)
                outputs = compare_tensors(a.outputs, b.outputs, self.use_ordered)
            return judge(self.rank, a, b, inputs, outputs)
        workspace = workspace_reason(a, outputs.differing)
        reason = artifact_reason(a) or workspace
        follow = reason is not None  # the differing outputs are followed (tainted, or as a workspace)
        if reason is None and tainted:
            reason, follow = "consumes only artifact-derived inputs (passed through)", True
        if reason is None and grown:
            if not grown_outputs(a, b, outputs.differing):  # the uninitialised bytes reached a computed value
                site = site_of(a) if a.extra.get("gemm") else None
                d = judge(self.rank, a, b, inputs, outputs, self.site_counts[site] if site else None)
                d.warnings.append(grown_warning(grown))
                return d
            # its differing outputs are that memory still (a view of it): their readers carry "g" too,
            # so nothing is passed through; a reader whose outputs differ is judged there
            reason = grown_reason(grown)
        if reason is not None:
            for i in outputs.differing if follow else ():
                if i < len(a.outputs) and i < len(b.outputs):
                    if reason is workspace:  # followed only while it changes nothing (a reader whose
                        for p in _pairs(a.outputs[i], b.outputs[i]):  # outputs differ is judged)
                            self.workspaces.add(p)
                    else:
                        self._taint(a.outputs[i], b.outputs[i])
            res.artifacts_total += 1
            if len(res.artifacts) < MAX_LISTED:
                d = judge(self.rank, a, b, inputs, outputs)
                d.artifact = reason
                res.artifacts.append(d)
            return None
        site = site_of(a) if a.extra.get("gemm") else None
        return judge(self.rank, a, b, inputs, outputs, self.site_counts[site] if site else None)

    def _count_site(self, a: TraceRecord) -> None:
        if a.extra.get("gemm"):
            site = site_of(a)
            if site:
                self.site_counts[site] += 1

    # ------------------------------------------------------------------ phase 1: identity walk
    def run(self) -> RankResult:
        res = self.result
        if not self._resumed:
            self._skip_leading_steps()
        if self._windowed:
            self._check_common_steps()
        while True:
            a = self._next_a()
            if a is None:
                return self._a_ended()
            self._note_step(a)
            b = self._find_b(a.identity)
            if b is None:
                if self.b_done and self.end_b.partial and not self.bbuf:
                    res.warnings.append(f"A continues past the end of B ({self.end_b.reason}): "
                                        f"A's records from seq {a.seq} on are not compared")
                    return res
                self.a_ahead.appendleft(a)
                earlier = self._b_only_before(self.last_b_seq + 1)
                if earlier is not None:
                    return self._control_flow_from(earlier, "B")
                return self._control_flow_from(a, "A")
            if b.seq > self.last_b_seq:
                self.last_b_seq = b.seq
            res.records_compared += 1
            self._count_site(a)
            d = self._compare(a, b)
            if d is None:
                self.history.append((a, b))
            if d is not None:
                self.bbuf[b.identity] = b  # put back: B's order may hold an earlier B-only record
                earlier = self._b_only_before(b.seq)
                if earlier is not None:
                    res.records_compared -= 1
                    self.a_ahead.appendleft(a)
                    return self._control_flow_from(earlier, "B")
                if self.history:
                    ha, hb = self.history[-1]
                    if hb.seq - ha.seq != b.seq - a.seq:
                        d.warnings.append(f"the records before this one do not line up one to one: B's seq minus A's "
                                          f"was {hb.seq - ha.seq} at {ha.identity}, is {b.seq - a.seq} here; an op may "
                                          "have run in one run only, so the two records compared may be different "
                                          "calls of one op (control flow): compare what each run executed around here")
                self._note_unproven_before(d)
                res.first_divergence = d
                return res
            if len(self.border) > 2 * self.window:
                self._trim_border()
                if len(self.border) > 2 * self.window:
                    # B's oldest unmatched record stayed unmatched while A walked two windows past it
                    return self._control_flow_from(self.border[0], "B")

    def _skip_leading_steps(self) -> None:
        """Steps traced by one run only at the start (the step windows differ) are skipped."""
        a = self._next_a()
        b = self._read_b()
        skipped_a = skipped_b = 0
        if a is not None and b is not None and isinstance(a.step, int) and isinstance(b.step, int):
            while a is not None and isinstance(a.step, int) and a.step < b.step:
                skipped_a += 1
                a = self._next_a()
            while (b is not None and a is not None and isinstance(b.step, int) and isinstance(a.step, int)
                   and b.step < a.step):
                skipped_b += 1
                del self.bbuf[b.identity]
                self.border.popleft()
                b = self._read_b()
        if a is not None:
            self.a_ahead.appendleft(a)
        if skipped_a:
            self.result.warnings.append(f"{skipped_a} record(s) of steps before step {b.step if b else '?'} are "
                                        "present only in A (the step windows differ?): not compared")
        if skipped_b:
            self.result.warnings.append(f"{skipped_b} record(s) of steps before step {a.step if a else '?'} are "
                                        "present only in B (the step windows differ?): not compared")

    def _check_common_steps(self) -> None:
        """Runs traced over different step windows that hold no recorded step in common cannot be
        compared (bad input, like two traces with no rank in common): said, never a CONTROL_FLOW."""
        a_none = not self.a_ahead and self.a_done
        b_none = not self.bbuf and self.b_done
        if not (a_none or b_none):
            return
        sa, sb = self._streams
        left_a, left_b = self._steps_left_out

        def span(steps: set) -> str:
            return f"{min(steps)}-{max(steps)}" if len(steps) > 1 else str(min(steps)) if steps else "none"
        side, stream, other, left = (("B", sb, sa, left_b) if b_none else ("A", sa, sb, left_a))
        raise BadInput(getattr(stream, "path", None) or side,
                       f"no recorded step in common with the other trace: this one recorded step(s) {span(left)} "
                       f"(window {stream.steps}), the other traced window {other.steps}; nothing to compare "
                       "(a run resumed from a checkpoint counts its steps from 0 again: trace both runs with "
                       "--steps all, and the diff aligns them again after the steps only one of them ran)")

    def _a_ended(self) -> RankResult:
        res = self.result
        self._trim_border()
        left = self._unmatched_b()
        if not left:
            nxt = self._read_b()
            left = [nxt] if nxt is not None else []
        if not left:
            return res
        earlier = [r for r in left if r.seq < self.last_b_seq]
        if earlier:  # B-only records before B's last matched one: B executed ops A did not
            return self._control_flow_from(earlier[0], "B")
        if self.end_a.partial:
            res.warnings.append(f"B continues past the end of A ({self.end_a.reason}): B's records from seq "
                                f"{left[0].seq} on are not compared")
            return res
        return self._control_flow_from(left[0], "B")

    def _note_unproven_before(self, d: Divergence) -> None:
        """A first divergence after records whose outputs matched on weak evidence only is the first
        one seen, not proven the first: one of those may have differed unseen."""
        n = self.result.unproven_matches
        if n:
            d.warnings.append(f"{n} earlier record(s) matched only by a screen (an order-independent digest) or had "
                              "no digest to compare (metadata): a difference there would not have been seen, so this is "
                              "the first divergence seen, not proven the first")

    # ------------------------------------------------------------------ phase 2: after control flow
    def _control_flow_from(self, rec: TraceRecord, side: str) -> RankResult:
        """Record the CONTROL_FLOW divergence at ``rec``, then align the rest by op-name order."""
        res = self.result
        if res.first_divergence is None:
            res.first_divergence = control_flow(self.rank, rec, side)
            self._note_unproven_before(res.first_divergence)
        unwound: list[TraceRecord] = []
        b_from: list[TraceRecord]
        if side == "B":
            # pairs already walked whose B record comes after the B-only one: walk them again, by order
            keep = [(x, y) for x, y in self.history if y.seq < rec.seq]
            unwound = [x for x, y in self.history if y.seq > rec.seq]
            self.history = deque(keep, maxlen=self.window)
            res.records_compared -= len(unwound)
            b_from = [r for r in self.border if r.seq >= rec.seq]
        else:
            self._trim_border()
            b_from = self._unmatched_b()
        a_rest = _chain(unwound + list(self.a_ahead), self.a)
        self.a_ahead.clear()
        b_rest = _chain(b_from, self.b)
        self.bbuf.clear()
        self.border.clear()
        self._sequence_walk(a_rest, b_rest)
        d = res.first_divergence
        if d is not None and d.verdict == "CONTROL_FLOW" and d.control_flow is None and res.control_flow_regions:
            d.control_flow = res.control_flow_regions[0]
        return res

    def _sequence_walk(self, a_rest: Iterator[TraceRecord], b_rest: Iterator[TraceRecord]) -> None:
        res = self.result
        window, max_window = self.window, 4 * self.window
        wa: list[TraceRecord] = []
        wb: list[TraceRecord] = []
        a_more = b_more = True
        region: dict[str, Any] | None = None
        while True:
            while a_more and len(wa) < window:
                r = next(a_rest, None)
                if r is None:
                    a_more = False
                else:
                    wa.append(r)
            while b_more and len(wb) < window:
                r = next(b_rest, None)
                if r is None:
                    b_more = False
                else:
                    wb.append(r)
            if not wa and not wb:
                break
            ops = edit_script([r.name for r in wa], [r.name for r in wb], self.max_edits)
            if ops is None:
                region = region or self._new_region()
                region["note"] = (f"no re-alignment within {len(wa)} records of A and {len(wb)} of B (more than "
                                  f"{self.max_edits} records differ): the rest is not compared")
                self._close_region(region)
                return
            ca = len(wa) - MARGIN if a_more else len(wa)
            cb = len(wb) - MARGIN if b_more else len(wb)
            used_a = used_b = 0
            stop = False
            for tag, i1, i2, j1, j2 in ops:
                if tag == "insert" and i1 == len(wa) and not a_more and self.end_a.partial:
                    res.warnings.append(f"B continues past the end of A ({self.end_a.reason}): B's records from "
                                        f"seq {wb[j1].seq} on are not compared")
                    stop = True
                    break
                if tag == "delete" and j1 == len(wb) and not b_more and self.end_b.partial:
                    res.warnings.append(f"A continues past the end of B ({self.end_b.reason}): A's records from "
                                        f"seq {wa[i1].seq} on are not compared")
                    stop = True
                    break
                if tag == "equal":
                    n = min(min(i2, ca) - i1, min(j2, cb) - j1)
                    if n <= 0:
                        break
                    if region is not None:
                        region["realigned_at"] = {"a": _where(wa[i1]), "b": _where(wb[j1])}
                        self._close_region(region)
                        region = None
                    for k in range(n):
                        self._compare_after(wa[i1 + k], wb[j1 + k])
                    used_a, used_b = i1 + n, j1 + n
                    if n < i2 - i1:
                        break
                    continue
                if i2 > ca or j2 > cb:
                    break  # an edit reaching into the window's margin: decide it with more context
                region = region or self._new_region()
                self._extend_region(region, wa[i1:i2], wb[j1:j2])
                used_a, used_b = i2, j2
            wa, wb = wa[used_a:], wb[used_b:]
            if stop:
                break
            if not (a_more or b_more) and not wa and not wb:
                break
            if used_a == 0 and used_b == 0:
                if window >= max_window or not (a_more or b_more):
                    region = region or self._new_region()
                    region["note"] = (f"no re-alignment within {len(wa)} records of A and {len(wb)} of B: the rest "
                                      "is not compared")
                    self._close_region(region)
                    return
                window *= 2  # nothing decidable yet: read more context
        if region is not None:
            region["note"] = "the runs did not align again before the end of the traces"
            self._close_region(region)

    def _new_region(self) -> dict[str, Any]:
        return {"only_in_a": 0, "only_in_b": 0, "first_only_in_a": None, "first_only_in_b": None,
                "a_seq": None, "b_seq": None, "realigned_at": None, "note": None}

    def _extend_region(self, region: dict[str, Any], only_a: list[TraceRecord], only_b: list[TraceRecord]) -> None:
        for side, recs in (("a", only_a), ("b", only_b)):
            if not recs:
                continue
            region[f"only_in_{side}"] += len(recs)
            if region[f"first_only_in_{side}"] is None:
                region[f"first_only_in_{side}"] = _where(recs[0])
            lo, hi = recs[0].seq, recs[-1].seq
            span = region[f"{side}_seq"]
            region[f"{side}_seq"] = [lo if span is None else min(span[0], lo), hi if span is None else max(span[1], hi)]

    def _close_region(self, region: dict[str, Any]) -> None:
        res = self.result
        res.control_flow_regions_total += 1
        if len(res.control_flow_regions) < MAX_LISTED:
            res.control_flow_regions.append(region)

    def _compare_after(self, a: TraceRecord, b: TraceRecord) -> None:
        res = self.result
        res.records_compared_after_control_flow += 1
        self._note_step(a)
        d = self._compare(a, b)
        if d is None:
            return
        res.after_control_flow_total += 1
        if len(res.after_control_flow) < MAX_LISTED:
            res.after_control_flow.append(after_control_flow(d))


def _where(rec: TraceRecord) -> dict[str, Any]:
    return {"identity": rec.identity, "seq": rec.seq, "step": rec.step}


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


def _in_steps(records: Iterator[TraceRecord], common: Any, dropped: Counter, left_out: set) -> Iterator[TraceRecord]:
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


def walk_rank(rank: int, a_records: Iterable[TraceRecord], b_records: Iterable[TraceRecord], *,
              window: int = WINDOW, use_ordered: bool = True, columnar: bool = True) -> RankResult:
    """First divergence of one rank's two streams (each in its own seq order), in bounded memory.

    ``columnar``: two native rank files' matching prefix is compared in bulk first (same result)."""
    walker = RankWalker(rank, a_records, b_records, window=window, use_ordered=use_ordered)
    if columnar:
        walker.fast_forward()
    result = walker.run()
    d = result.first_divergence
    if d is not None and d.verdict == RECEIVER and d.differing_inputs and walker._windowed:
        d.warnings.append("where its differing input came from was not searched: the runs traced different step "
                          "windows, so a writer found in one run's file may lie in a step the other did not trace")
    elif d is not None and d.verdict == RECEIVER and d.differing_inputs:
        passed = {x.identity: x.artifact for x in result.artifacts + result.external if x.artifact}
        d.input_sources = input_sources(d, a_records, b_records, passed)
    return result
