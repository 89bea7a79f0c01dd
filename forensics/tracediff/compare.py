"""Comparing what two traces recorded about one tensor, and what that comparison proves.

Evidence levels (docs/method.md, "Evidence"), from strongest to weakest:

* ``DIFFER``     a recorded digest, shape or dtype differs: a difference is **proven**;
* ``EQUAL``      equal **order-sensitive** full digests (every element, in order) taken in the same
                 memory layout (``TensorDigest.layout``): equality proven; digests taken in
                 different layouts are not compared (the pair falls back to its other digests);
* ``SCREEN``     equal **order-independent** full digests (an XOR): the values are equal as a
                 multiset, but a reordering (an untraced permutation) would look the same;
* ``UNPROVEN``   equal sampled or summary digests: a screen that sees only part of the values;
* ``UNOBSERVED`` nothing recorded about the values (shape/dtype only, or no entry): proves nothing.

:func:`input_test` folds a record's input comparisons into the one status its verdict follows from.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from forensics.tracediff.traces import EVIDENCE_LEVELS, TensorDigest

EQUAL, SCREEN, UNPROVEN, UNOBSERVED, DIFFER = "equal", "screen", "unproven", "unobserved", "differ"
#: weakest last; a list's status is its weakest non-differing member
_ORDER = (EQUAL, SCREEN, UNPROVEN, UNOBSERVED)

REORDERED = "order-sensitive digest (order-independent digests equal: the values were reordered)"
#: why two recorded order-sensitive digests were not compared: each digests the bytes in its
#: tensor's memory order (``TensorDigest.layout``), and the two layouts differ
LAYOUTS_DIFFER = "order-sensitive digests taken in different memory layouts: not compared"


#: input entries whose one digest covers exact bytes (an order-independent XOR is for tensors):
#: ``args`` (the non-tensor arguments' reprs, in order) and ``generator`` (the state of the default
#: generator a random op drew from, docs/trace-format.md)
EXACT_ENTRIES = frozenset({"args", "generator"})

#: why two summaries were not compared: their texts name different algorithms (``summary:`` of the
#: first, 64-bit sum; ``sum32:``/``sum64:`` of today's, header ``evidence_digests.summary``)
SUMMARY_KINDS_DIFFER = "summary digests made by different algorithms: not compared"


def _summary_kind(digest: str) -> str:
    """The algorithm a summary's text names: what comes before its first ``:`` ("" when none)."""
    return digest.partition(":")[0] if ":" in digest else ""


def _weakest(a: str, b: str) -> str:
    ia = EVIDENCE_LEVELS.index(a) if a in EVIDENCE_LEVELS else len(EVIDENCE_LEVELS) - 1
    ib = EVIDENCE_LEVELS.index(b) if b in EVIDENCE_LEVELS else len(EVIDENCE_LEVELS) - 1
    return EVIDENCE_LEVELS[max(ia, ib)]


def compare_tensor(x: TensorDigest | None, y: TensorDigest | None, use_ordered: bool = True) -> tuple[str, str]:
    """``(status, how)`` for one tensor entry of two runs; ``how`` says what decided it."""
    if x is None and y is None:
        return EQUAL, "no tensor"
    if x is None or y is None:
        return DIFFER, "tensor on one side only"
    missing = x.unrecorded or y.unrecorded  # a field one trace lacks (its dtype): not compared, nothing proven
    if x.shape != y.shape or (x.dtype != y.dtype and not missing):
        return DIFFER, "shape/dtype"
    evidence = _weakest(x.evidence, y.evidence)
    if x.digest is not None and y.digest is not None and x.digest != y.digest:
        if evidence == "summary" and _summary_kind(x.digest) != _summary_kind(y.digest):
            return UNOBSERVED, SUMMARY_KINDS_DIFFER  # two algorithms' sums: neither equal nor different
        return DIFFER, "summary digest" if evidence == "summary" else "digest"
    ordered = use_ordered and x.ordered is not None and y.ordered is not None
    # an order-sensitive digest hashes the bytes in the tensor's memory order (``layout``): two of
    # them are comparable only when taken in the same layout; otherwise neither equal nor different
    # digests say anything, and the pair is compared as if no order-sensitive digest were recorded
    unlike = ordered and x.layout != y.layout
    if unlike:
        ordered = False
    if ordered and x.ordered != y.ordered:
        return DIFFER, REORDERED if (x.digest is not None and x.digest == y.digest) else "order-sensitive digest"
    if x.chunks is not None and y.chunks is not None and x.chunks != y.chunks:
        return DIFFER, "chunk digests (whole-tensor digest equal: a reordering)"
    if evidence == "metadata" or all(t.digest is None and t.ordered is None and t.chunks is None for t in (x, y)):
        return UNOBSERVED, "not recorded (shape/dtype only)"
    if x.digest is None or y.digest is None:
        if not ordered:
            if unlike:
                return UNOBSERVED, f"no comparable digest ({LAYOUTS_DIFFER})"
            return UNOBSERVED, "digest recorded on one side only"
    if missing:
        return UNPROVEN, f"{missing} not recorded"
    if evidence != "full":
        return UNPROVEN, f"{evidence} digest ({LAYOUTS_DIFFER})" if unlike else f"{evidence} digest"
    if ordered or x.dtype in EXACT_ENTRIES:  # non-tensor arguments, a generator's state: digests of exact bytes
        return EQUAL, "order-sensitive digest"
    return SCREEN, f"order-independent digest ({LAYOUTS_DIFFER})" if unlike else "order-independent digest"


@dataclass
class ListTest:
    """What comparing two tensor lists (a record's inputs, or its outputs) established."""

    status: str  # EQUAL | SCREEN | UNPROVEN | UNOBSERVED | DIFFER
    how: str  # what decided it (the first differing entry's reason, or the weakest equal one's)
    differing: list[int] = field(default_factory=list)
    weak: list[int] = field(default_factory=list)  # entries equal only as a screen or not observed

    @property
    def matched(self) -> bool:
        return self.status != DIFFER


def compare_tensors(xs: list[TensorDigest | None], ys: list[TensorDigest | None], use_ordered: bool = True) -> ListTest:
    """Compare two tensor lists entry by entry (a different count is a difference of them all)."""
    if len(xs) != len(ys):
        return ListTest(DIFFER, "different number of tensors", list(range(max(len(xs), len(ys)))))
    bad: list[int] = []
    bad_how: list[str] = []
    weakest, weakest_how, weak = EQUAL, "order-sensitive digest", []
    statuses, hows = [], []
    for i, (x, y) in enumerate(zip(xs, ys)):
        s, how = compare_tensor(x, y, use_ordered)
        statuses.append(s)
        hows.append(how)
        if s == DIFFER:
            bad.append(i)
            bad_how.append(how)
            continue
        if s != EQUAL:
            weak.append(i)
        if _ORDER.index(s) > _ORDER.index(weakest):
            weakest, weakest_how = s, how
    if bad:
        return ListTest(DIFFER, bad_how[0], bad, weak)
    # entries whose values were recorded but cannot be compared (order-sensitive digests in
    # different memory layouts and no order-independent digest on both sides): said as such
    unlike = [i for i, s in enumerate(statuses) if s == UNOBSERVED and LAYOUTS_DIFFER in hows[i]]
    if not xs or all(s == UNOBSERVED for s in statuses):
        if unlike:
            return ListTest(UNOBSERVED, f"no comparable values (entry {unlike[0]}: {hows[unlike[0]]})", [], weak)
        return ListTest(UNOBSERVED, "no values recorded" if xs else "nothing recorded", [], weak)
    if UNOBSERVED in statuses:  # some recorded and equal, some not recorded at all
        missing = [i for i, s in enumerate(statuses) if s == UNOBSERVED]
        if missing[0] in unlike:
            return ListTest(UNPROVEN, f"entry {missing[0]} not comparable ({hows[missing[0]]})", [], weak)
        return ListTest(UNPROVEN, f"entry {missing[0]} not recorded (shape/dtype only)", [], weak)
    return ListTest(weakest, weakest_how if weakest != EQUAL else "order-sensitive digest", [], weak)


def fast_equal(xs: list[TensorDigest | None], ys: list[TensorDigest | None], use_ordered: bool = True) -> bool:
    """The common case, decided cheaply: same full-evidence digests, shapes and dtypes (equal as far
    as the digests go; whether that is proof or a screen is decided by :func:`compare_tensors`). An
    entry's whole-tensor digest is its XOR or, when order-sensitive digests are compared
    (``use_ordered``), its order-sensitive one (a CPU tensor carries that alone)."""
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys):
        if x is None or y is None:
            if x is not y:
                return False
            continue
        if ((x.digest is None and (not use_ordered or x.ordered is None)) or x.digest != y.digest
                or x.evidence != "full" or y.evidence != "full"
                or x.shape != y.shape or x.dtype != y.dtype or x.chunks != y.chunks or x.ordered != y.ordered
                or x.layout != y.layout or x.unrecorded is not None):
            return False
    return True


def lists_equal(xs: list, ys: list, use_ordered: bool = True) -> bool:
    """Fast equality of two recorded lists: the reader's raw hint when it has one, else parsed."""
    hint = getattr(xs, "same_full_digests", None)
    return (hint is not None and hint(ys, use_ordered)) or fast_equal(xs, ys, use_ordered)
