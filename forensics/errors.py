"""Errors the CLI turns into one clear line and a distinct exit code (never a traceback)."""
from __future__ import annotations

from dataclasses import dataclass
from os import PathLike


class ForensicsError(Exception):
    """Base class of every error the CLI reports as one line."""


@dataclass
class BadInput(ForensicsError):
    """An input file is truncated, corrupt, empty, of another instrument or a foreign version.

    ``str(err)`` is ``"<path>:<line>: <message>"`` (line omitted when the file has no lines).
    """

    path: str
    message: str
    line: int | None = None

    def __init__(self, path: str | PathLike[str], message: str, line: int | None = None):
        self.path = str(path)
        self.message = message
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.message}"


class BadSite(ForensicsError, ValueError):
    """A site identity string that does not parse; the message says what a valid one looks like."""


class Unavailable(ForensicsError):
    """A tool or device is missing (no CUDA, no ncu, no nsys...); the message is one line."""


# Exit codes shared by every command.
EXIT_OK = 0  # analysis: kernel(s) NAMED; diff: no divergence; other commands: success
EXIT_NOT_NAMED = 1  # analysis: nothing NAMED (DISAGREE / SINGLE-SOURCE); diff: divergence found
EXIT_USAGE = 2  # bad command line (typer/click's own code)
EXIT_BAD_INPUT = 3  # bad input file: truncated, corrupt, empty, foreign schema
EXIT_UNAVAILABLE = 4  # a required tool/device is missing and nothing could be done
