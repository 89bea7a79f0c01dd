"""Errors the CLI turns into one clear line and a distinct exit code (never a traceback).

Exit codes (docs/errors.md): 0 and 1 are results (NAMED / not NAMED, no divergence /
divergence), 2 a bad command line, 3 bad input, 4 unavailable (a tool, a device, disk space),
70 an internal error (a bug in forensics: never a finding; the traceback goes to a file).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from os import PathLike

# Exit codes shared by every command.
EXIT_OK = 0  # analysis: kernel(s) NAMED; diff/compare: no divergence; other commands: success
EXIT_NOT_NAMED = 1  # analysis: nothing NAMED (CONFLICT / DISAGREE / SINGLE-SOURCE); diff/compare: divergence found
EXIT_USAGE = 2  # bad command line (typer/click's own code), bad site string
EXIT_BAD_INPUT = 3  # bad input file: truncated, corrupt, empty, foreign schema, not a capture; output exists
EXIT_UNAVAILABLE = 4  # a required tool/device/resource (CUDA, ncu, disk space) is missing; nothing could be done
EXIT_INTERNAL = 70  # internal error (sysexits EX_SOFTWARE): a bug; one line + where the traceback was written
EXIT_INTERRUPTED = 130  # SIGINT / Ctrl-C (128 + 2)
EXIT_PIPE_CLOSED = 141  # stdout closed by its reader (`| head`): what a shell shows for SIGPIPE (128 + 13)


class ForensicsError(Exception):
    """Base class of every error the CLI reports as one line; ``exit_code`` is the process's exit status."""

    exit_code: int = EXIT_BAD_INPUT


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

    exit_code = EXIT_USAGE


class BadArgument(ForensicsError, TypeError, ValueError):
    """A Python API argument of the wrong type or out of range (``keep_going='no'``, ``paths='dir'``,
    ``site=['x']``), refused where it enters (forensics.api); a TypeError and a ValueError both."""

    exit_code = EXIT_USAGE


class Unavailable(ForensicsError):
    """A tool or device is missing (no CUDA, no ncu, no nsys...); the message is one line."""

    exit_code = EXIT_UNAVAILABLE


DOING_ATTR = "forensics_doing"


@contextlib.contextmanager
def doing(what: str) -> Iterator[None]:
    """Name the step in progress ("reading manifest.yaml of CAPTURE", "writing the bundle ...").

    An unexpected exception raised inside carries the innermost such name to the CLI, whose
    one-line internal-error message says what forensics was doing. Costs nothing otherwise.
    """
    try:
        yield
    except Exception as e:
        if not isinstance(e, ForensicsError) and getattr(e, DOING_ATTR, None) is None:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(e, DOING_ATTR, what)
        raise
