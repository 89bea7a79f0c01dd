"""A fingerprint of the program a traced process actually runs (for ``forensics diff``'s
NOT COMPARABLE check): the script's content hash, the git commit and working-tree state it runs
from, and which packages and local source files issued the traced ops.

Pure stdlib; everything here is best effort and bounded (a missing ``git``, an unreadable file or
a slow repository leaves a field out, never breaks the traced program).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

GIT_TIMEOUT_S = 5.0
MAX_SOURCES = 64  # local source files hashed per process
MAX_HASH_BYTES = 64 << 20
_RESUMABLE = 0x20 | 0x80 | 0x200  # CO_GENERATOR | CO_COROUTINE | CO_ASYNC_GENERATOR


def _sha256_file(path: str) -> str | None:
    try:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()
    except OSError:
        return None


def _git(args: list[str], cwd: str) -> bytes | None:
    env = dict(os.environ, GIT_OPTIONAL_LOCKS="0", LC_ALL="C")
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              timeout=GIT_TIMEOUT_S, env=env, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout if proc.returncode == 0 else None


def git_state(directory: str) -> dict[str, Any] | None:
    """``{"commit", "dirty", "diff_sha256"}`` of the git working tree holding ``directory``, or None."""
    top = _git(["rev-parse", "--show-toplevel"], directory)
    if not top:
        return None
    root = top.decode(errors="replace").strip()
    commit = _git(["rev-parse", "HEAD"], root)
    if commit is None:
        return None
    diff = _git(["diff", "HEAD", "--binary", "--no-ext-diff", "--no-color"], root)
    untracked = _git(["ls-files", "--others", "--exclude-standard", "-z"], root)
    state: dict[str, Any] = {"root": root, "commit": commit.decode().strip()}
    if diff is not None:
        h = hashlib.sha256(diff[:MAX_HASH_BYTES])
        for name in sorted((untracked or b"").split(b"\0")):
            if name:  # an untracked file's name and content are part of what runs
                h.update(b"\0untracked\0" + name + b"\0")
                digest = _sha256_file(os.path.join(root, name.decode(errors="replace")))
                h.update((digest or "unreadable").encode())
        state["dirty"] = bool(diff.strip()) or bool(untracked and untracked.strip(b"\0"))
        state["diff_sha256"] = h.hexdigest() if state["dirty"] else None
    return state


def script_path() -> str | None:
    """The script (or ``-m`` module file) this process runs, when it is a file."""
    argv0 = sys.argv[0] if sys.argv else ""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None) or argv0
    if path and path not in ("-c", "-m", "-") and os.path.isfile(path):
        return os.path.abspath(path)
    return None


def program(sources: dict[str, str] | None = None) -> dict[str, Any]:
    """The fingerprint recorded in the trace header."""
    info: dict[str, Any] = {}
    path = script_path()
    info["script"] = path
    info["sha256"] = _sha256_file(path) if path else None
    state = git_state(os.path.dirname(path) if path else os.getcwd())
    if state is not None:
        info["git"] = state
    if sources:
        info["sources"] = dict(sorted(sources.items()))
    return info


class Issuers:
    """Which code issued traced ops: for each op, the first Python frame outside torch, the probes
    and the standard library is its issuer, either an installed package (recorded with its version)
    or a local source file (recorded with its content hash). One dict lookup per frame, one walk
    per calling frame."""

    SKIP = object()

    def __init__(self) -> None:
        import torch  # noqa: PLC0415

        here = Path(__file__).resolve().parent
        roots = [Path(torch.__file__).resolve().parent, here, here.parent / "forensics"]
        for key in ("stdlib", "platstdlib"):
            try:
                roots.append(Path(sysconfig.get_paths()[key]).resolve())
            except (KeyError, OSError):
                pass
        self.skip_roots = tuple(str(r) + os.sep for r in roots)
        self.cache: dict[Any, Any] = {}
        self.packages: set[str] = set()
        self.sources: set[str] = set()
        # the tracer's own frames between an op's dispatch and the code that called the op
        self.own_roots = (str(here) + os.sep, str(Path(torch.__file__).resolve().parent / "_dynamo") + os.sep,
                          str(Path(torch.__file__).resolve().parent / "utils" / "_python_dispatch.py"))
        self.own: dict[Any, bool] = {}
        self.last: Any = None  # the caller frame of the previous op, held until the next op or forget()

    def _classify(self, filename: str, module: Any) -> Any:
        if not filename or filename.startswith("<"):
            return self.SKIP
        try:
            path = os.path.realpath(filename)
        except (OSError, ValueError):
            return self.SKIP
        if path.startswith(self.skip_roots):
            return self.SKIP
        parts = path.split(os.sep)
        if "site-packages" in parts or "dist-packages" in parts:
            top = module.split(".", 1)[0] if isinstance(module, str) and module and module != "__main__" else None
            return ("package", top) if top else self.SKIP
        return ("source", path)

    def note(self, frame: Any) -> None:
        """Record the issuer of the op whose dispatch called from ``frame``.

        Consecutive ops called from one frame (a loop in an optimizer, the autograd engine running
        a whole backward from ``backward()``'s frame) have one issuer: while that frame runs, the
        frames above it are fixed, so the walk is done once. The frame is held (not its id, which
        a later frame may reuse) until another frame calls an op or :meth:`forget`. A generator's
        frame is not cached: resumed from elsewhere, its callers change."""
        own = self.own
        while frame is not None:
            filename = frame.f_code.co_filename
            mine = own.get(filename)
            if mine is None:
                mine = own[filename] = filename.startswith(self.own_roots)
            if not mine:
                break
            frame = frame.f_back
        if frame is None:
            return
        if frame is self.last:
            return
        self.last = None if frame.f_code.co_flags & _RESUMABLE else frame
        cache, skip = self.cache, self.SKIP
        while frame is not None:
            filename = frame.f_code.co_filename  # not the code object: equal code in two files compares equal
            kind = cache.get(filename)
            if kind is None:
                kind = cache[filename] = self._classify(filename, frame.f_globals.get("__name__"))
            if kind is not skip:
                (self.packages if kind[0] == "package" else self.sources).add(kind[1])
                return
            frame = frame.f_back

    def forget(self) -> None:
        """Let go of the held caller frame (its locals) at the end of a traced window."""
        self.last = None

    def package_versions(self) -> dict[str, str | None]:
        """``{top-level module: distribution version}`` of the packages seen (torch excluded)."""
        if not self.packages:
            return {}
        try:
            from importlib import metadata  # noqa: PLC0415

            dists = metadata.packages_distributions()
        except Exception:  # noqa: BLE001
            dists = {}
        out: dict[str, str | None] = {}
        for top in sorted(self.packages):
            version = None
            for dist in dists.get(top, []):
                try:
                    version = metadata.version(dist)
                    break
                except Exception:  # noqa: BLE001
                    continue
            out[top] = version
        return out

    def source_hashes(self, exclude: str | None = None) -> dict[str, str]:
        out: dict[str, str] = {}
        for path in sorted(self.sources):
            if path == exclude:
                continue
            if len(out) >= MAX_SOURCES:
                break
            digest = _sha256_file(path)
            if digest:
                out[_relative(path)] = digest
        return out


def _relative(path: str) -> str:
    """A path relative to the working directory when it is under it (so two checkouts compare)."""
    try:
        return os.path.relpath(path)
    except ValueError:
        return path
