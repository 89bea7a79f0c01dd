"""Per-file result cache for the knob scanners.

Two steps, both in one SQLite file under ``~/.cache/forensics/knobs/`` (or ``$FORENSICS_CACHE_DIR``):
``(path, size, mtime_ns) -> content digest`` and ``(digest, scanner, knob) -> result JSON``.
A file whose stat changed is re-read and re-hashed; identical contents share one result.
Only the parent process touches the database; workers return what it should store.
"""
from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Bump when a scanner's output changes so that stale cached results are ignored.
SCANNER_VERSION = "6"


def cache_dir() -> Path:
    """``$FORENSICS_CACHE_DIR/knobs`` if set, else ``~/.cache/forensics/knobs``."""
    base = os.environ.get("FORENSICS_CACHE_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "forensics"
    return root / "knobs"


@dataclass(frozen=True)
class StatKey:
    """What identifies a file version cheaply: its path, size and modification time."""

    path: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, path: str) -> "StatKey":
        st = os.stat(path)
        return cls(path, st.st_size, st.st_mtime_ns)


class ResultCache:
    """The two-step cache; ``enabled=False`` makes every lookup miss and every store a no-op."""

    def __init__(self, enabled: bool = True, directory: Path | None = None):
        self.enabled = enabled
        self._db: sqlite3.Connection | None = None
        self._digests: dict[tuple[str, int, int], str] = {}
        self._results: dict[tuple[str, str], dict[str, str]] = {}
        if not enabled:
            return
        directory = directory or cache_dir()
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(directory / f"scan-v{SCANNER_VERSION}.sqlite", timeout=30)
            self._db.executescript(
                "CREATE TABLE IF NOT EXISTS stat (path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER, digest TEXT);"
                "CREATE TABLE IF NOT EXISTS result (digest TEXT, scanner TEXT, knob TEXT, body TEXT,"
                " PRIMARY KEY (digest, scanner, knob));"
            )
            for path, size, mtime_ns, digest in self._db.execute("SELECT path, size, mtime_ns, digest FROM stat"):
                self._digests[(path, size, mtime_ns)] = digest
        except (OSError, sqlite3.Error):  # an unwritable cache only costs time
            self.enabled, self._db = False, None

    def lookup(self, key: StatKey, scanner: str, knob: str) -> tuple[bool, Any]:
        """``(hit, result)``; a hit needs both the stat row and the result row."""
        if not self.enabled or self._db is None:
            return False, None
        digest = self._digests.get((key.path, key.size, key.mtime_ns))
        if digest is None:
            return False, None
        table = self._results.get((scanner, knob))
        if table is None:  # one query per (scanner, knob): thousands of files stay cheap
            table = self._results[(scanner, knob)] = dict(self._db.execute(
                "SELECT digest, body FROM result WHERE scanner=? AND knob=?", (scanner, knob)))
        body = table.get(digest)
        return (True, json.loads(body)) if body is not None else (False, None)

    def store(self, rows: list[tuple[StatKey, str, str, str, Any]]) -> None:
        """Store ``(key, digest, scanner, knob, result)`` rows in one transaction."""
        if not self.enabled or self._db is None or not rows:
            return
        try:
            with self._db:
                self._db.executemany(
                    "INSERT OR REPLACE INTO stat VALUES (?, ?, ?, ?)",
                    [(k.path, k.size, k.mtime_ns, d) for k, d, *_ in rows],
                )
                self._db.executemany(
                    "INSERT OR REPLACE INTO result VALUES (?, ?, ?, ?)",
                    [(d, s, n, json.dumps(r)) for _, d, s, n, r in rows],
                )
        except sqlite3.Error:
            pass

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
