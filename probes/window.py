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

from forensics.core.window import Steps, parse_ranks, parse_steps  # noqa: F401  (the grammar; part of this module's API)
from probes import forks


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
