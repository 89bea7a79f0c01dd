"""The one place where commands get a rich Console.

On a terminal, rich may wrap table cells to the window (never splitting a path: cells use
``overflow="fold"`` only for long tokens). Off a terminal (a pipe, a log file, CI) every line is
printed whole: no hard wrap at 80 columns, no colour codes, no markup-driven wrapping, so that
``grep`` and log readers see each message on one line.
"""
from __future__ import annotations

import sys
from typing import TextIO

from rich.console import Console

#: Width used off a terminal: wide enough that rich never wraps a line or a table row.
PLAIN_WIDTH = 100_000


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def make_console(stderr: bool = False) -> Console:
    """A Console for stdout (or stderr) that prints plain unwrapped lines when not on a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    if is_terminal(stream):
        return Console(stderr=stderr, soft_wrap=True)
    return Console(file=stream, width=PLAIN_WIDTH, soft_wrap=True, no_color=True, color_system=None,
                   highlight=False, emoji=False, force_terminal=False)
