"""Step windows and rank filters: what keeps a capture bounded.

Ranks come from the launcher's environment (RANK, then SLURM_PROCID, then LOCAL_RANK, else 0).
Steps are counted from 0 and advance at each optimizer step (a global post-hook on
``torch.optim.Optimizer.step``) or at each explicit :func:`probes.step` call. A program that never
steps stays in step 0 for its whole life: a window that contains step 0 then traces it whole.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

from probes import forks


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


def current_rank(env: dict[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    for key in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        v = env.get(key)
        if v is not None and v.strip().isdigit():
            return int(v)
    return 0


def world_size(env: dict[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    for key in ("WORLD_SIZE", "SLURM_NTASKS"):
        v = env.get(key)
        if v is not None and v.strip().isdigit():
            return int(v)
    return 1


@dataclass
class StepWindow:
    """Counts steps and tells probes whether they are inside the window.

    Listeners get ``on_enter(step)`` when the window opens, ``on_exit(step)`` when it closes (the
    probes flush there), and ``on_step(step)`` at every step boundary. The window belongs to the
    process that made it: in a fork of that process it is never active and calls no listener (the
    fork's copies of the probes write nothing; see :mod:`probes.forks`).
    """

    steps: Steps
    step: int = 0
    _entered: bool = False
    _closed: bool = False
    on_enter: list[Callable[[int], None]] = field(default_factory=list)
    on_exit: list[Callable[[int], None]] = field(default_factory=list)
    on_step: list[Callable[[int], None]] = field(default_factory=list)
    pid: int = field(default_factory=os.getpid)

    @property
    def active(self) -> bool:
        return self.step in self.steps and not forks.foreign(self.pid)

    @property
    def closed(self) -> bool:
        return self._closed

    def start(self) -> None:
        """Call once after listeners are attached (enters the window if step 0 is in it)."""
        self._transition()

    def advance(self) -> None:
        """One step boundary (optimizer step done, or probes.step())."""
        if forks.foreign(self.pid):
            self.step += 1
            return
        for cb in list(self.on_step):
            cb(self.step)
        self.step += 1
        self._transition()

    def close(self) -> None:
        """End of process: close the window if it is open."""
        if self._entered and not self._closed and not forks.foreign(self.pid):
            self._closed = True
            for cb in list(self.on_exit):
                cb(self.step)

    def _transition(self) -> None:
        if self._closed or forks.foreign(self.pid):
            return
        if self.active and not self._entered:
            self._entered = True
            for cb in list(self.on_enter):
                cb(self.step)
        elif self._entered and self.steps.done(self.step):
            self.close()


def install_optimizer_hook(window: StepWindow) -> Callable[[], None]:
    """Advance ``window`` after every ``torch.optim.Optimizer.step``; returns an uninstaller."""
    from torch.optim.optimizer import register_optimizer_step_post_hook  # noqa: PLC0415

    handle = register_optimizer_step_post_hook(lambda *_a, **_k: window.advance())
    return handle.remove
