"""One rank's report as the walk assembles it: the records passed over (artifacts, outside data),
the steps seen, the first divergence, the regions and later differences after a control flow, and
the warnings. What is listed is bounded (:data:`MAX_LISTED` of each kind); everything is counted.

The walk (:mod:`forensics.tracediff.walk`) and the pair decision (:mod:`forensics.tracediff.pair`)
say what they found; this module alone writes it into the :class:`RankResult`."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from forensics.tracediff.traces import TraceRecord
from forensics.tracediff.divergence import Divergence, RankResult, after_control_flow

MAX_LISTED = 20  # artifacts, control-flow regions and later differences listed per rank (all counted)


def continues_past(longer: str, shorter: str, reason: str | None, seq: Any) -> str:
    """The warning for a side that goes on after the other side's partial stream ended."""
    return (f"{longer} continues past the end of {shorter} ({reason}): {longer}'s records from seq {seq} on "
            "are not compared")


class RankReport:
    """Writes what one rank's walk found into its :class:`RankResult` (``result``)."""

    def __init__(self, rank: int) -> None:
        self.result = RankResult(rank)
        self._steps_seen: set = set()

    def warn(self, text: str) -> None:
        self.result.warnings.append(text)

    def note_step(self, step: Any) -> None:
        if step not in self._steps_seen:
            self._steps_seen.add(step)
            self.result.steps.append(step)

    def external(self, make: Callable[[], Divergence], reason: str) -> None:
        """A record whose data came from outside the traced ops: listed, not judged."""
        res = self.result
        res.external_total += 1
        if len(res.external) < MAX_LISTED:
            d = make()
            d.artifact = reason
            res.external.append(d)

    def artifact(self, make: Callable[[], Divergence], reason: str) -> None:
        """A record whose difference is a known probe artifact: passed over, listed."""
        res = self.result
        res.artifacts_total += 1
        if len(res.artifacts) < MAX_LISTED:
            d = make()
            d.artifact = reason
            res.artifacts.append(d)

    def unproven_match(self) -> None:
        self.result.unproven_matches += 1

    def first(self, d: Divergence) -> None:
        """The rank's first divergence (said with what the matches before it rest on)."""
        self.result.first_divergence = d
        self.note_unproven_before(d)

    def note_unproven_before(self, d: Divergence) -> None:
        """A first divergence after records whose outputs matched on weak evidence only is the first
        one seen, not proven the first: one of those may have differed unseen."""
        n = self.result.unproven_matches
        if n:
            d.warnings.append(f"{n} earlier record(s) matched only by a screen (an order-independent digest) or had "
                              "no digest to compare (metadata): a difference there would not have been seen, so this is "
                              "the first divergence seen, not proven the first")

    def compared_after_control_flow(self) -> None:
        self.result.records_compared_after_control_flow += 1

    def after_control_flow(self, d: Divergence) -> None:
        res = self.result
        res.after_control_flow_total += 1
        if len(res.after_control_flow) < MAX_LISTED:
            res.after_control_flow.append(after_control_flow(d))

    def region(self, region: dict[str, Any]) -> None:
        """A closed control-flow region (:mod:`forensics.tracediff.regions`)."""
        res = self.result
        res.control_flow_regions_total += 1
        if len(res.control_flow_regions) < MAX_LISTED:
            res.control_flow_regions.append(region)


def where(rec: TraceRecord) -> dict[str, Any]:
    return {"identity": rec.identity, "seq": rec.seq, "step": rec.step}
