"""First-divergence differ: two op-level traces in, per-rank verdicts and a cross-rank pattern out.

Works only on the normalised records of :mod:`forensics.tracediff.traces`, so every reader (our own
``optrace`` JSONL, Megatron-Core determinism traces, DebugMode hash dumps) gets the same verdicts.

Per rank, records are aligned by **identity** (``name:occurrence``), never by position, one step
at a time: B's records of a step are held in a dict, A's are walked in A's own (causal) order.
Memory is bounded by the largest step of the window, not by the trace. The first record whose
outputs differ is classified by the input test:

* ``ORIGIN``       inputs matched, outputs differ: this op made the difference (a candidate site);
* ``RECEIVER``     inputs already differed: a consequence (or a collective fed by another rank);
* ``CONTROL_FLOW`` the record has no counterpart in the other run.

Known probe artifacts (uninitialised ``aten.empty*`` outputs and the ops that only pass them on,
in-flight ``non_blocking`` copies) are flagged and passed over, never named. Equality proven only
by weak evidence (``sampled``/``summary``/``metadata``) is *unproven*, and verdicts say so.
"""
from __future__ import annotations

import gc
import re
import shlex
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from forensics.errors import BadInput, BadSite
from forensics.site import gemm_site, parse_site
from forensics.tracediff.traces import EVIDENCE_LEVELS, TensorDigest, TraceRecord

REPORT_SCHEMA = "forensics.diff"
REPORT_VERSION = 1

ORIGIN, RECEIVER, CONTROL_FLOW = "ORIGIN", "RECEIVER", "CONTROL_FLOW"
EQUAL, UNPROVEN, DIFFER = "equal", "unproven", "differ"

#: Ops whose outputs are uninitialised memory: a difference there is a probe artifact.
UNINITIALISED_OPS = re.compile(r"(^|\.)(empty|empty_like|empty_strided|empty_permuted|new_empty|new_empty_strided)(\.|$)")
#: Copies that may be read by the tracer while still in flight when ``non_blocking=True``.
ASYNC_COPY_OPS = re.compile(r"(^|\.)(_to_copy|copy_|copy|to)(\.|$)")
#: Ops that cannot by themselves make a difference from equal inputs (one-hop-later rule).
TRIVIAL_OPS = frozenset({
    "view", "_unsafe_view", "reshape", "slice", "select", "narrow", "expand", "t", "transpose",
    "permute", "squeeze", "unsqueeze", "flatten", "unflatten", "split", "split_with_sizes", "chunk",
    "unbind", "as_strided", "alias", "detach", "clone", "contiguous", "_reshape_alias", "view_as",
    "add", "add_", "sub", "sub_", "mul", "mul_", "neg", "cat", "stack", "fill_", "zero_", "zeros_like",
    "ones_like", "lift_fresh", "copy_", "_to_copy", "to",
})
#: Ops whose output depends on generator state, not only on their tensor inputs.
RANDOM_OPS = re.compile(r"(rand|normal|uniform|bernoulli|dropout|multinomial|exponential|cauchy|geometric|log_normal)")
#: Record kinds whose outputs also depend on other ranks' data.
COLLECTIVE_KINDS = frozenset({"collective"})

MAX_ARTIFACTS_LISTED = 20


# --------------------------------------------------------------------------- tensor comparison

def _weakest(a: str, b: str) -> str:
    ia = EVIDENCE_LEVELS.index(a) if a in EVIDENCE_LEVELS else len(EVIDENCE_LEVELS) - 1
    ib = EVIDENCE_LEVELS.index(b) if b in EVIDENCE_LEVELS else len(EVIDENCE_LEVELS) - 1
    return EVIDENCE_LEVELS[max(ia, ib)]


def compare_tensor(x: TensorDigest | None, y: TensorDigest | None) -> tuple[str, str]:
    """``(status, how)``: status is equal / unproven / differ; ``how`` says what decided it."""
    if x is None and y is None:
        return EQUAL, "no tensor"
    if x is None or y is None:
        return DIFFER, "tensor on one side only"
    if x.shape != y.shape or x.dtype != y.dtype:
        return DIFFER, "shape/dtype"
    evidence = _weakest(x.evidence, y.evidence)
    if x.digest is not None and y.digest is not None and x.digest != y.digest:
        return DIFFER, "digest"
    if x.chunks is not None and y.chunks is not None and x.chunks != y.chunks:
        return DIFFER, "chunk digests (whole-tensor digest equal: a reordering)"
    if evidence == "metadata" or (x.digest is None and x.chunks is None) or (y.digest is None and y.chunks is None):
        return UNPROVEN, "metadata only"
    if evidence != "full":
        return UNPROVEN, f"{evidence} evidence"
    return EQUAL, "digest"


def compare_tensors(xs: list[TensorDigest | None], ys: list[TensorDigest | None]) -> tuple[str, list[int], str]:
    """Compare two tensor lists: ``(status, differing indexes, how)``."""
    if len(xs) != len(ys):
        return DIFFER, list(range(max(len(xs), len(ys)))), "different number of tensors"
    status, bad, hows = EQUAL, [], []
    for i, (x, y) in enumerate(zip(xs, ys)):
        s, how = compare_tensor(x, y)
        if s == DIFFER:
            bad.append(i)
            hows.append(how)
        elif s == UNPROVEN and status == EQUAL:
            status = UNPROVEN
            hows.append(how)
    if bad:
        return DIFFER, bad, hows[0] if hows else "digest"
    return status, [], (hows[0] if hows else "digest")


def _fast_equal(xs: list[TensorDigest | None], ys: list[TensorDigest | None]) -> bool:
    """The common case, decided cheaply: same full-evidence digests, shapes and dtypes."""
    if len(xs) != len(ys):
        return False
    for x, y in zip(xs, ys):
        if x is None or y is None:
            if x is not y:
                return False
            continue
        if (x.digest is None or x.digest != y.digest or x.evidence != "full" or y.evidence != "full"
                or x.shape != y.shape or x.dtype != y.dtype or x.chunks != y.chunks):
            return False
    return True


def _tkey(t: TensorDigest | None) -> tuple | None:
    return None if t is None else t.key()


def _tjson(t: TensorDigest | None) -> dict | None:
    if t is None:
        return None
    d = {"shape": list(t.shape) if t.shape is not None else None, "dtype": t.dtype, "numel": t.numel,
         "digest": t.digest, "evidence": t.evidence}
    if t.chunks is not None:
        d["chunks"] = len(t.chunks)
    return d


# --------------------------------------------------------------------------- report records

@dataclass
class Divergence:
    """One rank's first divergent record (or an artifact passed over)."""

    rank: int
    identity: str
    name: str
    verdict: str  # ORIGIN | RECEIVER | CONTROL_FLOW
    seq: int | None  # position in A's stream (B's for a B-only record)
    step: int | None
    inputs_matched: bool | None  # None for CONTROL_FLOW
    evidence: str  # "proven" | "unproven"
    site: str | None
    occurrence: int | None = None  # n-th record of this site on this rank, within the traced window
    kind: str = "op"
    side: str | None = None  # CONTROL_FLOW: "A" or "B" (which run has the record)
    how: str | None = None  # what decided the output difference (digest, chunk digests, shape...)
    differing_inputs: list[int] = field(default_factory=list)
    differing_outputs: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    artifact: str | None = None  # set on records passed over as probe artifacts
    source_a: str | None = None
    source_b: str | None = None
    outputs_a: list[dict | None] = field(default_factory=list)
    outputs_b: list[dict | None] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RankResult:
    rank: int
    first_divergence: Divergence | None = None
    records_compared: int = 0
    unproven_matches: int = 0  # records whose equality rests on weak evidence only
    artifacts: list[Divergence] = field(default_factory=list)
    artifacts_total: int = 0
    steps: list[int | None] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "first_divergence": self.first_divergence.to_json() if self.first_divergence else None,
            "records_compared": self.records_compared,
            "unproven_matches": self.unproven_matches,
            "artifacts": [a.to_json() for a in self.artifacts],
            "artifacts_total": self.artifacts_total,
            "steps": self.steps,
            "warnings": self.warnings,
        }


@dataclass
class DiffReport:
    a: str
    b: str
    format: str
    ranks: dict[int, RankResult]
    comparability: list[dict[str, Any]] = field(default_factory=list)
    pattern: str = "none"
    pattern_explanation: str = ""
    site: str | None = None
    occurrence: int | None = None
    site_rank: int | None = None
    site_step: int | None = None
    next_command: str | None = None
    warnings: list[str] = field(default_factory=list)

    @property
    def diverged(self) -> bool:
        return any(r.first_divergence is not None for r in self.ranks.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": REPORT_SCHEMA,
            "version": REPORT_VERSION,
            "a": self.a,
            "b": self.b,
            "format": self.format,
            "diverged": self.diverged,
            "pattern": self.pattern,
            "pattern_explanation": self.pattern_explanation,
            "site": self.site,
            "occurrence": self.occurrence,
            "site_rank": self.site_rank,
            "site_step": self.site_step,
            "next_command": self.next_command,
            "comparability": self.comparability,
            "warnings": self.warnings,
            "ranks": {str(r): res.to_json() for r, res in sorted(self.ranks.items())},
        }


# --------------------------------------------------------------------------- naming

def site_of(rec: TraceRecord) -> str | None:
    """The site a record names: ``gemm:<layout>:acc<a>:grad<g>`` when the record carries GEMM meta,
    else the op name when it is a valid ATen-style site, else None."""
    if rec.kind in ("collective", "optimizer", "backward", "event", "boundary") and not rec.extra.get("gemm"):
        return None  # semantic boundaries are not kernel sites
    gemm = rec.extra.get("gemm") if isinstance(rec.extra, dict) else None
    if isinstance(gemm, dict) and gemm.get("layout"):
        try:
            return str(gemm_site(gemm["layout"], gemm.get("acc", 0), gemm.get("grad", 0)))
        except BadSite:
            pass
    try:
        return str(parse_site(rec.name))
    except BadSite:
        return None


def _base_op(name: str) -> str:
    """``aten.add_.Tensor`` -> ``add_``; ``add`` -> ``add``."""
    parts = name.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] in ("aten", "prims", "c10d", "_c10d_functional") else parts[0]


def artifact_reason(rec: TraceRecord) -> str | None:
    """Why a record's output difference is a known probe artifact, or None."""
    if UNINITIALISED_OPS.search(rec.name):
        return "uninitialised memory (empty*): its bits are whatever was there"
    if ASYNC_COPY_OPS.search(rec.name) and bool(rec.extra.get("non_blocking")):
        return "non_blocking copy read while possibly in flight"
    return None


# --------------------------------------------------------------------------- per-rank walk

def _group_by_step(records: Iterable[TraceRecord]) -> Iterator[tuple[int | None, list[TraceRecord]]]:
    """Consecutive records of one step, as lists (the unit that bounds memory)."""
    step: int | None = None
    group: list[TraceRecord] = []
    for rec in records:
        if group and rec.step != step:
            yield step, group
            group = []
        step = rec.step
        group.append(rec)
    if group:
        yield step, group


@dataclass
class _Walker:
    """Compares one rank's two streams, step by step."""

    rank: int
    result: RankResult
    tainted: set = field(default_factory=set)  # (A key, B key) of tensors derived from artifacts
    site_counts: Counter = field(default_factory=Counter)

    def run(self, a_records: Iterable[TraceRecord], b_records: Iterable[TraceRecord]) -> RankResult:
        ga, gb = _group_by_step(a_records), _group_by_step(b_records)
        na, nb = next(ga, None), next(gb, None)
        while na is not None or nb is not None:
            if na is None or nb is None:
                side, (step, grp) = ("B", nb) if na is None else ("A", na)
                self.result.warnings.append(f"step {step} present only in {side} ({len(grp)} records)")
                if self.result.first_divergence is None:
                    self._control_flow(grp[0], side)
                return self.result
            (sa, ra), (sb, rb) = na, nb
            if sa == sb or sa is None or sb is None:
                self.result.steps.append(sa)
                if self._compare_step(ra, rb):
                    return self.result
                na, nb = next(ga, None), next(gb, None)
            elif sa < sb:
                self.result.warnings.append(f"step {sa} present only in A (windows differ?)")
                na = next(ga, None)
            else:
                self.result.warnings.append(f"step {sb} present only in B (windows differ?)")
                nb = next(gb, None)
        return self.result

    def _compare_step(self, ra: list[TraceRecord], rb: list[TraceRecord]) -> bool:
        """Walk one step; True when the first divergence is found."""
        self._compared = 0  # records compared in this step
        try:
            return self._walk_step(ra, rb)
        finally:
            self.result.records_compared += self._compared

    def _walk_step(self, ra: list[TraceRecord], rb: list[TraceRecord]) -> bool:
        index_b = {rec.identity: rec for rec in rb}
        if len(index_b) != len(rb):
            dup = Counter(r.identity for r in rb).most_common(1)[0][0]
            raise BadInput(rb[0].source or "B", f"identity {dup!r} occurs twice in step {rb[0].step}: not an op-level trace with per-name occurrences")
        ids_a = {r.identity for r in ra}
        last_b_seq = -1
        for a in ra:
            b = index_b.get(a.identity)
            if b is None:
                # A record with no counterpart; a B-only record may come earlier in B's order.
                self._first_b_only_before(ids_a, rb, last_b_seq + 1) or self._control_flow(a, "A")
                return True
            if b.seq > last_b_seq:
                last_b_seq = b.seq
            self._compared += 1
            site = site_of(a) if a.extra.get("gemm") else None
            if site:
                self.site_counts[site] += 1
            ao, bo = a.outputs, b.outputs
            fast = getattr(ao, "same_full_digests", None)  # optional reader hint (forensics.tracediff.traces.native)
            if (fast is not None and fast(bo)) or _fast_equal(ao, bo):
                continue
            out_status, out_bad, how = compare_tensors(a.outputs, b.outputs)
            if out_status == UNPROVEN:
                self.result.unproven_matches += 1
                continue
            if out_status == EQUAL:
                continue
            in_status, in_bad, _ = compare_tensors(a.inputs, b.inputs)
            reason = artifact_reason(a)
            if reason is None and in_status == DIFFER and in_bad and all(
                (_tkey(a.inputs[i]), _tkey(b.inputs[i])) in self.tainted for i in in_bad
            ):
                reason = "consumes only artifact-derived inputs (passed through)"
            if reason is not None:
                for i in out_bad:
                    self.tainted.add((_tkey(a.outputs[i]), _tkey(b.outputs[i])))
                self.result.artifacts_total += 1
                if len(self.result.artifacts) < MAX_ARTIFACTS_LISTED:
                    d = self._divergence(a, b, in_status, in_bad, out_bad, how)
                    d.artifact = reason
                    self.result.artifacts.append(d)
                continue
            earlier = self._first_b_only_before(ids_a, rb, b.seq)
            if earlier:
                return True
            self.result.first_divergence = self._divergence(a, b, in_status, in_bad, out_bad, how)
            return True
        # A's step is done; any B-only record is control flow.
        return self._first_b_only_before(ids_a, rb, None)

    def _first_b_only_before(self, ids_a: set[str], rb: list[TraceRecord], limit_seq: int | None) -> bool:
        """A B-only record earlier (in B's order) than ``limit_seq`` is the first divergence."""
        for b in rb:
            if limit_seq is not None and b.seq >= limit_seq:
                break
            if b.identity not in ids_a:
                self._control_flow(b, "B")
                return True
        return False

    def _control_flow(self, rec: TraceRecord, side: str) -> None:
        other = "B" if side == "A" else "A"
        self.result.first_divergence = Divergence(
            rank=self.rank, identity=rec.identity, name=rec.name, verdict=CONTROL_FLOW, seq=rec.seq,
            step=rec.step, inputs_matched=None, evidence="proven", site=None, kind=rec.kind, side=side,
            how=f"no counterpart in {other}",
            warnings=[f"{rec.identity} exists only in {side}: control flow diverged at or before it "
                      f"(a data-dependent branch, a different op count, or a truncated trace)"],
            source_a=rec.source if side == "A" else None, source_b=rec.source if side == "B" else None,
        )

    def _divergence(self, a: TraceRecord, b: TraceRecord, in_status: str, in_bad: list[int],
                    out_bad: list[int], how: str) -> Divergence:
        inputs_matched = in_status != DIFFER
        verdict = ORIGIN if inputs_matched else RECEIVER
        warnings: list[str] = []
        evidence = "proven"
        if in_status == UNPROVEN:
            evidence = "unproven"
            warnings.append("inputs equal only by weak (sampled/summary/metadata) evidence: ORIGIN unproven")
        if self.result.unproven_matches:
            warnings.append(f"{self.result.unproven_matches} earlier record(s) matched only by weak evidence: "
                            "'first' is unproven")
        if a.kind in COLLECTIVE_KINDS and inputs_matched:
            verdict = RECEIVER
            warnings.append("collective with matching local inputs: the difference came from another rank's "
                            "contribution (or the collective's own reduction order if every rank's inputs matched)")
        base = _base_op(a.name)
        if verdict == ORIGIN and base in TRIVIAL_OPS:
            warnings.append(f"one hop later: {base} cannot change bits by itself from equal inputs; the producer "
                            "above it is uninstrumented (a kernel that bypasses the dispatcher). Add a probe there")
        if verdict == ORIGIN and RANDOM_OPS.search(base):
            warnings.append("random op: its output depends on generator state, not only its inputs; check seeds")
        if "chunk" in how:
            warnings.append("whole-tensor digests are equal; per-chunk digests differ: the values were reordered")
        site = site_of(a)
        occurrence = None
        if site and site.startswith("gemm:"):
            occurrence = self.site_counts[site] or None
        elif site:
            occurrence = _occurrence_of(a.identity)
        return Divergence(
            rank=self.rank, identity=a.identity, name=a.name, verdict=verdict, seq=a.seq, step=a.step,
            inputs_matched=inputs_matched, evidence=evidence, site=site if verdict == ORIGIN else None,
            occurrence=occurrence if verdict == ORIGIN else None, kind=a.kind, how=how,
            differing_inputs=in_bad, differing_outputs=out_bad, warnings=warnings,
            source_a=a.source, source_b=b.source,
            outputs_a=[_tjson(a.outputs[i]) for i in out_bad if i < len(a.outputs)],
            outputs_b=[_tjson(b.outputs[i]) for i in out_bad if i < len(b.outputs)],
        )


def _occurrence_of(identity: str) -> int | None:
    tail = identity.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def diff_rank(rank: int, a_records: Iterable[TraceRecord], b_records: Iterable[TraceRecord]) -> RankResult:
    """First divergence of one rank's two streams (each in its own seq order)."""
    return _Walker(rank, RankResult(rank)).run(a_records, b_records)


# --------------------------------------------------------------------------- across ranks

def classify_pattern(results: dict[int, RankResult], world_size: int | None = None) -> tuple[str, str]:
    """The cross-rank pattern and what it means. Resolves collective receivers in place."""
    firsts = {r: res.first_divergence for r, res in results.items() if res.first_divergence is not None}
    if not firsts:
        return "none", "no divergence on any compared rank"
    # A collective whose local inputs matched on EVERY rank of the world: the collective itself.
    coll = [d for d in firsts.values() if d.kind in COLLECTIVE_KINDS and d.inputs_matched]
    all_ranks = world_size is not None and len(results) >= world_size
    if coll and len(coll) == len(results) and all_ranks and len({d.identity for d in coll}) == 1:
        for d in coll:
            d.verdict = ORIGIN
            d.site = d.site or (d.name if d.name.startswith("c10d.") and _valid_site(d.name) else None)
            d.warnings.append("every rank fed this collective matching inputs: the collective itself differs "
                              "(reduction order / algorithm)")
    origins = {r: d for r, d in firsts.items() if d.verdict == ORIGIN}
    control = {r: d for r, d in firsts.items() if d.verdict == CONTROL_FLOW}
    n = len(results)
    if not origins and not control:
        return "only_receivers", ("no origin on any compared rank, only receivers: the origin is outside the traced "
                                  "window or on an untraced rank; widen the window (--steps) or the ranks (--ranks)")
    if not origins:
        return "control_flow", "control flow diverged before any value did: compare what each run executed"
    if n == 1:
        return "single_rank", ("one rank compared: an ORIGIN, but whether the op or its input distribution is to "
                                "blame needs more ranks")
    names = Counter(d.name for d in origins.values())
    top, count = names.most_common(1)[0]
    if count >= 2 and len(names) == 1 and count * 2 > n:
        return "op_nondeterministic", (f"{count} of {n} ranks have their origin at the same op ({top}): the operation "
                                       "itself is nondeterministic; any of those ranks is a valid site")
    return "subset", (f"origins on {len(origins)} of {n} ranks: the op is likely fine and its input distribution, "
                      "reduction order or rank placement is not")


def _valid_site(name: str) -> bool:
    try:
        parse_site(name)
        return True
    except BadSite:
        return False


def suggest_site(results: dict[int, RankResult]) -> Divergence | None:
    """The origin to hand to ``forensics kernel``: the most common origin site, lowest rank first."""
    origins = [res.first_divergence for _, res in sorted(results.items())
               if res.first_divergence is not None and res.first_divergence.verdict == ORIGIN
               and res.first_divergence.site]
    if not origins:
        return None
    counts = Counter(d.site for d in origins)
    best = max(counts.values())
    return next(d for d in origins if counts[d.site] == best)


def next_command(origin: Divergence | None, argv: list[str] | None, pattern: str,
                 steps: list[int | None] | None = None) -> str:
    """The command to run next: ``forensics kernel`` on the site (occurrence, rank and the traced
    steps, so occurrences count alike), or a wider trace when no ORIGIN was found."""
    cmd = shlex.join(argv) if argv else "<command>"
    if origin is not None and origin.site:
        site = f"{origin.site}#{origin.occurrence}" if origin.occurrence else origin.site
        known = sorted(s for s in (steps or []) if isinstance(s, int))
        window = "" if not known else f" --steps {known[0]}" + (f"-{known[-1]}" if known[-1] != known[0] else "")
        return f"forensics kernel --site {shlex.quote(site)} --ranks {origin.rank}{window} -- {cmd}"
    return f"forensics trace --steps all --ranks all --out <dir> -- {cmd}"


def diff_streams(
    a_ranks: dict[int, Iterable[TraceRecord]],
    b_ranks: dict[int, Iterable[TraceRecord]],
    *,
    a_name: str = "A",
    b_name: str = "B",
    fmt: str = "native",
    run_info_a: dict | None = None,
    run_info_b: dict | None = None,
    only_rank: int | None = None,
) -> DiffReport:
    """Diff two traces given as per-rank record iterables (streamed: consumed once, step by step)."""
    # Records are acyclic; the cyclic GC would rescan every live step dict at each allocation burst
    # (10x slower on large steps), so it is paused for the walk.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _diff_streams(a_ranks, b_ranks, a_name=a_name, b_name=b_name, fmt=fmt, run_info_a=run_info_a,
                             run_info_b=run_info_b, only_rank=only_rank)
    finally:
        if gc_was_enabled:
            gc.enable()


def _diff_streams(a_ranks, b_ranks, *, a_name, b_name, fmt, run_info_a, run_info_b, only_rank):  # noqa: ANN001, ANN202
    from forensics.tracediff.comparability import compare_runs  # noqa: PLC0415

    run_info_a, run_info_b = run_info_a or {}, run_info_b or {}
    report = DiffReport(a=a_name, b=b_name, format=fmt, ranks={})
    report.comparability = [d.to_json() for d in compare_runs(run_info_a, run_info_b)]
    ranks = sorted(set(a_ranks) | set(b_ranks))
    if only_rank is not None:
        if only_rank not in ranks:
            raise BadInput(a_name, f"rank {only_rank} is in neither trace (ranks: {ranks})")
        ranks = [only_rank]
    for r in ranks:
        if r not in a_ranks or r not in b_ranks:
            side = "B" if r not in a_ranks else "A"
            report.warnings.append(f"rank {r} traced only in {side}: not compared")
            continue
        report.ranks[r] = diff_rank(r, a_ranks[r], b_ranks[r])
    if not report.ranks:
        raise BadInput(b_name, f"no rank in common with {a_name}: nothing to compare")
    world = run_info_a.get("world_size")
    report.pattern, report.pattern_explanation = classify_pattern(report.ranks, world if isinstance(world, int) else None)
    origin = suggest_site(report.ranks)
    if origin is not None:
        report.site, report.occurrence = origin.site, origin.occurrence
        report.site_rank, report.site_step = origin.rank, origin.step
    steps = report.ranks[origin.rank].steps if origin is not None else None
    report.next_command = next_command(origin, run_info_a.get("argv"), report.pattern, steps)
    if isinstance(world, int) and len(report.ranks) < world and report.pattern in ("none", "only_receivers"):
        report.warnings.append(f"{len(report.ranks)} of {world} ranks compared: a clean result says nothing "
                               "about the ranks not traced")
    for side, info in (("A", run_info_a), ("B", run_info_b)):
        for r, n in sorted((info.get("_dropped") or {}).items()):
            report.warnings.append(f"{side} rank {r} dropped {n} record(s) past its record budget: nothing is known "
                                   "beyond the last record kept (raise --max-records or narrow --steps)")
    for res in report.ranks.values():
        if res.first_divergence is None and res.artifacts_total:
            res.warnings.append(f"{res.artifacts_total} probe artifact(s) passed over; no real divergence")
    return report


def diff_paths(path_a: Path, path_b: Path, fmt: str = "auto", rank: int | None = None) -> DiffReport:
    """Open two traces with their reader (detected or given) and diff them."""
    from forensics.tracediff.traces import detect_format, readers  # noqa: PLC0415

    path_a, path_b = Path(path_a), Path(path_b)
    for p in (path_a, path_b):
        if not p.exists():
            raise BadInput(p, "no such file or directory")
    all_readers = readers()
    if fmt == "auto":
        fa, fb = detect_format(path_a), detect_format(path_b)
        if fa is None:
            raise BadInput(path_a, f"not a trace any reader recognises (readers: {', '.join(sorted(all_readers))})")
        if fb is None:
            raise BadInput(path_b, f"not a trace any reader recognises (readers: {', '.join(sorted(all_readers))})")
        if fa != fb:
            raise BadInput(path_b, f"format {fb!r} differs from {path_a}'s format {fa!r}: diff two traces of one "
                                   "format (convert one, or pass --format to force a reader)")
        fmt = fa
    if fmt not in all_readers:
        raise BadInput(path_a, f"unknown trace format {fmt!r}; known: {', '.join(sorted(all_readers))}")
    reader = all_readers[fmt]
    a_ranks, info_a = _open(reader, path_a)
    b_ranks, info_b = _open(reader, path_b)
    return diff_streams(a_ranks, b_ranks, a_name=str(path_a), b_name=str(path_b), fmt=fmt,
                        run_info_a=info_a, run_info_b=info_b, only_rank=rank)


def _open(reader: Any, path: Path) -> tuple[dict[int, Iterable[TraceRecord]], dict]:
    """Per-rank record iterables (lazy when the reader streams) and the run info."""
    if reader.iter_ranks is not None:
        ranks = dict(reader.iter_ranks(path))
        info = reader.run_info(path) if getattr(reader, "run_info", None) else {}
        return ranks, info or {}
    trace = reader.read(path)
    return dict(trace.ranks), dict(trace.run_info or {})


# --------------------------------------------------------------------------- text output

def format_report(report: DiffReport) -> str:
    """Human-readable summary (the JSON report has everything)."""
    lines = [f"forensics diff: {report.a}  vs  {report.b}  (format {report.format})"]
    for d in report.comparability:
        lines.append(f"  comparability: {d['field']} differs: A={d['a']!r} B={d['b']!r} ({d['severity']})")
    for r, res in sorted(report.ranks.items()):
        d = res.first_divergence
        head = f"rank {r}: {res.records_compared} records compared"
        if res.artifacts_total:
            head += f", {res.artifacts_total} probe artifact(s) passed over"
        if d is None:
            lines.append(f"{head}; no divergence")
        else:
            matched = {True: "inputs MATCH", False: "inputs DIFFER", None: "no counterpart"}[d.inputs_matched]
            if d.kind in COLLECTIVE_KINDS and d.inputs_matched:
                matched = "local inputs MATCH (collective)"
            lines.append(f"{head}; first divergence: {d.verdict} ({d.evidence}) {d.identity} seq={d.seq} "
                         f"step={d.step} {matched}; output differs by {d.how}"
                         + (f"; site {d.site}" + (f"#{d.occurrence}" if d.occurrence else "") if d.site else ""))
            for w in d.warnings:
                lines.append(f"    warning: {w}")
        for a in res.artifacts[:3]:
            lines.append(f"    artifact passed over: {a.identity} ({a.artifact})")
        for w in res.warnings:
            lines.append(f"    note: {w}")
    for w in report.warnings:
        lines.append(f"warning: {w}")
    lines.append(f"pattern: {report.pattern}: {report.pattern_explanation}")
    if report.site:
        lines.append(f"site: {report.site}" + (f"#{report.occurrence}" if report.occurrence else "")
                     + f" (rank {report.site_rank}, step {report.site_step})")
    else:
        lines.append("site: none named")
    lines.append(f"next: {report.next_command}")
    return "\n".join(lines)
