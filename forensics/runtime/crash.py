"""Internal errors: one line for the user, the traceback in a file, exit 70 (EX_SOFTWARE).

An exception that is not a :class:`forensics.core.errors.ForensicsError` is a bug in forensics (or
in a library under it), never a finding: the CLI prints one line naming the command, what it
was doing (the innermost :func:`forensics.core.errors.doing` step, else the innermost forensics
frame) and the file that holds the details, and exits :data:`forensics.core.errors.EXIT_INTERNAL`.

Details go to ``$FORENSICS_CRASH_DIR``, else ``$XDG_STATE_HOME/forensics/crashes`` (default
``~/.local/state/forensics/crashes``), else the system temporary directory: never into a
capture or an output the user named. When no file can be written, the traceback follows the
line on stderr: the details are never lost. Command lines in the file are redacted.
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
import secrets
import sys
import tempfile
import traceback
from pathlib import Path

from forensics.core.errors import DOING_ATTR

_OWN_PACKAGES = ("forensics", "parsers", "probes")
MAX_MESSAGE = 240


def crash_dirs() -> list[Path]:
    """Candidate folders for details files, in order of preference."""
    out = []
    if os.environ.get("FORENSICS_CRASH_DIR"):
        out.append(Path(os.environ["FORENSICS_CRASH_DIR"]))
    state = os.environ.get("XDG_STATE_HOME") or (str(Path.home() / ".local" / "state") if Path.home() else "")
    if state:
        out.append(Path(state) / "forensics" / "crashes")
    out.append(Path(tempfile.gettempdir()) / f"forensics-crashes-{os.getuid() if hasattr(os, 'getuid') else 'user'}")
    return out


def innermost_own_frame(exc: BaseException) -> str | None:
    """``parsers/nsys.py:210 in read_kernels``: the deepest frame of forensics' own packages."""
    roots = {}
    for pkg in _OWN_PACKAGES:
        mod = sys.modules.get(pkg)
        if mod is not None and getattr(mod, "__file__", None):
            roots[pkg] = Path(mod.__file__).resolve().parent
    found = None
    for fs in traceback.extract_tb(exc.__traceback__):
        try:
            file = Path(fs.filename).resolve()
        except OSError:
            continue
        for pkg, root in roots.items():
            if file.is_relative_to(root):
                found = f"{pkg}/{file.relative_to(root).as_posix()}:{fs.lineno} in {fs.name}"
    return found


def one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    """Collapse whitespace (newlines included) and cut to ``limit`` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def describe(exc: BaseException) -> str:
    msg = one_line(str(exc))
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def _details(exc: BaseException, command: str, argv: list[str]) -> str:
    from forensics import __version__  # noqa: PLC0415

    try:
        from forensics.core.redact import redact_argv  # noqa: PLC0415

        shown = redact_argv(["forensics", *argv])
    except Exception:  # noqa: BLE001 - the details must be written even if redaction itself is broken
        shown = ["forensics", command, "<arguments withheld: redaction failed>"]
    lines = [
        f"forensics {__version__} internal error in `forensics {command}`",
        f"time: {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}",
        f"command line (redacted): {' '.join(shown)}",
        f"doing: {getattr(exc, DOING_ATTR, None) or '-'}",
        f"python: {sys.version.split()[0]} ({sys.executable}); platform: {platform.platform()}",
        f"cwd: {os.getcwd()}",
        "",
        "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
    ]
    return "\n".join(lines)


def write_details(exc: BaseException, command: str, argv: list[str]) -> tuple[Path | None, str]:
    """Write the details file; returns (path or None, the text written or to be shown)."""
    text = _details(exc, command, argv)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    name = f"forensics-{command or 'cli'}-{stamp}-{os.getpid()}-{secrets.token_hex(3)}.txt"
    for folder in crash_dirs():
        try:
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = folder / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            return path, text
        except OSError:
            continue
    return None, text


def report_internal_error(exc: BaseException, command: str, argv: list[str]) -> str:
    """Write the details and return the one line to print (the traceback appended when no file could be written)."""
    path, text = write_details(exc, command, argv)
    doing = getattr(exc, DOING_ATTR, None)
    where = innermost_own_frame(exc)
    what = f" while {doing}" if doing else ""
    at = f" at {where}" if where else ""
    head = (f"forensics {command or ''}".rstrip() + f": internal error (a bug, not a finding){what}: "
            f"{describe(exc)}{at}; ")
    if path is not None:
        return head + f"traceback written to {path}"
    return head + "could not write a details file; traceback follows\n" + text
