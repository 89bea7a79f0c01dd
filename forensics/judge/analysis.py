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
**SINGLE-SOURCE** (one family saw the scope; the missing instrument is named).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from forensics.capture.directory import Capture, InstrumentFile, load_capture
from forensics.errors import BadInput, doing
from forensics.model import FAMILY, LAUNCH_COLUMNS, conform, empty_frame
from forensics.site import parse_site_or_occurrence, split_label

NAMED, DISAGREE, SINGLE = "NAMED", "DISAGREE", "SINGLE-SOURCE"
WINDOW = "<window>"
FAMILIES = ("cupti", "ncu", "cublaslt")
FAMILY_LABEL = {"cupti": "CUPTI family (cupti/kineto/nsys)", "ncu": "Nsight Compute", "cublaslt": "cuBLASLt log"}
#: Instruments of the CUPTI family in order of preference when several saw the same arm/rank.
CUPTI_PREFERENCE = ("cupti", "nsys", "kineto")
_GEMM_KERNEL = re.compile(r"gemm|gemv|xmma|cutlass|matmul|splitKreduce|cublas", re.I)
COUNT_COLUMNS = ["cupti", "kineto", "nsys", "ncu", "cublaslt"]


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

    @property
    def named(self) -> pd.DataFrame:
        return self.verdicts[self.verdicts["verdict"] == NAMED]

    def any_named(self) -> bool:
        return bool(len(self.named))

    def to_json(self) -> dict[str, Any]:
        def rows(df: pd.DataFrame) -> list[dict[str, Any]]:
            return json.loads(df.to_json(orient="records", default_handler=str)) if len(df) else []

        return {
            "capture": str(self.capture.root),
            "site": self.site,
            "arms": self.capture.arms,
            "instruments": sorted(self.capture.instruments()),
            "missing": self.missing,
            "notes": self.notes,
            "verdicts": rows(self.verdicts),
            "counts": rows(self.counts),
            "files": [
                {"instrument": f.instrument, "path": str(f.path), "arm": f.arm, "rank": f.rank, "pid": f.pid}
                for f in self.capture.files
            ],
        }


# --------------------------------------------------------------------------- loading
def _read_launches(f: InstrumentFile, sites: pd.DataFrame) -> pd.DataFrame | None:
    """Launch frame of one instrument file, with ``site_label`` attributed where possible."""
    if f.instrument == "cupti":
        from parsers import cupti_jsonl

        df = cupti_jsonl.read_kernels(f.path)
        if len(df) and len(sites):
            ids = sites.dropna(subset=["external_id"])
            label_of = dict(zip(ids["external_id"].astype("int64"), ids["label"]))
            df["site_label"] = df["external_id"].map(lambda e: label_of.get(int(e)) if pd.notna(e) else None)
        return df
    if f.instrument == "nsys":
        from parsers import nsys

        df = nsys.read_kernels(f.path)
        ranges = nsys.read_ranges(f.path)
        return nsys.attribute(df, ranges) if len(ranges) else df
    if f.instrument == "kineto":
        from parsers import kineto

        return kineto.read_kernels(f.path)
    if f.instrument == "ncu":
        from parsers import ncu

        return ncu.read_report(f.path)
    if f.instrument == "ncu_csv":
        from parsers import ncu

        return ncu.read_csv(f.path)
    return None


def _read_calls(f: InstrumentFile) -> pd.DataFrame | None:
    if f.instrument == "cublaslt":
        from parsers import cublaslt

        return cublaslt.read_log(f.path).calls
    if f.instrument == "cublas":
        from parsers import cublas_legacy

        return cublas_legacy.read_log(f.path)
    return None


def _sites_of(cap: Capture) -> pd.DataFrame:
    from parsers import sites_jsonl

    frames = []
    for f in cap.of("sites"):
        df = sites_jsonl.read_sites(f.path)
        df = df.assign(folder=f.arm, arm=cap.arm_of(f.arm), rank=f.rank if f.rank is not None else df.get("rank"))
        frames.append(df)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["folder", "arm", "rank", "label", "site", "occurrence", "external_id", "pid"])


def _pid_ranks(sites: pd.DataFrame) -> dict[tuple[str, int], int]:
    """(folder, pid) -> rank, from the pids the site probes recorded."""
    if not len(sites) or "pid" not in sites:
        return {}
    known = sites.dropna(subset=["pid"])
    return {(fo, int(p)): int(r) for fo, p, r in zip(known["folder"], known["pid"], known["rank"]) if pd.notna(r)}


def load(cap: Capture, keep_going: bool = False, notes: list[str] | None = None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Read every instrument file of a capture: (launches, calls, sites)."""
    notes = [] if notes is None else notes
    sites = _sites_of(cap)
    pid_rank = _pid_ranks(sites)
    launch_frames, call_frames = [], []
    have_rep = {(f.arm, f.rank) for f in cap.of("ncu")}
    for f in cap.files:
        if f.instrument == "ncu_csv" and (f.arm, f.rank) in have_rep:
            continue  # the .ncu-rep of the same pass already counts; a CSV export would double it
        rank = pid_rank.get((f.arm, f.pid), f.rank) if f.pid is not None else f.rank
        try:
            fsites = sites[(sites["folder"] == f.arm) & (sites["rank"] == rank)] if len(sites) else sites
            with doing(f"reading {f.path} ({f.instrument})"):
                df = _read_launches(f, fsites)
            if df is not None:
                df = df.assign(folder=f.arm, arm=cap.arm_of(f.arm), rank=rank, instrument=f.instrument,
                               file=str(f.path))
                launch_frames.append(df)
                continue
            with doing(f"reading {f.path} ({f.instrument})"):
                calls = _read_calls(f)
            if calls is not None:
                calls = calls.assign(folder=f.arm, arm=cap.arm_of(f.arm), rank=rank, instrument=f.instrument,
                                     file=str(f.path), pid=f.pid if f.pid is not None else calls.get("pid"))
                call_frames.append(calls)
        except BadInput as e:
            if not keep_going:
                raise
            notes.append(f"skipped {e}")
        except ImportError as e:
            notes.append(f"cannot read {f.path} ({f.instrument}): {e}")
    launches = pd.concat([conform(d, LAUNCH_COLUMNS) for d in launch_frames], ignore_index=True) if launch_frames \
        else empty_frame(LAUNCH_COLUMNS)
    if "folder" not in launches:
        launches["folder"] = pd.Series(dtype="string")
    launches["family"] = launches["instrument"].map(FAMILY).astype("string")
    launches["key"] = launches["kernel"].fillna(launches["short_name"]).astype("string").str.replace(r"\s+", "", regex=True)
    calls = pd.concat(call_frames, ignore_index=True) if call_frames else pd.DataFrame(
        columns=["folder", "arm", "rank", "instrument", "file", "pid", "m", "n", "k"])
    if len(calls):
        calls = attribute_calls(calls, sites)
    elif "site_label" not in calls:
        calls["site_label"] = pd.Series(dtype="string")
    return launches, calls, sites


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
    calls = calls.copy()
    calls["site_label"] = pd.Series([None] * len(calls), dtype="object", index=calls.index)
    if not len(sites):
        return calls
    gemm_sites = sites[sites["site"].astype(str).str.startswith(("gemm:", "aten.mm", "aten.addmm", "aten.bmm",
                                                                   "aten.baddbmm", "aten._scaled_mm"))]
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


def count_launches(launches: pd.DataFrame, calls: pd.DataFrame, site: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per (arm, rank, scope, kernel) counts per instrument, and which families observed each scope.

    Returns ``(counts, observed)``; ``observed`` has one row per (arm, rank, scope, family) that
    saw the scope at all (a family that saw a scope but not a kernel counts 0 for it).
    """
    use_sites = launches["site_label"].notna().any() or (len(calls) and calls["site_label"].notna().any())
    lf = launches.copy()
    lf["scope"] = [_scope_of(x, use_sites) for x in lf["site_label"]]
    cf = calls.copy()
    cf["scope"] = [_scope_of(x, use_sites) for x in cf.get("site_label", pd.Series([None] * len(cf)))]
    if use_sites:  # a launch outside every site range belongs to no scope we judge
        lf = lf[lf["scope"] != WINDOW]
        cf = cf[cf["scope"] != WINDOW]
    if site:
        want = parse_site_or_occurrence(site)
        text = str(want)
        if "#" in text:
            lf, cf = lf[lf["scope"] == text], cf[cf["scope"] == text]
        else:
            lf = lf[[split_label(s)[0] == text for s in lf["scope"]]]
            cf = cf[[split_label(s)[0] == text for s in cf["scope"]]]
    lf = _one_source_per_family(lf)
    cf = _one_folder(cf)
    keys = ["arm", "rank", "scope"]
    counts = (lf.groupby(keys + ["key", "instrument"], dropna=False).size().unstack("instrument", fill_value=0)
              if len(lf) else pd.DataFrame())
    counts = counts.reset_index() if len(counts) else pd.DataFrame(columns=keys + ["key"])
    for c in COUNT_COLUMNS:
        if c not in counts:
            counts[c] = 0
    # Names from every instrument that saw the kernel: the first non-null of each (nsys 2021 exports
    # have no mangled name; ncu does).
    names = (lf.groupby("key")[["kernel", "mangled", "short_name"]].first() if len(lf)
             else pd.DataFrame(columns=["kernel", "mangled", "short_name"]))
    for col in ("kernel", "mangled", "short_name"):
        counts[col] = counts["key"].map(lambda k, c=col: names[c].get(k) if k in names.index else None)
    ncalls = cf.groupby(keys, dropna=False).size().rename("calls").reset_index() if len(cf) else pd.DataFrame(columns=keys + ["calls"])
    counts = counts.drop(columns=["cublaslt"]).merge(ncalls.rename(columns={"calls": "cublaslt"}), on=keys, how="left")
    counts["cublaslt"] = counts["cublaslt"].fillna(0).astype("Int64")
    # The log counts matmul calls per scope, not launches of a kernel: it says nothing of others.
    gemm_like = counts["kernel"].fillna(counts["key"]).astype(str).str.contains(_GEMM_KERNEL)
    counts.loc[~gemm_like, "cublaslt"] = pd.NA
    obs = []
    if len(lf):
        obs.append(lf[keys + ["family"]].drop_duplicates())
    if len(cf):
        obs.append(cf[keys].drop_duplicates().assign(family="cublaslt"))
    observed = pd.concat(obs, ignore_index=True) if obs else pd.DataFrame(columns=keys + ["family"])
    return counts, observed


def _one_source_per_family(lf: pd.DataFrame) -> pd.DataFrame:
    """Within one (arm, rank) keep one instrument per family, and one folder per instrument.

    CUPTI, nsys and Kineto are one source: counting two of them would be counting one thing twice.
    The arm's own folder is preferred over a pass folder (e.g. ``a1`` over ``kineto``).
    """
    if not len(lf):
        return lf
    keep = []
    for (_arm, _rank, fam), g in lf.groupby(["arm", "rank", "family"], dropna=False, sort=False):
        if fam == "cupti":
            present = [i for i in CUPTI_PREFERENCE if i in set(g["instrument"])]
            g = g[g["instrument"] == present[0]] if present else g
        folders = list(dict.fromkeys(g["folder"]))
        own = [f for f in folders if f == g["arm"].iloc[0]]
        g = g[g["folder"] == (own[0] if own else folders[0])]
        keep.append(g)
    return pd.concat(keep, ignore_index=True)


def _one_folder(cf: pd.DataFrame) -> pd.DataFrame:
    """cuBLASLt log first, legacy cuBLAS log only where no Lt log exists; one folder per arm/rank."""
    if not len(cf):
        return cf
    keep = []
    for (_arm, _rank), g in cf.groupby(["arm", "rank"], dropna=False, sort=False):
        inst = "cublaslt" if (g["instrument"] == "cublaslt").any() else g["instrument"].iloc[0]
        g = g[g["instrument"] == inst]
        folders = list(dict.fromkeys(g["folder"]))
        own = [f for f in folders if f == g["arm"].iloc[0]]
        keep.append(g[g["folder"] == (own[0] if own else folders[0])])
    return pd.concat(keep, ignore_index=True)


def judge(counts: pd.DataFrame, observed: pd.DataFrame) -> pd.DataFrame:
    """Apply the two-instrument rule to every (arm, rank, scope, kernel)."""
    rows = []
    obs = observed.groupby(["arm", "rank", "scope"], dropna=False)["family"].agg(set).to_dict() if len(observed) else {}
    for r in counts.itertuples(index=False):
        fams = obs.get((r.arm, r.rank, r.scope), set())
        cupti_inst = next((i for i in CUPTI_PREFERENCE if getattr(r, i, 0)), None)
        by_family: dict[str, int] = {}
        if "cupti" in fams:
            by_family["cupti"] = int(getattr(r, cupti_inst)) if cupti_inst else 0
        if "ncu" in fams:
            by_family["ncu"] = int(r.ncu)
        gemm_like = bool(_GEMM_KERNEL.search(str(r.kernel or r.key)))
        if "cublaslt" in fams and gemm_like:
            by_family["cublaslt"] = int(r.cublaslt)
        verdict, reason = _rule(by_family, fams, gemm_like, cupti_inst)
        rows.append({
            "arm": r.arm, "rank": r.rank, "scope": r.scope, "kernel": r.kernel, "mangled": r.mangled,
            "short_name": r.short_name, "verdict": verdict, "counts": by_family,
            "cupti_instrument": cupti_inst, "reason": reason,
        })
    cols = ["arm", "rank", "scope", "kernel", "mangled", "short_name", "verdict", "counts", "cupti_instrument", "reason"]
    return pd.DataFrame(rows, columns=cols)


def _rule(by_family: dict[str, int], fams: set[str], gemm_like: bool, cupti_inst: str | None) -> tuple[str, str]:
    seen = {f: c for f, c in by_family.items()}
    if len(seen) < 2:
        only = next(iter(seen), None)
        lacking = [FAMILY_LABEL[f] for f in FAMILIES if f not in seen]
        if only is None:
            return SINGLE, "no instrument counted this kernel in this scope"
        why = f"only {FAMILY_LABEL[only]} saw this scope; missing: {', '.join(lacking)}"
        if "cublaslt" in fams and not gemm_like:
            why += " (the cuBLASLt log confirms GEMM kernels only)"
        return SINGLE, why
    values = set(seen.values())
    text = ", ".join(f"{f}={c}" for f, c in seen.items())
    if len(values) == 1 and next(iter(values)) > 0:
        src = " + ".join(("cupti:" + cupti_inst) if f == "cupti" and cupti_inst else f for f in seen)
        return NAMED, f"{src} agree on {next(iter(values))} launch(es)"
    return DISAGREE, f"launch counts differ: {text}"


# --------------------------------------------------------------------------- entry point
def analyze(capture: str | Path | Capture, site: str | None = None, keep_going: bool = False) -> Analysis:
    """Load a capture directory and apply the two-instrument rule (offline; no GPU)."""
    cap = capture if isinstance(capture, Capture) else load_capture(capture)
    if site:
        parse_site_or_occurrence(site)  # fail early on a malformed site
    notes: list[str] = []
    launches, calls, sites = load(cap, keep_going=keep_going, notes=notes)
    counts, observed = count_launches(launches, calls, site)
    verdicts = judge(counts, observed)
    missing = list(cap.missing)
    if site and not len(verdicts):
        labels = sorted(set(launches["site_label"].dropna()) | set(sites.get("label", pd.Series(dtype=str)).dropna()))
        missing.append(f"no launch attributed to site {site} (sites seen: {', '.join(labels[:8]) or 'none'})")
    return Analysis(cap, site, launches, calls, sites, counts, verdicts, missing, notes)


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
        verdict = NAMED if verdicts == {NAMED} else (DISAGREE if DISAGREE in verdicts else
                                                      (SINGLE if verdicts == {SINGLE} else "MIXED"))
        out.append({"arm": arm, "site": site, "kernel": kernel, "verdict": verdict,
                    "occurrences": len(g), "named_in": int((g["verdict"] == NAMED).sum())})
    return pd.DataFrame(out)
