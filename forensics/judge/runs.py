"""Which instrument files saw one run: provenance read from each file, duplicates, runs, ties.

Two instruments that agree on a kernel name it only when their files saw **one run of one
program**. Counting alone cannot tell: the same file copied under two names doubles every count,
two nsys exports of two runs sum into one count, and a library log of another program agrees with
a trace whenever the two programs ran the same GEMM. So, before anything is counted:

1. **Provenance per file** (:class:`Provenance`), read from the file itself: its content digest
   (SHA-256) and size, the process ids its rows name, the host, the program or command, and the
   first and last wall-clock time where the format has one (nsys: the session start plus its
   timestamps; Kineto: ``baseTimeNanoseconds`` plus ``ts``, or the epoch microseconds of older
   traces; cuBLASLt and hipBLASLt logs: each line's local time; ncu CSV: ``Kernel Time``).
2. **Duplicates**: byte-identical files of one arm and rank are read once; the others are named
   as duplicates and counted nowhere.
3. **Ties** between two files (:func:`tie`), strongest first: the capture's manifest (a capture
   written by ``forensics kernel``, or a ``manifest.yaml`` that lists its files: its author states
   they belong together); else a process id both files name, recorded in overlapping wall-clock
   windows. Two files are **separate** runs when their hosts differ or their wall-clock windows are
   disjoint (a local time with no zone is allowed 14 hours either way). Anything else is
   **unknown**: nothing shows they are one run, nothing shows they are not.
4. **Runs** (:func:`group_runs`): in a folder without a manifest, the files of one arm and rank
   are grouped into runs: tied files are one run; a group is joined to another only when they
   hold no instrument in common (one instrument's two files that nothing ties are two runs: never
   summed), no pair of their files is separate, and no two members of one family name disjoint
   process ids (different processes: neither stands for the other). Two members of one family in one run (an
   ``.ncu-rep`` and its CSV export) stay one source: one is counted, the other said not counted,
   with whether anything ties the two. A folder holding several runs is judged run by
   run: each run is an arm of its own (``a1-run1``, ``a1-run2``).
5. **NAMED needs a tie** (:class:`TieBook`): two families that agree on a kernel's identity and
   count name it only when every file counted on one side is tied to every file counted on the
   other. Otherwise the row reads ``AGREE-UNTIED`` (forensics.core.words) and says which tie is
   missing.

This module reads frames the instrument readers already built (and a bounded header of a few
formats through :mod:`parsers.provenance`); it decides nothing about kernels.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from forensics import instruments as reg

TIED, SEPARATE, UNKNOWN = "tied", "separate", "unknown"
#: A wall clock printed without a zone (cuBLASLt, hipBLASLt, ncu's Kernel Time) is compared with
#: a UTC clock only within this much either way.
LOCAL_TOLERANCE_NS = 14 * 3600 * 1_000_000_000
#: Slack added to every window comparison (a log's times are whole seconds; tools start apart).
SLACK_NS = 120 * 1_000_000_000
#: Epoch ns after 2001-09-09: a Kineto timestamp this large is wall-clock time (pre-2023 traces).
EPOCH_NS_FLOOR = 1_000_000_000 * 1_000_000_000
#: Notes on byte-identical files across arms or ranks (the rest counted in one line).
MAX_ACROSS_NOTES = 8
#: Most process ids listed per file in reports (all of them count in ties).
MAX_PIDS_SHOWN = 8
_CHUNK = 8 << 20


def _digest(path: Path) -> tuple[str | None, int | None]:
    try:
        h = hashlib.sha256()
        size = 0
        with open(path, "rb") as fh:
            while True:
                block = fh.read(_CHUNK)
                if not block:
                    break
                size += len(block)
                h.update(block)
        return h.hexdigest(), size
    except OSError:
        return None, None


def _utc(ns: int | None) -> str | None:
    if ns is None:
        return None
    try:
        return _dt.datetime.fromtimestamp(ns / 1e9, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return None


@dataclass
class Provenance:
    """Where one instrument file came from, as far as the file itself says."""

    path: str
    instrument: str
    family: str | None
    arm: str
    rank: int | None
    rows: int = 0  # launches or calls read from it
    sha256: str | None = None
    size: int | None = None
    pids: list[int] = field(default_factory=list)
    #: device ids its launches ran on (CUPTI family, ncu), as the instrument numbers them
    devices: list[int] = field(default_factory=list)
    host: str | None = None
    program: str | None = None
    #: first and last wall-clock time (epoch ns) of its rows; ``clock``: utc, or local (no zone recorded)
    first_ns: int | None = None
    last_ns: int | None = None
    clock: str | None = None
    #: where each fact came from, in words
    sources: list[str] = field(default_factory=list)
    #: what the format does not record (said, so that an absent tie is explained)
    lacks: list[str] = field(default_factory=list)
    duplicate_of: str | None = None
    run: str | None = None

    @property
    def name(self) -> str:
        return Path(self.path).name

    def when(self) -> str:
        """The wall-clock window in words ("2024-01-16 23:00:34 .. 23:00:35 UTC"), or "no wall-clock time"."""
        if self.first_ns is None:
            return "no wall-clock time"
        a, b = _utc(self.first_ns), _utc(self.last_ns)
        zone = "UTC" if self.clock == "utc" else "local time, zone not recorded"
        if b is None or a == b:
            return f"{a} ({zone})"
        same_day = a[:10] == b[:10]
        return f"{a} .. {b[11:] if same_day else b} ({zone})"

    def summary(self) -> str:
        """One line: instrument, pids, host, program, time, digest."""
        pids = ", ".join(map(str, self.pids[:MAX_PIDS_SHOWN])) + (
            f" and {len(self.pids) - MAX_PIDS_SHOWN} more" if len(self.pids) > MAX_PIDS_SHOWN else "")
        parts = [f"{self.instrument}", f"{self.rows} row(s)", f"pid {pids}" if self.pids else "no pid recorded"]
        if self.host:
            parts.append(f"host {self.host}")
        if self.program:
            parts.append(f"program {self.program[:80]}")
        parts.append(self.when())
        if self.sha256:
            parts.append(f"sha256 {self.sha256[:12]}")
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["first_utc"], d["last_utc"] = _utc(self.first_ns), _utc(self.last_ns)
        return d


# --------------------------------------------------------------------------- reading provenance
def _times(values: Any) -> tuple[int | None, int | None]:
    s = pd.to_numeric(pd.Series(values), errors="coerce").dropna() if values is not None else pd.Series(dtype=float)
    if not len(s):
        return None, None
    return int(s.min()), int(s.max())


def _host(text: Any) -> str | None:
    from parsers.provenance import LOOPBACK  # noqa: PLC0415

    if not isinstance(text, str) or not text.strip() or LOOPBACK.match(text.strip()):
        return None
    return text.strip()


def read_provenance(path: Path, instrument: str, df: pd.DataFrame | None, arm: str, rank: int | None,
                    name_pid: int | None = None, digest: tuple[str | None, int | None] | None = None) -> Provenance:
    """Provenance of one instrument file from the frame its reader returned (and, for nsys exports
    and ncu CSV exports, their own header tables or columns)."""
    from parsers import provenance as fmt  # noqa: PLC0415

    inst = reg.get(instrument)
    sha, size = digest if digest is not None else _digest(path)
    p = Provenance(str(path), instrument, reg.family_of(instrument), arm, rank, rows=len(df) if df is not None else 0,
                   sha256=sha, size=size)
    pids: set[int] = set()
    if df is not None and "pid" in df.columns:
        pids |= {int(x) for x in pd.to_numeric(df["pid"], errors="coerce").dropna().unique()}
    if name_pid is not None:
        pids.add(int(name_pid))
        p.sources.append("pid: the file's name")
    elif pids:
        p.sources.append("pids: its rows")
    header: dict[str, Any] = {}
    if instrument == "nsys":
        header = fmt.nsys(path)
    elif instrument == "ncu_csv":
        header = fmt.ncu_csv(path)
        pids |= set(header.get("pids") or [])
    p.pids = sorted(pids)
    if df is not None and "device_id" in df.columns:
        p.devices = sorted({int(x) for x in pd.to_numeric(df["device_id"], errors="coerce").dropna().unique()})[:64]
    p.host = _host(header.get("host"))
    p.program = header.get("program")
    if header.get("source"):
        p.sources.append(header["source"])
    attrs = df.attrs if df is not None else {}
    base = header.get("wall_base_ns") or attrs.get("wall_base_ns")
    if df is not None and inst is not None and inst.role == reg.LAUNCHES and "start_ns" in df.columns and len(df):
        lo, _ = _times(df["start_ns"])
        _, hi = _times(df["end_ns"] if "end_ns" in df.columns and df["end_ns"].notna().any() else df["start_ns"])
        if lo is not None and base:
            p.first_ns, p.last_ns, p.clock = base + lo, base + (hi if hi is not None else lo), "utc"
            p.sources.append("time: the file's base time plus its event timestamps")
        elif lo is not None and instrument == "kineto" and lo >= EPOCH_NS_FLOOR:
            p.first_ns, p.last_ns, p.clock = lo, hi if hi is not None else lo, "utc"
            p.sources.append("time: the trace's epoch timestamps")
    if p.first_ns is None and header.get("wall_first_ns"):
        p.first_ns, p.last_ns, p.clock = header["wall_first_ns"], header["wall_last_ns"], header.get("clock", "local")
    if p.first_ns is None and df is not None and "timestamp" in df.columns and len(df):
        walls = [t for t in (fmt.parse_wall(x) for x in df["timestamp"].dropna().unique()[:100_000]) if t is not None]
        if walls:
            p.first_ns, p.last_ns, p.clock = min(walls), max(walls), "local"
            p.sources.append("time: each line's printed time")
    if not p.pids:
        p.lacks.append("no process id")
    if p.first_ns is None:
        p.lacks.append("no wall-clock time")
    return p


# --------------------------------------------------------------------------- duplicates
def duplicates(files: list[Any], arm_of: Any, across: bool = True) -> tuple[dict[str, str], list[str],
                                                                            dict[str, tuple[str, int]]]:
    """Byte-identical files: ``(skip, notes, digests)``. ``skip`` maps a duplicate's path to the first
    file of the same arm and rank with its bytes (read once, counted once); with ``across``, a copy in
    another arm or rank is a note (two arms or ranks that hold one file are not two runs; at most
    :data:`MAX_ACROSS_NOTES` such notes, then a count). ``digests``: path -> (sha256, size) of every
    file hashed (files with a size no other file has are not hashed here)."""
    sizes: dict[int, list[Any]] = {}
    for f in files:
        try:
            sizes.setdefault(os.stat(f.path).st_size, []).append(f)
        except OSError:
            continue
    skip: dict[str, str] = {}
    notes: list[str] = []
    digests: dict[str, tuple[str, int]] = {}
    crossed = 0
    for size, group in sizes.items():
        if len(group) < 2 or size == 0:
            continue
        first: dict[str, Any] = {}
        for f in group:
            sha, n = _digest(Path(f.path))
            if sha is None:
                continue
            digests[str(f.path)] = (sha, n)
            if sha not in first:
                first[sha] = f
                continue
            orig = first[sha]
            if (arm_of(orig.arm), orig.rank) == (arm_of(f.arm), f.rank):
                skip[str(f.path)] = str(orig.path)
                notes.append(f"{f.path}: byte-identical to {orig.path} (sha256 {sha[:12]}, {n} bytes): a duplicate, "
                             "read once and counted once")
            elif across:
                crossed += 1
                if crossed <= MAX_ACROSS_NOTES:
                    notes.append(f"{f.path}: byte-identical to {orig.path} of arm {arm_of(orig.arm)} rank {orig.rank} "
                                 f"(sha256 {sha[:12]}): two arms or ranks holding one file are not two runs")
    if crossed > MAX_ACROSS_NOTES:
        notes.append(f"{crossed - MAX_ACROSS_NOTES} more files byte-identical to a file of another arm or rank "
                     "(analysis.json: provenance[].sha256)")
    return skip, notes, digests


# --------------------------------------------------------------------------- ties
def tie(a: Provenance, b: Provenance) -> tuple[str, str]:
    """``(TIED | SEPARATE | UNKNOWN, why)`` for two files read without a manifest that ties them."""
    if a.host and b.host and a.host.lower() != b.host.lower():
        return SEPARATE, f"recorded on different hosts ({a.host}, {b.host})"
    timed = a.first_ns is not None and b.first_ns is not None
    if timed:
        tol = SLACK_NS + (LOCAL_TOLERANCE_NS if "local" in (a.clock, b.clock) else 0)
        if a.last_ns + tol < b.first_ns or b.last_ns + tol < a.first_ns:
            return SEPARATE, f"recorded at different times ({a.name}: {a.when()}; {b.name}: {b.when()})"
    shared = sorted(set(a.pids) & set(b.pids))
    if shared and timed:
        return TIED, f"pid {shared[0]} in both, recorded in overlapping time ({a.when()})"
    if not a.pids or not b.pids:
        who = a if not a.pids else b
        return UNKNOWN, f"{who.name} ({who.instrument}) records no process id"
    if not shared:
        return UNKNOWN, (f"no process id in common ({a.name}: {', '.join(map(str, a.pids[:3]))}; "
                         f"{b.name}: {', '.join(map(str, b.pids[:3]))})")
    who = a if a.first_ns is None else b
    return UNKNOWN, (f"pid {shared[0]} in both, but {who.name} ({who.instrument}) records no wall-clock time "
                     "(process ids are reused across runs)")


def manifest_tied(cap: Any) -> bool:
    """Whether the capture's manifest ties the files of each arm (a capture written by ``forensics
    kernel`` or a device campaign, or a manifest that lists its files)."""
    m = cap.manifest if isinstance(cap.manifest, dict) else {}
    return bool(m.get("arms") or m.get("files")) and not m.get("single_file")


def group_runs(provs: list[Provenance]) -> list[list[Provenance]]:
    """Runs of the files of one arm and rank of a folder without a manifest (module text, step 4)."""
    n = len(provs)
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    state: dict[tuple[int, int], str] = {}
    for i in range(n):
        for j in range(i + 1, n):
            s, _ = tie(provs[i], provs[j])
            state[(i, j)] = s
            if s == TIED:
                parent[find(j)] = find(i)
    comps: dict[int, list[int]] = {}
    for i in range(n):
        comps.setdefault(find(i), []).append(i)
    groups = sorted(comps.values(), key=lambda g: min(g))
    merged: list[list[int]] = []
    for g in groups:
        insts = {provs[i].instrument for i in g}
        for m in merged:
            if insts & {provs[i].instrument for i in m}:  # one instrument, two files, no tie: two runs
                continue
            if any(state.get((min(i, j), max(i, j))) == SEPARATE for i in g for j in m):
                continue
            if any(_other_process(provs[i], provs[j]) for i in g for j in m):
                continue
            m.extend(g)
            break
        else:
            merged.append(list(g))
    return [[provs[i] for i in sorted(g)] for g in merged]


def same_source(run: list[Provenance]) -> dict[str, str]:
    """Within one run, files of one instrument tied by a process id in overlapping time record the same
    events (a trace and its uncompressed copy, a log and its longer copy): ``later path -> first path``;
    the later is read and shown, not counted."""
    out: dict[str, str] = {}
    for i, a in enumerate(run):
        if a.path in out:
            continue
        for b in run[i + 1:]:
            if b.path not in out and b.instrument == a.instrument and tie(a, b)[0] == TIED:
                out[b.path] = a.path
    return out


def _other_process(a: Provenance, b: Provenance) -> bool:
    """Two members of one family whose process ids are known and disjoint: they recorded different
    processes, so neither can stand for the other as one source."""
    return a.family == b.family and bool(a.pids) and bool(b.pids) and not set(a.pids) & set(b.pids)


def assign_runs(provs: list[Provenance]) -> tuple[dict[str, str], list[str], dict[str, str]]:
    """Run names per file (``path -> arm``) for a folder without a manifest, one note per run when an
    arm and rank holds more than one, and the files one run recorded twice (:func:`same_source`)."""
    by_group: dict[tuple[str, Any], list[Provenance]] = {}
    for p in provs:
        by_group.setdefault((p.arm, p.rank), []).append(p)
    names: dict[str, str] = {}
    notes: list[str] = []
    twice: dict[str, str] = {}
    for (arm, rank), group in by_group.items():
        runs = group_runs(group)
        for run in runs:
            for later, first in same_source(run).items():
                twice[later] = first
                notes.append(f"{later}: the same process as {first} ({tie(self_of(run, later), self_of(run, first))[1]}), "
                             f"recorded by the same instrument: read, not counted (one source, never two)")
        if len(runs) < 2:
            for p in group:
                p.run = arm
            continue
        runs.sort(key=lambda r: (min((p.first_ns for p in r if p.first_ns is not None), default=1 << 62),
                                 min(p.path for p in r)))
        notes.append(f"arm {arm} rank {rank} holds {len(runs)} different runs, by what its files record (process "
                     "ids, wall-clock times, hosts: docs/verdicts.md, \"Same run\"): each run is judged as an arm of "
                     "its own, and no count is summed across them")
        for k, run in enumerate(runs, 1):
            label = f"{arm}-run{k}"
            for p in run:
                p.run = label
                names[p.path] = label
            notes.append(f"{label}: " + "; ".join(f"{p.name} ({p.instrument}, {p.when()}, "
                                                  f"{'pid ' + str(p.pids[0]) if p.pids else 'no pid'})" for p in run))
    return names, notes, twice


def self_of(run: list[Provenance], path: str) -> Provenance:
    return next(p for p in run if p.path == path)


class TieBook:
    """Which files each (arm, rank, family) counted, and whether two families' files are tied."""

    def __init__(self, cap: Any, provs: list[Provenance], launches: pd.DataFrame, calls: pd.DataFrame):
        self.by_manifest = manifest_tied(cap)
        self.prov = {p.path: p for p in provs}
        self._seen: dict[tuple, tuple[str, str]] = {}
        self.files: dict[tuple[Any, Any, str], set[str]] = {}
        for df in (launches, calls):
            if df is None or not len(df) or "file" not in df.columns or "family" not in df.columns:
                continue
            for (arm, rank, fam), g in df.groupby(["arm", "rank", "family"], dropna=False, sort=False):
                self.files.setdefault((arm, rank, fam), set()).update(str(x) for x in g["file"].dropna().unique())

    def check(self, arm: Any, rank: Any, families: list[str]) -> tuple[str, str]:
        """``(TIED | SEPARATE | UNKNOWN, why)`` for the files of ``families`` in one arm and rank (once per
        arm, rank and families: every verdict row of a scope asks the same)."""
        if self.by_manifest:
            return TIED, f"the capture's manifest ties arm {arm}'s files"
        key = (arm, rank, tuple(families))
        if key not in self._seen:
            self._seen[key] = self._check(arm, rank, families)
        return self._seen[key]

    def _check(self, arm: Any, rank: Any, families: list[str]) -> tuple[str, str]:
        worst, why = TIED, ""
        for i, fa in enumerate(families):
            for fb in families[i + 1:]:
                for a in sorted(self.files.get((arm, rank, fa), ())):
                    for b in sorted(self.files.get((arm, rank, fb), ())):
                        pa, pb = self.prov.get(a), self.prov.get(b)
                        if pa is None or pb is None:
                            s, w = UNKNOWN, f"no provenance read for {Path(a).name if pa is None else Path(b).name}"
                        else:
                            s, w = tie(pa, pb)
                        if s != TIED and worst == TIED:
                            worst, why = s, f"{Path(a).name} and {Path(b).name}: {w}"
                        elif s == TIED and worst == TIED and not why:
                            why = w
        return worst, why


# --------------------------------------------------------------------------- every call and launch, by pid
def pid_lines(launches: pd.DataFrame, calls: pd.DataFrame) -> list[str]:
    """One line per library log and process whose calls no launch counter of the same arm and rank
    traced: ``cuBLASLt log x.log: 1 call(s) in pid 557785, no launch traced for that pid (launches
    traced in pid 1234)``; and per log whose calls carry no pid while launches do."""
    out: list[str] = []
    if calls is None or not len(calls) or "file" not in calls.columns:
        return out
    for (arm, rank), cg in calls.groupby(["arm", "rank"], dropna=False, sort=False):
        lg = launches[(launches["arm"] == arm) & (launches["rank"].eq(rank) if pd.notna(rank) else launches["rank"].isna())] \
            if len(launches) else launches
        lpids = sorted({int(x) for x in pd.to_numeric(lg.get("pid", pd.Series(dtype=float)), errors="coerce").dropna()}) \
            if len(lg) else []
        traced = f"launches traced in pid {', '.join(map(str, lpids[:4]))}" if lpids else "no launch carries a pid"
        for (inst, file), fg in cg.groupby(["instrument", "file"], dropna=False, sort=False):
            label = (reg.get(inst).label if reg.get(inst) is not None else inst) or inst
            pids = pd.to_numeric(fg["pid"], errors="coerce") if "pid" in fg.columns else pd.Series(float("nan"), index=fg.index)
            none = int(pids.isna().sum())
            if not len(launches):  # no launch counter anywhere: the missing lines say so once
                continue
            if not len(lg):
                traced = f"no launch counter file in arm {arm} rank {rank}"
            for pid, n in pids.dropna().astype("int64").value_counts(sort=False).items():
                if int(pid) not in lpids:
                    out.append(f"{label} {Path(str(file)).name} (arm {arm}, rank {rank}): {n} call(s) in pid {pid}, "
                               f"no launch traced for that pid ({traced})")
            if none and (lpids or not len(lg)):
                out.append(f"{label} {Path(str(file)).name} (arm {arm}, rank {rank}): {none} call(s) with no pid "
                           f"recorded: which process made them is not known ({traced})")
    return out
