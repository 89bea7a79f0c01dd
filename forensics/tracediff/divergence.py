"""One record pair's verdict (:func:`judge`) and the records that carry it (:class:`Divergence`,
:class:`RankResult`); the words are :mod:`forensics.core.words`'s.

A rank's first divergence gets exactly one verdict, from the input test (docs/method.md):

* ``ORIGIN``          outputs differ, inputs matched: this op made the difference. ``evidence`` is
                      ``proven`` only when every input is equal by an order-sensitive full digest,
                      else ``unproven`` with the reason (``order-independent input digest``, ...);
* ``RECEIVER``        an input differs (proven by a digest): a consequence of an earlier difference,
                      or a collective fed by another rank;
* ``INPUTS_UNKNOWN``  outputs differ and no input value was recorded: the input test cannot be
                      applied; the record is the first difference seen, never an origin;
* ``CONTROL_FLOW``    the record has no counterpart in the other run.

Differences found after a control-flow divergence (once the runs align again) are listed with the
verdict ``AFTER_CONTROL_FLOW``: never an origin, since the two runs no longer did the same work.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from forensics.core import ops
from forensics.core.formats.optrace import EXACT_SUMMARY
from forensics.core.site import is_gemm_label, site_for_record
from forensics.tracediff.compare import DIFFER, EQUAL, EXACT_ENTRIES, LAYOUTS_DIFFER, SCREEN, UNOBSERVED, UNPROVEN, ListTest
from forensics.tracediff.traces import EVIDENCE_LEVELS, TensorDigest, TraceRecord

from forensics.core.words import (
    AFTER_CONTROL_FLOW,
    CONTROL_FLOW,
    INPUTS_UNKNOWN,
    NO_EVIDENCE,
    ORIGIN,
    PROVEN,
    RECEIVER,
    UNPROVEN_EVIDENCE,
)

#: Record kinds whose outputs also depend on other ranks' data.
COLLECTIVE_KINDS = frozenset({"collective"})
#: Record kinds that are boundaries of the program, never a kernel site.
SEMANTIC_KINDS = frozenset({"collective", "optimizer", "backward", "event", "boundary"})

#: what to enable so that equal inputs become proof (the tracer's option, docs/commands/trace.md)
ENABLE_ORDERED = ("record order-sensitive input digests (`forensics trace --ordered-digests inputs`; CPU tensors "
                  "get them by default) over this step and rank to prove it")


@dataclass
class Divergence:
    """One rank's first divergent record (or an artifact passed over, or a later difference)."""

    rank: int
    identity: str
    name: str
    verdict: str  # ORIGIN | RECEIVER | INPUTS_UNKNOWN | CONTROL_FLOW | AFTER_CONTROL_FLOW
    seq: int | None  # position in A's stream (B's for a B-only record)
    step: int | None
    inputs_matched: bool | None  # None: no counterpart (CONTROL_FLOW) or no input recorded
    evidence: str  # "proven" | "unproven" | "none"
    site: str | None
    occurrence: int | None = None  # n-th record of this site on this rank, within the traced window
    kind: str = "op"
    side: str | None = None  # CONTROL_FLOW: "A" or "B" (which run has the record)
    how: str | None = None  # what decided the output difference (digest, chunk digests, shape...)
    #: what the input test rests on: "order-sensitive input digest", "order-independent input digest", ...
    input_evidence: str | None = None
    outputs_differ: bool = True  # False: inputs differ while outputs match (or none were recorded)
    differing_inputs: list[int] = field(default_factory=list)
    differing_outputs: list[int] = field(default_factory=list)
    phase: str | None = None  # forward | backward | optimizer
    autograd_node: str | None = None  # backward records: the autograd node that issued the op
    forward_op: str | None = None  # backward records: the forward op (identity) that created that node
    warnings: list[str] = field(default_factory=list)
    artifact: str | None = None  # set on records passed over as probe artifacts
    control_flow: dict[str, Any] | None = None  # CONTROL_FLOW: the first region (counts, where, realigned)
    source_a: str | None = None
    source_b: str | None = None
    outputs_a: list[dict | None] = field(default_factory=list)
    outputs_b: list[dict | None] = field(default_factory=list)
    #: RECEIVER: per differing input, the latest traced op in each run whose output holds its bits,
    #: and what that says (:mod:`forensics.tracediff.provenance`)
    input_sources: list[dict[str, Any]] = field(default_factory=list)
    #: RECEIVER whose difference no traced op's output carried: ``arguments`` (every differing input
    #: is the non-tensor arguments, or those and a generator's state: values the program passed in),
    #: ``generator`` (only a random op's generator state), ``call`` (the two records were called with
    #: arguments of different kinds: likely two different calls); None otherwise
    from_program: str | None = None
    #: the weakest evidence level (``EVIDENCE_LEVELS``) among the pair's recorded tensors, both
    #: sides: what the verdict is graded by (an ORIGIN below ``full`` is a candidate, never proven)
    level: str = "full"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Divergence:
        """The inverse of :meth:`to_json` (a report written by a shard of ranks, read back to merge)."""
        return cls(**data)


@dataclass
class RankResult:
    rank: int
    first_divergence: Divergence | None = None
    records_compared: int = 0
    unproven_matches: int = 0  # records whose output equality rests on weak evidence only
    artifacts: list[Divergence] = field(default_factory=list)
    artifacts_total: int = 0
    #: records whose outputs differ because their data came from outside the traced ops (not an
    #: artifact: nothing is passed through; the records that read the data are compared as usual)
    external: list[Divergence] = field(default_factory=list)
    external_total: int = 0
    steps: list[int | None] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: how each side's stream ended when it is partial (truncated / interrupted), else None
    partial_a: str | None = None
    partial_b: str | None = None
    #: after a control-flow divergence: the regions where the runs differ in what they executed,
    #: the value differences found once they aligned again, and how many records were compared there
    control_flow_regions: list[dict[str, Any]] = field(default_factory=list)
    control_flow_regions_total: int = 0
    after_control_flow: list[Divergence] = field(default_factory=list)
    after_control_flow_total: int = 0
    records_compared_after_control_flow: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "first_divergence": self.first_divergence.to_json() if self.first_divergence else None,
            "records_compared": self.records_compared,
            "unproven_matches": self.unproven_matches,
            "artifacts": [a.to_json() for a in self.artifacts],
            "artifacts_total": self.artifacts_total,
            "external": [a.to_json() for a in self.external],
            "external_total": self.external_total,
            "steps": self.steps,
            "warnings": self.warnings,
            "partial_a": self.partial_a,
            "partial_b": self.partial_b,
            "control_flow_regions": self.control_flow_regions,
            "control_flow_regions_total": self.control_flow_regions_total,
            "after_control_flow": [d.to_json() for d in self.after_control_flow],
            "after_control_flow_total": self.after_control_flow_total,
            "records_compared_after_control_flow": self.records_compared_after_control_flow,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RankResult:
        """The inverse of :meth:`to_json`."""
        d = dict(data)
        first = d.pop("first_divergence", None)
        res = cls(**{k: v for k, v in d.items() if k not in ("artifacts", "external", "after_control_flow")})
        res.first_divergence = Divergence.from_json(first) if first else None
        res.artifacts = [Divergence.from_json(x) for x in data.get("artifacts") or []]
        res.external = [Divergence.from_json(x) for x in data.get("external") or []]
        res.after_control_flow = [Divergence.from_json(x) for x in data.get("after_control_flow") or []]
        return res


def _exact_sums(a: TraceRecord, b: TraceRecord, differing: list[int]) -> bool:
    """Every differing output of the pair is one of our exact sums on both sides
    (:data:`forensics.core.formats.optrace.EXACT_SUMMARY`)."""
    def exact(rec: TraceRecord, i: int) -> bool:
        x = rec.outputs[i] if i < len(rec.outputs) else None
        digest = getattr(x, "digest", None)
        return isinstance(digest, str) and EXACT_SUMMARY.match(digest) is not None

    return bool(differing) and all(exact(a, i) and exact(b, i) for i in differing)


# --------------------------------------------------------------------------- naming

def site_of(rec: TraceRecord) -> str | None:
    """The site a record names (:func:`forensics.core.site.site_for_record`); semantic boundaries
    (collectives, optimizer, backward markers) name none unless they carry GEMM meta."""
    gemm = rec.extra.get("gemm") if isinstance(rec.extra, dict) else None
    if rec.kind in SEMANTIC_KINDS and not gemm:
        return None
    return site_for_record(rec.name, gemm)


def artifact_reason(rec: TraceRecord) -> str | None:
    """Why a record's output difference is a known probe artifact, or None."""
    if ops.UNINITIALISED.search(rec.name):
        return "uninitialised memory (empty*): its bits are whatever was there"
    if ops.ASYNC_COPY.search(rec.name) and bool(rec.extra.get("non_blocking")):
        return "non_blocking copy read while possibly in flight"
    if ops.RESIZE.search(rec.name) and _grew(rec):
        return "resize_ grew the tensor: its new elements are uninitialised memory"
    return None


def workspace_reason(rec: TraceRecord, differing: list[int]) -> str | None:
    """Why a record whose only differing outputs are a library's opaque workspace is an artifact."""
    slots = ops.WORKSPACE_OUTPUTS.get(ops.packet(rec.name))
    if slots and differing and set(differing) <= slots:
        return ("a library's workspace output (kept for the backward pass; scratch the library does not initialise "
                "in full): the op's real outputs match")
    return None


def grown_only(a: TraceRecord, b: TraceRecord, differing: list[int], tainted: Any = None) -> list[str] | None:
    """The storage resizes behind a record's differing inputs when every one of them is memory a
    storage resize grew and no traced op had written since, on both sides (``TensorDigest.grown``,
    the tracer's ``g``), or an artifact-derived value (``tainted(i)`` true); None otherwise (also
    when none is grown). Those bytes are uninitialised: a difference there is no input difference."""
    ids: list[str] = []
    for i in differing:
        x = a.inputs[i] if i < len(a.inputs) else None
        y = b.inputs[i] if i < len(b.inputs) else None
        if x is not None and y is not None and x.grown and y.grown:
            if x.grown not in ids:
                ids.append(x.grown)
        elif not (tainted is not None and tainted(i)):
            return None
    return ids or None


def grown_outputs(a: TraceRecord, b: TraceRecord, differing: list[int]) -> bool:
    """Whether every differing output is still memory a storage resize grew and no traced op wrote
    (a view of it, or a tensor the op did not write), on both sides."""
    return bool(differing) and all(
        i < len(a.outputs) and i < len(b.outputs) and a.outputs[i] is not None and b.outputs[i] is not None
        and bool(a.outputs[i].grown) and bool(b.outputs[i].grown) for i in differing)


def grown_reason(ids: list[str]) -> str:
    return (f"reads memory that a storage resize grew ({', '.join(ids)}) before any traced op wrote it: uninitialised "
            "bytes (FSDP2's alloc_storage re-allocates an unsharded parameter this way); its differing outputs are "
            "that memory still, unwritten")


def grown_warning(ids: list[str]) -> str:
    return (f"a differing input is memory that a storage resize grew ({', '.join(ids)}) and no traced op had written "
            "when this op read it (uninitialised bytes), and this op's outputs differ: the program computed with "
            "uninitialised memory here, or something the tracer does not see (a kernel below the dispatcher, a "
            "storage-level copy) wrote it")


def _grew(rec: TraceRecord) -> bool:
    """Whether a resize's output holds more elements than its input did (the rest is garbage)."""
    try:
        return int(rec.outputs[0].numel) > int(rec.inputs[0].numel)
    except (IndexError, AttributeError, TypeError, ValueError):
        return False


def external_reason(rec: TraceRecord) -> str | None:
    """Why a record's output is data from outside the traced ops (so a difference there is no
    origin, and no probe artifact either: the ops that read the data compare it), or None."""
    if ops.EXTERNAL_DATA.search(rec.name):
        if "from_file" in rec.name:
            return "a tensor read from a file: its bytes were written outside the traced ops; the ops that read them compare the data"
        return ("a tensor set onto a storage: its bytes were written outside the traced ops (a DataLoader "
                "worker's batch, shared memory) and arrive in the order the writers finish; the ops that "
                "read them compare the data")
    return None


def occurrence_of(identity: str) -> int | None:
    tail = identity.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def tensor_json(t: TensorDigest | None) -> dict | None:
    if t is None:
        return None
    d = {"shape": list(t.shape) if t.shape is not None else None, "dtype": t.dtype, "numel": t.numel,
         "digest": t.digest, "ordered": t.ordered, "evidence": t.evidence}
    if t.layout is not None:  # the dim order "ordered" was taken in (absent: row-major)
        d["layout"] = list(t.layout)
    if t.chunks is not None:
        d["chunks"] = len(t.chunks)
    return d


def _is_generator(rec: TraceRecord, i: int) -> bool:
    """Whether input ``i`` of a record is the state of the generator a random op drew from."""
    return _entry_kind(rec, i) == "generator"


def _entry_kind(rec: TraceRecord, i: int) -> str | None:
    """``tensor``, ``args`` (the non-tensor arguments), ``generator`` (a random op's state) or None
    (no entry ``i``)."""
    try:
        t = rec.inputs[i]
    except IndexError:
        return None
    if t is None:
        return "tensor"
    return t.dtype if t.dtype in EXACT_ENTRIES else "tensor"


def program_inputs(a: TraceRecord, b: TraceRecord, differing: list[int]) -> tuple[str | None, str | None]:
    """Whether a record's differing inputs are values the program passed rather than tensors a
    traced op produced: ``("call", why)`` when the two records' inputs are of different kinds (a
    non-tensor argument in one run, a tensor in the other; another number of entries),
    ``("arguments", why)`` when every differing input is the non-tensor arguments (or a generator's
    state) on both sides, else ``(None, None)``."""
    if len(a.inputs) != len(b.inputs):
        return "call", (f"its inputs are {len(a.inputs)} entries in A and {len(b.inputs)} in B: the runs called this op "
                        "with arguments of another kind or number")
    for i in differing:
        ka, kb = _entry_kind(a, i), _entry_kind(b, i)
        if ka != kb and "args" in (ka, kb):
            tensor_side = "B" if ka == "args" else "A"
            return "call", (f"input {i} is a tensor in {tensor_side} and non-tensor arguments (a Python scalar, a "
                            f"size...) in the other run: the runs called this op differently")
    if differing and all(_entry_kind(a, i) in EXACT_ENTRIES and _entry_kind(b, i) in EXACT_ENTRIES
                         for i in differing):
        if any(_entry_kind(a, i) == "args" for i in differing):
            return "arguments", None
        return "generator", None
    return None, None


def _node_fields(rec: TraceRecord) -> tuple[str | None, str | None]:
    extra = rec.extra if isinstance(rec.extra, dict) else {}
    node, fwd = extra.get("node"), extra.get("fwd")
    return (node if isinstance(node, str) else None), (fwd if isinstance(fwd, str) else None)


# --------------------------------------------------------------------------- verdict of a divergent pair

_INPUT_EVIDENCE = {
    EQUAL: "order-sensitive input digest",
    SCREEN: "order-independent input digest",
}


def pair_level(a: TraceRecord, b: TraceRecord, outputs: list[int] | None = None) -> str:
    """The weakest evidence level (the weaker side's) among two records' inputs and the outputs a
    verdict rests on (``outputs``: the differing ones; None: all)."""
    worst = 0
    for rec in (a, b):
        outs = rec.outputs if outputs is None else [rec.outputs[i] for i in outputs if i < len(rec.outputs)]
        for t in (*rec.inputs, *outs):
            ev = getattr(t, "evidence", "full")
            i = EVIDENCE_LEVELS.index(ev) if ev in EVIDENCE_LEVELS else len(EVIDENCE_LEVELS) - 1
            worst = max(worst, i)
    return EVIDENCE_LEVELS[worst]


def judge(rank: int, a: TraceRecord, b: TraceRecord, inputs: ListTest, outputs: ListTest,
          gemm_occurrence: int | None = None) -> Divergence:
    """The verdict of a record whose outputs or inputs differ (the input test, docs/method.md)."""
    warnings: list[str] = []
    outputs_differ = outputs.status == DIFFER
    evidence = PROVEN
    from_program = None
    if inputs.status == DIFFER:
        verdict, matched = RECEIVER, False
        input_evidence = f"input {inputs.differing[0]} differs by {inputs.how}"
        generators = [i for i in inputs.differing if _is_generator(a, i)]
        if generators:
            input_evidence = (f"input {generators[0]} (the state of the generator it drew from) differs"
                              if generators == inputs.differing else input_evidence)
            warnings.append("the state of the generator this random op drew from differs between the runs: "
                            "the seeds, or how many numbers were drawn before it (another random op, a different "
                            "number of steps or samples); not a difference of the op's kernel")
        from_program, why = program_inputs(a, b, inputs.differing)
        if from_program == "call":
            input_evidence = f"the call differs: {why}"
            warnings.append(f"{why}. These are most likely two different calls that alignment by identity "
                            "(op:occurrence) paired: the program took another path before this op (a branch, one "
                            "call more or less of it) while every traced output before it matched; the difference "
                            "is in what the program did, not in a traced op's output")
        elif from_program == "arguments":
            args_at = [i for i in inputs.differing if _entry_kind(a, i) == "args"]
            input_evidence = f"input {args_at[0]} (its non-tensor arguments) differs"
            warnings.append(f"its non-tensor arguments differ between the runs (input {args_at[0]}: the Python "
                            "scalars, sizes, dtypes or flags it was called with): values the program passed in (a "
                            "configuration value such as a learning rate, a loss scale or a clip norm; a number "
                            "computed in Python), not a traced op's output: compare the runs' configuration and "
                            "the code that calls it; a wider trace can help only if that number was computed from "
                            "tensors outside the traced window")
        if inputs.how.startswith("order-sensitive digest (order-independent"):
            warnings.append(f"input {inputs.differing[0]} holds the same values in another order: its producer "
                            "reordered them. If no traced record produced it differently, the producer is untraced "
                            "(a permutation outside the dispatcher); a traced producer shows its reordered output "
                            "where outputs carry order-sensitive digests (CPU tensors by default; device tensors "
                            "with `--ordered-digests all`)")
        if not outputs_differ:
            warnings.append("its outputs match (or none were recorded): the difference reached this op and was "
                            "absorbed or not observed here; it was made earlier")
    elif inputs.status == UNOBSERVED and LAYOUTS_DIFFER in inputs.how:
        verdict, matched, evidence = INPUTS_UNKNOWN, None, NO_EVIDENCE
        input_evidence = f"no comparable input value ({inputs.how})"
        warnings.append("its inputs' order-sensitive digests were taken in different memory layouts (a tensor "
                        "laid out differently in the two runs) and no order-independent digest was recorded on "
                        "both sides, so the input test cannot be applied: this is the first difference seen, not "
                        "an origin")
    elif inputs.status == UNOBSERVED:
        verdict, matched, evidence = INPUTS_UNKNOWN, None, NO_EVIDENCE
        input_evidence = f"no input value recorded ({inputs.how})"
        warnings.append("its inputs were not recorded, so the input test cannot be applied: this is the first "
                        "difference seen, not an origin. Record its inputs (or trace its producer) to tell")
    else:
        verdict, matched = ORIGIN, True
        if inputs.status == EQUAL:
            input_evidence = _INPUT_EVIDENCE[EQUAL]
        elif inputs.status == SCREEN and LAYOUTS_DIFFER in inputs.how:
            evidence = UNPROVEN_EVIDENCE
            input_evidence = f"{_INPUT_EVIDENCE[SCREEN]} ({LAYOUTS_DIFFER})"
            warnings.append("unproven: the inputs' order-sensitive digests were taken in different memory layouts "
                            "(a tensor laid out differently in the two runs), so they cannot prove equality; the "
                            "order-independent digests are equal, but an untraced producer that reordered the "
                            "values would look the same")
        elif inputs.status == SCREEN:
            evidence = UNPROVEN_EVIDENCE
            input_evidence = _INPUT_EVIDENCE[SCREEN]
            warnings.append(f"unproven: order-independent input digest (input {inputs.weak[0] if inputs.weak else 0}): "
                            "the inputs hold equal values, but an untraced producer that reordered them would look "
                            f"the same; {ENABLE_ORDERED}")
        else:  # UNPROVEN: sampled / summary / partly unrecorded
            evidence = UNPROVEN_EVIDENCE
            input_evidence = f"{inputs.how}"
            warnings.append(f"unproven: inputs equal only by weak evidence ({inputs.how}): ORIGIN unproven")
    if a.kind in COLLECTIVE_KINDS and verdict == ORIGIN:
        verdict = RECEIVER
        warnings.append("collective with matching local inputs: the difference came from another rank's "
                        "contribution (or the collective's own reduction order if every rank's inputs matched)")
    base = ops.packet(a.name)
    if verdict == ORIGIN and base in ops.TRIVIAL:
        warnings.append(f"one hop later: {base} cannot change bits by itself from equal inputs; the producer "
                        "above it is uninstrumented (a kernel that bypasses the dispatcher). Add a probe there")
    if verdict == ORIGIN and (any(_is_generator(a, i) for i in range(len(a.inputs)))
                              or (ops.RANDOM.search(base) and not base.endswith("_backward"))):
        if any(_is_generator(a, i) for i in range(len(a.inputs))):
            warnings.append("random op: the state of the generator it drew from matched (recorded as an input): "
                            "the difference is not in where its random numbers came from")
        else:
            warnings.append("random op: its output depends on generator state, which this trace did not record "
                            "(a trace from before generator states were recorded, or a device without a default "
                            "generator to read); check seeds")
    if outputs_differ and "chunk" in outputs.how:
        warnings.append("whole-tensor digests are equal; per-chunk digests differ: the values were reordered")
    if outputs_differ and outputs.how == "summary digest" and not _exact_sums(a, b, outputs.differing):
        warnings.append("the outputs differ only by a summary digest (e.g. a norm), which can itself vary for "
                        "equal tensors when its reduction order changes")
    level = pair_level(a, b, outputs.differing if outputs_differ else [])
    if verdict == ORIGIN and level != "full" and evidence == PROVEN:  # never proven below full evidence
        evidence = UNPROVEN_EVIDENCE
        warnings.append(f"unproven: {level} evidence: an ORIGIN is proven only from full digests of its inputs "
                        "and output")
    site = site_of(a)
    occurrence = None
    if is_gemm_label(site):
        occurrence = gemm_occurrence or None
    elif site:
        occurrence = occurrence_of(a.identity)
    node, fwd = _node_fields(a)
    out_bad = outputs.differing
    return Divergence(
        rank=rank, identity=a.identity, name=a.name, verdict=verdict, seq=a.seq, step=a.step,
        inputs_matched=matched, evidence=evidence, site=site if verdict == ORIGIN else None,
        occurrence=occurrence if verdict == ORIGIN else None, kind=a.kind,
        how=outputs.how if outputs_differ else f"outputs match ({outputs.how})" if a.outputs else "no outputs recorded",
        input_evidence=input_evidence, outputs_differ=outputs_differ,
        differing_inputs=inputs.differing, differing_outputs=out_bad, phase=a.phase, autograd_node=node,
        forward_op=fwd, warnings=warnings, source_a=a.source, source_b=b.source,
        from_program=from_program if verdict == RECEIVER else None,
        outputs_a=[tensor_json(a.outputs[i]) for i in out_bad if i < len(a.outputs)],
        outputs_b=[tensor_json(b.outputs[i]) for i in out_bad if i < len(b.outputs)], level=level,
    )


def control_flow(rank: int, rec: TraceRecord, side: str, region: dict[str, Any] | None = None) -> Divergence:
    """A record with no counterpart in the other run."""
    other = "B" if side == "A" else "A"
    node, fwd = _node_fields(rec)
    return Divergence(
        rank=rank, identity=rec.identity, name=rec.name, verdict=CONTROL_FLOW, seq=rec.seq,
        step=rec.step, inputs_matched=None, evidence=PROVEN, site=None, kind=rec.kind, side=side,
        how=f"no counterpart in {other}", phase=rec.phase, autograd_node=node, forward_op=fwd,
        warnings=[f"{rec.identity} exists only in {side}: the runs executed different ops here (a data-dependent "
                  "branch, a different op count)"],
        control_flow=region,
        source_a=rec.source if side == "A" else None, source_b=rec.source if side == "B" else None,
    )


def after_control_flow(d: Divergence) -> Divergence:
    """Relabel a difference found after a control-flow divergence: never an origin."""
    d.verdict = AFTER_CONTROL_FLOW
    d.site, d.occurrence = None, None
    d.warnings.insert(0, "after a control-flow divergence: the runs no longer did the same work, so this is not "
                         "an origin")
    return d


__all__ = [
    "AFTER_CONTROL_FLOW", "CONTROL_FLOW", "INPUTS_UNKNOWN", "ORIGIN", "RECEIVER", "Divergence", "RankResult",
    "artifact_reason", "external_reason", "workspace_reason", "control_flow", "judge", "site_of", "UNPROVEN",
    "grown_only", "grown_outputs", "grown_reason", "grown_warning",
]
