"""Env-knob scope: where a knob is read, written or mentioned, and whether it reaches a site.

``scan(name, paths)`` walks the trees once, scans Python files (:mod:`.python_scan`) and shared
libraries (:mod:`.elf_scan`) in parallel with a per-file cache (:mod:`.cache`), and resolves
wrapper helpers imported from other files of the same trees.
"""
from __future__ import annotations

import multiprocessing
import os
import re
import stat
import sys
import sysconfig
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from forensics.core.errors import BadInput
from forensics.knobs.cache import ResultCache, StatKey
from forensics.knobs.elf_scan import CANNOT_TELL, CONTAINS, UNREADABLE, ElfFileResult, is_shared_library_name, scan_elf_file
from forensics.knobs.python_scan import (
    READ, UNRESOLVED, PyFileResult, digest_bytes, helpers_in_source, scan_python_bytes,
)

KNOB_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SKIP_DIRS = {"__pycache__", ".git", ".hg", ".svn", "node_modules", ".mypy_cache", ".pytest_cache"}
_INLINE_BELOW = 64  # fewer files to scan than this: no worker processes


@dataclass
class StaticScan:
    """The static result for one knob over some trees."""

    name: str
    paths: list[str]
    python: list[PyFileResult] = field(default_factory=list)  # files with at least one finding
    libraries: list[ElfFileResult] = field(default_factory=list)  # contains the name / cannot tell
    counts: dict[str, int] = field(default_factory=dict)  # files scanned, cache hits, ...
    seconds: float = 0.0
    #: every scanned file (for "is this code-path component installed here?"), not reported
    all_python: list[str] = field(default_factory=list, repr=False)
    all_libraries: list[str] = field(default_factory=list, repr=False)
    #: paths that could not be read (directories, files, broken links) and why: never skipped silently
    unreadable: list[tuple[str, str]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when every file and directory under the scanned paths could be read."""
        return not self.unreadable

    def findings(self, kind: str | None = None) -> list[Any]:
        out = [f for r in self.python for f in r.findings]
        return out if kind is None else [f for f in out if f.kind == kind]


def check_knob_name(name: str) -> str:
    """A knob name is an identifier-like environment variable name; raise BadInput otherwise."""
    if not KNOB_NAME.match(name or ""):
        raise BadInput("<command line>", f"{name!r} is not an environment-variable name (letters, digits, '_')")
    return name


def default_paths() -> list[str]:
    """The current interpreter's site-packages: sysconfig purelib/platlib + site dirs on sys.path."""
    found: list[str] = []
    for key in ("purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p:
            found.append(p)
    found += [p for p in sys.path if p and os.path.basename(p.rstrip("/")) in ("site-packages", "dist-packages")]
    out: list[str] = []
    for p in found:
        real = os.path.realpath(p)
        if os.path.isdir(real) and real not in out:
            out.append(real)
    return out


def iter_files(paths: Iterable[str], unreadable: list[tuple[str, str]] | None = None) -> tuple[list[StatKey], list[StatKey]]:
    """(python files, shared-library files) under the paths with their stat keys, each file once.

    Directories that cannot be listed and candidate files that cannot be stat'ed (permissions,
    broken symbolic links) are appended to ``unreadable`` as ``(path, reason)``.
    """
    py: list[StatKey] = []
    so: list[StatKey] = []
    seen: set[tuple[int, int]] = set()
    errors = unreadable if unreadable is not None else []
    for root in paths:
        if not os.path.exists(root):
            raise BadInput(root, "no such file or directory to scan")
        entries = [root] if os.path.isfile(root) else _walk(root, errors)
        for path in entries:
            base = os.path.basename(path)
            is_py = base.endswith((".py", ".pyi"))
            if not is_py and not is_shared_library_name(base):
                continue
            try:
                st = os.stat(path)
            except OSError as e:
                errors.append((path, _reason(e, path)))
                continue
            if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            (py if is_py else so).append(StatKey(path, st.st_size, st.st_mtime_ns))
    return py, so


def _walk(root: str, errors: list[tuple[str, str]]) -> Iterable[str]:
    """Every file under ``root`` (symbolic links to files included, to directories not followed).

    A directory that cannot be listed is recorded in ``errors`` (never skipped silently).
    """
    stack = [root]
    while stack:
        current = stack.pop()
        try:
            with os.scandir(current) as it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name not in _SKIP_DIRS:
                            stack.append(entry.path)
                    else:
                        yield entry.path
        except OSError as e:
            errors.append((current, _reason(e, current)))
            continue


def _reason(err: OSError, path: str) -> str:
    """``Permission denied``, ``broken symbolic link``, ... (one short phrase)."""
    if isinstance(err, FileNotFoundError) and os.path.islink(path):
        return f"broken symbolic link (to {os.readlink(path)})"
    return err.strerror or type(err).__name__


def _py_job(path: str, name: str) -> tuple[str, str | None, dict[str, Any]]:
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as e:
        return path, None, PyFileResult(path, parse_error=f"unreadable: {e.strerror or type(e).__name__}").to_json()
    return path, digest_bytes(data), scan_python_bytes(data, name, path).to_json()


def _so_job(path: str, name: str) -> tuple[str, str | None, dict[str, Any]]:
    result, digest = scan_elf_file(path, name)
    return path, digest, result.to_json()


def _py_batch(paths: list[str], name: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    return [_py_job(p, name) for p in paths]


def _rebased(body: Any, path: str) -> Any:
    """A cached result for this file: results are shared by content, so the one stored may name the
    path of another copy of the same file (another virtualenv's site-packages); it names this one."""
    old = body.get("file") if isinstance(body, dict) else None
    if not isinstance(old, str) or old == path:
        return body

    def swap(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        if isinstance(v, list):
            return [swap(x) for x in v]
        return path if v == old else v

    return swap(body)


def _pool(workers: int) -> ProcessPoolExecutor:
    method = "fork" if "torch" not in sys.modules and sys.platform.startswith("linux") else "spawn"
    return ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context(method))


def scan(name: str, paths: list[str] | None = None, *, use_cache: bool = True, workers: int | None = None) -> StaticScan:
    """Scan every Python file and shared library under ``paths`` (default: site-packages)."""
    check_knob_name(name)
    started = time.perf_counter()
    paths = [os.path.realpath(p) for p in (paths or default_paths())]
    unreadable: list[tuple[str, str]] = []
    py_keys, so_keys = iter_files(paths, unreadable)
    py_files, so_files = [k.path for k in py_keys], [k.path for k in so_keys]
    cache = ResultCache(enabled=use_cache)
    result = StaticScan(name, paths)
    py_json, so_json, rows = {}, {}, []
    misses: dict[str, list[str]] = {"py": [], "so": []}
    keys: dict[str, StatKey] = {}
    for kind, files, store in (("py", py_keys, py_json), ("so", so_keys, so_json)):
        for key in files:
            path = key.path
            keys[path] = key
            hit, body = cache.lookup(key, kind, name)
            if hit:
                store[path] = _rebased(body, path)
            else:
                misses[kind].append(path)
    workers = workers or min(os.cpu_count() or 1, 8)
    todo = len(misses["py"]) + len(misses["so"])
    if todo:
        outputs: list[tuple[str, str, str | None, dict[str, Any]]] = []
        if todo < _INLINE_BELOW or workers <= 1:
            outputs += [("py", *_py_job(p, name)) for p in misses["py"]]
            outputs += [("so", *_so_job(p, name)) for p in misses["so"]]
        else:
            with _pool(workers) as pool:
                # big libraries first so that they do not end the run alone
                libs = sorted(misses["so"], key=lambda p: -keys[p].size)
                so_futs = [pool.submit(_so_job, p, name) for p in libs]
                chunk = max(1, len(misses["py"]) // (workers * 8) or 1)
                py_futs = [pool.submit(_py_batch, misses["py"][i:i + chunk], name) for i in range(0, len(misses["py"]), chunk)]
                outputs += [("so", *f.result()) for f in so_futs]
                outputs += [("py", *item) for f in py_futs for item in f.result()]
        for kind, path, digest, body in outputs:
            (py_json if kind == "py" else so_json)[path] = body
            if digest is not None and path in keys:
                rows.append((keys[path], digest, kind, name, body))
    cache.store(rows)
    cache.close()
    result.python = [PyFileResult.from_json(b) for _, b in sorted(py_json.items()) if b["findings"]]
    result.libraries = [ElfFileResult.from_json(b) for _, b in sorted(so_json.items())
                        if b["verdict"] in (CONTAINS, CANNOT_TELL)]
    for path, body in sorted(py_json.items()):
        if (body.get("parse_error") or "").startswith("unreadable"):
            unreadable.append((path, body["parse_error"].split(": ", 1)[-1]))
    for path, body in sorted(so_json.items()):
        if body["verdict"] == UNREADABLE:
            unreadable.append((path, body.get("error") or "unreadable"))
    result.unreadable = unreadable
    _resolve_imported_helpers(result, paths)
    libs = [ElfFileResult.from_json(b) for b in so_json.values()]
    result.counts = {
        "python_files": len(py_files), "shared_libraries": len(so_files),
        "cache_hits": len(py_files) + len(so_files) - todo, "scanned": todo,
        "libraries_importing_getenv": sum(1 for lib in libs if lib.env_imports),
        "unreadable": len(unreadable),
    }
    bad = {p for p, _ in unreadable}
    result.all_python = [p for p in py_files if p not in bad]
    result.all_libraries = [p for p in so_files if p not in bad]
    result.seconds = time.perf_counter() - started
    return result


def _resolve_imported_helpers(result: StaticScan, roots: list[str]) -> None:
    """Turn "argument to imported function" into a read when that function is a helper."""
    memo: dict[str, dict[str, int]] = {}
    for file_result in result.python:
        for line, callee, module, attr in file_result.imported_calls:
            target = _module_file(module, file_result.file, roots)
            if target is None:
                continue
            if target not in memo:
                try:
                    memo[target] = helpers_in_source(Path(target).read_bytes())
                except OSError:
                    memo[target] = {}
            if attr in memo[target]:
                for f in file_result.findings:
                    if f.line == line and f.kind == UNRESOLVED:
                        f.kind, f.form = READ, "helper call"
                        f.note = f"{callee}() reads its argument from the environment (def at {target}:{memo[target][attr]})"


def _module_file(module: str, importer: str, roots: list[str]) -> str | None:
    """The file of ``module`` (absolute or relative to ``importer``) inside the scanned roots."""
    if not module:
        return None
    level = len(module) - len(module.lstrip("."))
    parts = [p for p in module.lstrip(".").split(".") if p]
    bases = [Path(importer).parent.parents[level - 2] if level >= 2 else Path(importer).parent] if level else [Path(r) for r in roots]
    for base in bases:
        stem = base.joinpath(*parts) if parts else base
        for candidate in (stem.with_suffix(".py") if parts else None, stem / "__init__.py"):
            if candidate is not None and candidate.is_file():
                return str(candidate)
    return None
