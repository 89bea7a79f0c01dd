"""The ``forensics`` command line: a thin layer over the library.

Each command lives in ``forensics/commands/<name>.py`` and exposes ``register(app)``.
Every :class:`forensics.core.errors.ForensicsError` becomes one line on stderr and its exit code
(3 bad input, 4 unavailable, 2 bad site); any other exception is an internal error: one line
naming the command, what it was doing and the file holding the traceback, exit 70
(``forensics.runtime.crash``, docs/errors.md). Never a traceback on the terminal, never an exit code
that reads as a finding.
"""
from __future__ import annotations

import errno
import importlib
import os
import sys
import warnings

import typer

from forensics.core.errors import (
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_PIPE_CLOSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    BadInput,
    BadSite,
    ForensicsError,
)
from forensics.runtime.output import examples

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



def _version(value: bool) -> None:
    if value:
        from forensics import __version__  # noqa: PLC0415

        typer.echo(f"forensics {__version__}")
        raise typer.Exit(0)


@app.callback(epilog="Outputs, every command: --json - writes the JSON report to stdout; an output path you "
              "name that exists is refused (exit 3) unless --force replaces it (docs/errors.md).\n\n"
              + examples("forensics analyze tests/fixtures/cpu/conv1d-threads", "forensics --version"))
def _main_options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="print the version and exit"),
    max_input_bytes: str | None = typer.Option(
        None, "--max-input-bytes", metavar="N", help="ceiling on an input read whole (a "
        "JSONL file), its gzip stream decompressed included: bytes or 512M, 4G (default 1G; also "
        "FORENSICS_MAX_INPUT_BYTES); set, it bounds a streamed read's bytes too (default 64G)"),
    max_records: str | None = typer.Option(
        None, "--max-records", metavar="N", help="ceiling on the rows a streamed reader (Kineto/Chrome JSON, "
        "rocprofv3, nsys) keeps from one file (default 50000000; also FORENSICS_MAX_RECORDS)"),
) -> None:
    """Options of ``forensics`` itself (the commands' own options follow the command name)."""
    if max_input_bytes is not None:
        from forensics.runtime.inputs import MAX_INPUT_ENV, parse_size  # noqa: PLC0415

        try:
            os.environ[MAX_INPUT_ENV] = str(parse_size(max_input_bytes))  # worker processes inherit it
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--max-input-bytes") from None
    if max_records is not None:
        from forensics.runtime.inputs import MAX_RECORDS_ENV, parse_count  # noqa: PLC0415

        try:
            os.environ[MAX_RECORDS_ENV] = str(parse_count(max_records))  # worker processes inherit it
        except ValueError as e:
            raise typer.BadParameter(str(e), param_hint="--max-records") from None


for _name in COMMAND_MODULES:
    importlib.import_module(f"forensics.commands.{_name}").register(app)


def _conventional_usage_name(self) -> str:  # noqa: ANN001
    """Usage-line name of an argument in the usual form: ``RUN_A``, ``[-- CMD ...]``, ``[PATH]...``.

    (typer 0.2x writes required arguments as ``{run_a}``, which reads like a placeholder to fill.)
    """
    name = self.metavar or self.name.upper()
    if not self.required and not name.startswith("["):
        name = f"[{name}]"
    if self.nargs != 1 and "..." not in name:
        name += "..."
    return name


if hasattr(typer.core.TyperArgument, "_usage_display_name"):
    typer.core.TyperArgument._usage_display_name = _conventional_usage_name

#: errno values of an OSError that mean "this machine cannot take the output" (exit 4).
_NO_RESOURCE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}
#: errno values of an OSError naming a file that mean "this input cannot be read" (exit 3).
_UNREADABLE = {errno.ENOENT, errno.EACCES, errno.EPERM, errno.EISDIR, errno.ENOTDIR, errno.ELOOP,
               errno.ENAMETOOLONG, errno.ENXIO, errno.EIO, errno.EINVAL}
#: Warnings meant for developers of the libraries under us, not for users (they would precede
#: a command's one-line result); pytest still shows them (it records warnings outside main()).
_QUIET_CATEGORIES = (FutureWarning, DeprecationWarning, PendingDeprecationWarning)


def command_of(args: list[str]) -> str:
    """The subcommand named on a command line ('' when none)."""
    return next((a for a in args if a in COMMAND_MODULES), "")


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point; returns the exit code (exits when called without ``argv``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = command_of(args)
    early = _path_for_a_command(args)
    if early is not None:
        return _exit(early, argv)
    try:
        with warnings.catch_warnings():
            for category in _QUIET_CATEGORIES:
                warnings.simplefilter("ignore", category)
            _quiet_pandas_warnings()
            app(args=args, prog_name="forensics", standalone_mode=True)
        code = 0
    except SystemExit as e:  # typer/click exit with the command's code
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if type(sys.stdout).__name__ == "PacifyFlushWrapper":  # typer's answer to EPIPE (typer.echo): exit 1
            code = EXIT_PIPE_CLOSED  # would read as a finding (rich's own: runtime.console._Console)
        if code == EXIT_INTERRUPTED:  # typer turns Ctrl-C into Exit(130) silently
            typer.echo(f"forensics {command}: interrupted".replace("  ", " "), err=True)
    except BadSite as e:
        typer.echo(f"forensics: bad site: {e}", err=True)
        code = e.exit_code
    except BadInput as e:
        typer.echo(f"forensics: bad input: {e}", err=True)
        code = e.exit_code
    except ForensicsError as e:
        typer.echo(f"forensics: {e}", err=True)
        code = getattr(e, "exit_code", EXIT_BAD_INPUT)
    except KeyboardInterrupt:
        typer.echo(f"forensics {command}: interrupted".replace("  ", " "), err=True)
        code = EXIT_INTERRUPTED
    except OSError as e:
        code = _os_error(e, command, args)
    except Exception as e:  # noqa: BLE001 - the one place that turns a bug into one line + a file
        code = _internal(e, command, args)
    return _exit(code, argv)


def _path_for_a_command(args: list[str]) -> int | None:
    """``forensics PATH`` (a path where the command goes): one line, not click's usage box; exit 3
    when PATH cannot be read (it does not exist, or is not readable), 2 when it can (a usage slip)."""
    first = next((a for a in args if not a.startswith("-")), None)
    if first is None or first in COMMAND_MODULES or args.index(first) != 0:
        return None
    looks = os.sep in first or first.startswith(".") or os.path.lexists(first)
    if not looks:
        return None  # a misspelt command: click's own message
    if not os.path.exists(first) or not os.access(first, os.R_OK):
        why = "no such file or directory" if not os.path.lexists(first) else "cannot be read"
        typer.echo(f"forensics: bad input: {first}: {why} (a command comes first: forensics analyze PATH)", err=True)
        return EXIT_BAD_INPUT
    typer.echo(f"forensics: {first} is a path, not a command: forensics analyze {first} (commands: "
               f"{', '.join(COMMAND_MODULES)})", err=True)
    return EXIT_USAGE


def _os_error(e: OSError, command: str, args: list[str]) -> int:
    """An OSError that escaped a command: a full disk (4), an unreadable named file (3), else a bug (70)."""
    name = e.filename if e.filename is not None else None
    if e.errno in _NO_RESOURCE:
        where = f"{name}: " if name else ""
        typer.echo(f"forensics {command}: {where}cannot write: {e.strerror}".replace("  ", " "), err=True)
        return EXIT_UNAVAILABLE
    if name is not None and e.errno in _UNREADABLE:
        typer.echo(f"forensics: bad input: {name}: cannot read: {e.strerror}", err=True)
        return EXIT_BAD_INPUT
    return _internal(e, command, args)


def _internal(e: BaseException, command: str, args: list[str]) -> int:
    from forensics.runtime.crash import report_internal_error  # noqa: PLC0415

    try:
        line = report_internal_error(e, command, args)
    except Exception:  # noqa: BLE001 - even a broken reporter must not hide the original error
        import traceback  # noqa: PLC0415

        line = (f"forensics {command}: internal error (a bug, not a finding): {type(e).__name__}; "
                "the error report failed too; traceback follows\n"
                + "".join(traceback.format_exception(type(e), e, e.__traceback__)))
    typer.echo(line, err=True)
    return EXIT_INTERNAL


def _quiet_pandas_warnings() -> None:
    """pandas' PerformanceWarning and SettingWithCopyWarning, matched by their text: importing
    ``pandas.errors`` for their classes would load pandas (~0.5 s) for every command, even
    ``--version``."""
    warnings.filterwarnings("ignore", message="DataFrame is highly fragmented")
    warnings.filterwarnings("ignore", message=r"\s*A value is trying to be set on a copy of a slice")


def _exit(code: int, argv: list[str] | None) -> int:
    if argv is None:
        sys.exit(code)
    return code


if __name__ == "__main__":
    main()
