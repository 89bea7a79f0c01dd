"""Progress of long work (many ranks), on stderr only: stdout stays the command's result.

On a terminal: a rich progress bar (through :func:`forensics.runtime.console.make_console`). Off a
terminal (a log, a pipe, CI): plain whole lines, at most one every ``every`` seconds and none at
all for work that ends sooner, so that short runs print nothing extra::

    forensics analyze: 384/1024 ranks (38%), 41 s, about 66 s left
"""
from __future__ import annotations

import time
from types import TracebackType

from forensics.runtime.console import is_terminal, make_console


class Progress:
    """``with Progress("forensics analyze", total=1024) as p: ... p.advance(8)``."""

    def __init__(self, what: str, total: int, unit: str = "ranks", every: float = 10.0) -> None:
        self.what, self.total, self.unit, self.every = what, total, unit, every
        self.done = 0
        self._console = make_console(stderr=True)
        self._bar = None
        self._task = None
        self._start = self._last = 0.0
        self._printed = False
        self._shown = -1

    def __enter__(self) -> Progress:
        self._start = self._last = time.monotonic()
        if is_terminal(self._console.file):
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeRemainingColumn

            self._bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn(self.unit), TimeRemainingColumn(), console=self._console, transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.what, total=self.total)
        return self

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)
            return
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            self._line(now)

    def _line(self, now: float) -> None:
        elapsed = now - self._start
        text = f"{self.what}: {self.done}/{self.total} {self.unit} ({100 * self.done // max(1, self.total)}%), {elapsed:.0f} s"
        if 0 < self.done < self.total:
            text += f", about {elapsed * (self.total - self.done) / self.done:.0f} s left"
        self._console.print(text, markup=False, highlight=False)
        self._printed = True
        self._shown = self.done

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.__exit__(typ, exc, tb)
        elif self._printed and typ is None and self._shown != self.done:
            self._line(time.monotonic())
