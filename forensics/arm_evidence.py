"""Per-arm evidence for verdicts, on top of ``forensics.analysis`` (which reads every instrument).

:class:`Evidence` holds the frames verdicts need (sites, launches, calls), the manifest and each
arm's ``environment.json``, and answers "which launches / matmul calls belong to this site
occurrence of this arm" with one source per question, so a launch seen by two instruments, or
a pass folder's repeat of an arm (ncu, nsys, kineto passes), is never counted twice.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from forensics.capture import Capture, load_capture
from forensics.errors import BadInput

#: Launch sources in order of preference for "which kernel ran": one CUPTI-family instrument, else ncu.
LAUNCH_PREFERENCE = ("cupti", "nsys", "kineto", "ncu")
#: Algo descriptor columns compared across arms (cuBLASLt log).
ALGO_COLUMNS = ["algo_id", "tile", "stages", "custom_option", "num_splits_k", "reduction_scheme",
                "cta_swizzling", "cluster_shape"]


@dataclass
class Evidence:
    """What verdicts read. ``analysis`` is the ``forensics.analysis.Analysis`` it came from, if any."""

    manifest: dict[str, Any]
    sites: pd.DataFrame  # one row per occurrence of the arm's own folder: arm rank seq label site ... in_key out_key
    launches: pd.DataFrame  # LAUNCH_COLUMNS (+ folder, family)
    calls: pd.DataFrame  # cuBLASLt/cuBLAS calls with site_label
    environments: dict[str, dict[str, Any]] = field(default_factory=dict)  # arm -> environment.json
    capture: Capture | None = None
    analysis: Any = None

    _index: dict[str, dict] = field(default_factory=dict, repr=False)

    def occurrence_launches(self, arm: str, rank: int, label: str) -> pd.DataFrame:
        """Launches of one occurrence from ONE source (see :data:`LAUNCH_PREFERENCE`), launch order."""
        return one_source(self._group("launches", arm, rank, label), arm, LAUNCH_PREFERENCE)

    def occurrence_calls(self, arm: str, rank: int, label: str) -> pd.DataFrame:
        """Matmul calls of one occurrence from one log (cuBLASLt over legacy cuBLAS), host order."""
        return one_source(self._group("calls", arm, rank, label), arm, ("cublaslt", "cublas"))

    def _group(self, kind: str, arm: str, rank: int, label: str) -> pd.DataFrame:
        """Rows of ``kind`` for one occurrence; the frame is split once (slim columns) and cached."""
        df = getattr(self, kind)
        if kind not in self._index:
            if df is None or df.empty or "site_label" not in df.columns:
                self._index[kind] = {}
            else:
                slim = df.loc[df["site_label"].notna(), [c for c in df.columns if c in _SLIM]]
                self._index[kind] = {(a, int(r), str(lbl)): g for (a, r, lbl), g in
                                     slim.groupby(["arm", "rank", "site_label"], sort=False, dropna=True)}
        hit = self._index[kind].get((arm, int(rank), str(label)))
        if hit is None:
            return pd.DataFrame(columns=[c for c in (df.columns if df is not None else []) if c in _SLIM])
        return hit


#: Columns verdicts and bundles read from launch and call frames (the rest stay in the full frames).
_SLIM = {"instrument", "folder", "file", "line", "arm", "rank", "pid", "site_label", "kernel", "mangled",
         "short_name", "grid", "block", "start_ns", "end_ns", "correlation_id", "external_id", "m", "n", "k",
         "transa", "transb", "layout", "a_type", "b_type", "c_type", "d_type", "compute_type", "scale_type",
         "epilogue", "beta", "raw", "lda", "ldb", "ldc", "ldd", "algo_id", "tile", "stages", "custom_option",
         "num_splits_k", "reduction_scheme", "cta_swizzling", "cluster_shape", "scheduling_mode", "inner_shape"}


def one_source(df: pd.DataFrame, arm: str, preference: tuple[str, ...]) -> pd.DataFrame:
    """Rows of the most preferred instrument present, from one folder (the arm's own first)."""
    if df.empty:
        return df
    if "instrument" in df.columns:
        present = [i for i in preference if (df["instrument"] == i).any()]
        if present:
            df = df[df["instrument"] == present[0]]
    if "folder" in df.columns:
        folders = list(dict.fromkeys(df["folder"].astype(str)))
        df = df[df["folder"].astype(str) == (arm if arm in folders else folders[0])]
    for col in ("start_ns", "line"):
        if col in df.columns and df[col].notna().all():
            return df.sort_values(col, kind="stable")
    return df


def load_evidence(capture: str | Path | Capture) -> Evidence:
    """Analyse a capture directory (``forensics.analysis.analyze``) and wrap the result."""
    from forensics.analysis import analyze  # noqa: PLC0415

    cap = capture if isinstance(capture, Capture) else load_capture(capture)
    return from_analysis(analyze(cap))


def from_analysis(analysis: Any) -> Evidence:
    """Wrap a ``forensics.analysis.Analysis`` (duck-typed: capture, sites, launches, calls)."""
    cap = getattr(analysis, "capture", None)
    return Evidence(manifest=(cap.manifest if cap is not None else {}) or {},
                    sites=own_sites(getattr(analysis, "sites", pd.DataFrame())),
                    launches=getattr(analysis, "launches", pd.DataFrame()),
                    calls=getattr(analysis, "calls", pd.DataFrame()),
                    environments=read_environments(cap), capture=cap, analysis=analysis)


SITE_COLUMNS = ["arm", "rank", "seq", "label", "site", "occurrence", "iteration", "external_id",
                "in_key", "out_key", "in_digests", "out_digests", "meta"]


def own_sites(sites: pd.DataFrame) -> pd.DataFrame:
    """Site rows of each arm's own folder (a pass folder repeats its arm's sites), with ``seq``.

    ``seq`` is the record order within (arm, rank): the execution order the first-divergence
    walk uses.
    """
    df = sites.copy() if sites is not None else pd.DataFrame()
    if df.empty:
        return pd.DataFrame(columns=SITE_COLUMNS)
    if "folder" in df.columns:
        df = df[df["folder"].astype(str) == df["arm"].astype(str)]
    for col in SITE_COLUMNS:
        if col not in df.columns:
            df[col] = None
    df["rank"] = df["rank"].fillna(0).astype(int)
    df["meta"] = [m if isinstance(m, dict) else {} for m in df["meta"]]
    order = [c for c in ("line",) if c in df.columns]
    df = df.sort_values(["arm", "rank", *order], kind="stable")
    df["seq"] = df.groupby(["arm", "rank"]).cumcount()
    return df.reset_index(drop=True)


def read_environments(cap: Capture | None) -> dict[str, dict[str, Any]]:
    """Per-arm environment: the arm's own environment.json (lowest rank first), if any."""
    envs: dict[str, dict[str, Any]] = {}
    if cap is None:
        return envs
    files = sorted(cap.of("environment"), key=lambda f: (f.arm != cap.arm_of(f.arm), f.arm, f.rank or 0))
    for f in files:
        arm = cap.arm_of(f.arm)
        if arm in envs:
            continue
        try:
            data = json.loads(f.path.read_text())
        except json.JSONDecodeError as e:
            raise BadInput(f.path, f"not valid JSON: {e.msg}", e.lineno) from None
        if isinstance(data, dict):
            envs[arm] = data
    return envs


def kernel_family(name: str | None) -> str:
    """Coarse kernel family from a (demangled) name: splitKreduce, gemv, cutlass, sm90_xmma, nvjet..."""
    if not isinstance(name, str) or not name:
        return "unknown"
    low = name.lower()
    for token, family in (("splitkreduce", "splitKreduce"), ("gemv", "gemv"), ("nvjet", "nvjet"),
                          ("cutlass", "cutlass"), ("indexfunc", "index"), ("index_add", "index")):
        if token in low:
            return family
    m = re.search(r"(sm\d+)_xmma", low)
    if m:
        return f"{m.group(1)}_xmma"
    m = re.search(r"([a-z]+)_([a-z]*gemm)", low)
    if m:
        return f"{m.group(1)}_{m.group(2)}"
    from parsers.demangle import short_name  # noqa: PLC0415

    return short_name(name) or "unknown"
