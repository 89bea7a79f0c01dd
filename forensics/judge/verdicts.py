"""Verdicts across arms: arm comparison, discriminator table, one-flag toggle report.

Pure functions over :class:`forensics.judge.arm_evidence.Evidence` frames (built from a capture directory,
from a ``forensics.judge.analysis.Analysis``, or by hand). docs/verdicts.md explains how to read them.

* :func:`compare_arms` aligns site occurrences (``SITE#N`` per rank) across arms and classifies each.
* :func:`discriminator_table` tabulates captured instances of a site by axis (CLEAN/DIVERGENT/MIXED).
* :func:`toggle_report` says, for each ``toggle: {NAME: VALUE}`` arm, whether the kernel, the algo
  and the bits changed against the baseline arm.

Kernel identities here are *as seen by the instruments* (CUPTI family first, else ncu): they say
whether two arms launched the same thing; naming a kernel is the two-instrument rule's job
(``forensics analyze``), never this module's.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from forensics import instruments as reg
from forensics.judge.identity import identity_verdict  # noqa: F401 (re-exported; its home is identity.py)
from forensics.judge.arm_evidence import ALGO_COLUMNS, Evidence, from_analysis, kernel_family, load_evidence, missing
from forensics.capture.directory import Capture
from forensics.core.environment import RELEVANT_PREFIXES
from forensics.capture.exits import arm_crash
from forensics.core.words import (  # noqa: F401 (CLASSIFICATIONS, CONFLICT re-exported: compare's words)
    ARM_CRASHED,
    BITS_DIFFER_KERNEL_UNKNOWN,
    CLASSIFICATIONS,
    CLEAN,
    CONFLICT,
    DIVERGENT,
    IDENTICAL,
    INPUTS_DIFFER,
    MIXED,
    NAMED,
    NO_COUNTERPART,
    NO_DIFFERENCE_SEEN,
    NO_DIGEST,
    SAME_KERNEL_DIFFERENT_BITS,
    SELECTION_DIFFERS,
)
from forensics.core.site import Occurrence, is_gemm_label, parse_site, parse_site_or_occurrence, split_label

MEANING = {
    IDENTICAL: "inputs and output bit-identical by order-sensitive digests (and the same kernel/algo where known)",
    NO_DIFFERENCE_SEEN: ("inputs and output digests equal, but only by order-independent digests "
                         "(torch.hash_tensor, an XOR of the bits): no difference seen, equality not proven"),
    INPUTS_DIFFER: "a receiver: it consumed a value that already differed; walk back",
    SELECTION_DIFFERS: "different kernel symbol, grid/block or algo descriptor: a heuristic or config difference",
    SAME_KERNEL_DIFFERENT_BITS: "inputs matched, same kernel and algo, output differs: the kernel is nondeterministic",
    BITS_DIFFER_KERNEL_UNKNOWN: "inputs matched, output differs, no instrument attributed a kernel to the occurrence",
    NO_COUNTERPART: "the occurrence exists in one arm only: control flow diverged",
    NO_DIGEST: "a digest is missing (hash not recorded): bits cannot be compared",
    ARM_CRASHED: "the arm's process ended (a crash, an exit status or its timeout) before this occurrence ran: "
                 "not a control-flow divergence",
}

#: Variables that configure the instruments, not the computation: never a comparability difference.
INSTRUMENT_VARS = ("CUBLASLT_LOG_", "CUBLAS_LOGINFO_DBG", "CUBLAS_LOGDEST_DBG", "NVTX_INJECTION", "FORENSICS_",
                   "CUPTI_", "RANK", "LOCAL_RANK", "MASTER_PORT", "NVTE_NVTX_ENABLED")
VERSION_KEYS = ("torch", "cuda", "cudnn", "cublas", "cublaslt", "driver", "device", "transformer_engine",
                "sm_count", "capability")


# --------------------------------------------------------------------------- sources
def as_evidence(source: Any) -> Evidence:
    """Evidence from an Evidence, an Analysis (duck-typed), a Capture or a capture directory."""
    if isinstance(source, Evidence):
        return source
    if isinstance(source, (str, Path, Capture)):
        return load_evidence(source)
    if hasattr(source, "sites") and hasattr(source, "launches"):
        return from_analysis(source)
    raise TypeError(f"cannot build evidence from {type(source).__name__}")


def arm_entries(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Manifest arm entries by name (arms only, not instrument passes)."""
    return {a["name"]: a for a in manifest.get("arms", []) if a.get("role", "arm") == "arm"}


def baseline_arm(ev: Evidence) -> str | None:
    """The arm marked ``baseline: true``, else the first arm without a toggle."""
    entries = arm_entries(ev.manifest)
    for name, a in entries.items():
        if a.get("baseline"):
            return name
    for name, a in entries.items():
        if not a.get("toggle"):
            return name
    arms = sorted(set(ev.sites["arm"])) if len(ev.sites) else []
    return arms[0] if arms else None


def _arms(ev: Evidence) -> list[str]:
    names = list(arm_entries(ev.manifest))
    for a in sorted(set(ev.sites["arm"])) if len(ev.sites) else []:
        if a not in names:
            names.append(a)
    return names


def _select_sites(ev: Evidence, site: str | None) -> pd.DataFrame:
    df = ev.sites
    if site is None or df.empty:
        return df
    parsed = parse_site_or_occurrence(site)
    if isinstance(parsed, Occurrence):
        return df[df["label"] == str(parsed)]
    return df[df["site"] == str(parsed)]


# --------------------------------------------------------------------------- comparability
def arm_knobs(ev: Evidence, arm: str) -> dict[str, str]:
    """Determinism-relevant environment of an arm (manifest, environment.json, declared toggle); no instrument settings."""
    entry = arm_entries(ev.manifest).get(arm, {})
    env: dict[str, str] = {}
    environment = ev.environments.get(arm, {})
    for source in (ev.manifest.get("knobs"), ev.manifest.get("env"), environment.get("env"), entry.get("env"),
                   entry.get("knobs")):
        if isinstance(source, dict):
            env.update({str(k): str(v) for k, v in source.items()})
    env.update({str(k): str(v) for k, v in (entry.get("toggle") or {}).items()})
    return {k: v for k, v in env.items() if k.startswith(RELEVANT_PREFIXES) and not k.startswith(INSTRUMENT_VARS)}


def _arm_fact(ev: Evidence, arm: str, key: str) -> Any:
    entry = arm_entries(ev.manifest).get(arm, {})
    environment = ev.environments.get(arm, {})
    for source in (entry, entry.get("versions") or {}, environment, ev.manifest,
                   ev.manifest.get("environment") or {}):
        if isinstance(source, dict) and source.get(key) is not None:
            return source[key]
    return None


def comparability(ev: Evidence, arm: str, baseline: str) -> list[str]:
    """Why two arms are NOT comparable (empty list: comparable). The declared toggle may differ."""
    reasons: list[str] = []
    declared = set((arm_entries(ev.manifest).get(arm, {}).get("toggle") or {}))
    for key in ("command", "world_size", "seed"):
        if key in declared:
            continue  # an --arm-command arm: its command line is the declared difference
        a, b = _arm_fact(ev, baseline, key), _arm_fact(ev, arm, key)
        if a is not None and b is not None and a != b:
            reasons.append(f"{key} differs: {baseline}={a!r} {arm}={b!r}")
    for key in VERSION_KEYS:
        a, b = _arm_fact(ev, baseline, key), _arm_fact(ev, arm, key)
        if a is not None and b is not None and str(a) != str(b):
            reasons.append(f"version {key} differs: {baseline}={a} {arm}={b}")
    allowed = set((arm_entries(ev.manifest).get(arm, {}).get("toggle") or {}))
    allowed |= set((arm_entries(ev.manifest).get(baseline, {}).get("toggle") or {}))
    env_a, env_b = arm_knobs(ev, baseline), arm_knobs(ev, arm)
    for name in sorted(set(env_a) | set(env_b)):
        if name in allowed or env_a.get(name) == env_b.get(name):
            continue
        reasons.append(f"knob {name} differs outside the declared toggle: "
                       f"{baseline}={env_a.get(name, '<unset>')} {arm}={env_b.get(name, '<unset>')}")
    return reasons


# --------------------------------------------------------------------------- per-occurrence identity
def _as_rows(rows: Any) -> list[dict[str, Any]]:
    if rows is None:
        return []
    return rows.to_dict("records") if isinstance(rows, pd.DataFrame) else list(rows)


def kernel_signature(launches: Any) -> tuple:
    """(symbol, grid, block) of each launch of one occurrence (rows from one source, launch order)."""
    return tuple((str(r.get("kernel") if missing(r.get("mangled")) else r.get("mangled")), str(r.get("grid")),
                  str(r.get("block"))) for r in _as_rows(launches))


def algo_signature(calls: Any) -> tuple:
    """Algo descriptor of each matmul call of one occurrence (cuBLASLt log)."""
    return tuple(tuple(None if missing(r.get(c)) else str(r.get(c)) for c in ALGO_COLUMNS) for r in _as_rows(calls))


def _kernels_text(sig: tuple) -> str | None:
    return " + ".join(s[0] for s in sig) if sig else None


def _algo_text(sig: tuple) -> str | None:
    if not sig:
        return None
    return " | ".join(" ".join(f"{k}={v}" for k, v in zip(ALGO_COLUMNS, row) if v is not None) for row in sig)


def digests_equal(a: dict, b: dict, side: str) -> tuple[bool, bool]:
    """(equal, proven) for the ``side`` ("in"/"out") digests of two site rows with known keys.

    Different ``hash`` keys prove a difference. Equal ones prove nothing by themselves (the XOR of
    the bits is blind to a permutation or paired flips): equality is proven only when both rows
    carry order-sensitive keys (``ohash``) and those are equal; different ones prove a difference.
    """
    if a[f"{side}_key"] != b[f"{side}_key"]:
        return False, True
    oa, ob = a.get(f"{side}_okey"), b.get(f"{side}_okey")
    if missing(oa) or missing(ob):
        return True, False
    return oa == ob, True


def classify(a: dict | None, b: dict | None, kernels: tuple[tuple, tuple], algos: tuple[tuple, tuple]) -> str:
    """Classification of one aligned occurrence (site rows ``a`` baseline, ``b`` other arm)."""
    if a is None or b is None:
        return NO_COUNTERPART
    if a["in_key"] is None or b["in_key"] is None or a["out_key"] is None or b["out_key"] is None:
        return NO_DIGEST
    inputs_equal, inputs_proven = digests_equal(a, b, "in")
    if not inputs_equal:
        return INPUTS_DIFFER
    (ka, kb), (aa, ab) = kernels, algos
    if (ka and kb and ka != kb) or (aa and ab and aa != ab):
        return SELECTION_DIFFERS
    out_equal, out_proven = digests_equal(a, b, "out")
    if out_equal:
        return IDENTICAL if (inputs_proven and out_proven) else NO_DIFFERENCE_SEEN
    return SAME_KERNEL_DIFFERENT_BITS if (ka and kb) else BITS_DIFFER_KERNEL_UNKNOWN


# --------------------------------------------------------------------------- arm comparison
@dataclass
class ArmPair:
    """One arm against the baseline: comparability, per-occurrence classes, first divergence per rank."""

    baseline: str
    arm: str
    toggle: dict[str, Any]
    comparable: bool
    reasons: list[str]
    occurrences: pd.DataFrame  # OCCURRENCE_COLUMNS, baseline execution order per rank
    first_divergence: dict[int, dict[str, Any]] = field(default_factory=dict)
    crash: str | None = None  # why the arm's process did not run to its end (killed by SIGILL ...), from the manifest

    @property
    def crash_word(self) -> str | None:
        from forensics.capture.exits import crash_word  # noqa: PLC0415

        return crash_word(self.crash)

    def counts(self) -> dict[str, int]:
        if self.occurrences.empty:
            return {}
        return {k: int(v) for k, v in self.occurrences["classification"].value_counts().items()}

    def to_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "arm": self.arm, "toggle": self.toggle, "comparable": self.comparable,
                "reasons": self.reasons, "counts": self.counts(), "crash": self.crash, "crash_word": self.crash_word,
                "first_divergence": {str(r): v for r, v in self.first_divergence.items()},
                "occurrences": records(self.occurrences)}


@dataclass
class ArmComparison:
    """Every arm against the baseline arm (replica arms and toggle arms alike)."""

    baseline: str | None
    site: str | None
    pairs: list[ArmPair]

    def pair(self, arm: str) -> ArmPair:
        for p in self.pairs:
            if p.arm == arm:
                return p
        raise KeyError(f"no comparison for arm {arm!r} (arms: {', '.join(p.arm for p in self.pairs)})")

    @property
    def replicas(self) -> list[ArmPair]:
        """Pairs of identically configured arms (no toggle): where run-to-run divergence shows."""
        return [p for p in self.pairs if not p.toggle]

    def diverged(self) -> bool:
        return any(p.first_divergence or p.crash for p in self.pairs if p.comparable)

    def to_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "site": self.site, "pairs": [p.to_dict() for p in self.pairs]}


OCCURRENCE_COLUMNS = ["rank", "seq", "label", "site", "occurrence", "classification", "inputs_match",
                      "inputs_proven", "bits_differ", "bits_proven", "kernel_baseline", "kernel_arm", "grid_block_baseline", "grid_block_arm",
                      "algo_baseline", "algo_arm", "kernel_source", "detail", "implementation_baseline",
                      "implementation_arm"]


def _pair_occurrences(ev: Evidence, sites: pd.DataFrame, baseline: str, arm: str) -> pd.DataFrame:
    rows = []
    base, other = sites[sites["arm"] == baseline], sites[sites["arm"] == arm]
    for rank in sorted(set(base["rank"]) | set(other["rank"])):
        a_rows = base[base["rank"] == rank].sort_values("seq", kind="stable")
        b_index = {r["label"]: r for r in other[other["rank"] == rank].to_dict("records")}
        seen = set()
        ordered = [(r["label"], r) for r in a_rows.to_dict("records")]
        in_baseline = {x for x, _ in ordered}
        ordered += [(lbl, None) for lbl in b_index if lbl not in in_baseline]  # only in the other arm
        for seq, (label, a) in enumerate(ordered):
            if label in seen:
                continue
            seen.add(label)
            b = b_index.get(label)
            rows.append(_occurrence_row(ev, rank, seq, label, a, b, baseline, arm))
    return pd.DataFrame(rows, columns=OCCURRENCE_COLUMNS)


def _occurrence_row(ev: Evidence, rank: int, seq: int, label: str, a: dict | None, b: dict | None,
                    baseline: str, arm: str) -> dict[str, Any]:
    la = ev.launch_rows(baseline, rank, label) if a is not None else []
    lb = ev.launch_rows(arm, rank, label) if b is not None else []
    ka, kb = kernel_signature(la), kernel_signature(lb)
    aa = algo_signature(ev.call_rows(baseline, rank, label)) if a is not None else ()
    ab = algo_signature(ev.call_rows(arm, rank, label)) if b is not None else ()
    cls = classify(a, b, (ka, kb), (aa, ab))
    known = cls not in (NO_COUNTERPART, NO_DIGEST)
    ins = digests_equal(a, b, "in") if known else (None, None)
    outs = digests_equal(a, b, "out") if known else (None, None)
    inputs_match, inputs_proven = ins
    bits_differ = None if outs[0] is None else not outs[0]
    bits_proven = outs[1]
    detail = MEANING[cls]
    impl_a = implementation_text(la, ev.call_rows(baseline, rank, label)) if a is not None else None
    impl_b = implementation_text(lb, ev.call_rows(arm, rank, label)) if b is not None else None
    if cls == SELECTION_DIFFERS:
        launch_what = "kernel/grid/block" if any(x[1] not in ("None", "nan") for x in ka + kb) else "kernel"
        bits = "differ" if bits_differ else ("identical" if bits_proven else "no difference seen (order-independent digest)")
        if ka and kb and ka != kb:  # who ran, as the instruments named it on each side
            grid = launch_what != "kernel"
            ran_a = impl_a + (f" @ {' + '.join(f'{g}x{bl}' for _, g, bl in ka)}" if grid else "")
            ran_b = impl_b + (f" @ {' + '.join(f'{g}x{bl}' for _, g, bl in kb)}" if grid else "")
            detail = f"{launch_what} differs: {baseline} ran {ran_a}, {arm} ran {ran_b}"
            if aa and ab and aa != ab:
                detail += "; algo differs too"
        else:
            detail = f"algo differs: {baseline} ran {_algo_text(aa)}, {arm} ran {_algo_text(ab)}"
        detail += f"; bits {bits}"
    elif cls == SAME_KERNEL_DIFFERENT_BITS and not (aa and ab):
        detail += " (algo descriptor not captured)"
    elif cls == BITS_DIFFER_KERNEL_UNKNOWN and aa and ab:
        detail += " (cuBLASLt algo descriptor identical)"
    if inputs_match is True and not inputs_proven and cls != NO_DIFFERENCE_SEEN:
        detail += "; inputs equal by an order-independent digest only (unproven)"
    site, n = split_label(label)
    sources = sorted({str(r.get("instrument")) for r in la})
    return {"rank": int(rank), "seq": seq, "label": label, "site": site, "occurrence": n, "classification": cls,
            "inputs_match": inputs_match, "inputs_proven": inputs_proven, "bits_differ": bits_differ,
            "bits_proven": bits_proven,
            "kernel_baseline": _kernels_text(ka), "kernel_arm": _kernels_text(kb),
            "grid_block_baseline": " + ".join(f"{g}x{bl}" for _, g, bl in ka) or None,
            "grid_block_arm": " + ".join(f"{g}x{bl}" for _, g, bl in kb) or None,
            "algo_baseline": _algo_text(aa), "algo_arm": _algo_text(ab),
            "kernel_source": ",".join(sources) or None, "detail": detail,
            "implementation_baseline": impl_a, "implementation_arm": impl_b}


def implementation_text(launches: Any, calls: Any) -> str | None:
    """Who ran one occurrence, as the instruments named it: the kernel(s) (on the CPU the implementation
    op), with the library call a CPU log attributed (``aten::mkldnn_convolution -> oneDNN convolution
    jit_1x1:avx2``); None when no instrument attributed a kernel."""
    sig = kernel_signature(launches)
    if not sig:
        return None
    text = _kernels_text(sig)
    rows = _as_rows(calls)
    for inst in (i.name for i in reg.of_role(reg.CALLS) if i.per_execution):  # the CPU library logs
        mine = [r for r in rows if r.get("instrument") == inst]
        if mine:
            from forensics.judge.cpu import main_call  # noqa: PLC0415

            lib = main_call(pd.DataFrame(mine), inst)
            return f"{text} -> {lib}" if lib else text
    return text


def _first_divergence(occ: pd.DataFrame) -> dict[int, dict[str, Any]]:
    out = {}
    for rank, rows in occ.groupby("rank", sort=True):
        hit = rows[(rows["bits_differ"] == True) | rows["classification"].isin((NO_COUNTERPART, ARM_CRASHED))]  # noqa: E712
        if not hit.empty:
            row = hit.iloc[0].to_dict()
            row["role"] = ("origin" if row.get("inputs_proven") else "origin, unproven") if row["inputs_match"] is True \
                else ("receiver" if row["inputs_match"] is False else
                      "arm ended" if row["classification"] == ARM_CRASHED else "control flow")
            out[int(rank)] = _plain(row)
    return out


def compare_arms(source: Any, site: str | None = None, arms: list[str] | None = None,
                 baseline: str | None = None, force: bool = False) -> ArmComparison:
    """Compare every arm (or ``arms``) with the baseline arm, occurrence by occurrence.

    ``source``: Evidence, Analysis, Capture or capture directory. ``site``: a site (all its
    occurrences) or ``SITE#N``. Pairs that are not comparable (command, world size, versions or
    knobs other than the declared toggle differ) are not diffed unless ``force``.
    """
    ev = as_evidence(source)
    sites = _select_sites(ev, site)
    base = baseline or baseline_arm(ev)
    entries = arm_entries(ev.manifest)
    pairs = []
    for arm in arms or _arms(ev):
        if arm == base or base is None:
            continue
        reasons = comparability(ev, arm, base)
        toggle = dict(entries.get(arm, {}).get("toggle") or {})
        crash = arm_crash(entries.get(arm))
        base_crash = arm_crash(entries.get(base))
        if reasons and not force:
            occ = pd.DataFrame(columns=OCCURRENCE_COLUMNS)
        else:
            occ = _pair_occurrences(ev, sites, base, arm)
            # what a crashed arm (or a crashed baseline) lacks is missing because it ended, not control flow
            for who, why in ((arm, crash), (base, base_crash)):
                if why and not occ.empty:
                    lacks = (occ["classification"] == NO_COUNTERPART) & occ["inputs_match"].isna()
                    lacks &= ~occ["label"].isin(set(sites[sites["arm"] == who]["label"]))
                    occ.loc[lacks, "classification"] = ARM_CRASHED
                    occ.loc[lacks, "detail"] = f"{who} ended before it ran this occurrence: {why}"
        pairs.append(ArmPair(base, arm, toggle, not reasons, reasons, occ, _first_divergence(occ), crash))
    return ArmComparison(base, site, pairs)


# --------------------------------------------------------------------------- discriminator table
AXES = ("layout", "accumulate", "grad", "input dtypes", "output dtype", "m/n/k", "splitK", "reduction",
        "kernel family", "fused")
UNKNOWN = "unknown"


@dataclass
class DiscriminatorTable:
    """Captured instances by axis; ``separating`` lists the axes whose every value is pure CLEAN or DIVERGENT."""

    site: str | None
    instances: pd.DataFrame  # one row per instance: rank, label, site, pair, status, one column per axis
    cells: pd.DataFrame  # axis, value, clean, divergent, excluded, verdict
    separating: list[str]
    statement: str

    def to_dict(self) -> dict[str, Any]:
        return {"site": self.site, "separating": self.separating, "statement": self.statement,
                "cells": records(self.cells), "instances": records(self.instances)}

    def rows(self) -> pd.DataFrame:
        """The worked-example view: one row per distinct combination of axes, with its status counts."""
        if self.instances.empty:
            return self.instances
        keys = ["site", *AXES]
        g = self.instances.groupby(keys, dropna=False, sort=False)["status"]
        out = g.agg(clean=lambda s: int((s == CLEAN).sum()), divergent=lambda s: int((s == DIVERGENT).sum()))
        out = out.reset_index()
        out["verdict"] = [_cell(c, d) for c, d in zip(out["clean"], out["divergent"])]
        return out


def _cell(clean: int, divergent: int) -> str:
    if clean and divergent:
        return MIXED
    return DIVERGENT if divergent else CLEAN


def _instance_axes(ev: Evidence, arm: str, rank: int, label: str, site_row: dict) -> dict[str, str]:
    site = parse_site(site_row["site"])
    calls = ev.call_rows(arm, rank, label)
    launches = ev.launch_rows(arm, rank, label)
    call = calls[0] if calls else None
    in_dtypes = ",".join(str(d.get("dtype")) for d in site_row["in_digests"] or []) or UNKNOWN
    out_dtype = ",".join(str(d.get("dtype")) for d in site_row["out_digests"] or []) or UNKNOWN
    if call is not None and call.get("m") is not None:
        mnk = f"{call['m']}x{call['n']}x{call['k']}"
    elif site_row["out_digests"]:
        mnk = "out " + "x".join(str(x) for x in site_row["out_digests"][0].get("shape") or []) or UNKNOWN
    else:
        mnk = UNKNOWN
    sig = kernel_signature(launches)
    families = "+".join(dict.fromkeys(kernel_family(_demangled(launches, s[0])) for s in sig)) if sig else UNKNOWN
    meta = site_row.get("meta") or {}
    if "fused" in meta:
        fused = "fused" if meta["fused"] else "unfused"
    elif call is not None:
        fused = f"fused ({call['epilogue']})" if _present(call.get("epilogue")) else "unfused"
    else:
        fused = UNKNOWN
    return {
        "layout": site.layout or UNKNOWN,
        "accumulate": UNKNOWN if site.acc is None else str(site.acc),
        "grad": UNKNOWN if site.grad is None else str(site.grad),
        "input dtypes": in_dtypes, "output dtype": out_dtype, "m/n/k": mnk,
        "splitK": (str(call["num_splits_k"]) if _present(call.get("num_splits_k")) else "1") if call else UNKNOWN,
        "reduction": (str(call["reduction_scheme"]) if _present(call.get("reduction_scheme")) else "none")
        if call else UNKNOWN,
        "kernel family": families, "fused": fused,
    }


def _present(v: Any) -> bool:
    return not missing(v)


def _demangled(launches: list[dict[str, Any]], symbol: str) -> str:
    for r in launches:
        if symbol in (r.get("mangled"), r.get("kernel")):
            return str(r.get("kernel"))
    return symbol


def discriminator_table(source: Any, site: str | None = None, comparison: ArmComparison | None = None) -> DiscriminatorTable:
    """Tabulate every captured instance of ``site`` (default: all GEMM sites) by axis.

    Instances are occurrences aligned between the baseline and each comparable replica arm (no
    toggle). Status: CLEAN (identical), DIVERGENT (inputs matched, bits differ); receivers, missing
    counterparts and missing digests are counted as ``excluded``. Axis values come from the
    baseline arm's records. Built only from what was captured: no new run.
    """
    ev = as_evidence(source)
    comparison = comparison or compare_arms(ev, site)
    inst = []
    base_sites = ev.sites[ev.sites["arm"] == comparison.baseline] if len(ev.sites) else ev.sites
    index = {(r["rank"], r["label"]): r for r in base_sites.to_dict("records")}
    for pair in comparison.replicas:
        if not pair.comparable:
            continue
        for occ in pair.occurrences.to_dict("records"):
            row = index.get((occ["rank"], occ["label"]))
            if row is None:
                continue
            if site is None and not is_gemm_label(occ["site"]) and _has_gemm(base_sites):
                continue
            status = _status(occ)
            axes = _instance_axes(ev, comparison.baseline, occ["rank"], occ["label"], row)
            inst.append({"rank": occ["rank"], "label": occ["label"], "site": occ["site"],
                         "pair": f"{pair.baseline}/{pair.arm}", "classification": occ["classification"],
                         "status": status, **axes})
    instances = pd.DataFrame(inst, columns=["rank", "label", "site", "pair", "classification", "status", *AXES])
    cells, separating = _cells(instances)
    return DiscriminatorTable(site, instances, cells, separating, _statement(instances, cells, separating))


def _has_gemm(sites: pd.DataFrame) -> bool:
    return bool(len(sites)) and sites["site"].map(is_gemm_label).any()


def _status(occ: dict) -> str:
    if occ["classification"] in (IDENTICAL, NO_DIFFERENCE_SEEN):
        return CLEAN
    if occ["inputs_match"] is True and occ["bits_differ"] is True:
        return DIVERGENT
    return "excluded"


def _cells(instances: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    rows, separating = [], []
    for axis in AXES:
        axis_rows = []
        for value, grp in instances.groupby(axis, sort=True) if not instances.empty else []:
            clean, div = int((grp["status"] == CLEAN).sum()), int((grp["status"] == DIVERGENT).sum())
            excluded = int(len(grp) - clean - div)
            if clean or div:
                axis_rows.append({"axis": axis, "value": value, "clean": clean, "divergent": div,
                                  "excluded": excluded, "verdict": _cell(clean, div)})
        rows.extend(axis_rows)
        verdicts = {r["verdict"] for r in axis_rows}
        if verdicts == {CLEAN, DIVERGENT} and all(r["value"] != UNKNOWN for r in axis_rows):
            separating.append(axis)
    return pd.DataFrame(rows, columns=["axis", "value", "clean", "divergent", "excluded", "verdict"]), separating


def _statement(instances: pd.DataFrame, cells: pd.DataFrame, separating: list[str]) -> str:
    n_div = int((instances["status"] == DIVERGENT).sum()) if len(instances) else 0
    n_clean = int((instances["status"] == CLEAN).sum()) if len(instances) else 0
    if not n_div:
        return f"No divergent instance among {n_clean} clean ones: nothing to discriminate."
    if not n_clean:
        return f"All {n_div} instances diverge: no clean instance to discriminate against."

    def values(axis: str, verdict: str) -> str:
        v = cells[(cells["axis"] == axis) & (cells["verdict"] == verdict)]["value"]
        return ", ".join(map(str, v))

    if len(separating) == 1:
        ax = separating[0]
        return (f"The discriminator is {ax}: {values(ax, DIVERGENT)} DIVERGENT, {values(ax, CLEAN)} CLEAN "
                f"({n_div} divergent, {n_clean} clean instances).")
    if separating:
        parts = "; ".join(f"{ax}: {values(ax, DIVERGENT)} DIVERGENT" for ax in separating)
        return (f"{len(separating)} axes each separate clean from divergent, confounded in these records "
                f"({parts}); capture an instance that varies one of them alone to tell them apart.")
    return (f"No single axis separates clean from divergent ({n_div} divergent, {n_clean} clean instances); "
            "the break needs a combination of axes or an axis not recorded here.")


# --------------------------------------------------------------------------- toggle report
def toggle_text(toggle: dict[str, Any]) -> str:
    """A declared difference as text: ``OMP_NUM_THREADS=2``, or ``command 'python train.py --threads 2'``."""
    return ", ".join(f"command {v!r}" if k == "command" else f"{k}={v}" for k, v in toggle.items())


@dataclass
class ToggleResult:
    """One toggle arm against the baseline: did the kernel, the algo, the bits change at the site?

    Each of ``kernel_changed``/``algo_changed``/``bits_changed`` is True (in some occurrence),
    False (in none, all known) or None (unknown: not captured).
    """

    arm: str
    toggle: dict[str, Any]
    baseline: str
    comparable: bool
    reasons: list[str]
    kernel_changed: bool | None
    algo_changed: bool | None
    bits_changed: bool | None
    occurrences: pd.DataFrame  # rank, label, kernel_changed, algo_changed, bits_changed, inputs_changed, ...
    baseline_run_to_run: str | None = None  # replica arms' own behaviour, to read bits_changed against
    #: False when ``bits_changed`` is False only by order-independent digests somewhere (not proven).
    bits_unchanged_proven: bool = True
    crash: str | None = None  # the arm's process did not run to its end: a finding of its own

    @property
    def crash_word(self) -> str | None:
        from forensics.capture.exits import crash_word  # noqa: PLC0415

        return crash_word(self.crash)

    def summary(self) -> str:
        def word(v: bool | None, what: str) -> str:
            if what == "bits" and v is False and not self.bits_unchanged_proven:
                return "bits: no change seen (order-independent digests only: unproven)"
            return f"{what} unknown" if v is None else f"{what} {'CHANGED' if v else 'unchanged'}"

        knob = toggle_text(self.toggle)
        if self.crash:
            return (f"{knob}: {self.crash_word}: {self.crash}: the program does not run to its end with this "
                    f"setting (vs {self.baseline}, which did)")
        if not self.comparable:
            return f"{knob}: NOT COMPARABLE with {self.baseline} ({'; '.join(self.reasons)})"
        kernel = word(self.kernel_changed, 'kernel')
        if self.kernel_changed and "implementation_arm" in self.occurrences:
            hit = self.occurrences[self.occurrences["kernel_changed"] == True]  # noqa: E712
            if len(hit):
                row = hit.iloc[0]
                kernel += (f" ({self.baseline} ran {row['implementation_baseline']}, {self.arm} ran "
                           f"{row['implementation_arm']}{' at ' + str(row['label']) if len(self.occurrences) > 1 else ''})")
        return f"{knob}: {kernel}, {word(self.algo_changed, 'algo')}, {word(self.bits_changed, 'bits')} (vs {self.baseline})"

    def to_dict(self) -> dict[str, Any]:
        return {"arm": self.arm, "toggle": self.toggle, "baseline": self.baseline, "comparable": self.comparable,
                "reasons": self.reasons, "kernel_changed": self.kernel_changed, "algo_changed": self.algo_changed,
                "bits_changed": self.bits_changed, "bits_unchanged_proven": self.bits_unchanged_proven,
                "crash": self.crash, "crash_word": self.crash_word,
                "baseline_run_to_run": self.baseline_run_to_run,
                "summary": self.summary(), "occurrences": records(self.occurrences)}


@dataclass
class ToggleReport:
    """Every toggle arm of a capture against its baseline, for one site (or all sites)."""

    site: str | None
    baseline: str | None
    results: list[ToggleResult]

    def for_knob(self, name: str) -> list[ToggleResult]:
        """Results of the arms that toggled ``name`` (what ``forensics knob`` reads)."""
        return [r for r in self.results if name in r.toggle]

    def to_dict(self) -> dict[str, Any]:
        return {"site": self.site, "baseline": self.baseline, "results": [r.to_dict() for r in self.results]}


def _any(values: list[bool | None]) -> bool | None:
    if any(v is True for v in values):
        return True
    if values and all(v is False for v in values):
        return False
    return None


def toggle_report(source: Any, site: str | None = None, names: list[str] | None = None,
                  comparison: ArmComparison | None = None) -> ToggleReport:
    """For each arm whose manifest entry has ``toggle: {NAME: VALUE}``, what changed against the baseline.

    Per occurrence: kernel changed (symbol, grid or block), algo changed (cuBLASLt descriptor), bits
    changed (output digest), inputs changed; unknown (None) where an instrument did not capture it.
    ``names`` keeps only toggles of those knobs. ``baseline_run_to_run`` says whether identically
    configured replica arms already differ, since then a bit change proves nothing about the knob.
    """
    ev = as_evidence(source)
    comparison = comparison or compare_arms(ev, site, force=True)
    replica = [p for p in comparison.replicas if p.comparable]
    run_to_run = None
    if replica:
        div = sum(int((p.occurrences["bits_differ"] == True).sum()) for p in replica)  # noqa: E712
        proven = all(bool(v) for p in replica for v in p.occurrences["bits_proven"])
        arms = ", ".join(p.arm for p in replica)
        run_to_run = (f"replica arms ({arms}) differ from {comparison.baseline} in {div} occurrence(s)" if div else
                      f"replica arms ({arms}) are bit-identical to {comparison.baseline}" if proven else
                      f"replica arms ({arms}) show no difference from {comparison.baseline} "
                      "(order-independent digests only: equality unproven)")
    results = []
    for pair in comparison.pairs:
        if not pair.toggle or (names and not set(names) & set(pair.toggle)):
            continue
        occ = pair.occurrences
        per = pd.DataFrame({
            "rank": occ["rank"], "label": occ["label"], "classification": occ["classification"],
            "kernel_changed": [_changed(a, b) for a, b in zip(_combine(occ, "kernel"), _combine(occ, "kernel", arm=True))],
            "algo_changed": [_changed(a, b) for a, b in zip(occ["algo_baseline"], occ["algo_arm"])],
            "bits_changed": occ["bits_differ"], "inputs_changed": occ["inputs_match"].map(
                lambda v: None if v is None else not v),
            "kernel_baseline": occ["kernel_baseline"], "kernel_arm": occ["kernel_arm"],
            "algo_baseline": occ["algo_baseline"], "algo_arm": occ["algo_arm"],
            "implementation_baseline": occ["implementation_baseline"], "implementation_arm": occ["implementation_arm"]})
        unchanged = occ[occ["bits_differ"] == False]  # noqa: E712
        results.append(ToggleResult(pair.arm, pair.toggle, pair.baseline, pair.comparable, pair.reasons,
                                    _any(list(per["kernel_changed"])), _any(list(per["algo_changed"])),
                                    _any([None if pd.isna(v) else bool(v) for v in per["bits_changed"]]),
                                    per, run_to_run, all(bool(v) for v in unchanged["bits_proven"]), pair.crash))
    return ToggleReport(site, comparison.baseline, results)


def _combine(occ: pd.DataFrame, what: str, arm: bool = False) -> list[str | None]:
    side = "arm" if arm else "baseline"
    return [None if k is None else f"{k} @ {g}" for k, g in zip(occ[f"{what}_{side}"], occ[f"grid_block_{side}"])]


def _changed(a: Any, b: Any) -> bool | None:
    if a is None or b is None or (isinstance(a, float) and pd.isna(a)) or (isinstance(b, float) and pd.isna(b)):
        return None
    return a != b


# --------------------------------------------------------------------------- helpers
def _plain(v: Any) -> Any:
    """JSON-safe plain Python values (numpy scalars, NA, tuples)."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if v is None or v is pd.NA:
        return None
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):
        try:
            return v.item()
        except (ValueError, AttributeError):
            pass
    if isinstance(v, float) and v != v:  # NaN
        return None
    return v


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [_plain(r) for r in df.to_dict("records")]
