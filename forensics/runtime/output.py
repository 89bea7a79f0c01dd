"""The output contract every command shares (docs/errors.md, "Outputs"):

- ``--json -`` means stdout, for every command that has ``--json``;
- a path the user names (``--out``, ``--json FILE``, ``bundle -o``) that already exists is refused
  before anything runs: one line naming it, exit 3 (:class:`forensics.runtime.atomic.OutputExists`),
  unless ``--force``, which replaces it; only when the command succeeded is the earlier output
  removed (it is set aside under a hidden name meanwhile and put back if the command fails).
  ``--force`` replaces only an earlier output of forensics (a folder holding one of the files a
  command writes) or a file; it never empties an arbitrary folder;
- a default location nobody named (``PATH/analysis``, ``forensics-capture``) is never
  overwritten: the next free ``-2``, ``-3``... is used and a ``note:`` line says so;
- examples in each command's ``--help`` come from :func:`examples`.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from forensics.runtime.atomic import OutputExists, exists, write_atomic

#: What ``--json`` takes to mean stdout.
STDOUT = "-"

#: Help text of ``--force`` (one wording for every command).
FORCE_HELP = "replace an existing output (otherwise it is refused: exit 3)"

#: Files whose presence marks a folder as an earlier output of forensics (what --force may replace).
OUTPUT_MARKERS = ("manifest.yaml", "analysis.json", "report.md", "optrace-config.json", ".forensics-claim",
                  "sweep.json")


def examples(*lines: str) -> str:
    """A typer ``epilog``: the lines under "Examples:", printed as given (click never rewraps them)."""
    return "Examples:\n\n\b\n" + "\n".join(f"  {line}" for line in lines)


def is_stdout(path: str | os.PathLike[str] | None) -> bool:
    """``--json -``: the report goes to stdout, not to a file named ``-``."""
    return path is not None and str(path) == STDOUT


def _refusal(path: Path, flag: str, what: str, force_flag: str | None) -> OutputExists:
    kind = "a dangling symbolic link" if path.is_symlink() and not path.exists() else \
        ("a directory" if path.is_dir() else "a file")
    how = f"{force_flag} replaces it, or choose another {flag}" if force_flag else f"choose another {flag}"
    return OutputExists(f"{path} exists ({kind}); not overwriting the {what} ({how})")


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def check_output(path: str | os.PathLike[str] | None, *, force: bool, flag: str, what: str,
                 directory: bool = False, force_flag: str | None = "--force") -> None:
    """Refuse an existing named output before anything runs (exit 3), unless ``force``.

    ``directory``: an existing empty directory is free (a command may claim it). With ``force``
    a directory must be an earlier forensics output (:data:`OUTPUT_MARKERS`), never any folder.
    """
    if path is None or is_stdout(path):
        return
    p = Path(path)
    if not exists(p) or (directory and _is_empty_dir(p)):
        return
    if directory and not (p.is_dir() and not p.is_symlink()):  # never replaced, even with --force
        raise OutputExists(f"{p} exists and is not a folder; {flag} takes a folder for the {what} "
                           f"(choose another {flag})")
    if not force:
        raise _refusal(p, flag, what, force_flag)
    if p.is_dir() and not p.is_symlink():
        if not directory:
            raise OutputExists(f"{p} is a directory; --force replaces a file, never a folder (choose another {flag})")
        if not any((p / m).exists() for m in OUTPUT_MARKERS):
            raise OutputExists(f"{p} exists and holds no earlier forensics output; --force replaces only one "
                               f"(choose another {flag})")


@contextlib.contextmanager
def replacing(path: str | os.PathLike[str] | None, *, force: bool, flag: str, what: str,
              directory: bool = True) -> Iterator[None]:
    """Run the body with ``path`` free: refused when it exists (see :func:`check_output`), or with
    ``force`` set aside under a hidden name, removed when the body returns and put back when it
    raises (and the body left nothing there). Nothing is lost to a failed rerun."""
    check_output(path, force=force, flag=flag, what=what, directory=directory)
    p = Path(path) if path is not None and not is_stdout(path) else None
    aside = None
    if p is not None and exists(p) and not (directory and _is_empty_dir(p)):
        aside = p.with_name(f".{p.name}.replaced-{os.getpid()}")
        os.rename(p, aside)
    try:
        yield
    except BaseException:
        if aside is not None:
            if not exists(p) or _is_empty_dir(p):
                with contextlib.suppress(OSError):
                    if exists(p):
                        p.rmdir()
                    os.rename(aside, p)
        raise
    if aside is not None:
        if aside.is_dir() and not aside.is_symlink():
            shutil.rmtree(aside, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                aside.unlink()


def write_json(path: str | os.PathLike[str], payload: Any, *, force: bool, what: str = "--json report",
               flag: str = "--json") -> Path | None:
    """Write a JSON report whole (or to stdout for ``-``); returns the file written, None for stdout."""
    text = json.dumps(payload, indent=1, default=str) + "\n"
    if is_stdout(path):
        typer.echo(text, nl=False)
        return None
    check_output(path, force=force, flag=flag, what=what)
    return write_atomic(path, text, overwrite=force, what=what, hint=f"--force replaces it, or choose another {flag}")


#: What ``--as`` takes: the text report (the default), the JSON report (``--json -``), or the
#: command's table as CSV or as a Markdown table (docs/formats/).
AS_FORMATS = ("text", "json", "csv", "markdown")
#: Help text of ``--as`` (one wording for every command).
AS_HELP = ("print the report as text (default), json (the JSON report, as --json -), or its table as csv "
           "or markdown; nothing else goes to stdout (docs/formats/)")


def json_as(json_out: str | os.PathLike[str] | None, as_: str) -> str:
    """``--json -`` is ``--as json`` (the JSON report alone on stdout); with another ``--as`` than text
    or json it is a usage error (exit 2): stdout holds one of them."""
    if not is_stdout(json_out):
        return as_
    if as_ not in ("text", "json"):
        raise typer.BadParameter(f"--json - and --as {as_} both print to stdout; choose one", param_hint="--json")
    return "json"


def check_as(value: str) -> str:
    """``--as`` validated before anything runs: exit 2 naming the choices (typer's usage error)."""
    if value not in AS_FORMATS:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(AS_FORMATS)}", param_hint="--as")
    return value


def _cell(value: Any) -> str:
    """A cell as text: None and NaN empty, a whole float as an integer (2, not 2.0)."""
    if value is None:
        return ""
    if isinstance(value, float):
        if value != value:  # NaN
            return ""
        if value.is_integer():
            return str(int(value))
    return str(value)


def render_rows(columns: list[str], rows: list[list[Any]], fmt: str) -> str:
    """A table's rows in ``fmt``: ``csv`` (RFC 4180, a header row) or ``markdown`` (a pipe table,
    ``|`` in a cell escaped, a line break in one as ``<br>``). Every row, never truncated."""
    import csv  # noqa: PLC0415
    import io  # noqa: PLC0415

    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(columns)
        w.writerows([[_cell(c) for c in r] for r in rows])
        return buf.getvalue()
    if fmt == "markdown":
        def md(c: Any) -> str:
            return _cell(c).replace("\\", "\\\\").replace("|", "\\|").replace("\n", "<br>")
        lines = ["| " + " | ".join(md(c) for c in columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(md(c) for c in r) + " |" for r in rows]
        return "\n".join(lines) + "\n"
    raise ValueError(f"no table rendering for {fmt!r} (csv or markdown)")


def emit_as(fmt: str, payload: Any, columns: list[str], rows: list[list[Any]]) -> None:
    """Print a result for ``--as json|csv|markdown`` on stdout, alone: the JSON report, or its rows."""
    if fmt == "json":
        typer.echo(json.dumps(payload, indent=1, default=str))
    else:
        typer.echo(render_rows(columns, rows, fmt), nl=False)
