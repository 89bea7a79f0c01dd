"""Outputs that appear whole or not at all, and output directories that one run claims.

Every file a command writes (reports, ``--json``, bundles, manifests) goes through
:func:`write_atomic` or :func:`atomic_output`: the bytes go to a temporary name in the same
directory (``.NAME.tmp-PID-RANDOM``), are flushed and fsync'd, and only then appear under their
real name, by ``link`` (never overwrites: fails when the name exists, even as a dangling
symbolic link) or ``rename`` (only when the caller allows overwriting). A failed write (disk
full, permission, a kill) leaves no partial file under the real name, so a rerun is never
blocked by debris; the temporary file is removed on failure.

:func:`claim_dir` makes an output directory belong to one run: ``mkdir`` is atomic, and an
existing empty directory is claimed by creating a marker file with ``O_EXCL``, so two concurrent
runs given the same ``--out`` never write into one directory.
"""
from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from forensics.core.errors import EXIT_UNAVAILABLE, ForensicsError

#: Name of the marker that claims an existing empty output directory for one run.
CLAIM_MARKER = ".forensics-claim"
#: errno values that mean "the machine cannot take this output" (not bad input, not a bug).
NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS}


class OutputExists(ForensicsError):
    """The output path exists (a file, a directory or a dangling link): forensics never overwrites one."""


class CannotWrite(ForensicsError):
    """An output could not be written (disk full, read-only, permission): nothing partial was left (exit 4)."""

    exit_code = EXIT_UNAVAILABLE

    def __init__(self, path: str | os.PathLike[str], err: OSError):
        self.path = str(path)
        self.errno = err.errno
        why = err.strerror or str(err)
        super().__init__(f"{path}: cannot write: {why}; nothing was written (no partial file left)")


def exists(path: str | os.PathLike[str]) -> bool:
    """True when anything is at ``path``, a dangling symbolic link included."""
    return os.path.lexists(path)


def refuse_existing(path: str | os.PathLike[str], what: str = "output", hint: str = "choose another path") -> None:
    """Raise :class:`OutputExists` when ``path`` exists (dangling links too)."""
    if exists(path):
        kind = "a dangling symbolic link" if os.path.islink(path) and not os.path.exists(path) else \
            ("a directory" if os.path.isdir(path) else "a file")
        raise OutputExists(f"{path} exists ({kind}); forensics never overwrites a {what} ({hint})")


def _tmp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _publish(tmp: Path, path: Path, overwrite: bool) -> None:
    if overwrite:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)  # atomic and never overwrites (EEXIST even for a dangling link)
    except FileExistsError:
        raise
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
            raise
        # A filesystem without hard links: check, then rename (a small window, documented).
        if exists(path):
            raise FileExistsError(errno.EEXIST, "File exists", str(path)) from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], mode: str = "wb", overwrite: bool = False,
                  what: str = "output", file_mode: int = 0o644, hint: str = "choose another path",
                  **open_kwargs: Any) -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path``; on success it appears as ``path``, on failure it is removed.

    ``overwrite=False`` (the default) refuses an existing ``path`` before writing and again at
    the end (a racing writer loses with :class:`OutputExists`, never overwrites).
    """
    if "w" not in mode:
        raise ValueError("atomic_output writes: mode must contain 'w'")
    path = Path(path)
    if not overwrite:
        refuse_existing(path, what, hint)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CannotWrite(path, e) from None
    tmp = _tmp_name(path)
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, file_mode)
    except OSError as e:
        raise CannotWrite(path, e) from None
    done = False
    try:
        with os.fdopen(fd, mode, **open_kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        try:
            _publish(tmp, path, overwrite)
        except FileExistsError:
            refuse_existing(path, what, hint)
            raise
        done = True
    except OSError as e:
        raise CannotWrite(path, e) from None
    finally:
        if not done:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    _fsync_dir(path.parent)


def write_atomic(path: str | os.PathLike[str], data: bytes | str, overwrite: bool = False,
                 what: str = "output", file_mode: int = 0o644, hint: str = "choose another path") -> Path:
    """Write ``data`` to ``path`` whole or not at all (see the module docstring); returns ``path``."""
    payload = data.encode() if isinstance(data, str) else data
    with atomic_output(path, "wb", overwrite=overwrite, what=what, file_mode=file_mode, hint=hint) as fh:
        fh.write(payload)
    return Path(path)


def claim_dir(path: str | os.PathLike[str]) -> bool:
    """Make ``path`` this run's directory: True when claimed, False when taken.

    Taken means: it exists and is not an empty directory, or another run claimed it first. The
    directory is created when absent; either way it is claimed by creating :data:`CLAIM_MARKER`
    with ``O_EXCL``, so of two concurrent runs exactly one wins. The marker stays (it names the
    claiming process); :func:`release_dir` undoes a claim when the run wrote nothing else.
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # a file (or a link to one) has the name
        return False
    except OSError as e:
        raise CannotWrite(path, e) from None
    if path.is_symlink() or not path.is_dir():
        return False
    try:
        if os.listdir(path):
            return False
        fd = os.open(path / CLAIM_MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:  # another run created its marker first
        return False
    except OSError as e:
        raise CannotWrite(path, e) from None
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(f"claimed by forensics, pid {os.getpid()}\n")
    except OSError as e:  # disk full: no claim left behind (a rerun would take the folder for another run's)
        with contextlib.suppress(OSError):
            os.unlink(path / CLAIM_MARKER)
        raise CannotWrite(path / CLAIM_MARKER, e) from None
    return True


def release_dir(path: str | os.PathLike[str]) -> None:
    """Undo :func:`claim_dir` after a run that wrote nothing: the marker goes (an empty directory is claimable)."""
    with contextlib.suppress(OSError):
        os.unlink(Path(path) / CLAIM_MARKER)


def fresh_dir(base: str | os.PathLike[str]) -> Path:
    """``base`` when this run can claim it, else the first claimable ``base-2``, ``base-3``..."""
    base = Path(base)
    if claim_dir(base):
        return base
    i = 2
    while True:
        cand = base.with_name(f"{base.name}-{i}")
        if claim_dir(cand):
            return cand
        i += 1


def own_dir(path: str | os.PathLike[str], hint: str = "choose another --out") -> Path:
    """Claim ``path`` or refuse: it must be absent or an empty directory no other run claimed."""
    path = Path(path)
    if not claim_dir(path):
        raise OutputExists(f"{path}: exists and is not empty (or another run claimed it); "
                           f"forensics never writes into an earlier output ({hint})")
    return path
