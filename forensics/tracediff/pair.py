"""The one decision per record pair: a record of A and its counterpart in B match, differ only as
something passed over (a probe artifact, data from outside the traced ops, a library workspace,
memory a resize grew), or diverge (a :class:`Divergence` with its verdict).

The decision carries the state it needs across pairs: the values derived from artifacts (followed
from a producer's outputs to its consumers' inputs), the library workspaces, and the count of each
GEMM site's records seen so far (a divergence names its occurrence)."""
from __future__ import annotations

from collections import Counter
from typing import Any

from forensics.core import ops
from forensics.tracediff.compare import DIFFER, EQUAL, UNOBSERVED, UNPROVEN, ListTest, compare_tensors, lists_equal
from forensics.tracediff.rank_report import RankReport
from forensics.tracediff.traces import TraceRecord
from forensics.tracediff.divergence import (
    Divergence,
    artifact_reason,
    external_reason,
    grown_only,
    grown_outputs,
    grown_reason,
    grown_warning,
    judge,
    site_of,
    workspace_reason,
)

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


def _in(keys: _BoundedSet, a: TraceRecord, b: TraceRecord, i: int) -> bool:
    """Whether input ``i`` of the pair is one of ``keys`` (an artifact-derived value, a workspace)."""
    return i < len(a.inputs) and i < len(b.inputs) and any(p in keys for p in _pairs(a.inputs[i], b.inputs[i]))


def _only_from(keys: _BoundedSet, a: TraceRecord, b: TraceRecord, inputs: ListTest) -> bool:
    """Whether every differing input of the pair is one of ``keys`` (artifact-derived values)."""
    return inputs.status == DIFFER and bool(inputs.differing) and all(_in(keys, a, b, i) for i in inputs.differing)


class PairDecision:
    """Decides each (A record, B record) pair of one rank; what it passes over goes to ``report``."""

    def __init__(self, rank: int, report: RankReport, window: int, use_ordered: bool) -> None:
        self.rank = rank
        self.report = report
        self.use_ordered = use_ordered
        self.tainted = _BoundedSet(4 * window)  # (A key, B key) of tensors derived from artifacts
        #: (A key, B key) of library workspaces (partly uninitialised scratch): a reader whose only
        #: differing inputs they are passes while its outputs match; whose outputs differ is judged
        self.workspaces = _BoundedSet(4 * window)
        self.site_counts: Counter = Counter()
        self._uninit: dict[str, bool] = {}  # op name -> its outputs are uninitialised memory

    def reset(self) -> None:
        """Forget what a bulk comparison that compared nothing accumulated."""
        self.site_counts.clear()
        self.tainted.clear()
        self.workspaces.clear()

    def count_site(self, a: TraceRecord) -> None:
        if a.extra.get("gemm"):
            site = site_of(a)
            if site:
                self.site_counts[site] += 1

    def taint_outputs(self, a: TraceRecord, b: TraceRecord) -> None:
        """Remember the pair's outputs as artifact-derived (every digest kind)."""
        for x, y in zip(a.outputs, b.outputs):
            self._taint(x, y)

    def _taint(self, x: Any, y: Any) -> None:
        for p in _pairs(x, y):
            self.tainted.add(p)

    def _judge(self, a: TraceRecord, b: TraceRecord, inputs: ListTest, outputs: ListTest) -> Divergence:
        """The verdict of a pair that diverges (a GEMM's names its site occurrence)."""
        site = site_of(a) if a.extra.get("gemm") else None
        return judge(self.rank, a, b, inputs, outputs, self.site_counts[site] if site else None)

    def decide(self, a: TraceRecord, b: TraceRecord) -> Divergence | None:
        """None when the pair matches (or differs only as something passed over)."""
        uninit = self._uninit.get(a.name)
        if uninit is None:
            uninit = self._uninit[a.name] = bool(ops.UNINITIALISED.search(a.name))
        if uninit:  # garbage bits even when their digests happen to match (recycled memory, reordered)
            self.taint_outputs(a, b)
        ordered = self.use_ordered
        out_same = lists_equal(a.outputs, b.outputs, ordered)
        in_same = lists_equal(a.inputs, b.inputs, ordered)
        if out_same and in_same:
            return None
        external = external_reason(a)
        if external is not None:  # data from outside: listed, not judged, nothing passed through
            self.report.external(lambda: judge(self.rank, a, b, compare_tensors(a.inputs, b.inputs, ordered),
                                               compare_tensors(a.outputs, b.outputs, ordered)), external)
            return None
        outputs = _SAME if out_same else compare_tensors(a.outputs, b.outputs, ordered)
        outputs_differ = outputs.status == DIFFER
        if not outputs_differ and outputs.status in (UNPROVEN, UNOBSERVED) and a.outputs:
            self.report.unproven_match()
        if not outputs_differ and in_same:
            return None
        inputs = compare_tensors(a.inputs, b.inputs, ordered)
        if not outputs_differ and inputs.status != DIFFER:
            return None
        tainted = _only_from(self.tainted, a, b, inputs)
        # memory a storage resize grew, read before any traced op wrote it (the tracer's "g")
        grown = None if tainted or inputs.status != DIFFER else grown_only(
            a, b, inputs.differing, lambda i: _in(self.tainted, a, b, i))
        if not outputs_differ:  # inputs differ, outputs match or were not recorded
            if tainted or grown or _only_from(self.workspaces, a, b, inputs):  # noise that did not reach the outputs
                return None
            if out_same:  # say what the match rests on (a screen, or proof)
                outputs = compare_tensors(a.outputs, b.outputs, ordered)
            return judge(self.rank, a, b, inputs, outputs)
        workspace = workspace_reason(a, outputs.differing)
        reason = artifact_reason(a) or workspace
        follow = reason is not None  # the differing outputs are followed (tainted, or as a workspace)
        if reason is None and tainted:
            reason, follow = "consumes only artifact-derived inputs (passed through)", True
        if reason is None and grown:
            if not grown_outputs(a, b, outputs.differing):  # the uninitialised bytes reached a computed value
                d = self._judge(a, b, inputs, outputs)
                d.warnings.append(grown_warning(grown))
                return d
            # its differing outputs are that memory still (a view of it): their readers carry "g" too,
            # so nothing is passed through; a reader whose outputs differ is judged there
            reason = grown_reason(grown)
        if reason is None:
            return self._judge(a, b, inputs, outputs)
        for i in outputs.differing if follow else ():
            if i < len(a.outputs) and i < len(b.outputs):
                if reason is workspace:  # followed only while it changes nothing (a reader whose
                    for p in _pairs(a.outputs[i], b.outputs[i]):  # outputs differ is judged)
                        self.workspaces.add(p)
                else:
                    self._taint(a.outputs[i], b.outputs[i])
        self.report.artifact(lambda: judge(self.rank, a, b, inputs, outputs), reason)
        return None
