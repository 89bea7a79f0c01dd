"""Offline analysis of a capture: launch counts per instrument and the two-instrument rule.

A kernel is **NAMED** for a scope (one site occurrence ``SITE#N``, or the whole window when there
are no site ranges) only when two *independent* instrument families saw it launched the same
number of times in that scope:

* the CUPTI family (our CUPTI JSONL, Kineto, nsys: one source, never confirming each other),
* Nsight Compute (kernel replay: independent),
* the cuBLASLt / cuBLAS API log (the library's own host-side log: independent). The log names no
  kernel; it confirms a GEMM-looking kernel whose CUPTI-family count equals the number of matmul
  calls the log shows in the same scope.

Otherwise the kernel is **DISAGREE** (two families, different counts: both shown) or
**SINGLE-SOURCE** (one family saw the scope; the missing instrument is named). Counts that agree
name a kernel only when the instruments also agree on *who* ran: every descriptor both carry
(precision, layout, grid and tile against m x n, batch, library; on the CPU the operation and the
problem size) is consistent, else **CONFLICT** naming the fields that disagree
(:func:`forensics.judge.identity.identity_verdict`, docs/verdicts.md).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from forensics.capture.directory import Capture, InstrumentFile, load_capture
from forensics import instruments as reg
from forensics.core.errors import BadInput, doing
from forensics.core.kernel_names import AUXILIARY, describe_kernel, kernel_keys
from forensics.core.model import LAUNCH_COLUMNS, conform, empty_frame
from forensics.core.site import Occurrence, Site, names_gemm, parse_site_or_occurrence, split_label
from forensics.core.words import ANALYSIS_VERDICTS as VERDICTS
from forensics.core.words import AGREE_UNTIED, CONFLICT, DISAGREE, NAMED
from forensics.core.words import SINGLE_SOURCE as SINGLE
from forensics.judge import cpu, runs
from forensics.judge.identity import identity_verdict
WINDOW = "<window>"
#: Family -> what a user reads (from the instrument registry).
FAMILY_LABEL = {name: f.label for name, f in reg.FAMILIES.items()}


@dataclass
class Analysis:
    """Everything ``forensics analyze`` computed; frames are documented in docs/commands/analyze.md."""

    capture: Capture
    site: str | None
    launches: pd.DataFrame
    calls: pd.DataFrame
    sites: pd.DataFrame
    counts: pd.DataFrame
    verdicts: pd.DataFrame
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: What instruments say about the library and device (cuBLASLt's [Info] line: version, SM count),
    #: one dict per line with arm, rank and file: the facts NOT COMPARABLE checks read.
    facts: list[dict[str, Any]] = field(default_factory=list)
    #: What readers say they lost (dropped records, cut or skipped lines), one dict per loss with arm,
    #: rank, instrument, family and file; each also reaches the verdicts of that arm and rank.
    losses: list[dict[str, Any]] = field(default_factory=list)
    #: The ranks analysed (``--ranks``/``--shard``), None for every rank of the capture.
    ranks: list[int] | None = None
    #: Rank groups analysed in worker processes and merged (0: one pass in this process). A merged
    #: analysis keeps verdicts and counts only: its ``launches``/``calls``/``sites`` frames are empty.
    rank_groups: int = 0
    #: Where each counted file came from (forensics.judge.runs.Provenance.to_dict): digest, pids, host,
    #: program, wall-clock window, the run it was judged in, or the file it duplicates.
    provenance: list[dict[str, Any]] = field(default_factory=list)

    @property
    def named(self) -> pd.DataFrame:
        return self.verdicts[self.verdicts["verdict"] == NAMED]

    def any_named(self) -> bool:
        return bool(len(self.named))

    def to_json(self) -> dict[str, Any]:
        def rows(df: pd.DataFrame) -> list[dict[str, Any]]:
            return json.loads(df.to_json(orient="records", default_handler=str)) if len(df) else []

        return {
            "capture": str(self.capture.manifest.get("single_file") or self.capture.root),
            "manifest_sha256": manifest_digest(self.capture.root),
            "site": self.site,
            "ranks": self.ranks,
            "rank_groups": self.rank_groups,
            "arms": self.capture.arms,
            "instruments": sorted(self.capture.instruments()),
            "missing": self.missing,
            "notes": self.notes,
            "facts": self.facts,
            "losses": self.losses,
            "provenance": self.provenance,
            "verdicts": rows(self.verdicts),
            "counts": rows(self.counts),
            "files": [
                {"instrument": f.instrument, "path": str(f.path), "arm": f.arm, "run": f.run, "rank": f.rank, "pid": f.pid,
                 "recognised_by": self.capture.recognised.get(str(f.path))}
                for f in self.capture.files
            ],
            # every other file found: the capture's own metadata, or "not recognised: why"
            "not_read": list(self.capture.unread),
        }


def manifest_digest(root: Path) -> str | None:
    """SHA-256 of the capture's manifest.yaml (how a merge step knows shards analysed one capture)."""
    import hashlib  # noqa: PLC0415

    try:
        return hashlib.sha256((Path(root) / "manifest.yaml").read_bytes()).hexdigest()
    except OSError:
        return None


# --------------------------------------------------------------------------- loading
def _read(f: InstrumentFile, sites: pd.DataFrame) -> tuple[reg.Instrument | None, pd.DataFrame | None]:
    """The frame of one counted instrument file (registry reader), or (None, None) for other files.

    Launch frames get ``site_label`` from the site records' CUPTI external ids where the reader
    gave none (CUPTI JSONL); nsys and ncu label launches from their own NVTX ranges.
    """
    inst = reg.get(f.instrument)
    if inst is None or inst.role not in (reg.LAUNCHES, reg.CALLS) or not inst.reader:
        return None, None
    df = inst.read(f.path)
    if inst.role == reg.LAUNCHES and len(df) and len(sites) and "external_id" in df.columns:
        ids = sites.dropna(subset=["external_id"])
        if len(ids):
            label_of = dict(zip(ids["external_id"].astype("int64"), ids["label"]))
            by_id = df["external_id"].map(lambda e: label_of.get(int(e)) if pd.notna(e) else None)
            have = df["site_label"] if "site_label" in df.columns else pd.Series(pd.NA, index=df.index)
            df["site_label"] = have.where(have.notna(), by_id)
    return inst, df


def _sites_of(cap: Capture, losses: list[dict[str, Any]] | None = None) -> pd.DataFrame:
    from parsers import sites_jsonl

    frames = []
    for f in cap.of("sites"):
        with doing(f"reading {f.path} (sites)"):
            df = sites_jsonl.read_sites(f.path)
        if losses is not None:
            losses.extend({"arm": cap.arm_of(f.arm), "rank": f.rank, "instrument": "sites", "family": None,
                           "file": str(f.path), "loss": text} for text in df.attrs.get("losses") or [])
        df = df.assign(folder=f.arm, arm=cap.arm_of(f.arm), rank=f.rank if f.rank is not None else df.get("rank"))
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["folder", "arm", "rank", "label", "site", "occurrence", "external_id", "pid"])


def _pid_ranks(sites: pd.DataFrame) -> dict[tuple[str, int], set[int]]:
    """(folder, pid) -> the ranks whose site probes recorded that pid (more than one: pids reused
    across nodes, which a multi-node job's containers do)."""
    if not len(sites) or "pid" not in sites:
        return {}
    known = sites.dropna(subset=["pid"])
    out: dict[tuple[str, int], set[int]] = {}
    for fo, p, r in zip(known["folder"], known["pid"], known["rank"]):
        if pd.notna(r):
            out.setdefault((fo, int(p)), set()).add(int(r))
    return out


def _rank_known(cap: Capture, f: InstrumentFile) -> bool:
    """Whether the file's rank is stated by where it lies (a ``rank<R>/`` folder) or by the manifest;
    otherwise (a flat per-process log such as ``cublaslt.<pid>.log``) the rank comes from its pid."""
    if cap.manifest.get("files"):
        return f.rank is not None
    try:
        parts = f.path.relative_to(cap.root / f.arm).parts[:-1]
    except ValueError:
        return f.rank is not None
    return any(_RANK_PART.match(part) for part in parts)


_RANK_PART = re.compile(r"^rank[-_]?(\d+)$")


def file_rank(cap: Capture, f: InstrumentFile, pid_rank: dict[tuple[str, int], set[int]],
              notes: list[str] | None = None) -> int | None:
    """The rank a file counts for: its folder's (or the manifest's); for a flat per-process file the
    rank whose site probe recorded the file's pid in the same folder, unless several did (then the
    folder's default, and a note says why)."""
    if f.pid is None or _rank_known(cap, f):
        return f.rank
    ranks = pid_rank.get((f.arm, f.pid))
    if not ranks:
        return f.rank
    if len(ranks) > 1:
        if notes is not None:
            notes.append(f"{f.path}: pid {f.pid} was recorded by ranks {', '.join(map(str, sorted(ranks)))} of {f.arm} "
                         f"(pids reused across nodes): counted for rank {f.rank}; write per-process logs under rank<R>/")
        return f.rank
    return next(iter(ranks))


def _reader_notes(f: InstrumentFile, df: pd.DataFrame) -> list[str]:
    """What a reader says it skipped, cut or lost (``attrs["problems"]``), one note per item."""
    return [f"{f.path}: {p}" for p in (df.attrs.get("problems") or [])]


def load(cap: Capture, keep_going: bool = False, notes: list[str] | None = None,
         facts: list[dict[str, Any]] | None = None,
         losses: list[dict[str, Any]] | None = None,
         provenance: list[runs.Provenance] | None = None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Read every instrument file of a capture: (launches, calls, sites); what readers noted goes to
    ``notes``, what they lost to ``losses``, what they say about library and device to ``facts``,
    where each counted file came from to ``provenance`` (:mod:`forensics.judge.runs`).

    Byte-identical files of one arm and rank are read once. In a folder without a manifest, files
    of one arm and rank that are different runs are judged as arms of their own (``a1-run2``)."""
    notes = [] if notes is None else notes
    facts = [] if facts is None else facts
    losses = [] if losses is None else losses
    provenance = [] if provenance is None else provenance
    sites = _sites_of(cap, losses)
    notes.extend(f"{x['file']}: {x['loss']}" for x in losses)
    pid_rank = _pid_ranks(sites)
    counted = [f for f in cap.files if reg.role_of(f.instrument) in (reg.LAUNCHES, reg.CALLS)]
    # across arms and ranks only where no manifest states what each holds (a sharded analysis of a
    # capture sees some ranks at a time: its notes must not depend on the shard)
    dup_of, dup_notes, digests = runs.duplicates(counted, cap.arm_of, across=not runs.manifest_tied(cap))
    notes.extend(dup_notes)
    launch_frames, call_frames = [], []
    for f in cap.files:
        if str(f.path) in dup_of:
            provenance.append(runs.Provenance(str(f.path), f.instrument, reg.family_of(f.instrument), cap.arm_of(f.arm),
                                              f.rank, sha256=digests.get(str(f.path), (None, None))[0],
                                              size=digests.get(str(f.path), (None, None))[1],
                                              duplicate_of=dup_of[str(f.path)]))
            continue
        rank = file_rank(cap, f, pid_rank, notes)
        try:
            fsites = sites[(sites["folder"] == f.arm) & (sites["rank"] == rank)] if len(sites) else sites
            with doing(f"reading {f.path} ({f.instrument})"):
                inst, df = _read(f, fsites)
        except BadInput as e:
            if not keep_going:
                raise
            notes.append(f"skipped {e}")
            continue
        except ImportError as e:
            notes.append(f"cannot read {f.path} ({f.instrument}): {e}")
            continue
        if inst is None:
            continue
        notes.extend(_reader_notes(f, df))
        provenance.append(runs.read_provenance(f.path, f.instrument, df, cap.arm_of(f.arm), rank, f.pid,
                                               digests.get(str(f.path))))
        where = {"arm": cap.arm_of(f.arm), "rank": rank, "instrument": f.instrument, "file": str(f.path)}
        facts.extend({**fact, **where} for fact in df.attrs.get("facts") or [])
        losses.extend({**where, "family": inst.family, "loss": text} for text in df.attrs.get("losses") or [])
        df = df.assign(folder=f.arm, arm=cap.arm_of(f.arm), rank=rank, instrument=f.instrument, file=str(f.path))
        if inst.role == reg.LAUNCHES:
            launch_frames.append(df)
        else:
            if f.pid is not None or "pid" not in df.columns:
                df["pid"] = f.pid
            call_frames.append(df)
    if not runs.manifest_tied(cap):  # a plain folder: files of different runs are arms of their own
        run_of, run_notes, twice = runs.assign_runs([p for p in provenance if p.duplicate_of is None])
        notes.extend(run_notes)
        if twice:
            launch_frames = [d for d in launch_frames if not len(d) or str(d["file"].iloc[0]) not in twice]
            call_frames = [d for d in call_frames if not len(d) or str(d["file"].iloc[0]) not in twice]
        if run_of:
            launch_frames = [d.assign(arm=run_of.get(str(d["file"].iloc[0]), d["arm"].iloc[0])) if len(d) else d
                             for d in launch_frames]
            call_frames = [d.assign(arm=run_of.get(str(d["file"].iloc[0]), d["arm"].iloc[0])) if len(d) else d
                           for d in call_frames]
            for x in (*facts, *losses):
                x["arm"] = run_of.get(str(x.get("file")), x.get("arm"))
            for f in cap.files:  # a duplicate is judged (not counted) where the file it repeats is
                run = run_of.get(str(f.path)) or run_of.get(dup_of.get(str(f.path), ""))
                if run:
                    f.run = run
            for p in provenance:
                if p.duplicate_of and p.duplicate_of in run_of:
                    p.run = run_of[p.duplicate_of]
    launches = pd.concat([conform(d, LAUNCH_COLUMNS) for d in launch_frames], ignore_index=True) if launch_frames \
        else empty_frame(LAUNCH_COLUMNS)
    if "folder" not in launches:
        launches["folder"] = pd.Series(dtype="string")
    launches["family"] = launches["instrument"].map(reg.family_of).astype("string")
    launches["key"] = kernel_key(launches)
    calls = pd.concat(call_frames, ignore_index=True) if call_frames else pd.DataFrame(
        columns=["folder", "arm", "rank", "instrument", "file", "pid", "m", "n", "k"])
    calls["family"] = calls["instrument"].map(reg.family_of).astype("string")
    if len(calls):
        calls = attribute_calls(calls, sites)
    elif "site_label" not in calls:
        calls["site_label"] = pd.Series(dtype="string")
    return launches, calls, sites


def kernel_key(launches: pd.DataFrame) -> pd.Series:
    """The identity a kernel is counted under (:func:`forensics.core.kernel_names.kernel_keys`): its
    mangled symbol wherever some reader gives it, demangled text for display only."""
    return pd.Series(kernel_keys(launches), index=launches.index, dtype="string")


# --------------------------------------------------------------------------- cuBLASLt attribution
def _expected_mnk(record: pd.Series) -> tuple[int | None, int | None, set[int]]:
    """(m, n, candidate ks) of a GEMM site occurrence in cuBLAS column-major terms.

    Uses the probe's recorded problem descriptor when present (``meta.m/n/k``); otherwise the
    output shape: PyTorch's row-major C[n_rows, n_cols] is cuBLAS's column-major C^T, so
    m = C.shape[-1], n = prod(C.shape[:-1]) and k is one of the inputs' dimensions.
    """
    meta = record.get("meta") if isinstance(record.get("meta"), dict) else {}
    if meta and all(meta.get(x) is not None for x in ("m", "n", "k")):
        return int(meta["m"]), int(meta["n"]), {int(meta["k"])}
    outs = record.get("out_digests") or []
    ins = record.get("in_digests") or []
    if not outs or not outs[0].get("shape"):
        return None, None, set()
    shape = list(outs[0]["shape"])
    if len(shape) < 2:
        return None, None, set()
    m, n = shape[-1], 1
    for d in shape[:-1]:
        n *= d
    ks = {d for t in ins for d in (t.get("shape") or [])}
    return int(m), int(n), ks


def attribute_calls(calls: pd.DataFrame, sites: pd.DataFrame, lookahead: int = 64) -> pd.DataFrame:
    """Give each cuBLASLt/cuBLAS call the ``SITE#N`` it belongs to, where that can be shown.

    The log has no NVTX and no correlation id, so calls are matched to GEMM site occurrences by
    host order and problem descriptor: per process (folder, rank, pid), occurrences in recorded
    order take the next call whose (m, n) equals the occurrence's and whose k is one of its
    operand dimensions. Calls that match nothing stay unattributed (``site_label`` None).
    """
    own = [i for i in reg.of_role(reg.CALLS) if i.attributor and "instrument" in calls.columns
           and (calls["instrument"] == i.name).any()]
    if own:  # logs with an attribution of their own (the CPU backend's: timestamps, file offsets)
        mask = calls["instrument"].isin([i.name for i in own])
        parts = [i.attribute(calls[calls["instrument"] == i.name], sites) for i in own]
        rest = attribute_calls(calls[~mask], sites, lookahead) if (~mask).any() else None
        return pd.concat(parts + ([rest] if rest is not None else []), sort=False).loc[calls.index]
    calls = calls.copy()
    calls["site_label"] = pd.Series([None] * len(calls), dtype="object", index=calls.index)
    if not len(sites):
        return calls
    gemm_sites = sites[sites["site"].astype(str).map(names_gemm)]
    for (folder, rank), group in calls.groupby(["folder", "rank"], dropna=False, sort=False):
        occ = gemm_sites[(gemm_sites["folder"] == folder) & (gemm_sites["rank"] == rank)]
        if not len(occ):
            continue
        order = group.sort_values(["file", "line"]) if "line" in group else group
        idx = list(order.index)
        ms = order["m"].tolist()
        ns = order["n"].tolist()
        ks = order["k"].tolist()
        pos = 0
        for _, rec in occ.iterrows():
            m, n, kset = _expected_mnk(rec)
            if m is None:
                continue
            for j in range(pos, min(pos + lookahead, len(idx))):
                if ms[j] == m and ns[j] == n and (not kset or ks[j] in kset):
                    calls.at[idx[j], "site_label"] = rec["label"]
                    pos = j + 1
                    break
    return calls


# --------------------------------------------------------------------------- counting
def _scope_of(label: Any, use_sites: bool) -> str:
    if use_sites and isinstance(label, str) and label:
        return label
    return WINDOW


KEYS = ["arm", "rank", "scope"]


def scoped(launches: pd.DataFrame, calls: pd.DataFrame, site: str | Site | Occurrence | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Launches and calls with their ``scope`` (``SITE#N``, or the whole window when no instrument
    saw a site range), limited to ``site`` and to one instrument per family (what is counted)."""
    use_sites = bool(launches["site_label"].notna().any()) or bool(len(calls) and calls["site_label"].notna().any())
    lf = launches.copy()
    lf["scope"] = [_scope_of(x, use_sites) for x in lf["site_label"]]
    cf = calls.copy()
    cf["scope"] = [_scope_of(x, use_sites) for x in cf.get("site_label", pd.Series([None] * len(cf)))]
    if use_sites:  # a launch outside every site range belongs to no scope we judge
        lf = lf[lf["scope"] != WINDOW]
        cf = cf[cf["scope"] != WINDOW]
    if site:
        want = site if isinstance(site, (Site, Occurrence)) else parse_site_or_occurrence(site)
        text = str(want)
        if isinstance(want, Occurrence):
            lf, cf = lf[lf["scope"] == text], cf[cf["scope"] == text]
        else:
            lf = lf[[split_label(s)[0] == text for s in lf["scope"]]]
            cf = cf[[split_label(s)[0] == text for s in cf["scope"]]]
    return one_source_per_family(lf), one_source_per_family(cf)


def count_launches(launches: pd.DataFrame, calls: pd.DataFrame, site: str | None = None,
                   identity: dict[str, dict] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (arm, rank, scope, kernel) counts per instrument, and which families observed each scope.

    Returns ``(counts, observed)``. ``counts`` has one column per counting instrument of the
    registry: launch counters count launches; a call log counts the launches of the kernel that
    were matched one to one to its calls (:func:`match_calls`), NA where it cannot confirm the
    kernel. ``observed`` has one row per (arm, rank, scope, family, instrument) that saw the scope
    (a family that saw a scope but not a kernel counts 0 for it) and, for call logs, how the
    calls matched the launches. ``identity`` (when given) receives what the identity check reads:
    ``launches`` {(arm, rank, scope, key, family): [launch rows]} and ``pairs`` {(arm, rank, scope,
    key, call instrument): [(launch row, [call rows])]}, the calls matched to each launch.
    """
    lf, cf = scoped(launches, calls, site)
    counts = (lf.groupby(KEYS + ["key", "instrument"], dropna=False).size().unstack("instrument", fill_value=0)
              if len(lf) else pd.DataFrame())
    counts = counts.reset_index() if len(counts) else pd.DataFrame(columns=KEYS + ["key"])
    counts.columns.name = None
    for inst in reg.of_role(reg.LAUNCHES):
        if inst.name not in counts:
            counts[inst.name] = 0
    # Names from every instrument that saw the kernel: the first non-null of each (nsys 2021 exports
    # have no mangled name; ncu does).
    named_first = lf.assign(_no_symbol=lf["mangled"].isna()).sort_values("_no_symbol", kind="stable") if len(lf) else lf
    names = (named_first.groupby("key")[["kernel", "mangled", "short_name"]].first() if len(lf)
             else pd.DataFrame(columns=["kernel", "mangled", "short_name"]))
    for col in ("kernel", "mangled", "short_name"):
        counts[col] = counts["key"].map(lambda k, c=col: names[c].get(k) if k in names.index else None)
    pairs: dict[tuple, list] = {}
    matched, match_obs = match_calls(lf, cf, pairs)
    if identity is not None:
        identity["pairs"] = pairs
        rows: dict[tuple, list] = {}
        # grids and blocks are compared between launch families: only kernels two of them saw
        several = lf.groupby(KEYS + ["key"], dropna=False)["family"].transform("nunique") > 1 if len(lf) else None
        if several is not None and several.any():
            for r in lf.loc[several, KEYS + ["key", "family", "kernel", "grid", "block"]].to_dict("records"):
                rows.setdefault((r["arm"], r["rank"], r["scope"], r["key"], r["family"]), []).append(r)
        identity["launches"] = rows
    for inst in reg.of_role(reg.CALLS):
        col = pd.Series(pd.NA, index=counts.index, dtype="Int64")
        if len(counts):
            confirmable = [inst.launch_role is not None and inst.launch_role(_name(k, n)) is not None
                           for k, n in zip(counts["key"], counts["kernel"])]
            vals = [matched.get((a, r, s, k, inst.name), 0) if ok else pd.NA
                    for a, r, s, k, ok in zip(counts["arm"], counts["rank"], counts["scope"], counts["key"], confirmable)]
            col = pd.Series(vals, index=counts.index, dtype="Int64")
        counts[inst.name] = col
    obs = []
    if len(lf):
        obs.append(lf[KEYS + ["family", "instrument"]].drop_duplicates())
    if len(match_obs):
        obs.append(match_obs)
    observed = pd.concat(obs, ignore_index=True) if obs else pd.DataFrame(columns=KEYS + ["family", "instrument"])
    return counts, observed


def _name(key: Any, kernel: Any) -> str:
    return kernel if isinstance(kernel, str) and kernel else str(key)


def one_source_per_family(df: pd.DataFrame) -> pd.DataFrame:
    """Within one (arm, rank) keep one instrument per family, and one folder per instrument.

    Members of a family are one source: counting two of them would be counting one thing twice.
    The first member present in registry order is kept (cupti over nsys over kineto; the
    ``.ncu-rep`` over its CSV export; the cuBLASLt log over the legacy cuBLAS log); the arm's own
    folder is preferred over a pass folder (e.g. ``a1`` over ``kineto``).
    """
    if not len(df):
        return df
    keep = []
    for (_arm, _rank, fam), g in df.groupby(["arm", "rank", "family"], dropna=False, sort=False):
        present = [i for i in reg.preference(fam)] if isinstance(fam, str) else []
        present = [i for i in present if i in set(g["instrument"])]
        g = g[g["instrument"] == present[0]] if present else g
        folders = list(dict.fromkeys(g["folder"]))
        own = [f for f in folders if f == g["arm"].iloc[0]]
        g = g[g["folder"] == (own[0] if own else folders[0])]
        keep.append(g)
    return pd.concat(keep, ignore_index=True)


def not_counted_members(launches: pd.DataFrame, calls: pd.DataFrame,
                        provenance: list[runs.Provenance] | None = None) -> list[str]:
    """One note per file read but not counted because another member of its family (or the same
    instrument in the arm's own folder) is counted for that arm and rank: read, shown, never silent;
    with ``provenance``, whether anything ties the file to the one counted (forensics.judge.runs)."""
    prov = {p.path: p for p in provenance or []}
    out = []
    for df, unit in ((launches, "launch(es)"), (calls, "call(s)")):
        if not len(df) or "file" not in df.columns:
            continue
        kept = one_source_per_family(df)
        kept_files = set(kept["file"])
        counted = {(a, r, f): i for a, r, f, i in zip(kept["arm"], kept["rank"], kept["family"], kept["instrument"])}
        for (arm, rank, fam, inst, file), g in df.groupby(["arm", "rank", "family", "instrument", "file"],
                                                          dropna=False, sort=False):
            if file in kept_files:
                continue
            other = counted.get((arm, rank, fam))
            tie = ""
            kept_here = [f for f in kept.loc[(kept["arm"] == arm) & (kept["family"] == fam), "file"].unique()]
            if prov and str(file) in prov and kept_here and str(kept_here[0]) in prov:
                state, why = runs.tie(prov[str(file)], prov[str(kept_here[0])])
                tie = (f"; same run: {why}" if state == runs.TIED
                       else f"; nothing ties it to {Path(str(kept_here[0])).name}: {why}")
            out.append(f"{file}: {len(g)} {unit} read, not counted for arm {arm} rank {rank}: "
                       f"{other or 'another file'} is counted for the {reg.family_label(fam)} (one source, never two)"
                       + tie)
    return out


_ORDER_COLUMNS = ("launch_ns", "start_ns", "correlation_id")


def _launch_order(df: pd.DataFrame) -> pd.DataFrame:
    """Launches in the order their host calls were made (launch time, GPU start, correlation id,
    then file order)."""
    df = df.assign(_pos=range(len(df)))
    for col in _ORDER_COLUMNS:
        if col in df.columns and df[col].notna().all() and len(df):
            return df.sort_values([col, "_pos"], kind="stable")
    return df


def _groups(launches: pd.DataFrame, role: Any) -> list[list[int]]:
    """Launch groups of one library's calls: a PRIMARY launch starts a group, AUXILIARY launches
    (split-K reduce, epilogue) join the group before them. Items are positions in ``launches``."""
    groups: list[list[int]] = []
    for pos, name in enumerate(_name(k, n) for k, n in zip(launches["key"], launches["kernel"])):
        r = role(name)
        if r is None:
            continue
        if r == AUXILIARY and groups:
            groups[-1].append(pos)
        else:
            groups.append([pos])
    return groups


#: What the identity check reads of a GPU library call (forensics.core.kernel_names.check_call, check_amd_call).
IDENTITY_CALL_COLUMNS = ("function", "a_type", "b_type", "transa", "transb", "a_order", "b_order", "m", "n", "k",
                         "batch_count", "num_splits_k", "precision")  # precision: hipBLASLt/rocBLAS (check_amd_call)


def match_calls(lf: pd.DataFrame, cf: pd.DataFrame,
                pairs: dict[tuple, list] | None = None) -> tuple[dict[tuple, int], pd.DataFrame]:
    """Match each scope's library calls to the launches they made, one call to one launch group.

    Per (arm, rank, scope) and call log: the log's calls in host order (file line) against the
    launches of the first launch family present (registry order: CUPTI family, else Nsight
    Compute) that the log's library can launch (``Instrument.launch_role``), in host launch
    order and grouped per call (a GEMM and its split-K reduce are one call). Per process when both
    sides carry pids. When calls and groups are equally many they match in order; otherwise the
    scope is not one to one and only the first ``min`` pairs are credited (the verdict says so).

    Returns ``({(arm, rank, scope, key, call_instrument): matched launches}, observed)`` where
    ``observed`` has (arm, rank, scope, family, instrument, calls, groups, reference). ``pairs``
    (when given) receives, per (arm, rank, scope, key, instrument), each matched launch with the
    call rows matched to it, for the identity check.
    """
    pairs = {} if pairs is None else pairs
    matched: dict[tuple, int] = {}
    rows = []
    if not len(cf):
        return matched, pd.DataFrame(columns=KEYS + ["family", "instrument", "calls", "groups", "reference"])
    launch_fams = reg.counting_families()
    for (arm, rank, scope, inst_name), calls in cf.groupby(KEYS + ["instrument"], dropna=False, sort=False):
        inst = reg.get(inst_name)
        role = inst.launch_role if inst else None
        here = lf[(lf["arm"] == arm) & (lf["rank"] == rank) & (lf["scope"] == scope)] if len(lf) else lf
        ref_fam = next((f for f in launch_fams if len(here) and (here["family"] == f).any()), None)
        ref = _launch_order(here[here["family"] == ref_fam]) if ref_fam else here.iloc[0:0]
        calls = calls.sort_values(["file", "line"], kind="stable") if "line" in calls.columns else calls
        if inst is not None and inst.per_execution:  # a log whose calls are not one per launch group (CPU libraries)
            res = cpu.match(inst, ref, calls)
            for k, n in res["matched"].items():
                matched[(arm, rank, scope, k, inst_name)] = matched.get((arm, rank, scope, k, inst_name), 0) + n
            for k, launch, its_calls in res.get("pairs") or []:
                pairs.setdefault((arm, rank, scope, k, inst_name), []).append((launch, its_calls))
            rows.append({"arm": arm, "rank": rank, "scope": scope, "family": reg.family_of(inst_name),
                         "instrument": inst_name, "calls": res["calls"], "groups": res["groups"],
                         "reference": ref["instrument"].iloc[0] if len(ref) else None,
                         "detail": res.get("detail"), "implementation": res.get("implementation")})
            continue
        n_calls = n_groups = 0
        for pid, pcalls, plaunches in _by_pid(calls, ref):
            groups = _groups(plaunches, role) if role is not None and len(plaunches) else []
            n_calls += len(pcalls)
            n_groups += len(groups)
            call_rows = pcalls[[c for c in IDENTITY_CALL_COLUMNS if c in pcalls.columns]].to_dict("records") \
                if groups else []
            keys, kernels = list(plaunches["key"]), list(plaunches["kernel"])
            grids = list(plaunches["grid"]) if "grid" in plaunches else [None] * len(plaunches)
            for group, call in zip(groups, call_rows):
                for pos in group:
                    k = (arm, rank, scope, keys[pos], inst_name)
                    matched[k] = matched.get(k, 0) + 1
                    pairs.setdefault(k, []).append(({"kernel": kernels[pos], "grid": grids[pos]}, [call]))
        rows.append({"arm": arm, "rank": rank, "scope": scope, "family": reg.family_of(inst_name),
                     "instrument": inst_name, "calls": n_calls, "groups": n_groups,
                     "reference": ref["instrument"].iloc[0] if len(ref) else None})
    return matched, pd.DataFrame(rows)


def _by_pid(calls: pd.DataFrame, launches: pd.DataFrame):
    """(pid, calls, launches) per process when both sides name every row's pid, else one part."""
    cp = calls["pid"] if "pid" in calls.columns else None
    lp = launches["pid"] if "pid" in launches.columns else None
    if cp is None or lp is None or not len(launches) or cp.isna().any() or lp.isna().any():
        yield None, calls, launches
        return
    cpi, lpi = cp.astype("int64"), lp.astype("int64")
    for pid in dict.fromkeys(list(cpi) + list(lpi)):
        yield pid, calls[(cpi == pid).to_numpy()], launches[(lpi == pid).to_numpy()]


def judge(counts: pd.DataFrame, observed: pd.DataFrame, losses: list[dict[str, Any]] | None = None,
          identity: dict[str, dict] | None = None, ties: runs.TieBook | None = None) -> pd.DataFrame:
    """Apply the two-instrument rule to every (arm, rank, scope, kernel).

    ``counts`` per family: a launch counter's count of the kernel; a call log's count of the
    kernel's launches matched one to one to its calls. NAMED needs two families, equal counts
    above zero, every call log among them matched one to one in the scope, and (``identity``
    from :func:`count_launches`) every descriptor both instruments carry consistent, else CONFLICT.
    """
    identity = identity or {}
    id_launches, id_pairs = identity.get("launches") or {}, identity.get("pairs") or {}
    rows = []
    lost: dict[tuple, list[str]] = {}  # (arm, rank) -> what its files lost
    for x in losses or []:
        lost.setdefault((x["arm"], x["rank"]), []).append(f"{x['instrument']}: {x['loss']}")
    by_scope: dict[tuple, dict[str, dict[str, Any]]] = {}
    for r in observed.to_dict("records") if len(observed) else []:
        by_scope.setdefault((r["arm"], r["rank"], r["scope"]), {})[r["family"]] = r
    for r in counts.to_dict("records"):
        fams = by_scope.get((r["arm"], r["rank"], r["scope"]), {})
        name = _name(r["key"], r["kernel"])
        by_family: dict[str, int] = {}
        sources: dict[str, str] = {}
        not_confirmable: list[str] = []
        uneven: list[str] = []
        details: list[str] = []
        implementation = None
        for fam in reg.counting_families():
            o = fams.get(fam)
            if o is None:
                continue
            inst = reg.get(o["instrument"])
            if inst.role == reg.CALLS:
                if inst.launch_role is None or inst.launch_role(name) is None:
                    not_confirmable.append(inst.confirms or "its own kernels only")
                    if o.get("detail") and not int(o.get("groups") or 0) and int(o.get("calls") or 0):
                        details.append(o["detail"])  # its calls in this scope that no launch seen here explains
                    continue
                n_calls, n_groups = int(o.get("calls") or 0), int(o.get("groups") or 0)
                if n_calls != n_groups:
                    uneven.append(f"{inst.label}: {n_calls} call(s) for {n_groups} launch group(s) "
                                  f"of its kernels in this scope (not one to one)")
                if isinstance(o.get("detail"), str) and o["detail"]:
                    details.append(o["detail"])
                if isinstance(o.get("implementation"), str) and implementation is None:
                    implementation = o["implementation"]
            value = r.get(inst.name)
            by_family[fam] = 0 if value is None or value is pd.NA else int(value)
            sources[fam] = inst.name
        verdict, reason = _rule(by_family, sources, not_confirmable, uneven, name)
        here = (r["arm"], r["rank"], r["scope"], r["key"])
        verdict, reason, checked = identity_verdict(
            verdict, reason, name,
            {f: id_launches.get((*here, f), []) for f in by_family if reg.get(sources[f]).role == reg.LAUNCHES},
            {sources[f]: id_pairs.get((*here, sources[f]), []) for f in by_family
             if reg.get(sources[f]).role == reg.CALLS})
        same_run = None
        if ties is not None and verdict == NAMED:  # who ran and how often agree: did they see one run?
            state, why = ties.check(r["arm"], r["rank"], list(by_family))
            same_run = why
            if state != runs.TIED:
                verdict = AGREE_UNTIED
                reason += (f"; no same-run tie: {why}" if state == runs.UNKNOWN else f"; not one run: {why}") + \
                    " (a manifest.yaml listing the files states that they belong together: docs/capture-format.md)"
            elif not ties.by_manifest:
                reason += f"; same run: {why}"
        for text in lost.get((r["arm"], r["rank"]), []):  # a loss is never silent: every verdict it may touch says it
            reason += f"; loss in this arm/rank: {text}"
        if implementation and verdict == NAMED:
            reason = f"{name} -> {implementation}: {reason}"
        if details:
            reason += " [" + "; ".join(details) + "]"
        cupti_src = sources.get("cupti")
        rows.append({
            "arm": r["arm"], "rank": r["rank"], "scope": r["scope"], "kernel": r["kernel"], "mangled": r["mangled"],
            "short_name": r["short_name"], "verdict": verdict, "counts": by_family, "sources": sources,
            "cupti_instrument": cupti_src, "kernel_class": describe_kernel(name), "reason": reason,
            "library": implementation if verdict == NAMED else None, "identity": checked, "same_run": same_run,
        })
    cols = ["arm", "rank", "scope", "kernel", "mangled", "short_name", "verdict", "counts", "sources",
            "cupti_instrument", "kernel_class", "reason", "library", "identity", "same_run"]
    return pd.DataFrame(rows, columns=cols)


def _rule(by_family: dict[str, int], sources: dict[str, str], not_confirmable: list[str],
          uneven: list[str], name: str = "") -> tuple[str, str]:
    if len(by_family) < 2:
        only = next(iter(by_family), None)
        if only is None:
            return SINGLE, "no instrument counted this kernel in this scope"
        device = reg.FAMILIES[only].device if only in reg.FAMILIES else None
        lacking = [reg.family_label(f) for f in reg.counting_families(device)
                   if f not in by_family and reg.can_confirm(f, name)]
        why = f"only {reg.family_label(only)} saw this scope; missing: {', '.join(lacking) or 'nothing else can count it'}"
        for text in dict.fromkeys(not_confirmable):
            why += f" (the log present confirms {text})"
        return SINGLE, why
    text = ", ".join(f"{f}={c}" for f, c in by_family.items())
    values = set(by_family.values())
    if uneven:
        return DISAGREE, f"launch counts {text}; " + "; ".join(uneven)
    if len(values) == 1 and next(iter(values)) > 0:
        src = " + ".join(f"{f}:{sources[f]}" if sources.get(f) != f else f for f in by_family)
        call_logs = [reg.get(sources[f]) for f in by_family if reg.get(sources[f]) and reg.get(sources[f]).role == reg.CALLS]
        counted = next((reg.get(sources[f]).unit for f in by_family
                        if reg.get(sources[f]) and reg.get(sources[f]).role == reg.LAUNCHES), "kernel launches")
        what = "launch(es)" if counted == "kernel launches" else counted
        units = [i.unit for i in call_logs if not i.per_execution]
        how = f" ({', '.join(units)} matched one to one to their launches in host order)" if units else ""
        return NAMED, f"{src} agree on {next(iter(values))} {what}{how}"
    return DISAGREE, f"launch counts differ: {text}"


def describe_call(row: dict[str, Any], instrument: str) -> tuple[str, str]:
    """(problem descriptor, algo descriptor) of one library call, as its log printed them.

    ``cublasSgemm_v2(T,N) m=2 n=1 k=3 lda=2 ldb=2 ldc=1``, ``cublasLtMatmul(N,N) m=32 n=64 k=16
    A=R_8F_E4M3 C=R_16F compute=COMPUTE_32F`` + ``algo_id=39 tile=MATMUL_TILE_256x64 ...``;
    ``oneDNN convolution jit_1x1:avx2 forward_training 4x8x1x8``, ``oneMKL SGEMM(N,N) m=8 n=16 k=8``.
    """
    def val(c: str) -> Any:
        v = row.get(c)
        return None if v is None or (not isinstance(v, (list, dict)) and pd.isna(v)) else v

    inst = reg.get(instrument)
    if instrument == "onednn":
        text = f"oneDNN {val('primitive')} {val('implementation')}"
        for c in ("prop_kind", "dtypes", "problem_desc"):
            if val(c) not in (None, "", "undef"):
                text += f" {val(c)}"
    else:
        fn = val("function") or val("routine") or "call"
        text = ("oneMKL " if instrument == "mkl" else "") + str(fn)
        trans = ",".join(str(val(c)) for c in ("transa", "transb") if val(c) is not None)
        if trans:
            text += f"({trans})"
        for c in ("m", "n", "k", "batch_count", "lda", "ldb", "ldc"):
            if val(c) is not None:
                text += f" {c}={int(val(c)) if isinstance(val(c), (int, float)) else val(c)}"
        for c, label in (("a_type", "A"), ("b_type", "B"), ("c_type", "C"), ("d_type", "D"),
                         ("compute_type", "compute"), ("epilogue", "epilogue")):
            if val(c) is not None:
                text += f" {label}={val(c)}"
        for c, label in (("a_order", "Aorder"), ("b_order", "Border"), ("c_order", "Corder"), ("d_order", "Dorder")):
            if val(c) not in (None, "ORDER_COL"):
                text += f" {label}={val(c)}"
        if inst is not None and inst.device == reg.ROCM:  # hipBLASLt/rocBLAS print the scalars: part of the problem
            text += "".join(f" {c}={val(c)}" for c in ("alpha", "beta") if val(c) is not None)
    algo = " ".join(f"{c}={val(c)}" for c in (inst.algo_columns if inst else ())
                    if val(c) is not None and c not in ("primitive", "implementation", "prop_kind", "dtypes", "routine"))
    return text, algo


def _short_call(row: dict[str, Any], problem: str) -> str:
    """``cublasLtMatmul(N,N) 32x64x16 R_8F_E4M3``: the call's name, layout, m x n x k and A type
    (the table's label; the full descriptor is the row's ``kernel`` and reason)."""
    dims = [row.get(c) for c in ("m", "n", "k")]
    if any(d is None or pd.isna(d) for d in dims) or "(" not in problem:
        return problem
    head = problem.split(" ", 1)[0] if not problem.startswith("oneMKL ") else " ".join(problem.split(" ", 2)[:2])
    a = row.get("a_type")
    return f"{head} {'x'.join(str(int(d)) for d in dims)}" + (f" {a}" if isinstance(a, str) and a else "")


def library_rows(launches: pd.DataFrame, calls: pd.DataFrame, observed: pd.DataFrame,
                 site: str | None = None) -> pd.DataFrame:
    """SINGLE-SOURCE rows for library calls that no verdict row shows: a scope where a call log saw
    calls and no launch counter saw any launch of that library (a capture of the log alone, or a
    CPU arm whose profiler recorded no implementation op). One row per (scope, call descriptor):
    what was seen, by which log, and what is missing to name the kernel or implementation."""
    cols = ["arm", "rank", "scope", "kernel", "mangled", "short_name", "verdict", "counts", "sources",
            "cupti_instrument", "kernel_class", "reason", "library"]
    if not len(calls):
        return pd.DataFrame(columns=cols)
    _lf, cf = scoped(launches, calls, site)
    if not len(cf):
        return pd.DataFrame(columns=cols)
    groups_of: dict[tuple, int] = {}
    for r in observed.to_dict("records") if len(observed) else []:
        if r.get("groups") is not None and not pd.isna(r.get("groups")):
            groups_of[(r["arm"], r["rank"], r["scope"], r["instrument"])] = int(r["groups"])
    seen_by: dict[tuple, list[str]] = {}
    for r in observed.to_dict("records") if len(observed) else []:
        if reg.role_of(r.get("instrument")) == reg.LAUNCHES:
            seen_by.setdefault((r["arm"], r["rank"], r["scope"]), []).append(r["family"])
    rows = []
    sort_cols = [c for c in ("file", "line") if c in cf.columns]
    for (arm, rank, scope, inst_name), g in cf.groupby(KEYS + ["instrument"], dropna=False, sort=False):
        if groups_of.get((arm, rank, scope, inst_name), 0) > 0:
            continue  # its calls met launches of its library here: the verdict rows show them
        inst = reg.get(inst_name)
        fam = reg.family_of(inst_name)
        g = g.sort_values(sort_cols, kind="stable") if sort_cols else g
        described: dict[tuple[str, str], list[int]] = {}
        short_of: dict[tuple[str, str], str] = {}
        pids: dict[tuple[str, str], set[int]] = {}
        for rec in g.to_dict("records"):
            d = describe_call(rec, inst_name)
            described.setdefault(d, []).append(rec.get("line"))
            short_of.setdefault(d, _short_call(rec, d[0]))
            pid = rec.get("pid")
            if pid is not None and not pd.isna(pid):
                pids.setdefault(d, set()).add(int(pid))
        device = inst.device if inst else None
        launchers = [reg.family_label(f) for f in reg.counting_families(device)
                     if any(i.role == reg.LAUNCHES for i in reg.INSTRUMENTS if i.family == f)]
        saw = [reg.family_label(f) for f in dict.fromkeys(seen_by.get((arm, rank, scope), []))]
        what = "implementation op" if device == reg.CPU else "kernel"
        if saw:
            missing = (f"{', '.join(saw)} saw this scope but no {what} these calls make "
                       f"({inst.confirms if inst else 'its own'}): nothing to pair them with")
        else:
            missing = f"a launch counter in this scope ({' or '.join(launchers)}) to see which {what} ran"
        for (problem, algo), lines in described.items():
            where = [str(x) for x in lines if x is not None and not pd.isna(x)]
            ps = sorted(pids.get((problem, algo), ()))
            at = ([f"pid {', '.join(map(str, ps[:4]))}"] if ps else []) + (
                [f"line {', '.join(where[:6])}{', ...' if len(where) > 6 else ''}"] if where else [])
            reason = (f"seen by the {inst.label if inst else inst_name} only: {len(lines)} call(s) {problem}"
                      + (f"; algo {algo}" if algo else "")
                      + (f" ({', '.join(at)})" if at else "")
                      + f"; missing to name it: {missing}")
            rows.append({"arm": arm, "rank": rank, "scope": scope, "kernel": problem, "mangled": None,
                         "short_name": short_of[(problem, algo)], "verdict": SINGLE, "counts": {fam: len(lines)},
                         "sources": {fam: inst_name}, "cupti_instrument": None,
                         "kernel_class": f"library call ({inst.unit if inst else 'calls'}), no {what} seen",
                         "reason": reason, "library": None})
    return pd.DataFrame(rows, columns=cols)


def no_launch_message(site: str, labels: list[str], instruments: set[str], device: str | None = None) -> str:
    """What to say when nothing was attributed to ``site``: that its ranges were not seen at all, or
    (they were) that nothing inside them is what the instruments count. On the CPU backend that is
    an op no library serves: ATen's own kernels have the profiler's word only."""
    seen = [x for x in labels if x == site or split_label(x)[0] == site]
    if not seen:
        return f"no launch attributed to site {site} (sites seen: {', '.join(labels[:8]) or 'none'})"
    if device == reg.CPU or (device is None and reg.devices_of(instruments) == {reg.CPU}):
        return (f"site {site} ran inside the window ({', '.join(seen[:4])}), but no op inside it calls a library "
                "that a second instrument logs (oneDNN, oneMKL): ATen's own CPU kernels (layer norm, elementwise "
                "ops, reductions) have the profiler's word only, so nothing there can be NAMED")
    return (f"site {site} ran inside the window ({', '.join(seen[:4])}), but no kernel launch was attributed to its "
            "ranges (no launch-recording instrument covered them, or the op launched no kernel)")


# --------------------------------------------------------------------------- entry point
def analyze(capture: str | Path | Capture, site: str | Site | Occurrence | None = None,
            keep_going: bool = False) -> Analysis:
    """Load a capture directory and apply the two-instrument rule (offline; no GPU). ``site`` is
    text (parsed here, before anything is read) or a parsed :class:`Site`/:class:`Occurrence`."""
    parsed = (site if isinstance(site, (Site, Occurrence)) else parse_site_or_occurrence(site)) if site else None
    site = str(parsed) if parsed is not None else None
    cap = capture if isinstance(capture, Capture) else load_capture(capture)
    notes: list[str] = []
    facts: list[dict[str, Any]] = []
    losses: list[dict[str, Any]] = []
    provenance: list[runs.Provenance] = []
    launches, calls, sites = load(cap, keep_going=keep_going, notes=notes, facts=facts, losses=losses,
                                  provenance=provenance)
    identity: dict[str, dict] = {}
    counts, observed = count_launches(launches, calls, parsed, identity)
    notes.extend(not_counted_members(launches, calls, None if runs.manifest_tied(cap) else provenance))
    notes.extend(runs.pid_lines(launches, calls))
    ties = runs.TieBook(cap, provenance, one_source_per_family(launches), one_source_per_family(calls))
    verdicts = judge(counts, observed, losses, identity, ties)
    extra = library_rows(launches, calls, observed, parsed)
    if len(extra):  # library calls no verdict row shows are rows too (SINGLE-SOURCE), never dropped
        verdicts = pd.concat([verdicts, extra], ignore_index=True) if len(verdicts) else extra
    missing = list(cap.missing)
    from forensics.capture.exits import arm_crash, crash_word  # noqa: PLC0415

    for entry in cap.manifest.get("arms") or []:
        crash = arm_crash(entry)
        if crash and isinstance(entry, dict) and entry.get("role", "arm") == "arm":
            notes.insert(0, f"arm {entry.get('name')} {crash_word(crash)}: {crash}; what it recorded before it ended is "
                            "counted, what it did not run is no finding about the site")
    if site and not len(verdicts):
        labels = sorted(set(launches["site_label"].dropna()) | set(sites.get("label", pd.Series(dtype=str)).dropna()))
        missing.append(no_launch_message(site, labels, cap.instruments(), cap.manifest.get("device")))
    return Analysis(cap, site, launches, calls, sites, counts, verdicts, missing, notes, facts, losses,
                    provenance=[p.to_dict() for p in provenance])


def site_launches(analysis: Analysis, arm: str, rank: int, label: str) -> pd.DataFrame:
    """Launches attributed to one site occurrence of one arm and rank (every instrument)."""
    lf = analysis.launches
    return lf[(lf["arm"] == arm) & (lf["rank"] == rank) & (lf["site_label"] == label)]


def site_calls(analysis: Analysis, arm: str, rank: int, label: str) -> pd.DataFrame:
    """cuBLASLt/cuBLAS calls attributed to one site occurrence (may be empty)."""
    cf = analysis.calls
    if not len(cf):
        return cf
    return cf[(cf["arm"] == arm) & (cf["rank"] == rank) & (cf["site_label"] == label)]


def site_summary(analysis: Analysis) -> pd.DataFrame:
    """One row per (arm, site, kernel): verdicts over all occurrences of the site.

    A kernel is NAMED for a site when it is NAMED in every occurrence that two families observed.
    """
    v = analysis.verdicts
    if not len(v):
        return v
    v = v.assign(site=[split_label(s)[0] for s in v["scope"]])
    out = []
    for (arm, site, kernel), g in v.groupby(["arm", "site", "kernel"], dropna=False, sort=False):
        verdicts = set(g["verdict"])
        verdict = NAMED if verdicts == {NAMED} else (CONFLICT if CONFLICT in verdicts else (
            DISAGREE if DISAGREE in verdicts else (SINGLE if verdicts == {SINGLE} else (
                AGREE_UNTIED if verdicts == {AGREE_UNTIED} else "MIXED"))))
        out.append({"arm": arm, "site": site, "kernel": kernel, "verdict": verdict,
                    "occurrences": len(g), "named_in": int((g["verdict"] == NAMED).sum())})
    return pd.DataFrame(out)
