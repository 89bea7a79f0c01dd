"""Where an instrument file came from, read from the file itself: host, wall-clock base, program.

Pure file -> dict readers, one per format that records such facts outside its event rows (the
rows' own pids and times are read by the format's reader; :mod:`forensics.judge.runs` combines
both). Every function reads a bounded part of the file and returns ``{}`` when the format records
nothing of the kind; none raises on a file its own reader accepted (a fact that cannot be read is
a fact not recorded, said by its absence).

Keys (each optional):

* ``host``: the host name the tool recorded;
* ``wall_base_ns``: UTC epoch ns that the file's event timestamps count from (nsys: the session
  start, ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``);
* ``wall_first``/``wall_last``: wall-clock text as the tool printed it, and ``clock``: ``utc`` or
  ``local`` (a local time with no zone: comparable only within a day);
* ``program``: the executable or command the tool ran; ``pids``: process ids it names;
* ``source``: which table or column each fact came from, in words.
"""
from __future__ import annotations

import csv
import datetime as _dt
import io
import re
import sqlite3
from contextlib import closing
from os import PathLike
from pathlib import Path
from typing import Any

#: Most bytes of a CSV export read for its per-row process columns (the first rows say it).
CSV_HEAD_BYTES = 1 << 20
#: Most rows of a small metadata table read (PROCESSES of a long job can hold thousands).
MAX_META_ROWS = 10_000

_TIME_FORMATS = ("%Y-%m-%d %H:%M:%S", "%Y-%b-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S")


def parse_wall(text: Any) -> int | None:
    """Epoch ns of a wall-clock text as instruments print it (``2023-04-07 04:57:13`` in cuBLASLt
    and hipBLASLt logs, ``2021-May-03 18:27:49`` in ncu's ``Kernel Time``), read as if UTC (the
    caller knows whether the zone was recorded); None when it is not such a text."""
    if not isinstance(text, str):
        return None
    s = text.strip()[:32]
    for fmt in _TIME_FORMATS:
        try:
            t = _dt.datetime.strptime(s, fmt).replace(tzinfo=_dt.timezone.utc)
        except ValueError:
            continue
        return int(t.timestamp()) * 1_000_000_000
    return None


def _ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _text(v: Any) -> str | None:
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    return v.strip() if isinstance(v, str) and v.strip() else None


def nsys(path: str | PathLike[str]) -> dict[str, Any]:
    """An nsys SQLite export: session start (UTC), host name, the launched command, process ids."""
    out: dict[str, Any] = {}
    src: list[str] = []
    try:
        with closing(_ro(Path(path))) as conn:
            tables = _tables(conn)
            if "TARGET_INFO_SESSION_START_TIME" in tables:
                row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1").fetchone()
                if row and isinstance(row[0], int) and row[0] > 0:
                    out["wall_base_ns"] = int(row[0])
                    src.append("session start: TARGET_INFO_SESSION_START_TIME")
            if "TARGET_INFO_SYSTEM_ENV" in tables:
                row = conn.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' LIMIT 1").fetchone()
                if row and _text(row[0]):
                    out["host"] = _text(row[0])
                    src.append("host: TARGET_INFO_SYSTEM_ENV")
            for meta in ("META_DATA_CAPTURE", "EXPORT_META_DATA"):
                if meta not in tables:
                    continue
                rows = conn.execute(f"SELECT name, value FROM {meta} WHERE name LIKE 'PROCESS_0:%' "
                                    f"LIMIT {MAX_META_ROWS}").fetchall()
                kv = {str(k): _text(v) for k, v in rows}
                if kv.get("PROCESS_0:COMMAND"):
                    args = [kv[k] for k in sorted((k for k in kv if k.startswith("PROCESS_0:ARGUMENT_")),
                                                  key=lambda k: int(k.rsplit("_", 1)[1]) if k.rsplit("_", 1)[1].isdigit() else 0)
                            if kv[k]]
                    out["program"] = " ".join([kv["PROCESS_0:COMMAND"], *args])
                    src.append(f"command: {meta}")
                    break
            if "PROCESSES" in tables:
                rows = conn.execute(f"SELECT pid, name FROM PROCESSES LIMIT {MAX_META_ROWS}").fetchall()
                out["processes"] = {int(p): _text(n) for p, n in rows if isinstance(p, int)}
    except (sqlite3.DatabaseError, OverflowError, ValueError):
        return out
    if src:
        out["source"] = "; ".join(src)
    return out


def ncu_csv(path: str | PathLike[str]) -> dict[str, Any]:
    """An ncu CSV export (raw or details): host, process name and pids, first and last Kernel Time
    (local time, no zone), from its per-row columns within the first :data:`CSV_HEAD_BYTES`."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(CSV_HEAD_BYTES)
    except OSError:
        return {}
    text = head.decode("utf-8", "replace")
    if len(head) == CSV_HEAD_BYTES:
        text = text[: text.rfind("\n") + 1]
    rows = csv.DictReader(io.StringIO(text))
    hosts, programs, pids, times = set(), set(), set(), []
    try:
        for row in rows:
            if not isinstance(row, dict):
                continue
            if _text(row.get("Host Name")):
                hosts.add(row["Host Name"].strip())
            if _text(row.get("Process Name")):
                programs.add(row["Process Name"].strip())
            pid = (row.get("Process ID") or "").strip()
            if pid.isdigit():
                pids.add(int(pid))
            t = parse_wall(row.get("Kernel Time"))
            if t is not None:
                times.append(t)
    except csv.Error:
        pass
    out: dict[str, Any] = {}
    if len(hosts) == 1:
        out["host"] = next(iter(hosts))
    if len(programs) == 1:
        out["program"] = next(iter(programs))
    if pids:
        out["pids"] = sorted(pids)
    if times:
        out.update(wall_first_ns=min(times), wall_last_ns=max(times), clock="local")
    if out:
        out["source"] = "the export's Process ID, Process Name, Host Name and Kernel Time columns"
    return out


#: Host names that say nothing about which machine ran (ncu records 127.0.0.1 for a local target).
LOOPBACK = re.compile(r"^(127\.\d+\.\d+\.\d+|::1|localhost|localhost\.localdomain|Local \(CLI\))$", re.I)
