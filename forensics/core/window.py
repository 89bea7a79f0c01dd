"""The step-window and rank-filter grammar (``--steps 1-2``, ``--ranks 0,3,8-15``), stated once:
the probes bound a capture with it in the user's process, the differ and the analysis read the
windows a trace or a capture recorded with it. Pure standard library."""
from __future__ import annotations

from dataclasses import dataclass


def parse_ranks(spec: str | None) -> frozenset[int] | None:
    """``"all"``/None -> None (every rank); ``"0,3,8-15"`` -> {0, 3, 8, ..., 15}."""
    if spec is None or str(spec).strip().lower() in ("", "all", "*"):
        return None
    out: set[int] = set()
    for part in str(spec).split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            if not (lo.isdigit() and hi.isdigit()) or int(lo) > int(hi):
                raise ValueError(f"bad rank range {part!r}; write e.g. 0,3,8-15")
            out.update(range(int(lo), int(hi) + 1))
        elif part.isdigit():
            out.add(int(part))
        else:
            raise ValueError(f"bad rank {part!r}; write e.g. 0,3,8-15 or all")
    return frozenset(out)


@dataclass(frozen=True)
class Steps:
    """A step window: ``first..last`` inclusive (``last`` None = open), every ``every``-th step."""

    first: int = 0
    last: int | None = None
    every: int = 1

    def __contains__(self, step: int) -> bool:
        if step < self.first or (self.last is not None and step > self.last):
            return False
        return (step - self.first) % self.every == 0

    def done(self, step: int) -> bool:
        """True once ``step`` is past the window (nothing more will be recorded)."""
        return self.last is not None and step > self.last


def parse_steps(spec: str | None) -> Steps:
    """``"all"`` | ``"N"`` | ``"A-B"`` | ``"A-"`` | ``"A-B:K"`` (every K-th)."""
    s = (spec or "all").strip().lower()
    if s in ("all", "*", ""):
        return Steps(0, None, 1)
    every = 1
    if ":" in s:
        s, k = s.split(":", 1)
        if not k.isdigit() or int(k) < 1:
            raise ValueError(f"bad step stride {k!r}; write e.g. 1-10:2")
        every = int(k)
    if "-" in s:
        a, b = s.split("-", 1)
        if not a.isdigit() or (b and not b.isdigit()):
            raise ValueError(f"bad step window {spec!r}; write e.g. 1-2, 3, 5- or all")
        first, last = int(a), (int(b) if b else None)
        if last is not None and last < first:
            raise ValueError(f"bad step window {spec!r}: end before start")
        return Steps(first, last, every)
    if s.isdigit():
        return Steps(int(s), int(s), every)
    raise ValueError(f"bad step window {spec!r}; write e.g. 1-2, 3, 5- or all")
