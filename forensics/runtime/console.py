"""The one place where commands get a rich Console.

On a terminal, rich wraps lines to the window between words, never inside one, and tables are
fitted to the window by :func:`print_fitted_table` (constant columns said once, else one
``key: value`` line per cell), so ``aten.convolution.default#1`` is never split at any width. Off a terminal (a pipe, a log file, CI) every line is
printed whole: no hard wrap at 80 columns, no colour codes, no markup-driven wrapping, so that
``grep`` and log readers see each message on one line... up to 100 columns: a piped line longer than
:data:`PIPED_TABLE_WIDTH` is broken between words (:func:`fit_line`), its continuation lines indented
:data:`CONTINUATION` columns deeper than it; a word is never split, so a path or a name longer than
the room left stands alone on its line, and a command to copy (``next:``, a dry run's ``argv:``)
is printed whole. Lines on stderr are never broken: an error is one line, whatever its length.
"""
from __future__ import annotations

import os
import re
import sys
from typing import TextIO

from rich.console import Console

#: Width used off a terminal: wide enough that rich never wraps a line or a table row.
PLAIN_WIDTH = 100_000
#: Off a terminal a table is fitted to this many columns (a log read in a pager or a CI page); its
#: lines are still never wrapped, so one holding a path or a long kernel name may be longer.
PIPED_TABLE_WIDTH = 100


#: How much deeper than the line it continues a continuation line is indented (deeper than the
#: 2- and 4-column indents commands use for the items under a line, so it never reads as one).
CONTINUATION = 6
#: Lines printed whole however long: a command the user copies (``next: forensics kernel ...``; a
#: dry run's ``argv:``, ``env:`` and ``then:`` lines).
_WHOLE = re.compile(r"^\s*(next|argv|env|then): ")
#: Box-drawing table lines are never broken (print_fitted_table fits tables to the width instead).
_BOX = set("┏┃┡│└┗┣┠├╭╰━─")


def piped_width() -> int:
    """Columns piped output is fitted to: ``$COLUMNS`` when the user set it (a wider log viewer), else
    :data:`PIPED_TABLE_WIDTH`."""
    try:
        return max(int(os.environ.get("COLUMNS", "")), 20)
    except ValueError:
        return PIPED_TABLE_WIDTH


def unfit(text: str) -> str:
    """``text`` with every line :func:`fit_line` broke joined again (a continuation line is indented
    exactly :data:`CONTINUATION` columns deeper than the line it continues): the lines as written."""
    out: list[str] = []
    base = -1
    for line in text.split("\n"):
        indent = len(line) - len(line.lstrip(" "))
        if out and line.strip() and indent == base + CONTINUATION:
            out[-1] += " " + line.strip()
            continue
        out.append(line)
        base = indent
    return "\n".join(out)


def fit_line(line: str, width: int = PIPED_TABLE_WIDTH) -> list[str]:
    """``line`` as lines of at most ``width`` columns, broken only at a space; each continuation is
    indented :data:`CONTINUATION` columns deeper than ``line``. A word longer than the room left
    (a path) stands whole on its own line, the one case where a line is longer than ``width``;
    a command line (``next:``, ``argv:``, ``env:``, ``then:``) and a table's box-drawing line are
    returned whole."""
    if len(line) <= width or _WHOLE.match(line) or (line.lstrip()[:1] in _BOX):
        return [line]
    indent = len(line) - len(line.lstrip(" "))
    pad = " " * (indent + CONTINUATION)
    words = line[indent:].split(" ")
    out: list[str] = []
    cur = " " * indent + words[0]
    for w in words[1:]:
        if len(cur) + 1 + len(w) <= width:
            cur += " " + w
        elif not w:  # runs of spaces inside the line (two-space separators) fold into the break
            continue
        else:
            out.append(cur.rstrip())
            cur = pad + w
    out.append(cur.rstrip())
    return out


class _FittedStream:
    """A text stream that passes each whole line through :func:`fit_line` (a pipe, a log file)."""

    def __init__(self, stream: TextIO, width: int | None = None) -> None:
        self._stream, self._width, self._partial = stream, width or piped_width(), ""

    def write(self, text: str) -> int:
        *whole, self._partial = (self._partial + text).split("\n")
        for line in whole:
            self._stream.write("\n".join(fit_line(line, self._width)) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._partial:
            self._stream.write("\n".join(fit_line(self._partial, self._width)))
            self._partial = ""
        self._stream.flush()

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name: str):  # encoding, fileno, ...: the stream's own
        return getattr(self._stream, name)


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class _Console(Console):
    """rich's Console, but a reader that closes the pipe early (``| head``) ends the command with
    exit 141 (:data:`~forensics.core.errors.EXIT_PIPE_CLOSED`), not rich's exit 1, which reads as
    a finding ("nothing NAMED", "a divergence")."""

    def on_broken_pipe(self) -> None:
        from forensics.core.errors import EXIT_PIPE_CLOSED  # noqa: PLC0415

        try:
            super().on_broken_pipe()  # quiet, stdout to /dev/null (no second error at exit), SystemExit(1)
        except SystemExit:
            raise SystemExit(EXIT_PIPE_CLOSED) from None


def make_console(stderr: bool = False) -> Console:
    """A Console for stdout (or stderr) that prints plain unwrapped lines when not on a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    if is_terminal(stream):
        return _Console(stderr=stderr, soft_wrap=False)  # wrapped between words, never inside one
    # stdout is fitted to 100 columns; stderr is not: an error there is one line, whatever its length
    return _Console(file=stream if stderr else _FittedStream(stream), width=PLAIN_WIDTH, soft_wrap=True, no_color=True, color_system=None,
                   highlight=False, emoji=False, force_terminal=False)


def _cell_len(cell: str) -> int:
    from rich.text import Text  # noqa: PLC0415

    return max((Text.from_markup(line).cell_len for line in cell.split("\n")), default=0)


def table_width(columns: list[str], rows: list[list[str]]) -> int:
    """Width of a rich box table of these cells printed whole: each column its widest cell plus
    one space each side, and one rule between and around columns."""
    widths = [max([_cell_len(c)] + [_cell_len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    return sum(w + 2 for w in widths) + len(columns) + 1


def print_fitted_table(console: Console, title: str, columns: list[str], rows: list[list[str]]) -> str:
    """Print a table whose cells are never split inside a token; returns the layout used.

    ``table``: it fits the console's width as it is. ``dropped``: columns holding one value in
    every row are said once above the table (``rank: 0 (every row)``) and the rest fits.
    ``vertical``: it still would not fit (a narrow terminal): constant columns said once, then
    per row its ``key: value`` items packed on lines, the row's first line unindented and the
    rest under it; an item wider than a line wraps only between words.
    Cells may carry rich markup (a verdict's style); text in them is escaped by the caller.
    """
    from rich.table import Table  # noqa: PLC0415

    def table(cols: list[str], body: list[list[str]]) -> Table:
        t = Table(title=title, show_lines=False)
        for col in cols:
            t.add_column(col, overflow="fold")  # only a token wider than the whole terminal is folded
        for r in body:
            t.add_row(*r)
        return t

    width = piped_width() if console.width >= PLAIN_WIDTH else console.width
    if table_width(columns, rows) <= width:
        console.print(table(columns, rows))
        return "table"
    constant = [i for i in range(len(columns)) if len(rows) > 1 and len({r[i] for r in rows}) == 1]
    console.print(title, soft_wrap=False)
    # the widest constant columns first, only as many as it takes to fit (at least two columns kept)
    by_width = sorted(constant, key=lambda i: -max(_cell_len(rows[0][i]), _cell_len(columns[i])))
    for n in range(1, len(by_width) + 1):
        drop = set(by_width[:n])
        keep = [i for i in range(len(columns)) if i not in drop]
        kept_cols, kept_rows = [columns[i] for i in keep], [[r[i] for i in keep] for r in rows]
        if len(keep) > 1 and table_width(kept_cols, kept_rows) <= width:
            for i in sorted(drop):
                console.print(f"{columns[i]}: {rows[0][i]} (every row)", soft_wrap=False)
            t = table(kept_cols, kept_rows)
            t.title = None
            console.print(t)
            return "dropped"
    keep = [i for i in range(len(columns)) if i not in constant]
    kept_cols, kept_rows = [columns[i] for i in keep], [[r[i] for i in keep] for r in rows]
    for i in constant:
        console.print(f"{columns[i]}: {rows[0][i]} (every row)", soft_wrap=False)
    for r in kept_rows:  # "key: value" items packed on lines; a long value goes under its key
        lines: list[str] = []
        for col, cell in zip(kept_cols, r):
            item = f"{col}: {cell}"
            if lines and _cell_len(lines[-1]) + 2 + _cell_len(item) <= width:
                lines[-1] += "  " + item
            elif lines and 2 + _cell_len(item) > width:
                lines += [f"  {col}:", f"    {cell}"]
            else:
                lines.append(("  " if lines else "") + item)
        for line in lines:
            console.print(line, soft_wrap=False)
    return "vertical"


def is_command_line(line: str) -> bool:
    """A command to copy (``next: forensics kernel ...``, a dry run's ``argv:``): printed on one line."""
    return bool(_WHOLE.match(line))


def echo_plain(console: Console, text: str) -> None:
    """Print plain text (no markup, no highlighting): on a terminal wrapped between words, never
    inside one (a path, ``--``, ``aten.convolution.default#1``); off one, each line whole.

    A command to copy (:func:`is_command_line`) is written as one line at any terminal width: the
    terminal folds it on screen, but no line break is written into it, so a triple-click or a
    paste gives the whole command (a broken one pasted would run its first line alone)."""
    if not console.is_terminal or not any(is_command_line(line) for line in text.split("\n")):
        console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=False)
        return
    chunk: list[str] = []
    for line in text.split("\n") + [None]:  # type: ignore[list-item]
        if line is not None and not is_command_line(line):
            chunk.append(line)
            continue
        if chunk:
            console.print("\n".join(chunk), markup=False, highlight=False, emoji=False, soft_wrap=False)
            chunk = []
        if line is not None:
            echo_command(console, line)


def echo_command(console: Console, line: str) -> None:
    """Print a command to copy whole, on one line, at any width (on a terminal the screen folds it)."""
    console.print(line, markup=False, highlight=False, emoji=False, soft_wrap=True, crop=False)
