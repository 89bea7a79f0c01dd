"""First-divergence differ: two op-level traces in, per-rank verdicts and a cross-rank pattern out.

Works only on the normalised records of :mod:`forensics.tracediff.traces`, so every reader (our own
``optrace`` JSONL, Megatron-Core determinism traces, DebugMode hash dumps) gets the same verdicts.

* :mod:`forensics.tracediff.compare`  what two recorded tensors prove (the evidence levels);
* :mod:`forensics.tracediff.divergence` one record pair's verdict (ORIGIN, RECEIVER, INPUTS_UNKNOWN,
  CONTROL_FLOW, AFTER_CONTROL_FLOW) and the records carrying them;
* :mod:`forensics.tracediff.walk`     one rank's walk, in memory bounded by a window of records
  (its jobs: ``streams`` reads and pairs the records, ``pair`` decides each pair, ``regions``
  aligns the rest after a control flow, ``rank_report`` writes the rank's result);
* this module: comparability, the cross-rank pattern, the site and the next command, the report.
"""
from __future__ import annotations

import gc
import shlex
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forensics.core.errors import BadInput, BadSite
from forensics.core.redact import Redactor, argv_holds_secret, redact_argv
from forensics.core.site import parse_site
from forensics.tracediff.arms import differences_of
from forensics.tracediff.comparability import compare_runs, config_differences
from forensics.tracediff.compare import compare_tensor, compare_tensors  # noqa: F401 (library API)
from forensics.tracediff.traces import EVIDENCE_LEVELS, TraceRecord, detect_format, readers
from forensics.tracediff.divergence import (  # noqa: F401 (re-exported: the differ's public names)
    AFTER_CONTROL_FLOW,
    COLLECTIVE_KINDS,
    CONTROL_FLOW,
    INPUTS_UNKNOWN,
    ORIGIN,
    RECEIVER,
    Divergence,
    RankResult,
    artifact_reason,
    site_of,
)
from forensics.tracediff.walk import WINDOW, walk_rank

REPORT_SCHEMA = "forensics.diff"
REPORT_VERSION = 2  # 2: INPUTS_UNKNOWN, evidence "none", comparable, partial ends, control-flow regions


@dataclass
class DiffReport:
    a: str
    b: str
    format: str
    ranks: dict[int, RankResult]
    comparability: list[dict[str, Any]] = field(default_factory=list)
    #: the knobs and in-process switches that differ (:func:`forensics.tracediff.comparability.config_differences`)
    config_differences: list[dict[str, Any]] = field(default_factory=list)
    pattern: str = "none"
    pattern_explanation: str = ""
    site: str | None = None
    occurrence: int | None = None
    site_rank: int | None = None
    site_step: int | None = None
    next_command: str | None = None
    warnings: list[str] = field(default_factory=list)
    window: int = WINDOW
    #: what the trace format cannot record (a reader's ``run_info["lacks"]``): a clean rank then reads
    #: "no divergence seen", never a proof of equality
    lacks: list[str] = field(default_factory=list)
    #: the evidence level each trace was recorded at and the weaker one, which grades every verdict
    #: (``{"a": ..., "b": ..., "graded_by": ...}``; empty when neither trace says)
    evidence: dict[str, str] = field(default_factory=dict)

    @property
    def diverged(self) -> bool:
        return any(r.first_divergence is not None for r in self.ranks.values())

    @property
    def not_comparable(self) -> list[dict[str, Any]]:
        """Differences of the program actually run (script, commit, package versions)."""
        return [d for d in self.comparability if d.get("severity") == "not_comparable"]

    @property
    def comparable(self) -> bool:
        return not self.not_comparable

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": REPORT_SCHEMA,
            "version": REPORT_VERSION,
            "a": self.a,
            "b": self.b,
            "format": self.format,
            "comparable": self.comparable,
            "diverged": self.diverged,
            "pattern": self.pattern,
            "pattern_explanation": self.pattern_explanation,
            "site": self.site,
            "occurrence": self.occurrence,
            "site_rank": self.site_rank,
            "site_step": self.site_step,
            "next_command": self.next_command,
            "config_differences": self.config_differences,
            "comparability": self.comparability,
            "warnings": self.warnings,
            "lacks": self.lacks,
            "evidence": self.evidence,
            "window": self.window,
            "ranks": {str(r): res.to_json() for r, res in sorted(self.ranks.items())},
        }


def diff_rank(rank: int, a_records: Iterable[TraceRecord], b_records: Iterable[TraceRecord],
              window: int = WINDOW, use_ordered: bool = True) -> RankResult:
    """First divergence of one rank's two streams (each in its own seq order)."""
    return walk_rank(rank, a_records, b_records, window=window, use_ordered=use_ordered)


# --------------------------------------------------------------------------- across ranks

def classify_pattern(results: dict[int, RankResult], world_size: int | None = None,
                     config_differs: list[str] | None = None) -> tuple[str, str]:
    """The cross-rank pattern and what it means. Resolves collective receivers in place.

    ``config_differs``: the run-info fields that differ between the two runs (command line, seeds,
    knobs: the comparability lines). The same op as the origin on most ranks shows the op
    nondeterministic only when nothing else differs: a thread count or a library flag changes an
    op's bits by itself (``same_op_config_differs``)."""
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
            note = ("every rank fed this collective matching inputs: the collective itself differs "
                    "(reduction order / algorithm)")
            if note not in d.warnings:  # a merge of shards may classify results classified once already
                d.warnings.append(note)
    origins = {r: d for r, d in firsts.items() if d.verdict == ORIGIN}
    control = {r: d for r, d in firsts.items() if d.verdict == CONTROL_FLOW}
    unknown = {r: d for r, d in firsts.items() if d.verdict == INPUTS_UNKNOWN}
    n = len(results)
    if not origins and control:
        return "control_flow", "control flow diverged before any value did: compare what each run executed"
    if not origins and unknown:
        ranks = ", ".join(str(r) for r in sorted(unknown))
        return "inputs_unknown", (f"the first difference on rank(s) {ranks} has no recorded input values, so the "
                                  "input test cannot tell an origin from a receiver: record that op's inputs (or "
                                  "trace its producer) before naming anything")
    given = {r: d for r, d in firsts.items() if d.verdict == RECEIVER and d.from_program}
    if not origins and given and len(given) == len(firsts):
        ranks = ", ".join(str(r) for r in sorted(given))
        kinds = {d.from_program for d in given.values()}
        what = " or ".join(w for k, w in (
            ("call", "calls of an op made with arguments of another kind (the program took another path: a branch, "
                     "one call more or less)"),
            ("arguments", "the non-tensor arguments the program passed to an op (a learning rate, a scale, a size, "
                          "a flag)"),
            ("generator", "the state of the generator a random op drew from (the seeds, or numbers drawn before it)"),
        ) if k in kinds)
        return "only_receivers", (f"no origin on any compared rank, only receivers, and the first difference on rank(s) "
                                  f"{ranks} is in {what}, not in a traced op's output: no traced op made it; compare "
                                  "the runs' configuration and the code at that call (a wider trace helps only if ops "
                                  "outside the traced window made it: a number computed from tensors there, random "
                                  "numbers drawn there)")
    if not origins:
        return "only_receivers", ("no origin on any compared rank, only receivers: the origin is outside the traced "
                                  "window or on an untraced rank (or an untraced producer inside it); widen the "
                                  "window (--steps) or the ranks (--ranks), or trace the producer")
    if n == 1:
        return "single_rank", ("one rank compared: an ORIGIN, but whether the op or its input distribution is to "
                                "blame needs more ranks")
    names = Counter(d.name for d in origins.values())
    top, count = names.most_common(1)[0]
    if count >= 2 and len(names) == 1 and count * 2 > n and config_differs:
        shown = ", ".join(config_differs[:3]) + (f" and {len(config_differs) - 3} more" if len(config_differs) > 3 else "")
        return "same_op_config_differs", (f"{count} of {n} ranks have their origin at the same op ({top}), but the runs "
                                          f"differ in {shown}: that difference can change this op's result by itself "
                                          "(a thread count, a library flag), so this does not show the op "
                                          "nondeterministic; trace two runs that differ in nothing to tell. Any of "
                                          "those ranks is a valid site")
    if count >= 2 and len(names) == 1 and count * 2 > n:
        return "op_nondeterministic", (f"{count} of {n} ranks have their origin at the same op ({top}): the operation "
                                       "itself is nondeterministic; any of those ranks is a valid site")
    if config_differs:
        shown = ", ".join(config_differs[:3]) + (f" and {len(config_differs) - 3} more" if len(config_differs) > 3 else "")
        return "subset", (f"origins on {len(origins)} of {n} ranks, and the runs differ in {shown}: that difference can "
                          "change these ranks' bits by itself (a setting that acts on some ranks only, such as a "
                          "per-rank thread count), or the op's input distribution, reduction order or rank placement "
                          "does; trace two runs that differ in nothing to tell")
    return "subset", (f"origins on {len(origins)} of {n} ranks: the op is likely fine and its input distribution, "
                      "reduction order or rank placement is not")


def _valid_site(name: str) -> bool:
    try:
        parse_site(name)
        return True
    except BadSite:
        return False


def suggest_site(results: dict[int, RankResult]) -> Divergence | None:
    """The origin to hand to ``forensics kernel``: the most common origin site (proven origins
    before unproven ones), lowest rank first."""
    origins = [res.first_divergence for _, res in sorted(results.items())
               if res.first_divergence is not None and res.first_divergence.verdict == ORIGIN
               and res.first_divergence.site]
    if not origins:
        return None
    proven = [d for d in origins if d.evidence == "proven"]
    pool = proven or origins
    counts = Counter(d.site for d in pool)
    best = max(counts.values())
    return next(d for d in pool if counts[d.site] == best)


def next_command(origin: Divergence | None, argv: list[str] | None, pattern: str,
                 steps: list[int | None] | None = None, differences: Any = None, fmt: str = "native",
                 candidate: Divergence | None = None, trace_a: str | None = None) -> str:
    """The command to run next: ``forensics kernel`` on the site (occurrence, rank and the traced
    steps, so occurrences count alike), or a wider trace when no ORIGIN was found.

    ``differences`` (:class:`forensics.tracediff.arms.RunDifferences`): what differs between the
    runs becomes arms of the kernel rerun: run A's setting of each differing knob in every arm
    (``--env``), B's as a ``--toggle``, B's command line as an ``--arm-command``.

    A traced command line holding a secret (``--api-key X``, ``HF_TOKEN=X``, a URL's password:
    :mod:`forensics.core.redact`) is never printed: the command reads it from run A's trace instead
    (``--command-from TRACE_A``, given ``trace_a``), so the line stays runnable as printed; without
    ``trace_a`` it is printed redacted."""
    if argv and argv_holds_secret(argv):
        cmd = f"--command-from {shlex.quote(trace_a)}" if trace_a else "-- " + shlex.join(map(str, redact_argv(argv)))
    else:
        cmd = "-- " + (shlex.join(argv) if argv else "<command>")
    if origin is None and candidate is not None and fmt == "native":  # an ORIGIN that names no site
        step = f" --steps {candidate.step}" if isinstance(candidate.step, int) else ""
        return (f"forensics trace --evidence full{step} --ranks {candidate.rank} --out <dir> {cmd}   # the "
                f"difference is born in {candidate.identity} ({candidate.level} evidence): rerun both runs on this "
                "window op by op at full evidence and diff them to name and prove the op")
    if origin is not None and origin.site and origin.evidence != "proven" and origin.level != "full":
        return _confirm_at_full(origin, cmd, differences, fmt)
    if origin is not None and origin.site and origin.evidence != "proven":
        step = f" --steps {origin.step}" if isinstance(origin.step, int) else ""
        return (f"forensics trace --ordered-digests inputs{step} --ranks {origin.rank} --out <dir> {cmd}"
                "   # prove the ORIGIN's inputs equal first")
    if origin is not None and origin.site:
        site = f"{origin.site}#{origin.occurrence}" if origin.occurrence else origin.site
        known = sorted(s for s in (steps or []) if isinstance(s, int))
        window = "" if not known else f" --steps {known[0]}" + (f"-{known[-1]}" if known[-1] != known[0] else "")
        arms = "" if differences is None else "".join(" " + shlex.quote(x) for x in differences.kernel_options())
        return f"forensics kernel --site {shlex.quote(site)} --ranks {origin.rank}{window}{arms} {cmd}"
    return f"forensics trace --steps all --ranks all --out <dir> {cmd}"


def _grade_by_levels(report: DiffReport, run_info_a: dict, run_info_b: dict) -> None:
    """The traces' evidence levels (header ``evidence``, ``forensics trace --evidence``): the weaker
    one grades the whole report. Below ``full``, a clean rank is "no divergence seen" (never proven)
    and the report says so; two different levels digest with different algorithms, so no value is
    compared at all (shapes, dtypes and control flow only)."""
    la, lb = run_info_a.get("evidence"), run_info_b.get("evidence")
    if la not in EVIDENCE_LEVELS and lb not in EVIDENCE_LEVELS:
        return
    la, lb = la if la in EVIDENCE_LEVELS else "full", lb if lb in EVIDENCE_LEVELS else "full"
    weaker = EVIDENCE_LEVELS[max(EVIDENCE_LEVELS.index(la), EVIDENCE_LEVELS.index(lb))]
    algorithms = _light_algorithms_differ(la, lb, run_info_a, run_info_b)
    if la != lb or algorithms:
        weaker = "metadata"  # digests of two kinds: nothing about the values compares
    report.evidence = {"a": la, "b": lb, "graded_by": weaker}
    if weaker == "full":
        return
    if algorithms:
        report.warnings.append(algorithms)
    elif la != lb:
        report.warnings.append(f"evidence levels differ (A {la}, B {lb}): their digests are of different kinds, so "
                               "no value was compared (shapes, dtypes and control flow only); trace both runs at "
                               "one level")
    else:
        report.warnings.append(f"both traces were recorded at {la} evidence (forensics trace --evidence {la}): "
                               "a difference it shows is real, equal values are never proven equal, and an "
                               "ORIGIN is a candidate until its window is rerun at full evidence")
    what = f"full evidence (graded by {weaker})"
    if what not in report.lacks:
        report.lacks.append(what)


def _light_algorithms_differ(la: str, lb: str, run_info_a: dict, run_info_b: dict) -> str | None:
    """Why two traces at one light level compare no digest: their headers name different algorithms
    for it (``evidence_digests``: the summary changed from a 64-bit to a 32-bit sum), else None. A
    header that does not say is taken at its word (the values' own prefixes still tell summaries
    apart, :func:`forensics.tracediff.compare.compare_tensor`)."""
    if la != lb or la not in ("sampled", "summary"):
        return None
    da, db = run_info_a.get("evidence_digests"), run_info_b.get("evidence_digests")
    ka, kb = (d.get(la) if isinstance(d, dict) else None for d in (da, db))
    if not ka or not kb or ka == kb:
        return None
    return (f"the {la} digests of A and B were made by different algorithms (A: {ka}; B: {kb}): no value was "
            f"compared (shapes, dtypes and control flow only); trace both runs with one version of the tracer")


def _confirm_at_full(origin: Divergence, cmd: str, differences: Any, fmt: str) -> str:
    """A candidate ORIGIN from light evidence (sampled, summary, metadata): the confirming rerun of
    just its window (step, rank) at full evidence, or ``kernel`` on its site, whose site probe
    digests in full. Our own traces rerun with ``forensics trace --evidence full``; another
    producer's go on to ``kernel`` (its recorder's own full mode is the other way)."""
    step = f" --steps {origin.step}" if isinstance(origin.step, int) else ""
    site = f"{origin.site}#{origin.occurrence}" if origin.occurrence else origin.site
    arms = "" if differences is None else "".join(" " + shlex.quote(x) for x in differences.kernel_options())
    kernel = f"forensics kernel --site {shlex.quote(site)} --ranks {origin.rank}{step}{arms} {cmd}"
    if fmt == "native":
        return (f"forensics trace --evidence full{step} --ranks {origin.rank} --out <dir> {cmd}   # a candidate "
                f"ORIGIN from {origin.level} evidence: rerun both runs on this window at full evidence and diff "
                f"them to prove it, or go on: {kernel} (its site probe digests in full)")
    where = f"step {origin.step}, rank {origin.rank}" if isinstance(origin.step, int) else f"rank {origin.rank}"
    return (f"{kernel}   # a candidate ORIGIN from {origin.level} evidence: the site probe digests in full "
            f"(or rerun the recorder at full evidence on {where} and diff again)")


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
    window: int = WINDOW,
) -> DiffReport:
    """Diff two traces given as per-rank record iterables (streamed: consumed once, in a window)."""
    # Records are acyclic; the cyclic GC would rescan every live record at each allocation burst
    # (10x slower on large windows), so it is paused for the walk.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _diff_streams(a_ranks, b_ranks, a_name=a_name, b_name=b_name, fmt=fmt, run_info_a=run_info_a,
                             run_info_b=run_info_b, only_rank=only_rank, window=window)
    finally:
        if gc_was_enabled:
            gc.enable()


def _ordered_algorithms_agree(info_a: dict, info_b: dict) -> tuple[bool, str | None]:
    """Order-sensitive digests of two runs are comparable only when one algorithm made both."""
    oa, ob = info_a.get("ordered"), info_b.get("ordered")
    if not isinstance(oa, dict) or not isinstance(ob, dict):
        return True, None
    for dev in ("cpu", "device"):
        if oa.get(dev) and ob.get(dev) and oa.get(dev) != ob.get(dev):
            return False, (f"order-sensitive digests of {dev} tensors were made by different algorithms "
                           f"(A: {oa.get(dev)}, B: {ob.get(dev)}): not compared, so equal inputs stay unproven")
    return True, None


def _diff_streams(a_ranks, b_ranks, *, a_name, b_name, fmt, run_info_a, run_info_b, only_rank, window):  # noqa: ANN001, ANN202
    run_info_a, run_info_b = run_info_a or {}, run_info_b or {}
    report, use_ordered = start_report(a_name, b_name, fmt, run_info_a, run_info_b, window)
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
        report.ranks[r] = walk_rank(r, a_ranks[r], b_ranks[r], window=window, use_ordered=use_ordered)
    return finish_report(report, run_info_a, run_info_b)


def start_report(a_name: str, b_name: str, fmt: str, run_info_a: dict, run_info_b: dict,
                 window: int = WINDOW) -> tuple[DiffReport, bool]:
    """An empty report with the comparability of the two runs, and whether order-sensitive digests
    of the two runs can be compared (one algorithm made both)."""
    _records_pair(b_name, run_info_a, run_info_b)
    report = DiffReport(a=a_name, b=b_name, format=fmt, ranks={}, window=window)
    report.comparability = [d.to_json() for d in compare_runs(run_info_a, run_info_b)]
    report.config_differences = config_differences(report.comparability)
    use_ordered, why = _ordered_algorithms_agree(run_info_a, run_info_b)
    if why:
        report.warnings.append(why)
    return report, use_ordered


def _records_pair(b_name: str, run_info_a: dict, run_info_b: dict) -> None:
    """Refuse two of our traces whose records are different things (BadInput, exit 3): one recorded
    ATen ops and the other nn.Module calls (header ``at``), one traced each optimizer step's ops and
    the other recorded each step whole (header ``optimizer``), or one recorded same-element views and
    the other skipped them (header ``views``: full evidence against a light level). Their records do
    not pair, so a diff would report a control-flow difference neither run had. Other formats do not
    say."""
    _refuse_unpaired(b_name, run_info_a, run_info_b, "at", "--at")
    va, vb = run_info_a.get("views"), run_info_b.get("views")
    if isinstance(va, str) and isinstance(vb, str) and va != vb:
        raise BadInput(b_name, f"B {vb} same-element views (t, view, detach...), A {va} them: full evidence "
                       "records them, the light levels skip them, so their records do not pair; trace both runs at "
                       f"full evidence or both at a light level (A {run_info_a.get('evidence')}, "
                       f"B {run_info_b.get('evidence')})")
    _refuse_unpaired(b_name, run_info_a, run_info_b, "optimizer", "--optimizer")


def _refuse_unpaired(b_name: str, run_info_a: dict, run_info_b: dict, key: str, flag: str) -> None:
    va, vb = run_info_a.get(key), run_info_b.get(key)
    if isinstance(va, str) and isinstance(vb, str) and va != vb:
        what = {"at": {"ops": "every ATen op", "modules": "every nn.Module call"},
                "optimizer": {"ops": "each optimizer step op by op", "whole": "each optimizer step whole"}}[key]
        raise BadInput(b_name, f"B recorded {what.get(vb, vb)} ({flag} {vb}), A {what.get(va, va)} ({flag} {va}): "
                       f"their records do not pair; trace both runs with one {flag}")


def finish_report(report: DiffReport, run_info_a: dict, run_info_b: dict) -> DiffReport:
    """The cross-rank part, once every rank's result is in ``report.ranks`` (from one process or
    merged from rank groups): the pattern, the site, the next command and the run-wide warnings."""
    if not report.ranks:
        raise BadInput(report.b, f"no rank in common with {report.a}: nothing to compare")
    world = run_info_a.get("world_size")
    config = [d["field"] for d in report.comparability if d.get("severity") in ("warning", "info")]
    report.pattern, report.pattern_explanation = classify_pattern(report.ranks, world if isinstance(world, int) else None,
                                                                  config)
    # nothing secret is printed or written: a secret of either traced command line (or of what the
    # headers recorded) leaves the comparability lines and the knob differences
    red = Redactor().learn(run_info_a.get("argv") or []).learn(run_info_b.get("argv") or [])
    report.comparability = [red.obj(d) for d in report.comparability]
    report.config_differences = [red.obj(d) for d in report.config_differences]
    origin = suggest_site(report.ranks)
    if origin is not None:
        report.site, report.occurrence = origin.site, origin.occurrence
        report.site_rank, report.site_step = origin.rank, origin.step
    steps = report.ranks[origin.rank].steps if origin is not None else None
    differences = differences_of({"comparability": report.comparability,
                                  "config_differences": report.config_differences}, run_info_a.get("argv"))
    candidate = next((res.first_divergence for _, res in sorted(report.ranks.items())
                      if res.first_divergence is not None and res.first_divergence.verdict == ORIGIN
                      and not res.first_divergence.site
                      and (res.first_divergence.kind == "module" or res.first_divergence.level != "full")), None)
    report.next_command = next_command(origin, run_info_a.get("argv"), report.pattern, steps, differences,
                                       report.format, candidate, trace_a=report.a)
    if isinstance(world, int) and len(report.ranks) < world and report.pattern in ("none", "only_receivers"):
        report.warnings.append(f"{len(report.ranks)} of {world} ranks compared: a clean result says nothing "
                               "about the ranks not traced")
    lacks = list(dict.fromkeys([*(run_info_a.get("lacks") or []), *(run_info_b.get("lacks") or [])]))
    report.lacks = lacks
    for what in lacks:  # what the trace format cannot record: every verdict above rests without it
        note = f"this trace format ({report.format}) lacks {what}"
        if note not in report.warnings:
            report.warnings.append(note)
    _grade_by_levels(report, run_info_a, run_info_b)
    for side, info in (("A", run_info_a), ("B", run_info_b)):
        for r, n in sorted((info.get("_dropped") or {}).items()):
            report.warnings.append(f"{side} rank {r} dropped {n} record(s) past its record budget: nothing is known "
                                   "beyond the last record kept (raise --max-records or narrow --steps)")
    for res in report.ranks.values():
        notes = [f"{side} is partial: {reason}; compared up to where it stops"
                 for side, reason in (("A", res.partial_a), ("B", res.partial_b)) if reason]
        if res.first_divergence is None and res.artifacts_total:
            notes.append(f"{res.artifacts_total} probe artifact(s) passed over; no real divergence seen")
        if res.first_divergence is None and res.unproven_matches:
            notes.append(f"{res.unproven_matches} record(s) matched only by a screen (an order-independent digest) or "
                         "had no digest to compare (metadata: sparse, quantized, subclass, freed): equality is proven "
                         "for the other records only, and a difference there would not have been seen (on a device, "
                         "`forensics trace --ordered-digests all` makes digests proof; metadata cannot be compared)")
        if res.external_total:
            notes.append(f"{res.external_total} record(s) that set a tensor onto a storage written outside the traced "
                         "ops (a DataLoader worker's batch, shared memory) differ, by their data or by the order it "
                         "arrived in: not judged; the ops that read that data were compared")
        res.warnings.extend(n for n in notes if n not in res.warnings)  # once, also when shards are merged
    return report


def diff_paths(path_a: Path, path_b: Path, fmt: str = "auto", rank: int | None = None,
               window: int = WINDOW) -> DiffReport:
    """Open two traces with their reader (detected or given) and diff them."""
    path_a, path_b = Path(path_a), Path(path_b)
    fmt, reader = resolve_reader(path_a, path_b, fmt)
    a_ranks, info_a = _open(reader, path_a)
    b_ranks, info_b = _open(reader, path_b)
    return diff_streams(a_ranks, b_ranks, a_name=str(path_a), b_name=str(path_b), fmt=fmt,
                        run_info_a=info_a, run_info_b=info_b, only_rank=rank, window=window)


def resolve_reader(path_a: Path, path_b: Path, fmt: str = "auto") -> tuple[str, Any]:
    """``(format, reader)`` for two traces: the given format, or the one both are detected as."""
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
    return fmt, all_readers[fmt]


def _open(reader: Any, path: Path) -> tuple[dict[int, Iterable[TraceRecord]], dict]:
    """Per-rank record iterables (lazy when the reader streams) and the run info."""
    if reader.iter_ranks is not None:
        ranks = dict(reader.iter_ranks(path))
        info = reader.run_info(path) if getattr(reader, "run_info", None) else {}
        return ranks, info or {}
    trace = reader.read(path)
    return dict(trace.ranks), dict(trace.run_info or {})


# --------------------------------------------------------------------------- text output

def _where(w: dict | None) -> str:
    if not w:
        return "?"
    return f"{w.get('identity')} (seq {w.get('seq')}, step {w.get('step')})"


def _region_line(region: dict[str, Any]) -> str:
    parts = [f"A has {region.get('only_in_a', 0)} record(s) B lacks"
             + (f" from {_where(region.get('first_only_in_a'))}" if region.get("first_only_in_a") else ""),
             f"B has {region.get('only_in_b', 0)} record(s) A lacks"
             + (f" from {_where(region.get('first_only_in_b'))}" if region.get("first_only_in_b") else "")]
    ra = region.get("realigned_at")
    if ra:
        parts.append(f"aligned again at A {_where(ra.get('a'))} / B {_where(ra.get('b'))}")
    elif region.get("note"):
        parts.append(region["note"])
    return "; ".join(parts)


def _divergence_line(d: Divergence) -> str:
    matched = {True: "inputs MATCH", False: "inputs DIFFER", None: "no counterpart"}[d.inputs_matched]
    if d.verdict == INPUTS_UNKNOWN:
        matched = "inputs NOT RECORDED"
    if d.kind in COLLECTIVE_KINDS and d.inputs_matched:
        matched = "local inputs MATCH (collective)"
    evidence = d.evidence if d.evidence != "unproven" else f"unproven: {d.input_evidence}"
    line = f"{d.verdict} ({evidence}) {d.identity} seq={d.seq} step={d.step}"
    if d.phase:
        line += f" phase={d.phase}"
    if d.autograd_node:
        line += f" node={d.autograd_node}" + (f" (forward {d.forward_op})" if d.forward_op else "")
    if d.verdict == CONTROL_FLOW:
        return f"{line} only in {d.side}"
    out = f"output differs by {d.how}" if d.outputs_differ else d.how
    line += f" {matched}; {out}"
    if d.site:
        line += f"; site {d.site}" + (f"#{d.occurrence}" if d.occurrence else "")
    return line


def _value(v: Any) -> str:
    """A recorded value as printed: a SHA-256 by its first 16 hex digits (the JSON has all 64)."""
    if isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v):
        return f"sha256:{v[:16]}..."
    return repr(v)


def _setting(v: Any) -> str:
    return "<unset>" if v is None else repr(v)


def format_report(report: DiffReport) -> str:
    """Human-readable summary, plain lines (the JSON report has everything)."""
    lines = []
    for d in report.not_comparable:
        what = f" ({d['what']})" if d.get("what") and d["what"] != d["field"] else ""
        lines.append(f"NOT COMPARABLE: {d['field']}{what} differs: A={_value(d['a'])} B={_value(d['b'])} (the runs "
                     "ran different programs: every verdict below compares different code)")
    lines.append(f"forensics diff: {report.a}  vs  {report.b}  (format {report.format})")
    for c in report.config_differences:
        note = " (in the knob catalog: `forensics knob` tells its scope)" if c.get("catalogued") else ""
        lines.append(f"  {c['kind']} differs: {c['name']} A={_setting(c['a'])} B={_setting(c['b'])}{note}")
    shown = {c["field"] for c in report.config_differences}
    for d in report.comparability:
        if d.get("severity") != "not_comparable" and d["field"] not in shown:
            lines.append(f"  comparability: {d['field']} differs: A={d['a']!r} B={d['b']!r} ({d['severity']})")
    if len(report.ranks) > FOLD_RANKS:  # at scale: summary first, divergent ranks, clean ranks folded
        return "\n".join(lines + _folded_ranks(report))
    for r, res in sorted(report.ranks.items()):
        d = res.first_divergence
        lines.append(_rank_head(r, res, report))
        if d is not None:
            lines.extend(_divergence_details(d))
        if res.control_flow_regions_total > 1:
            lines.append(f"    after it: {res.control_flow_regions_total - 1} more control-flow region(s)")
            for region in res.control_flow_regions[1:3]:
                lines.append(f"      {_region_line(region)}")
        if d is not None and d.verdict == CONTROL_FLOW:
            lines.append(f"    after the control-flow divergence: {res.records_compared_after_control_flow} record(s) "
                         f"compared once aligned, {res.after_control_flow_total} value difference(s)")
            for later in res.after_control_flow[:3]:
                lines.append(f"      {_divergence_line(later)} (after a control-flow divergence: not an origin)")
        for a in res.artifacts[:3]:
            lines.append(f"    artifact passed over: {a.identity} ({a.artifact})")
        if res.artifacts_total > 3:
            listed = len(res.artifacts)
            where = (f"the JSON report (--json) lists {listed}" if listed >= res.artifacts_total
                     else f"the JSON report (--json) lists the first {listed}")
            lines.append(f"    ... and {res.artifacts_total - 3} more artifact(s) passed over; {where}")
        for e in res.external[:3]:
            lines.append(f"    outside data not judged: {e.identity} (step {e.step})")
        if res.external_total > 3:
            lines.append(f"    ... and {res.external_total - 3} more record(s) of outside data not judged")
        for w in res.warnings:
            lines.append(f"    note: {w}")
    for w in report.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines + _summary_lines(report))


#: Above this many ranks ``format_report`` prints the summary first, the divergent ranks, and one
#: line per kind of clean rank (a 1024-rank diff fits a screenful; the JSON report has every rank).
FOLD_RANKS = 16


def _rank_head(r: int, res: RankResult, report: DiffReport) -> str:
    """A rank's one line: records compared, what was passed over, its first divergence or none."""
    d = res.first_divergence
    head = f"rank {r}: {res.records_compared} records compared"
    if res.artifacts_total:
        head += f", {res.artifacts_total} probe artifact(s) passed over"
    if res.external_total:
        head += f", {res.external_total} record(s) of outside data not judged"
    if res.unproven_matches:
        head += f", {res.unproven_matches} matched on weak evidence only"
    if d is None and report.lacks:  # e.g. XOR digests only: equal values are not proven equal
        return f"{head}; no divergence seen (not proven: this format lacks what would prove it, below)"
    if d is None:
        return f"{head}; no divergence"
    return f"{head}; first divergence: {_divergence_line(d)}"


def _summary_lines(report: DiffReport) -> list[str]:
    lines = [f"pattern: {report.pattern}: {report.pattern_explanation}"]
    if report.site:
        origin = report.ranks[report.site_rank].first_divergence if report.site_rank in report.ranks else None
        proof = "" if origin is None or origin.evidence == "proven" else f"; unproven: {origin.input_evidence}"
        lines.append(f"site: {report.site}" + (f"#{report.occurrence}" if report.occurrence else "")
                     + f" (rank {report.site_rank}, step {report.site_step}{proof})")
    else:
        lines.append("site: none named")
    lines.append(f"next: {report.next_command}")
    return lines


def _divergence_details(d: Any) -> list[str]:
    """The lines under a rank's first divergence (a :class:`~forensics.tracediff.divergence.Divergence`):
    its control-flow region, warnings, input sources."""
    lines = []
    if d.verdict == CONTROL_FLOW and d.control_flow:
        lines.append(f"    control flow: {_region_line(d.control_flow)}")
    lines += [f"    warning: {w}" for w in d.warnings]
    lines += [f"    input {src['input']}: {src['reading']}" for src in d.input_sources]
    return lines


def _folded_ranks(report: DiffReport) -> list[str]:
    """Many ranks: the counts, pattern, site and next command; then each divergent rank's line;
    then the clean ranks as one line per outcome, and what was passed over counted across ranks."""
    diverged = {r: res for r, res in sorted(report.ranks.items()) if res.first_divergence is not None}
    clean = [r for r in sorted(report.ranks) if r not in diverged]
    verdicts = Counter(res.first_divergence.verdict for res in diverged.values())
    kinds = ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items(), key=lambda x: (-x[1], x[0])))
    clean_word = "no divergence seen (not proven)" if report.lacks else "no divergence"
    lines = [f"summary: {len(report.ranks)} ranks compared: {len(diverged)} diverged"
             + (f" ({kinds})" if kinds else "") + f", {len(clean)} {clean_word}"]
    lines += _summary_lines(report)
    for w in report.warnings:
        lines.append(f"warning: {w}")
    if diverged:
        lines.append(f"divergent ranks ({len(diverged)}), each its first divergence "
                     "(`--rank R` for one rank's details, --json for every rank):")
    for r, res in diverged.items():
        lines.append(_rank_head(r, res, report))
        if r == report.site_rank:  # the site's rank in full: what the next command reruns
            lines.extend(_divergence_details(res.first_divergence))
    if clean:
        lines.append(f"{len(clean)} ranks: {clean_word} (every rank not listed above)")
    folds = [("artifact passed over", ((f"{a.identity} ({a.artifact})" for a in res.artifacts)
                                       for res in report.ranks.values())),
             ("outside data not judged", ((f"{e.identity}" for e in res.external) for res in report.ranks.values())),
             ("note", (iter(res.warnings) for res in report.ranks.values()))]
    for word, per_rank in folds:
        seen = Counter(x for items in per_rank for x in set(items))
        for text, n in sorted(seen.items(), key=lambda x: (-x[1], x[0]))[:3]:
            lines.append(f"  {word} on {n} rank(s): {text}")
        if len(seen) > 3:
            lines.append(f"  ... and {len(seen) - 3} more kind(s) of {word}; the JSON report (--json) lists each rank's")
    return lines
