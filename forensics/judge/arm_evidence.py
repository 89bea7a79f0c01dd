"""Per-arm evidence for verdicts, on top of ``forensics.judge.analysis`` (which reads every instrument).

:class:`Evidence` holds the frames verdicts need (sites, launches, calls), the manifest and each
arm's ``environment.json``, and answers "which launches / matmul calls belong to this site
occurrence of this arm" with one source per question, so a launch seen by two instruments, or
a pass folder's repeat of an arm (ncu, nsys, kineto passes), is never counted twice.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from forensics.capture.directory import Capture, load_capture
from forensics import instruments
from forensics.capture.environment import check_environment
from forensics.core.errors import BadInput
from forensics.runtime.inputs import read_json
from forensics.core.kernel_names import kernel_family  # noqa: F401  (re-exported: verdicts, bundle, plots)

#: Launch sources in order of preference for "which kernel ran": the registry's launch counters in
#: order (one CUPTI-family instrument, else ncu; CPU instruments where the registry has them).
LAUNCH_PREFERENCE = instruments.names_of_role(instruments.LAUNCHES)
#: Call logs in order of preference (cuBLASLt over legacy cuBLAS).
CALL_PREFERENCE = instruments.names_of_role(instruments.CALLS)
#: Algo descriptor columns compared across arms: every call log's, from the registry (cuBLASLt's algo
#: id, tile, stages, ...; oneDNN's primitive implementation; oneMKL's routine, CNR mode and threads).
ALGO_COLUMNS = instruments.algo_columns()


@dataclass
class Evidence:
    """What verdicts read. ``analysis`` is the ``forensics.judge.analysis.Analysis`` it came from, if any."""

    manifest: dict[str, Any]
    sites: pd.DataFrame  # one row per occurrence of the arm's own folder: arm rank seq label site ... in_key out_key
    launches: pd.DataFrame  # LAUNCH_COLUMNS (+ folder, family)
    calls: pd.DataFrame  # cuBLASLt/cuBLAS calls with site_label
    environments: dict[str, dict[str, Any]] = field(default_factory=dict)  # arm -> environment.json
    capture: Capture | None = None
    analysis: Any = None

    _index: dict[str, dict] = field(default_factory=dict, repr=False)

    def launch_rows(self, arm: str, rank: int, label: str) -> list[dict[str, Any]]:
        """Launches of one occurrence from ONE source (see :data:`LAUNCH_PREFERENCE`), launch order."""
        return self._rows("launches", arm, rank, label, LAUNCH_PREFERENCE)

    def call_rows(self, arm: str, rank: int, label: str) -> list[dict[str, Any]]:
        """Matmul calls of one occurrence from one log (cuBLASLt over legacy cuBLAS), host order."""
        return self._rows("calls", arm, rank, label, CALL_PREFERENCE)

    def occurrence_launches(self, arm: str, rank: int, label: str) -> pd.DataFrame:
        """:meth:`launch_rows` as a frame."""
        return pd.DataFrame(self.launch_rows(arm, rank, label), columns=self._columns("launches"))

    def occurrence_calls(self, arm: str, rank: int, label: str) -> pd.DataFrame:
        """:meth:`call_rows` as a frame."""
        return pd.DataFrame(self.call_rows(arm, rank, label), columns=self._columns("calls"))

    def _columns(self, kind: str) -> list[str]:
        df = getattr(self, kind)
        return [c for c in (df.columns if df is not None else []) if c in _SLIM]

    def _rows(self, kind: str, arm: str, rank: int, label: str, preference: tuple[str, ...]) -> list[dict[str, Any]]:
        """One occurrence's rows of ``kind``; the frame is split once into plain records and cached."""
        if kind not in self._index:
            df = getattr(self, kind)
            groups: dict[tuple, list[dict[str, Any]]] = {}
            if df is not None and not df.empty and "site_label" in df.columns:
                slim = df.loc[df["site_label"].notna(), self._columns(kind)]
                for rec in slim.to_dict("records"):
                    if missing(rec.get("rank")):
                        continue
                    groups.setdefault((rec["arm"], int(rec["rank"]), str(rec["site_label"])), []).append(rec)
            self._index[kind] = {key: one_source(rows, key[0], preference) for key, rows in groups.items()}
        return self._index[kind].get((arm, int(rank), str(label)), [])


#: Columns verdicts and bundles read from launch and call frames (the rest stay in the full frames).
_SLIM = {"instrument", "folder", "file", "line", "arm", "rank", "pid", "site_label", "kernel", "mangled",
         "short_name", "grid", "block", "start_ns", "end_ns", "correlation_id", "external_id", "m", "n", "k",
         "transa", "transb", "layout", "a_type", "b_type", "c_type", "d_type", "compute_type", "scale_type",
         "epilogue", "beta", "raw", "lda", "ldb", "ldc", "ldd", "algo_id", "tile", "stages", "custom_option",
         "num_splits_k", "reduction_scheme", "cta_swizzling", "cluster_shape", "scheduling_mode", "inner_shape",
         "tid", "input_dims", "problem_desc", "attributed_by", *ALGO_COLUMNS,
         "alpha", "bench"}  # hipBLASLt/rocBLAS: the scalars, and the bench line that replays the call (repro.py)


def missing(v: Any) -> bool:
    """None, NaN or pd.NA."""
    return v is None or v is pd.NA or (isinstance(v, float) and v != v)


def one_source(rows: list[dict[str, Any]], arm: str, preference: tuple[str, ...]) -> list[dict[str, Any]]:
    """Rows of the most preferred instrument present, from one folder (the arm's own first), in order."""
    if not rows:
        return rows
    present = [i for i in preference if any(r.get("instrument") == i for r in rows)]
    if present:
        rows = [r for r in rows if r.get("instrument") == present[0]]
    folders = list(dict.fromkeys(str(r.get("folder")) for r in rows if not missing(r.get("folder"))))
    if folders:
        keep = arm if arm in folders else folders[0]
        rows = [r for r in rows if str(r.get("folder")) == keep]
    for col in ("start_ns", "line"):
        if all(not missing(r.get(col)) for r in rows):
            return sorted(rows, key=lambda r: r[col])
    return rows


def load_evidence(capture: str | Path | Capture) -> Evidence:
    """Analyse a capture directory (``forensics.judge.analysis.analyze``) and wrap the result."""
    from forensics.judge.analysis import analyze  # noqa: PLC0415

    cap = capture if isinstance(capture, Capture) else load_capture(capture)
    return from_analysis(analyze(cap))


def from_analysis(analysis: Any) -> Evidence:
    """Wrap a ``forensics.judge.analysis.Analysis`` (duck-typed: capture, sites, launches, calls)."""
    cap = getattr(analysis, "capture", None)
    return Evidence(manifest=(cap.manifest if cap is not None else {}) or {},
                    sites=own_sites(getattr(analysis, "sites", pd.DataFrame())),
                    launches=getattr(analysis, "launches", pd.DataFrame()),
                    calls=getattr(analysis, "calls", pd.DataFrame()),
                    environments=read_environments(cap), capture=cap, analysis=analysis)


SITE_COLUMNS = ["arm", "rank", "seq", "label", "site", "occurrence", "iteration", "external_id",
                "in_key", "out_key", "in_okey", "out_okey", "in_digests", "out_digests", "meta"]


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
        data = read_json(f.path, what="environment.json")  # strict: UTF-8, no NaN, bounded depth
        check_environment(data, f.path)  # wrong-typed versions are bad input, not a comparability difference
        envs[arm] = data
    return envs


