"""The Python API: what the commands compute, as result objects a notebook or a CI script reads.

Each function calls the library function its command calls (``forensics analyze`` ->
:func:`forensics.judge.shards.analyze_ranks`, ``diff`` -> :func:`forensics.tracediff.shards.diff_ranks`,
``compare`` -> :func:`forensics.judge.verdicts.compare_arms` and friends, ``knob`` ->
:func:`forensics.knobs.scan` and :func:`forensics.knobs.scope.assess`), so a verdict read here is
the verdict the command prints. Nothing here prints or writes a file; each result has
``to_frame()`` (a pandas DataFrame) and ``to_json()`` (the command's ``--json`` payload, or the
analysis.json one). docs/api.md shows a session.

    >>> import forensics
    >>> an = forensics.analyze("tests/fixtures/cpu/conv1d-threads")
    >>> an.verdict
    'verdict: 2 implementation(s) NAMED'
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

PathLike = str | Path

__all__ = ["AnalysisResult", "CaptureData", "CompareResult", "DiffResult", "KnobResult", "analyze", "compare",
           "diff", "knob", "load_capture", "load_trace"]


# --------------------------------------------------------------------------- captures

@dataclass
class CaptureData:
    """What a capture directory's instrument files hold, read and attributed to site occurrences
    (no verdict yet: :func:`analyze` applies the two-instrument rule)."""

    path: Path
    arms: list[str]
    instruments: list[str]
    #: one row per kernel (GPU) or implementation op (CPU) launch, every instrument: ``instrument``,
    #: ``arm``, ``rank``, ``kernel``, ``short_name``, ``grid``, ``block``, ``site_label``, ...
    launches: pd.DataFrame
    #: one row per library call (cuBLASLt/cuBLAS, oneDNN, oneMKL) with its descriptors: ``routine``,
    #: ``transa``/``transb``, ``m``/``n``/``k``, ``a_type``, ``implementation``, ``site_label``, ...
    calls: pd.DataFrame
    #: one row per site occurrence (sites.jsonl): ``label`` (``SITE#N``), ``arm``, ``rank``, digests
    occurrences: pd.DataFrame
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def launches_by_instrument(self) -> dict[str, pd.DataFrame]:
        """``{instrument: its launches}``: each instrument's own count, side by side."""
        if self.launches.empty:
            return {}
        return {str(k): g.reset_index(drop=True) for k, g in self.launches.groupby("instrument", sort=True)}

    def to_frame(self, what: str = "launches") -> pd.DataFrame:
        """``launches``, ``calls`` or ``occurrences``."""
        return _pick(self, what, ("launches", "calls", "occurrences"))

    def to_json(self) -> dict[str, Any]:
        return {"capture": str(self.path), "arms": self.arms, "instruments": self.instruments,
                "missing": self.missing, "notes": self.notes, "launches": _rows(self.launches),
                "calls": _rows(self.calls), "occurrences": _rows(self.occurrences)}


def load_capture(path: PathLike, keep_going: bool = False) -> CaptureData:
    """Read a capture directory (``forensics kernel``'s output, or nsys/ncu exports with a manifest).

    Bad input raises :class:`forensics.core.errors.BadInput` (one line naming the file and line).
    """
    from forensics.capture.directory import load_capture as _load  # noqa: PLC0415
    from forensics.judge.analysis import load  # noqa: PLC0415

    path = _path("path", path)
    _flag("keep_going", keep_going)
    cap = _load(path)
    notes: list[str] = []
    launches, calls, sites = load(cap, keep_going=keep_going, notes=notes)
    return CaptureData(Path(path), list(cap.arms), sorted(cap.instruments()), launches, calls, sites,
                       list(cap.missing), notes)


# --------------------------------------------------------------------------- analyze

@dataclass
class AnalysisResult:
    """``forensics analyze``: launches counted per instrument family, the two-instrument rule."""

    #: the library's :class:`forensics.judge.analysis.Analysis` (every frame, the capture)
    analysis: Any

    @property
    def verdicts(self) -> pd.DataFrame:
        """One row per (arm, rank, scope, kernel): ``verdict`` (NAMED / DISAGREE / SINGLE-SOURCE),
        ``counts`` per family, ``sources`` (which instrument of each family), ``reason`` (the
        evidence in words), ``library`` (CPU: the library call the log names)."""
        return self.analysis.verdicts

    @property
    def counts(self) -> pd.DataFrame:
        """Launch counts per (arm, rank, scope, kernel), one column per instrument."""
        return self.analysis.counts

    @property
    def launches(self) -> pd.DataFrame:
        return self.analysis.launches

    @property
    def calls(self) -> pd.DataFrame:
        return self.analysis.calls

    @property
    def occurrences(self) -> pd.DataFrame:
        return self.analysis.sites

    @property
    def named(self) -> pd.DataFrame:
        return self.analysis.named

    @property
    def missing(self) -> list[str]:
        return list(self.analysis.missing)

    @property
    def verdict(self) -> str:
        """The command's closing line, e.g. ``verdict: 2 implementation(s) NAMED``."""
        from forensics.judge.report import verdict_line  # noqa: PLC0415

        return verdict_line(self.analysis)

    @property
    def exit_code(self) -> int:
        """What ``forensics analyze`` exits with: 0 something NAMED, 1 nothing NAMED."""
        from forensics.core.errors import EXIT_NOT_NAMED, EXIT_OK  # noqa: PLC0415

        return EXIT_OK if self.analysis.any_named() else EXIT_NOT_NAMED

    def to_frame(self, what: str = "verdicts") -> pd.DataFrame:
        """``verdicts``, ``counts``, ``launches``, ``calls`` or ``occurrences``."""
        return _pick(self, what, ("verdicts", "counts", "launches", "calls", "occurrences"))

    def to_json(self) -> dict[str, Any]:
        """What analysis.json holds (``schema``/``version`` first: docs/formats/analysis.md)."""
        from forensics.judge.report import analysis_json  # noqa: PLC0415

        return analysis_json(self.analysis)


def analyze(path: PathLike, site: str | None = None, *, ranks: str | None = None, shard: str | None = None,
            keep_going: bool = False, jobs: int = 1) -> AnalysisResult:
    """Analyse a capture directory as ``forensics analyze PATH`` does (``jobs=1``: no worker
    processes; ``0``: one per core)."""
    from forensics.judge.shards import analyze_ranks  # noqa: PLC0415

    path = _path("path", path)
    _opt_str("site", site)
    _opt_str("ranks", ranks)
    _opt_str("shard", shard)
    _flag("keep_going", keep_going)
    _count("jobs", jobs)
    if site:  # as the command: a site the capture never recorded raises UnknownName (exit 2)
        from forensics.commands.suggest import check_site_in_capture  # noqa: PLC0415

        check_site_in_capture(path, site)
    return AnalysisResult(analyze_ranks(path, site=site, keep_going=keep_going, jobs=jobs, ranks=ranks, shard=shard))


# --------------------------------------------------------------------------- diff

@dataclass
class DiffResult:
    """``forensics diff``: the first divergent record per rank, the pattern, the site."""

    #: the library's :class:`forensics.tracediff.diff.DiffReport`
    report: Any

    @property
    def diverged(self) -> bool:
        return bool(self.report.diverged)

    @property
    def site(self) -> str | None:
        """The site ``forensics kernel --site`` takes next (``SITE#N``), or None."""
        r = self.report
        return None if r.site is None else (f"{r.site}#{r.occurrence}" if r.occurrence else r.site)

    @property
    def pattern(self) -> str:
        return self.report.pattern

    @property
    def warnings(self) -> list[str]:
        return list(self.report.warnings)

    @property
    def exit_code(self) -> int:
        from forensics.core.errors import EXIT_NOT_NAMED, EXIT_OK  # noqa: PLC0415

        return EXIT_NOT_NAMED if self.diverged else EXIT_OK

    def text(self) -> str:
        """The command's printed report."""
        from forensics.tracediff.diff import format_report  # noqa: PLC0415

        return format_report(self.report)

    def to_frame(self) -> pd.DataFrame:
        """One row per compared rank: ``verdict`` (ORIGIN / RECEIVER / INPUTS_UNKNOWN /
        CONTROL_FLOW, None when no divergence), ``identity``, ``evidence`` (proven / unproven),
        ``input_evidence`` (what an unproven verdict lacks), ``site``, ``step``, ``records_compared``."""
        rows = []
        for rank, res in sorted(self.report.ranks.items()):
            d = res.first_divergence
            rows.append({"rank": rank, "verdict": d.verdict if d else None, "identity": d.identity if d else None,
                         "evidence": d.evidence if d else None,
                         "input_evidence": getattr(d, "input_evidence", None) if d else None,
                         "site": getattr(d, "site", None) if d else None, "step": getattr(d, "step", None) if d else None,
                         "records_compared": res.records_compared, "artifacts": res.artifacts_total,
                         "weak_matches": res.unproven_matches})
        return pd.DataFrame(rows)

    def to_json(self) -> dict[str, Any]:
        """What ``forensics diff --json`` writes."""
        return self.report.to_json()


def diff(a: PathLike, b: PathLike, *, fmt: str = "auto", rank: int | None = None, ranks: str | None = None,
         window: int | None = None, jobs: int = 1) -> DiffResult:
    """Diff two op-level traces as ``forensics diff A B`` does (any reader: native, DebugMode,
    Megatron; ``fmt='auto'`` detects it)."""
    from forensics.tracediff.diff import WINDOW, diff_paths  # noqa: PLC0415
    from forensics.tracediff.shards import diff_ranks  # noqa: PLC0415

    a, b = _path("a", a), _path("b", b)
    if not isinstance(fmt, str):
        raise _arg_error("fmt", "a format name (str)", fmt)
    _count("rank", rank, optional=True)
    _opt_str("ranks", ranks)
    _count("window", window, low=256, optional=True)
    _count("jobs", jobs)
    window = WINDOW if window is None else window
    if rank is not None:
        return DiffResult(diff_paths(Path(a), Path(b), fmt=fmt, rank=rank, window=window))
    return DiffResult(diff_ranks(Path(a), Path(b), fmt=fmt, window=window, jobs=jobs, ranks=ranks))


def load_trace(path: PathLike, fmt: str = "auto") -> pd.DataFrame:
    """The records of an op-level trace, one row each: ``rank``, ``seq``, ``identity``, ``name``,
    ``step``, ``phase``, ``site``, ``inputs``/``outputs`` (tensor count), ``evidence`` (the weakest
    digest kind of its tensors), ``source`` (file:line)."""
    from forensics.tracediff.diff import resolve_reader  # noqa: PLC0415
    from forensics.tracediff.divergence import site_of  # noqa: PLC0415

    path = _path("path", path)
    if not isinstance(fmt, str):
        raise _arg_error("fmt", "a format name (str)", fmt)
    _, reader = resolve_reader(path, path, fmt)
    trace = reader.read(path)
    order = ("full", "sampled", "summary", "metadata")
    rows = []
    for rank, recs in sorted(trace.ranks.items()):
        for r in recs:
            kinds = [t.evidence for t in (*r.inputs, *r.outputs) if t is not None]
            rows.append({"rank": rank, "seq": r.seq, "identity": r.identity, "name": r.name, "step": r.step,
                         "phase": r.phase, "site": site_of(r), "inputs": len(r.inputs), "outputs": len(r.outputs),
                         "evidence": max(kinds, key=order.index) if kinds else None, "source": r.source})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- compare

@dataclass
class CompareResult:
    """``forensics compare``: every arm against the baseline, the discriminator table, toggles."""

    comparison: Any  # forensics.judge.verdicts.ArmComparison
    discriminator: Any  # DiscriminatorTable
    toggles: Any  # ToggleReport

    @property
    def baseline(self) -> str | None:
        return self.comparison.baseline

    @property
    def diverged(self) -> bool:
        return bool(self.comparison.diverged())

    @property
    def exit_code(self) -> int:
        from forensics.core.errors import EXIT_NOT_NAMED, EXIT_OK  # noqa: PLC0415

        return EXIT_NOT_NAMED if self.diverged else EXIT_OK

    def summary(self) -> dict[str, dict[str, int]]:
        """``{arm: {classification: occurrences}}`` (IDENTICAL, SELECTION DIFFERS, ...)."""
        return {p.arm: p.counts() for p in self.comparison.pairs}

    def toggle_lines(self) -> list[str]:
        """The command's ``toggle ...`` lines (kernel, algo and bits CHANGED or not, per knob)."""
        return [r.summary() for r in self.toggles.results]

    def to_frame(self) -> pd.DataFrame:
        """One row per (arm, occurrence): ``arm``, ``toggle``, ``comparable``, then the occurrence
        columns (``label``, ``classification``, ``inputs_match``, ``bits_differ``,
        ``kernel_baseline``/``kernel_arm``, ``algo_baseline``/``algo_arm``, ``detail``, ...)."""
        frames = []
        for p in self.comparison.pairs:
            occ = p.occurrences.copy()
            occ.insert(0, "comparable", p.comparable)
            occ.insert(0, "toggle", ", ".join(f"{k}={v}" for k, v in p.toggle.items()) or None)
            occ.insert(0, "arm", p.arm)
            frames.append(occ)
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def to_json(self) -> dict[str, Any]:
        """What ``forensics compare --json`` writes (docs/formats/compare.md)."""
        from forensics.judge.report import compare_json  # noqa: PLC0415

        return compare_json(self.comparison, self.discriminator, self.toggles,
                            getattr(self, "losses", None))


def compare(path: PathLike, site: str | None = None, *, force: bool = False) -> CompareResult:
    """Compare a capture's arms as ``forensics compare PATH`` does."""
    from forensics.core.errors import BadInput  # noqa: PLC0415
    from forensics.judge.arm_evidence import load_evidence  # noqa: PLC0415
    from forensics.judge.verdicts import compare_arms, discriminator_table, toggle_report  # noqa: PLC0415

    path = _path("path", path)
    _opt_str("site", site)
    _flag("force", force)
    if site:
        from forensics.commands.suggest import check_site_in_capture  # noqa: PLC0415

        check_site_in_capture(path, site)
    ev = load_evidence(path)
    if ev.sites.empty:
        raise BadInput(path, "no site records (sites.jsonl) in this capture: arms cannot be compared "
                             "occurrence by occurrence (capture with `forensics kernel`)")
    return CompareResult(compare_arms(ev, site=site, force=force), discriminator_table(ev, site=site),
                         toggle_report(ev, site=site))


# --------------------------------------------------------------------------- knob

@dataclass
class KnobResult:
    """``forensics knob`` (static scope): who reads the knob, and whether it reaches a site."""

    report: Any  # forensics.knobs.report.KnobReport

    @property
    def verdict(self) -> str | None:
        """ON PATH / NOT ON PATH / CANNOT TELL STATICALLY / UNKNOWN for the site (None: no site)."""
        return self.report.scope.verdict if self.report.scope else None

    @property
    def catalogued(self) -> bool:
        return self.report.entry is not None

    def to_frame(self) -> pd.DataFrame:
        """One row per Python finding: ``kind`` (read / write / unresolved / mention), ``file``,
        ``line``, ... (shared libraries holding the name: ``to_json()['libraries']``)."""
        from dataclasses import asdict  # noqa: PLC0415

        return pd.DataFrame([asdict(f) for f in self.report.scan.findings()])

    def to_json(self) -> dict[str, Any]:
        """What ``forensics knob --json`` writes."""
        from forensics.knobs.report import to_json  # noqa: PLC0415

        return to_json(self.report)


def knob(name: str, site: str | None = None, *, paths: list[PathLike] | None = None, device: str = "auto",
         use_cache: bool = True, workers: int | None = None, uncatalogued: bool = False) -> KnobResult:
    """Static scope of an environment knob as ``forensics knob NAME [--site S]`` computes it
    (default paths: this Python's site-packages). A name one typo away from a catalogued knob raises
    :class:`forensics.commands.suggest.UnknownName` unless ``uncatalogued=True``."""
    from forensics.knobs import check_knob_name, scan  # noqa: PLC0415
    from forensics.knobs.catalog import load_catalog, lookup  # noqa: PLC0415
    from forensics.knobs.report import KnobReport  # noqa: PLC0415
    from forensics.knobs.scope import assess, choose_device  # noqa: PLC0415
    from forensics.core.site import parse_site_or_occurrence  # noqa: PLC0415
    from forensics.commands.suggest import check_knob_typo  # noqa: PLC0415

    if not isinstance(name, str):
        raise _arg_error("name", "a knob name (str)", name)
    _opt_str("site", site)
    if paths is not None:  # one string is one path, never its characters
        if isinstance(paths, (str, bytes)) or not isinstance(paths, (list, tuple)):
            raise _arg_error("paths", "a list of paths (paths=['dir'], not paths='dir')", paths)
        paths = [_path("paths[]", x) for x in paths]
    if not isinstance(device, str):
        raise _arg_error("device", "'auto', 'cuda', 'rocm' or 'cpu'", device)
    _flag("use_cache", use_cache)
    _flag("uncatalogued", uncatalogued)
    _count("workers", workers, low=1, optional=True)
    check_knob_name(name)
    if not uncatalogued:
        check_knob_typo(name, load_catalog())
    parsed = None
    if site:
        _check_site(site)
        parsed = parse_site_or_occurrence(site)
    result = scan(name, [str(p) for p in paths] if paths else None, use_cache=use_cache, workers=workers)
    report = KnobReport(name, result, lookup(name))
    if parsed is not None:
        chosen, why = choose_device(parsed, result, None if device == "auto" else device)
        report.scope = assess(result, parsed, report.entry, device=chosen)
        report.scope.device_note = why
    return KnobResult(report)


# --------------------------------------------------------------------------- typed borders

def _arg_error(name: str, want: str, value: Any) -> Exception:
    from forensics.core.errors import BadArgument  # noqa: PLC0415

    return BadArgument(f"{name}: expected {want}, got {type(value).__name__} {value!r:.60}")


def _path(name: str, value: Any) -> Path:
    """A path argument: str or os.PathLike (not bytes, not a list)."""
    import os  # noqa: PLC0415

    if isinstance(value, bool) or not isinstance(value, (str, os.PathLike)) or (isinstance(value, str) and not value):
        raise _arg_error(name, "a path (str or os.PathLike)", value)
    return Path(value)


def _opt_str(name: str, value: Any) -> None:
    if value is not None and not isinstance(value, str):
        raise _arg_error(name, "a string or None", value)


def _flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):  # keep_going='no' would switch it on
        raise _arg_error(name, "True or False", value)


def _count(name: str, value: Any, *, low: int = 0, optional: bool = False) -> None:
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _arg_error(name, f"an integer >= {low}" + (" or None" if optional else ""), value)


# --------------------------------------------------------------------------- helpers

def _check_site(site: str) -> None:
    from forensics.commands.suggest import check_site_text  # noqa: PLC0415

    check_site_text(site)


def _pick(obj: Any, what: str, names: tuple[str, ...]) -> pd.DataFrame:
    if what not in names:
        raise ValueError(f"{what!r}: choose one of {', '.join(names)}")
    return getattr(obj, what)


def _rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    import json  # noqa: PLC0415

    return json.loads(df.to_json(orient="records", default_handler=str)) if len(df) else []
