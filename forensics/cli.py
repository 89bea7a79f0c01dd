"""The ``forensics`` command line: a thin layer over the library.

Each command lives in ``forensics/commands/<name>.py`` and exposes ``register(app)``.
Every :class:`forensics.errors.ForensicsError` becomes one line on stderr and its exit code.
"""
from __future__ import annotations

import importlib
import sys

import typer

from forensics.errors import EXIT_BAD_INPUT, EXIT_UNAVAILABLE, BadInput, BadSite, ForensicsError, Unavailable

COMMAND_MODULES = ("analyze", "kernel", "trace", "diff", "knob", "bundle", "compare")

app = typer.Typer(
    name="forensics",
    help="Below-dispatcher GPU kernel forensics: from a divergent site to a named kernel.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: one layout on a terminal and in a pipe (no boxes cut at 80 columns, no
    # '<bool>' metavars on flags).
    rich_markup_mode=None,
)

for _name in COMMAND_MODULES:
    importlib.import_module(f"forensics.commands.{_name}").register(app)


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit code."""
    try:
        app(args=argv, prog_name="forensics", standalone_mode=True)
    except SystemExit as e:  # typer/click exit with the command's code
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if argv is not None:
            return code
        raise
    except BadSite as e:
        typer.echo(f"forensics: bad site: {e}", err=True)
        return _exit(2, argv)
    except BadInput as e:
        typer.echo(f"forensics: bad input: {e}", err=True)
        return _exit(EXIT_BAD_INPUT, argv)
    except Unavailable as e:
        typer.echo(f"forensics: {e}", err=True)
        return _exit(EXIT_UNAVAILABLE, argv)
    except ForensicsError as e:
        typer.echo(f"forensics: {e}", err=True)
        return _exit(EXIT_BAD_INPUT, argv)
    return 0


def _exit(code: int, argv: list[str] | None) -> int:
    if argv is None:
        sys.exit(code)
    return code


if __name__ == "__main__":
    main()
